// bench/support/synthetic.hpp — deterministic ImageNet-like file sets for demos and benchmarks.
#ifndef CONVEYOR_BENCH_SUPPORT_SYNTHETIC_HPP
#define CONVEYOR_BENCH_SUPPORT_SYNTHETIC_HPP

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

namespace conveyor::detail {
class splitmix64; // conveyor/core/stages.hpp, which a caller of synthetic_files::rng includes
} // namespace conveyor::detail

namespace conveyor::bench {

/** A synthetic file set: `count` files with lognormal sizes (mean `mean_bytes`, clamped to
    [1 KiB, 4 MiB], like ImageNet's JPEGs), spread over `classes` class directories
    (`n00000000/img_00000001.JPEG`, ...), with incompressible pseudo-random content.
    Every size and byte depends only on (seed, file number), on every machine, so sets of
    different counts agree on the files they share. */
struct synthetic_files {
    std::filesystem::path dir;
    std::uint64_t count = 20000;
    std::uint64_t seed = 1;
    std::uint64_t classes = 100;
    double mean_bytes = 110e3;
    double sigma = 0.6;

    /// The generator of file `i` (1-based) for a stream `salt` (sizes and contents differ).
    conveyor::detail::splitmix64 rng(std::uint64_t i, std::uint64_t salt = 0) const;

    /// Size of file `i`: lognormal with mu = ln(mean) - sigma^2 / 2, so the mean is `mean_bytes`.
    std::uint64_t size(std::uint64_t i) const;

    /// Path of file `i` relative to `dir`: classes in turn.
    std::string name(std::uint64_t i) const;
};

/// What `generate` did.
struct generate_report {
    std::uint64_t files = 0;         ///< files in the set
    std::uint64_t written = 0;       ///< files written now (the others were already there)
    std::uint64_t bytes = 0;         ///< bytes in the set
    std::uint64_t written_bytes = 0; ///< bytes written now
};

/** Creates the files of `set` that are missing or have the wrong size (so re-running is
    cheap). `progress(done, bytes)` is called after each file. Throws `conveyor::error`
    naming the path on failure. */
generate_report generate(const synthetic_files& set,
                                       const std::function<void(std::uint64_t, std::uint64_t)>& progress = {});

} // namespace conveyor::bench

#endif
