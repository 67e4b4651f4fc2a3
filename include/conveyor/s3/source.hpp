// conveyor/s3/source.hpp — the S3 source (objects → blobs), random access, and the upload sink.
#ifndef CONVEYOR_S3_SOURCE_HPP
#define CONVEYOR_S3_SOURCE_HPP

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/core/stages.hpp>
#include <conveyor/s3/client.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace conveyor::s3 {

/** The objects a source reads: a bucket and keys (with sizes when a listing gave them).
    Keys are full object keys within the bucket. */
struct object_list {
    std::string bucket;
    std::vector<object_info> objects;

    std::size_t size() const noexcept { return objects.size(); }
    bool empty() const noexcept { return objects.empty(); }

    /// A list of the given keys (sizes unknown).
    static object_list from_keys(std::string bucket, const std::vector<std::string>& keys)
    {
        object_list l{std::move(bucket), {}};
        l.objects.reserve(keys.size());
        for (const auto& k : keys) l.objects.push_back(object_info{k});
        return l;
    }
};

/// Settings of the S3 source.
struct source_options {
    /// Objects in flight at once, spread over the runtime's I/O threads. (Large objects
    /// add their ranged parts; the client's connection limit bounds both.)
    std::size_t concurrency = 64;
    /// Deliver in list order (true) or as objects arrive (false).
    bool ordered = true;
    /// An object that cannot be read fails the pipeline, or is skipped, counted and logged.
    on_error errors = on_error::fail;
    /// Blobs waiting between the source and the next stage (at least `concurrency`).
    std::size_t capacity = 64;
    /// Called on an I/O thread after each object arrives, with the time it took
    /// (retries included). Must be thread-safe and cheap.
    std::function<void(const blob&, std::chrono::nanoseconds)> on_read;
};

namespace detail {

// The list of `keys` in `bucket`, each with `prefix` put before it.
inline object_list prefixed(std::string bucket, std::vector<std::string> keys, std::string_view prefix)
{
    if (!prefix.empty())
        for (auto& k : keys) k.insert(0, prefix);
    return object_list::from_keys(std::move(bucket), keys);
}

inline std::vector<std::string> parse_index_json(std::string_view text, std::string_view where)
{
    auto fail = [&](std::string why) {
        return conveyor::error(std::make_error_code(std::errc::invalid_argument), {.stage = "s3 index", .where = std::string(where), .detail = std::move(why)});
    };
    boost::system::error_code ec;
    auto v = boost::json::parse(text, ec);
    if (ec) throw fail("not valid JSON: " + ec.message());
    if (!v.is_array()) throw fail("not a JSON array of keys");
    std::vector<std::string> keys;
    keys.reserve(v.as_array().size());
    std::size_t i = 0;
    for (const auto& e : v.as_array()) {
        if (!e.is_string()) throw fail("entry " + std::to_string(i) + " is not a string");
        // The file index's rule (conveyor::detail::index_entry_problem), with S3's limit.
        if (auto why = conveyor::detail::index_entry_problem(e.as_string(), max_key_bytes); !why.empty())
            throw fail(conveyor::detail::index_entry_name(i, e.as_string()) + " " + why);
        keys.emplace_back(e.as_string());
        ++i;
    }
    return keys;
}

// Lists a prefix in parallel: first one level with the delimiter '/', then each common
// prefix ("directory") on its own, several at once. Sorted by key, as S3 lists.
inline asio::awaitable<std::vector<object_info>> list_parallel(std::shared_ptr<client_state> s, std::string bucket, std::string prefix,
                                                                unsigned parallel)
{
    std::vector<object_info> all;
    std::vector<std::string> dirs;
    list_options lo{.prefix = prefix, .delimiter = "/"};
    listing_cursor cursor(bucket, prefix);
    for (;;) {
        auto page = co_await s->list(bucket, lo);
        for (auto& o : page.objects) all.push_back(std::move(o));
        for (auto& p : page.common_prefixes) dirs.push_back(std::move(p));
        if (!cursor.next(*s, page, lo)) break;
    }
    std::vector<std::vector<object_info>> found(dirs.size());
    std::size_t next = 0;
    auto worker = [&](std::size_t) -> asio::awaitable<void> {
        while (next < dirs.size()) {
            const std::size_t d = next++;
            found[d] = co_await s->list_all(bucket, dirs[d]);
        }
    };
    co_await run_all(std::min<std::size_t>(std::max(1u, parallel), dirs.size()), worker);
    for (auto& f : found)
        for (auto& o : f) all.push_back(std::move(o));
    std::sort(all.begin(), all.end(), [](const object_info& a, const object_info& b) { return a.key < b.key; });
    co_return all;
}

struct source_state {
    source_state(client cl, std::shared_ptr<const object_list> l, source_options so) : c(std::move(cl)), list(std::move(l)), opts(std::move(so)) {}
    client c;
    std::shared_ptr<const object_list> list;
    source_options opts;
    std::atomic<std::uint64_t> next{0};
    std::atomic<std::size_t> workers_left{0};
};

inline asio::awaitable<void> source_worker(std::shared_ptr<run_context> ctx, std::shared_ptr<source_state> st,
                                           std::shared_ptr<conveyor::detail::channel<blob>> out)
{
    conveyor::detail::last_worker_closes<blob> closer{st->workers_left, *out};

    const object_list& l = *st->list;
    const auto& o = st->opts;
    auto& cs = *st->c.state();
    for (;;) {
        const std::uint64_t i = st->next.fetch_add(1, std::memory_order_relaxed);
        if (i >= l.size() || ctx->stopping()) co_return;
        const object_info& obj = l.objects[i];
        const auto t0 = std::chrono::steady_clock::now();
        buffer data;
        std::exception_ptr failed;
        try {
            data = co_await cs.get_object(l.bucket, obj.key, obj.size);
        } catch (...) {
            failed = std::current_exception();
        }
        if (failed) {
            if (ctx->stopping()) co_return;
            std::string what = "s3: " + obj.key;
            try {
                std::rethrow_exception(failed);
            } catch (const std::exception& x) {
                what = x.what();
            } catch (...) {
            }
            if (!co_await conveyor::detail::source_item_failed(*ctx, *out, o.errors, o.ordered, i, failed, what, "s3", obj.key)) co_return;
            continue;
        }
        blob b{obj.key, std::move(data), object_uri(cs.cfg, l.bucket, obj.key), -1, i};
        if (o.on_read) o.on_read(b, std::chrono::steady_clock::now() - t0);
        if (!co_await conveyor::detail::source_deliver(*out, o.ordered, i, std::move(b))) co_return;
    }
}

} // namespace detail

