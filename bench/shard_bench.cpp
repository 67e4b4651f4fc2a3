// shard_bench.cpp — conveyor-bench shards: tar shards read as samples (no decode) through
// conveyor's shard source, against `cat` (one thread reading each shard file sequentially
// with read(2) into one reused buffer) over the same files.
#include "shard_bench.hpp"

#include "s3_bench.hpp"

#include "support/bench.hpp"
#include <conveyor/core/location.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/s3/client.hpp>
#include <conveyor/shard/list.hpp>
#include <conveyor/shard/source.hpp>
#include <conveyor/store/cache.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace cv = conveyor;
namespace cb = conveyor::bench;

struct shard_args {
    std::vector<std::string> specs;
    std::string engine = "conveyor";
    std::size_t repeat = 3;
    unsigned shards_in_flight = 0; // the source's default for the list
    std::size_t chunk_mb = 2; // the library's default (chunk_options::chunk_size)
    unsigned chunks_in_flight = 2;
    std::size_t io_threads = 0;
    std::string endpoint;
    std::string region;
    std::string cache;               // --cache DIR: a node-local cache for remote shards
    std::uint64_t cache_max_bytes = 0;
    bool cache_no_fsync = false;
    bool no_checksums = false;       // --no-checksums: S3 objects' checksums neither asked for nor verified
};

struct pass_result {
    std::uint64_t samples = 0;
    std::uint64_t bytes = 0; // shard bytes read
    double seconds = 0;
    cb::resource_usage usage;
};

pass_result read_cat(const std::vector<cv::shard::shard_ref>& list)
{
    pass_result r;
    std::vector<char> buf(std::size_t{128} << 10); // what GNU cat uses on this kind of file system
    const auto before = cb::usage_now();
    cb::stopwatch clock;
    for (const auto& s : list) {
        const int fd = ::open(s.url.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) throw std::runtime_error("cat: cannot open " + s.url + ": " + std::strerror(errno));
        for (;;) {
            const ssize_t n = ::read(fd, buf.data(), buf.size());
            if (n < 0) {
                if (errno == EINTR) continue;
                ::close(fd);
                throw std::runtime_error("cat: cannot read " + s.url + ": " + std::strerror(errno));
            }
            if (n == 0) break;
            r.bytes += static_cast<std::uint64_t>(n);
        }
        ::close(fd);
    }
    r.seconds = clock.seconds();
    r.usage = cb::usage_now() - before;
    return r;
}

