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

/** One object's stream (see http::detail::chunk_stream), with what the S3 reader adds:
    the client and the object, and its errors told with the offset reached. */
struct object_stream final : http::detail::chunk_stream {
    object_stream(std::shared_ptr<client_state> c, std::string b, std::string k, chunk_options opts, runtime::io_executor_type ex)
        : chunk_stream(c->rt, "s3://" + b + "/" + k, opts, ex, make_error_code(errc::bad_reply), make_error_code(errc::object_changed)),
          state(std::move(c)), bucket(std::move(b)), key(std::move(k))
    {
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

    // ---- checksums: a whole object streamed is checked as it streams ------------------

    bool whole() const noexcept { return o.offset == 0 && o.length == unknown; }

    void before_attempt(boost::beast::http::fields& h) override
    {
        chunk_stream::before_attempt(h);
        if (state->opts.checksums.verify && whole()) h.set("x-amz-checksum-mode", "ENABLED");
    }

    std::error_code on_header(unsigned status, const boost::beast::http::fields& h) override
    {
        const std::error_code ec = chunk_stream::on_header(status, h);
        // The first reply that starts at byte 0 carries the checksum (a resumed one has none).
        if (!ec && !looked && next == 0 && state->opts.checksums.verify && whole()) {
            looked = true;
            expected = checksum_in(h, status == 206);
            if (expected && !expected->composite) running.emplace(expected->algorithm);
        }
        return ec;
    }

    void commit(std::size_t n) override
    {
        if (running) running->update(std::span<const std::byte>(cur->buf.data() + cur_fill, n));
        chunk_stream::commit(n);
    }

    std::shared_ptr<client_state> state;
    std::string bucket, key;
    bool looked = false;                     // the checksum was looked for
    std::optional<object_checksum> expected; // what the store sent
    std::optional<checksum> running;         // of the bytes so far
};

/// The GET of a stream, to its end or its failure (which the consumer then throws).
CONVEYOR_DECL asio::awaitable<void> produce(std::shared_ptr<object_stream> st)
{
    std::exception_ptr failed;
    try {
        if (st->end == object_stream::unknown || st->next < st->end) {
            op o{.method = boost::beast::http::verb::get, .name = "GetObject", .bucket = st->bucket, .key = st->key};
            o.stream = st.get();
            bool past_end = false;
            try {
                co_await st->state->execute(o);
            } catch (const request_error& e) {
                // 416 before any byte: the range starts at or past the end of the object.
                if (e.reply().status == 416 && st->next == st->o.offset && st->etag.empty()) past_end = true;
                // 416 to an attempt resuming at `next`, pinned to the first reply's ETag: that
                // version of the object has no byte `next`, so it ends there, and every byte of
                // it has arrived; the first reply announced more than it had (a wrong
                // Content-Length). The stream ends, checked against the object's checksum when
                // it had one, as any other.
                else if (e.reply().status == 416 && st->next > st->o.offset && !st->etag.empty()) st->end = st->next;
                else throw st->located(e);
            }
            if (!past_end) {
                st->flush();
                if (st->end != object_stream::unknown && st->next < st->end)
                    throw st->state->failure(o, make_error_code(http::errc::body_truncated), {}, 1,
                                             "the object ended at byte " + std::to_string(st->next) + ", before " +
                                                 std::to_string(st->end));
                std::string why;
                if (st->looked &&
                    st->state->tally(st->expected, st->running ? &*st->running : nullptr, &why) == check_result::mismatch)
                    // Its chunks are already handed on: the stream fails rather than fetch it again.
                    throw st->state->failure(o, make_error_code(errc::checksum_mismatch), {}, 1,
                                             "the object failed its checksum as it streamed: " + why);
            }
        }
    } catch (...) {
        failed = std::current_exception();
    }
    st->finish(failed);
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
    static void close(const std::shared_ptr<object_stream>& st) { st->close(); }

    CONVEYOR_DECL asio::awaitable<std::optional<chunk>> next_here();

    std::shared_ptr<client_state> state_;
    std::string bucket_, key_, url_;
    chunk_options o_;
    std::shared_ptr<object_stream> st_;
};

CONVEYOR_DECL asio::awaitable<std::optional<chunk>> object_chunk_reader::next_here()
{
    if (!st_) st_ = std::make_shared<object_stream>(state_, bucket_, key_, o_, state_->rt.io_executor(*state_->rt.current_io_lane()));
    if (!st_->started) {
        st_->started = true;
        asio::co_spawn(st_->lane, produce(st_), asio::bind_cancellation_slot(st_->stop.slot(), produce_done{}));
    }
    co_return co_await st_->async_take();
}

} // namespace detail

CONVEYOR_DECL std::unique_ptr<chunk_reader> read_chunks(const client& c, std::string bucket, std::string key, chunk_options o)
{
    return std::make_unique<detail::object_chunk_reader>(detail::state_of(c), std::move(bucket), std::move(key), o);
}

CONVEYOR_DECL std::unique_ptr<chunk_reader> read_chunks(const client& c, const location& object, chunk_options o)
{
    return read_chunks(c, detail::s3_bucket(object), object.key(), o);
}

} // namespace conveyor::s3

#endif
