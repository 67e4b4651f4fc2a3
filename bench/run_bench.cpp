// run_bench.cpp — `conveyor-bench run` (see run_bench.hpp): sources and stages built from a
// configuration, epochs run and observed through the core metrics, sweeps, JSON lines and
// the summary tables. The HTML report is built in run_report.cpp.
#include "run_bench.hpp"

#include "support/json_line.hpp"
#include "support/timer.hpp"
#include <conveyor/core/location.hpp>
#include <conveyor/core/buffer.hpp>
#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/core/source.hpp>
#include <conveyor/core/stages.hpp>
#include <conveyor/file/index.hpp>
#include <conveyor/file/source.hpp>
#include <conveyor/image/batch.hpp>
#include <conveyor/image/stage.hpp>
#include <conveyor/s3/client.hpp>
#include <conveyor/s3/source.hpp>
#include <conveyor/shard/list.hpp>
#include <conveyor/shard/source.hpp>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/serialize.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <type_traits>

namespace conveyor::bench::run {

namespace {

namespace asio = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;
namespace ci = conveyor::image;

// ---- the data: listed once, reused by every run that reads the same storage --------------

/// The storage's runtime, client and listing. Runs of a sweep share it unless the swept
/// field changes what it holds (see `key_of`).
struct prepared {
    std::unique_ptr<runtime> rt;
    std::optional<s3::client> client;
    std::shared_ptr<const file::listing> files;         // fs
    std::shared_ptr<const s3::object_list> objects;     // s3
    std::vector<shard::shard_ref> shards;               // access "shards"
    std::optional<file::dataset> file_ds;               // fs, access "random"
    std::optional<s3::dataset> s3_ds;                   // s3, access "random"
    std::uint64_t count = 0;                            // items (samples of shards: where known)
    std::string describe;                               // one line for people
};

/// What a prepared storage depends on: a sweep over in_flight reuses the listing.
std::string key_of(const run_config& c, std::size_t connections)
{
    json::object k;
    k["storage"] = c.effective.at("storage");
    k["dataset"] = c.effective.at("dataset");
    k["listing_workers"] = c.listing_workers;
    k["io_threads"] = c.io_threads;
    k["threads"] = c.work.threads;
    k["access"] = c.access == "shards" ? "shards" : "items";
    k["connections"] = connections;
    return json::serialize(k);
}

/// Class ids made consistent across several listings (several dirs or prefixes): names
/// sorted over all of them, and each part's ids mapped to those.
struct class_union {
    std::vector<std::string> names;
    std::vector<std::vector<std::int64_t>> remap; // per part: old id -> new id
};

class_union unify_classes(const std::vector<std::vector<std::string>>& parts)
{
    class_union u;
    for (const auto& p : parts) u.names.insert(u.names.end(), p.begin(), p.end());
    std::sort(u.names.begin(), u.names.end());
    u.names.erase(std::unique(u.names.begin(), u.names.end()), u.names.end());
    for (const auto& p : parts) {
        auto& m = u.remap.emplace_back();
        for (const auto& n : p) m.push_back(std::lower_bound(u.names.begin(), u.names.end(), n) - u.names.begin());
    }
    return u;
}

file::listing list_fs(const run_config& c)
{
    file::walk_options wo{.extensions = c.dataset.extensions, .labels = c.dataset.labels};
    if (!c.dataset.classes.empty()) wo.classes = file::read_classes(c.dataset.classes);
    if (!c.dataset.index.empty()) {
        if (c.storage.dirs.size() != 1)
            throw config_error("dataset.index: an index holds paths relative to one directory; storage.dirs has " +
                               std::to_string(c.storage.dirs.size()));
        return file::read_index(c.dataset.index, c.storage.dirs.front(), wo);
    }
    if (c.storage.dirs.size() == 1) return file::walk(c.storage.dirs.front(), wo);
    std::vector<file::listing> parts;
    std::vector<std::vector<std::string>> names;
    for (const auto& d : c.storage.dirs) {
        parts.push_back(file::walk(d, wo));
        names.push_back(parts.back().classes);
    }
    const auto u = unify_classes(names);
    file::listing all;
    all.classes = u.names;
    for (std::size_t p = 0; p < parts.size(); ++p)
        for (auto e : parts[p].entries) {
            e.path = (parts[p].root / e.path).string();
            if (e.label >= 0 && static_cast<std::size_t>(e.label) < u.remap[p].size()) e.label = u.remap[p][e.label];
            all.entries.push_back(std::move(e));
        }
    return all;
}

s3::object_list list_s3(const run_config& c, const s3::client& client)
{
    std::vector<file::class_info> classes;
    if (!c.dataset.classes.empty()) classes = file::read_classes(c.dataset.classes);
    std::vector<std::string> prefixes = c.storage.prefixes.empty() ? std::vector<std::string>{""} : c.storage.prefixes;
    std::vector<s3::object_list> parts;
    if (!c.dataset.index.empty()) {
        auto l = location(c.dataset.index).is_s3() ? s3::read_index(client, c.dataset.index)
                                                      : s3::read_index(c.storage.bucket, c.dataset.index);
        if (l.bucket.empty()) l.bucket = c.storage.bucket;
        if (c.dataset.labels) s3::assign_labels(l, prefixes.front(), classes);
        parts.push_back(std::move(l));
    } else {
        for (const auto& p : prefixes)
            parts.push_back(s3::list_objects(client, c.storage.bucket, p,
                                             s3::listing_options{.parallel = static_cast<unsigned>(c.listing_workers),
                                                                 .labels = c.dataset.labels,
                                                                 .classes = classes}));
    }
    std::vector<std::vector<std::string>> names;
    for (const auto& p : parts) names.push_back(p.classes);
    const auto u = unify_classes(names);
    s3::object_list all;
    all.bucket = parts.front().bucket.empty() ? c.storage.bucket : parts.front().bucket;
    const bool labelled = std::all_of(parts.begin(), parts.end(), [](const auto& p) { return !p.labels.empty(); });
    if (labelled) all.classes = u.names;
    for (std::size_t p = 0; p < parts.size(); ++p)
        for (std::size_t i = 0; i < parts[p].objects.size(); ++i) {
            if (!file::has_extension(parts[p].objects[i].key, c.dataset.extensions)) continue; // walk's rule
            all.objects.push_back(parts[p].objects[i]);
            if (labelled) {
                const auto l = parts[p].labels[i];
                all.labels.push_back(l >= 0 && static_cast<std::size_t>(l) < u.remap[p].size() ? u.remap[p][l] : l);
            }
        }
    if (all.objects.empty()) {
        std::string where;
        for (const auto& p : prefixes) where += (where.empty() ? "" : ", ") + ("s3://" + c.storage.bucket + "/" + p);
        throw config_error("no objects to read under " + (c.dataset.index.empty() ? where : c.dataset.index) +
                           (c.dataset.extensions.empty() ? std::string() : " with the endings of dataset.extensions") +
                           (c.dataset.labels ? " (with dataset.labels, objects directly under a prefix are left out)" : ""));
    }
    return all;
}

std::vector<shard::shard_ref> list_shards(const run_config& c, const s3::client* client)
{
    std::vector<std::string> specs = c.dataset.shards;
    if (specs.empty() && !c.dataset.index.empty()) specs.push_back(c.dataset.index);
    if (specs.empty() && c.storage.type == "fs") {
        const std::vector<std::string> endings = c.dataset.extensions.empty() ? std::vector<std::string>{".tar", ".tar.gz", ".tgz"}
                                                                              : c.dataset.extensions;
        for (const auto& d : c.storage.dirs) {
            const auto l = file::walk(d, {.extensions = endings});
            for (std::size_t i = 0; i < l.size(); ++i) specs.push_back(l.full_path(i));
        }
        if (specs.empty())
            throw config_error("access \"shards\": no .tar shards in storage.dirs (set dataset.shards to a brace pattern or an index)");
    }
    if (specs.empty() && c.storage.type == "s3")
        for (auto p : c.storage.prefixes.empty() ? std::vector<std::string>{""} : c.storage.prefixes) {
            if (!p.empty() && p.back() != '/') p += '/';
            specs.push_back("s3://" + c.storage.bucket + "/" + p);
        }
    shard::list_options lo{.s3 = client};
    if (!c.dataset.extensions.empty()) lo.suffixes = c.dataset.extensions;
    return shard::resolve(specs, lo);
}

std::shared_ptr<prepared> prepare(const run_config& c, std::size_t connections, std::FILE* err)
{
    auto p = std::make_shared<prepared>();
    runtime_options ro;
    ro.io_threads = c.io_threads;
    ro.compute_threads = c.work.threads;
    ro.log = [err](std::string_view line) { std::fprintf(err, "%.*s\n", static_cast<int>(line.size()), line.data()); };
    p->rt = std::make_unique<runtime>(ro);
    const bool wants_s3 = c.storage.type == "s3" || shard::names_s3(c.dataset.shards);
    if (wants_s3) {
        s3::config_options co;
        co.endpoint_url = c.storage.endpoint;
        co.region = c.storage.region;
        co.anonymous = c.storage.anonymous;
        if (!c.storage.credentials.access_key_id.empty())
            co.creds = s3::credentials{c.storage.credentials.access_key_id, c.storage.credentials.secret_access_key,
                                       c.storage.credentials.session_token, "the benchmark configuration"};
        if (!c.storage.endpoint.empty()) co.style = s3::addressing::path;
        s3::client_options cl;
        cl.http.max_connections = std::max<std::size_t>(connections, 16);
        p->client.emplace(*p->rt, co, cl);
        std::fprintf(err, "run: s3: %s\n", p->client->cfg().describe().c_str());
    }
    stopwatch t;
    if (c.access == "shards") {
        p->shards = list_shards(c, p->client ? &*p->client : nullptr);
        std::uint64_t bytes = 0, samples = 0;
        for (const auto& s : p->shards) {
            bytes += static_cast<std::uint64_t>(std::max<std::int64_t>(0, s.size));
            samples += static_cast<std::uint64_t>(std::max<std::int64_t>(0, s.samples));
        }
        p->count = samples;
        p->describe = std::to_string(p->shards.size()) + " shards" + (bytes ? ", " + std::to_string(bytes / 1000000) + " MB" : "");
    } else if (c.storage.type == "fs") {
        auto l = list_fs(c);
        if (l.entries.empty()) {
            std::string dirs;
            for (const auto& d : c.storage.dirs) dirs += (dirs.empty() ? "" : ", ") + d;
            throw config_error("no files to read in " + dirs +
                               (c.dataset.extensions.empty() ? std::string() : " with the endings of dataset.extensions") +
                               (c.dataset.labels ? " (with dataset.labels, files directly in a directory are left out: "
                                                   "set dataset.labels=false to read them)"
                                                 : ""));
        }
        std::uint64_t bytes = 0;
        for (const auto& e : l.entries) bytes += static_cast<std::uint64_t>(std::max<std::int64_t>(0, e.size));
        p->count = l.size();
        p->describe = std::to_string(l.size()) + " files in " + std::to_string(l.classes.size()) + " classes, " +
                      std::to_string(bytes / 1000000) + " MB";
        p->files = std::make_shared<const file::listing>(std::move(l));
        if (c.access == "random") p->file_ds.emplace(*p->files, *p->rt);
    } else if (c.storage.type == "s3") {
        auto l = list_s3(c, *p->client);
        std::uint64_t bytes = 0;
        for (const auto& o : l.objects) bytes += static_cast<std::uint64_t>(std::max<std::int64_t>(0, o.size));
        p->count = l.size();
        p->describe = std::to_string(l.size()) + " objects in s3://" + l.bucket + " (" + std::to_string(l.classes.size()) +
                      " classes, " + std::to_string(bytes / 1000000) + " MB)";
        if (c.access == "random") p->s3_ds.emplace(*p->client, l);
        p->objects = std::make_shared<const s3::object_list>(std::move(l));
    } else {
        p->count = c.storage.items;
        char latency[32];
        std::snprintf(latency, sizeof latency, "%g", c.storage.latency_ms);
        p->describe = std::to_string(c.storage.items) + " synthetic items of " + std::to_string(c.storage.size) + " bytes, " +
                      latency + " ms each";
    }
    std::fprintf(err, "run: %s (listed in %.2f s)\n", p->describe.c_str(), t.seconds());
    return p;
}

// ---- sources ------------------------------------------------------------------------------

/// The synthetic store's read: waits `latency` (a timer on the I/O lane, no CPU), then
/// gives `size` bytes.
asio::awaitable<blob> synthetic_get(runtime& rt, std::uint64_t i, std::size_t size, std::chrono::nanoseconds latency)
{
    asio::steady_timer wait(co_await asio::this_coro::executor, latency);
    co_await wait.async_wait(asio::use_awaitable);
    blob b;
    b.key = "item-" + std::to_string(i);
    b.data = rt.buffers().acquire(size);
    std::memset(b.data.data(), static_cast<int>(i & 0xff), b.data.size());
    b.origin = "synthetic://" + b.key;
    b.index = i;
    co_return b;
}

/// The order of one epoch's random reads: permutations of the items (seeded by seed and
/// epoch), one after another until `n` reads.
std::shared_ptr<const std::vector<std::uint64_t>> random_order(std::uint64_t items, std::uint64_t n, std::uint64_t seed,
                                                               std::uint64_t epoch)
{
    auto order = std::make_shared<std::vector<std::uint64_t>>();
    order->reserve(n);
    conveyor::detail::splitmix64 rng(seed * 0x9e3779b97f4a7c15ULL + epoch);
    std::vector<std::uint64_t> perm(items);
    while (order->size() < n) {
        std::iota(perm.begin(), perm.end(), 0);
        for (std::uint64_t i = items; i > 1; --i) std::swap(perm[i - 1], perm[rng.below(i)]);
        for (std::uint64_t i = 0; i < items && order->size() < n; ++i) order->push_back(perm[i]);
    }
    return order;
}

/// The source of blobs the configuration reads (sequential or random), for one epoch.
pipeline<blob> blob_source(const run_config& c, prepared& p, std::uint64_t epoch)
{
    const std::uint64_t n = c.samples ? std::min(c.samples, p.count) : p.count;
    const std::uint64_t reads = c.access == "random" && c.samples ? c.samples : n; // random reads may repeat items
    const std::size_t capacity = std::max<std::size_t>(c.in_flight, default_stream_capacity);
    runtime* rt = p.rt.get();
    if (c.access == "random") {
        auto order = random_order(p.count, reads, c.seed, epoch);
        source_settings<blob> s{.concurrency = c.in_flight, .ordered = false, .capacity = capacity};
        if (p.file_ds) {
            file::dataset* ds = &*p.file_ds;
            return keyed_source<blob>("get", reads, std::move(s), [ds, order](run_context&) {
                return [ds, order](std::uint64_t i) { return ds->async_get(static_cast<std::size_t>((*order)[i])); };
            });
        }
        if (p.s3_ds) {
            const s3::dataset* ds = &*p.s3_ds;
            return keyed_source<blob>("get", reads, std::move(s), [ds, order](run_context&) {
                return [ds, order](std::uint64_t i) { return ds->async_get(static_cast<std::size_t>((*order)[i])); };
            });
        }
        const auto latency = std::chrono::nanoseconds(static_cast<std::int64_t>(c.storage.latency_ms * 1e6));
        const auto size = static_cast<std::size_t>(c.storage.size);
        return keyed_source<blob>("get", reads, std::move(s), [rt, order, size, latency](run_context&) {
            return [rt, order, size, latency](std::uint64_t i) { return synthetic_get(*rt, (*order)[i], size, latency); };
        });
    }
    if (p.files) {
        auto l = p.files;
        if (n < l->size()) {
            auto part = std::make_shared<file::listing>();
            part->root = l->root;
            part->classes = l->classes;
            part->entries.assign(l->entries.begin(), l->entries.begin() + static_cast<std::ptrdiff_t>(n));
            l = std::move(part);
        }
        return file::files(l, {.concurrency = c.in_flight, .ordered = false, .capacity = capacity});
    }
    if (p.objects) {
        auto l = p.objects;
        if (n < l->size()) {
            auto part = std::make_shared<s3::object_list>(*l);
            part->objects.resize(n);
            if (!part->labels.empty()) part->labels.resize(n);
            l = std::move(part);
        }
        return s3::objects(*p.client, l, {.concurrency = c.in_flight, .ordered = false, .capacity = capacity});
    }
    const auto latency = std::chrono::nanoseconds(static_cast<std::int64_t>(c.storage.latency_ms * 1e6));
    const auto size = static_cast<std::size_t>(c.storage.size);
    return keyed_source<blob>("synthetic", n, {.concurrency = c.in_flight, .ordered = false, .capacity = capacity},
                              [rt, size, latency](run_context&) {
                                  return [rt, size, latency](std::uint64_t i) { return synthetic_get(*rt, i, size, latency); };
                              });
}

ci::decode_image_options decode_options_of(const run_config& c)
{
    ci::decode_image_options d;
    d.decode.size = {c.work.size, c.work.size};
    d.decode.crop = c.work.crop == "none" ? ci::crop_mode::none : c.work.crop == "center" ? ci::crop_mode::center : ci::crop_mode::random_resized;
    d.decode.seed = c.seed;
    return d;
}

// ---- one epoch --------------------------------------------------------------------------

/// Items a delivered value stands for: a batch's images, else 1.
template <class T>
std::uint64_t samples_in(const T& x)
{
    if constexpr (std::is_same_v<T, ci::image_batch>) return x.size();
    else return 1;
}


/// The progress line: items/s and MB/s of the source over the last interval, the bottleneck.
class progress_line {
public:
    progress_line(std::string label, std::FILE* err, bool quiet)
        : label_(std::move(label)), err_(err), quiet_(quiet), tty_(::isatty(::fileno(err)) == 1),
          every_(tty_ ? std::chrono::milliseconds(250) : std::chrono::seconds(5)), next_(every_)
    {
    }
    void update(const stats_snapshot& s)
    {
        if (quiet_ || s.elapsed < next_) return;
        next_ = s.elapsed + every_;
        const stats_snapshot recent = last_.stages.empty() ? s : s.since(last_);
        const stage_stats* src = source_of(recent);
        const double secs = std::max(1e-9, std::chrono::duration<double>(recent.elapsed).count());
        const auto neck = bottleneck(recent);
        char buf[320];
        std::snprintf(buf, sizeof buf, "%s: %.1f s, %llu items, %.0f items/s, %.1f MB/s, bottleneck: %s", label_.c_str(),
                      std::chrono::duration<double>(s.elapsed).count(),
                      static_cast<unsigned long long>(src ? source_of(s)->items : 0), src ? static_cast<double>(src->items) / secs : 0.0,
                      src ? static_cast<double>(src->bytes) / 1e6 / secs : 0.0, neck ? recent.stages[*neck].name.c_str() : "consumer");
        if (tty_) std::fprintf(err_, "\r%s\033[K", buf);
        else std::fprintf(err_, "%s\n", buf);
        std::fflush(err_);
        printed_ = true;
        last_ = s;
    }
    void finish()
    {
        if (printed_ && tty_) std::fprintf(err_, "\n");
    }

private:
    std::string label_;
    std::FILE* err_;
    bool quiet_, tty_;
    std::chrono::nanoseconds every_, next_; // nothing printed for runs shorter than one interval
    stats_snapshot last_;
    bool printed_ = false;
};

template <class T>
epoch_result run_epoch(pipeline<T> pipe, const run_config& c, std::size_t epoch, const std::string& label, std::FILE* err, bool quiet)
{
    epoch_result r;
    r.epoch = epoch;
    std::mutex mu;
    std::vector<stats_snapshot> series;
    progress_line line(label + (c.epochs > 1 ? " epoch " + std::to_string(epoch) : std::string()), err, quiet);
    pipe.on_stats(std::chrono::milliseconds(c.stats_interval_ms), [&](const stats_snapshot& s) {
        std::lock_guard lk(mu);
        series.push_back(s);
        line.update(s);
    });
    stopwatch clock;
    {
        auto run = pipe.run(epoch);
        for (auto& x : run) {
            r.items += samples_in(x);
            if (c.seconds > 0 && clock.seconds() >= c.seconds) break;
        }
        r.seconds = clock.seconds();
        run.stop();
        r.final = run.snapshot();
    }
    {
        std::lock_guard lk(mu);
        r.series = std::move(series);
        line.finish();
    }
    // The final snapshot also reached the callback: keep the series to the run's own time.
    while (!r.series.empty() && r.series.back().elapsed > r.final.elapsed) r.series.pop_back();
    if (const stage_stats* src = source_of(r.final)) r.bytes = src->bytes;
    return r;
}

/// Runs every epoch of `c` on the prepared storage.
run_result run_config_epochs(const run_config& c, prepared& p, const std::string& label, std::FILE* err, bool quiet)
{
    run_result rr;
    rr.config = c;
    rr.label = label;
    for (std::size_t e = 0; e < c.epochs; ++e) {
        epoch_result er;
        if (c.access == "shards") {
            shard::source_options so{.order = {.seed = c.seed}};
            so.shards_in_flight = static_cast<unsigned>(std::min<std::size_t>(c.in_flight, std::max<std::size_t>(1, p.shards.size())));
            if (p.client) so.s3 = *p.client;
            auto src = shard::shards(p.shards, so).on(*p.rt);
            auto run_it = [&](auto pipe) {
                if (c.samples) return run_epoch(std::move(pipe) | take(c.samples), c, e, label, err, quiet);
                return run_epoch(std::move(pipe), c, e, label, err, quiet);
            };
            if (c.work.kind == "read") er = run_it(std::move(src));
            else if (c.work.kind == "decode") er = run_it(std::move(src) | ci::decode_image(decode_options_of(c)));
            else er = run_it(std::move(src) | ci::decode_batches(decode_options_of(c), {.size = c.work.batch}));
        } else {
            auto src = blob_source(c, p, e).on(*p.rt);
            if (c.work.kind == "read") er = run_epoch(std::move(src), c, e, label, err, quiet);
            else if (c.work.kind == "decode") er = run_epoch(std::move(src) | ci::decode_image(decode_options_of(c)), c, e, label, err, quiet);
            else er = run_epoch(std::move(src) | ci::decode_batches(decode_options_of(c), {.size = c.work.batch}), c, e, label, err, quiet);
        }
        rr.epochs.push_back(std::move(er));
    }
    return rr;
}

// ---- results ------------------------------------------------------------------------------

double ms(double ns)
{
    return ns / 1e6;
}

/// JSON keys from stage names: unique, even when two stages share a name.
std::vector<std::string> stage_keys(const stats_snapshot& s)
{
    std::vector<std::string> keys;
    std::map<std::string, int> seen;
    for (const auto& st : s.stages) {
        const int n = seen[st.name]++;
        keys.push_back(n ? st.name + "_" + std::to_string(n + 1) : st.name);
    }
    return keys;
}

std::string epoch_line(const run_result& rr, const epoch_result& e, const std::string& case_name,
                       const std::optional<sweep_spec>& sweep, double sweep_value)
{
    const auto& c = rr.config;
    json_line l;
    l.add("bench", "run");
    if (!case_name.empty()) l.add("case", case_name);
    l.add("storage", c.storage.type).add("access", c.access).add("work", c.work.kind).add("in_flight", c.in_flight);
    if (sweep) l.add("sweep_field", sweep->field).add("sweep_value", sweep_value);
    l.add("epoch", e.epoch)
        .add("items", e.items)
        .add("bytes", e.bytes)
        .add("seconds", e.seconds)
        .add("items_per_s", e.seconds > 0 ? static_cast<double>(e.items) / e.seconds : 0.0)
        .add("MB_per_s", e.seconds > 0 ? static_cast<double>(e.bytes) / 1e6 / e.seconds : 0.0);
    if (const stage_stats* src = source_of(e.final); src && src->latency.count) {
        l.add("latency_p50_ms", ms(src->latency.quantile_ns(0.5)), 4)
            .add("latency_p90_ms", ms(src->latency.quantile_ns(0.9)), 4)
            .add("latency_p99_ms", ms(src->latency.quantile_ns(0.99)), 4)
            .add("latency_mean_ms", ms(src->latency.mean_ns()), 4);
    }
    const auto keys = stage_keys(e.final);
    for (std::size_t i = 0; i < e.final.stages.size(); ++i) {
        const auto& st = e.final.stages[i];
        l.add(keys[i] + "_busy", st.busy_share(), 3).add(keys[i] + "_starved", st.starved_share(), 3).add(keys[i] + "_blocked", st.blocked_share(), 3);
    }
    const auto neck = bottleneck(e.final);
    l.add("bottleneck", neck ? e.final.stages[*neck].name : std::string("consumer"));
    return l.str();
}

void print_table(const epoch_result& e, const std::string& title, std::FILE* err)
{
    const auto neck = bottleneck(e.final);
    std::fprintf(err, "%s: %llu items in %.2f s: %.0f items/s, %.1f MB/s\n", title.c_str(), static_cast<unsigned long long>(e.items),
                 e.seconds, e.seconds > 0 ? static_cast<double>(e.items) / e.seconds : 0.0,
                 e.seconds > 0 ? static_cast<double>(e.bytes) / 1e6 / e.seconds : 0.0);
    std::fprintf(err, "  %-16s %10s %9s %6s %8s %8s  %s\n", "stage", "items/s", "MB/s", "busy", "starved", "blocked", "p50/p99 latency");
    for (std::size_t i = 0; i < e.final.stages.size(); ++i) {
        const auto& st = e.final.stages[i];
        const double secs = std::chrono::duration<double>(st.elapsed).count();
        char mbps[32] = "-", lat[48] = "-";
        if (st.bytes_known && secs > 0) std::snprintf(mbps, sizeof mbps, "%.1f", static_cast<double>(st.bytes) / 1e6 / secs);
        if (st.is_source && st.latency.count)
            std::snprintf(lat, sizeof lat, "%.2f / %.2f ms", ms(st.latency.quantile_ns(0.5)), ms(st.latency.quantile_ns(0.99)));
        std::fprintf(err, "  %-16s %10.0f %9s %5.0f%% %7.0f%% %7.0f%%  %s%s\n", st.name.c_str(), st.items_per_second(), mbps,
                     100 * st.busy_share(), 100 * st.starved_share(), 100 * st.blocked_share(), lat,
                     neck && *neck == i ? "  <- bottleneck" : "");
    }
    if (!neck) std::fprintf(err, "  (no stage is busy half of its time: the consumer, or the storage's latency, sets the pace)\n");
}

void emit(outcome& o, std::string line, std::FILE* out)
{
    std::fprintf(out, "%s\n", line.c_str());
    std::fflush(out);
    o.json_lines.push_back(std::move(line));
}

std::string format_value(double v)
{
    char buf[32];
    if (v == std::floor(v) && std::fabs(v) < 1e15) std::snprintf(buf, sizeof buf, "%.0f", v);
    else std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

} // namespace

const stage_stats* source_of(const stats_snapshot& s)
{
    for (const auto& st : s.stages)
        if (st.is_source) return &st;
    return s.stages.empty() ? nullptr : &s.stages.front();
}

// ---- public -------------------------------------------------------------------------------

std::uint64_t run_result::items() const
{
    std::uint64_t n = 0;
    for (const auto& e : epochs) n += e.items;
    return n;
}

std::uint64_t run_result::bytes() const
{
    std::uint64_t n = 0;
    for (const auto& e : epochs) n += e.bytes;
    return n;
}

double run_result::seconds() const
{
    double s = 0;
    for (const auto& e : epochs) s += e.seconds;
    return s;
}

double run_result::items_per_second() const
{
    const double s = seconds();
    return s > 0 ? static_cast<double>(items()) / s : 0.0;
}

latency_histogram::counts run_result::source_latency() const
{
    latency_histogram::counts all;
    for (const auto& e : epochs)
        if (const stage_stats* src = source_of(e.final)) {
            for (std::size_t b = 0; b < all.buckets.size(); ++b) all.buckets[b] += src->latency.buckets[b];
            all.count += src->latency.count;
            all.sum_ns += src->latency.sum_ns;
        }
    return all;
}

std::optional<std::size_t> find_knee(const std::vector<double>& x, const std::vector<double>& y, double fraction)
{
    const std::size_t n = std::min(x.size(), y.size());
    if (n == 0) return std::nullopt;
    const double best = *std::max_element(y.begin(), y.begin() + static_cast<std::ptrdiff_t>(n));
    if (!(best > 0)) return std::nullopt;
    std::optional<std::size_t> knee;
    for (std::size_t i = 0; i < n; ++i)
        if (y[i] >= fraction * best && (!knee || x[i] < x[*knee])) knee = i;
    return knee;
}

double littles_law_bound(double in_flight, double mean_latency_s)
{
    return mean_latency_s > 0 ? in_flight / mean_latency_s : 0.0;
}

const std::vector<std::pair<std::string, std::string>>& cases()
{
    static const std::vector<std::pair<std::string, std::string>> all = {
        {"random-reads", "random get(i) reads of `samples` items (1000 unless set) at in_flight 1, 5, 20, 64: a sweep"},
        {"loader", "the full loader: read -> decode (work.size, work.crop) -> batches of work.batch"},
    };
    return all;
}

config_builder configure(const invocation& inv)
{
    config_builder b;
    if (!inv.config_file.empty()) b.merge_file(inv.config_file);
    if (!inv.case_name.empty()) {
        const std::string origin = "--case " + inv.case_name;
        if (inv.case_name == "random-reads") {
            b.set_value("access", json::string("random"), origin);
            b.set_value("work.kind", json::string("read"), origin);
            if (!b.given().contains("samples")) b.set_value("samples", json::value(1000), origin);
        } else if (inv.case_name == "loader") {
            if (!b.given().contains("access") || lookup(b.json(), "access")->as_string() == "random")
                b.set_value("access", json::string("sequential"), origin);
            b.set_value("work.kind", json::string("batch"), origin);
        } else {
            std::vector<std::string> names;
            for (const auto& [n, d] : cases()) names.push_back(n);
            std::string msg = "--case: unknown case \"" + inv.case_name + "\"";
            if (const auto near = closest(inv.case_name, names); !near.empty()) msg += " (did you mean \"" + near + "\"?)";
            msg += "; cases: random-reads, loader";
            throw config_error(msg);
        }
    }
    for (const auto& s : inv.sets) b.set(s);
    return b;
}

outcome execute(const invocation& inv, std::FILE* out, std::FILE* err)
{
    const config_builder base = configure(inv);
    outcome o;
    o.config = base.finish();
    std::optional<sweep_spec> sweep;
    if (!inv.sweep.empty()) sweep = parse_sweep(inv.sweep);
    else if (inv.case_name == "random-reads") sweep = parse_sweep("in_flight=1,5,20,64");

    // The configuration of each point (checked before anything runs).
    std::vector<run_config> configs;
    std::vector<std::string> labels;
    if (sweep) {
        for (double v : sweep->values) {
            config_builder b = base;
            const field_spec* f = find_field(sweep->field);
            b.set_value(sweep->field, f->kind == field_kind::integer ? json::value(static_cast<std::uint64_t>(v)) : json::value(v),
                        "--sweep " + sweep->field);
            configs.push_back(b.finish());
            labels.push_back(sweep->field + "=" + format_value(v));
        }
    } else {
        configs.push_back(o.config);
        labels.push_back("run");
    }
    std::size_t connections = 0;
    for (const auto& c : configs) connections = std::max(connections, c.in_flight);

    std::shared_ptr<prepared> p;
    std::string p_key;
    for (std::size_t i = 0; i < configs.size(); ++i) {
        const auto& c = configs[i];
        if (const std::string k = key_of(c, connections); !p || k != p_key) {
            p.reset(); // the old runtime stops before the new one starts
            p = prepare(c, connections, err);
            p_key = k;
        }
        if (p->count == 0 && c.access != "shards") throw config_error("nothing to read: the source lists no items");
        auto rr = run_config_epochs(c, *p, labels[i], err, inv.quiet);
        for (const auto& e : rr.epochs) {
            emit(o, epoch_line(rr, e, inv.case_name, sweep, sweep ? sweep->values[i] : 0.0), out);
            print_table(e, labels[i] + (c.epochs > 1 ? " epoch " + std::to_string(e.epoch) : std::string()), err);
        }
        o.runs.push_back(std::move(rr));
    }

    if (sweep) {
        sweep_result s;
        s.field = sweep->field;
        std::vector<double> xs, ys;
        for (std::size_t i = 0; i < o.runs.size(); ++i) {
            const auto& rr = o.runs[i];
            sweep_point pt;
            pt.value = sweep->values[i];
            pt.items_per_s = rr.items_per_second();
            pt.mb_per_s = rr.seconds() > 0 ? static_cast<double>(rr.bytes()) / 1e6 / rr.seconds() : 0.0;
            pt.in_flight = static_cast<double>(rr.config.in_flight);
            pt.mean_latency_ms = rr.source_latency().mean_ns() / 1e6;
            pt.littles_law_items_per_s = littles_law_bound(pt.in_flight, pt.mean_latency_ms / 1e3);
            xs.push_back(pt.value);
            ys.push_back(pt.items_per_s);
            s.points.push_back(pt);
        }
        s.knee = find_knee(xs, ys);
        s.best_items_per_s = ys.empty() ? 0.0 : *std::max_element(ys.begin(), ys.end());
        std::fprintf(err, "sweep of %s: throughput against the Little's-law bound (in_flight / mean latency)\n", s.field.c_str());
        std::fprintf(err, "  %12s %12s %10s %14s %14s %8s\n", s.field.c_str(), "items/s", "MB/s", "mean latency", "Little's law", "of best");
        for (std::size_t i = 0; i < s.points.size(); ++i) {
            const auto& pt = s.points[i];
            emit(o,
                 json_line()
                     .add("bench", "run-sweep-point")
                     .add("field", s.field)
                     .add("value", pt.value)
                     .add("in_flight", pt.in_flight)
                     .add("items_per_s", pt.items_per_s)
                     .add("MB_per_s", pt.mb_per_s)
                     .add("mean_latency_ms", pt.mean_latency_ms, 4)
                     .add("littles_law_items_per_s", pt.littles_law_items_per_s)
                     .add("of_littles_law", pt.littles_law_items_per_s > 0 ? pt.items_per_s / pt.littles_law_items_per_s : 0.0, 3)
                     .add("of_best", s.best_items_per_s > 0 ? pt.items_per_s / s.best_items_per_s : 0.0, 3)
                     .str(),
                 out);
            std::fprintf(err, "  %12s %12.0f %10.1f %11.2f ms %14.0f %7.0f%%%s\n", format_value(pt.value).c_str(), pt.items_per_s,
                         pt.mb_per_s, pt.mean_latency_ms, pt.littles_law_items_per_s,
                         s.best_items_per_s > 0 ? 100 * pt.items_per_s / s.best_items_per_s : 0.0, s.knee && *s.knee == i ? "  <- knee" : "");
        }
        json_line summary;
        summary.add("bench", "run-sweep").add("field", s.field).add("points", s.points.size()).add("best_items_per_s", s.best_items_per_s);
        if (s.knee) {
            summary.add("knee_value", s.points[*s.knee].value).add("knee_items_per_s", s.points[*s.knee].items_per_s);
            std::fprintf(err, "  knee: %s = %s, the smallest value reaching 95%% of the best (%.0f items/s)\n", s.field.c_str(),
                         format_value(s.points[*s.knee].value).c_str(), s.best_items_per_s);
        }
        emit(o, summary.str(), out);
        o.sweep = std::move(s);
    }

    if (!o.config.output.empty()) {
        const fs::path dir(o.config.output);
        std::error_code ec;
        fs::create_directories(dir, ec);
        if (ec) throw std::runtime_error("output: cannot create " + dir.string() + ": " + ec.message());
        const fs::path results = dir / "results.jsonl";
        {
            std::ofstream f(results, std::ios::trunc);
            for (const auto& l : o.json_lines) f << l << '\n';
            if (!f) throw std::runtime_error("cannot write " + results.string());
        }
        o.results_path = results.string();
        const fs::path report = dir / "report.html";
        {
            std::ofstream f(report, std::ios::trunc | std::ios::binary);
            f << build_report(o);
            if (!f) throw std::runtime_error("cannot write " + report.string());
        }
        o.report_path = report.string();
        std::fprintf(err, "run: wrote %s and %s\n", report.c_str(), results.c_str());
    }
    return o;
}

std::function<int()> add_run_subcommands(CLI::App& app)
{
    auto inv = std::make_shared<invocation>();
    auto* r = app.add_subcommand("run", "a benchmark described by a JSON configuration (storage, dataset, access, work, in-flight; "
                                        "see bench/README.md): JSON lines, a summary table and an HTML report");
    r->add_option("--config", inv->config_file, "the configuration file (JSON)");
    r->add_option("--set", inv->sets, "override a field: key.sub=value (value as JSON where it parses, else a string); repeatable")
        ->allow_extra_args(false);
    r->add_option("--sweep", inv->sweep, "run each value of a numeric field, e.g. in_flight=1,4,16,64,256");
    r->add_option("--case", inv->case_name, "a built-in case: random-reads (a sweep of random reads) or loader (read -> decode -> batch)");
    return [r, inv]() -> int {
        if (!r->parsed()) return -1;
        try {
            execute(*inv);
            return 0;
        } catch (const config_error& e) {
            std::fprintf(stderr, "conveyor-bench run: configuration error: %s\n", e.what());
            return 2;
        }
    };
}

} // namespace conveyor::bench::run
