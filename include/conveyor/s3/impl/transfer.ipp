// conveyor/s3/impl/transfer.ipp — ranged transfer: GetObject whole or in parallel ranged
// parts, HeadObject (uploads are in impl/multipart.ipp).
#ifndef CONVEYOR_S3_IMPL_TRANSFER_IPP
#define CONVEYOR_S3_IMPL_TRANSFER_IPP

#include <conveyor/core/detail/offload.hpp>
#include <conveyor/s3/client.hpp>
#include <conveyor/s3/detail/client_state.hpp>
#include <conveyor/core/detail/run_all.hpp>
#include <conveyor/core/run_context.hpp>
#include <conveyor/s3/detail/xml.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/property_tree/ptree.hpp>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstring>
#include <exception>

namespace conveyor::s3 {
namespace detail {

CONVEYOR_DECL bool parse_decimal(std::string_view s, std::uint64_t& out)
{
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return !s.empty() && ec == std::errc{} && end == s.data() + s.size();
}

CONVEYOR_DECL bool parse_content_range(std::string_view v, std::uint64_t& first, std::uint64_t& last, std::int64_t& total)
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

CONVEYOR_DECL asio::awaitable<http::response> client_state::get_range(std::string_view bucket, std::string_view key, std::uint64_t first, std::uint64_t last,
                                          std::span<std::byte> into, std::string_view if_match)
{
    op o{.method = boost::beast::http::verb::get, .name = "GetObject", .bucket = bucket, .key = key};
    o.headers.emplace_back(boost::beast::http::field::range, "bytes=" + std::to_string(first) + "-" + std::to_string(last));
    if (!if_match.empty()) o.headers.emplace_back(boost::beast::http::field::if_match, std::string(if_match));
    o.body_into = into;
    co_return co_await execute(o);
}

CONVEYOR_DECL request_error client_state::bad(std::string_view bucket, std::string_view key, std::string detail) const
{
    op o{.name = "GetObject", .bucket = bucket, .key = key};
    return failure(o, make_error_code(errc::bad_reply), {}, 1, std::move(detail));
}

CONVEYOR_DECL std::optional<object_checksum> checksum_in(const boost::beast::http::fields& h, bool ranged)
{
    if (ranged && h["x-amz-checksum-type"] != "FULL_OBJECT") return std::nullopt;
    for (auto a : {checksum_algorithm::crc64nvme, checksum_algorithm::crc32c, checksum_algorithm::crc32, checksum_algorithm::sha256,
                   checksum_algorithm::sha1}) {
        const std::string name = "x-amz-checksum-" + std::string(checksum_header_suffix(a));
        const std::string_view v = h[name];
        if (v.empty()) continue;
        object_checksum c{.algorithm = a, .value = std::string(v)};
        if (v.find('-') != std::string_view::npos || h["x-amz-checksum-type"] == "COMPOSITE") {
            c.composite = true;
            return c;
        }
        auto bytes = base64_decode(v);
        if (!bytes || bytes->size() != checksum_size(a)) c.composite = true; // not a value that can be checked
        else c.digest = std::move(*bytes);
        return c;
    }
    return std::nullopt;
}

CONVEYOR_DECL check_result client_state::tally(const std::optional<object_checksum>& expected, const checksum* computed, std::string* why)
{
    if (!expected) {
        checksums_absent.fetch_add(1, std::memory_order_relaxed);
        return check_result::absent;
    }
    if (expected->composite || computed == nullptr) {
        checksums_skipped.fetch_add(1, std::memory_order_relaxed);
        return check_result::skipped;
    }
    if (computed->digest() == expected->digest) {
        checksums_verified.fetch_add(1, std::memory_order_relaxed);
        return check_result::verified;
    }
    checksum_failures.fetch_add(1, std::memory_order_relaxed);
    if (why)
        *why = "its bytes (" + std::to_string(computed->size()) + ") give " + std::string(checksum_name(expected->algorithm)) + " " +
               computed->base64() + ", but the store keeps " + expected->value + " (x-amz-checksum-" +
               std::string(checksum_header_suffix(expected->algorithm)) + ")";
    return check_result::mismatch;
}

CONVEYOR_DECL check_result client_state::check(std::span<const std::byte> bytes, const std::optional<object_checksum>& expected,
                                               std::string* why)
{
    if (!expected || expected->composite) return tally(expected, nullptr, why);
    checksum c(expected->algorithm);
    c.update(bytes);
    return tally(expected, &c, why);
}

CONVEYOR_DECL request_error client_state::checksum_failed(std::string_view bucket, std::string_view key, std::string why) const
{
    op o{.name = "GetObject", .bucket = bucket, .key = key};
    return failure(o, make_error_code(errc::checksum_mismatch), {}, 2, "the object failed its checksum: " + why);
}

CONVEYOR_DECL void client_state::ask_checksum(op& o) const
{
    if (opts.checksums.verify) o.named_headers.emplace_back("x-amz-checksum-mode", "ENABLED");
}

/** The body of a plain GET, with checksums asked for, read into one buffer of the object's
    size: all of it when it fits in a part, else its first part only; then the request ends
    (the connection is closed) and the rest comes in ranged parts. Its header gives the size,
    the ETag and the whole object's checksum (S3 sends none with a ranged reply). A failure
    mid-body resumes with a ranged GET pinned to the ETag. */
struct first_part_sink final : body_stream {
    first_part_sink(client_state& st, std::uint64_t part_size) : s(st), part(part_size) {}

