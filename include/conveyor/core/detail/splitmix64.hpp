// conveyor/core/detail/splitmix64.hpp — the platform-independent generator behind every
// seeded order (shuffle buffers, epoch seeds).
#ifndef CONVEYOR_CORE_DETAIL_SPLITMIX64_HPP
#define CONVEYOR_CORE_DETAIL_SPLITMIX64_HPP

#include <cstdint>

namespace conveyor::detail {

/// SplitMix64: a small, fast generator whose output is the same on every platform (the
/// standard distributions are not), so a seed means the same order everywhere.
class splitmix64 {
public:
    explicit splitmix64(std::uint64_t seed) : s_(seed) {}
    std::uint64_t operator()() noexcept
    {
        std::uint64_t z = (s_ += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    }
    /// Uniform in [0, n) (Lemire's multiply-shift; bias below 2^-32 for n < 2^32).
    std::uint64_t below(std::uint64_t n) noexcept
    {
        __extension__ using u128 = unsigned __int128; // GCC and Clang; quiet under -Wpedantic
        return static_cast<std::uint64_t>((static_cast<u128>((*this)()) * n) >> 64);
    }
    /// Uniform in (0, 1]: never 0, so that log() of it is finite.
    double unit() noexcept { return static_cast<double>((*this)() >> 11) * 0x1p-53 + 0x1p-53; }

private:
    std::uint64_t s_;
};

/// The seed of epoch `epoch` of a shuffle seeded with `seed`.
inline std::uint64_t epoch_seed(std::uint64_t seed, std::uint64_t epoch) noexcept
{
    splitmix64 g(seed ^ (epoch * 0xd1b54a32d192ed03ULL));
    return g();
}

} // namespace conveyor::detail

#endif
