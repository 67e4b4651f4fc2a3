// conveyor/s3/client.hpp — S3 operations over the pooled HTTP client, with retries.
//
// This header declares; the request executor and its retries (impl/execute.ipp), ranged
// and multipart transfer (impl/transfer.ipp), listing (impl/list.ipp) and the client
// itself (impl/client.ipp) are defined apart, around `detail::client_state`
// (detail/client_state.hpp), which only those files see.
#ifndef CONVEYOR_S3_CLIENT_HPP
#define CONVEYOR_S3_CLIENT_HPP

#include <conveyor/detail/config.hpp>

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/checksum.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/core/location.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/http/options.hpp>
#include <conveyor/s3/config.hpp>
#include <conveyor/s3/error.hpp>
#include <conveyor/s3/types.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace conveyor::s3 {

class client;
namespace detail {
struct client_state;
/// The state `c` shares with its copies (for this module's sources, sinks and uploads).
inline const std::shared_ptr<client_state>& state_of(const client& c) noexcept;
/// Throws the error of an S3 operation given a location that is not an S3 one:
/// `std::errc::invalid_argument`, stage "s3", naming it.
[[noreturn]] CONVEYOR_DECL void not_s3(const location& where);
/// `where.bucket()`, after `not_s3` for a location of another kind.
CONVEYOR_DECL const std::string& s3_bucket(const location& where);
} // namespace detail

/** An S3 client: GetObject (whole, or in parallel ranged parts), HeadObject,
    ListObjectsV2, PutObject and multipart uploads, signed with SigV4 and retried with
    backoff. Connections are pooled per endpoint and per I/O thread of the runtime.

    A `client` is a cheap handle: copies share one connection pool and one signer.
    Awaitable members run on the runtime's I/O threads (a call from elsewhere hops there
    and back); the blocking `run()` serves plain threads.

    Errors are `request_error`s: the object (`s3://bucket/key`), the operation, the HTTP
    status, S3's code, message and request id, and how many attempts were made. Secrets
    never appear in them.

    Clock skew: a request refused with one of the AWS clock skew codes (RequestTimeTooSkewed,
    RequestExpired, RequestInTheFuture, SignatureDoesNotMatch, InvalidSignatureException,
    AuthFailure) whose reply's `Date` is 4 minutes or more from the client's clock corrects
    that clock by the difference, for this request (signed again and retried) and every later
    one of the client and its copies, as the AWS SDKs do. Without such a `Date` these errors
    are not retried.

    @par Thread Safety
    Safe.
*/
class client {
public:
    CONVEYOR_DECL client(runtime& rt, config cfg, client_options o = {});
    /// Resolves the configuration from `co` and the credentials chain.
    CONVEYOR_DECL explicit client(runtime& rt, const config_options& co = {}, client_options o = {});

    CONVEYOR_DECL const config& cfg() const noexcept;
    CONVEYOR_DECL const client_options& options() const noexcept;
    CONVEYOR_DECL runtime& rt() const noexcept;

    /** The whole object, in a pooled buffer. `size_hint` (from a listing; -1 if unknown)
        saves the ranged first request for objects known to be small.
        @par Completion Signature `buffer` */
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<buffer> async_get(std::string bucket, std::string key, std::int64_t size_hint = -1) const;

    /** Bytes [offset, offset + length) of an object (fewer if it is shorter).
        @par Completion Signature `buffer` */
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<buffer> async_get_range(std::string bucket, std::string key, std::uint64_t offset,
                                                                      std::uint64_t length) const;

    /** HeadObject: size, ETag, Last-Modified. @par Completion Signature `object_info` */
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<object_info> async_head(std::string bucket, std::string key) const;

    /** One page of ListObjectsV2. @par Completion Signature `list_page` */
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<list_page> async_list(std::string bucket, list_options lo) const;

    /** Every object whose key starts with `prefix`, following continuation tokens. A server
        that sends a token again (the listing would never end) fails it with
        `errc::bad_reply`, naming the bucket, prefix and token.
        @par Completion Signature `std::vector<object_info>` */
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<std::vector<object_info>> async_list_all(std::string bucket, std::string prefix = {}) const;

