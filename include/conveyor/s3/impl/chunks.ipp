// conveyor/s3/impl/chunks.ipp — an S3 object as a stream of chunks (see s3/chunks.hpp).
#ifndef CONVEYOR_S3_IMPL_CHUNKS_IPP
#define CONVEYOR_S3_IMPL_CHUNKS_IPP

#include <conveyor/s3/chunks.hpp>

#include <conveyor/core/memory_budget.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/s3/detail/client_state.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/field.hpp>

#include <deque>
#include <exception>
#include <limits>
#include <optional>
#include <utility>

namespace conveyor::s3 {
namespace detail {

/** One object's stream: the sink the GET's body goes into, the chunks filled and waiting
    for the consumer, and the state that lets an attempt after a failure ask for the rest.
    The producer (the GET) and the consumer (`async_next`) run on the same lane and wake
    each other through two timers. */
struct object_stream final : body_stream {
    static constexpr std::uint64_t unknown = std::numeric_limits<std::uint64_t>::max();

    object_stream(std::shared_ptr<client_state> c, std::string b, std::string k, chunk_options opts,
                  runtime::io_executor_type ex)
        : state(std::move(c)), bucket(std::move(b)), key(std::move(k)), url("s3://" + bucket + "/" + key), o(opts),
          lane(ex), consumer_wake(ex), producer_wake(ex), next(opts.offset), cur_offset(opts.offset)
    {
        if (o.length != unknown && o.length <= unknown - o.offset) end = o.offset + o.length;
    }

    // ---- body_stream: the GET's side --------------------------------------------------

    void before_attempt(boost::beast::http::fields& h) override
    {
        problem.clear();
        problem_code = {};
        // The first attempt at a whole object is a plain GET (an empty object has no byte 0
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
        std::uint64_t total_now = 0;
        if (status == 206) {
            std::uint64_t first = 0, last = 0;
            std::int64_t t = -1;
            const std::string_view cr = h[boost::beast::http::field::content_range];
            if (!parse_content_range(cr, first, last, t) || first != next)
                return refuse(errc::bad_reply, "a ranged GET from byte " + std::to_string(next) + " was answered with Content-Range '" +
                                                   std::string(cr) + "'");
            if (t < 0) {
                total_now = unknown;
            } else {
                total_now = static_cast<std::uint64_t>(t);
            }
        } else if (status == 200) {
            if (next != 0)
                return refuse(errc::bad_reply, "a ranged GET from byte " + std::to_string(next) +
                                                   " was answered 200 with the whole object (the server ignored Range)");
            std::uint64_t n = 0;
            const std::string_view cl = h[boost::beast::http::field::content_length];
            total_now = !cl.empty() && parse_decimal(cl, n) ? n : unknown;
        } else {
            return refuse(errc::bad_reply, "GetObject answered status " + std::to_string(status));
        }
        if (etag.empty()) {
            etag = std::string(tag);
        } else if (!tag.empty() && tag != etag) {
            return refuse(errc::object_changed, "the object changed while it was read: its ETag was " + etag + ", now " +
                                                    std::string(tag));
        }
        if (total_now != unknown) {
            total = static_cast<std::int64_t>(total_now);
            if (end == unknown || end > total_now) end = std::max(total_now, next);
        }
        return {};
    }

    asio::awaitable<std::span<std::byte>> async_prepare() override
    {
        if (cur.capacity() == 0) {
            while (ready.size() >= o.chunks_in_flight && !closed) {
                producer_wake.expires_at(asio::steady_timer::time_point::max());
                co_await producer_wake.async_wait(asio::as_tuple(asio::use_awaitable));
                const auto cs = co_await asio::this_coro::cancellation_state; // (not inside the condition: GCC 12)
                if (cs.cancelled() != asio::cancellation_type::none) co_return std::span<std::byte>{};
            }
            if (closed) co_return std::span<std::byte>{};
            const std::size_t len =
                end == unknown ? o.chunk_size : static_cast<std::size_t>(std::min<std::uint64_t>(o.chunk_size, std::max<std::uint64_t>(end - next, 1)));
            auto& budget = state->rt.memory();
            if (auto l = budget.try_acquire(len)) {
                cur_lease = std::move(*l);
            } else {
                auto [ec, l2] = co_await budget.async_acquire(len, asio::as_tuple(asio::use_awaitable));
                if (ec || closed) co_return std::span<std::byte>{};
                cur_lease = std::move(l2);
            }
            cur = state->rt.buffers().acquire(len);
            cur_fill = 0;
            cur_offset = next;
        }
        co_return std::span<std::byte>(cur.data() + cur_fill, cur.size() - cur_fill);
    }

