// conveyor/s3/impl/client.ipp — the S3 client and its shared state.
#ifndef CONVEYOR_S3_IMPL_CLIENT_IPP
#define CONVEYOR_S3_IMPL_CLIENT_IPP

#include <conveyor/s3/client.hpp>
#include <conveyor/s3/detail/client_state.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>

namespace conveyor::s3 {
namespace detail {

CONVEYOR_DECL client_state::client_state(runtime& r, config c, client_options o)
    : rt(r), cfg(std::move(c)), opts(std::move(o)), creds(std::make_shared<credentials_cache>(rt, cfg.creds, cfg.region, cfg.provider)),
      quota(opts.throttle.retry_tokens)
{
    if (opts.retry.max_attempts == 0) opts.retry.max_attempts = 1;
    if (opts.parts_in_flight == 0) opts.parts_in_flight = 1;
    if (opts.upload_parts_in_flight == 0) opts.upload_parts_in_flight = 1;
    opts.upload_part_size = std::max<std::uint64_t>(opts.upload_part_size, 5u << 20);
    opts.multipart_threshold = std::max(opts.multipart_threshold, opts.upload_part_size);
}

CONVEYOR_DECL http::client& client_state::pool_for(const http::endpoint& ep)
{
    std::string id = ep.url();
    std::lock_guard lk(mu);
    auto it = pools.find(id);
    if (it == pools.end()) it = pools.emplace(std::move(id), std::make_shared<http::client>(rt, ep, opts.http)).first;
    return *it->second;
}

CONVEYOR_DECL std::shared_ptr<send_limit> client_state::limit_for(const http::endpoint& ep, std::string_view bucket)
{
    if (!opts.throttle.adaptive) return nullptr;
    std::string id = ep.url() + "/" + std::string(bucket);
    std::lock_guard lk(mu);
    auto it = limits.find(id);
    if (it == limits.end()) {
        const unsigned ceiling = opts.throttle.ceiling ? opts.throttle.ceiling : static_cast<unsigned>(opts.http.max_connections);
        it = limits.emplace(std::move(id), std::make_shared<send_limit>(opts.throttle.floor, ceiling)).first;
    }
    return it->second;
}

[[noreturn]] CONVEYOR_DECL void not_s3(const location& where)
{
    throw conveyor::error(std::make_error_code(std::errc::invalid_argument),
                          {.stage = "s3", .where = where.printable(),
                           .detail = std::string("a ") + to_string(where.kind()) + " location, not an s3:// one (expected s3://bucket/key)"});
}

CONVEYOR_DECL const std::string& s3_bucket(const location& where)
{
    if (!where.is_s3()) not_s3(where);
    return where.bucket();
}

/// An operation on `where`, not an S3 location, that fails when awaited (as every
/// operation's errors do), sending nothing.
template <class T>
asio::awaitable<T> refuse_not_s3(location where)
{
    not_s3(where);
    co_return T{};
}

} // namespace detail

CONVEYOR_DECL client::client(runtime& rt, config cfg, client_options o)
    : s_(std::make_shared<detail::client_state>(rt, std::move(cfg), std::move(o)))
{
}

CONVEYOR_DECL client::client(runtime& rt, const config_options& co, client_options o) : client(rt, resolve_config(co), std::move(o)) {}

CONVEYOR_DECL const config& client::cfg() const noexcept { return s_->cfg; }
CONVEYOR_DECL const client_options& client::options() const noexcept { return s_->opts; }
CONVEYOR_DECL runtime& client::rt() const noexcept { return s_->rt; }

CONVEYOR_DECL asio::awaitable<buffer> client::async_get(std::string bucket, std::string key, std::int64_t size_hint) const
{
    return do_get(s_, std::move(bucket), std::move(key), size_hint);
}

CONVEYOR_DECL asio::awaitable<buffer> client::async_get_range(std::string bucket, std::string key, std::uint64_t offset,
                                                             std::uint64_t length) const
{
    return do_get_range(s_, std::move(bucket), std::move(key), offset, length);
}

CONVEYOR_DECL asio::awaitable<object_info> client::async_head(std::string bucket, std::string key) const
{
    return do_head(s_, std::move(bucket), std::move(key));
}

CONVEYOR_DECL asio::awaitable<list_page> client::async_list(std::string bucket, list_options lo) const
{
    return do_list(s_, std::move(bucket), std::move(lo));
}

CONVEYOR_DECL asio::awaitable<std::vector<object_info>> client::async_list_all(std::string bucket, std::string prefix) const
{
    return do_list_all(s_, std::move(bucket), std::move(prefix));
}

CONVEYOR_DECL asio::awaitable<put_result> client::async_put(std::string bucket, std::string key, std::span<const std::byte> data,
                                                           std::string content_type) const
{
    return do_put(s_, std::move(bucket), std::move(key), data, std::move(content_type));
}

CONVEYOR_DECL asio::awaitable<buffer> client::async_get(const location& object, std::int64_t size_hint) const
{
    if (!object.is_s3()) return detail::refuse_not_s3<buffer>(object);
    return async_get(object.bucket(), object.key(), size_hint);
}

CONVEYOR_DECL asio::awaitable<buffer> client::async_get_range(const location& object, std::uint64_t offset, std::uint64_t length) const
{
    if (!object.is_s3()) return detail::refuse_not_s3<buffer>(object);
    return async_get_range(object.bucket(), object.key(), offset, length);
}

CONVEYOR_DECL asio::awaitable<object_info> client::async_head(const location& object) const
{
    if (!object.is_s3()) return detail::refuse_not_s3<object_info>(object);
    return async_head(object.bucket(), object.key());
}

CONVEYOR_DECL asio::awaitable<std::vector<object_info>> client::async_list_all(const location& prefix) const
{
    if (!prefix.is_s3()) return detail::refuse_not_s3<std::vector<object_info>>(prefix);
    return async_list_all(prefix.bucket(), prefix.key());
}

CONVEYOR_DECL asio::awaitable<put_result> client::async_put(const location& object, std::span<const std::byte> data,
                                                           std::string content_type) const
{
    if (!object.is_s3()) return detail::refuse_not_s3<put_result>(object);
    return async_put(object.bucket(), object.key(), data, std::move(content_type));
}

CONVEYOR_DECL client_stats client::stats() const noexcept
{
    client_stats st{s_->requests.load(), s_->retries.load(), s_->bytes_in.load(), s_->bytes_out.load()};
    st.retries_refused = s_->retries_refused.load();
    st.checksums_verified = s_->checksums_verified.load();
    st.checksum_failures = s_->checksum_failures.load();
    st.checksums_skipped = s_->checksums_skipped.load();
    st.checksums_absent = s_->checksums_absent.load();
    st.throttled = s_->throttled.load();
    st.status_errors = s_->status_errors.load();
    st.connection_errors = s_->connection_errors.load();
    st.timeouts = s_->timeouts.load();
    st.short_bodies = s_->short_bodies.load();
    st.clock_corrections = s_->clock_corrections.load();
    st.clock_offset_ms = s_->clock_offset_ms.load();
    try {
        std::lock_guard lk(s_->mu);
        bool first = true;
        for (const auto& [id, l] : s_->limits) {
            const auto c = l->stats();
            st.limit = first ? c.limit : std::min(st.limit, c.limit);
            st.lowest_limit = first ? c.lowest : std::min(st.lowest_limit, c.lowest);
            // 0: no rate limit, so the least of those that are not 0
            if (c.rate > 0) st.rate = st.rate > 0 ? std::min(st.rate, c.rate) : c.rate;
            if (c.lowest_rate > 0) st.lowest_rate = st.lowest_rate > 0 ? std::min(st.lowest_rate, c.lowest_rate) : c.lowest_rate;
            first = false;
        }
    } catch (...) {
        // A lock that cannot be taken: the counters above still say most.
    }
    return st;
}

CONVEYOR_DECL bool client::on_lane() const noexcept { return s_->on_lane(); }

CONVEYOR_DECL runtime::io_executor_type client::next_io_executor() const { return s_->rt.next_io_executor(); }

CONVEYOR_DECL asio::awaitable<buffer> client::do_get(std::shared_ptr<detail::client_state> s, std::string bucket, std::string key, std::int64_t hint)
{
    if (s->on_lane()) co_return co_await s->get_object(bucket, key, hint);
    co_return co_await asio::co_spawn(s->rt.next_io_executor(), s->get_object(bucket, key, hint), asio::use_awaitable);
}

CONVEYOR_DECL asio::awaitable<buffer> client::range_here(detail::client_state& s, std::string_view bucket, std::string_view key, std::uint64_t offset,
                                          std::uint64_t length)
{
    if (length == 0) co_return buffer{};
    auto resp = co_await s.get_range(bucket, key, offset, offset + length - 1, {}, {});
    co_return std::move(resp.body);
}

CONVEYOR_DECL asio::awaitable<buffer> client::do_get_range(std::shared_ptr<detail::client_state> s, std::string bucket, std::string key,
                                            std::uint64_t offset, std::uint64_t length)
{
    if (s->on_lane()) co_return co_await range_here(*s, bucket, key, offset, length);
    co_return co_await asio::co_spawn(s->rt.next_io_executor(), range_here(*s, bucket, key, offset, length), asio::use_awaitable);
}

CONVEYOR_DECL asio::awaitable<object_info> client::do_head(std::shared_ptr<detail::client_state> s, std::string bucket, std::string key)
{
    if (s->on_lane()) co_return co_await s->head(bucket, key);
    co_return co_await asio::co_spawn(s->rt.next_io_executor(), s->head(bucket, key), asio::use_awaitable);
}

CONVEYOR_DECL asio::awaitable<list_page> client::do_list(std::shared_ptr<detail::client_state> s, std::string bucket, list_options lo)
{
    if (s->on_lane()) co_return co_await s->list(bucket, lo);
    co_return co_await asio::co_spawn(s->rt.next_io_executor(), s->list(bucket, lo), asio::use_awaitable);
}

CONVEYOR_DECL asio::awaitable<std::vector<object_info>> client::do_list_all(std::shared_ptr<detail::client_state> s, std::string bucket,
                                                             std::string prefix)
{
    if (s->on_lane()) co_return co_await s->list_all(bucket, prefix);
    co_return co_await asio::co_spawn(s->rt.next_io_executor(), s->list_all(bucket, prefix), asio::use_awaitable);
}

CONVEYOR_DECL asio::awaitable<put_result> client::do_put(std::shared_ptr<detail::client_state> s, std::string bucket, std::string key,
                                          std::span<const std::byte> data, std::string content_type)
{
    if (s->on_lane()) co_return co_await s->put(bucket, key, data, content_type);
    co_return co_await asio::co_spawn(s->rt.next_io_executor(), s->put(bucket, key, data, content_type), asio::use_awaitable);
}

} // namespace conveyor::s3

#endif