    void before_attempt(boost::beast::http::fields& h) override
    {
        if (filled == 0) return;
        h.set(boost::beast::http::field::range, "bytes=" + std::to_string(filled) + "-" + std::to_string(limit - 1));
        if (!etag.empty()) h.set(boost::beast::http::field::if_match, etag);
    }

    bool took_progress() noexcept override { return std::exchange(progress, false); }

    bool restart() noexcept override
    {
        // Nothing has gone further than this sink's own buffer: the whole object again.
        if (!got_header || filled == 0) return false;
        got_header = false;
        total = limit = filled = 0;
        etag.clear();
        expected.reset();
        whole = buffer{};
        progress = false;
        return true;
    }

    std::error_code on_header(unsigned status, const boost::beast::http::fields& h) override
    {
        const auto bad = make_error_code(errc::bad_reply);
        if (!got_header) {
            std::uint64_t n = 0;
            if (status != 200 || !parse_decimal(std::string_view(h[boost::beast::http::field::content_length]), n)) {
                problem = "a GET was answered status " + std::to_string(status) + " with Content-Length '" +
                          std::string(h[boost::beast::http::field::content_length]) + "'";
                return bad;
            }
            got_header = true;
            total = n;
            limit = part == 0 || total <= part ? total : part;
            etag = std::string(h[boost::beast::http::field::etag]);
            expected = checksum_in(h, false);
            whole = s.rt.buffers().acquire(static_cast<std::size_t>(total));
            return {};
        }
        std::uint64_t first = 0, last = 0;
        std::int64_t t = -1;
        if (status != 206 || !parse_content_range(std::string_view(h[boost::beast::http::field::content_range]), first, last, t) ||
            first != filled || (t >= 0 && static_cast<std::uint64_t>(t) != total)) {
            problem = "a ranged GET resuming at byte " + std::to_string(filled) + " was answered status " + std::to_string(status) +
                      " with Content-Range '" + std::string(h[boost::beast::http::field::content_range]) + "'";
            return bad;
        }
        return {};
    }

    asio::awaitable<std::span<std::byte>> async_prepare() override
    {
        if (filled >= limit) { // the first part is in: the rest comes in ranged parts
            stopped = true;
            co_return std::span<std::byte>{};
        }
        co_return std::span<std::byte>(whole.data() + filled, static_cast<std::size_t>(limit - filled));
    }

