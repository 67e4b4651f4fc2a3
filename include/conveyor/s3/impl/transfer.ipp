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
#include <boost/property_tree/ptree.hpp>

#include <algorithm>
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

inline asio::awaitable<void> client_state::get_rest(std::string_view bucket, std::string_view key, std::span<std::byte> whole, std::string_view etag)
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
    co_await conveyor::detail::run_all(workers, worker);
}

CONVEYOR_DECL asio::awaitable<buffer> client_state::get_object(std::string_view bucket, std::string_view key, std::int64_t size_hint)
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
