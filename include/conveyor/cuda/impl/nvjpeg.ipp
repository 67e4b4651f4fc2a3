// conveyor/cuda/impl/nvjpeg.ipp — definitions for conveyor/cuda/nvjpeg.hpp.
#ifndef CONVEYOR_CUDA_IMPL_NVJPEG_IPP
#define CONVEYOR_CUDA_IMPL_NVJPEG_IPP

#include <conveyor/cuda/nvjpeg.hpp>

#include <dlfcn.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace conveyor::cuda {

namespace detail {

CONVEYOR_DECL nvjpeg_library load_nvjpeg(const std::string* candidates, std::size_t n)
{
    nvjpeg_library lib;
    std::string tried;
    void* h = nullptr;
    for (std::size_t i = 0; i < n && !h; ++i) {
        h = ::dlopen(candidates[i].c_str(), RTLD_NOW | RTLD_LOCAL);
        if (h) {
            lib.path = candidates[i];
            break;
        }
        const char* e = ::dlerror();
        if (!tried.empty()) tried += "; ";
        tried += e ? e : candidates[i] + ": not found";
    }
    if (!h) {
        lib.reason = "nvJPEG is not installed where this process can load it (" + tried +
                     "); images are decoded on the CPU. Install the CUDA toolkit's nvJPEG (libnvjpeg) or set "
                     "CONVEYOR_NVJPEG to its path";
        return lib;
    }
    // The file dlopen found, when it was looked for by name.
    char origin[4096] = {};
    if (::dlinfo(h, RTLD_DI_ORIGIN, origin) == 0 && lib.path.find('/') == std::string::npos)
        lib.path = std::string(origin) + "/" + lib.path;
    auto fns = std::make_unique<nvjpeg_api::functions>();
    std::string missing;
#define CONVEYOR_NVJPEG_RESOLVE(name, params)                                                                          \
    fns->name = reinterpret_cast<nvjpeg_api::fn::name>(::dlsym(h, #name));                                             \
    if (!fns->name) missing += (missing.empty() ? "" : ", ") + std::string(#name);
    CONVEYOR_NVJPEG_FUNCTIONS(CONVEYOR_NVJPEG_RESOLVE)
#undef CONVEYOR_NVJPEG_RESOLVE
    if (!missing.empty()) {
        lib.reason = lib.path + " lacks " + missing + " (nvJPEG older than CUDA 11.6?); images are decoded on the CPU";
        ::dlclose(h);
        return lib;
    }
    int v[3] = {};
    for (int i = 0; i < 3; ++i)
        if (fns->nvjpegGetProperty(static_cast<nvjpeg_api::library_property>(i), &v[i]) != nvjpeg_api::status::success) v[i] = -1;
    lib.version = std::to_string(v[0]) + "." + std::to_string(v[1]) + "." + std::to_string(v[2]);
    lib.api = fns.release(); // kept, as the handle is, for the life of the process
    return lib;
}

} // namespace detail

CONVEYOR_DECL const nvjpeg_library& nvjpeg() noexcept
{
    static const nvjpeg_library lib = []() noexcept {
        try {
            std::vector<std::string> c;
            if (const char* e = std::getenv("CONVEYOR_NVJPEG"); e && *e) {
                c.emplace_back(e);
            } else {
                for (const char* name : {"libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so"}) c.emplace_back(name);
                std::vector<std::string> dirs;
                if (const char* p = std::getenv("CUDA_PATH"); p && *p) dirs.push_back(std::string(p) + "/lib64");
                dirs.emplace_back("/usr/local/cuda/lib64");
                for (const auto& d : dirs)
                    for (const char* name : {"libnvjpeg.so.13", "libnvjpeg.so.12"}) c.push_back(d + "/" + name);
            }
            return detail::load_nvjpeg(c.data(), c.size());
        } catch (...) {
            nvjpeg_library l;
            l.reason = "out of memory while looking for nvJPEG";
            return l;
        }
    }();
    return lib;
}

} // namespace conveyor::cuda

#endif
