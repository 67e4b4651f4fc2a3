// conveyor/http/impl/client.hpp — the HTTP client's connections, pools and request coroutines.
#ifndef CONVEYOR_HTTP_IMPL_CLIENT_HPP
#define CONVEYOR_HTTP_IMPL_CLIENT_HPP

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/basic_stream_socket.hpp>
#include <boost/asio/basic_waitable_timer.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/ip/basic_resolver.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <boost/optional/optional.hpp>

#include <openssl/bio.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <limits>
#include <new>
#include <optional>
#include <type_traits>

namespace conveyor::http {

namespace detail {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using clock_type = std::chrono::steady_clock;
using lane_executor = asio::io_context::executor_type;
// Concrete executors, not any_io_executor: no type erasure on the socket's own path.
using socket_type = asio::basic_stream_socket<tcp, lane_executor>;
using tls_stream_type = beast::ssl_stream<socket_type>;
using timer_type = asio::basic_waitable_timer<clock_type, asio::wait_traits<clock_type>, lane_executor>;
using resolver_type = asio::ip::basic_resolver<tcp, lane_executor>;

/// Completion token of the operations below: errors as values, and no coroutine frame
/// per operation (deferred).
inline constexpr auto no_throw = asio::as_tuple(asio::deferred);

/// The same for operations of `Stream` itself. Beast 1.81's ssl_stream declares its
/// initiating functions with the old `async_result<>::return_type`, which `deferred` lacks.
template <class Stream>
constexpr auto no_throw_for() noexcept
{
    if constexpr (std::is_same_v<Stream, tls_stream_type>) return asio::as_tuple(asio::use_awaitable);
    else return asio::as_tuple(asio::deferred);
}

/// A response header and the first body bytes usually arrive in one read of this size;
/// larger bodies are read from the socket straight into their destination.
inline constexpr std::size_t read_buffer_bytes = 16 * 1024;
/// The first buffer of a body of unknown length (chunked, or up to the close).
inline constexpr std::size_t first_unsized_body_bytes = 64 * 1024;
/// How long a lane uses the addresses a host name resolved to before asking again.
inline constexpr std::chrono::seconds address_lifetime{30};
/// Response headers larger than this are an error (Beast's default is 8 KiB).
inline constexpr std::uint32_t max_header_bytes = 64 * 1024;

/// Which limit a deadline stands for.
enum class phase : std::uint8_t { none, connect, first_byte, idle, total, attempt };

inline std::error_code timeout_error(phase p) noexcept
{
    switch (p) {
    case phase::connect: return make_error_code(errc::connect_timeout);
    case phase::first_byte: return make_error_code(errc::first_byte_timeout);
    case phase::idle: return make_error_code(errc::idle_timeout);
    case phase::attempt: return make_error_code(errc::attempt_timeout);
    default: return make_error_code(errc::total_timeout);
    }
}

/// The deadline that bounds a whole `send`: the earlier of the call's (`timeouts::total`,
/// `request::deadline`) and the attempt's, and which of them it is.
struct limit {
    std::chrono::steady_clock::time_point at = std::chrono::steady_clock::time_point::max();
    phase why = phase::total;
};

inline std::error_code aborted() noexcept
{
    return to_std_error(asio::error::operation_aborted);
}

/// The deadline of a phase that may last `length` from `now`, bounded by the send's
/// outer deadline (and then standing for it).
inline std::pair<clock_type::time_point, phase> bound(clock_type::time_point now, std::chrono::milliseconds length,
                                                      phase p, const limit& outer) noexcept
{
    if (length.count() > 0) {
        const auto at = now + length;
        if (at < outer.at) return {at, p};
    }
    return {outer.at, outer.why};
}

/// True for the ways a peer's close shows up: on a kept-alive connection before any
/// response byte, they mean the server had closed it while it sat idle.
inline bool is_peer_close(const boost::system::error_code& ec) noexcept
{
    return ec == asio::error::eof || ec == bhttp::error::end_of_stream || ec == asio::error::connection_reset ||
           ec == asio::error::connection_aborted || ec == asio::error::broken_pipe ||
           ec == asio::ssl::error::stream_truncated;
}

/** One connection: its socket (or TLS stream), read buffer, request scratch space and a
    watchdog that closes the socket when the current deadline passes.

    The watchdog is cheap on the fast path: setting a deadline only stores it, and the timer
    wakes at most every `step` (the smallest configured timeout) to compare the clock with
    it, re-arming itself. Since every deadline lies at least `step` after it is set, it is
    never earlier than the pending wake-up, except a request's total deadline, which then
    re-arms the timer (and so does a caller's `request::deadline`, which may be near).
    Closing the socket makes the pending operation fail; `expired()` then says which
    limit struck.

    Only ever touched on its lane's thread. Held by shared_ptr: the watchdog's handler keeps
    a weak reference. */
class connection : public std::enable_shared_from_this<connection> {
public:
    connection(const lane_executor& ex, asio::ssl::context* tls, clock_type::duration step)
        : plain_(ex), timer_(ex), step_(step)
    {
        if (tls) tls_.emplace(ex, *tls);
        buf.reserve(read_buffer_bytes);
    }

