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
#include <utility>

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

CONVEYOR_DECL replacing_file::replacing_file(replacing_file&& other) noexcept
    : target_(std::move(other.target_)), temporary_(std::move(other.temporary_)), fd_(std::exchange(other.fd_, -1)),
      created_(std::exchange(other.created_, false)), size_(other.size_), step_(other.step_)
{
}

CONVEYOR_DECL replacing_file& replacing_file::operator=(replacing_file&& other) noexcept
{
    if (this != &other) {
        abandon();
        target_ = std::move(other.target_);
        temporary_ = std::move(other.temporary_);
        fd_ = std::exchange(other.fd_, -1);
        created_ = std::exchange(other.created_, false);
        size_ = other.size_;
        step_ = other.step_;
    }
    return *this;
}

CONVEYOR_DECL std::error_code replacing_file::failed(const char* step, int e) noexcept
{
    step_ = step;
    abandon();
    return {e, std::system_category()};
}

CONVEYOR_DECL std::error_code replacing_file::open(std::string target, unsigned mode, std::string temporary)
{
    abandon();
    target_ = std::move(target);
    temporary_ = temporary.empty() ? temporary_beside(target_) : std::move(temporary);
    size_ = 0;
    step_ = "";
    fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, static_cast<mode_t>(mode));
    if (fd_ < 0) {
        step_ = "cannot create"; // and not ours to remove: O_EXCL may have found it there
        return {errno, std::system_category()};
    }
    created_ = true;
    return {};
}

CONVEYOR_DECL std::error_code replacing_file::write_at(std::uint64_t offset, std::span<const std::byte> bytes)
{
    if (fd_ < 0) return failed("cannot write", EBADF);
    while (!bytes.empty()) {
        const ssize_t n = ::pwrite(fd_, bytes.data(), bytes.size(), static_cast<off_t>(offset));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return failed("cannot write", errno);
        if (n == 0) return failed("cannot write", ENOSPC); // a regular file takes at least one byte or says why
        offset += static_cast<std::uint64_t>(n);
        bytes = bytes.subspan(static_cast<std::size_t>(n));
    }
    return {};
}

CONVEYOR_DECL std::error_code replacing_file::append(std::span<const std::byte> bytes)
{
    const auto ec = write_at(size_, bytes);
    if (!ec) size_ += bytes.size();
    return ec;
}

CONVEYOR_DECL std::error_code replacing_file::commit(bool sync, bool sync_folder)
{
    if (fd_ < 0) return failed("cannot close", EBADF);
    if (sync && ::fsync(fd_) != 0) return failed("cannot sync", errno);
    const int closed = ::close(std::exchange(fd_, -1));
    if (closed != 0 && errno != EINTR) return failed("cannot close", errno);
    if (::rename(temporary_.c_str(), target_.c_str()) != 0) return failed("cannot rename", errno);
    created_ = false;
    if (sync_folder) {
        const auto dir = std::filesystem::path(target_).parent_path();
        const int d = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (d >= 0) {
            ::fsync(d);
            ::close(d);
        }
    }
    return {};
}

CONVEYOR_DECL void replacing_file::abandon() noexcept
{
    if (fd_ >= 0) ::close(std::exchange(fd_, -1));
    if (std::exchange(created_, false)) ::unlink(temporary_.c_str());
}

CONVEYOR_DECL void replace_file(const std::filesystem::path& path, std::string_view bytes, std::string_view stage)
{
    replacing_file f;
    std::error_code ec = f.open(path.string());
    if (!ec) ec = f.append(std::as_bytes(std::span(bytes.data(), bytes.size())));
    if (!ec) ec = f.commit(true);
    if (ec)
        throw conveyor::error(ec, {.stage = std::string(stage), .key = "", .where = path.string(), .offset = -1,
                                   .detail = std::string(f.failed_step()) + " " + f.temporary() + " (written whole, then renamed over it)"});
}

} // namespace conveyor::detail

#endif
