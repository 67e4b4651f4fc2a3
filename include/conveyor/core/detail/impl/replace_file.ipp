// conveyor/core/detail/impl/replace_file.ipp — a local file replaced whole or not at all.
#ifndef CONVEYOR_CORE_DETAIL_IMPL_REPLACE_FILE_IPP
#define CONVEYOR_CORE_DETAIL_IMPL_REPLACE_FILE_IPP

#include <conveyor/core/detail/replace_file.hpp>

#include <conveyor/core/error.hpp>

#include <atomic>
#include <cerrno>
#include <random>
#include <string>
#include <system_error>

#include <fcntl.h>
#include <unistd.h>

namespace conveyor::detail {

CONVEYOR_DECL std::string temporary_beside(const std::filesystem::path& path)
{
    static std::atomic<unsigned long> serial{0};
    thread_local std::mt19937_64 random{std::random_device{}()};
    const std::filesystem::path folder = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
    return (folder / ("." + path.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                      std::to_string(serial.fetch_add(1)) + "-" + std::to_string(random() % 1000000)))
        .string();
}

CONVEYOR_DECL void replace_file(const std::filesystem::path& path, std::string_view bytes, std::string_view stage)
{
    const std::string tmp = temporary_beside(path);
    int fd = -1;
    const auto fail = [&](int e, const std::string& step) {
        if (fd >= 0) ::close(fd);
        if (step != "cannot create") ::unlink(tmp.c_str());
        throw conveyor::error(std::error_code(e, std::system_category()),
                              {.stage = std::string(stage), .key = "", .where = path.string(), .offset = -1,
                               .detail = step + " " + tmp + " (written whole, then renamed over it)"});
    };

    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) fail(errno, "cannot create");
    for (std::size_t done = 0; done < bytes.size();) {
        const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (n < 0) {
            if (errno == EINTR) continue;
            fail(errno, "cannot write");
        }
        if (n == 0) fail(EIO, "cannot write"); // a regular file takes at least one byte or says why
        done += static_cast<std::size_t>(n);
    }
    // Synced before the rename: otherwise a crash can leave the new name on an empty file.
    if (::fsync(fd) != 0) fail(errno, "cannot sync");
    const int closed = ::close(fd);
    fd = -1;
    if (closed != 0 && errno != EINTR) fail(errno, "cannot close"); // NFS reports write errors here
    if (::rename(tmp.c_str(), path.c_str()) != 0) fail(errno, "cannot rename");
}

} // namespace conveyor::detail

#endif
