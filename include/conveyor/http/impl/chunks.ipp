// conveyor/http/impl/chunks.ipp — a resource behind a URL as a stream of chunks (see
// http/chunks.hpp).
#ifndef CONVEYOR_HTTP_IMPL_CHUNKS_IPP
#define CONVEYOR_HTTP_IMPL_CHUNKS_IPP

#include <conveyor/http/chunks.hpp>

#include <conveyor/core/error.hpp>
#include <conveyor/http/detail/chunk_stream.hpp>
#include <conveyor/http/endpoint.hpp>
#include <conveyor/http/error.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/verb.hpp>

#include <algorithm>
#include <chrono>
#include <exception>
#include <utility>

namespace conveyor::http {
namespace detail {

/// Attempts in a row without progress before a URL read gives up, and its backoff.
inline constexpr unsigned url_max_attempts = 5;
inline constexpr std::chrono::milliseconds url_base_delay{50};
inline constexpr std::chrono::milliseconds url_max_delay{2000};

/// One URL's stream (see chunk_stream), with its client and target.
struct url_stream final : chunk_stream {
    url_stream(std::shared_ptr<client> c, std::string t, std::string name, chunk_options opts, runtime::io_executor_type ex)
        : chunk_stream(c->rt(), std::move(name), opts, ex, make_error_code(errc::bad_range), make_error_code(errc::resource_changed)),
          http(std::move(c)), target(std::move(t))
    {
    }

    conveyor::error failure(std::error_code ec, std::string detail) const
    {
        return conveyor::error(ec, {.stage = "http", .where = url, .offset = static_cast<std::int64_t>(next), .detail = std::move(detail)});
    }