    void commit(std::size_t n) override
    {
        cur_fill += n;
        next += n;
        progress = true;
        if (cur_fill == cur.size()) flush();
    }

    // ---- both sides ---------------------------------------------------------------------

    /// Hands the chunk being filled to the consumer, if it holds anything.
    void flush()
    {
        if (cur_fill == 0) return;
        cur.resize(cur_fill);
        ready.push_back(chunk{leased_slice(std::move(cur), std::move(cur_lease)), cur_offset});
        cur = buffer{};
        cur_lease = memory_lease{};
        cur_fill = 0;
        consumer_wake.cancel();
    }

    std::error_code refuse(errc e, std::string why)
    {
        problem = std::move(why);
        problem_code = make_error_code(e);
        return problem_code;
    }

    /// The error `e` (the GET given up), told with the offset the stream reached and, where
    /// the reply was refused here, why.
    request_error located(const request_error& e) const
    {
        auto ctx = e.ctx();
        ctx.offset = static_cast<std::int64_t>(next);
        std::error_code code = e.code();
        if (e.reply().status == 412) {
            code = make_error_code(errc::object_changed);
            ctx.detail = "GetObject: the object changed while it was read (a ranged GET resuming at byte " +
                         std::to_string(next) + " with If-Match " + etag + " was answered 412 Precondition Failed)";
        } else if (problem_code && e.code() == problem_code) {
            ctx.detail = "GetObject: " + problem;
        }
        return request_error(code, std::move(ctx), e.reply(), e.attempts());
    }

    std::shared_ptr<client_state> state;
    std::string bucket, key, url;
    chunk_options o;
    runtime::io_executor_type lane;
    asio::steady_timer consumer_wake; // waited on by async_next, cancelled when a chunk is ready or the GET ends
    asio::steady_timer producer_wake; // waited on by async_prepare, cancelled when the consumer takes a chunk
    asio::cancellation_signal stop;   // the GET's

    std::deque<chunk> ready;
    buffer cur;                 // the chunk being filled
    memory_lease cur_lease;
    std::size_t cur_fill = 0;
    std::uint64_t next = 0;       // the next byte of the object to arrive
    std::uint64_t cur_offset = 0; // where `cur` starts in the object
    std::uint64_t end = unknown;  // one past the last byte wanted, once known
    std::int64_t total = -1;      // the object's size, once known
    std::string etag;             // of the first reply: later attempts must match it
    bool progress = false;
    bool started = false, done = false, closed = false;
    std::exception_ptr error;
    std::string problem;          // why a reply was refused here
    std::error_code problem_code;
};

/// The GET of a stream, to its end or its failure (which the consumer then throws).
CONVEYOR_DECL asio::awaitable<void> produce(std::shared_ptr<object_stream> st)
{
    try {
        if (st->end != object_stream::unknown && st->next >= st->end) {
            st->done = true; // nothing asked for
        } else {
            op o{.method = boost::beast::http::verb::get, .name = "GetObject", .bucket = st->bucket, .key = st->key};
            o.stream = st.get();
            bool past_end = false;
            try {
                co_await st->state->execute(o);
            } catch (const request_error& e) {
                // 416 before any byte: the range starts at or past the end of the object.
                if (e.reply().status == 416 && st->next == st->o.offset && st->etag.empty()) past_end = true;
                else throw st->located(e);
            }
            if (!past_end) {
                st->flush();
                if (st->end != object_stream::unknown && st->next < st->end)
                    throw st->state->failure(o, make_error_code(http::errc::body_truncated), {}, 1,
                                             "the object ended at byte " + std::to_string(st->next) + ", before " +
                                                 std::to_string(st->end));
            }
            st->done = true;
        }
    } catch (...) {
        st->error = std::current_exception();
    }
    st->consumer_wake.cancel();
}

/// Completion of the GET's coroutine: its outcome is already in the stream.
struct produce_done {
    void operator()(std::exception_ptr) const noexcept {}
};

/// An object's `chunk_reader` (see `s3::read_chunks`).
class object_chunk_reader final : public chunk_reader {
public:
    object_chunk_reader(std::shared_ptr<client_state> c, std::string bucket, std::string key, chunk_options o)
        : state_(std::move(c)), bucket_(std::move(bucket)), key_(std::move(key)), url_("s3://" + bucket_ + "/" + key_), o_(o)
    {
        if (o_.chunk_size == 0) o_.chunk_size = 1;
        if (o_.chunks_in_flight == 0) o_.chunks_in_flight = 1;
    }