    socket_type& socket() noexcept { return tls_ ? tls_->next_layer() : plain_; }
    const socket_type& socket() const noexcept { return tls_ ? tls_->next_layer() : plain_; }
    tls_stream_type* tls() noexcept { return tls_ ? &*tls_ : nullptr; }

    /// From now on, the socket is closed at `at`, which is reported as `p`.
    void expire_at(clock_type::time_point at, phase p)
    {
        deadline_ = at;
        deadline_phase_ = p;
        if (at == clock_type::time_point::max()) return;
        if (!watching_ || at < wake_at_) watch(clock_type::now());
    }
    /// No deadline (the connection is idle or done). The watchdog stops at its next wake-up.
    void expire_never() noexcept { deadline_ = clock_type::time_point::max(); }

    /// The limit that closed the connection, or `phase::none`.
    phase expired() const noexcept { return expired_; }
    /// Whether it may go back to the pool (no deadline struck, still open).
    bool usable() const noexcept { return expired_ == phase::none && socket().is_open(); }

    /** Whether an idle kept-alive connection may carry another request: usable, and
        nothing waits to be read on it. A server that drops an idle connection may first
        send a reply nobody asked for (`408 Request Timeout`, `Connection: close`), which
        would be read as the next request's; or it has closed its side (its FIN waits).
        One non-blocking peek at the socket (`recv` with MSG_PEEK | MSG_DONTWAIT: 0 bytes
        is the FIN, any byte is unasked for), and under TLS OpenSSL's buffers too. */
    bool reusable() noexcept
    {
        if (!usable() || buf.size() != 0) return false;
        if (tls_) {
            SSL* ssl = tls_->native_handle();
            if (SSL_pending(ssl) > 0 || BIO_ctrl_pending(SSL_get_rbio(ssl)) > 0) return false;
        }
        char byte;
        const auto n = ::recv(socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
    void close() noexcept
    {
        boost::system::error_code ignored;
        socket().close(ignored);
    }

    beast::flat_buffer buf;
    std::string head; ///< the request header, serialised (its capacity is reused)

private:
    void watch(clock_type::time_point now)
    {
        wake_at_ = std::min(deadline_, now + step_);
        timer_.expires_at(wake_at_); // cancels a pending wait: its handler sees operation_aborted
        watching_ = true;
        timer_.async_wait([self = weak_from_this()](const boost::system::error_code& ec) {
            if (ec) return; // re-armed, or the connection is gone
            if (auto c = self.lock()) c->on_wake();
        });
    }

    void on_wake()
    {
        watching_ = false;
        if (deadline_ == clock_type::time_point::max()) return;
        const auto now = clock_type::now();
        if (now >= deadline_) {
            expired_ = deadline_phase_;
            close();
            return;
        }
        watch(now);
    }

    socket_type plain_;
    std::optional<tls_stream_type> tls_;
    timer_type timer_;
    clock_type::duration step_;
    clock_type::time_point deadline_ = clock_type::time_point::max();
    clock_type::time_point wake_at_{};
    phase deadline_phase_ = phase::none;
    phase expired_ = phase::none;
    bool watching_ = false;
};

/// A request waiting for a connection on a lane at its limit. Woken by cancelling its timer
/// after `handed` or `may_open` was set; its timer expires at the send's outer deadline.
struct waiter {
    explicit waiter(const lane_executor& ex, clock_type::time_point until) : timer(ex, until) {}
    timer_type timer;
    std::shared_ptr<connection> handed; ///< a kept-alive connection passed on to it
    bool may_open = false;              ///< a slot freed for it: it opens a connection
    bool queued = false;
};

/** One lane's share of the client: its idle connections, its count against the limit,
    the requests waiting for a connection, and the host's addresses. Touched only on the
    lane's thread, so it needs no lock. */
struct lane_pool {
    lane_pool(const lane_executor& e, std::size_t lim) : ex(e), limit(lim) {}

    lane_executor ex;
    std::size_t limit;
    std::size_t open = 0; ///< connections that exist or are being opened (idle ones included)
    std::vector<std::shared_ptr<connection>> idle; ///< most recently used last
    std::deque<waiter*> waiters;                   ///< first come, first served

    std::vector<tcp::endpoint> addresses;
    clock_type::time_point resolved_at{};
    bool fixed_address = false; ///< the host is an IP address: never resolved
    bool resolving = false;
    std::vector<timer_type*> resolve_waiters;
    boost::system::error_code resolve_error;
    std::size_t next_address = 0;

    /// A connection whose response was read completely goes to the first waiter, else idle.
    void put_back(std::shared_ptr<connection> c)
    {
        c->expire_never();
        if (waiter* w = pop_waiter()) {
            w->handed = std::move(c);
            w->timer.cancel();
            return;
        }
        idle.push_back(std::move(c));
    }

    /// A connection (or the slot reserved for one) is gone: the first waiter may open one.
    void drop() noexcept
    {
        --open;
        if (waiter* w = pop_waiter()) {
            ++open;
            w->may_open = true;
            w->timer.cancel();
        }
    }

    void forget(waiter* w) noexcept
    {
        if (!w->queued) return;
        w->queued = false;
        if (auto it = std::find(waiters.begin(), waiters.end(), w); it != waiters.end()) waiters.erase(it);
    }

private:
    waiter* pop_waiter() noexcept
    {
        if (waiters.empty()) return nullptr;
        waiter* w = waiters.front();
        waiters.pop_front();
        w->queued = false;
        return w;
    }
};

/** A request's hold on its lane: one slot of the limit, and the connection in it (none
    yet when the request must open one). Released when the request ends: the connection
    goes back to the pool when `keep` is set, else it is closed and the slot freed. */
struct lease {
    lease() = default;
    lease(const lease&) = delete;
    lease& operator=(const lease&) = delete;
    ~lease() { release(); }

    void release() noexcept
    {
        if (!pool) return;
        auto* p = std::exchange(pool, nullptr);
        if (conn && keep) {
            p->put_back(std::move(conn));
        } else {
            if (conn) conn->close();
            conn.reset();
            p->drop();
        }
    }

    lane_pool* pool = nullptr; ///< set while a slot is held
    std::shared_ptr<connection> conn;
    bool reused = false;
    bool keep = false;
};

inline bool cancelled(const asio::cancellation_state& cs) noexcept
{
    return cs.cancelled() != asio::cancellation_type::none;
}

/// What a failed operation stands for: the caller's cancellation, a deadline, or itself.
inline std::error_code failure(const connection& c, const asio::cancellation_state& cs,
                               const boost::system::error_code& ec)
{
    if (cancelled(cs)) return aborted();
    if (c.expired() != phase::none) return timeout_error(c.expired());
    return to_std_error(ec);
}

/** Takes a slot on `pool`: an idle connection, or the right to open one, or (at the
    limit) a place in the queue until one of those is passed on. Kept-alive connections
    that are not `reusable` are closed on the way (counted in `discarded`): a request that
    was handed one opens a new connection in its slot. */
inline asio::awaitable<std::error_code> acquire(lane_pool& pool, lease& l, const limit& outer,
                                                std::atomic<std::uint64_t>& discarded)
{
    while (!pool.idle.empty()) {
        auto c = std::move(pool.idle.back()); // the most recently used: the least likely to be stale
        pool.idle.pop_back();
        if (c->reusable()) {
            l.conn = std::move(c);
            l.reused = true;
            l.pool = &pool;
            co_return std::error_code{};
        }
        c->close();
        discarded.fetch_add(1, std::memory_order_relaxed);
        pool.drop();
    }
    if (pool.open < pool.limit) {
        ++pool.open;
        l.pool = &pool;
        co_return std::error_code{};
    }
    waiter w(pool.ex, outer.at);
    pool.waiters.push_back(&w);
    w.queued = true;
    struct unqueue {
        lane_pool& p;
        waiter& w;
        ~unqueue() { p.forget(&w); }
    } guard{pool, w};
    auto [ec] = co_await w.timer.async_wait(no_throw);
    const auto cs = co_await asio::this_coro::cancellation_state;
    if (w.handed || w.may_open) {
        l.pool = &pool;
        l.conn = std::move(w.handed);
        if (cancelled(cs)) {
            l.keep = true; // give the connection, untouched, to the next in line
            co_return aborted();
        }
        if (l.conn && !l.conn->reusable()) {
            l.conn->close();
            l.conn.reset();
            discarded.fetch_add(1, std::memory_order_relaxed);
        }
        l.reused = static_cast<bool>(l.conn);
        co_return std::error_code{};
    }
    if (!ec) co_return timeout_error(outer.why);
    co_return aborted();
}

inline bool expects_body(bhttp::verb v) noexcept
{
    return v == bhttp::verb::post || v == bhttp::verb::put || v == bhttp::verb::patch;
}

} // namespace detail

inline client::client(runtime& rt, endpoint ep, client_options o)
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