    std::shared_ptr<client> http;
    std::string target;
};

inline bool retryable_status(unsigned s) noexcept
{
    return s == 408 || s == 429 || s == 500 || s == 502 || s == 503 || s == 504;
}

/// The GETs of a stream, to its end or its failure (which the consumer then throws).
CONVEYOR_DECL asio::awaitable<void> produce_url(std::shared_ptr<url_stream> st)
{
    std::exception_ptr failed;
    try {
        unsigned series = 0; // attempts before the current series (progress starts a new one)
        for (unsigned attempt = 1; st->end == url_stream::unknown || st->next < st->end; ++attempt) {
            request req;
            req.method = boost::beast::http::verb::get;
            req.target = st->target;
            st->before_attempt(req.headers);
            req.body_to = st.get();
            auto sent = st->http->async_send(req); // named, not a temporary in the co_await (GCC 12)
            auto [ec, resp] = co_await std::move(sent);
            if (ec == std::errc::operation_canceled || st->closed) throw std::system_error(std::make_error_code(std::errc::operation_canceled));
            std::string why;
            bool retry = false;
            if (!ec && resp.status >= 200 && resp.status < 300) {
                st->flush();
                if (st->end != url_stream::unknown && st->next < st->end)
                    throw st->failure(make_error_code(errc::body_truncated), "the resource ended at byte " + std::to_string(st->next) +
                                                                                  ", before " + std::to_string(st->end));
                break;
            }
            if (!ec) {
                if (resp.status == 416 && st->next == st->o.offset && st->etag.empty()) break; // nothing from there on
                if (resp.status == 416 && st->next > st->o.offset && !st->etag.empty()) {
                    // A resumed GET pinned to the first reply's ETag: that version ends at `next`,
                    // all of it has arrived (the first reply announced more than it had).
                    st->end = st->next;
                    st->flush();
                    break;
                }
                if (resp.status == 412)
                    throw st->failure(make_error_code(errc::resource_changed),
                                      "it changed while it was read (a ranged GET resuming at byte " + std::to_string(st->next) +
                                          " with If-Match " + st->etag + " was answered 412 Precondition Failed)");
                why = "GET answered status " + std::to_string(resp.status);
                if (!retryable_status(resp.status)) throw st->failure(make_error_code(errc::error_status), why);
                retry = true;
                ec = make_error_code(errc::error_status);
            } else if (st->problem_code && ec == st->problem_code) {
                throw st->failure(ec, st->problem);
            } else {
                why = ec.message();
                retry = is_transient(ec);
            }
            if (st->took_progress()) series = attempt - 1;
            if (!retry || attempt - series >= url_max_attempts)
                throw st->failure(ec, why + (attempt > 1 ? " (after " + std::to_string(attempt) + " attempts)" : std::string()));
            const auto exp = std::min<unsigned>(attempt - series - 1, 10);
            const auto pause = std::min(url_max_delay, url_base_delay * (1u << exp));
            asio::steady_timer timer(st->lane, pause);
            auto [tec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
            if (tec || st->closed) throw std::system_error(std::make_error_code(std::errc::operation_canceled));
        }
    } catch (...) {
        failed = std::current_exception();
    }
    st->finish(failed);
}

/// Completion of the GETs' coroutine: its outcome is already in the stream.
struct produce_url_done {
    void operator()(std::exception_ptr) const noexcept {}
};

/// A URL's `chunk_reader` (see `http::read_chunks`).
class url_chunk_reader final : public chunk_reader {
public:
    url_chunk_reader(std::shared_ptr<client> c, std::string target, chunk_options o)
        : http_(std::move(c)), target_(std::move(target)), url_(http_->where().url() + target_), o_(o)
    {
        if (o_.chunk_size == 0) o_.chunk_size = 1;
        if (o_.chunks_in_flight == 0) o_.chunks_in_flight = 1;
    }

    ~url_chunk_reader() override
    {
        if (!st_) return;
        if (st_->lane.running_in_this_thread()) st_->close();
        else asio::post(st_->lane, [st = st_] { st->close(); });
    }

    asio::awaitable<std::optional<chunk>> async_next() override
    {
        if (st_ && !st_->lane.running_in_this_thread())
            co_return co_await asio::co_spawn(st_->lane, next_here(), asio::use_awaitable);
        if (!st_ && !http_->rt().current_io_lane())
            co_return co_await asio::co_spawn(http_->rt().next_io_executor(), next_here(), asio::use_awaitable);
        co_return co_await next_here();
    }

    const std::string& url() const noexcept override { return url_; }

    std::int64_t size() const noexcept override { return st_ ? st_->total : -1; }

private:
    CONVEYOR_DECL asio::awaitable<std::optional<chunk>> next_here();

    std::shared_ptr<client> http_;
    std::string target_, url_;
    chunk_options o_;
    std::shared_ptr<url_stream> st_;
};

CONVEYOR_DECL asio::awaitable<std::optional<chunk>> url_chunk_reader::next_here()
{
    if (!st_) {
        runtime& rt = http_->rt();
        st_ = std::make_shared<url_stream>(http_, target_, url_, o_, rt.io_executor(*rt.current_io_lane()));
    }
    if (!st_->started) {
        st_->started = true;
        asio::co_spawn(st_->lane, produce_url(st_), asio::bind_cancellation_slot(st_->stop.slot(), produce_url_done{}));
    }
    co_return co_await st_->async_take();
}

} // namespace detail

CONVEYOR_DECL std::unique_ptr<chunk_reader> read_chunks(std::shared_ptr<client> c, std::string target, chunk_options o)
{
    if (target.empty() || target.front() != '/') target.insert(target.begin(), '/');
    return std::make_unique<detail::url_chunk_reader>(std::move(c), std::move(target), o);
}

CONVEYOR_DECL std::unique_ptr<chunk_reader> read_chunks(runtime& rt, const location& where, chunk_options o, client_options co)
{
    return read_chunks(std::make_shared<client>(rt, endpoint_of(where), std::move(co)), where.target(), o);
}

CONVEYOR_DECL std::unique_ptr<chunk_reader> read_chunks(runtime& rt, std::string url, chunk_options o, client_options co)
{
    return read_chunks(rt, location(url), o, std::move(co));
}

} // namespace conveyor::http

#endif