    ~object_chunk_reader() override
    {
        if (!st_) return;
        if (st_->lane.running_in_this_thread()) close(st_);
        else asio::post(st_->lane, [st = st_] { close(st); });
    }

    asio::awaitable<std::optional<chunk>> async_next() override
    {
        if (st_ && !st_->lane.running_in_this_thread())
            co_return co_await asio::co_spawn(st_->lane, next_here(), asio::use_awaitable);
        if (!st_ && !state_->rt.current_io_lane())
            co_return co_await asio::co_spawn(state_->rt.next_io_executor(), next_here(), asio::use_awaitable);
        co_return co_await next_here();
    }

    const std::string& url() const noexcept override { return url_; }

    std::int64_t size() const noexcept override { return st_ ? st_->total : -1; }

private:
    // Ends the GET (its connection is closed) and wakes whoever waits. On the lane.
    static void close(const std::shared_ptr<object_stream>& st)
    {
        st->closed = true;
        st->stop.emit(asio::cancellation_type::terminal);
        st->producer_wake.cancel();
    }

    CONVEYOR_DECL asio::awaitable<std::optional<chunk>> next_here();

    std::shared_ptr<client_state> state_;
    std::string bucket_, key_, url_;
    chunk_options o_;
    std::shared_ptr<object_stream> st_;
};

CONVEYOR_DECL asio::awaitable<std::optional<chunk>> object_chunk_reader::next_here()
{
    if (!st_) {
        st_ = std::make_shared<object_stream>(state_, bucket_, key_, o_, state_->rt.io_executor(*state_->rt.current_io_lane()));
    }
    auto& st = *st_;
    if (!st.started) {
        st.started = true;
        asio::co_spawn(st.lane, produce(st_), asio::bind_cancellation_slot(st.stop.slot(), produce_done{}));
    }
    for (;;) {
        if (!st.ready.empty()) {
            chunk c = std::move(st.ready.front());
            st.ready.pop_front();
            st.producer_wake.cancel(); // room for one more
            co_return c;
        }
        if (st.error) std::rethrow_exception(st.error);
        if (st.done) co_return std::nullopt;
        st.consumer_wake.expires_at(asio::steady_timer::time_point::max());
        co_await st.consumer_wake.async_wait(asio::as_tuple(asio::use_awaitable));
        const auto cs = co_await asio::this_coro::cancellation_state; // (not inside the condition: GCC 12)
        if (cs.cancelled() != asio::cancellation_type::none)
            throw std::system_error(std::make_error_code(std::errc::operation_canceled));
    }
}

} // namespace detail

CONVEYOR_DECL std::unique_ptr<chunk_reader> read_chunks(const client& c, std::string bucket, std::string key, chunk_options o)
{
    return std::make_unique<detail::object_chunk_reader>(c.state(), std::move(bucket), std::move(key), o);
}

} // namespace conveyor::s3

#endif
