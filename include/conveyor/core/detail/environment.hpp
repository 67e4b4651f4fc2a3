// conveyor/core/detail/environment.hpp — numbers that launchers put in the environment
// (RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, SLURM_*, OMPI_COMM_WORLD_*), read one way.
// Included by the .ipp files that read them (the split from the environment, the ranks on
// this node), not by public headers.
#ifndef CONVEYOR_CORE_DETAIL_ENVIRONMENT_HPP
#define CONVEYOR_CORE_DETAIL_ENVIRONMENT_HPP

#include <conveyor/core/error.hpp>

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

namespace conveyor::detail {

/// Throws `conveyor::error` (`errc::invalid_argument`) from `stage`, saying `what`.
[[noreturn]] inline void bad_environment(std::string_view stage, std::string what)
{
    throw error(make_error_code(conveyor::errc::invalid_argument), {.stage = std::string(stage), .detail = std::move(what)});
}

/// `s` without the blanks (spaces, tabs, a newline) a shell or a job script may leave around it.
constexpr std::string_view trim_blanks(std::string_view s) noexcept
{
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) s.remove_suffix(1);
    return s;
}

/** The whole number in the environment variable `name` (blanks around it allowed), or
    nullopt when it is not set. A value that is not a whole number is an error from `stage`
    that names the variable and quotes its value. */
inline std::optional<std::uint64_t> env_number(const char* name, std::string_view stage)
{
    const char* s = std::getenv(name);
    if (!s) return std::nullopt;
    const std::string_view t = trim_blanks(s);
    std::uint64_t v = 0;
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || ec != std::errc{} || p != t.data() + t.size())
        bad_environment(stage, std::string(name) + "=\"" + printable(s) + "\" is not a whole number");
    return v;
}

} // namespace conveyor::detail

#endif
