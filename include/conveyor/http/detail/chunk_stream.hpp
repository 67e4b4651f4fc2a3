// conveyor/http/detail/chunk_stream.hpp — one resource's bytes streamed from GETs into
// prefetched chunks: the sink a streamed body goes into (with what a GET that resumes after
// a failure needs: Range from the next byte, If-Match the first ETag) and the consumer's
// side of a chunk_reader. Shared by the S3 object reader and the http(s) URL reader;
// included only by .ipp files (it brings in Beast's fields).
#ifndef CONVEYOR_HTTP_DETAIL_CHUNK_STREAM_HPP
#define CONVEYOR_HTTP_DETAIL_CHUNK_STREAM_HPP

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/chunks.hpp>
#include <conveyor/core/detail/chunk_window.hpp>
#include <conveyor/core/memory_budget.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/http/client.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/fields.hpp>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <deque>
#include <exception>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

namespace conveyor::http::detail {

/** A streamed body that a caller's retries can resume: it gives each attempt's extra header
    fields (`Range: bytes=<next>-`, `If-Match`), and says whether the failed attempt
    delivered bytes (one that did starts a new series of attempts). */
struct resumable_sink : body_sink {
    /// Adds the fields of the next attempt to `h` (before it is signed).
    virtual void before_attempt(boost::beast::http::fields& h) = 0;
    /// True when body bytes arrived since the last call.
    virtual bool took_progress() noexcept = 0;
    /** Called when an attempt that resumed the body was answered 416: the rest asked for
        begins at or past the resource's end, so an earlier reply announced more bytes than
        the resource has (a wrong Content-Length). Forgets what arrived so that the next
        attempt starts over from the beginning, and returns true; false (the default) when it
        cannot, because bytes have gone on to a consumer or nothing was resumed. */
    virtual bool restart() noexcept { return false; }
};

/// "bytes 0-8388607/1073741824" → (first, last, total); total -1 for "*".
inline bool parse_content_range_field(std::string_view v, std::uint64_t& first, std::uint64_t& last, std::int64_t& total)
{
    auto number = [](std::string_view s, std::uint64_t& out) {
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
        return !s.empty() && ec == std::errc{} && end == s.data() + s.size();
    };
    if (!v.starts_with("bytes ")) return false;
    v.remove_prefix(6);
    const auto dash = v.find('-'), slash = v.find('/');
    if (dash == std::string_view::npos || slash == std::string_view::npos || slash < dash) return false;
    if (!number(v.substr(0, dash), first) || !number(v.substr(dash + 1, slash - dash - 1), last) || last < first) return false;
    const auto t = v.substr(slash + 1);
    if (t == "*") {
        total = -1;
        return true;
    }
    std::uint64_t tt = 0;
    if (!number(t, tt)) return false;
    total = static_cast<std::int64_t>(tt);
    return true;
}

/** One resource's stream: the sink its GETs' bodies go into, cut into the chunks of a
    `chunk_window` (the prefetcher every chunk reader shares) for the consumer, and what
    lets a GET after a failure ask for the rest. The producer (the GETs, run by the reader)
    and the consumer (`async_take`) run on the same lane. `bad_reply` and `changed` are the codes of a reply
    that does not hold the range asked for and of a resource whose ETag changed (each
    module has its own). */
struct chunk_stream : resumable_sink {
    static constexpr std::uint64_t unknown = std::numeric_limits<std::uint64_t>::max();

    chunk_stream(runtime& r, std::string name, chunk_options opts, runtime::io_executor_type ex, std::error_code bad_reply,
                 std::error_code changed)
        : rt(r), url(std::move(name)), o(opts), lane(ex),
          // `chunks_in_flight` chunks ahead of the consumer: filled, or the one being filled.
          window(std::make_shared<conveyor::detail::chunk_window>(r, opts, ex, opts.chunks_in_flight)),
          next(opts.offset), bad_reply_code(bad_reply), changed_code(changed)
    {
        if (o.length != unknown && o.length <= unknown - o.offset) end = o.offset + o.length;
    }

    // ---- the GET's side -----------------------------------------------------------------

    void before_attempt(boost::beast::http::fields& h) override
    {
        problem.clear();
        problem_code = {};
        // The first attempt at a whole resource is a plain GET (an empty one has no byte 0
        // to ask for); any other asks for what is still missing.
        if (next != 0 || end != unknown || !etag.empty()) {
            std::string range = "bytes=" + std::to_string(next) + "-";
            if (end != unknown) range += std::to_string(end - 1);
            h.set(boost::beast::http::field::range, range);
        }
        if (!etag.empty()) h.set(boost::beast::http::field::if_match, etag);
    }

    bool took_progress() noexcept override { return std::exchange(progress, false); }

