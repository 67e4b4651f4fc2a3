// conveyor/s3/client.hpp — S3 operations over the pooled HTTP client, with retries.
#ifndef CONVEYOR_S3_CLIENT_HPP
#define CONVEYOR_S3_CLIENT_HPP

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/core/run_context.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/http/client.hpp>
#include <conveyor/s3/config.hpp>
#include <conveyor/s3/error.hpp>
#include <conveyor/s3/sigv4.hpp>
#include <conveyor/s3/xml.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/channel.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

namespace conveyor::s3 {

/** How failed requests are tried again: exponential backoff with full jitter.

    Attempt k (k = 1, 2, ...) that fails with a transient error waits a uniformly random
    time in [0, min(max_delay, base_delay * 2^(k-1))] before attempt k+1 (AWS's "full
    jitter"). Transient: 500, 502, 503 SlowDown, 504, 429, RequestTimeout, connection
    refused or reset, timeouts, truncated bodies. Everything else fails at once.

    `http.timeouts.total` (in `client_options`), when set, bounds each request with all
    its attempts and the backoff between them: a request whose next attempt would start
    past it fails then, with `http::errc::total_timeout`.
*/
struct retry_options {
    /// Attempts of one request, the first included.
    unsigned max_attempts = 10;
    /// Of those, how many may end in a timeout (connect, first byte, idle, attempt): an
    /// endpoint that accepts and never answers is reported after this many first-byte
    /// timeouts, not `max_attempts` of them and their backoff. 0: no limit of its own.
    unsigned max_timeouts = 3;
    std::chrono::milliseconds base_delay{50};
    std::chrono::milliseconds max_delay{20'000};
};

/// Settings of an S3 client.
struct client_options {
    /// Connections (per endpoint, over all I/O threads), timeouts, TLS. `timeouts.total`
    /// bounds one S3 request (a GetObject, one ranged part of a large object, one page of
    /// a listing, one part of an upload) with all its attempts and backoff, as AWS SDKs'
    /// API call timeout does; `timeouts.attempt` bounds each attempt alone.
    http::client_options http;
    retry_options retry;
    /// GETs of objects larger than this are split into ranged parts of this size, fetched
    /// in parallel and reassembled in place. 0: never split.
    std::uint64_t part_size = 8u << 20;
    /// Ranged parts of one object in flight at once.
    unsigned parts_in_flight = 8;
    /// PUTs larger than this become multipart uploads.
    std::uint64_t multipart_threshold = 64u << 20;
    /// Part size of multipart uploads (S3's minimum is 5 MiB; raised when an object would
    /// need more than 10,000 parts).
    std::uint64_t upload_part_size = 16u << 20;
    /// Parts of one upload in flight at once.
    unsigned upload_parts_in_flight = 8;
};

/// What a PUT (single or multipart) made.
struct put_result {
    std::string key;
    std::string etag;
    std::uint64_t bytes = 0;
    unsigned parts = 0;   ///< 0 for a single PUT
};

/// Options of one ListObjectsV2 request.
struct list_options {
    std::string prefix;
    std::string delimiter;
    std::string continuation_token;
    std::string start_after;
    unsigned max_keys = 1000;
};

/// Counters of a client, over its lifetime.
struct client_stats {
    std::uint64_t requests = 0;   ///< HTTP requests sent (attempts)
    std::uint64_t retries = 0;    ///< attempts that were retries
    std::uint64_t bytes_in = 0;   ///< body bytes received in 2xx replies
    std::uint64_t bytes_out = 0;  ///< body bytes sent
};

namespace detail {

// Runs `n` coroutines made by `make(i)` on the current executor, waits for all of them,
// and rethrows the first exception. If the caller is cancelled, every one of them is
// cancelled too (and still waited for: they may refer to the caller's frame).
template <class Make>
asio::awaitable<void> run_all(std::size_t n, Make make)
{
    if (n == 0) co_return;
    auto ex = co_await asio::this_coro::executor;
    // Cancellation is handled here (passed on to every child, then waited out), so it must
    // not throw out of the wait. The setting belongs to the whole coroutine stack: restore it.
    const bool threw_if_cancelled = co_await asio::this_coro::throw_if_cancelled();
    co_await asio::this_coro::throw_if_cancelled(false);
    std::vector<asio::cancellation_signal> signals(n);
    asio::experimental::channel<void(boost::system::error_code)> done(ex, n);
    std::exception_ptr first;
    for (std::size_t i = 0; i < n; ++i) {
        asio::co_spawn(ex, make(i), asio::bind_cancellation_slot(signals[i].slot(), [&first, &done](std::exception_ptr e) {
                           if (e && !first) first = e;
                           done.try_send(boost::system::error_code{});
                       }));
    }
    bool cancelled = false;
    for (std::size_t left = n; left > 0;) {
        auto [ec] = co_await done.async_receive(asio::as_tuple(asio::use_awaitable));
        if (ec) {
            if (!cancelled) {
                cancelled = true;
                for (auto& s : signals) s.emit(asio::cancellation_type::terminal);
            }
            co_await asio::this_coro::reset_cancellation_state();
            continue;
        }
        --left;
        // One failure dooms the whole: stop the others early.
        if (first && !cancelled) {
            cancelled = true;
            for (auto& s : signals) s.emit(asio::cancellation_type::terminal);
        }
    }
    co_await asio::this_coro::throw_if_cancelled(threw_if_cancelled);
    if (first) std::rethrow_exception(first);
    if (cancelled) throw boost::system::system_error(asio::error::operation_aborted);
}

inline std::uint64_t jitter_draw(std::uint64_t bound_ms)
{
    thread_local std::minstd_rand gen{std::random_device{}()};
    if (bound_ms == 0) return 0;
    return std::uniform_int_distribution<std::uint64_t>(0, bound_ms)(gen);
}

// A whole decimal number, nothing else (no sign, no spaces).
inline bool parse_decimal(std::string_view s, std::uint64_t& out)
{
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return !s.empty() && ec == std::errc{} && end == s.data() + s.size();
}

// "bytes 0-8388607/1073741824" → (first, last, total); total -1 for "*".
inline bool parse_content_range(std::string_view v, std::uint64_t& first, std::uint64_t& last, std::int64_t& total)
{
    if (!v.starts_with("bytes ")) return false;
    v.remove_prefix(6);
    auto dash = v.find('-'), slash = v.find('/');
    if (dash == std::string_view::npos || slash == std::string_view::npos || slash < dash) return false;
    if (!parse_decimal(v.substr(0, dash), first) || !parse_decimal(v.substr(dash + 1, slash - dash - 1), last) || last < first)
        return false;
    auto t = v.substr(slash + 1);
    if (t == "*") {
        total = -1;
        return true;
    }
    std::uint64_t tt;
    if (!parse_decimal(t, tt)) return false;
    total = static_cast<std::int64_t>(tt);
    return true;
}

/// One S3 request, before signing.
struct op {
    boost::beast::http::verb method = boost::beast::http::verb::get;
    const char* name = "GetObject";            // for messages
    std::string_view bucket;
    std::string_view key;
    std::string query;                          // encoded, without '?'
    std::vector<std::pair<boost::beast::http::field, std::string>> headers;
    std::span<const std::byte> body;
    std::string payload_hash;                   // empty: UNSIGNED-PAYLOAD
    std::span<std::byte> body_into;
};

struct client_state;

/** The way through one listing's pages (one bucket and prefix), for every lister: it
    hands each page's continuation token on to the next request, and refuses a server
    that goes round in circles. A token it sent before for this listing (the same one
    again, or an older one: the listing would never end), on a truncated page with or
    without objects, is an error the first time it comes back. */
class listing_cursor {
public:
    listing_cursor(std::string_view bucket, std::string_view prefix) : bucket_(bucket), prefix_(prefix) {}

