// fuzz/http_targets.cpp — the HTTP client's response path: `client_impl::exchange`, the
// coroutine that writes a request and reads its response (Beast's parser over the stream,
// interim responses, Content-Length, chunked and read-to-close bodies, into a pooled
// buffer, into the caller's span or through a streaming sink), over an in-memory stream
// that serves the input in pieces and then reports end of file.
//
// Not covered here: connecting, resolving, TLS, the pool's reuse of connections and the
// deadline watchdog (the target sets no timeouts), which are not parsers of input.
#include "targets.hpp"

#include <conveyor/core/runtime.hpp>
#include <conveyor/http/client.hpp>
#include <conveyor/http/detail/client_impl.hpp>
#include <conveyor/http/detail/connection.hpp>

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <vector>

namespace conveyor::fuzz {

namespace {

/// An AsyncStream over bytes in memory: each read returns at most `piece` of them (as a
/// socket may), then end of file; writes are taken whole. Completions are posted, never
/// run inside the initiating call, as a socket's are.
class memory_stream {
public:
    using executor_type = asio::io_context::executor_type;

    memory_stream(executor_type ex, std::string_view data, std::size_t piece) : ex_(ex), data_(data), piece_(piece) {}

    executor_type get_executor() const noexcept { return ex_; }

    template <class MutableBuffers, class Token>
    auto async_read_some(const MutableBuffers& buffers, Token&& token)
    {
        return asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
            [this](auto handler, const MutableBuffers& b) {
                boost::system::error_code ec;
                std::size_t n = 0;
                if (asio::buffer_size(b) == 0) {
                    // A read of nothing completes at once with nothing, as a socket's does.
                } else if (at_ >= data_.size()) {
                    ec = asio::error::eof;
                } else {
                    n = asio::buffer_copy(b, asio::buffer(data_.substr(at_, piece_)));
                    at_ += n;
                }
                complete(std::move(handler), ec, n);
            },
            token, buffers);
    }

    template <class ConstBuffers, class Token>
    auto async_write_some(const ConstBuffers& buffers, Token&& token)
    {
        return asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
            [this](auto handler, const ConstBuffers& b) { complete(std::move(handler), {}, asio::buffer_size(b)); }, token,
            buffers);
    }

private:
    template <class Handler>
    void complete(Handler handler, boost::system::error_code ec, std::size_t n)
    {
        auto ex = asio::get_associated_executor(handler, ex_);
        asio::post(ex, [h = std::move(handler), ec, n]() mutable { std::move(h)(ec, n); });
    }

    executor_type ex_;
    std::string_view data_;
    std::size_t piece_;
    std::size_t at_ = 0;
};

/// A streaming sink that offers room of a fixed size and keeps what it is given.
class memory_sink final : public http::body_sink {
public:
    explicit memory_sink(std::size_t room) : room_(room) {}

    std::error_code on_header(unsigned status, const boost::beast::http::fields&) override
    {
        check(status >= 200 && status < 300, "a sink was handed a non-2xx response");
        check(!headed_, "on_header called twice");
        headed_ = true;
        return {};
    }
    asio::awaitable<std::span<std::byte>> async_prepare() override
    {
        check(headed_, "async_prepare before on_header");
        space_.resize(room_);
        co_return std::span<std::byte>(space_);
    }
    void commit(std::size_t n) override
    {
        check(n >= 1 && n <= space_.size(), "commit of more than was prepared, or of nothing");
        committed += n;
    }

    std::uint64_t committed = 0;

private:
    std::size_t room_;
    std::vector<std::byte> space_;
    bool headed_ = false;
};

} // namespace

void http_response(input in)
{
    static runtime rt({.io_threads = 1, .compute_threads = 1, .blocking_threads = 1});
    static http::detail::client_impl client(rt, http::parse_endpoint("http://127.0.0.1:9"), [] {
        http::client_options o;
        o.timeouts = {.connect = {}, .first_byte = {}, .idle = {}, .total = {}, .attempt = {}};
        return o;
    }());
    static asio::io_context ctx;

    const std::uint64_t h = hash_of(in);
    const std::size_t piece = std::size_t{1} << ((h >> 4) % 15); // 1 byte to 16 KiB per read
    memory_stream stream(ctx.get_executor(), as_text(in), piece);
    auto conn = std::make_shared<http::detail::connection>(ctx.get_executor(), nullptr, std::chrono::hours(1));

    http::request req;
    req.method = (h & 1) ? boost::beast::http::verb::head : boost::beast::http::verb::get;
    req.target = "/bucket/key";
    std::vector<std::byte> into((h >> 20) % 3000);
    if ((h & 2) && !into.empty()) req.body_into = into;
    memory_sink sink(1 + (h >> 32) % 5000);
    if (h & 4) req.body_to = &sink;
    const bool reused = (h & 8) != 0;

    http::response resp;
    bool stale = false;
    bool keep = false;
    bool completed = false;
    std::error_code result;
    const http::detail::limit outer; // (exchange keeps a reference: it must outlive the coroutine)
    asio::co_spawn(ctx, client.exchange(stream, *conn, req, resp, reused, stale, keep, outer),
                   [&](std::exception_ptr e, std::error_code ec) {
                       // exchange reports errors as values: an exception out of it is a finding.
                       if (e) std::rethrow_exception(e);
                       completed = true;
                       result = ec;
                   });
    ctx.run();
    ctx.restart();
    check(completed, "exchange did not complete once the stream had ended");
    if (!result) {
        check(resp.status >= 100 && resp.status <= 999, "a response with a status of other than three digits");
        if (req.body_to && resp.status >= 200 && resp.status < 300) {
            check(resp.body_size == sink.committed, "streamed body size differs from what the sink was given");
        } else if (!req.body_into.empty()) {
            check(resp.body_size <= req.body_into.size(), "body_into overfilled");
        } else {
            check(resp.body.size() == resp.body_size, "body buffer size differs from body_size");
        }
        check(resp.body_size <= in.size(), "more body bytes than the stream held");
    }
}

} // namespace conveyor::fuzz
