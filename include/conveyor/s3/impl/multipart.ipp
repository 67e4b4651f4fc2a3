// conveyor/s3/impl/multipart.ipp — uploads: PutObject, and multipart uploads fed part by
// part (multipart_upload), which whole-object PUTs use too (see multipart.hpp).
#ifndef CONVEYOR_S3_IMPL_MULTIPART_IPP
#define CONVEYOR_S3_IMPL_MULTIPART_IPP

#include <conveyor/s3/multipart.hpp>

#include <conveyor/core/detail/offload.hpp>
#include <conveyor/s3/client.hpp>
#include <conveyor/s3/detail/client_state.hpp>
#include <conveyor/s3/detail/xml.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/property_tree/ptree.hpp>

#include <exception>
#include <vector>

namespace conveyor::s3 {
namespace detail {

/// S3's limit on the parts of one upload.
inline constexpr unsigned max_upload_parts = 10'000;

/** The state of one multipart upload, shared by the caller's object and the parts in
    flight. It lives on one I/O lane (`ex`): every member is touched on that thread only. */
struct multipart_state {
    multipart_state(std::shared_ptr<client_state> c, runtime::io_executor_type e, std::string b, std::string k, std::string ct)
        : s(std::move(c)), ex(e), bucket(std::move(b)), key(std::move(k)), content_type(std::move(ct)), wake(e)
    {
    }

    std::shared_ptr<client_state> s;
    runtime::io_executor_type ex;
    std::string bucket, key, content_type;
    std::string upload_id;
    std::vector<std::string> etags;  // by part number - 1
    std::vector<std::uint64_t> crcs, sizes; // each part's checksum (client_options::checksums.upload) and bytes
    std::size_t in_flight = 0;
    std::uint64_t bytes = 0;
    std::exception_ptr failed;       // the first failure of a part
    bool finished = false;           // completed or aborted (or its abort started)
    asio::steady_timer wake;         // cancelled whenever a part ends