int cmd_shards(const shard_args& a)
{
    cv::runtime_options ro;
    if (a.io_threads) ro.io_threads = a.io_threads;
    cv::runtime rt(ro);
    std::optional<cv::s3::client> s3;
    const bool wants_s3 = cv::shard::names_s3(a.specs);
    if (wants_s3) {
        cv::s3::config_options co;
        co.endpoint_url = a.endpoint;
        co.region = a.region;
        if (!a.endpoint.empty()) co.style = cv::s3::addressing::path;
        cv::s3::client_options so;
        if (a.no_checksums) {
            so.checksums.verify = false;
            so.checksums.upload.reset();
        }
        s3.emplace(rt, co, so);
    }
    cv::shard::list_options lo;
    if (s3) lo.s3 = &*s3;
    auto list = cv::shard::resolve(a.specs, lo);
    std::uint64_t total = 0;
    bool sizes_known = true;
    for (auto& s : list) {
        if (s.size < 0 && cv::location(s.url).is_local()) s.size = static_cast<std::int64_t>(std::filesystem::file_size(s.url));
        if (s.size < 0) sizes_known = false;
        total += s.size > 0 ? static_cast<std::uint64_t>(s.size) : 0;
    }
    if (a.engine == "cat" && wants_s3) throw std::invalid_argument("--engine cat reads local shards only");
    std::fprintf(stderr, "shards: %zu shards, %.3f GB%s, engine %s\n", list.size(), static_cast<double>(total) / 1e9,
                 sizes_known ? "" : " (sizes of some unknown)", a.engine.c_str());

    cv::shard::source_options o;
    o.share = cv::split{};
    o.order.shuffle = false;
    o.shards_in_flight = a.shards_in_flight ? a.shards_in_flight : cv::shard::default_shards_in_flight(list);
    o.chunks.chunk_size = a.chunk_mb << 20;
    o.chunks.chunks_in_flight = a.chunks_in_flight;
    o.s3 = s3;
    if (!a.cache.empty()) o.cache = cv::store::cache_options{.dir = a.cache, .max_bytes = a.cache_max_bytes, .fsync = !a.cache_no_fsync};
    auto pipe = cv::shard::shards(list, o).on(rt);

    const double rss_before_mb = static_cast<double>(cb::current_rss_bytes()) / 1e6;
    std::vector<double> mbps, sps, cpu_gb;
    for (std::size_t rep = 0; rep < a.repeat; ++rep) {
        pass_result r;
        const auto cache0 = cv::store::cache_stats_of(a.cache);
        const auto s3_0 = s3 ? s3->stats() : cv::s3::client_stats{};
        if (a.engine == "cat") {
            r = read_cat(list);
        } else {
            const auto before = cb::usage_now();
            cb::stopwatch clock;
            std::uint64_t spans = 0;
            for (auto& s : pipe) {
                ++r.samples;
                spans += s.end - s.offset;
            }
            r.seconds = clock.seconds();
            r.usage = cb::usage_now() - before;
            r.bytes = sizes_known ? total : spans;
        }
        const double gb = static_cast<double>(r.bytes) / 1e9;
        cb::json_line line;
        line.add("bench", "shards")
            .add("engine", a.engine)
            .add("shards", list.size())
            .add("shards_in_flight", o.shards_in_flight)
            .add("chunk_MB", a.chunk_mb)
            .add("chunks_in_flight", a.chunks_in_flight)
            .add("repeat", rep)
            .add("samples", r.samples)
            .add("bytes", r.bytes)
            .add("seconds", r.seconds)
            .add("MB_per_s", static_cast<double>(r.bytes) / 1e6 / r.seconds)
            .add("samples_per_s", static_cast<double>(r.samples) / r.seconds)
            .add("cpu_s", r.usage.cpu_s())
            .add("cpu_s_per_GB", gb > 0 ? r.usage.cpu_s() / gb : 0.0)
            .add("max_rss_MB", r.usage.max_rss_mb())
            .add("rss_before_MB", rss_before_mb)
            .add("memory_peak_MB", static_cast<double>(rt.memory().stats().peak) / 1e6);
        if (s3) add_s3_counters(line, s3->stats(), s3_0, a.no_checksums); // what the S3 client did in this pass
        if (!a.cache.empty()) {
            const auto cs = cv::store::cache_stats_of(a.cache);
            line.add("cache_hits", cs.hits - cache0.hits).add("cache_misses", cs.misses - cache0.misses);
        }
        line.print();
        mbps.push_back(static_cast<double>(r.bytes) / 1e6 / r.seconds);
        sps.push_back(static_cast<double>(r.samples) / r.seconds);
        cpu_gb.push_back(gb > 0 ? r.usage.cpu_s() / gb : 0.0);
    }
    std::fprintf(stderr, "shards: %s, %zu repeat(s): MB/s best %.0f median %.0f | samples/s median %.0f | CPU %.2f s/GB (median) | peak RSS %.0f MB\n",
                 a.engine.c_str(), a.repeat, *std::max_element(mbps.begin(), mbps.end()), cb::median(mbps), cb::median(sps),
                 cb::median(cpu_gb), cb::usage_now().max_rss_mb());
    return 0;
}

} // namespace

std::function<int()> add_shard_subcommands(CLI::App& app)
{
    auto a = std::make_shared<shard_args>();
    auto* s = app.add_subcommand("shards", "read tar shards as samples (no decode) with conveyor's shard source, or with cat");
    s->add_option("shards", a->specs, "shards: paths, brace patterns, s3:// URLs or prefixes ending in '/', a dataset index (.json)")->required();
    s->add_option("--engine", a->engine, "conveyor (the shard source) or cat (read(2) of each file in turn, local only)")
        ->check(CLI::IsMember({"conveyor", "cat"}))
        ->capture_default_str();
    s->add_option("--repeat", a->repeat, "passes over the shards")->check(CLI::PositiveNumber)->capture_default_str();
    s->add_option("--shards-in-flight", a->shards_in_flight, "shards read at once (0: the source's default, 4 local, 12 remote)")->capture_default_str();
    s->add_option("--chunk-MB", a->chunk_mb, "chunk size in MiB")->check(CLI::PositiveNumber)->capture_default_str();
    s->add_option("--chunks-in-flight", a->chunks_in_flight, "chunks of one shard read ahead")->check(CLI::PositiveNumber)->capture_default_str();
    s->add_option("--io-threads", a->io_threads, "the runtime's I/O threads (0: its default)")->capture_default_str();
    s->add_option("--endpoint", a->endpoint, "S3 endpoint URL (default: AWS_ENDPOINT_URL, the profile, or AWS)");
    s->add_option("--region", a->region, "S3 region");
    s->add_option("--cache", a->cache, "a node-local cache folder for remote shards (store::cache_options::dir)");
    s->add_option("--cache-max-bytes", a->cache_max_bytes, "the cache's size limit in bytes (0: none)")->capture_default_str();
    s->add_flag("--cache-no-fsync", a->cache_no_fsync, "do not fsync cached files before publishing them (cache_options::fsync)");
    s->add_flag("--no-checksums", a->no_checksums, "s3:// shards: neither ask for nor verify the objects' checksums (to compare their cost)");
    return [s, a]() -> int {
        if (!*s) return -1;
        return cmd_shards(*a);
    };
}
