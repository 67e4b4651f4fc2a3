// without_uring — runs a program in a process where io_uring does not exist.
//
//   without_uring PROGRAM [ARGS...]
//
// Installs a seccomp-BPF filter that makes io_uring_setup(2) fail with ENOSYS (what an old
// kernel, or a container runtime's seccomp profile, answers), allows every other system
// call, then execv()s PROGRAM with ARGS. The filter is inherited across execve, so the
// program sees a kernel without io_uring. Plain C++, no conveyor.
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>

#if defined(__x86_64__)
#define WITHOUT_URING_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define WITHOUT_URING_ARCH AUDIT_ARCH_AARCH64
#else
#error "without_uring: add this architecture's AUDIT_ARCH_ value"
#endif

#ifndef __NR_io_uring_setup
#define __NR_io_uring_setup 425 // the same number on every architecture since 5.1
#endif

int main(int argc, char** argv)
{
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s PROGRAM [ARGS...]\n", argv[0]);
        return 2;
    }
    constexpr unsigned nr_off = offsetof(struct seccomp_data, nr);
    constexpr unsigned arch_off = offsetof(struct seccomp_data, arch);
#if defined(__x86_64__)
    constexpr unsigned x32_setup = 0x40000000u | __NR_io_uring_setup; // the x32 ABI's number
#endif
    struct sock_filter filter[] = {
        // Only filter the native ABI; any other (e.g. 32-bit compat) is allowed unchanged.
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, arch_off),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, WITHOUT_URING_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, nr_off),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 2, 0),
#if defined(__x86_64__)
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, x32_setup, 1, 0),
#else
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 1, 0),
#endif
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
    };
    struct sock_fprog prog = {static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};

    // Needed to install a filter without CAP_SYS_ADMIN; also keeps it from being undone.
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        std::fprintf(stderr, "without_uring: prctl(PR_SET_NO_NEW_PRIVS): %s\n", std::strerror(errno));
        return 125;
    }
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) {
        std::fprintf(stderr, "without_uring: prctl(PR_SET_SECCOMP): %s\n", std::strerror(errno));
        return 125;
    }
    // Prove the filter works before handing over: io_uring_setup must now say ENOSYS.
    errno = 0;
    const long r = syscall(__NR_io_uring_setup, 1, nullptr);
    if (r != -1 || errno != ENOSYS) {
        std::fprintf(stderr, "without_uring: io_uring_setup still answers (%ld, %s); the filter did not take\n", r,
                     std::strerror(errno));
        return 125;
    }
    execv(argv[1], argv + 1);
    std::fprintf(stderr, "without_uring: execv(%s): %s\n", argv[1], std::strerror(errno));
    return 127;
}
