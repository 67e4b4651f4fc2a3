// conveyor/shard/writer.hpp — packs samples into tar shards (webdataset's ShardWriter), on
// local disk or S3, with reproducible bytes and a dataset index.
#ifndef CONVEYOR_SHARD_WRITER_HPP
#define CONVEYOR_SHARD_WRITER_HPP

#include <conveyor/detail/config.hpp>

#include <conveyor/core/error.hpp>
#include <conveyor/shard/index.hpp>
#include <conveyor/shard/sample.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor::s3 {
class client;
} // namespace conveyor::s3

namespace conveyor::store {
class object_writer;
} // namespace conveyor::store

namespace conveyor::shard {

/** What every member header says besides its name and size. The defaults make the bytes
    of a shard a function of its samples alone:
    - `mtime` 0 (1970-01-01): webdataset's TarWriter stamps the time of writing, which
      makes every run's shards differ; a fixed time makes them reproducible;
    - `mode` 0444 (r--r--r--): webdataset's TarWriter default; members of a dataset are
      read, not edited, and GNU tar and Python extract them read-only, as they were meant;
    - `uid`/`gid` 0 and empty `uname`/`gname`: nothing of the machine that wrote them
      (webdataset writes "bigdata"; tar -tv shows "0/0" for empty names);
    - `record_size` 10240: the archive is padded with zeros to a multiple of 20 blocks
      after its two zero end blocks, as GNU tar and Python's tarfile (RECORDSIZE) pad.
      512 pads no further than the end blocks. */
struct tar_write_options {
    std::int64_t mtime = 0;
    std::uint32_t mode = 0444;
    std::uint32_t uid = 0;
    std::uint32_t gid = 0;
    std::string uname; ///< at most 31 bytes
    std::string gname; ///< at most 31 bytes
    std::size_t record_size = 10240; ///< a multiple of 512
};

/// Settings of a `writer`.
struct writer_options {
    /** Where shards go, written through the store of that location (`store::open_store`):
        a path, `file://…` or `s3://bucket/prefix/name` holding one printf-style
        integer conversion for the shard number: `%d`, `%6d`, `%06d` (`%%` is a '%'), e.g.
        `out/shard-%06d.tar`, `s3://bucket/train/shard-%06d.tar`. S3 output needs a client. */
    std::string pattern;
    /// Samples per shard at most (webdataset's `maxcount`).
    std::uint64_t max_count = 100'000;
    /** Data bytes per shard (webdataset's `maxsize`; see `writer` for the exact rule: a
        shard ends once it holds this many data bytes, so it may pass this by less than one
        sample, plus headers). */
    std::uint64_t max_size = 3'000'000'000;
    /// The number of the first shard.
    std::uint64_t first_shard = 0;
    tar_write_options tar;
    /** Local shards: fsync each shard before it is renamed into place (and its folder
        after). Off by default, as GNU tar does not sync either: the rename alone already
        keeps readers from ever seeing half a shard while the system stays up; syncing
        adds safety against power loss at the cost of a disk flush per shard. */
    bool fsync = false;
    /// Local shards: bytes gathered before each write(2).
    std::size_t write_buffer = 4u << 20;
    /// S3 shards: MIME type of the objects.
    std::string content_type = "application/x-tar";
};

/// One field to write: its name (`jpg`, `cls`, `seg.png`) and its bytes.
struct field_view {
    std::string_view name;
    std::span<const std::byte> data;
};

/** The shard number `n` put into `pattern` (see `writer_options::pattern`).
    @throws conveyor::error (`errc::invalid_argument`) when the pattern holds no integer
    conversion, more than one, or another conversion. */
CONVEYOR_DECL std::string format_shard_name(std::string_view pattern, std::uint64_t n);

/** Where shards start for samples of `data_bytes[i]` data bytes each, by the rule of
    `writer`: the index of each shard's first sample (the first is 0; none for no
    samples). With it, shards can be written in parallel, each by its own `writer` with
    `first_shard` set, and come out exactly as one writer would have made them. */
CONVEYOR_DECL std::vector<std::uint64_t> plan_shards(std::span<const std::uint64_t> data_bytes, std::uint64_t max_count,
                                                     std::uint64_t max_size);

/** Writes samples into numbered tar shards, each sample's fields as consecutive members
    `<key>.<field>` in the order given, and records the dataset index as it goes.

    **Where shards split** (webdataset's ShardWriter and `tarp split`, which agree): before
    a sample is written, a new shard is started if the current one already holds
    `max_count` samples or at least `max_size` data bytes (the sum of its members' sizes,
    without headers or padding, as webdataset counts). So a shard closes once it reaches
    a limit, never before: it may pass `max_size` by less than one sample, and a sample
    larger than `max_size` is written whole, into the shard that is open (an empty one if
    the previous shard filled up), which then ends.

    **Format**: POSIX ustar; a path of more than 100 bytes goes into ustar's 155-byte
    prefix when it splits at a '/', else (or over 255 bytes, or a member over 8 GiB)
    a pax 'x' member with a `path` (`size`) record comes first, as Python's tarfile
    writes it by default. Headers as `tar_write_options` says; every shard ends with two zero
    blocks, padded to `record_size`.

    **Keys and fields**: a key must be non-empty, free of NUL and, in its last path
    component, of dots (webdataset's readers split a member name at the first dot of its
    base name: a dotted key would come back as another key); a field name must be
    non-empty, without '/' or NUL, and unique in its sample; a key may not repeat the
    previous sample's (readers would merge the two). Each is a `conveyor::error` naming
    the key, written nowhere.

    **Local output** is written to a hidden temporary file in the shard's folder
    (`.<name>.tmp-<pid>-<n>`) and renamed to its name when the shard is complete, so a
    reader never sees a partial shard; missing folders are made. **S3 output** streams as
    a multipart upload while the shard grows, parts of the client's `upload_part_size`
    going out as soon as they fill (`upload_parts_in_flight` at once); a shard smaller
    than one part is one PutObject. On failure, and when a writer is destroyed without
    `close()`, the shard in progress is removed (the temporary file deleted, the upload
    aborted); shards already complete stay.

    @par Thread Safety
    Distinct objects: safe. Shared objects: unsafe.
*/
class writer {
public:
    /// A writer for local shards (an S3 pattern throws: it needs the other constructor).
    CONVEYOR_DECL explicit writer(writer_options o);
    /// A writer that may also write S3 shards through `s3` (copied: a handle).
    CONVEYOR_DECL writer(writer_options o, const s3::client& s3);
    writer(const writer&) = delete;
    writer& operator=(const writer&) = delete;
    CONVEYOR_DECL writer(writer&&) noexcept;
    CONVEYOR_DECL writer& operator=(writer&&) noexcept;
    /// Removes the shard in progress unless `close()` was called.
    CONVEYOR_DECL ~writer();

