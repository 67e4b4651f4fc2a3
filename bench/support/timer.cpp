// bench/support/timer.cpp — CPU time and memory of the process (see timer.hpp).
#include "support/timer.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>

namespace conveyor::bench {

resource_usage operator-(const resource_usage& after, const resource_usage& before) noexcept
{
    return {after.user_s - before.user_s, after.system_s - before.system_s, after.max_rss_bytes,
            after.minor_faults - before.minor_faults, after.major_faults - before.major_faults,
            after.voluntary_switches - before.voluntary_switches, after.involuntary_switches - before.involuntary_switches};
}

resource_usage usage_now() noexcept
{
    ::rusage ru{};
    if (::getrusage(RUSAGE_SELF, &ru) != 0) return {};
    auto secs = [](const ::timeval& tv) { return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) * 1e-6; };
    // Linux reports ru_maxrss in kibibytes.
    return {secs(ru.ru_utime), secs(ru.ru_stime), static_cast<std::int64_t>(ru.ru_maxrss) * 1024,
            static_cast<std::int64_t>(ru.ru_minflt), static_cast<std::int64_t>(ru.ru_majflt),
            static_cast<std::int64_t>(ru.ru_nvcsw), static_cast<std::int64_t>(ru.ru_nivcsw)};
}

std::int64_t current_rss_bytes() noexcept
{
    std::FILE* f = std::fopen("/proc/self/statm", "r");
    if (!f) return 0;
    long long pages = 0, resident = 0;
    const int n = std::fscanf(f, "%lld %lld", &pages, &resident);
    std::fclose(f);
    return n == 2 ? resident * static_cast<std::int64_t>(::sysconf(_SC_PAGESIZE)) : 0;
}

} // namespace conveyor::bench