    std::error_code on_header(unsigned status, const boost::beast::http::fields& h) override
    {
        const std::string_view tag = h[boost::beast::http::field::etag];
        std::uint64_t total_now = unknown;
        if (status == 206) {
            std::uint64_t first = 0, last = 0;
            std::int64_t t = -1;
            const std::string_view cr = h[boost::beast::http::field::content_range];
            if (!parse_content_range_field(cr, first, last, t) || first != next)
                return refuse(bad_reply_code, "a ranged GET from byte " + std::to_string(next) + " was answered with Content-Range '" +
                                                  std::string(cr) + "'");
            if (t >= 0) total_now = static_cast<std::uint64_t>(t);
        } else if (status == 200) {
            if (next != 0)
                return refuse(bad_reply_code, "a ranged GET from byte " + std::to_string(next) +
                                                  " was answered 200 with the whole resource (the server ignored Range)");
            const std::string_view cl = h[boost::beast::http::field::content_length];
            std::uint64_t n = 0;
            const auto [ptr, ec] = std::from_chars(cl.data(), cl.data() + cl.size(), n);
            if (!cl.empty() && ec == std::errc{} && ptr == cl.data() + cl.size()) total_now = n;
        } else {
            return refuse(bad_reply_code, "the GET was answered status " + std::to_string(status));
        }
        if (etag.empty()) {
            etag = std::string(tag);
        } else if (!tag.empty() && tag != etag) {
            return refuse(changed_code, "it changed while it was read: its ETag was " + etag + ", now " + std::string(tag));
        }
        if (total_now != unknown) {
            total = static_cast<std::int64_t>(total_now);
            if (end == unknown || end > total_now) end = std::max(total_now, next);
        }
        return {};
    }

    asio::awaitable<std::span<std::byte>> async_prepare() override
    {
        if (!cur) {
            if (closed) co_return std::span<std::byte>{};
            const std::size_t len =
                end == unknown ? o.chunk_size
                               : static_cast<std::size_t>(std::min<std::uint64_t>(o.chunk_size, std::max<std::uint64_t>(end - next, 1)));
            auto s = co_await window->async_reserve(next, len); // room in the window, then the chunk's memory
            if (!s || closed) co_return std::span<std::byte>{};
            s->buf = rt.buffers().acquire(len);
            cur = std::move(s);
            cur_fill = 0;
        }
        co_return std::span<std::byte>(cur->buf.data() + cur_fill, cur->buf.size() - cur_fill);
    }

    void commit(std::size_t n) override
    {
        cur_fill += n;
        next += n;
        progress = true;
        if (cur_fill == cur->buf.size()) flush();
    }

    /// Hands the chunk being filled to the consumer, if it holds anything.
    void flush()
    {
        if (!cur || cur_fill == 0) return;
        cur->buf.resize(cur_fill);
        buffer b = std::move(cur->buf);
        window->complete(*cur, std::move(b));
        cur = nullptr;
        cur_fill = 0;
    }

    /// The GETs are over: `error` (null: the resource ended) is what the consumer gets after
    /// the chunks already filled.
    void finish(std::exception_ptr error_ptr)
    {
        if (!error_ptr) flush();
        if (cur) { // asked for and not handed on: nothing came, or the GETs failed
            window->drop_last(cur);
            cur = nullptr;
            cur_fill = 0;
        }
        window->finish(std::move(error_ptr));
    }

    /// Ends the GETs (their connection is closed) and wakes whoever waits.
    void close()
    {
        closed = true;
        stop.emit(asio::cancellation_type::terminal);
        window->close();
    }

    std::error_code refuse(std::error_code e, std::string why)
    {
        problem = std::move(why);
        problem_code = e;
        return problem_code;
    }

    // ---- the consumer's side --------------------------------------------------------------

    /// The next chunk, nullopt after the last; throws the GETs' error after the chunks that
    /// came before it. Cancelling the awaiting coroutine ends the wait with operation_canceled.
    asio::awaitable<std::optional<chunk>> async_take()
    {
        auto s = co_await window->async_take();
        if (!s) co_return std::nullopt;
        co_return chunk{leased_slice(std::move(s->buf), std::move(s->lease)), s->offset};
    }

    runtime& rt;
    std::string url;
    chunk_options o;
    runtime::io_executor_type lane;
    asio::cancellation_signal stop; // the GETs'

    std::shared_ptr<conveyor::detail::chunk_window> window; // the chunks asked for and not yet taken
    std::shared_ptr<conveyor::detail::chunk_window::slot> cur; // the one being filled
    std::size_t cur_fill = 0;
    std::uint64_t next = 0;       // the next byte of the resource to arrive
    std::uint64_t end = unknown;  // one past the last byte wanted, once known
    std::int64_t total = -1;      // the resource's size, once known
    std::string etag;             // of the first reply: later attempts must match it
    bool progress = false;
    bool started = false, closed = false;
    std::string problem;          // why a reply was refused here
    std::error_code problem_code;
    std::error_code bad_reply_code, changed_code;
};

} // namespace conveyor::http::detail

#endif