    /** Writes one sample. @throws conveyor::error for a bad key or field (nothing is
        written) or when writing fails (the shard in progress is removed, and the writer
        may not be used again). */
    CONVEYOR_DECL void write(std::string_view key, std::span<const field_view> fields);
    /// The same for a sample read from a shard (its key and fields).
    CONVEYOR_DECL void write(const sample& s);

    /// Completes the last shard (an empty writer makes no shard). Idempotent.
    CONVEYOR_DECL void close();

    /// The index of the shards completed so far (all of them after `close()`).
    const dataset_index& index() const noexcept { return index_; }
    /// Samples written so far.
    std::uint64_t samples() const noexcept { return samples_; }
    /// Bytes of shards completed so far.
    std::uint64_t bytes() const noexcept { return bytes_; }

private:
    CONVEYOR_DECL void start_shard();
    CONVEYOR_DECL void finish_shard();
    CONVEYOR_DECL void put(std::span<const std::byte> bytes);
    CONVEYOR_DECL void flush_header();

    writer_options opts_;
    std::unique_ptr<s3::client> s3_;
    std::unique_ptr<store::object_writer> sink_; // the shard in progress
    dataset_index index_;
    index_shard current_;
    std::vector<std::byte> header_;  // headers and padding gathered between data writes
    std::uint64_t offset_ = 0;       // bytes of the current shard so far
    std::uint64_t data_bytes_ = 0;   // its members' data bytes (the max_size rule)
    std::uint64_t next_shard_ = 0;
    std::uint64_t samples_ = 0;
    std::uint64_t bytes_ = 0;
    bool open_ = false;
    bool closed_ = false;
    bool failed_ = false;
};

} // namespace conveyor::shard

#if CONVEYOR_HEADER_ONLY
#include <conveyor/shard/impl/writer.ipp>
#endif

#endif
