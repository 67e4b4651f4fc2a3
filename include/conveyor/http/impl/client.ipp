// conveyor/http/impl/client.ipp — the HTTP client: TLS settings, the request coroutine and
// its phases (acquire a connection, resolve, connect, write, read), and timeout names.
#ifndef CONVEYOR_HTTP_IMPL_CLIENT_IPP
#define CONVEYOR_HTTP_IMPL_CLIENT_IPP

#include <conveyor/http/client.hpp>

#include <conveyor/core/error.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/http/detail/client_impl.hpp>
#include <conveyor/http/detail/connection.hpp>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/system/system_error.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>

namespace conveyor::http {

namespace detail {

/// OpenSSL's new-session callback (`SSL_CTX_sess_set_new_cb`), on the lane's thread, inside
/// a handshake or a read: a copy of the session becomes the lane's one to resume. Returns 0:
/// OpenSSL keeps its own reference.
CONVEYOR_DECL int keep_tls_session(SSL* ssl, SSL_SESSION* session)
{
    auto* pool = static_cast<lane_pool*>(SSL_get_ex_data(ssl, tls_pool_index()));
    if (!pool || !SSL_SESSION_is_resumable(session)) return 0;
    if (SSL_SESSION* copy = SSL_SESSION_dup(session)) pool->tls_session.reset(copy);
    return 0;
}

} // namespace detail

CONVEYOR_DECL detail::client_impl::client_impl(runtime& rt, endpoint ep, client_options o)
    : rt_(&rt), ep_(std::move(ep)), opts_(std::move(o)), host_header_(ep_.host_header()), port_(std::to_string(ep_.port))
{
    namespace ssl = asio::ssl;
    boost::system::error_code ec;
    const auto address = asio::ip::make_address(ep_.host, ec);
    host_is_address_ = !ec;

    // The watchdog's period: the smallest limit in use (see detail::connection).
    const auto& t = opts_.timeouts;
    std::chrono::milliseconds step{std::chrono::hours(1)};
    for (auto d : {t.connect, t.first_byte, t.idle, t.total, t.attempt})
        if (d.count() > 0) step = std::min(step, d);
    watch_step_ = step;

    if (ep_.tls) {
        auto fail = [&](const std::string& what, const boost::system::error_code& e) {
            throw conveyor::error(std::make_error_code(std::errc::invalid_argument),
                                  {.stage = "http", .where = ep_.url(), .detail = what + ": " + e.message()});
        };
        tls_ = std::make_unique<ssl::context>(ssl::context::tls_client);
        SSL_CTX_set_min_proto_version(tls_->native_handle(), TLS1_2_VERSION);
        // Sessions to resume: OpenSSL hands each new one to keep_tls_session (for TLS 1.3,
        // when its ticket arrives, after the handshake), which keeps it on the lane.
        SSL_CTX_set_session_cache_mode(tls_->native_handle(), SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
        SSL_CTX_sess_set_new_cb(tls_->native_handle(), &detail::keep_tls_session);
        tls_->set_verify_mode(opts_.verify_tls ? ssl::verify_peer : ssl::verify_none);
        if (opts_.verify_tls) {
            if (opts_.ca_file.empty() && opts_.ca_path.empty()) {
                tls_->set_default_verify_paths(ec);
                if (ec) fail("cannot use the system's trusted certificates", ec);
            }
            if (!opts_.ca_file.empty()) {
                tls_->load_verify_file(opts_.ca_file, ec);
                if (ec) fail("cannot load CA file '" + opts_.ca_file + "'", ec);
            }
            if (!opts_.ca_path.empty()) {
                tls_->add_verify_path(opts_.ca_path, ec);
                if (ec) fail("cannot use CA directory '" + opts_.ca_path + "'", ec);
            }
        }
    }

    // Addresses that are never looked up: the caller's, else the host when it is one.
    std::vector<detail::tcp::endpoint> fixed;
    for (const auto& a : opts_.addresses) {
        const auto ip = asio::ip::make_address(a, ec);
        if (ec)
            throw conveyor::error(std::make_error_code(std::errc::invalid_argument),
                                  {.stage = "http", .where = ep_.url(), .detail = "'" + a + "' in addresses is not an IP address"});
        fixed.emplace_back(ip, ep_.port);
    }
    if (fixed.empty() && host_is_address_) fixed.emplace_back(address, ep_.port);

    const std::size_t lanes = rt.io_lanes();
    const std::size_t total = std::max<std::size_t>(opts_.max_connections, 1);
    const std::size_t per_lane = (total + lanes - 1) / lanes;
    const std::size_t idle_per_lane = (opts_.max_idle.value_or(total) + lanes - 1) / lanes;
    lanes_.reserve(lanes);
    for (std::size_t i = 0; i < lanes; ++i) {
        auto p = std::make_unique<detail::lane_pool>(rt.io_executor(i), per_lane, idle_per_lane);
        if (!fixed.empty()) {
            p->fixed_address = true;
            p->addresses = fixed;
        }
        p->next_address = i; // the lanes' first connections go to different addresses
        lanes_.push_back(std::move(p));
    }
}

CONVEYOR_DECL client::client(runtime& rt, endpoint ep, client_options o)
    : impl_(std::make_unique<detail::client_impl>(rt, std::move(ep), std::move(o)))
{
}

CONVEYOR_DECL client::~client()
{
    // Idle connections belong to their lane's thread: they are closed there.
    for (auto& p : impl_->lanes_) {
        auto idle = std::move(p->idle);
        if (idle.empty()) continue;
        if (p->ex.running_in_this_thread()) idle.clear();
        else asio::post(p->ex, [idle = std::move(idle)]() mutable { idle.clear(); });
    }
}

CONVEYOR_DECL const endpoint& client::where() const noexcept
{
    return impl_->ep_;
}

CONVEYOR_DECL const client_options& client::options() const noexcept
{
    return impl_->opts_;
}

CONVEYOR_DECL runtime& client::rt() const noexcept
{
    return *impl_->rt_;
}

CONVEYOR_DECL client::counters client::stats() const noexcept
{
    const auto& i = *impl_;
    std::uint64_t idle_closed = 0;
    for (const auto& p : i.lanes_) idle_closed += p->idle_closed.load(std::memory_order_relaxed);
    return {i.opened_.load(std::memory_order_relaxed), i.requests_.load(std::memory_order_relaxed),
            i.reused_.load(std::memory_order_relaxed), i.stale_retries_.load(std::memory_order_relaxed),
            i.discarded_.load(std::memory_order_relaxed), i.tls_resumed_.load(std::memory_order_relaxed), idle_closed};
}

CONVEYOR_DECL asio::awaitable<std::pair<std::error_code, response>> client::async_send(const request& req)
{
    const auto lane = impl_->rt_->current_io_lane();
    if (!lane)
        co_return std::pair<std::error_code, response>{std::make_error_code(std::errc::operation_not_permitted), response{}};

    // Cancellation is reported as operation_aborted, never thrown at an inner co_await;
    // the caller's own setting is put back before returning.
    const bool throwing = co_await asio::this_coro::throw_if_cancelled();
    co_await asio::this_coro::throw_if_cancelled(false);
    std::pair<std::error_code, response> out;
    std::exception_ptr unexpected;
    try {
        out = co_await impl_->perform(*impl_->lanes_[*lane], req);
    } catch (const std::bad_alloc&) {
        out = {std::make_error_code(std::errc::not_enough_memory), response{}};
    } catch (const boost::system::system_error& e) {
        out = {to_std_error(e.code()), response{}};
    } catch (const std::system_error& e) {
        out = {e.code(), response{}};
    } catch (...) {
        unexpected = std::current_exception();
    }
    co_await asio::this_coro::throw_if_cancelled(throwing);
    if (unexpected) std::rethrow_exception(unexpected);
    co_return out;
}

CONVEYOR_DECL asio::awaitable<std::pair<std::error_code, response>> detail::client_impl::perform(detail::lane_pool& pool,
                                                                                           const request& req)
{
    std::pair<std::error_code, response> out;
    auto& ec = out.first;
    const auto cs = co_await asio::this_coro::cancellation_state;
    if (detail::cancelled(cs)) {
        ec = detail::aborted();
        co_return out;
    }
    requests_.fetch_add(1, std::memory_order_relaxed);
    // The call's deadline (this send's total, or the caller's own for all its attempts)
    // and this attempt's, whichever comes first.
    const auto now = detail::clock_type::now();
    const auto& t = opts_.timeouts;
    detail::limit outer{req.deadline, detail::phase::total};
    if (t.total.count() > 0 && now + t.total < outer.at) outer.at = now + t.total;
    if (t.attempt.count() > 0 && now + t.attempt < outer.at) outer = {now + t.attempt, detail::phase::attempt};
    if (outer.at <= now) {
        ec = detail::timeout_error(outer.why);
        co_return out;
    }
    detail::lease l;
    if ((ec = co_await detail::acquire(pool, l, outer, discarded_))) co_return out;

    for (bool retried = false;;) {
        if (!l.conn) {
            l.conn = std::make_shared<detail::connection>(pool.ex, tls_.get(), watch_step_);
            if ((ec = co_await connect(pool, *l.conn, outer))) co_return out;
            opened_.fetch_add(1, std::memory_order_relaxed);
        } else {
            reused_.fetch_add(1, std::memory_order_relaxed);
        }
        bool stale = false, keep = false;
        auto& c = *l.conn;
        if (auto* tls = c.tls()) ec = co_await exchange(*tls, c, req, out.second, l.reused, stale, keep, outer);
        else ec = co_await exchange(c.socket(), c, req, out.second, l.reused, stale, keep, outer);
        if (ec && stale && !retried) {
            // The server had closed (or was closing) the kept-alive connection: once more, on
            // a new one, in the same slot.
            retried = true;
            stale_retries_.fetch_add(1, std::memory_order_relaxed);
            c.close();
            l.conn.reset();
            l.reused = false;
            out.second = response{};
            continue;
        }
        if (ec) {
            out.second = response{};
        } else {
            out.second.reused_connection = l.reused;
            l.keep = keep && c.usable();
            c.expire_never();
        }
        co_return out;
    }
}

CONVEYOR_DECL asio::awaitable<std::error_code> detail::client_impl::resolve(detail::lane_pool& pool, time_point deadline,
                                                                            detail::phase deadline_phase)
{
    using detail::clock_type;
    if (pool.fixed_address) co_return std::error_code{};
    const bool fresh = clock_type::now() - pool.resolved_at < detail::address_lifetime;
    // Stale addresses still serve while another request looks the name up again.
    if (!pool.addresses.empty() && (fresh || pool.resolving)) co_return std::error_code{};
    const auto cs = co_await asio::this_coro::cancellation_state;
    if (pool.resolving) {
        // First use on this lane and a lookup is under way: wait for it (until the connect
        // deadline), not a second one.
        detail::timer_type wake(pool.ex, deadline);
        pool.resolve_waiters.push_back(&wake);
        detail::unlist_resolve_waiter guard{pool, &wake};
        auto [ec] = co_await wake.async_wait(detail::no_throw);
        if (detail::cancelled(cs)) co_return detail::aborted();
        if (!ec) co_return detail::timeout_error(deadline_phase);
        if (pool.addresses.empty())
            co_return to_std_error(pool.resolve_error ? pool.resolve_error : asio::error::host_not_found);
        co_return std::error_code{};
    }
    pool.resolving = true;
    detail::resolver_type resolver(pool.ex);
    auto [ec, results] = co_await resolver.async_resolve(ep_.host, port_, detail::no_throw);
    pool.resolving = false;
    if (!ec && !results.empty()) {
        pool.addresses.clear();
        for (const auto& r : results) pool.addresses.push_back(r.endpoint());
        pool.resolved_at = clock_type::now();
    } else if (!ec) {
        ec = asio::error::host_not_found;
    }
    pool.resolve_error = ec;
    for (auto* t : std::exchange(pool.resolve_waiters, {})) t->cancel();
    if (detail::cancelled(cs)) co_return detail::aborted();
    if (pool.addresses.empty()) co_return to_std_error(ec);
    co_return std::error_code{};
}

CONVEYOR_DECL asio::awaitable<std::error_code> detail::client_impl::connect(detail::lane_pool& pool, detail::connection& c,
                                                                            const detail::limit& outer)
{
    const auto cs = co_await asio::this_coro::cancellation_state;
    const auto [at, ph] = detail::bound(detail::clock_type::now(), opts_.timeouts.connect, detail::phase::connect, outer);
    c.expire_at(at, ph);
    if (auto ec = co_await resolve(pool, at, ph)) {
        if (detail::cancelled(cs)) co_return detail::aborted();
        if (c.expired() != detail::phase::none) co_return detail::timeout_error(c.expired());
        co_return ec;
    }
    // The resolver is not interrupted by the deadline; look at it now.
    if (detail::cancelled(cs)) co_return detail::aborted();
    if (c.expired() != detail::phase::none) co_return detail::timeout_error(c.expired());

    auto& s = c.socket();
    const std::size_t n = pool.addresses.size();
    const std::size_t first = pool.next_address++; // spread new connections over the addresses
    boost::system::error_code last = asio::error::host_not_found;
    bool connected = false;
    for (std::size_t i = 0; i < n && !connected; ++i) {
        const auto peer = pool.addresses[(first + i) % n];
        boost::system::error_code ec;
        if (s.is_open()) s.close(ec);
        s.open(peer.protocol(), ec);
        if (!ec) std::tie(ec) = co_await s.async_connect(peer, detail::no_throw);
        if (!ec) {
            connected = true;
            break;
        }
        if (detail::cancelled(cs) || c.expired() != detail::phase::none) co_return detail::failure(c, cs, ec);
        last = ec;
    }
    if (!connected) {
        pool.resolved_at = {}; // perhaps the name moved: look it up again next time
        co_return to_std_error(last);
    }
    boost::system::error_code ignored;
    s.set_option(detail::tcp::no_delay(true), ignored);

    if (auto* t = c.tls()) {
        SSL* ssl = t->native_handle();
        // SNI names a host; an IP address is not sent (RFC 6066).
        if (!host_is_address_ && SSL_set_tlsext_host_name(ssl, ep_.host.c_str()) != 1)
            co_return to_std_error(boost::system::error_code(static_cast<int>(::ERR_get_error()), asio::error::get_ssl_category()));
        if (opts_.verify_tls) {
            X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
            X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
            const int ok = host_is_address_ ? X509_VERIFY_PARAM_set1_ip_asc(param, ep_.host.c_str())
                                            : X509_VERIFY_PARAM_set1_host(param, ep_.host.c_str(), ep_.host.size());
            if (ok != 1)
                co_return to_std_error(boost::system::error_code(static_cast<int>(::ERR_get_error()), asio::error::get_ssl_category()));
        }
        SSL_set_ex_data(ssl, detail::tls_pool_index(), &pool);
        if (pool.tls_session) {
            // A copy again: the connection's close would make the lane's own unresumable.
            detail::tls_session_ptr offer(SSL_SESSION_dup(pool.tls_session.get()));
            if (offer) SSL_set_session(ssl, offer.get()); // which takes its own reference
        }
        if (detail::cancelled(cs)) co_return detail::aborted();
        auto [ec] = co_await t->async_handshake(asio::ssl::stream_base::client, detail::no_throw_for<detail::tls_stream_type>());
        if (ec) co_return detail::failure(c, cs, ec);
        if (SSL_session_reused(ssl)) tls_resumed_.fetch_add(1, std::memory_order_relaxed);
    }
    c.expire_never();
    co_return std::error_code{};
}

CONVEYOR_DECL void detail::client_impl::write_head(std::string& h, const request& req) const
{
    namespace bhttp = boost::beast::http;
    h.clear();
    const auto method = bhttp::to_string(req.method);
    h.append(method.data(), method.size());
    h += ' ';
    if (req.target.empty()) h += '/';
    else h += req.target;
    h += " HTTP/1.1\r\n";
    if (req.headers.find(bhttp::field::host) == req.headers.end()) {
        h += "Host: ";
        h += host_header_;
        h += "\r\n";
    }
    if (!opts_.user_agent.empty() && req.headers.find(bhttp::field::user_agent) == req.headers.end()) {
        h += "User-Agent: ";
        h += opts_.user_agent;
        h += "\r\n";
    }
    for (const auto& f : req.headers) {
        const auto name = f.name();
        if (name == bhttp::field::content_length || name == bhttp::field::transfer_encoding) continue;
        const auto n = f.name_string();
        const auto v = f.value();
        h.append(n.data(), n.size());
        h += ": ";
        h.append(v.data(), v.size());
        h += "\r\n";
    }
    if (!req.body.empty() || detail::expects_body(req.method)) {
        char digits[24];
        const auto r = std::to_chars(digits, digits + sizeof digits, req.body.size());
        h += "Content-Length: ";
        h.append(digits, r.ptr);
        h += "\r\n";
    }
    h += "\r\n";
}

} // namespace conveyor::http

#endif