/** Lists every object under `prefix` of `bucket` (ListObjectsV2, following continuation
    tokens; the top level's "directories" are listed in parallel, `parallel` at once).
    Blocks the calling thread, which must not be one of the runtime's I/O threads.
    A server that sends a continuation token again (the listing would never end) fails
    it with `errc::bad_reply`, naming the bucket, prefix and token. */
inline object_list list_objects(const client& c, std::string bucket, std::string prefix = {}, unsigned parallel = 16)
{
    auto s = c.state();
    auto objects = c.run(detail::list_parallel(s, bucket, std::move(prefix), parallel));
    return object_list{std::move(bucket), std::move(objects)};
}

/// Lists the objects under an `s3://bucket/prefix` URL (see `list_objects`).
inline object_list list_url(const client& c, std::string_view url, unsigned parallel = 16)
{
    auto u = parse_s3_url(url);
    return list_objects(c, std::move(u.bucket), std::move(u.key), parallel);
}

/** Reads an index — a JSON array of object keys relative to the bucket, as the seeds keep
    it — from a local file. `prefix` is put before every key. */
inline object_list read_index(std::string bucket, const std::string& path, std::string_view prefix = {})
{
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw conveyor::error(std::error_code(errno ? errno : ENOENT, std::system_category()),
                              {.stage = "s3 index", .where = path, .detail = "cannot open the index file"});
    std::stringstream ss;
    ss << in.rdbuf();
    return detail::prefixed(std::move(bucket), detail::parse_index_json(ss.str(), path), prefix);
}

/** Reads an index kept in the bucket itself (`s3://bucket/path/index.json`): the keys in
    it are relative to the same bucket, with `prefix` put before each. Blocks. */
inline object_list read_index(const client& c, std::string_view index_url, std::string_view prefix = {})
{
    auto u = parse_s3_url(index_url);
    buffer b = c.run(c.get(u.bucket, u.key));
    return detail::prefixed(std::move(u.bucket), detail::parse_index_json(b.view(), index_url), prefix);
}

