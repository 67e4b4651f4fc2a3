// hung_fs: a tiny FUSE file system whose reads can be held unanswered, standing for a hung
// network mount in the file source's tests (see hung_mount.hpp, which runs it).
//
//   hung_fs <backing directory> <mount point>
//
// Mirrors the regular files directly in <backing directory> (one flat directory, read-only).
// READ requests for files whose names start with "hang" are held unanswered until the line
// "release" arrives on stdin; each held read prints "held" on stdout. "ready" is printed once
// mounted, or "error <why>" (exit 1) where FUSE mounts are refused. At EOF on stdin (the test
// ended, or died) it detaches the mount and closes /dev/fuse, which aborts the connection:
// a read still waiting on it fails instead of waiting forever.
//
// It runs as a process of its own, not a thread of the test, on purpose: threads stuck on a
// FUSE request keep the test's file table, so a server inside the test process could never
// close /dev/fuse once the test died, and the stuck threads would outlive it.
// Plain C++ and the FUSE protocol on /dev/fuse (no libfuse, no conveyor).
#include <linux/fuse.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace {

int fuse_fd = -1;
std::string backing;
std::map<std::uint64_t, std::string> names; // node id -> file name
std::map<std::string, std::uint64_t> ids;

struct held_read {
    std::uint64_t unique, node, offset;
    std::uint32_t size;
};

void reply(std::uint64_t unique, int error, const void* body = nullptr, std::size_t n = 0)
{
    std::vector<char> out(sizeof(fuse_out_header) + n);
    fuse_out_header h{};
    h.len = static_cast<std::uint32_t>(out.size());
    h.error = -error;
    h.unique = unique;
    std::memcpy(out.data(), &h, sizeof h);
    if (n) std::memcpy(out.data() + sizeof h, body, n);
    // Fails only when the request was interrupted meanwhile or the mount is gone.
    (void)!::write(fuse_fd, out.data(), out.size());
}