    void commit(std::size_t n) override
    {
        filled += n;
        progress = true;
    }

    client_state& s;
    std::uint64_t part;
    buffer whole;
    std::uint64_t total = 0, limit = 0, filled = 0;
    std::string etag;
    std::optional<object_checksum> expected;
    bool got_header = false, stopped = false, progress = false;
    std::string problem;
};

inline asio::awaitable<std::uint64_t> client_state::crc_of(checksum_algorithm a, std::span<const std::byte> data)
{
    auto compute = [a, data] {
        checksum c(a);
        c.update(data);
        return c.crc();
    };
    if (data.size() < (1u << 20)) co_return compute();
    co_return co_await conveyor::detail::offload(rt.compute_executor(), compute);
}

inline asio::awaitable<void> client_state::get_rest(std::string_view bucket, std::string_view key, std::span<std::byte> whole,
                                                    std::string_view etag, std::vector<std::uint64_t>* crcs)
{
    const std::uint64_t part = opts.part_size, total = whole.size();
    const std::uint64_t parts = (total + part - 1) / part;
    std::atomic<std::uint64_t> next{1}; // the workers may run on different lanes
    auto fetch_parts = [&]() -> asio::awaitable<void> {
        for (;;) {
            const std::uint64_t p = next.fetch_add(1, std::memory_order_relaxed);
            if (p >= parts) co_return;
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
            if (crcs) (*crcs)[p] = co_await crc_of(checksum_algorithm::crc64nvme, whole.subspan(first, last - first + 1));
        }
    };
    // The workers take turns over the I/O lanes, so that the copies out of the sockets and
    // the page faults of fresh memory, which dominate a large object's cost, use every I/O
    // thread, not only the caller's. (co_spawn passes cancellation to the other lane on its
    // own thread, and resumes this coroutine on this one.)
    const std::size_t lanes = rt.io_lanes();
    const std::size_t here = rt.current_io_lane().value_or(0);
    auto worker = [&](std::size_t i) -> asio::awaitable<void> {
        const std::size_t lane = (here + i) % lanes;
        if (lane == here) co_await fetch_parts();
        else co_await asio::co_spawn(rt.io_executor(lane), fetch_parts(), asio::use_awaitable);
    };
    const auto workers = std::min<std::uint64_t>(opts.parts_in_flight, parts - 1);
    co_await conveyor::detail::run_all(workers, worker);
}

inline asio::awaitable<client_state::fetched> client_state::fetch_object(std::string_view bucket, std::string_view key,
                                                                                std::int64_t size_hint)
{
    const bool verify = opts.checksums.verify;
    fetched out;
    const std::uint64_t part = opts.part_size;
    auto whole_get = [&]() -> asio::awaitable<void> {
        op o{.method = boost::beast::http::verb::get, .name = "GetObject", .bucket = bucket, .key = key};
        ask_checksum(o);
        auto resp = co_await execute(o);
        if (verify) out.result = check(resp.body.span(), checksum_in(resp.headers, false), &out.why);
        out.body = std::move(resp.body);
    };
    if (part == 0 || (size_hint >= 0 && static_cast<std::uint64_t>(size_hint) <= part)) {
        co_await whole_get();
        co_return out;
    }
    if (verify) co_return co_await fetch_checked(bucket, key);
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
        co_await whole_get();
        co_return out;
    }
    if (first.status == 200) { // the server ignored Range: that is the whole object
        out.body = std::move(first.body);
        co_return out;
    }
    std::uint64_t f, l;
    std::int64_t total;
    if (!parse_content_range(std::string_view(first.headers["Content-Range"]), f, l, total) || f != 0 || total < 0 ||
        first.body_size != l + 1)
        throw bad(bucket, key, "ranged GET answered 206 with Content-Range '" + std::string(first.headers["Content-Range"]) +
                                   "' and " + std::to_string(first.body_size) + " bytes");
    if (static_cast<std::uint64_t>(total) <= part) {
        out.body = std::move(first.body);
        co_return out;
    }
    buffer whole = rt.buffers().acquire(static_cast<std::size_t>(total));
    std::memcpy(whole.data(), first.body.data(), first.body_size);
    first.body = buffer{};
    co_await get_rest(bucket, key, whole.span(), std::string(first.headers["ETag"]), nullptr);
    out.body = std::move(whole);
    co_return out;
}

inline asio::awaitable<client_state::fetched> client_state::fetch_checked(std::string_view bucket, std::string_view key)
{
    // A plain GET, which carries the object's checksum: the whole object when it is small,
    // else its first part, the rest in ranged parts whose CRCs are combined.
    fetched out;
    first_part_sink sink(*this, opts.part_size);
    op o{.method = boost::beast::http::verb::get, .name = "GetObject", .bucket = bucket, .key = key};
    ask_checksum(o);
    o.stream = &sink;
    try {
        co_await execute(o);
    } catch (const boost::system::system_error& e) {
        if (!sink.stopped || e.code() != asio::error::operation_aborted) throw;
    } catch (const request_error& e) {
        if (!sink.problem.empty() && e.code() == errc::bad_reply) throw bad(bucket, key, sink.problem);
        throw;
    }
    if (sink.filled != sink.limit)
        throw failure(o, make_error_code(http::errc::body_truncated), {}, 1,
                      "the object ended at byte " + std::to_string(sink.filled) + " of " + std::to_string(sink.total));
    const std::span<const std::byte> bytes = sink.whole.span();
    const auto& expected = sink.expected;
    const bool crc64 = expected && !expected->composite && expected->algorithm == checksum_algorithm::crc64nvme;
    if (sink.limit == sink.total) {
        out.result = check(bytes, expected, &out.why);
        out.body = std::move(sink.whole);
        co_return out;
    }
    const std::uint64_t part = opts.part_size, total = sink.total;
    const std::uint64_t parts = (total + part - 1) / part;
    std::vector<std::uint64_t> crcs(parts);
    if (crc64) crcs[0] = co_await crc_of(checksum_algorithm::crc64nvme, bytes.first(part));
    co_await get_rest(bucket, key, sink.whole.span(), sink.etag, crc64 ? &crcs : nullptr);
    if (crc64) {
        checksum c(checksum_algorithm::crc64nvme);
        for (std::uint64_t p = 0; p < parts; ++p) c.combine(crcs[p], std::min(part, total - p * part));
        out.result = tally(expected, &c, &out.why);
    } else if (expected && !expected->composite) { // another algorithm: over the whole, on the compute pool
        auto c = co_await conveyor::detail::offload(rt.compute_executor(), [a = expected->algorithm, bytes] {
            checksum c(a);
            c.update(bytes);
            return c;
        });
        out.result = tally(expected, &c, &out.why);
    } else {
        out.result = tally(expected, nullptr, nullptr);
    }
    out.body = std::move(sink.whole);
    co_return out;
}

CONVEYOR_DECL asio::awaitable<buffer> client_state::get_object(std::string_view bucket, std::string_view key, std::int64_t size_hint)
{
    // A mismatch may be a transfer error: fetched once more before it is an error.
    auto got = co_await fetch_object(bucket, key, size_hint);
    if (got.result != check_result::mismatch) co_return std::move(got.body);
    got = co_await fetch_object(bucket, key, size_hint);
    if (got.result != check_result::mismatch) co_return std::move(got.body);
    throw checksum_failed(bucket, key, std::move(got.why));
}

CONVEYOR_DECL asio::awaitable<object_info> client_state::head(std::string_view bucket, std::string_view key)
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

// PutObject and multipart uploads: impl/multipart.ipp.

} // namespace detail
} // namespace conveyor::s3

#endif
