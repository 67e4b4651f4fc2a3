// nvjpeg_loop.cpp — the plain baseline for `conveyor-bench gpu-decode`: a batched nvJPEG loop
// written against NVIDIA's own nvjpeg.h and libnvjpeg, as its documentation shows it, over
// the same JPEGs held in memory: the hardware backend (the NVJPG engines) where the GPU has
// it, else the default one; whole images to planar RGB in device buffers allocated once.
// Not part of conveyor's build (it needs nvjpeg.h): bench/gpu/run.sh compiles it on a GPU host:
//
//     g++ -O2 -std=c++17 nvjpeg_loop.cpp -I$CUDA/include -L$CUDA/lib64 -lnvjpeg -lcudart
//     ./a.out DIR --count 2048 --batch 256 --repeats 5
//
// It prints one JSON line per timed pass, as conveyor-bench does.
#include <cuda_runtime_api.h>
#include <nvjpeg.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#define CHECK_CUDA(x)                                                                                                  \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) {                                                                                       \
            std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                                              \
            std::exit(1);                                                                                              \
        }                                                                                                              \
    } while (0)
#define CHECK_NVJPEG(x)                                                                                                \
    do {                                                                                                               \
        nvjpegStatus_t s_ = (x);                                                                                       \
        if (s_ != NVJPEG_STATUS_SUCCESS) {                                                                             \
            std::fprintf(stderr, "%s: nvJPEG status %d\n", #x, int(s_));                                               \
            std::exit(1);                                                                                              \
        }                                                                                                              \
    } while (0)

int main(int argc, char** argv)
{
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s DIR [--count N] [--batch N] [--repeats N]\n", argv[0]);
        return 2;
    }
    std::string dir = argv[1];
    std::size_t count = 2048, batch = 256, repeats = 5;
    for (int i = 2; i + 1 < argc; i += 2) {
        const std::string k = argv[i];
        const std::size_t v = std::strtoull(argv[i + 1], nullptr, 10);
        if (k == "--count") count = v;
        else if (k == "--batch") batch = v;
        else if (k == "--repeats") repeats = v;
    }
    std::vector<std::filesystem::path> paths;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
        const auto ext = e.path().extension().string();
        if (e.is_regular_file() && (ext == ".jpg" || ext == ".jpeg" || ext == ".JPEG")) paths.push_back(e.path());
    }
    std::sort(paths.begin(), paths.end());
    if (paths.size() > count) paths.resize(count);
    std::vector<std::vector<unsigned char>> jpegs;
    std::size_t bytes = 0;
    for (const auto& p : paths) {
        std::ifstream in(p, std::ios::binary);
        jpegs.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        bytes += jpegs.back().size();
    }
    if (jpegs.empty()) {
        std::fprintf(stderr, "no JPEGs in %s\n", dir.c_str());
        return 2;
    }

    nvjpegHandle_t handle = nullptr;
    const char* backend = "hardware";
    if (nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, nullptr, nullptr, 0, &handle) != NVJPEG_STATUS_SUCCESS) {
        backend = "default";
        CHECK_NVJPEG(nvjpegCreateEx(NVJPEG_BACKEND_DEFAULT, nullptr, nullptr, 0, &handle));
    }
    nvjpegJpegState_t state = nullptr;
    CHECK_NVJPEG(nvjpegJpegStateCreate(handle, &state));
    cudaStream_t stream = nullptr;
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

    // Output planes for every image, allocated once (sizes from the headers).
    std::vector<nvjpegImage_t> out(jpegs.size());
    std::vector<void*> allocations;
    for (std::size_t i = 0; i < jpegs.size(); ++i) {
        int n = 0;
        nvjpegChromaSubsampling_t css;
        int w[NVJPEG_MAX_COMPONENT], h[NVJPEG_MAX_COMPONENT];
        CHECK_NVJPEG(nvjpegGetImageInfo(handle, jpegs[i].data(), jpegs[i].size(), &n, &css, w, h));
        std::memset(&out[i], 0, sizeof(out[i]));
        for (int c = 0; c < 3; ++c) {
            void* p = nullptr;
            CHECK_CUDA(cudaMalloc(&p, std::size_t(w[0]) * h[0]));
            allocations.push_back(p);
            out[i].channel[c] = static_cast<unsigned char*>(p);
            out[i].pitch[c] = std::size_t(w[0]);
        }
    }
    std::vector<const unsigned char*> data(jpegs.size());
    std::vector<std::size_t> lengths(jpegs.size());
    for (std::size_t i = 0; i < jpegs.size(); ++i) {
        data[i] = jpegs[i].data();
        lengths[i] = jpegs[i].size();
    }
    for (std::size_t r = 0; r <= repeats; ++r) { // pass 0 warms up
        const auto t0 = std::chrono::steady_clock::now();
        for (std::size_t at = 0; at < jpegs.size(); at += batch) {
            const std::size_t n = std::min(batch, jpegs.size() - at);
            CHECK_NVJPEG(nvjpegDecodeBatchedInitialize(handle, state, int(n), 1, NVJPEG_OUTPUT_RGB));
            CHECK_NVJPEG(nvjpegDecodeBatched(handle, state, data.data() + at, lengths.data() + at, out.data() + at, stream));
            CHECK_CUDA(cudaStreamSynchronize(stream)); // as a loader must before handing the batch on
        }
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (r == 0) continue;
        std::printf("{\"bench\":\"gpu_decode\",\"engine\":\"nvjpeg-loop\",\"backend\":\"%s\",\"mode\":\"full\",\"repeat\":%zu,"
                    "\"images\":%zu,\"batch\":%zu,\"mb\":%.1f,\"seconds\":%.4f,\"images_per_s\":%.1f}\n",
                    backend, r, jpegs.size(), batch, bytes / 1e6, s, jpegs.size() / s);
    }
    for (void* p : allocations) cudaFree(p);
    nvjpegJpegStateDestroy(state);
    nvjpegDestroy(handle);
    return 0;
}
