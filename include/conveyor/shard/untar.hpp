// conveyor/shard/untar.hpp — the stage that turns tar shards (blobs holding a whole .tar or
// .tar.gz) into webdataset samples, and the rules by which shards are read.
#ifndef CONVEYOR_SHARD_UNTAR_HPP
#define CONVEYOR_SHARD_UNTAR_HPP

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/pipeline.hpp>
#include <conveyor/detail/config.hpp>
#include <conveyor/shard/error.hpp>
#include <conveyor/shard/sample.hpp>
#include <conveyor/shard/tar_options.hpp>

#include <cstddef>
#include <memory>
#include <string>

/** @file
    How conveyor reads a shard. The same rules hold for every way in: this stage (a whole
    shard in a blob), the shard pipeline (a shard streamed in chunks from disk or S3) and
    `shard::detail::read_samples`.

    ## Members (the tar format)
    - Formats: v7, ustar (name = prefix + '/' + name), GNU (base-256 numbers, 'L'/'K' long
      names and links) and pax (POSIX.1-2001), in any mix, as GNU tar, bsdtar and Python's
      tarfile write them.
    - Regular files ('0', '\0' and '7') are members. Directories ('5', or a v7 '\0' entry
      whose name ends in '/'), hard and symbolic links ('1', '2'), devices ('3', '4') and
      FIFOs ('6') are skipped; they carry no data whatever their size field says (as Go and
      Python read them). Other types ('V' volume labels, 'M' continuations, 'D' GNU dump
      directories, vendor letters) are skipped with their data. Both are counted.
    - A member's name is, in this order: a pax `path` record of its 'x' header; a GNU 'L'
      long name before it; a `path` of a pax global ('g') header; its own header's name.
      Its size: a pax `size` record ('x', then 'g') over its header's size field.
      'x' records and GNU long names apply to the next entry only, 'g' records to all after
      them. Several 'x' (or 'L') before one entry: later records win, key by key. A record
      with an empty value takes back the key (POSIX). Other pax keys are ignored.
    - A full 100-byte name field with no NUL is valid (ustar ends a name with a NUL only
      when it is shorter), and so is a full prefix, link name, user or group name. A GNU
      long name or link must hold a NUL within its data (GNU tar writes it and counts it
      in the size): without one, `errc::unterminated_name`. A pax `path` or `linkpath`
      holding a NUL is `errc::bad_pax_record`.
    - GNU sparse files ('S', or pax `GNU.sparse.*` records) are `errc::sparse_member`:
      their stored bytes are not the file's bytes, so they are refused, never misread.
    - The end: two zero blocks, or one zero block at the very end of the input (GNU tar,
      bsdtar, Python and Go all accept that). Nothing after the marker is read (GNU tar
      pads its output with zeros to a 10 KiB record). A zero block followed by a header is
      `errc::data_after_end_of_archive`: the readers above would stop there and lose the
      rest. An input that stops after a member's padding with no marker at all is
      `errc::missing_end_of_archive` unless `tar_options::require_end_of_archive` is false
      (GNU tar, bsdtar and Python accept it silently; here it is an error by default,
      because a shard cut short at a block boundary looks exactly like it).
    - Bad input is a `conveyor::error` with a `shard::errc`, naming the shard's URL and the
      byte offset (of the header concerned): a wrong header checksum, a size or other
      number that is not octal or base-256, a negative size, truncation inside a header, a
      member's data or its padding (`truncated`), a size running past the end of a shard
      whose length was known (`size_past_end`), a bad pax record, an extended header with
      no member after it. In a gzip-compressed shard, offsets are in the uncompressed
      stream (the detail names the compressed offset too).

    ## Compression
    A shard whose first two bytes are gzip's magic (1f 8b) is inflated as it streams,
    whatever its name; several gzip members make one stream, as with `gzip -d`. Corrupt or
    truncated data are `errc::bad_gzip` and `errc::truncated_gzip`.

    ## Samples (webdataset's `tar_file_iterator` and `group_by_keys`)
    - Members named like webdataset's metadata are left out: a name without '/' that starts
      and ends with "__" (`__key__`), or whose first directory is `__...__`.
    - A member's key is its path up to the first dot of its base name, its field the rest
      (`a/b.seg.png` -> `a/b`, `seg.png`; see `shard::detail::split_sample_name` for the
      quirks of webdataset's expression); a member whose base name has no dot has no field
      and is left out (counted). Field names are lower-cased (ASCII) unless
      `tar_options::lowercase_fields` is false.
    - Consecutive members with one key make a sample. A key that comes back after another
      key starts a new sample with the same key (webdataset does the same: samples are
      runs, not sets). A field twice in one sample is `errc::duplicate_field`.
    - Samples never span shards. Each carries `key` (`__key__`), `url` (`__url__`, the
      shard), its fields in member order as zero-copy slices where possible, the offset of
      its first member's first header (a pax or long-name header before it counts), the
      offset past its last member's padding (`end`: where a resumed read starts; a pax
      global header before that point is then not seen again) and its index in the shard.
*/

namespace conveyor::shard {

/// Settings of `untar`.
struct untar_options {
    /// How shards are read (end-of-archive rule, limits, field case).
    tar_options tar;
    /// A bad shard: fail the run, or skip the rest of that shard: the samples completed
    /// before the error are delivered, the one being read when it came (whose last member
    /// may not have been its last) is skipped with the rest; the shard counts once in
    /// `run_stats::skipped` and is logged.
    on_error errors = on_error::fail;
    /// Samples waiting between this stage and the next.
    std::size_t capacity = default_stream_capacity;
    /// The stage's name in errors.
    std::string name = "untar";
};

/// The `untar` stage; see `shard::untar`.
class untar_stage {
public:
    explicit untar_stage(untar_options o) : o_(std::move(o)) {}

    CONVEYOR_DECL stream<sample> operator()(const std::shared_ptr<run_context>& ctx, stream<blob> in) const;

private:
    CONVEYOR_DECL static asio::awaitable<void> run(std::shared_ptr<run_context> ctx, stream<blob> in,
                                     sink<sample> out, untar_options o);

    untar_options o_;
};

/** Reads each blob as a whole tar shard (plain or gzip-compressed) and delivers its
    samples, in order, by the rules above; `__url__` is the blob's `origin` and `shard` its
    `index`. A member's data are a view into the blob's buffer (no copy); a compressed
    shard is inflated on the runtime's compute pool.

    @code
    auto samples = conveyor::file::files(conveyor::file::read_index(index, root)) | conveyor::shard::untar();
    for (auto& s : samples) use(s.key, s.find("jpg")->data);
    @endcode
*/
inline untar_stage untar(untar_options o = {})
{
    return untar_stage(std::move(o));
}

} // namespace conveyor::shard

#if CONVEYOR_HEADER_ONLY
#include <conveyor/shard/impl/untar.ipp>
#endif

#endif
