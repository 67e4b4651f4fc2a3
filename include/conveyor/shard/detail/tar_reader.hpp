// conveyor/shard/detail/tar_reader.hpp — a push parser of tar archives: chunks in, regular
// members out, each member's data a zero-copy slice of its chunk where it lies in one.
// The rules it follows are documented for users in conveyor/shard/untar.hpp.
#ifndef CONVEYOR_SHARD_DETAIL_TAR_READER_HPP
#define CONVEYOR_SHARD_DETAIL_TAR_READER_HPP

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/chunks.hpp>
#include <conveyor/core/slice.hpp>
#include <conveyor/detail/config.hpp>
#include <conveyor/shard/detail/tar.hpp>
#include <conveyor/shard/error.hpp>
#include <conveyor/shard/tar_options.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <optional>
#include <string>

namespace conveyor::shard {

namespace detail {

/// A regular file of a tar archive, with its bytes.
struct tar_member {
    std::string name;                ///< after pax `path`, GNU long name and ustar prefix
    slice data;                      ///< its bytes: a part of one chunk, or a buffer of its own
    std::uint64_t header_offset = 0; ///< its first header: a pax or GNU long-name header before it, else its own
    std::uint64_t data_offset = 0;   ///< its first byte of data
    std::uint64_t end_offset = 0;    ///< the end of its padding (where the next header starts)
    char typeflag = '0';
};

/// What a reader has seen besides members.
struct tar_counts {
    std::uint64_t members = 0;          ///< regular members returned
    std::uint64_t skipped_entries = 0;  ///< directories, links, devices, FIFOs
    std::uint64_t skipped_other = 0;    ///< other types: 'V' labels, 'M' continuations, vendor types
    std::uint64_t extended_headers = 0; ///< pax 'x'/'g' and GNU 'L'/'K' members
    std::uint64_t assembled = 0;        ///< members whose bytes spanned chunks and were copied
    std::uint64_t assembled_bytes = 0;  ///< their bytes
};

/// The pool behind `tar_options::pool == nullptr`.
CONVEYOR_DECL buffer_pool& default_shard_pool();

/** A push parser of one tar archive.

    `feed` hands it the archive's bytes, chunk after contiguous chunk, `finish` says that
    the input ended, and `next` returns each regular member as soon as its bytes are there.
    Only headers are read: a member's data are never scanned. A member whose data lie in
    one chunk is a `slice::sub` of that chunk; one that spans chunks is gathered into one
    pooled buffer as its chunks arrive, so the reader holds at most the chunks not yet
    consumed plus the member being gathered.

    Every error is a `conveyor::error` (`shard::errc`) naming the URL and the byte offset;
    after one, `next` throws it again.

    @par Thread Safety
    Distinct objects: safe. Shared objects: unsafe.
*/
class tar_reader {
public:
    CONVEYOR_DECL explicit tar_reader(std::string url, tar_options o = {});

    /** The next chunk of the archive: `c.offset` must be where the last one ended (the
        first may start anywhere, e.g. at a resumed offset). Chunks that arrive after the
        end-of-archive marker are dropped. */
    CONVEYOR_DECL void feed(chunk c);

    /// The input has ended: `next` returns what is left, then reports truncation if any.
    CONVEYOR_DECL void finish();

    /// The archive's length, when known before its bytes arrive: a member whose size runs
    /// past it is an error at its header (`size_past_end`), before any of it is gathered.
    void set_total_size(std::uint64_t end_offset) noexcept { total_ = end_offset; }

    /** The next regular member, or nullopt when more input is needed (`needs_input()`) or
        the archive has ended (`done()`). Throws `conveyor::error` on bad input. */
    CONVEYOR_DECL std::optional<tar_member> next();

    /// The end-of-archive marker was read (or, when allowed, the input ended cleanly).
    bool done() const noexcept { return state_ == state::end; }
    /// `next` cannot go on without another chunk or `finish`.
    bool needs_input() const noexcept { return state_ != state::end && !finished_; }

    const std::string& url() const noexcept { return url_; }
    const tar_counts& counts() const noexcept { return counts_; }
    /// Bytes of chunks held now (not yet consumed), for memory accounting.
    CONVEYOR_DECL std::size_t held_bytes() const noexcept;
    /// Where parsing stands: the offset of the next byte to read.
    std::uint64_t position() const noexcept { return pos_; }

private:
    enum class state { header, metadata, member, end };

    std::uint64_t available() const noexcept { return fed_end_ > pos_ ? fed_end_ - pos_ : 0; }
    CONVEYOR_DECL void advance_to(std::uint64_t offset) noexcept;
    CONVEYOR_DECL void copy_out(std::byte* to, std::size_t n) noexcept;
    [[noreturn]] CONVEYOR_DECL void fail(errc code, std::uint64_t offset, std::string detail);
    CONVEYOR_DECL std::optional<tar_member> step();
    CONVEYOR_DECL void on_header(const std::byte* block, std::uint64_t at);
    CONVEYOR_DECL void on_metadata();
    CONVEYOR_DECL void apply_pax(std::string_view data, bool global);
    CONVEYOR_DECL void at_input_end();
    CONVEYOR_DECL tar_member emit(slice data);

    std::string url_;
    tar_options o_;
    buffer_pool* pool_;
    std::deque<chunk> held_;
    std::uint64_t pos_ = 0;
    std::uint64_t fed_end_ = 0;
    std::uint64_t total_ = UINT64_MAX;
    bool started_ = false;
    bool finished_ = false;
    state state_ = state::header;
    std::exception_ptr error_;
    tar_counts counts_;

    // The zero block seen, when the last block read was one.
    bool zero_seen_ = false;
    std::uint64_t zero_offset_ = 0;

    // The entry being read: its first header (an extension header's when it has some),
    // its own header, where its data start, how many bytes they have, where they end.
    std::uint64_t entry_start_ = UINT64_MAX;
    std::uint64_t header_at_ = 0;
    std::uint64_t data_at_ = 0;
    std::uint64_t size_ = 0;
    std::uint64_t end_at_ = 0; // after the padding
    tar_header header_;

    // Extension headers waiting for their member.
    tar_kind meta_kind_ = tar_kind::regular;
    std::string meta_;
    std::optional<std::string> long_name_;
    std::optional<std::string> pax_path_, global_path_;
    std::optional<std::uint64_t> pax_size_, global_size_;

    // A member whose bytes span chunks, being gathered.
    buffer gather_;
    std::size_t gathered_ = 0;

    std::array<std::byte, tar_block> block_{};
};

} // namespace detail

} // namespace conveyor::shard

#if CONVEYOR_HEADER_ONLY
#include <conveyor/shard/detail/impl/tar_reader.ipp>
#endif

#endif