    /** After `page`, the answer to `lo`: puts its continuation token into `lo` and returns
        true when there is a next page to ask for, false when `page` was the last.
        @throws request_error (`errc::bad_reply`) naming the bucket, the prefix and the
        token when the token is one that was sent before. */
    inline bool next(const client_state& s, list_page& page, list_options& lo);

private:
    std::string bucket_, prefix_;
    std::unordered_set<std::string> sent_;
    std::size_t pages_ = 0;
};

struct client_state : std::enable_shared_from_this<client_state> {
    client_state(runtime& r, config c, client_options o)
        : rt(r), cfg(std::move(c)), opts(std::move(o)), sign(cfg.creds, cfg.region)
    {
        if (opts.retry.max_attempts == 0) opts.retry.max_attempts = 1;
        if (opts.parts_in_flight == 0) opts.parts_in_flight = 1;
        if (opts.upload_parts_in_flight == 0) opts.upload_parts_in_flight = 1;
        opts.upload_part_size = std::max<std::uint64_t>(opts.upload_part_size, 5u << 20);
        opts.multipart_threshold = std::max(opts.multipart_threshold, opts.upload_part_size);
    }

    runtime& rt;
    config cfg;
    client_options opts;
    signer sign;
    std::mutex mu;
    std::map<std::string, std::shared_ptr<http::client>, std::less<>> pools;  // by endpoint URL
    std::atomic<std::uint64_t> requests{0}, retries{0}, bytes_in{0}, bytes_out{0};

