// conveyor/shard/detail/sample_reader.hpp — a shard's bytes (tar or tar.gz, whole or in
// chunks) to samples by webdataset's rule; the rules are documented in shard/untar.hpp.
#ifndef CONVEYOR_SHARD_DETAIL_SAMPLE_READER_HPP
#define CONVEYOR_SHARD_DETAIL_SAMPLE_READER_HPP

#include <conveyor/core/chunks.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/core/slice.hpp>
#include <conveyor/detail/config.hpp>
#include <conveyor/shard/detail/gunzip.hpp>
#include <conveyor/shard/detail/tar_reader.hpp>
#include <conveyor/shard/sample.hpp>

#include <boost/asio/awaitable.hpp>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor::shard::detail {

/// True for the members webdataset leaves out as metadata (`tar_file_iterator`): a name
/// with no '/' that starts and ends with "__" (`__key__`), or whose first path component
/// is `__...__` of at least four characters (its `skip_meta` expression
/// `__[^/]*__($|/)`: `__meta__/x.json`).
CONVEYOR_DECL bool is_meta_member(std::string_view name) noexcept;

/// What grouping left out.
struct grouping_counts {
    std::uint64_t samples = 0;  ///< samples made
    std::uint64_t meta = 0;     ///< members left out as metadata (`is_meta_member`)
    std::uint64_t unkeyed = 0;  ///< members whose name has no key/field split (no dot in the base name)
};

/** Groups a shard's members into samples, as webdataset's `group_by_keys` does:
    consecutive members with the same key form a sample; a member with another key starts
    the next one (also when that key was seen before: samples are runs, not sets); a field
    seen twice in one sample is an error (`errc::duplicate_field`). */
class sample_grouper {
public:
    /// Samples are numbered (`sample::index`) from `first_index`: where a resumed read left
    /// off; each is told `url` (its `sample::url`; null: `name`), `shard` and `work`. Errors
    /// name the shard `name` (where its bytes come from).
    CONVEYOR_DECL sample_grouper(std::string name, std::uint64_t shard, bool lowercase_fields, std::uint64_t first_index = 0,
                                 std::uint64_t work = 0, std::shared_ptr<const std::string> url = nullptr);

    /// Adds the next member; returns the sample it completes, if it starts a new one.
    CONVEYOR_DECL std::optional<sample> add(tar_member m);
    /// The shard ended: the last sample, if any.
    CONVEYOR_DECL std::optional<sample> finish();

    const grouping_counts& counts() const noexcept { return counts_; }

private:
    std::string name_;
    std::shared_ptr<const std::string> url_;
    std::uint64_t shard_;
    std::uint64_t work_;
    bool lowercase_;
    std::uint64_t next_index_;
    std::optional<sample> current_;
    grouping_counts counts_;
};

/// How `sample_parser` and `sample_reader` read a shard.
struct sample_reader_options {
    tar_options tar;
    /// Written into each sample's `shard` (the shard's index in its list).
    std::uint64_t shard = 0;
    /// The `index` of the first sample read: 0 from the start of a shard; for a read resumed
    /// at a sample's `end` (a chunk reader starting there), the number of samples before.
    std::uint64_t first_index = 0;
    /// Bytes per inflated chunk of a gzip-compressed shard.
    std::size_t inflate_chunk_size = std::size_t{8} << 20;
    /// Inflated chunks made per step on the compute pool (bounds the memory a step takes).
    std::size_t inflate_chunks_per_step = 2;
    /// Written into each sample's `work` (the shard's place in the epoch's work list).
    std::uint64_t work = 0;
    /// Written into each sample's `url` (the shard's URL as its list gives it, shared by the
    /// samples' makers); null: the name the bytes came with.
    std::shared_ptr<const std::string> url;
    /// `sample_reader` passes over the samples whose `index` is below this (a compressed
    /// shard resumed: it is read from its start) or is in `skip` (sorted).
    std::uint64_t deliver_from = 0;
    std::vector<std::uint64_t> skip;
};

/** The push form of the whole path: shard bytes (compressed or not: gzip is recognised by
    its first two bytes) in, samples out. `feed`, `finish` and `next` as `tar_reader`'s.
    @par Thread Safety
    Distinct objects: safe. Shared objects: unsafe. */
class sample_parser {
public:
    CONVEYOR_DECL sample_parser(std::string url, sample_reader_options o = {});

    CONVEYOR_DECL void feed(chunk c);
    CONVEYOR_DECL void finish();
    /// The archive's length when known in advance (ignored for a compressed shard).
    CONVEYOR_DECL void set_total_size(std::uint64_t n);

