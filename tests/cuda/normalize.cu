// The normalize kernel (conveyor/cuda/normalize.cuh) against the same arithmetic on the CPU,
// in float and half. Built with nvcc wherever the toolkit is; exits 77 (skipped) without a GPU.
#include <conveyor/cuda/normalize.cuh>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main()
{
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("conveyor-cuda-normalize: skipped for want of a CUDA device\n");
        return 77;
    }
    const int n = 3, h = 5, w = 7, c = 3;
    std::vector<std::uint8_t> in(n * h * w * c);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::uint8_t>((i * 37) % 256);
    conveyor::cuda::normalization norm;
    std::uint8_t* d_in = nullptr;
    // The element types come from the dtype mapping, as a caller holding an image batch's
    // `dtype` would name them.
    conveyor::cuda::device_element_t<conveyor::image::dtype::float32>* d_out = nullptr;
    conveyor::cuda::device_element_t<conveyor::image::dtype::float16>* d_half = nullptr;
    cudaMalloc(&d_in, in.size());
    cudaMalloc(&d_out, in.size() * sizeof(float));
    cudaMalloc(&d_half, in.size() * sizeof(__half));
    cudaMemcpy(d_in, in.data(), in.size(), cudaMemcpyHostToDevice);
    if (conveyor::cuda::normalize_async(d_in, d_out, n, h, w, c, norm, nullptr) != cudaSuccess ||
        conveyor::cuda::normalize_async(d_in, d_half, n, h, w, c, norm, nullptr) != cudaSuccess) {
        std::printf("conveyor-cuda-normalize: launch failed\n");
        return 1;
    }
    std::vector<float> out(in.size());
    std::vector<__half> half(in.size());
    cudaMemcpy(out.data(), d_out, out.size() * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(half.data(), d_half, half.size() * sizeof(__half), cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int b = 0; b < n; ++b)
        for (int ch = 0; ch < c; ++ch)
            for (int y = 0; y < h; ++y)
                for (int x = 0; x < w; ++x) {
                    const float want = (in[((b * h + y) * w + x) * c + ch] / 255.0f - norm.mean[ch]) / norm.std[ch];
                    const std::size_t i = ((static_cast<std::size_t>(b) * c + ch) * h + y) * w + x;
                    if (std::abs(out[i] - want) > 1e-5f) ++bad;
                    if (std::abs(__half2float(half[i]) - want) > 2e-3f * (1 + std::abs(want))) ++bad;
                }
    cudaFree(d_in);
    cudaFree(d_out);
    cudaFree(d_half);
    std::printf("conveyor-cuda-normalize: %d of %zu values wrong\n", bad, 2 * in.size());
    return bad == 0 ? 0 : 1;
}