    http::client& pool_for(const http::endpoint& ep)
    {
        std::string id = ep.url();
        std::lock_guard lk(mu);
        auto it = pools.find(id);
        if (it == pools.end()) it = pools.emplace(std::move(id), std::make_shared<http::client>(rt, ep, opts.http)).first;
        return *it->second;
    }

    bool on_lane() const { return rt.current_io_lane().has_value(); }

    // The error for `o`, its detail "<operation>: <detail>".
    request_error error_for(const op& o, std::error_code ec, reply_error reply, unsigned attempts, std::string detail) const
    {
        return request_error(ec, {.stage = "s3", .key = std::string(o.key), .where = object_uri(cfg, o.bucket, o.key), .offset = -1,
                                  .detail = std::string(o.name) + ": " + detail},
                             std::move(reply), attempts);
    }

    request_error failure(const op& o, std::error_code ec, reply_error reply, unsigned attempts, std::string detail) const
    {
        if (attempts > 1) detail += " (after " + std::to_string(attempts) + " attempts)";
        return error_for(o, ec, std::move(reply), attempts, std::move(detail));
    }

    // A request given up: what its last attempt met (an error reply as S3 described it, or
    // a transport failure: the endpoint, and the timeout that struck, named with its value),
    // the attempts and the time they took, and `then`, why no other attempt follows if that
    // is not plain from the rest.
    request_error given_up(const op& o, const request_target& t, std::error_code ec, reply_error reply, unsigned attempts,
                           const std::string& what, std::chrono::steady_clock::time_point started, std::string_view then = {}) const
    {
        char took[32];
        std::snprintf(took, sizeof took, "%.1f s", std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
        std::string d = reply.status != 0 ? what : "request to " + t.endpoint.url() + " failed: " + what;
        if (attempts > 1) d += " after " + std::to_string(attempts) + " attempts, " + took + " in all";
        else if (reply.status == 0) d += std::string(" after ") + took;
        d += then;
        return error_for(o, ec, std::move(reply), attempts, std::move(d));
    }

    /** Sends `o`, signing each attempt afresh, and retries what is transient. Returns the
        2xx response; throws `request_error` otherwise (or operation_aborted if cancelled).
        Must run on an I/O thread. */
    asio::awaitable<http::response> execute(const op& o)
    {
        const request_target t = target_for(cfg, o.bucket, o.key);
        http::client& pool = pool_for(t.endpoint);
        std::string target = t.path;
        if (!o.query.empty()) {
            target += '?';
            target += o.query;
        }
        const std::string_view payload = o.payload_hash.empty() ? unsigned_payload : std::string_view(o.payload_hash);
        const auto& r = opts.retry;
        const auto& limits = opts.http.timeouts;
        const auto started = std::chrono::steady_clock::now();
        // The total timeout bounds the whole request: every attempt and the backoff between
        // them (each send gets the same deadline).
        const auto deadline = limits.total.count() > 0 ? started + limits.total : std::chrono::steady_clock::time_point::max();
        unsigned timed_out = 0;
        for (unsigned attempt = 1;; ++attempt) {
            http::request req;
            req.method = o.method;
            req.target = target;
            req.headers.set(boost::beast::http::field::host, t.host);
            for (const auto& [f, v] : o.headers) req.headers.set(f, v);
            req.body = o.body;
            req.body_into = o.body_into;
            req.deadline = deadline;
            sign.sign(o.method, target, req.headers, payload);
            requests.fetch_add(1, std::memory_order_relaxed);
            if (attempt > 1) retries.fetch_add(1, std::memory_order_relaxed);
            auto [ec, resp] = co_await pool.send(req);
            if (ec == std::errc::operation_canceled)
                throw boost::system::system_error(asio::error::operation_aborted);
            bool retry;
            reply_error reply;
            std::error_code code;
            std::string detail;
            if (!ec) {
                if (resp.status >= 200 && resp.status < 300) {
                    bytes_in.fetch_add(resp.body_size, std::memory_order_relaxed);
                    bytes_out.fetch_add(o.body.size(), std::memory_order_relaxed);
                    co_return std::move(resp);
                }
                std::string_view text = o.body_into.empty()
                                            ? resp.body.view()
                                            : std::string_view(reinterpret_cast<const char*>(o.body_into.data()),
                                                               std::min(resp.body_size, o.body_into.size()));
                reply = parse_error_reply(resp.status, text, std::string_view(resp.headers["x-amz-request-id"]));
                if (reply.code.empty() && resp.status == 404 && o.method == boost::beast::http::verb::head) reply.code = "NoSuchKey";
                retry = reply.retryable();
                code = reply.to_error_code();
                detail = reply.describe();
            } else {
                retry = http::is_transient(ec);
                code = ec;
                const std::string timeout = http::timeout_name(ec, limits);
                detail = timeout.empty() ? ec.message() : timeout;
                // The call's own deadline passed: no attempt is left. Other timeouts have
                // their own, smaller budget of attempts.
                if (ec == http::errc::total_timeout) retry = false;
                else if (!timeout.empty() && ++timed_out >= r.max_timeouts && r.max_timeouts > 0) retry = false;
            }
            if (!retry || attempt >= r.max_attempts) throw given_up(o, t, code, std::move(reply), attempt, detail, started);
            const auto exp = std::min<std::uint64_t>(attempt - 1, 30);
            const std::uint64_t bound = std::min<std::uint64_t>(static_cast<std::uint64_t>(r.max_delay.count()),
                                                                static_cast<std::uint64_t>(r.base_delay.count()) << exp);
            const auto pause = std::chrono::milliseconds(jitter_draw(bound));
            if (std::chrono::steady_clock::now() + pause >= deadline) {
                // The next attempt would start past the deadline: say so now, not then.
                const auto total = make_error_code(http::errc::total_timeout);
                throw given_up(o, t, total, std::move(reply), attempt, detail, started,
                               "; the next attempt would start past the " + http::timeout_name(total, limits));
            }
            asio::steady_timer timer(co_await asio::this_coro::executor, pause);
            co_await timer.async_wait(asio::use_awaitable);
        }
    }

    asio::awaitable<http::response> get_range(std::string_view bucket, std::string_view key, std::uint64_t first, std::uint64_t last,
                                              std::span<std::byte> into, std::string_view if_match)
    {
        op o{.method = boost::beast::http::verb::get, .name = "GetObject", .bucket = bucket, .key = key};
        o.headers.emplace_back(boost::beast::http::field::range, "bytes=" + std::to_string(first) + "-" + std::to_string(last));
        if (!if_match.empty()) o.headers.emplace_back(boost::beast::http::field::if_match, std::string(if_match));
        o.body_into = into;
        co_return co_await execute(o);
    }

    request_error bad(std::string_view bucket, std::string_view key, std::string detail) const
    {
        op o{.name = "GetObject", .bucket = bucket, .key = key};
        return failure(o, make_error_code(errc::bad_reply), {}, 1, std::move(detail));
    }

    // Fetches parts [1, n) of an object of `total` bytes into `whole` (part 0 is there).
    asio::awaitable<void> get_rest(std::string_view bucket, std::string_view key, std::span<std::byte> whole, std::string_view etag)
    {
        const std::uint64_t part = opts.part_size, total = whole.size();
        const std::uint64_t parts = (total + part - 1) / part;
        std::uint64_t next = 1;
        auto worker = [&](std::size_t) -> asio::awaitable<void> {
            while (next < parts) {
                const std::uint64_t p = next++;
                const std::uint64_t first = p * part, last = std::min(total, first + part) - 1;
                auto resp = co_await get_range(bucket, key, first, last, whole.subspan(first, last - first + 1), etag);
                std::uint64_t f, l;
                std::int64_t t;
                if (resp.status != 206 || !parse_content_range(std::string_view(resp.headers["Content-Range"]), f, l, t) || f != first ||
                    l != last || resp.body_size != last - first + 1)
                    throw bad(bucket, key, "ranged GET of bytes " + std::to_string(first) + "-" + std::to_string(last) +
                                               " answered status " + std::to_string(resp.status) + " with " +
                                               std::to_string(resp.body_size) + " bytes, Content-Range '" +
                                               std::string(resp.headers["Content-Range"]) + "'");
                if (t >= 0 && static_cast<std::uint64_t>(t) != total)
                    throw failure(op{.name = "GetObject", .bucket = bucket, .key = key}, make_error_code(errc::object_changed), {}, 1,
                                  "object was " + std::to_string(total) + " bytes, now " + std::to_string(t));
            }
        };
        const auto workers = std::min<std::uint64_t>(opts.parts_in_flight, parts - 1);
        co_await run_all(workers, worker);
    }

    /// The whole object: one GET, or ranged parts in parallel when it is large.
    asio::awaitable<buffer> get_object(std::string_view bucket, std::string_view key, std::int64_t size_hint)
    {
        const std::uint64_t part = opts.part_size;
        if (part == 0 || (size_hint >= 0 && static_cast<std::uint64_t>(size_hint) <= part)) {
            op o{.method = boost::beast::http::verb::get, .name = "GetObject", .bucket = bucket, .key = key};
            auto resp = co_await execute(o);
            co_return std::move(resp.body);
        }
        // The first part tells the size (Content-Range) and the ETag that the other parts
        // must match: an object replaced midway is an error, never a mix of two versions.
        http::response first;
        bool empty_object = false;
        try {
            first = co_await get_range(bucket, key, 0, part - 1, {}, {});
        } catch (const request_error& e) {
            if (e.reply().status != 416) throw;
            empty_object = true;  // 416: no byte 0 to give, so the object is empty
        }
        if (empty_object) {
            op o{.method = boost::beast::http::verb::get, .name = "GetObject", .bucket = bucket, .key = key};
            auto resp = co_await execute(o);
            co_return std::move(resp.body);
        }
        if (first.status == 200) co_return std::move(first.body);  // the server ignored Range: that is the whole object
        std::uint64_t f, l;
        std::int64_t total;
        if (!parse_content_range(std::string_view(first.headers["Content-Range"]), f, l, total) || f != 0 || total < 0 ||
            first.body_size != l + 1)
            throw bad(bucket, key, "ranged GET answered 206 with Content-Range '" + std::string(first.headers["Content-Range"]) +
                                       "' and " + std::to_string(first.body_size) + " bytes");
        if (static_cast<std::uint64_t>(total) <= part) co_return std::move(first.body);
        buffer whole = rt.buffers().acquire(static_cast<std::size_t>(total));
        std::memcpy(whole.data(), first.body.data(), first.body_size);
        first.body = buffer{};
        const std::string etag(first.headers["ETag"]);
        co_await get_rest(bucket, key, whole.span(), etag);
        co_return whole;
    }

    asio::awaitable<object_info> head(std::string_view bucket, std::string_view key)
    {
        op o{.method = boost::beast::http::verb::head, .name = "HeadObject", .bucket = bucket, .key = key};
        auto resp = co_await execute(o);
        object_info info;
        info.key = std::string(key);
        const std::string_view len = resp.headers[boost::beast::http::field::content_length];
        std::uint64_t n = 0;
        if (!len.empty() && !parse_decimal(len, n))
            throw bad(bucket, key, "HeadObject reply has Content-Length '" + std::string(len) + "'");
        info.size = len.empty() ? -1 : static_cast<std::int64_t>(n);
        info.etag = std::string(resp.headers["ETag"]);
        info.last_modified = std::string(resp.headers["Last-Modified"]);
        co_return info;
    }

    asio::awaitable<list_page> list(std::string_view bucket, const list_options& lo)
    {
        op o{.method = boost::beast::http::verb::get, .name = "ListObjectsV2", .bucket = bucket, .key = {}};
        std::string q = "list-type=2&encoding-type=url&max-keys=" + std::to_string(std::clamp(lo.max_keys, 1u, 1000u));
        if (!lo.prefix.empty()) q += "&prefix=" + encode_query(lo.prefix);
        if (!lo.delimiter.empty()) q += "&delimiter=" + encode_query(lo.delimiter);
        if (!lo.continuation_token.empty()) q += "&continuation-token=" + encode_query(lo.continuation_token);
        if (!lo.start_after.empty()) q += "&start-after=" + encode_query(lo.start_after);
        o.query = std::move(q);
        auto resp = co_await execute(o);
        try {
            co_return parse_list_page(resp.body.view());
        } catch (const conveyor::error& e) {
            throw failure(o, e.code(), {}, 1, e.ctx().detail);
        }
    }

    /// Every object under `prefix`, page after page.
    asio::awaitable<std::vector<object_info>> list_all(std::string_view bucket, std::string_view prefix)
    {
        std::vector<object_info> all;
        list_options lo{.prefix = std::string(prefix)};
        listing_cursor cursor(bucket, prefix);
        for (;;) {
            auto page = co_await list(bucket, lo);
            for (auto& o : page.objects) all.push_back(std::move(o));
            if (!cursor.next(*this, page, lo)) break;
        }
        co_return all;
    }

    // SHA-256 of a payload: on the compute pool when it is large (it is ~2 ms per MiB).
    asio::awaitable<std::string> payload_hash(std::span<const std::byte> data)
    {
        if (data.size() < (1u << 20)) co_return sha256_hex(data);
        co_return co_await conveyor::detail::offload(rt.compute_executor(), [data] { return sha256_hex(data); });
    }

    asio::awaitable<std::string> put_one(std::string_view bucket, std::string_view key, std::span<const std::byte> data,
                                         std::string_view content_type, std::string_view query = {}, const char* name = "PutObject")
    {
        op o{.method = boost::beast::http::verb::put, .name = name, .bucket = bucket, .key = key, .query = std::string(query)};
        if (!content_type.empty()) o.headers.emplace_back(boost::beast::http::field::content_type, std::string(content_type));
        o.body = data;
        o.payload_hash = co_await payload_hash(data);
        auto resp = co_await execute(o);
        co_return std::string(resp.headers["ETag"]);
    }

    asio::awaitable<void> abort_upload(std::string_view bucket, std::string_view key, std::string_view upload_id)
    {
        op o{.method = boost::beast::http::verb::delete_, .name = "AbortMultipartUpload", .bucket = bucket, .key = key,
             .query = "uploadId=" + encode_query(upload_id)};
        co_await execute(o);
    }

    asio::awaitable<put_result> put_multipart(std::string_view bucket, std::string_view key, std::span<const std::byte> data,
                                              std::string_view content_type)
    {
        std::uint64_t part = opts.upload_part_size;
        while ((data.size() + part - 1) / part > 10'000) part *= 2;
        const std::size_t parts = static_cast<std::size_t>((data.size() + part - 1) / part);
        op create{.method = boost::beast::http::verb::post, .name = "CreateMultipartUpload", .bucket = bucket, .key = key, .query = "uploads="};
        if (!content_type.empty()) create.headers.emplace_back(boost::beast::http::field::content_type, std::string(content_type));
        auto resp = co_await execute(create);
        std::string upload_id;
        try {
            upload_id = parse_upload_id(resp.body.view());
        } catch (const conveyor::error& e) {
            throw failure(create, e.code(), {}, 1, e.ctx().detail);
        }
        std::vector<std::string> etags(parts);
        std::exception_ptr failed;
        try {
            std::size_t next = 0;
            auto worker = [&](std::size_t) -> asio::awaitable<void> {
                while (next < parts) {
                    const std::size_t p = next++;
                    const std::uint64_t off = p * part;
                    auto chunk = data.subspan(off, std::min<std::uint64_t>(part, data.size() - off));
                    const std::string query = "partNumber=" + std::to_string(p + 1) + "&uploadId=" + encode_query(upload_id);
                    etags[p] = co_await put_one(bucket, key, chunk, {}, query, "UploadPart");
                    if (etags[p].empty()) throw bad(bucket, key, "UploadPart " + std::to_string(p + 1) + " reply has no ETag");
                }
            };
            co_await run_all(std::min<std::size_t>(opts.upload_parts_in_flight, parts), worker);
            const std::string body = complete_multipart_body(etags);
            op complete{.method = boost::beast::http::verb::post, .name = "CompleteMultipartUpload", .bucket = bucket, .key = key,
                        .query = "uploadId=" + encode_query(upload_id)};
            complete.body = std::as_bytes(std::span(body.data(), body.size()));
            complete.payload_hash = sha256_hex(body);
            auto done = co_await execute(complete);
            if (auto err = complete_reply_error(done.body.view())) {
                const bool again = err->retryable();
                throw failure(complete, again ? make_error_code(errc::server_error) : err->to_error_code(), *err, 1, err->describe());
            }
            std::string etag;
            try {
                etag = detail::parse_xml(done.body.view(), "CompleteMultipartUpload reply").get<std::string>("CompleteMultipartUploadResult.ETag", "");
            } catch (const conveyor::error&) {
            }
            co_return put_result{std::string(key), std::move(etag), data.size(), static_cast<unsigned>(parts)};
        } catch (...) {
            failed = std::current_exception();
        }
        // Abort in the background (it must run even when this coroutine was cancelled),
        // so that the parts stored so far are not kept, and billed, forever.
        asio::co_spawn(co_await asio::this_coro::executor,
                       [](std::shared_ptr<client_state> self, std::string b, std::string k, std::string id) -> asio::awaitable<void> {
                           try {
                               co_await self->abort_upload(b, k, id);
                           } catch (const std::exception& e) {
                               self->rt.log(std::string("conveyor: could not abort a multipart upload: ") + e.what());
                           }
                       }(shared_from_this(), std::string(bucket), std::string(key), upload_id),
                       asio::detached);
        try {
            std::rethrow_exception(failed);
        } catch (const request_error& e) {
            // What became of the upload is the error; what made it fail is in the detail and
            // nested whole (std::rethrow_if_nested), with the server's reply kept.
            auto c = e.ctx();
            c.detail += " (" + e.code().message() + "); " + make_error_code(errc::upload_aborted).message();
            std::throw_with_nested(request_error(make_error_code(errc::upload_aborted), std::move(c), e.reply(), e.attempts()));
        }
    }

    asio::awaitable<put_result> put(std::string_view bucket, std::string_view key, std::span<const std::byte> data, std::string_view content_type)
    {
        if (data.size() > opts.multipart_threshold) co_return co_await put_multipart(bucket, key, data, content_type);
        auto etag = co_await put_one(bucket, key, data, content_type);
        co_return put_result{std::string(key), std::move(etag), data.size(), 0};
    }
};

inline bool listing_cursor::next(const client_state& s, list_page& page, list_options& lo)
{
    ++pages_;
    if (!page.truncated) return false;
    if (!lo.continuation_token.empty()) sent_.insert(lo.continuation_token);
    if (sent_.contains(page.next_continuation_token)) {
        std::string token = page.next_continuation_token;
        if (token.size() > 200) token = token.substr(0, 200) + "...";
        const bool empty = page.objects.empty() && page.common_prefixes.empty();
        op o{.name = "ListObjectsV2", .bucket = bucket_, .key = prefix_};
        throw s.failure(o, make_error_code(errc::bad_reply), {}, 1,
                        "the listing of prefix '" + prefix_ + "' in bucket '" + bucket_ + "' goes round in circles: page " +
                            std::to_string(pages_) + (empty ? " (empty)" : "") + " is truncated and gives continuation token '" +
                            token + "', which was sent before; it is not followed again");
    }
    lo.continuation_token = std::move(page.next_continuation_token);
    return true;
}

} // namespace detail

/** An S3 client: GetObject (whole, or in parallel ranged parts), HeadObject,
    ListObjectsV2, PutObject and multipart uploads, signed with SigV4 and retried with
    backoff. Connections are pooled per endpoint and per I/O thread of the runtime.

    A `client` is a cheap handle: copies share one connection pool and one signer.
    Awaitable members run on the runtime's I/O threads (a call from elsewhere hops there
    and back); the blocking `run()` serves plain threads.

    Errors are `request_error`s: the object (`s3://bucket/key`), the operation, the HTTP
    status, S3's code, message and request id, and how many attempts were made. Secrets
    never appear in them.

    @par Thread Safety
    Safe.
*/
class client {
public:
    client(runtime& rt, config cfg, client_options o = {})
        : s_(std::make_shared<detail::client_state>(rt, std::move(cfg), std::move(o)))
    {
    }
    /// Resolves the configuration from `co` and the credentials chain.
    explicit client(runtime& rt, const config_options& co = {}, client_options o = {}) : client(rt, resolve_config(co), std::move(o)) {}