/** The S3 source: GETs every object of a list, many at once, as blobs (key = object key,
    origin = `s3://bucket/key`).

    Requests are spread over the runtime's I/O threads, `concurrency` objects in flight,
    over the client's keep-alive connections. Objects larger than the client's
    `part_size` come in ranged parts fetched in parallel and reassembled in place.
    Transient failures are retried by the client; a retried object is delivered once.

    @code
    conveyor::s3::client c(rt, {.endpoint_url = "http://127.0.0.1:9000"});
    for (auto& b : conveyor::s3::objects(c, conveyor::s3::list_url(c, "s3://imagenet/train/")).on(rt))
        use(b.key, b.data.span());
    @endcode
*/
inline pipeline<blob> objects(client c, std::shared_ptr<const object_list> list, source_options o = {})
{
    if (!list) list = std::make_shared<const object_list>();
    if (o.concurrency == 0) o.concurrency = 1;
    return pipeline<blob>([c = std::move(c), list, o](const std::shared_ptr<run_context>& ctx) {
        auto st = std::make_shared<detail::source_state>(c, list, o);
        const std::size_t workers = std::max<std::size_t>(1, std::min<std::size_t>(o.concurrency, list->size()));
        st->workers_left = workers;
        auto out = ctx->make_channel<blob>(std::max(o.capacity, o.concurrency));
        // The client's pools belong to its runtime's I/O threads.
        runtime& crt = c.rt();
        for (std::size_t w = 0; w < workers; ++w)
            ctx->spawn(crt.io_executor(w % crt.io_lanes()), detail::source_worker(ctx, st, out), "s3");
        return stream<blob>(ctx, out);
    });
}

/// Reads the objects of `list` (moved into the pipeline).
inline pipeline<blob> objects(client c, object_list list, source_options o = {})
{
    return objects(std::move(c), std::make_shared<const object_list>(std::move(list)), std::move(o));
}

/// Reads the given keys of `bucket`.
inline pipeline<blob> objects(client c, std::string bucket, const std::vector<std::string>& keys, source_options o = {})
{
    return objects(std::move(c), object_list::from_keys(std::move(bucket), keys), std::move(o));
}

/** Map-style random access to the objects of a list: `get(i)` fetches object `i`.
    Calls may overlap freely. @par Thread Safety Safe. */
class dataset {
public:
    dataset(client c, object_list l) : c_(std::move(c)), list_(std::make_shared<const object_list>(std::move(l))) {}

    std::size_t size() const noexcept { return list_->size(); }
    const object_list& objects() const noexcept { return *list_; }

    /** Fetches object `i`; throws `request_error` naming it if it cannot.
        @par Completion Signature `blob` */
    [[nodiscard]] asio::awaitable<blob> get(std::size_t i) const
    {
        check_index(i);
        const auto& o = list_->objects[i];
        buffer data = co_await c_.get(list_->bucket, o.key, o.size);
        co_return blob{o.key, std::move(data), object_uri(c_.cfg(), list_->bucket, o.key), -1, i};
    }

    /// Fetches object `i`, blocking the calling thread (which must not be an I/O thread).
    blob read(std::size_t i) const { return c_.run(get(i)); }

private:
    void check_index(std::size_t i) const
    {
        if (i >= list_->size())
            throw conveyor::error(std::make_error_code(std::errc::result_out_of_range),
                                  {.stage = "s3 dataset", .detail = "index " + std::to_string(i) + " is past the end (" +
                                                                        std::to_string(list_->size()) + " objects)"});
    }

    client c_;
    std::shared_ptr<const object_list> list_;
};

/// Settings of the upload sink.
struct upload_options {
    std::string prefix;          ///< put before each blob's key
    std::size_t concurrency = 16;
    std::string content_type;    ///< empty: none sent (S3 stores binary/octet-stream)
};

/** The upload sink as a stage: each blob becomes the object `prefix + blob.key` in `bucket`
    (multipart when large), and the stage yields what was stored, in input order.
    Iterate the pipeline (or call `upload_all`) to drive it.

    @code
    auto stored = conveyor::file::files(listing) | conveyor::s3::upload(c, "bucket", {.prefix = "train/"});
    for (const auto& r : stored.on(rt)) std::printf("%s %s\n", r.key.c_str(), r.etag.c_str());
    @endcode
*/
inline auto upload(client c, std::string bucket, upload_options o = {})
{
    auto fn = [c, bucket = std::move(bucket), prefix = o.prefix, type = o.content_type](blob b) -> asio::awaitable<put_result> {
        const std::string key = prefix + b.key;
        // The blob stays in this frame until the upload is done.
        auto r = co_await c.put(bucket, key, b.data.span(), type);
        co_return r;
    };
    return map(std::move(fn), {.concurrency = std::max<std::size_t>(1, o.concurrency), .ordered = true, .where = run_on::io, .name = "s3 upload"});
}

/// Drives `p | upload(...)` to the end and returns how many objects and bytes were stored.
template <class Pipeline>
std::pair<std::size_t, std::uint64_t> upload_all(Pipeline&& p, client c, std::string bucket, upload_options o = {})
{
    std::size_t n = 0;
    std::uint64_t bytes = 0;
    for (const auto& r : (std::forward<Pipeline>(p) | upload(std::move(c), std::move(bucket), std::move(o)))) {
        ++n;
        bytes += r.bytes;
    }
    return {n, bytes};
}

} // namespace conveyor::s3

#endif
