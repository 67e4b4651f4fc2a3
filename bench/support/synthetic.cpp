// bench/support/synthetic.cpp — synthetic file sets (see synthetic.hpp).
#include "support/synthetic.hpp"

#include <conveyor/core/error.hpp>
#include <conveyor/core/stages.hpp> // detail::splitmix64

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <numbers>
#include <system_error>
#include <vector>

namespace conveyor::bench {

conveyor::detail::splitmix64 synthetic_files::rng(std::uint64_t i, std::uint64_t salt) const
{
    conveyor::detail::splitmix64 r((seed ^ salt) ^ (i * 0xd1342543de82ef95ULL));
    r();
    return r;
}

std::uint64_t synthetic_files::size(std::uint64_t i) const
{
    auto r = rng(i);
    const double u1 = r.unit(), u2 = r.unit();
    const double normal = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2); // Box-Muller
    const double mu = std::log(mean_bytes) - sigma * sigma / 2.0;
    return static_cast<std::uint64_t>(std::clamp(std::exp(mu + sigma * normal), 1024.0, 4194304.0));
}

std::string synthetic_files::name(std::uint64_t i) const
{
    char buf[64];
    std::snprintf(buf, sizeof buf, "n%08llu/img_%08llu.JPEG", static_cast<unsigned long long>((i - 1) % classes),
                  static_cast<unsigned long long>(i));
    return buf;
}

generate_report generate(const synthetic_files& set,
                                       const std::function<void(std::uint64_t, std::uint64_t)>& progress)
{
    namespace fs = std::filesystem;
    if (set.classes == 0)
        throw conveyor::error(make_error_code(errc::invalid_argument), {.detail = "a synthetic set needs at least one class"});
    constexpr std::uint64_t content_salt = 0x636f6e74656e7473ULL; // "contents"
    generate_report rep;
    rep.files = set.count;
    std::vector<std::uint64_t> words;
    for (std::uint64_t i = 1; i <= set.count; ++i) {
        const std::uint64_t size = set.size(i);
        rep.bytes += size;
        const fs::path path = set.dir / set.name(i);
        std::error_code ec;
        if (fs::file_size(path, ec) != size || ec) {
            fs::create_directories(path.parent_path(), ec);
            auto r = set.rng(i, content_salt);
            words.resize((size + 7) / 8);
            for (auto& w : words) w = r();
            const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
            if (fd < 0)
                throw conveyor::error(std::error_code(errno, std::system_category()), {.where = path.string(), .detail = "cannot create"});
            const auto* p = reinterpret_cast<const char*>(words.data());
            for (std::uint64_t off = 0; off < size;) {
                const ssize_t n = ::write(fd, p + off, size - off);
                if (n < 0 && errno == EINTR) continue;
                if (n < 0) {
                    const int e = errno;
                    ::close(fd);
                    throw conveyor::error(std::error_code(e, std::system_category()), {.where = path.string(), .detail = "cannot write"});
                }
                off += static_cast<std::uint64_t>(n);
            }
            ::close(fd);
            ++rep.written;
            rep.written_bytes += size;
        }
        if (progress) progress(i, rep.bytes);
    }
    return rep;
}

} // namespace conveyor::bench