    const config& cfg() const noexcept { return s_->cfg; }
    const client_options& options() const noexcept { return s_->opts; }
    runtime& rt() const noexcept { return s_->rt; }

    /** The whole object, in a pooled buffer. `size_hint` (from a listing; -1 if unknown)
        saves the ranged first request for objects known to be small.
        @par Completion Signature `buffer` */
    [[nodiscard]] asio::awaitable<buffer> get(std::string bucket, std::string key, std::int64_t size_hint = -1) const
    {
        return do_get(s_, std::move(bucket), std::move(key), size_hint);
    }

    /** Bytes [offset, offset + length) of an object (fewer if it is shorter).
        @par Completion Signature `buffer` */
    [[nodiscard]] asio::awaitable<buffer> get_range(std::string bucket, std::string key, std::uint64_t offset, std::uint64_t length) const
    {
        return do_get_range(s_, std::move(bucket), std::move(key), offset, length);
    }

    /** HeadObject: size, ETag, Last-Modified. @par Completion Signature `object_info` */
    [[nodiscard]] asio::awaitable<object_info> head(std::string bucket, std::string key) const
    {
        return do_head(s_, std::move(bucket), std::move(key));
    }

    /** One page of ListObjectsV2. @par Completion Signature `list_page` */
    [[nodiscard]] asio::awaitable<list_page> list(std::string bucket, list_options lo) const
    {
        return do_list(s_, std::move(bucket), std::move(lo));
    }

