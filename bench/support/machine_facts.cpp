// bench/support/machine_facts.cpp — the facts about this machine that a report shows
// (see report.hpp).
#include "support/report.hpp"

#include <sched.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace conveyor::bench {

std::vector<std::pair<std::string, std::string>> machine_facts(const std::vector<std::string>& paths)
{
    namespace fs = std::filesystem;
    std::vector<std::pair<std::string, std::string>> facts;
    auto trim = [](std::string v) {
        const auto b = v.find_first_not_of(" \t");
        if (b == std::string::npos) return std::string();
        v.erase(v.find_last_not_of(" \t\r\n") + 1);
        return v.substr(b);
    };

    {
        // x86 says "model name"; some ARM and POWER kernels say "Model" or "cpu".
        std::ifstream in("/proc/cpuinfo");
        std::string line, best;
        int best_rank = 99;
        static constexpr const char* keys[] = {"model name", "Model", "cpu model", "cpu"};
        while (std::getline(in, line)) {
            const auto colon = line.find(':');
            if (colon == std::string::npos) continue;
            const std::string key = trim(line.substr(0, colon));
            for (int k = 0; k < 4 && k < best_rank; ++k) {
                if (key != keys[k]) continue;
                std::string value = trim(line.substr(colon + 1));
                if (value.empty()) break;
                // Some model names pad with runs of spaces.
                value.erase(std::unique(value.begin(), value.end(), [](char a, char b) { return a == ' ' && b == ' '; }),
                            value.end());
                best = value;
                best_rank = k;
            }
        }
        if (!best.empty()) facts.emplace_back("CPU", best);
    }

    const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
    if (online > 0) {
        facts.emplace_back("cores", std::to_string(online));
        cpu_set_t set;
        CPU_ZERO(&set);
        if (::sched_getaffinity(0, sizeof set, &set) == 0) {
            const int usable = CPU_COUNT(&set);
            if (usable > 0 && usable < online) facts.emplace_back("usable cores", std::to_string(usable));
        }
    }

    const long pages = ::sysconf(_SC_PHYS_PAGES), page_size = ::sysconf(_SC_PAGESIZE);
    if (pages > 0 && page_size > 0) {
        const double bytes = static_cast<double>(pages) * static_cast<double>(page_size);
        char buf[32];
        if (bytes >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
        else std::snprintf(buf, sizeof buf, "%.0f MiB", bytes / (1024.0 * 1024));
        facts.emplace_back("memory", buf);
    }

    struct utsname names;
    if (::uname(&names) == 0) {
        facts.emplace_back("kernel", std::string(names.sysname) + " " + names.release);
        if (names.nodename[0]) facts.emplace_back("host", names.nodename);
    }

    if (!paths.empty()) {
        // /proc/self/mountinfo: "id parent major:minor root mount-point options [optional...] - fstype source super-options",
        // with spaces and the like in paths escaped as \ooo.
        struct mount {
            std::string point, fstype, source;
        };
        std::vector<mount> mounts;
        auto unescape = [](const std::string& v) {
            std::string out;
            for (std::size_t i = 0; i < v.size(); ++i) {
                if (v[i] == '\\' && i + 3 < v.size() && v[i + 1] >= '0' && v[i + 1] <= '3' &&
                    v[i + 2] >= '0' && v[i + 2] <= '7' && v[i + 3] >= '0' && v[i + 3] <= '7') {
                    out += static_cast<char>((v[i + 1] - '0') * 64 + (v[i + 2] - '0') * 8 + (v[i + 3] - '0'));
                    i += 3;
                } else {
                    out += v[i];
                }
            }
            return out;
        };
        std::ifstream in("/proc/self/mountinfo");
        std::string line;
        while (std::getline(in, line)) {
            std::vector<std::string> fields;
            std::size_t pos = 0;
            while (pos < line.size()) {
                const auto end = line.find(' ', pos);
                fields.push_back(line.substr(pos, end == std::string::npos ? std::string::npos : end - pos));
                if (end == std::string::npos) break;
                pos = end + 1;
            }
            const auto dash = std::find(fields.begin(), fields.end(), "-");
            if (fields.size() < 5 || dash == fields.end() || fields.end() - dash < 3) continue;
            mounts.push_back({unescape(fields[4]), unescape(*(dash + 1)), unescape(*(dash + 2))});
        }
        for (const auto& given : paths) {
            std::error_code ec;
            fs::path resolved = fs::absolute(given, ec);
            if (ec) continue;
            const fs::path canonical = fs::weakly_canonical(resolved, ec);
            if (!ec) resolved = canonical;
            const std::string path = resolved.lexically_normal().generic_string();
            const mount* best = nullptr;
            for (const auto& m : mounts) {
                const bool inside = m.point == "/" || path == m.point ||
                                    (path.size() > m.point.size() && path.compare(0, m.point.size(), m.point) == 0 &&
                                     path[m.point.size()] == '/');
                // The longest mount point wins; of equal ones the later, mounted over the others.
                if (inside && (!best || m.point.size() >= best->point.size())) best = &m;
            }
            if (best) facts.emplace_back("storage " + given, best->fstype + " on " + best->point + " (" + best->source + ")");
        }
    }
    return facts;
}

} // namespace conveyor::bench