    const std::size_t lanes = rt.io_lanes();
    const std::size_t total = std::max<std::size_t>(opts_.max_connections, 1);
    const std::size_t per_lane = (total + lanes - 1) / lanes;
    lanes_.reserve(lanes);
    for (std::size_t i = 0; i < lanes; ++i) {
        auto p = std::make_unique<detail::lane_pool>(rt.io_executor(i), per_lane);
        if (host_is_address_) {
            p->fixed_address = true;
            p->addresses.emplace_back(address, ep_.port);
        }
        lanes_.push_back(std::move(p));
    }
}

inline client::~client()
{
    // Idle connections belong to their lane's thread: they are closed there.
    for (auto& p : lanes_) {
        auto idle = std::move(p->idle);
        if (idle.empty()) continue;
        if (p->ex.running_in_this_thread()) idle.clear();
        else asio::post(p->ex, [idle = std::move(idle)]() mutable { idle.clear(); });
    }
}

inline asio::awaitable<std::pair<std::error_code, response>> client::send(const request& req)
{
    const auto lane = rt_->current_io_lane();
    if (!lane)
        co_return std::pair<std::error_code, response>{std::make_error_code(std::errc::operation_not_permitted), response{}};

    // Cancellation is reported as operation_aborted, never thrown at an inner co_await;
    // the caller's own setting is put back before returning.
    const bool throwing = co_await asio::this_coro::throw_if_cancelled();
    co_await asio::this_coro::throw_if_cancelled(false);
    std::pair<std::error_code, response> out;
    std::exception_ptr unexpected;
    try {
        out = co_await perform(*lanes_[*lane], req);
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

inline asio::awaitable<std::pair<std::error_code, response>> client::perform(detail::lane_pool& pool, const request& req)
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

inline asio::awaitable<std::error_code> client::resolve(detail::lane_pool& pool, time_point deadline, detail::phase deadline_phase)
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
        struct unlist {
            detail::lane_pool& p;
            detail::timer_type* t;
            ~unlist() { std::erase(p.resolve_waiters, t); }
        } guard{pool, &wake};
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

inline asio::awaitable<std::error_code> client::connect(detail::lane_pool& pool, detail::connection& c, const detail::limit& outer)
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
        if (detail::cancelled(cs)) co_return detail::aborted();
        auto [ec] = co_await t->async_handshake(asio::ssl::stream_base::client, detail::no_throw_for<detail::tls_stream_type>());
        if (ec) co_return detail::failure(c, cs, ec);
    }
    c.expire_never();
    co_return std::error_code{};
}

inline void client::write_head(std::string& h, const request& req) const
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

template <class Stream>
asio::awaitable<std::error_code> client::exchange(Stream& s, detail::connection& c, const request& req, response& resp,
                                                  bool reused, bool& stale, bool& keep, const detail::limit& outer)
{
    namespace bhttp = boost::beast::http;
    using detail::clock_type;
    using detail::phase;
    const auto cs = co_await asio::this_coro::cancellation_state;
    const auto& limits = opts_.timeouts;

    // The request: header and body in as few writes as the socket takes.
    write_head(c.head, req);
    const std::size_t head_size = c.head.size();
    const std::size_t request_size = head_size + req.body.size();
    for (std::size_t done = 0; done < request_size;) {
        if (detail::cancelled(cs)) co_return detail::aborted();
        const auto [at, ph] = detail::bound(clock_type::now(), limits.idle, phase::idle, outer);
        c.expire_at(at, ph);
        const std::size_t body_done = done > head_size ? done - head_size : 0;
        const std::array<asio::const_buffer, 2> parts{
            asio::const_buffer(c.head.data() + std::min(done, head_size), head_size - std::min(done, head_size)),
            asio::const_buffer(req.body.data() + body_done, req.body.size() - body_done)};
        auto [ec, n] = co_await s.async_write_some(parts, detail::no_throw_for<Stream>());
        if (ec) {
            stale = reused && !detail::cancelled(cs) && c.expired() == phase::none && detail::is_peer_close(ec);
            co_return detail::failure(c, cs, ec);
        }
        done += n;
    }

    // The header. Interim responses (100 Continue, 103 Early Hints) are read past.
    std::optional<bhttp::response_parser<bhttp::buffer_body>> parser;
    for (;;) {
        parser.emplace();
        parser->header_limit(detail::max_header_bytes);
        parser->body_limit(boost::none);
        if (req.method == bhttp::verb::head) parser->skip(true);
        if (detail::cancelled(cs)) co_return detail::aborted();
        const auto [at, ph] = detail::bound(clock_type::now(), limits.first_byte, phase::first_byte, outer);
        c.expire_at(at, ph);
        auto [ec, n] = co_await bhttp::async_read_header(s, c.buf, *parser, detail::no_throw);
        if (ec) {
            if (!parser->got_some() && !detail::cancelled(cs) && c.expired() == phase::none && detail::is_peer_close(ec)) {
                stale = reused;
                if (ec == bhttp::error::end_of_stream || ec == asio::error::eof || ec == asio::ssl::error::stream_truncated)
                    co_return make_error_code(errc::stale_connection);
            }
            co_return detail::failure(c, cs, ec);
        }
        const unsigned status = parser->get().result_int();
        if (status >= 100 && status < 200 && status != 101) continue;
        if (status == 408 && reused) {
            // A server that drops an idle connection may send 408 first; here it crossed
            // the request on the wire (the connection was clean when it was taken). Like
            // browsers, take it for the server's farewell: the caller sends again.
            stale = true;
            co_return make_error_code(errc::stale_connection);
        }
        break;
    }
    auto& p = *parser;

    std::size_t received = 0;
    const bool into = !req.body_into.empty();
    if (p.is_done()) {
        // No body: HEAD, 1xx, 204, 304, or Content-Length: 0.
    } else if (const auto length = p.content_length(); length && !p.chunked()) {
        // Content-Length: the bytes that came with the header, then the rest straight from
        // the socket into place.
        const std::uint64_t len = *length;
        std::byte* dst = nullptr;
        if (into) {
            if (len > req.body_into.size()) co_return make_error_code(errc::body_too_large);
            dst = req.body_into.data();
        } else {
            if (len > std::numeric_limits<std::size_t>::max()) co_return make_error_code(errc::body_too_large);
            resp.body = rt_->buffers().acquire(static_cast<std::size_t>(len));
            dst = resp.body.data();
        }
        const auto size = static_cast<std::size_t>(len);
        received = std::min(size, c.buf.size());
        if (received > 0) std::memcpy(dst, c.buf.data().data(), received);
        c.buf.consume(received);
        while (received < size) {
            if (detail::cancelled(cs)) co_return detail::aborted();
            const auto [at, ph] = detail::bound(clock_type::now(), limits.idle, phase::idle, outer);
            c.expire_at(at, ph);
            auto [ec, n] = co_await s.async_read_some(asio::mutable_buffer(dst + received, size - received), detail::no_throw_for<Stream>());
            received += n;
            if (ec) {
                if (!detail::cancelled(cs) && c.expired() == phase::none &&
                    (ec == asio::error::eof || ec == asio::ssl::error::stream_truncated))
                    co_return make_error_code(errc::body_truncated);
                co_return detail::failure(c, cs, ec);
            }
        }
    } else {
        // Chunked, or up to the connection's close: Beast's parser decodes into the
        // destination, which grows (pooled) as the body arrives.
        p.eager(true); // decode every chunk already read, not one per call
        std::byte* dst = nullptr;
        std::size_t capacity = 0;
        if (into) {
            dst = req.body_into.data();
            capacity = req.body_into.size();
        } else {
            resp.body = rt_->buffers().acquire(detail::first_unsized_body_bytes);
            dst = resp.body.data();
            capacity = resp.body.capacity();
        }
        while (!p.is_done()) {
            if (received == capacity && !into) {
                auto bigger = rt_->buffers().acquire(capacity * 2);
                std::memcpy(bigger.data(), dst, received);
                resp.body = std::move(bigger);
                dst = resp.body.data();
                capacity = resp.body.capacity();
            }
            // With no room left in body_into, a read still finishes a body that is complete
            // (the last chunk is all that is left); more body bytes are too many.
            const std::size_t room = capacity - received;
            auto& b = p.get().body();
            b.data = dst + received;
            b.size = room;
            if (detail::cancelled(cs)) co_return detail::aborted();
            const auto [at, ph] = detail::bound(clock_type::now(), limits.idle, phase::idle, outer);
            c.expire_at(at, ph);
            auto [ec, n] = co_await bhttp::async_read_some(s, c.buf, p, detail::no_throw);
            received += room - b.size;
            if (ec == bhttp::error::need_buffer) {
                if (room == 0) co_return make_error_code(errc::body_too_large);
                continue;
            }
            if (ec) {
                if (!detail::cancelled(cs) && c.expired() == phase::none &&
                    (ec == bhttp::error::partial_message || ec == asio::error::eof ||
                     ec == bhttp::error::end_of_stream || ec == asio::ssl::error::stream_truncated))
                    co_return make_error_code(errc::body_truncated);
                co_return detail::failure(c, cs, ec);
            }
        }
        if (!into) resp.body.resize(received);
    }

    resp.status = p.get().result_int();
    resp.headers = std::move(static_cast<bhttp::fields&>(p.get()));
    resp.body_size = received;
    if (!into && received == 0) resp.body = buffer{};
    // Bytes beyond the response mean the connection's framing is lost: do not reuse it.
    keep = p.keep_alive() && c.buf.size() == 0 && resp.status != 101;
    co_return std::error_code{};
}

inline std::string timeout_name(std::error_code ec, const timeouts& t)
{
    if (ec.category() != http_category()) return {};
    const char* name = nullptr;
    std::chrono::milliseconds d{};
    switch (static_cast<errc>(ec.value())) {
    case errc::connect_timeout: name = "connect timeout", d = t.connect; break;
    case errc::first_byte_timeout: name = "first byte timeout", d = t.first_byte; break;
    case errc::idle_timeout: name = "idle timeout", d = t.idle; break;
    case errc::total_timeout: name = "total timeout", d = t.total; break;
    case errc::attempt_timeout: name = "attempt timeout", d = t.attempt; break;
    default: return {};
    }
    // A total deadline set by the caller alone (request::deadline) has no value here.
    if (d.count() <= 0) return name;
    char value[32];
    const auto ms = static_cast<long long>(d.count());
    if (ms % 1000 == 0) std::snprintf(value, sizeof value, "%lld s", ms / 1000);
    else if (ms < 10'000) std::snprintf(value, sizeof value, "%lld ms", ms);
    else std::snprintf(value, sizeof value, "%.1f s", static_cast<double>(ms) / 1000);
    return std::string(name) + " (" + value + ")";
}

} // namespace conveyor::http

#endif