bool attr_of(std::uint64_t node, fuse_attr& a)
{
    a = {};
    a.ino = node;
    a.nlink = 1;
    a.blksize = 4096;
    if (node == FUSE_ROOT_ID) {
        a.mode = S_IFDIR | 0755;
        return true;
    }
    auto it = names.find(node);
    struct stat st {};
    if (it == names.end() || ::stat((backing + "/" + it->second).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
    a.mode = S_IFREG | 0644;
    a.size = static_cast<std::uint64_t>(st.st_size);
    a.blocks = (a.size + 511) / 512;
    return true;
}

void answer_read(const held_read& r)
{
    std::vector<char> data(r.size);
    const int fd = ::open((backing + "/" + names[r.node]).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return reply(r.unique, errno);
    const ssize_t n = ::pread(fd, data.data(), data.size(), static_cast<off_t>(r.offset));
    const int err = errno;
    ::close(fd);
    if (n < 0) return reply(r.unique, err);
    reply(r.unique, 0, data.data(), static_cast<std::size_t>(n));
}

} // namespace

int main(int argc, char** argv)
{
    if (argc != 3) {
        std::fprintf(stderr, "usage: hung_fs <backing directory> <mount point>\n");
        return 2;
    }
    backing = argv[1];
    const char* at = argv[2];
    // Also go when the test dies without closing our stdin: a test process whose threads are
    // stuck on this mount cannot exit (they hold its file table, so the pipe stays open),
    // and our going is what aborts the connection and frees them.
    const pid_t parent = ::getppid();
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) return 1;
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    fuse_fd = ::open("/dev/fuse", O_RDWR | O_CLOEXEC);
    if (fuse_fd < 0) {
        std::printf("error cannot open /dev/fuse: %s\n", std::strerror(errno));
        return 1;
    }
    const std::string opts = "fd=" + std::to_string(fuse_fd) + ",rootmode=40000,user_id=0,group_id=0,allow_other";
    if (::mount("conveyor-hung", at, "fuse.conveyor-hung", MS_NOSUID | MS_NODEV | MS_RDONLY, opts.c_str()) != 0) {
        std::printf("error cannot mount a FUSE file system at %s: %s\n", at, std::strerror(errno));
        return 1;
    }
    std::printf("ready\n");

    std::vector<held_read> held;
    bool released = false;
    std::vector<char> buf(FUSE_MIN_READ_BUFFER + (1u << 20));
    std::string commands;
    for (;;) {
        pollfd p[2] = {{fuse_fd, POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
        if (::poll(p, 2, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (p[1].revents) {
            char c[256];
            const ssize_t n = ::read(STDIN_FILENO, c, sizeof c);
            if (n <= 0) break; // the test is gone
            commands.append(c, static_cast<std::size_t>(n));
            if (commands.find("release\n") != std::string::npos) {
                released = true;
                for (const auto& r : held) answer_read(r);
                held.clear();
                commands.clear();
            }
        }
        if (!p[0].revents) continue;
        const ssize_t got = ::read(fuse_fd, buf.data(), buf.size());
        if (got < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == ENOENT) continue;
            break; // ENODEV: unmounted
        }
        if (static_cast<std::size_t>(got) < sizeof(fuse_in_header)) continue;
        fuse_in_header in;
        std::memcpy(&in, buf.data(), sizeof in);
        const char* arg = buf.data() + sizeof in;
        switch (in.opcode) {
        case FUSE_INIT: {
            fuse_init_in i{};
            std::memcpy(&i, arg, sizeof(std::uint32_t) * 4);
            fuse_init_out o{};
            o.major = FUSE_KERNEL_VERSION;
            o.minor = FUSE_KERNEL_MINOR_VERSION;
            o.max_readahead = i.max_readahead;
            o.max_background = 64;
            o.congestion_threshold = 48;
            o.max_write = 1u << 20;
            o.time_gran = 1;
            // Reads as a network file system does them: page-cache readahead sent as
            // background requests. Without it the kernel reads synchronously in whatever
            // thread asked, even one that asked not to wait (IOCB_NOWAIT).
            o.flags = i.flags & FUSE_ASYNC_READ;
            reply(in.unique, 0, &o, sizeof o);
            break;
        }
        case FUSE_LOOKUP: {
            const std::string name(arg);
            struct stat st {};
            if (in.nodeid != FUSE_ROOT_ID || name.find('/') != std::string::npos ||
                ::stat((backing + "/" + name).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
                reply(in.unique, ENOENT);
                break;
            }
            auto [it, fresh] = ids.emplace(name, ids.size() + 2);
            names[it->second] = name;
            fuse_entry_out e{};
            e.nodeid = it->second;
            e.entry_valid = e.attr_valid = 3600;
            attr_of(e.nodeid, e.attr);
            reply(in.unique, 0, &e, sizeof e);
            break;
        }
        case FUSE_GETATTR: {
            fuse_attr_out a{};
            a.attr_valid = 3600;
            if (!attr_of(in.nodeid, a.attr)) reply(in.unique, ENOENT);
            else reply(in.unique, 0, &a, sizeof a);
            break;
        }
        case FUSE_OPEN: {
            fuse_open_out o{};
            o.fh = in.nodeid;
            o.open_flags = 0; // reads go through the page cache (see the comment at the top)
            reply(in.unique, 0, &o, sizeof o);
            break;
        }
        case FUSE_READ: {
            fuse_read_in r{};
            std::memcpy(&r, arg, sizeof r);
            const held_read h{in.unique, in.nodeid, r.offset, r.size};
            if (!released && names[in.nodeid].rfind("hang", 0) == 0) {
                held.push_back(h);
                std::printf("held\n");
            } else {
                answer_read(h);
            }
            break;
        }
        case FUSE_INTERRUPT: // a waiter gave up: its read stays held all the same, as on a hung server
        case FUSE_FORGET:
        case FUSE_BATCH_FORGET: break; // these take no reply
        case FUSE_RELEASE:
        case FUSE_FLUSH:
        case FUSE_RELEASEDIR:
        case FUSE_DESTROY: reply(in.unique, 0); break;
        default: reply(in.unique, ENOSYS); break;
        }
    }
    ::umount2(at, MNT_DETACH);
    ::close(fuse_fd); // the last descriptor of the connection: the kernel aborts what still waits
    return 0;
}
