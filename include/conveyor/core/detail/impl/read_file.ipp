// conveyor/core/detail/impl/read_file.ipp — definitions for conveyor/core/detail/read_file.hpp.
#ifndef CONVEYOR_CORE_DETAIL_IMPL_READ_FILE_IPP
#define CONVEYOR_CORE_DETAIL_IMPL_READ_FILE_IPP

#include <conveyor/core/detail/read_file.hpp>

#include <algorithm>
#include <cerrno>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace conveyor::detail {

CONVEYOR_DECL std::string over_limit(std::uint64_t size, std::uint64_t limit, std::string_view limit_name)
{
    return "it has " + std::to_string(size) + " bytes, more than the " + std::to_string(limit) + " bytes allowed (" +
           std::string(limit_name) + ")";
}

CONVEYOR_DECL whole_file read_whole_file(const std::filesystem::path& path, std::uint64_t limit, std::string_view limit_name)
{
    whole_file out;
    auto fail = [&](std::error_code ec, std::string why) {
        out.text.clear();
        out.text.shrink_to_fit();
        out.ec = ec;
        out.why = std::move(why);
        return std::move(out);
    };
    auto too_large = [&](std::string why) { return fail(std::make_error_code(std::errc::file_too_large), std::move(why)); };
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fail(std::error_code(errno, std::system_category()), "cannot open it");
    struct fd_closer {
        int fd;
        ~fd_closer() { ::close(fd); }
    } closer{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0) return fail(std::error_code(errno, std::system_category()), "cannot stat it");
    if (S_ISDIR(st.st_mode)) return fail(std::make_error_code(std::errc::is_a_directory), "it is a directory");
    const bool regular = S_ISREG(st.st_mode);
    if (regular && static_cast<std::uint64_t>(st.st_size) > limit) return too_large(over_limit(static_cast<std::uint64_t>(st.st_size), limit, limit_name));
    // A regular file is read to its end (it may have grown since fstat: up to the limit);
    // anything else in steps, until it ends or passes the limit.
    const std::uint64_t most = limit == UINT64_MAX ? limit : limit + 1; // one byte past the limit tells
    std::size_t want = regular ? static_cast<std::size_t>(st.st_size) + 1 : std::size_t{64} << 10;
    for (;;) {
        const std::size_t have = out.text.size();
        want = static_cast<std::size_t>(std::min<std::uint64_t>(std::max(want, have + 1), most));
        out.text.resize(want);
        const ::ssize_t n = ::read(fd, out.text.data() + have, want - have);
        if (n < 0) {
            if (errno == EINTR) {
                out.text.resize(have);
                continue;
            }
            return fail(std::error_code(errno, std::system_category()), "cannot read it");
        }
        out.text.resize(have + static_cast<std::size_t>(n));
        if (n == 0) return out;
        if (out.text.size() > limit) return too_large("it gives more bytes than the " + std::to_string(limit) + " allowed (" + std::string(limit_name) + ")");
        if (out.text.size() == want) want = want * 2;
    }
}

} // namespace conveyor::detail

#endif
