// tests/file/hung_mount.hpp — a mount whose reads can be made to never answer, standing for a
// hung network file system. Not a translation unit.
//
// The kernel cannot cancel a read waiting on such a mount at once: an io_uring read sits in
// an io-wq worker, a pread in a blocking thread, both until the server answers or the
// connection is aborted. That is what the file source's cancellation and deadlines must cope
// with. The server is the hung_fs program (hung_fs.cpp), run as a child process; see there
// why it is not a thread of the test.
#ifndef CONVEYOR_TESTS_FILE_HUNG_MOUNT_HPP
#define CONVEYOR_TESTS_FILE_HUNG_MOUNT_HPP

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>

#ifndef CONVEYOR_HUNG_FS
#error "CONVEYOR_HUNG_FS (the path of the hung_fs program) must be defined by the build"
#endif

extern char** environ;

namespace ftest {

/** Mounts `backing` (a flat directory of regular files) at `mount_point` through hung_fs.
    Reads of files named "hang*" are held until `release()`. `available()` is false (and
    `why()` says why) where FUSE mounts are refused, e.g. in an unprivileged container. */
class hung_mount {
public:
    hung_mount(const std::filesystem::path& backing, const std::filesystem::path& mount_point)
    {
        int in[2], out[2];
        if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) {
            why_ = "pipe failed";
            return;
        }
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, in[0], STDIN_FILENO);
        posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
        const std::string prog = CONVEYOR_HUNG_FS, b = backing.string(), m = mount_point.string();
        char* argv[] = {const_cast<char*>(prog.c_str()), const_cast<char*>(b.c_str()), const_cast<char*>(m.c_str()), nullptr};
        const int r = ::posix_spawn(&pid_, prog.c_str(), &fa, nullptr, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        ::close(in[0]);
        ::close(out[1]);
        to_ = in[1];
        from_ = out[0];
        if (r != 0) {
            why_ = "cannot run " + prog + ": " + std::strerror(r);
            pid_ = -1;
            return;
        }
        const std::string first = line(std::chrono::seconds(30));
        if (first == "ready") {
            ready_ = true;
            return;
        }
        why_ = first.rfind("error ", 0) == 0 ? first.substr(6) : "hung_fs did not start (said '" + first + "')";
    }

    hung_mount(const hung_mount&) = delete;
    hung_mount& operator=(const hung_mount&) = delete;

    /// Ends the server: it detaches the mount and aborts what still waits on it.
    ~hung_mount()
    {
        if (to_ >= 0) ::close(to_);
        if (pid_ > 0) {
            int status;
            ::waitpid(pid_, &status, 0);
        }
        if (from_ >= 0) ::close(from_);
    }

    bool available() const noexcept { return ready_; }
    const std::string& why() const noexcept { return why_; }

    /// Reads held unanswered so far.
    std::size_t held()
    {
        while (!line(std::chrono::seconds(0)).empty()) {
        }
        return held_;
    }

    /// Answers the held reads and holds no more.
    void release()
    {
        if (to_ >= 0) (void)!::write(to_, "release\n", 8);
    }

private:
    // The next line from hung_fs (counting "held" lines), waiting at most `limit`; "" if none.
    std::string line(std::chrono::seconds limit)
    {
        const auto deadline = std::chrono::steady_clock::now() + limit;
        for (;;) {
            const auto nl = pending_.find('\n');
            if (nl != std::string::npos) {
                std::string l = pending_.substr(0, nl);
                pending_.erase(0, nl + 1);
                if (l == "held") {
                    ++held_;
                    if (limit.count() == 0) return l;
                    continue;
                }
                return l;
            }
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
            pollfd p{from_, POLLIN, 0};
            if (::poll(&p, 1, static_cast<int>(std::max<long long>(0, left.count()))) <= 0) return {};
            char buf[256];
            const ssize_t n = ::read(from_, buf, sizeof buf);
            if (n <= 0) return {};
            pending_.append(buf, static_cast<std::size_t>(n));
        }
    }

    pid_t pid_ = -1;
    int to_ = -1, from_ = -1;
    bool ready_ = false;
    std::string why_;
    std::string pending_;
    std::size_t held_ = 0;
};

} // namespace ftest

#endif
