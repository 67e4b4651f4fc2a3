// conveyor/store/s3.hpp — the store of s3:// objects, over the s3 module's client.
#ifndef CONVEYOR_STORE_S3_HPP
#define CONVEYOR_STORE_S3_HPP

#include <conveyor/detail/config.hpp>
#include <conveyor/s3/client.hpp>
#include <conveyor/store/store.hpp>

namespace conveyor::store {

/** Objects of an S3-compatible store through one `s3::client` (its retries, checksums and
    connection pool): whole and ranged GETs, streamed GETs (`s3::read_chunks`), listings of
    a prefix (ListObjectsV2, every page), and writes as a multipart upload whose parts of
    the client's `upload_part_size` (at least S3's 5 MiB) go out as they fill; an object
    under one part is one PutObject. An object writer dropped before its commit aborts the
    upload. */
class s3_store final : public store {
public:
    explicit s3_store(s3::client c) noexcept : c_(std::move(c)) {}

    const s3::client& client() const noexcept { return c_; }
    runtime& rt() const override { return c_.rt(); }
    bool remote() const noexcept override { return true; }
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<slice> async_read(location where, std::int64_t size_hint = -1) const override;
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<std::shared_ptr<const ranged_object>> async_open(location where) const override;
    /// A HeadObject: the ETag and size.
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<object_version> async_version(location where) const override;
    /// `async_read` through the client's blocking `run` (refused on an I/O thread).
    CONVEYOR_DECL slice read(const location& where) const override;
    CONVEYOR_DECL std::unique_ptr<chunk_reader> read_chunks(const location& where, const chunk_options& o) const override;
    /// The objects whose keys start with `where.key()`, sorted by key.
    CONVEYOR_DECL std::vector<listed_object> list(const location& where) const override;
    CONVEYOR_DECL std::unique_ptr<object_writer> open_writer(const location& where, const write_options& o) const override;

private:
    s3::client c_;
};

} // namespace conveyor::store

#if CONVEYOR_HEADER_ONLY
#include <conveyor/store/impl/s3.ipp>
#endif

#endif
