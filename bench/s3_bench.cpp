// s3_bench.cpp — conveyor-bench's S3 subcommands (a translation unit of its own: Beast and
// OpenSSL compile slowly, and the file benchmarks do not need them).
//
//   s3-get   GET every object of a prefix or an index through conveyor's S3 source
//   s3-put   upload a directory's files as objects through the upload sink
//
// One JSON object per line on standard output; a human summary on standard error. With
// --timeline, s3-get also prints a line per second of each pass (what arrived in it, and
// the client's throttling state at its end).

#include "s3_bench.hpp"

#include "support/bench.hpp"
#include <conveyor/core/location.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/file/index.hpp>
#include <conveyor/file/source.hpp>
#include <conveyor/s3/client.hpp>
#include <conveyor/s3/source.hpp>
#include <conveyor/core/source.hpp>
#include <conveyor/store/cache.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

namespace {

namespace cv = conveyor;
namespace cb = conveyor::bench;
namespace s3 = conveyor::s3;

struct s3_args {
    std::string endpoint;
    std::string bucket;
    std::string region;
    std::string prefix;
    std::string index;
    std::string dir;
    std::size_t concurrency = 64;
    std::size_t limit = 0;
    std::uint64_t part_size = 8u << 20;
    unsigned parts_in_flight = 8;
    unsigned attempts = 10;
    std::size_t io_threads = 0;
    std::size_t repeat = 1;
    std::size_t pool_mb = 256;
    bool ordered = false;
    bool anonymous = false;
    bool no_checksums = false;        // --no-checksums: neither ask for nor verify checksums, send none
    std::string on_error = "fail";    // --on-error fail|skip
    bool fixed_concurrency = false;
    bool timeline = false;
    std::string cache;               // --cache DIR: read through a node-local cache
    std::uint64_t cache_max_bytes = 0;
};

s3::config_options config_of(const s3_args& a)
{
    s3::config_options o;
    o.endpoint_url = a.endpoint;
    o.region = a.region;
    o.anonymous = a.anonymous;
    if (!a.endpoint.empty()) o.style = s3::addressing::path;
    return o;
}

s3::client_options client_options_of(const s3_args& a)
{
    s3::client_options o;
    o.http.max_connections = std::max<std::size_t>({a.concurrency, a.parts_in_flight, 1});
    o.retry.max_attempts = std::max(1u, a.attempts);
    o.part_size = a.part_size;
    o.parts_in_flight = std::max(1u, a.parts_in_flight);
    if (a.no_checksums) {
        o.checksums.verify = false;
        o.checksums.upload.reset();
    }
    o.throttle.adaptive = !a.fixed_concurrency;
    return o;
}

/** With --timeline: every second of a pass, one JSON line of what arrived in that second
    (objects, bytes) and the client's counters over it, ending with its throttling state.
    A thread of its own, so that a second without any arrival still gets its line. */
class timeline {
public:
    timeline(const s3::client& c, std::size_t rep, const std::atomic<std::uint64_t>& objects, const std::atomic<std::uint64_t>& bytes)
        : c_(c), rep_(rep), objects_(objects), bytes_(bytes), thread_([this] { run(); })
    {
    }
    timeline(const timeline&) = delete;
    timeline& operator=(const timeline&) = delete;
    ~timeline()
    {
        {
            std::lock_guard lk(mu_);
            stop_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }

private:
    void run()
    {
        const auto start = std::chrono::steady_clock::now();
        auto last = start;
        std::uint64_t objects0 = objects_.load(), bytes0 = bytes_.load();
        auto stats0 = c_.stats();
        for (int second = 1;; ++second) {
            const auto next = start + std::chrono::seconds(second);
            {
                std::unique_lock lk(mu_);
                if (cv_.wait_until(lk, next, [this] { return stop_; })) return; // a partial second is left out
            }
            const auto now = std::chrono::steady_clock::now();
            const std::uint64_t objects = objects_.load(), bytes = bytes_.load();
            const auto stats = c_.stats();
            const double secs = std::chrono::duration<double>(now - last).count();
            cb::json_line()
                .add("bench", "s3-get-second")
                .add("repeat", rep_)
                .add("t_s", std::chrono::duration<double>(now - start).count())
                .add("unix_s", std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(), 15)
                .add("objects", objects - objects0)
                .add("objects_per_s", static_cast<double>(objects - objects0) / secs)
                .add("MB_per_s", static_cast<double>(bytes - bytes0) / 1e6 / secs)
                .add("requests", stats.requests - stats0.requests)
                .add("retries", stats.retries - stats0.retries)
                .add("throttles", stats.throttled - stats0.throttled)
                .add("limit", stats.limit)
                .add("rate", stats.rate)
                .print();
            last = now;
            objects0 = objects;
            bytes0 = bytes;
            stats0 = stats;
        }
    }

    const s3::client& c_;
    const std::size_t rep_;
    const std::atomic<std::uint64_t>& objects_;
    const std::atomic<std::uint64_t>& bytes_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool stop_ = false;
    std::thread thread_;
};
int cmd_s3_get(const s3_args& a)
{
    cv::runtime rt({.io_threads = a.io_threads, .buffer_pool_bytes = a.pool_mb << 20});
    s3::client c(rt, config_of(a), client_options_of(a));
    std::fprintf(stderr, "s3-get: %s\n", c.cfg().describe().c_str());

    s3::object_list list;
    if (!a.index.empty()) {
        list = cv::location(a.index).is_s3() ? s3::read_index(c, a.index, a.prefix) : s3::read_index(a.bucket, a.index, a.prefix);
        if (list.bucket.empty()) list.bucket = a.bucket;
    } else {
        cb::stopwatch t;
        list = s3::list_objects(c, a.bucket, a.prefix);
        std::fprintf(stderr, "s3-get: listed %zu objects under s3://%s/%s in %.2f s\n", list.size(), a.bucket.c_str(), a.prefix.c_str(),
                     t.seconds());
    }
    if (a.limit && list.objects.size() > a.limit) list.objects.resize(a.limit);
    if (list.empty()) throw std::runtime_error("no objects to read (empty listing or index)");
    auto shared = std::make_shared<const s3::object_list>(std::move(list));

    int rc = 0;
    for (std::size_t rep = 0; rep < a.repeat; ++rep) {
        cb::concurrent_histogram lat;
        s3::source_options so{.concurrency = a.concurrency,
                              .ordered = a.ordered,
                              .errors = a.on_error == "skip" ? cv::on_error::skip : cv::on_error::fail,
                              .capacity = std::max<std::size_t>(a.concurrency, 64),
                              .on_read = [&lat](const cv::blob&, std::chrono::nanoseconds d) { lat.record(d); }};
        if (!a.cache.empty()) so.cache = cv::store::cache_options{.dir = a.cache, .max_bytes = a.cache_max_bytes};
        auto pipe = s3::objects(c, shared, std::move(so)).on(rt);
        const auto cache0 = cv::store::cache_stats_of(a.cache);
        const auto stats0 = c.stats();
        const auto before = cb::usage_now();
        cb::stopwatch clock;
        cb::progress progress("s3-get", shared->size());
        std::uint64_t objects = 0, bytes = 0;
        std::atomic<std::uint64_t> arrived{0}, arrived_bytes{0}; // for the timeline's thread
        std::optional<timeline> seconds;
        if (a.timeline) seconds.emplace(c, rep, arrived, arrived_bytes);
        auto run = pipe.run();
        for (auto& b : run) {
            ++objects;
            bytes += b.data.size();
            arrived.store(objects, std::memory_order_relaxed);
            arrived_bytes.store(bytes, std::memory_order_relaxed);
            progress.update(objects, bytes);
        }
        const double secs = clock.seconds();
        seconds.reset();
        const auto usage = cb::usage_now() - before;
        progress.finish();
        const auto stats = c.stats();
        const auto h = lat.merged();
        const std::uint64_t errors = run.stats().skipped;
        const std::uint64_t gets = stats.requests - stats0.requests;
        cb::json_line line;
        line.add("bench", "s3-get")
            .add("engine", "conveyor")
            .add("endpoint", c.cfg().endpoint.url())
            .add("bucket", shared->bucket)
            .add("concurrency", a.concurrency)
            .add("adaptive", !a.fixed_concurrency)
            .add("part_size", a.part_size)
            .add("io_threads", rt.io_lanes())
            .add("repeat", rep)
            .add("objects", objects)
            .add("bytes", bytes)
            .add("seconds", secs)
            .add("objects_per_s", static_cast<double>(objects) / secs)
            .add("MB_per_s", static_cast<double>(bytes) / 1e6 / secs)
            .add("p50_ms", h.percentile(50) / 1e6)
            .add("p99_ms", h.percentile(99) / 1e6)
            .add("max_ms", static_cast<double>(h.max()) / 1e6);
        add_s3_counters(line, stats, stats0, a.no_checksums);
        line.add("retries_refused", stats.retries_refused - stats0.retries_refused)
            .add("rate", stats.rate)
            .add("lowest_rate", stats.lowest_rate)
            .add("errors", errors)
            .add("cpu_s", usage.cpu_s())
            .add("cpu_us_per_get", gets ? usage.cpu_s() * 1e6 / static_cast<double>(gets) : 0.0)
            .add("cache_hits", cv::store::cache_stats_of(a.cache).hits - cache0.hits)
            .add("cache_misses", cv::store::cache_stats_of(a.cache).misses - cache0.misses)
            .print();
        std::fprintf(stderr,
                     "s3-get: %llu objects, %.1f MB in %.2f s: %.0f objects/s, %.1f MB/s | latency p50 %.1f ms p99 %.1f ms max %.1f ms | "
                     "%llu requests, %llu retries, %llu throttled, %llu errors | checksums: %llu verified, %llu failed, %llu "
                     "skipped, %llu absent | CPU %.2f s (%.1f us per GET)\n",
                     static_cast<unsigned long long>(objects), static_cast<double>(bytes) / 1e6, secs, static_cast<double>(objects) / secs,
                     static_cast<double>(bytes) / 1e6 / secs, h.percentile(50) / 1e6, h.percentile(99) / 1e6,
                     static_cast<double>(h.max()) / 1e6, static_cast<unsigned long long>(gets),
                     static_cast<unsigned long long>(stats.retries - stats0.retries),
                     static_cast<unsigned long long>(stats.throttled - stats0.throttled), static_cast<unsigned long long>(errors),
                     static_cast<unsigned long long>(stats.checksums_verified - stats0.checksums_verified),
                     static_cast<unsigned long long>(stats.checksum_failures - stats0.checksum_failures),
                     static_cast<unsigned long long>(stats.checksums_skipped - stats0.checksums_skipped),
                     static_cast<unsigned long long>(stats.checksums_absent - stats0.checksums_absent), usage.cpu_s(),
                     gets ? usage.cpu_s() * 1e6 / static_cast<double>(gets) : 0.0);
        if (a.fixed_concurrency)
            std::fprintf(stderr, "s3-get: fixed concurrency %zu (no adaptive throttling)\n", a.concurrency);
        else
            std::fprintf(stderr, "s3-get: in flight allowed %.1f (lowest %.1f), send rate allowed %s (lowest %s)\n", stats.limit,
                         stats.lowest_limit, stats.rate > 0 ? (std::to_string(static_cast<long>(stats.rate)) + "/s").c_str() : "unlimited",
                         stats.lowest_rate > 0 ? (std::to_string(static_cast<long>(stats.lowest_rate)) + "/s").c_str() : "-");
        if (errors) rc = 1;
    }
    return rc;
}

int cmd_s3_put(const s3_args& a)
{
    cv::runtime rt({.io_threads = a.io_threads});
    s3::client c(rt, config_of(a), client_options_of(a));
    std::fprintf(stderr, "s3-put: %s\n", c.cfg().describe().c_str());
    auto listing = std::make_shared<const cv::file::listing>(cv::file::walk(a.dir));
    if (listing->entries.empty()) throw std::runtime_error("no files under " + a.dir);
    std::uint64_t total = 0;
    for (const auto& e : listing->entries) total += static_cast<std::uint64_t>(std::max<std::int64_t>(e.size, 0));
    const auto before = cb::usage_now();
    cb::stopwatch clock;
    cb::progress progress("s3-put", listing->size());
    std::uint64_t objects = 0, bytes = 0;
    auto stored = (cv::file::files(listing, {.concurrency = 16}) |
                   s3::upload(c, a.bucket, {.prefix = a.prefix, .concurrency = a.concurrency}))
                      .on(rt);
    for (const auto& r : stored) {
        ++objects;
        bytes += r.bytes;
        progress.update(objects, bytes);
    }
    const double secs = clock.seconds();
    const auto usage = cb::usage_now() - before;
    progress.finish();
    cb::json_line()
        .add("bench", "s3-put")
        .add("engine", "conveyor")
        .add("endpoint", c.cfg().endpoint.url())
        .add("bucket", a.bucket)
        .add("concurrency", a.concurrency)
        .add("objects", objects)
        .add("bytes", bytes)
        .add("seconds", secs)
        .add("objects_per_s", static_cast<double>(objects) / secs)
        .add("MB_per_s", static_cast<double>(bytes) / 1e6 / secs)
        .add("retries", c.stats().retries)
        .add("errors", 0)
        .add("cpu_s", usage.cpu_s())
        .print();
    std::fprintf(stderr, "s3-put: %llu objects, %.1f MB in %.2f s: %.0f objects/s, %.1f MB/s, %llu retries\n",
                 static_cast<unsigned long long>(objects), static_cast<double>(bytes) / 1e6, secs, static_cast<double>(objects) / secs,
                 static_cast<double>(bytes) / 1e6 / secs, static_cast<unsigned long long>(c.stats().retries));
    return objects == listing->size() && bytes == total ? 0 : 1;
}

void add_common(CLI::App& sub, s3_args& a)
{
    sub.add_option("--endpoint", a.endpoint, "S3 endpoint URL, e.g. http://127.0.0.1:9000 (default: AWS_ENDPOINT_URL, the profile, or AWS)");
    sub.add_option("--bucket", a.bucket, "bucket")->required();
    sub.add_option("--region", a.region, "region (default: AWS_REGION, the profile, or us-east-1)");
    sub.add_option("--concurrency", a.concurrency, "requests in flight")->check(CLI::PositiveNumber)->capture_default_str();
    sub.add_option("--io-threads", a.io_threads, "the runtime's I/O threads (0: its default)")->capture_default_str();
    sub.add_option("--attempts", a.attempts, "attempts per request before giving up")->capture_default_str();
    sub.add_flag("--anonymous", a.anonymous, "send unsigned requests (public buckets)");
}

} // namespace

std::function<int()> add_s3_subcommands(CLI::App& app)
{
    auto get = std::make_shared<s3_args>();
    auto put = std::make_shared<s3_args>();
    auto* g = app.add_subcommand("s3-get", "GET every object of a prefix or an index through conveyor's S3 source");
    add_common(*g, *get);
    g->add_option("--prefix", get->prefix, "list and read every object under this prefix (with --index: put before each key)");
    g->add_option("--index", get->index, "index: a JSON array of keys, a local file or s3://bucket/key");
    g->add_option("--limit", get->limit, "read only the first N objects (0: all)")->capture_default_str();
    g->add_option("--part-size", get->part_size, "objects larger than this come in parallel ranged parts (0: never)")->capture_default_str();
    g->add_option("--parts-in-flight", get->parts_in_flight, "ranged parts of one object in flight")->capture_default_str();
    g->add_option("--repeat", get->repeat, "passes over the objects")->check(CLI::PositiveNumber)->capture_default_str();
    g->add_flag("--ordered", get->ordered, "deliver in list order (default: completion order)");
    g->add_flag("--no-checksums", get->no_checksums, "neither ask for nor verify the objects' checksums (to compare their cost)");
    g->add_option("--on-error", get->on_error,
                  "fail: the first object that cannot be read (given up after retries, or failing its checksum twice) ends the run, "
                  "named; skip: it is counted in errors and the run goes on")
        ->check(CLI::IsMember({"fail", "skip"}))
        ->capture_default_str();
    g->add_flag("--fixed-concurrency", get->fixed_concurrency,
                "no adaptive throttling (throttle.adaptive = false): only --concurrency bounds the requests in flight");
    g->add_flag("--timeline", get->timeline, "also print a JSON line (bench s3-get-second) for every second of each pass");
    g->add_option("--cache", get->cache, "read through a node-local cache in this folder (store::cached_store)");
    g->add_option("--cache-max-bytes", get->cache_max_bytes, "the cache's size limit in bytes (0: none)")->capture_default_str();
    g->add_option("--pool-MB", get->pool_mb,
                  "idle memory the buffer pool may keep for reuse; with --repeat, a pool larger than the objects "
                  "measures reads into memory that is already faulted in")
        ->capture_default_str();

    auto* u = app.add_subcommand("s3-put", "upload a directory's files (recursively) as objects");
    add_common(*u, *put);
    u->add_option("--dir", put->dir, "directory to upload")->required()->check(CLI::ExistingDirectory);
    u->add_option("--prefix", put->prefix, "put before each relative path to make the key");
    u->add_flag("--no-checksums", put->no_checksums, "send no CRC64NVME checksum with each object and part");

    return [g, u, get, put]() -> int {
        if (*g) return cmd_s3_get(*get);
        if (*u) return cmd_s3_put(*put);
        return -1;
    };
}
