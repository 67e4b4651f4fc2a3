// conveyor/s3/multipart.hpp — a multipart upload fed part by part, for objects whose bytes
// are made while they upload (shards as they grow) and for large PUTs.
#ifndef CONVEYOR_S3_MULTIPART_HPP
#define CONVEYOR_S3_MULTIPART_HPP

#include <conveyor/detail/config.hpp>

#include <conveyor/core/buffer.hpp>
#include <conveyor/s3/client.hpp>

#include <boost/asio/awaitable.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace conveyor::s3 {

namespace detail {
struct multipart_state;
} // namespace detail

/** One multipart upload (CreateMultipartUpload, UploadPart..., CompleteMultipartUpload),
    fed a part at a time while the object is being made.

    The upload is created by the first part. Each part goes out as soon as it is given,
    numbered 1, 2, ... in the order given; up to the client's `upload_parts_in_flight`
    are in flight at once, and giving one more waits until one of them is done (so memory
    stays bounded by that many parts). Parts but the last must be at least 5 MiB (S3's
    rule; the client's `upload_part_size` by default); at most 10,000 parts.

    Any failure (a part, the completion, a reply with no ETag) aborts the upload (in the
    background, once the parts in flight have ended, so no stored part is left billed) and
    fails the call that sees it (a later `async_upload_part`, or `async_complete`) with
    `errc::upload_aborted`, the cause in the detail and nested (`std::rethrow_if_nested`).
    An upload destroyed before it was completed or aborted is aborted the same way.

    @par Thread Safety
    Distinct objects: safe. Shared objects: unsafe (one caller feeds an upload; its calls
    must not overlap).
*/
class multipart_upload {
public:
    CONVEYOR_DECL multipart_upload(client c, std::string bucket, std::string key, std::string content_type = {});
    /// An upload to an S3 location's bucket and key; another kind of location throws
    /// `conveyor::error` (`std::errc::invalid_argument`, stage "s3") naming it.
    CONVEYOR_DECL multipart_upload(client c, const location& object, std::string content_type = {});
    multipart_upload(const multipart_upload&) = delete;
    multipart_upload& operator=(const multipart_upload&) = delete;
    CONVEYOR_DECL multipart_upload(multipart_upload&&) noexcept;
    CONVEYOR_DECL multipart_upload& operator=(multipart_upload&&) noexcept;
    /// Aborts in the background unless completed or aborted.
    CONVEYOR_DECL ~multipart_upload();

    /** Sends the next part, which the upload keeps until it is stored. Completes when the
        part is on its way (not when it is stored).
        @par Completion Signature `void` */
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<void> async_upload_part(buffer data);

    /** The same for bytes the caller keeps valid until `async_complete` or `async_abort`
        has completed (a whole object being PUT in parts).
        @par Completion Signature `void` */
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<void> async_upload_part(std::span<const std::byte> data);

    /** Waits for the parts in flight and completes the upload: the object appears whole.
        @par Completion Signature `put_result` */
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<put_result> async_complete();

    /** Waits for the parts in flight and aborts the upload (nothing if none was created).
        Failing to abort is logged, not thrown.
        @par Completion Signature `void` */
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<void> async_abort();

    /// `async_upload_part` from a plain (non-I/O) thread.
    CONVEYOR_DECL void upload_part(buffer data);
    /// `async_complete` from a plain (non-I/O) thread.
    CONVEYOR_DECL put_result complete();
    /// `async_abort` from a plain (non-I/O) thread.
    CONVEYOR_DECL void abort();

    /// Parts given so far.
    CONVEYOR_DECL unsigned parts() const noexcept;
    /// Bytes given so far.
    CONVEYOR_DECL std::uint64_t bytes() const noexcept;
    /// S3's id of the upload ("" until the first part created it).
    CONVEYOR_DECL std::string upload_id() const;

private:
    client c_;
    std::shared_ptr<detail::multipart_state> s_;
};

} // namespace conveyor::s3

#if CONVEYOR_HEADER_ONLY
#include <conveyor/s3/impl/multipart.ipp>
#endif

#endif