    /** Every object whose key starts with `prefix`, following continuation tokens. A server
        that sends a token again (the listing would never end) fails it with
        `errc::bad_reply`, naming the bucket, prefix and token.
        @par Completion Signature `std::vector<object_info>` */
    [[nodiscard]] asio::awaitable<std::vector<object_info>> list_all(std::string bucket, std::string prefix = {}) const
    {
        return do_list_all(s_, std::move(bucket), std::move(prefix));
    }

    /** Stores `data` as an object: one PutObject, or a multipart upload with parts sent in
        parallel when it is larger than `multipart_threshold`. A multipart upload that fails
        is aborted (in the background) and fails with `errc::upload_aborted`, its cause in
        the detail and nested (`std::rethrow_if_nested`).
        `data` must stay valid until the operation completes.
        @par Completion Signature `put_result` */
    [[nodiscard]] asio::awaitable<put_result> put(std::string bucket, std::string key, std::span<const std::byte> data,
                                                  std::string content_type = {}) const
    {
        return do_put(s_, std::move(bucket), std::move(key), data, std::move(content_type));
    }

    /// Runs one of the awaitables above to completion from a plain (non-I/O) thread; on one
    /// of the runtime's I/O threads it throws (`std::errc::operation_not_permitted`).
    template <class T>
    T run(asio::awaitable<T> a) const
    {
        // Not `use_future` nor a std::promise: both leave a reference to an exception on the
        // I/O thread, released there while the caller reads the exception (a race that
        // ThreadSanitizer reports, as libstdc++'s reference count is invisible to it). Here
        // the exception is moved across under a mutex and released by the caller.
        // Blocking one of the runtime's I/O threads on work that may need that very thread
        // would hang: refuse instead.
        if (s_->on_lane())
            throw conveyor::error(std::make_error_code(std::errc::operation_not_permitted),
                                  {.stage = "s3", .detail = "client::run (or a blocking S3 call built on it) was called on one of the "
                                                            "runtime's I/O threads; co_await the operation there instead"});
        handoff<T> h;
        asio::co_spawn(s_->rt.next_io_executor(), fulfil(std::move(a), h), asio::detached);
        std::unique_lock lk(h.mu);
        h.cv.wait(lk, [&] { return h.ready; });
        if (h.failed) std::rethrow_exception(std::move(h.failed));
        return std::move(*h.value);
    }

