// micro_tar.cpp — how fast a tar shard in memory is parsed into members and samples, per
// core (only the headers are touched; the samples' bytes stay where they are).
//
// The shard: ImageNet-like samples (a JPEG-sized member of 80–140 KB and a `cls` member
// each). Measured one after another on one thread, alternating, each repeated; the median
// is reported:
// - `members`: shard::detail::tar_reader over the whole shard as one chunk (every member a
//   view of it);
// - `members_8mib`: the same fed in 8 MiB chunks, as a streamed shard arrives (members that
//   cross a chunk boundary are gathered into a buffer of their own: a copy);
// - `samples`: members grouped into samples (shard::detail::read_samples);
// - baselines: `header_walk`, decoding each header and jumping over the data (the floor of
//   any tar parser), and `memcpy`, copying the shard once (what touching the data costs).
//
//   conveyor-micro-tar [samples (default 2000)] [repeats (default 7)]
// prints one JSON line per measurement, then a summary.
#include "support/json_line.hpp"
#include <conveyor/core/buffer.hpp>
#include <conveyor/shard/detail/sample_reader.hpp>
#include <conveyor/shard/detail/tar.hpp>
#include <conveyor/shard/detail/tar_reader.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace sd = conveyor::shard::detail;

namespace {

void put_header(std::byte* at, const std::string& name, std::size_t size)
{
    char b[512] = {};
    std::memcpy(b, name.data(), std::min<std::size_t>(name.size(), 99));
    std::snprintf(b + 100, 8, "%07o", 0644);
    std::snprintf(b + 108, 8, "%07o", 0);
    std::snprintf(b + 116, 8, "%07o", 0);
    std::snprintf(b + 124, 12, "%011llo", static_cast<unsigned long long>(size));
    std::snprintf(b + 136, 12, "%011o", 1700000000);
    b[156] = '0';
    std::memcpy(b + 257, "ustar\0" "00", 8);
    std::memset(b + 148, ' ', 8);
    unsigned sum = 0;
    for (char c : b) sum += static_cast<unsigned char>(c);
    std::snprintf(b + 148, 8, "%06o", sum);
    std::memcpy(at, b, 512);
}

conveyor::slice make_shard(std::size_t samples, std::size_t& members)
{
    std::vector<std::pair<std::string, std::size_t>> entries;
    std::uint64_t x = 42;
    std::size_t total = 1024;
    for (std::size_t i = 0; i < samples; ++i) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        const std::size_t jpg = 80000 + (x >> 33) % 60000;
        char key[32];
        std::snprintf(key, sizeof key, "n%08zu", i);
        entries.push_back({std::string(key) + ".jpg", jpg});
        entries.push_back({std::string(key) + ".cls", 3});
    }
    for (const auto& [n, s] : entries) total += 512 + sd::tar_padded(s);
    conveyor::buffer b = conveyor::buffer::copy_of(std::string(total, '\0'));
    std::size_t at = 0;
    for (const auto& [n, s] : entries) {
        put_header(b.data() + at, n, s);
        std::memset(b.data() + at + 512, 0xA5, s); // data bytes: never read by the parser
        at += 512 + sd::tar_padded(s);
    }
    members = entries.size();
    return conveyor::slice(std::move(b));
}

double seconds_of(const std::function<std::size_t()>& f, std::size_t expect)
{
    const auto t0 = std::chrono::steady_clock::now();
    const std::size_t n = f();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (n != expect) {
        std::fprintf(stderr, "micro_tar: got %zu items, expected %zu\n", n, expect);
        std::exit(1);
    }
    return s;
}

} // namespace

int main(int argc, char** argv)
{
    const std::size_t n_samples = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 2000;
    const int repeats = argc > 2 ? std::atoi(argv[2]) : 7;
    std::size_t n_members = 0;
    const conveyor::slice shard = make_shard(n_samples, n_members);
    const double gb = static_cast<double>(shard.size()) / 1e9;
    conveyor::buffer copy = conveyor::buffer::copy_of(std::string(shard.size(), '\0'));

    struct mode {
        const char* name;
        std::size_t expect;
        std::function<std::size_t()> run;
    };
    const std::vector<mode> modes = {
        {"members", n_members,
         [&] {
             sd::tar_reader r("bench://shard.tar");
             r.feed({shard, 0});
             r.finish();
             std::size_t n = 0;
             while (auto m = r.next()) n += m->data.size() > 0;
             return n;
         }},
        {"members_8mib", n_members,
         [&] {
             sd::tar_reader r("bench://shard.tar");
             std::size_t n = 0;
             const std::size_t cs = std::size_t{8} << 20;
             for (std::size_t at = 0; at < shard.size(); at += cs) {
                 r.feed({shard.sub(at, std::min(cs, shard.size() - at)), at});
                 while (auto m = r.next()) n += m->data.size() > 0;
             }
             r.finish();
             while (auto m = r.next()) n += m->data.size() > 0;
             return n;
         }},
        {"samples", n_samples, [&] { return sd::read_samples(shard, "bench://shard.tar").size(); }},
        {"header_walk", n_members,
         [&] {
             std::size_t n = 0;
             sd::tar_header h;
             for (std::size_t at = 0; at + 512 <= shard.size();) {
                 const auto block = shard.span().subspan(at, 512);
                 if (sd::is_zero_block(block)) break;
                 if (!sd::decode_tar_header(block, h).empty()) std::abort();
                 ++n;
                 at += 512 + sd::tar_padded(static_cast<std::uint64_t>(h.size));
             }
             return n;
         }},
        {"memcpy", 1,
         [&] {
             std::memcpy(copy.data(), shard.data(), shard.size());
             return std::size_t{copy.data()[shard.size() / 2] == std::byte{0xA5} ? 1u : 2u} - (shard.size() ? 0 : 1);
         }},
    };

    std::map<std::string, std::vector<double>> secs;
    for (const auto& m : modes) seconds_of(m.run, m.expect); // warm up: page in, pools filled
    for (int r = 0; r < repeats; ++r)
        for (const auto& m : modes) secs[m.name].push_back(seconds_of(m.run, m.expect));

    std::printf("\n");
    for (const auto& m : modes) {
        auto v = secs[m.name];
        std::sort(v.begin(), v.end());
        const double med = v[v.size() / 2];
        conveyor::bench::json_line()
            .add("bench", "micro_tar")
            .add("mode", m.name)
            .add("shard_bytes", static_cast<std::uint64_t>(shard.size()))
            .add("members", static_cast<std::uint64_t>(n_members))
            .add("repeats", repeats)
            .add("median_s", med)
            .add("gb_per_s", gb / med)
            .add("min_gb_per_s", gb / v.back())
            .add("max_gb_per_s", gb / v.front())
            .add("ns_per_member", med * 1e9 / static_cast<double>(n_members))
            .print();
    }
    std::printf("\ntar parsing of a %.1f MB shard in memory (%zu samples, %zu members, ~110 KB per jpg), one core, median of %d:\n",
                static_cast<double>(shard.size()) / 1e6, n_samples, n_members, repeats);
    for (const auto& m : modes) {
        auto v = secs[m.name];
        std::sort(v.begin(), v.end());
        const double med = v[v.size() / 2];
        std::printf("  %-13s %9.1f GB/s  %7.0f ns/member\n", m.name, gb / med, med * 1e9 / static_cast<double>(n_members));
    }
    std::printf("(target: members >= 5 GB/s; memcpy is what touching every data byte once costs)\n");
    return 0;
}
