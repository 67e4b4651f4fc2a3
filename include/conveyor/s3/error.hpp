// conveyor/s3/error.hpp — error codes of the S3 module, and S3's own error replies.
#ifndef CONVEYOR_S3_ERROR_HPP
#define CONVEYOR_S3_ERROR_HPP

#include <conveyor/detail/config.hpp>

#include <conveyor/core/error.hpp>

#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

namespace conveyor::s3 {

/// Error codes of the S3 module: what an S3 reply meant. Transport failures (refused,
/// reset, timeouts, truncated bodies) keep their own codes (system, Asio, `http::errc`).
enum class errc {
    /// 403: the credentials were refused (AccessDenied, SignatureDoesNotMatch, InvalidAccessKeyId...).
    access_denied = 1,
    /// 404 NoSuchKey (or a 404 to HEAD): the object does not exist.
    no_such_key,
    /// 404 NoSuchBucket: the bucket does not exist.
    no_such_bucket,
    /// Any other 4xx: the request was refused as it stands and is not retried.
    request_refused,
    /// 5xx (500 InternalError, 502, 504) that persisted through every attempt.
    server_error,
    /// 503 SlowDown (or 429) that persisted through every attempt.
    throttled,
    /// A reply conveyor cannot make sense of (malformed XML, a missing header, a size that
    /// contradicts itself).
    bad_reply,
    /// The object changed while it was read in parts (its ETag no longer matched).
    object_changed,
    /// A multipart upload failed (a part, or its completion) and was aborted, so that the
    /// parts stored so far are not kept. The cause is in the error's detail and nested
    /// in it (`std::rethrow_if_nested`); `request_error::reply()` is the cause's reply.
    upload_aborted,
    /// A credentials provider (instance metadata, container endpoint, STS) failed, or
    /// answered something that holds no usable credentials.
    credentials_failed,
    /// An object's bytes did not match the checksum the store keeps with it (a GET, twice in
    /// a row: once may be a transfer error), or the store refused an upload whose bytes did
    /// not match the checksum sent with them (400 BadDigest).
    checksum_mismatch,
};

/// The category of `conveyor::s3::errc`.
CONVEYOR_DECL const std::error_category& s3_category() noexcept;

/// Makes a `std::error_code` from an S3 error value.
CONVEYOR_DECL std::error_code make_error_code(errc e) noexcept;

/** An S3 error reply: the HTTP status and what the XML body said.

    @verbatim
    <Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message>
           <Resource>/bucket/key</Resource><RequestId>4442587FB7D0A2F9</RequestId></Error>
    @endverbatim
*/
struct reply_error {
    unsigned status = 0;
    std::string code;        ///< S3's code, e.g. "NoSuchKey"; empty when the body had none
    std::string message;     ///< S3's message
    std::string request_id;  ///< from the body, else the x-amz-request-id header
    std::string resource;

    /// "HTTP 404 NoSuchKey: The specified key does not exist. (request id 4442587FB7D0A2F9)"
    CONVEYOR_DECL std::string describe() const;

    /// The `errc` this reply stands for.
    CONVEYOR_DECL std::error_code to_error_code() const;

    /// Whether S3's advice is to try again: 500, 502, 503, 504, 429, and the 400s that
    /// only say the connection was slow (RequestTimeout) or the clock was off by a retry.
    CONVEYOR_DECL bool retryable() const noexcept;
};

/** The exception for a failed S3 request: a `conveyor::error` (code, stage "s3", the
    object's `s3://bucket/key` as `where()`, a detail for people) that also carries the
    server's reply, when there was one, and how many attempts were made. */
class request_error : public conveyor::error {
public:
    request_error(std::error_code ec, context ctx, reply_error reply, unsigned attempts)
        : conveyor::error(ec, std::move(ctx)), reply_(std::move(reply)), attempts_(attempts)
    {
    }
    /// The server's reply; `status == 0` when the request failed below HTTP (refused, reset, timed out).
    const reply_error& reply() const noexcept { return reply_; }
    unsigned attempts() const noexcept { return attempts_; }

private:
    reply_error reply_;
    unsigned attempts_ = 0;
};

} // namespace conveyor::s3

template <>
struct std::is_error_code_enum<conveyor::s3::errc> : std::true_type {};

#if CONVEYOR_HEADER_ONLY
#include <conveyor/s3/impl/error.ipp>
#endif

#endif