    // Each is a plain function with named parameters (not a lambda handed to a coroutine:
    // GCC 12 destroys such closures twice).
    static asio::awaitable<void> create(std::shared_ptr<multipart_state> st);
    static asio::awaitable<void> send(std::shared_ptr<multipart_state> st, unsigned number, buffer owned, std::span<const std::byte> view);
    static asio::awaitable<void> wait_for(std::shared_ptr<multipart_state> st, std::size_t most_in_flight);
    static asio::awaitable<void> upload_part(std::shared_ptr<multipart_state> st, buffer owned, std::span<const std::byte> view);
    static asio::awaitable<put_result> complete(std::shared_ptr<multipart_state> st);
    static asio::awaitable<void> abort(std::shared_ptr<multipart_state> st);
    static asio::awaitable<void> abort_quietly(std::shared_ptr<multipart_state> st);
    // Starts the abort in the background (it must run even when the caller was cancelled,
    // so that the parts stored so far are not kept, and billed, forever).
    static void abort_in_background(const std::shared_ptr<multipart_state>& st) noexcept;
    // Aborts, then throws `failed` as errc::upload_aborted with the cause nested.
    [[noreturn]] static void fail(const std::shared_ptr<multipart_state>& st, std::exception_ptr failed);
};

inline asio::awaitable<void> multipart_state::create(std::shared_ptr<multipart_state> st)
{
    op o{.method = boost::beast::http::verb::post, .name = "CreateMultipartUpload", .bucket = st->bucket, .key = st->key, .query = "uploads="};
    o.max_body = max_document_bytes;
    if (!st->content_type.empty()) o.headers.emplace_back(boost::beast::http::field::content_type, st->content_type);
    if (const auto a = st->s->opts.checksums.upload) {
        // The parts' CRCs combine into the whole object's: a full-object checksum.
        o.named_headers.emplace_back("x-amz-checksum-algorithm", std::string(checksum_name(*a)));
        o.named_headers.emplace_back("x-amz-checksum-type", "FULL_OBJECT");
    }
    auto resp = co_await st->s->execute(o);
    try {
        st->upload_id = parse_upload_id(resp.body.view());
    } catch (const conveyor::error& e) {
        throw st->s->failure(o, e.code(), {}, 1, e.ctx().detail);
    }
}

inline asio::awaitable<void> multipart_state::send(std::shared_ptr<multipart_state> st, unsigned number, buffer owned,
                                                   std::span<const std::byte> view)
{
    try {
        const std::string query = "partNumber=" + std::to_string(number) + "&uploadId=" + encode_query(st->upload_id);
        const std::span<const std::byte> bytes = owned.empty() ? view : owned.span();
        std::optional<std::uint64_t> crc;
        if (const auto a = st->s->opts.checksums.upload) {
            crc = co_await st->s->crc_of(*a, bytes);
            st->crcs[number - 1] = *crc;
        }
        auto etag = co_await st->s->put_one(st->bucket, st->key, bytes, {}, query, "UploadPart", crc);
        if (etag.empty()) throw st->s->bad(st->bucket, st->key, "UploadPart " + std::to_string(number) + " reply has no ETag");
        st->etags[number - 1] = std::move(etag);
    } catch (...) {
        if (!st->failed) st->failed = std::current_exception();
    }
    --st->in_flight;
    st->wake.cancel();
}

inline asio::awaitable<void> multipart_state::wait_for(std::shared_ptr<multipart_state> st, std::size_t most_in_flight)
{
    // Parts in flight may point into the caller's bytes: they are waited out even when the
    // caller is cancelled (as run_all does), and the cancellation is not lost.
    const bool threw_if_cancelled = co_await asio::this_coro::throw_if_cancelled();
    co_await asio::this_coro::throw_if_cancelled(false);
    bool cancelled = false;
    while (st->in_flight > most_in_flight) {
        st->wake.expires_at(asio::steady_timer::time_point::max());
        co_await st->wake.async_wait(asio::as_tuple(asio::use_awaitable));
        if ((co_await asio::this_coro::cancellation_state).cancelled() != asio::cancellation_type::none) {
            cancelled = true;
            co_await asio::this_coro::reset_cancellation_state();
        }
    }
    co_await asio::this_coro::throw_if_cancelled(threw_if_cancelled);
    if (cancelled) throw boost::system::system_error(asio::error::operation_aborted);
}

inline asio::awaitable<void> multipart_state::upload_part(std::shared_ptr<multipart_state> st, buffer owned, std::span<const std::byte> view)
{
    if (st->finished) throw st->s->bad(st->bucket, st->key, "a part given to a multipart upload that was completed or aborted");
    if (st->failed) fail(st, st->failed);
    const unsigned number = static_cast<unsigned>(st->etags.size()) + 1;
    if (number > max_upload_parts)
        throw st->s->bad(st->bucket, st->key, "a multipart upload takes at most " + std::to_string(max_upload_parts) + " parts");
    if (st->upload_id.empty()) {
        try {
            co_await create(st);
        } catch (...) {
            st->finished = true;  // nothing was created: nothing to abort
            throw;
        }
    }
    const std::size_t limit = std::max(1u, st->s->opts.upload_parts_in_flight);
    co_await wait_for(st, limit - 1);
    if (st->failed) {
        co_await wait_for(st, 0);
        fail(st, st->failed);
    }
    st->etags.emplace_back();
    st->crcs.push_back(0);
    st->sizes.push_back(owned.empty() ? view.size() : owned.size());
    st->bytes += owned.empty() ? view.size() : owned.size();
    ++st->in_flight;
    asio::co_spawn(st->ex, send(st, number, std::move(owned), view), asio::detached);
}

inline asio::awaitable<put_result> multipart_state::complete(std::shared_ptr<multipart_state> st)
{
    if (st->finished) throw st->s->bad(st->bucket, st->key, "a multipart upload completed or aborted twice");
    if (st->upload_id.empty()) throw st->s->bad(st->bucket, st->key, "a multipart upload completed with no part");
    co_await wait_for(st, 0);
    if (st->failed) fail(st, st->failed);
    const auto a = st->s->opts.checksums.upload;
    std::vector<std::string> part_checksums;
    std::optional<checksum> whole;
    if (a) {
        whole.emplace(*a);
        for (std::size_t i = 0; i < st->crcs.size(); ++i) {
            checksum part(*a);
            part.combine(st->crcs[i], st->sizes[i]);
            part_checksums.push_back(part.base64());
            whole->combine(st->crcs[i], st->sizes[i]);
        }
    }
    const std::string body = complete_multipart_body(st->etags, a ? checksum_name(*a) : std::string_view{}, part_checksums);
    op o{.method = boost::beast::http::verb::post, .name = "CompleteMultipartUpload", .bucket = st->bucket, .key = st->key,
         .query = "uploadId=" + encode_query(st->upload_id)};
    o.max_body = max_document_bytes;
    if (whole) {
        o.named_headers.emplace_back("x-amz-checksum-" + std::string(checksum_header_suffix(*a)), whole->base64());
        o.named_headers.emplace_back("x-amz-checksum-type", "FULL_OBJECT");
    }
    o.body = std::as_bytes(std::span(body.data(), body.size()));
    o.payload_hash = sha256_hex(body);
    std::exception_ptr failed;
    try {
        auto done = co_await st->s->execute(o);
        if (auto err = complete_reply_error(done.body.view())) {
            const bool again = err->retryable();
            throw st->s->failure(o, again ? make_error_code(errc::server_error) : err->to_error_code(), *err, 1, err->describe());
        }
        std::string etag;
        try {
            etag = parse_xml(done.body.view(), "CompleteMultipartUpload reply").get<std::string>("CompleteMultipartUploadResult.ETag", "");
        } catch (const conveyor::error&) {
        }
        st->finished = true;
        co_return put_result{st->key, std::move(etag), st->bytes, static_cast<unsigned>(st->etags.size())};
    } catch (...) {
        failed = std::current_exception();
    }
    fail(st, failed);
}

inline asio::awaitable<void> multipart_state::abort_quietly(std::shared_ptr<multipart_state> st)
{
    try {
        co_await wait_for(st, 0);
    } catch (...) {
    }
    try {
        co_await st->s->abort_upload(st->bucket, st->key, st->upload_id);
    } catch (const std::exception& e) {
        st->s->rt.log(std::string("conveyor: could not abort a multipart upload: ") + e.what());
    }
}

inline asio::awaitable<void> multipart_state::abort(std::shared_ptr<multipart_state> st)
{
    if (st->finished || st->upload_id.empty()) {
        st->finished = true;
        co_return;
    }
    st->finished = true;
    co_await abort_quietly(st);
}

inline void multipart_state::abort_in_background(const std::shared_ptr<multipart_state>& st) noexcept
{
    if (st->finished) return;
    st->finished = true;
    if (st->upload_id.empty()) return;
    try {
        asio::co_spawn(st->ex, abort_quietly(st), asio::detached);
    } catch (...) {
    }
}

inline void multipart_state::fail(const std::shared_ptr<multipart_state>& st, std::exception_ptr failed)
{
    abort_in_background(st);
    try {
        std::rethrow_exception(failed);
    } catch (const request_error& e) {
        // What became of the upload is the error; what made it fail is in the detail and
        // nested whole (std::rethrow_if_nested), with the server's reply kept.
        auto c = e.ctx();
        c.detail += " (" + e.code().message() + "); " + make_error_code(errc::upload_aborted).message();
        std::throw_with_nested(request_error(make_error_code(errc::upload_aborted), std::move(c), e.reply(), e.attempts()));
    }
}

// Runs `a` on the upload's lane, from wherever the caller is.
template <class T>
asio::awaitable<T> on_upload_lane(std::shared_ptr<multipart_state> st, asio::awaitable<T> a)
{
    if (st->ex.running_in_this_thread()) co_return co_await std::move(a);
    co_return co_await asio::co_spawn(st->ex, std::move(a), asio::use_awaitable);
}

inline asio::awaitable<void> on_upload_lane_void(std::shared_ptr<multipart_state> st, asio::awaitable<void> a)
{
    if (st->ex.running_in_this_thread()) {
        co_await std::move(a);
        co_return;
    }
    co_await asio::co_spawn(st->ex, std::move(a), asio::use_awaitable);
}

// ---- client_state's uploads -------------------------------------------------------------

inline asio::awaitable<std::string> client_state::payload_hash(std::span<const std::byte> data)
{
    if (data.size() < (1u << 20)) co_return sha256_hex(data);
    co_return co_await conveyor::detail::offload(rt.compute_executor(), [data] { return sha256_hex(data); });
}

CONVEYOR_DECL void client_state::send_checksum(op& o, std::uint64_t crc) const
{
    const auto a = *opts.checksums.upload;
    checksum c(a);
    c.combine(crc, 0);
    o.named_headers.emplace_back("x-amz-sdk-checksum-algorithm", std::string(checksum_name(a)));
    o.named_headers.emplace_back("x-amz-checksum-" + std::string(checksum_header_suffix(a)), c.base64());
}

CONVEYOR_DECL asio::awaitable<std::string> client_state::put_one(std::string_view bucket, std::string_view key, std::span<const std::byte> data,
                                                                 std::string_view content_type, std::string_view query, const char* name,
                                                                 std::optional<std::uint64_t> crc)
{
    op o{.method = boost::beast::http::verb::put, .name = name, .bucket = bucket, .key = key, .query = std::string(query)};
    if (!content_type.empty()) o.headers.emplace_back(boost::beast::http::field::content_type, std::string(content_type));
    o.body = data;
    o.payload_hash = co_await payload_hash(data);
    if (opts.checksums.upload) send_checksum(o, crc ? *crc : co_await crc_of(*opts.checksums.upload, data));
    auto resp = co_await execute(o);
    co_return std::string(resp.headers["ETag"]);
}

CONVEYOR_DECL asio::awaitable<void> client_state::abort_upload(std::string_view bucket, std::string_view key, std::string_view upload_id)
{
    op o{.method = boost::beast::http::verb::delete_, .name = "AbortMultipartUpload", .bucket = bucket, .key = key,
         .query = "uploadId=" + encode_query(upload_id)};
    co_await execute(o);
}

inline asio::awaitable<put_result> client_state::put_multipart(std::string_view bucket, std::string_view key, std::span<const std::byte> data,
                                                               std::string_view content_type)
{
    std::uint64_t part = std::max<std::uint64_t>(opts.upload_part_size, 1);
    while ((data.size() + part - 1) / part > max_upload_parts) part *= 2;
    auto st = std::make_shared<multipart_state>(shared_from_this(), rt.io_executor(rt.current_io_lane().value_or(0)), std::string(bucket),
                                                std::string(key), std::string(content_type));
    // Aborts if this coroutine ends early (cancelled) with the upload neither completed nor aborted.
    struct abort_guard {
        std::shared_ptr<multipart_state> st;
        ~abort_guard() { multipart_state::abort_in_background(st); }
    } guard{st};
    for (std::uint64_t off = 0; off < data.size(); off += part)
        co_await on_upload_lane_void(st, multipart_state::upload_part(st, buffer{}, data.subspan(off, std::min<std::uint64_t>(part, data.size() - off))));
    co_return co_await on_upload_lane(st, multipart_state::complete(st));
}

CONVEYOR_DECL asio::awaitable<put_result> client_state::put(std::string_view bucket, std::string_view key, std::span<const std::byte> data,
                                                            std::string_view content_type)
{
    if (data.size() > opts.multipart_threshold) co_return co_await put_multipart(bucket, key, data, content_type);
    auto etag = co_await put_one(bucket, key, data, content_type);
    co_return put_result{std::string(key), std::move(etag), data.size(), 0};
}

} // namespace detail

// ---- multipart_upload -------------------------------------------------------------------

CONVEYOR_DECL multipart_upload::multipart_upload(client c, std::string bucket, std::string key, std::string content_type)
    : c_(std::move(c))
{
    auto& rt = detail::state_of(c_)->rt;
    s_ = std::make_shared<detail::multipart_state>(detail::state_of(c_), rt.next_io_executor(), std::move(bucket), std::move(key),
                                                   std::move(content_type));
}

CONVEYOR_DECL multipart_upload::multipart_upload(client c, const location& object, std::string content_type)
    : multipart_upload(std::move(c), detail::s3_bucket(object), object.key(), std::move(content_type))
{
}

CONVEYOR_DECL multipart_upload::multipart_upload(multipart_upload&&) noexcept = default;

CONVEYOR_DECL multipart_upload& multipart_upload::operator=(multipart_upload&& o) noexcept
{
    if (this != &o) {
        if (s_) asio::post(s_->ex, [st = s_] { detail::multipart_state::abort_in_background(st); });
        c_ = std::move(o.c_);
        s_ = std::move(o.s_);
    }
    return *this;
}

CONVEYOR_DECL multipart_upload::~multipart_upload()
{
    if (!s_) return;
    try {
        // On the lane, where the state lives.
        asio::post(s_->ex, [st = s_] { detail::multipart_state::abort_in_background(st); });
    } catch (...) {
    }
}

CONVEYOR_DECL asio::awaitable<void> multipart_upload::async_upload_part(buffer data)
{
    return detail::on_upload_lane_void(s_, detail::multipart_state::upload_part(s_, std::move(data), {}));
}

CONVEYOR_DECL asio::awaitable<void> multipart_upload::async_upload_part(std::span<const std::byte> data)
{
    return detail::on_upload_lane_void(s_, detail::multipart_state::upload_part(s_, buffer{}, data));
}

CONVEYOR_DECL asio::awaitable<put_result> multipart_upload::async_complete()
{
    return detail::on_upload_lane(s_, detail::multipart_state::complete(s_));
}

CONVEYOR_DECL asio::awaitable<void> multipart_upload::async_abort()
{
    return detail::on_upload_lane_void(s_, detail::multipart_state::abort(s_));
}

namespace detail {
inline asio::awaitable<bool> as_bool(asio::awaitable<void> a)
{
    co_await std::move(a);
    co_return true;
}
} // namespace detail

CONVEYOR_DECL void multipart_upload::upload_part(buffer data)
{
    (void)c_.run(detail::as_bool(async_upload_part(std::move(data))));
}

CONVEYOR_DECL put_result multipart_upload::complete()
{
    return c_.run(async_complete());
}

CONVEYOR_DECL void multipart_upload::abort()
{
    (void)c_.run(detail::as_bool(async_abort()));
}

// Read from the caller's thread while the lane may change them: approximate figures only
// between calls; exact once the caller's last call has completed (the calls synchronize).
CONVEYOR_DECL unsigned multipart_upload::parts() const noexcept
{
    return static_cast<unsigned>(s_->etags.size());
}

CONVEYOR_DECL std::uint64_t multipart_upload::bytes() const noexcept
{
    return s_->bytes;
}

CONVEYOR_DECL std::string multipart_upload::upload_id() const
{
    return s_->upload_id;
}

} // namespace conveyor::s3

#endif
