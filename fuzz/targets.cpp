// fuzz/targets.cpp — the registry of fuzz targets and their shared helpers.
#include "targets.hpp"

#include <conveyor/core/buffer.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <algorithm>
#include <string>
#include <string_view>

namespace conveyor::fuzz {

std::span<const target> all_targets()
{
    static constexpr std::array<target, 13> list{{
        {"tar", &tar},
        {"tar_gzip", &tar_gzip},
        {"samples", &samples},
        {"index_json", &index_json},
        {"sigv4", &sigv4},
        {"s3_xml", &s3_xml},
        {"aws_config", &aws_config},
        {"labels", &labels},
        {"jpeg", &image},
        {"png", &image},
        {"webp", &image},
        {"avif", &image},
        {"http_response", &http_response},
    }};
    return list;
}

void check(bool ok, std::string_view what)
{
    if (ok) return;
    std::fprintf(stderr, "fuzz: invariant broken: %.*s\n", static_cast<int>(what.size()), what.data());
    std::abort();
}

std::uint64_t hash_of(input in) noexcept
{
    std::uint64_t h = 14695981039346656037ull;
    for (auto b : in) {
        h ^= b;
        h *= 1099511628211ull;
    }
    return h;
}

void check_message(const std::exception& e)
{
    const std::string_view w = e.what();
    check(!w.empty(), "an error without a message");
    for (unsigned char c : w)
        check(c >= 0x20 && c != 0x7f, "an error message holds a raw control character");
}

slice tail_slice(input in)
{
    static buffer_pool pool(0); // keeps nothing idle: every buffer is a fresh allocation
    buffer b = pool.acquire(std::max<std::size_t>(in.size(), 1));
    const std::size_t cap = b.capacity();
    b.resize(cap);
    if (!in.empty()) std::memcpy(b.data() + (cap - in.size()), in.data(), in.size());
    return slice(std::move(b)).sub(cap - in.size(), in.size());
}

std::string memory_file(int slot, input in)
{
    static std::array<int, 4> fds{-1, -1, -1, -1};
    int& fd = fds.at(static_cast<std::size_t>(slot));
    if (fd < 0) fd = ::memfd_create("conveyor-fuzz", 0);
    check(fd >= 0, "memfd_create failed");
    check(::ftruncate(fd, 0) == 0, "ftruncate failed");
    std::size_t done = 0;
    while (done < in.size()) {
        const auto n = ::pwrite(fd, in.data() + done, in.size() - done, static_cast<off_t>(done));
        check(n > 0, "pwrite failed");
        done += static_cast<std::size_t>(n);
    }
    return "/proc/self/fd/" + std::to_string(fd);
}

} // namespace conveyor::fuzz

#if defined(BOOST_ENABLE_ASSERT_HANDLER)
// The fuzz preset builds with BOOST_ENABLE_ASSERT_HANDLER, so that Boost's assertions stay
// on (the preset is a Debug build) and a failing one is a finding, but for one: Boost
// 1.81's Beast asserts `n >= 5` in basic_parser::parse_chunk_header, where a final chunk
// fed in small pieces may leave 3 bytes; the code after it asks for more input, as it
// should (the assertion was corrected upstream: boostorg/beast pull request 2861).
namespace boost {

void assertion_failed_msg(char const* expr, char const* msg, char const* function, char const* file, long line)
{
    const std::string_view e = expr, f = file;
    if (e == "n >= 5" && f.ends_with("boost/beast/http/impl/basic_parser.ipp")) return;
    std::fprintf(stderr, "fuzz: Boost assertion failed: %s%s%s in %s (%s:%ld)\n", expr, msg ? ": " : "", msg ? msg : "",
                 function, file, line);
    std::abort();
}

void assertion_failed(char const* expr, char const* function, char const* file, long line)
{
    assertion_failed_msg(expr, nullptr, function, file, line);
}

} // namespace boost
#endif
