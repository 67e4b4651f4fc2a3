// conveyor/shard/detail/gunzip.hpp — streaming gzip decompression (zlib): compressed chunks
// in, inflated chunks out, in pooled buffers of a fixed size.
#ifndef CONVEYOR_SHARD_DETAIL_GUNZIP_HPP
#define CONVEYOR_SHARD_DETAIL_GUNZIP_HPP

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/chunks.hpp>
#include <conveyor/detail/config.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

namespace conveyor::shard::detail {

/// True when `head` starts with gzip's magic bytes (1f 8b). Shards are recognised by this,
/// not by their names.
inline bool is_gzip_magic(std::span<const std::byte> head) noexcept
{
    return head.size() >= 2 && head[0] == std::byte{0x1f} && head[1] == std::byte{0x8b};
}

/** A push decompressor of a gzip stream (RFC 1952), as `gzip -d` reads it: several members
    one after another make one stream (their outputs concatenated); zero bytes after the
    last member (tape padding) are ignored; anything else after it is an error.

    `feed` hands it compressed chunks; `next` inflates until one output chunk of
    `out_chunk_size` bytes is full (or, after `finish`, the last, shorter one) and returns
    it, with its offset in the uncompressed stream. Memory: the compressed chunks not yet
    inflated plus one output chunk, whatever the compression ratio (a bomb fills chunks one
    at a time, as fast as they are consumed).

    Errors (`conveyor::error`, `shard::errc::bad_gzip` or `truncated_gzip`) name the URL,
    the uncompressed offset (as `offset()`) and the compressed one (in the detail).

    @par Thread Safety
    Distinct objects: safe. Shared objects: unsafe.
*/
class gunzip {
public:
    CONVEYOR_DECL gunzip(std::string url, std::size_t out_chunk_size, buffer_pool& pool);
    CONVEYOR_DECL ~gunzip();
    gunzip(const gunzip&) = delete;
    gunzip& operator=(const gunzip&) = delete;

    /// The next compressed chunk (contiguous with the last; the first may start anywhere).
    CONVEYOR_DECL void feed(chunk compressed);
    /// The compressed input has ended.
    CONVEYOR_DECL void finish();
    /** The next inflated chunk, or nullopt when more input is needed or all is out
        (`done()`). Throws on corrupt or truncated data. */
    CONVEYOR_DECL std::optional<chunk> next();

    /// All input inflated and handed out.
    CONVEYOR_DECL bool done() const noexcept;
    /// `next` has work to do without more input (compressed bytes held, or the end to check).
    CONVEYOR_DECL bool has_work() const noexcept;
    /// Bytes inflated so far (the uncompressed offset).
    CONVEYOR_DECL std::uint64_t inflated() const noexcept;
    /// Compressed bytes consumed so far (the compressed offset).
    CONVEYOR_DECL std::uint64_t consumed() const noexcept;
    /// gzip members begun so far.
    CONVEYOR_DECL std::uint64_t members() const noexcept;

private:
    struct state;
    std::unique_ptr<state> s_;
};

} // namespace conveyor::shard::detail

#if CONVEYOR_HEADER_ONLY
#include <conveyor/shard/detail/impl/gunzip.ipp>
#endif

#endif