    /** Stores `data` as an object: one PutObject, or a multipart upload with parts sent in
        parallel when it is larger than `multipart_threshold`. A multipart upload that fails
        is aborted (in the background) and fails with `errc::upload_aborted`, its cause in
        the detail and nested (`std::rethrow_if_nested`).
        `data` must stay valid until the operation completes.
        @par Completion Signature `put_result` */
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<put_result> async_put(std::string bucket, std::string key, std::span<const std::byte> data,
                                                                    std::string content_type = {}) const;

    /** The operations above on an S3 location (`s3://bucket/key`, parsed once by
        `conveyor::location`): each is its (bucket, key) form with `object.bucket()` and
        `object.key()`. A location of another kind fails the operation where it is awaited,
        with `conveyor::error` (`std::errc::invalid_argument`, stage "s3") naming it; no
        request is sent.
        @par Completion Signature as the (bucket, key) form's */
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<buffer> async_get(const location& object, std::int64_t size_hint = -1) const;
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<buffer> async_get_range(const location& object, std::uint64_t offset,
                                                                      std::uint64_t length) const;
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<object_info> async_head(const location& object) const;
    /// Every object under `prefix` (`s3://bucket/train/`: keys starting with `prefix.key()`).
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<std::vector<object_info>> async_list_all(const location& prefix) const;
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<put_result> async_put(const location& object, std::span<const std::byte> data,
                                                                    std::string content_type = {}) const;

    /// Runs one of the awaitables above to completion from a plain (non-I/O) thread; on one
    /// of the runtime's I/O threads it throws (`std::errc::operation_not_permitted`).
    template <class T>
    T run(asio::awaitable<T> a) const;

    CONVEYOR_DECL client_stats stats() const noexcept;

private:
    friend const std::shared_ptr<detail::client_state>& detail::state_of(const client& c) noexcept;

    template <class T>
    struct handoff {
        std::mutex mu;
        std::condition_variable cv;
        bool ready = false;
        std::optional<T> value;
        std::exception_ptr failed;
    };

    template <class T>
    static asio::awaitable<void> fulfil(asio::awaitable<T> a, handoff<T>& h);

    // What `run` needs of the state, without its definition.
    CONVEYOR_DECL bool on_lane() const noexcept;
    CONVEYOR_DECL runtime::io_executor_type next_io_executor() const;

    // Each operation runs on one of the runtime's I/O threads, where the connection pools
    // are; a caller elsewhere hops there and back. (These are plain functions with named
    // parameters, not lambdas handed to a coroutine: GCC 12 destroys a closure passed by
    // value to a coroutine twice.)
    CONVEYOR_DECL static asio::awaitable<buffer> do_get(std::shared_ptr<detail::client_state> s, std::string bucket, std::string key,
                                                        std::int64_t hint);
    CONVEYOR_DECL static asio::awaitable<buffer> range_here(detail::client_state& s, std::string_view bucket, std::string_view key,
                                                            std::uint64_t offset, std::uint64_t length);
    CONVEYOR_DECL static asio::awaitable<buffer> do_get_range(std::shared_ptr<detail::client_state> s, std::string bucket, std::string key,
                                                              std::uint64_t offset, std::uint64_t length);
    CONVEYOR_DECL static asio::awaitable<object_info> do_head(std::shared_ptr<detail::client_state> s, std::string bucket, std::string key);
    CONVEYOR_DECL static asio::awaitable<list_page> do_list(std::shared_ptr<detail::client_state> s, std::string bucket, list_options lo);
    CONVEYOR_DECL static asio::awaitable<std::vector<object_info>> do_list_all(std::shared_ptr<detail::client_state> s, std::string bucket,
                                                                               std::string prefix);
    CONVEYOR_DECL static asio::awaitable<put_result> do_put(std::shared_ptr<detail::client_state> s, std::string bucket, std::string key,
                                                            std::span<const std::byte> data, std::string content_type);

    std::shared_ptr<detail::client_state> s_;
};

inline const std::shared_ptr<detail::client_state>& detail::state_of(const client& c) noexcept
{
    return c.s_;
}

} // namespace conveyor::s3

#include <conveyor/s3/impl/client.hpp>

#if CONVEYOR_HEADER_ONLY
// The client's uploads are defined with multipart_upload (impl/multipart.ipp, included by
// multipart.hpp), which holds a client: declared here, once the client is.
#include <conveyor/s3/multipart.hpp>
#include <conveyor/s3/impl/client.ipp>
#include <conveyor/s3/impl/execute.ipp>
#include <conveyor/s3/impl/transfer.ipp>
#include <conveyor/s3/impl/list.ipp>
#endif

#endif
