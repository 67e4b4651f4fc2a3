// tests/support/http_server.hpp — a scriptable HTTP(S) server for tests: raw Asio and
// Beast's request parser on its own io_context and thread, listening on 127.0.0.1 port 0,
// so that each misbehaviour of a server can be produced on purpose. Used by the HTTP
// client's tests and by the S3 client's tests that need no real S3 server. Not a
// translation unit.
#ifndef CONVEYOR_TESTS_SUPPORT_HTTP_SERVER_HPP
#define CONVEYOR_TESTS_SUPPORT_HTTP_SERVER_HPP

#include <conveyor/http/endpoint.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <boost/optional/optional.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

namespace conveyor_test {

/** The most bytes the kernel may hold on a loopback TCP connection whose reader stopped:
    the largest receive buffer plus the largest send buffer that autotuning may reach (the
    third fields of /proc/sys/net/ipv4/tcp_rmem and tcp_wmem; 64 MiB each where they cannot
    be read). Common defaults put tcp_rmem's maximum at 6 MiB and tuned hosts at 32 MiB or
    more, so no fixed figure fits every machine. */
inline std::size_t loopback_buffer_max()
{
    auto max_of = [](const char* path) {
        std::FILE* f = std::fopen(path, "r");
        unsigned long long lo = 0, def = 0, hi = 0;
        const bool ok = f && std::fscanf(f, "%llu %llu %llu", &lo, &def, &hi) == 3;
        if (f) std::fclose(f);
        return ok ? static_cast<std::size_t>(hi) : std::size_t{64} << 20;
    };
    return max_of("/proc/sys/net/ipv4/tcp_rmem") + max_of("/proc/sys/net/ipv4/tcp_wmem");
}

namespace http_server_detail {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace ch = conveyor::http;
using tcp = asio::ip::tcp;
inline constexpr auto no_throw = asio::as_tuple(asio::use_awaitable);

/// One accepted connection, as a script sees it.
class peer {
public:
    peer(tcp::socket s, asio::ssl::context* tls) : sock_(std::move(s))
    {
        if (tls) tls_.emplace(sock_, *tls);
    }

    asio::awaitable<bool> handshake()
    {
        if (!tls_) co_return true;
        auto [ec] = co_await tls_->async_handshake(asio::ssl::stream_base::server, no_throw);
        co_return !ec;
    }

    /// Reads the next request (its body may be of any size); false at the end of the
    /// connection.
    asio::awaitable<bool> read(bhttp::request<bhttp::string_body>& req)
    {
        boost::system::error_code ec;
        bhttp::request_parser<bhttp::string_body> parser;
        parser.body_limit(boost::none);
        if (tls_) std::tie(ec, std::ignore) = co_await bhttp::async_read(*tls_, buf_, parser, no_throw);
        else std::tie(ec, std::ignore) = co_await bhttp::async_read(sock_, buf_, parser, no_throw);
        if (!ec) req = parser.release();
        co_return !ec;
    }

    /// Writes raw bytes; false if the client is gone.
    asio::awaitable<bool> write(std::string_view bytes)
    {
        boost::system::error_code ec;
        if (tls_) std::tie(ec, std::ignore) = co_await asio::async_write(*tls_, asio::buffer(bytes), no_throw);
        else std::tie(ec, std::ignore) = co_await asio::async_write(sock_, asio::buffer(bytes), no_throw);
        co_return !ec;
    }

    /// Returns when the client closes the connection (whatever it sends is dropped).
    asio::awaitable<void> wait_closed()
    {
        char scratch[4096];
        for (;;) {
            boost::system::error_code ec;
            if (tls_) std::tie(ec, std::ignore) = co_await tls_->async_read_some(asio::buffer(scratch), no_throw);
            else std::tie(ec, std::ignore) = co_await sock_.async_read_some(asio::buffer(scratch), no_throw);
            if (ec) co_return;
        }
    }

    asio::awaitable<void> pause(std::chrono::milliseconds d)
    {
        asio::steady_timer t(sock_.get_executor(), d);
        co_await t.async_wait(no_throw);
    }

    /// Ends the server's side of the connection (a FIN) and keeps reading: the client sees
    /// a half-closed connection.
    void shutdown_send()
    {
        boost::system::error_code ignored;
        sock_.shutdown(tcp::socket::shutdown_send, ignored);
    }

    /// Whether the TLS handshake resumed an earlier session (false without TLS).
    bool tls_resumed() { return tls_ && SSL_session_reused(tls_->native_handle()) == 1; }

    void close()
    {
        boost::system::error_code ignored;
        sock_.shutdown(tcp::socket::shutdown_both, ignored);
        sock_.close(ignored);
    }

    /// Cuts the connection abruptly: SO_LINGER 0 makes the close send a RST (the client's
    /// next read fails with connection_reset, whatever was still in flight).
    void reset()
    {
        boost::system::error_code ignored;
        sock_.set_option(asio::socket_base::linger(true, 0), ignored);
        sock_.close(ignored);
    }