    /** The next sample, or nullopt when more input is needed or the shard is done. With
        `inflate` false, compressed input is left for `inflate_some` (which a caller runs
        elsewhere), and nullopt may also mean that `has_inflate_work()`. */
    CONVEYOR_DECL std::optional<sample> next(bool inflate = true);
    /// Inflates up to `inflate_chunks_per_step` chunks of compressed input held.
    CONVEYOR_DECL void inflate_some();

    bool done() const noexcept { return done_; }
    /// Compressed input is waiting to be inflated and nothing inflated is waiting.
    CONVEYOR_DECL bool has_inflate_work() const noexcept;
    /// The shard is gzip-compressed (known once 2 bytes arrived).
    bool compressed() const noexcept { return gz_ != nullptr; }
    const tar_reader& tar() const noexcept { return tar_; }
    const grouping_counts& grouping() const noexcept { return group_.counts(); }
    const std::string& url() const noexcept { return tar_.url(); }

private:
    CONVEYOR_DECL void decide(bool at_end);

    sample_reader_options o_;
    tar_reader tar_;
    sample_grouper group_;
    std::unique_ptr<gunzip> gz_;
    std::deque<chunk> inflated_;
    // Until the first two bytes are here, chunks wait to tell gzip from tar.
    std::vector<chunk> undecided_;
    std::size_t undecided_bytes_ = 0;
    bool decided_ = false;
    bool finished_ = false;
    bool tar_finished_ = false;
    bool done_ = false;
    std::optional<std::uint64_t> total_;
};

/** Reads a whole shard held in memory (a tar or a gzip-compressed tar) into its samples,
    synchronously: for tests, blobs and tools. Throws `conveyor::error` on bad input. */
CONVEYOR_DECL std::vector<sample> read_samples(slice shard, std::string url, sample_reader_options o = {});

/// The same for members: the regular members of a whole tar (or tar.gz) in memory.
CONVEYOR_DECL std::vector<tar_member> read_members(slice shard, std::string url, tar_options o = {});

/// A `chunk_reader` over bytes already in memory, in chunks of `chunk_size` (all in one
/// chunk by default): a blob read as a stream, and the tests' way to cut a shard.
class memory_chunk_reader final : public chunk_reader {
public:
    CONVEYOR_DECL memory_chunk_reader(slice bytes, std::string url, std::size_t chunk_size = SIZE_MAX);
    CONVEYOR_DECL asio::awaitable<std::optional<chunk>> async_next() override;
    const std::string& url() const noexcept override { return url_; }
    std::int64_t size() const noexcept override { return static_cast<std::int64_t>(bytes_.size()); }

private:
    slice bytes_;
    std::string url_;
    std::size_t chunk_size_;
    std::size_t at_ = 0;
};

/** One open shard read into samples as its chunks arrive: what the shard pipeline keeps per
    open shard. Pulls chunks from `in` as needed (so memory stays at the reader's chunks in
    flight plus what `tar_reader` holds); a gzip-compressed shard (recognised by its magic
    bytes) is inflated on the runtime's compute pool, a step of at most
    `inflate_chunks_per_step` chunks at a time, so that inflating never holds an I/O thread
    for long. Tar parsing itself stays on the calling thread: it reads headers only (a few
    microseconds per member).

    @par Thread Safety
    Distinct objects: safe. Shared objects: unsafe (one coroutine at a time).
*/
class sample_reader {
public:
    /// `rt` supplies the compute pool and buffers; null: inflate inline, the library's pool.
    CONVEYOR_DECL sample_reader(std::unique_ptr<chunk_reader> in, sample_reader_options o = {}, runtime* rt = nullptr);

    /** The next sample (built whole: its URL, shard, work piece and place as the options
        say), or nullopt at the end of the shard.
        Throws `conveyor::error`: the chunk reader's errors, and the shard's (`shard::errc`).
        @par Completion Signature
        `std::optional<shard::sample>` */
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<std::optional<sample>> async_next();

    const std::string& url() const noexcept { return url_; }
    const sample_parser& parser() const noexcept { return parser_; }

private:
    std::unique_ptr<chunk_reader> in_;
    std::string url_;
    runtime* rt_;
    sample_parser parser_;
    std::uint64_t deliver_from_;
    std::vector<std::uint64_t> skip_;
    std::size_t skip_at_ = 0;
    bool eof_ = false;
    bool first_ = true;
};

} // namespace conveyor::shard::detail

#if CONVEYOR_HEADER_ONLY
#include <conveyor/shard/detail/impl/sample_reader.ipp>
#endif

#endif