    client_stats stats() const noexcept
    {
        return {s_->requests.load(), s_->retries.load(), s_->bytes_in.load(), s_->bytes_out.load()};
    }

    /// The shared state (for the S3 source and sink in this module).
    const std::shared_ptr<detail::client_state>& state() const noexcept { return s_; }

private:
    template <class T>
    struct handoff {
        std::mutex mu;
        std::condition_variable cv;
        bool ready = false;
        std::optional<T> value;
        std::exception_ptr failed;
    };

    template <class T>
    static asio::awaitable<void> fulfil(asio::awaitable<T> a, handoff<T>& h)
    {
        std::optional<T> value;
        std::exception_ptr failed;
        try {
            value.emplace(co_await std::move(a));
        } catch (...) {
            failed = std::current_exception();
        }
        std::lock_guard lk(h.mu);
        h.value = std::move(value);
        h.failed = std::move(failed);
        h.ready = true;
        h.cv.notify_one();
    }

    // Each operation runs on one of the runtime's I/O threads, where the connection pools
    // are; a caller elsewhere hops there and back. (These are plain functions with named
    // parameters, not lambdas handed to a coroutine: GCC 12 destroys a closure passed by
    // value to a coroutine twice.)
    static asio::awaitable<buffer> do_get(std::shared_ptr<detail::client_state> s, std::string bucket, std::string key, std::int64_t hint)
    {
        if (s->on_lane()) co_return co_await s->get_object(bucket, key, hint);
        co_return co_await asio::co_spawn(s->rt.next_io_executor(), s->get_object(bucket, key, hint), asio::use_awaitable);
    }
    static asio::awaitable<buffer> range_here(detail::client_state& s, std::string_view bucket, std::string_view key, std::uint64_t offset,
                                              std::uint64_t length)
    {
        if (length == 0) co_return buffer{};
        auto resp = co_await s.get_range(bucket, key, offset, offset + length - 1, {}, {});
        co_return std::move(resp.body);
    }
    static asio::awaitable<buffer> do_get_range(std::shared_ptr<detail::client_state> s, std::string bucket, std::string key,
                                                std::uint64_t offset, std::uint64_t length)
    {
        if (s->on_lane()) co_return co_await range_here(*s, bucket, key, offset, length);
        co_return co_await asio::co_spawn(s->rt.next_io_executor(), range_here(*s, bucket, key, offset, length), asio::use_awaitable);
    }
    static asio::awaitable<object_info> do_head(std::shared_ptr<detail::client_state> s, std::string bucket, std::string key)
    {
        if (s->on_lane()) co_return co_await s->head(bucket, key);
        co_return co_await asio::co_spawn(s->rt.next_io_executor(), s->head(bucket, key), asio::use_awaitable);
    }
    static asio::awaitable<list_page> do_list(std::shared_ptr<detail::client_state> s, std::string bucket, list_options lo)
    {
        if (s->on_lane()) co_return co_await s->list(bucket, lo);
        co_return co_await asio::co_spawn(s->rt.next_io_executor(), s->list(bucket, lo), asio::use_awaitable);
    }
    static asio::awaitable<std::vector<object_info>> do_list_all(std::shared_ptr<detail::client_state> s, std::string bucket,
                                                                 std::string prefix)
    {
        if (s->on_lane()) co_return co_await s->list_all(bucket, prefix);
        co_return co_await asio::co_spawn(s->rt.next_io_executor(), s->list_all(bucket, prefix), asio::use_awaitable);
    }
    static asio::awaitable<put_result> do_put(std::shared_ptr<detail::client_state> s, std::string bucket, std::string key,
                                              std::span<const std::byte> data, std::string content_type)
    {
        if (s->on_lane()) co_return co_await s->put(bucket, key, data, content_type);
        co_return co_await asio::co_spawn(s->rt.next_io_executor(), s->put(bucket, key, data, content_type), asio::use_awaitable);
    }

    std::shared_ptr<detail::client_state> s_;
};

} // namespace conveyor::s3

#endif
