// conveyor/http/detail/connection.hpp — the HTTP client's connections and per-lane pools:
// sockets and TLS streams, the deadline watchdog, idle lists, the queue of requests
// waiting for a connection, and the helpers of the request coroutines. Included only by
// the http module's .ipp files (never by a public header): Beast and OpenSSL stay here.
#ifndef CONVEYOR_HTTP_DETAIL_CONNECTION_HPP
#define CONVEYOR_HTTP_DETAIL_CONNECTION_HPP

#include <conveyor/core/error.hpp>
#include <conveyor/http/client.hpp>
#include <conveyor/http/error.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/basic_stream_socket.hpp>
#include <boost/asio/basic_waitable_timer.hpp>
#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/basic_resolver.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include <openssl/bio.h>
#include <openssl/ssl.h>

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

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

/// The deadline that bounds a whole `async_send`: the earlier of the call's (`timeouts::total`,
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

/// Frees an OpenSSL session (a reference count: safe on any thread).
struct tls_session_free {
    void operator()(SSL_SESSION* s) const noexcept { SSL_SESSION_free(s); }
};
using tls_session_ptr = std::unique_ptr<SSL_SESSION, tls_session_free>;

/// The OpenSSL ex_data slot of a client connection's SSL that points to its `lane_pool`
/// (Asio keeps its verify callback in the app data slot).
inline int tls_pool_index() noexcept
{
    static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
    return index;
}

/** One lane's share of the client: its idle connections, its count against the limit,
    the requests waiting for a connection, the host's addresses and the TLS session that
    new connections resume. Touched only on the lane's thread, so it needs no lock. */
struct lane_pool {
    lane_pool(const lane_executor& e, std::size_t lim, std::size_t idle_lim) : ex(e), limit(lim), idle_limit(idle_lim) {}

    lane_executor ex;
    std::size_t limit;
    std::size_t idle_limit; ///< most connections in `idle`
    std::atomic<std::uint64_t> idle_closed{0}; ///< connections closed to stay within `idle_limit` (read by `stats` on any thread)
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

    /// The latest resumable session the server gave a connection of this lane. Kept and
    /// offered as copies: OpenSSL marks a connection's session unresumable when that
    /// connection is freed without a close_notify, as HTTP clients close them.
    tls_session_ptr tls_session;

    /// A connection whose response was read completely goes to the first waiter, else idle;
    /// at the idle limit, the least recently used idle connection is closed instead.
    void put_back(std::shared_ptr<connection> c)
    {
        c->expire_never();
        if (waiter* w = pop_waiter()) {
            w->handed = std::move(c);
            w->timer.cancel();
            return;
        }
        if (idle_limit == 0) {
            c->close();
            idle_closed.fetch_add(1, std::memory_order_relaxed);
            --open; // no request waits (above)
            return;
        }
        if (idle.size() >= idle_limit) {
            idle.front()->close();
            idle.erase(idle.begin());
            idle_closed.fetch_add(1, std::memory_order_relaxed);
            --open;
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

/// Takes a request's timer off its lane's `resolve_waiters` when it stops waiting for the
/// lookup, however it stops. (A named type, not one local to the coroutine: a coroutine
/// frame with a member of a type without linkage is warned about outside header-only mode.)
struct unlist_resolve_waiter {
    lane_pool& p;
    timer_type* t;
    ~unlist_resolve_waiter() { std::erase(p.resolve_waiters, t); }
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

} // namespace conveyor::http

#endif