    /// Writes `bytes` in pieces of `piece` bytes, adding each piece to `sent` once the
    /// kernel took it: how a test sees that a client stopped reading (TCP's window then
    /// stops the writes). False if the client is gone.
    asio::awaitable<bool> write_counted(std::string_view bytes, std::size_t piece, std::atomic<std::size_t>& sent)
    {
        for (std::size_t at = 0; at < bytes.size(); at += piece) {
            if (!co_await write(bytes.substr(at, std::min(piece, bytes.size() - at)))) co_return false;
            sent += std::min(piece, bytes.size() - at);
        }
        co_return true;
    }

private:
    tcp::socket sock_;
    std::optional<beast::ssl_stream<tcp::socket&>> tls_;
    beast::flat_buffer buf_;
};

/// What a server does with one request: `nth` counts the requests on this connection
/// from 0. Returns whether to read another request on the connection (false closes it).
using script = std::function<asio::awaitable<bool>(peer&, const bhttp::request<bhttp::string_body>&, std::size_t nth)>;

/// A server on 127.0.0.1 (port 0) running `script` for every request, on its own thread.
class test_server {
public:
    /// Listens on `address`:`port` (port 0: one the system picks); throws when it cannot.
    explicit test_server(script s, asio::ssl::context* tls = nullptr, const std::string& address = "127.0.0.1",
                         std::uint16_t port = 0)
        : script_(std::move(s)), tls_(tls), acceptor_(io_, tcp::endpoint(asio::ip::make_address(address), port))
    {
        port_ = acceptor_.local_endpoint().port();
        asio::co_spawn(io_, accept_loop(), asio::detached);
        thread_ = std::thread([this] { io_.run(); });
    }
    ~test_server()
    {
        io_.stop();
        thread_.join();
    }
    test_server(const test_server&) = delete;
    test_server& operator=(const test_server&) = delete;

    std::uint16_t port() const { return port_; }
    ch::endpoint endpoint(std::string host = "127.0.0.1") const
    {
        ch::endpoint e;
        e.tls = tls_ != nullptr;
        e.host = std::move(host);
        e.port = port_;
        return e;
    }

    int accepts() const { return accepts_.load(); }
    int peak() const { return peak_.load(); }
    int requests() const { return requests_.load(); }
    int closed() const { return closed_.load(); }
    int failed_handshakes() const { return failed_handshakes_.load(); }
    /// Every request's target, in the order they arrived.
    std::vector<std::string> targets() const
    {
        std::lock_guard lk(mu_);
        return targets_;
    }
    /// The last request's header fields, as the server saw them.
    bhttp::fields last_fields() const
    {
        std::lock_guard lk(mu_);
        return last_fields_;
    }

private:
    asio::awaitable<void> accept_loop()
    {
        for (;;) {
            auto [ec, s] = co_await acceptor_.async_accept(no_throw);
            if (ec) co_return;
            asio::co_spawn(io_, serve(std::move(s)), asio::detached);
        }
    }

    asio::awaitable<void> serve(tcp::socket s)
    {
        peer p(std::move(s), tls_);
        ++accepts_;
        const int now_open = ++open_;
        for (int seen = peak_.load(); now_open > seen && !peak_.compare_exchange_weak(seen, now_open);) {
        }
        if (co_await p.handshake()) {
            for (std::size_t nth = 0;; ++nth) {
                bhttp::request<bhttp::string_body> req;
                if (!co_await p.read(req)) break;
                {
                    std::lock_guard lk(mu_);
                    targets_.emplace_back(req.target());
                    last_fields_ = req.base();
                }
                ++requests_;
                if (!co_await script_(p, req, nth)) break;
            }
        } else {
            ++failed_handshakes_;
        }
        p.close();
        --open_;
        ++closed_;
    }

    script script_; // outlives io_: suspended scripts are destroyed with it
    asio::ssl::context* tls_;
    std::atomic<int> accepts_{0}, open_{0}, peak_{0}, requests_{0}, closed_{0}, failed_handshakes_{0};
    mutable std::mutex mu_;
    std::vector<std::string> targets_;
    bhttp::fields last_fields_;
    asio::io_context io_;
    tcp::acceptor acceptor_;
    std::uint16_t port_ = 0;
    std::thread thread_;
};

/// A response with a Content-Length body.
inline std::string reply(unsigned status, std::string_view body, std::string_view extra_headers = {})
{
    std::string s = "HTTP/1.1 " + std::to_string(status) + " Status\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    s += extra_headers;
    s += "\r\n";
    s += body;
    return s;
}

/// A script for a server that reads the request and never answers (a silent endpoint): it
/// waits for the client to give up and close.
inline asio::awaitable<bool> never_answers(peer& p, const bhttp::request<bhttp::string_body>&, std::size_t)
{
    co_await p.wait_closed();
    co_return false;
}

} // namespace http_server_detail

using http_server_detail::never_answers;
using http_server_detail::peer;
using http_server_detail::reply;
using http_server_detail::script;
using http_server_detail::test_server;

} // namespace conveyor_test

#endif
