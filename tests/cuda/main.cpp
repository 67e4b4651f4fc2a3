// The CUDA tests' main: without a usable device, the "gpu" suite is left out, and it says so.
#define DOCTEST_CONFIG_IMPLEMENT
#include <conveyor/cuda/device.hpp>

#include <doctest/doctest.h>

#include <cstdio>

int main(int argc, char** argv)
{
    doctest::Context ctx;
    ctx.applyCommandLine(argc, argv);
    const auto a = conveyor::cuda::devices();
    if (a.devices == 0) {
        std::printf("conveyor-cuda-tests: the GPU test cases (suite \"gpu\") are skipped for want of a device: %s\n",
                    a.reason.c_str());
        ctx.addFilter("test-suite-exclude", "gpu");
    } else {
        std::printf("conveyor-cuda-tests: %d CUDA device(s)\n", a.devices);
    }
    return ctx.run();
}
