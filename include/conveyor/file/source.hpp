// conveyor/file/source.hpp — the local file source and map-style random access.
#ifndef CONVEYOR_FILE_SOURCE_HPP
#define CONVEYOR_FILE_SOURCE_HPP

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/order.hpp>
#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/detail/config.hpp>
#include <conveyor/file/error.hpp>
#include <conveyor/file/index.hpp>

#include <boost/asio/awaitable.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace conveyor::file {

/// Settings of the file source.
struct source_options {
    /// Reads in flight at once, spread over the runtime's I/O threads.
    std::size_t concurrency = 64;
    /// Deliver in listing order (true) or as reads complete (false).
    bool ordered = true;
    /// A file that cannot be read fails the pipeline, or is skipped and counted.
    on_error errors = on_error::fail;
    /** Blobs waiting between the source and the next stage (at least `concurrency`).
        0: twice `concurrency`, so that a whole round of reads can complete and wait while
        the consumer still takes the round before (delivered in order, reads complete in
        batches per I/O thread); with room for only `concurrency`, I/O threads sit idle
        waiting for room. */
    std::size_t capacity = 0;
    /// Files larger than this are read in chunks of this size, several in flight.
    std::uint32_t chunk_size = 8u << 20;
    /// Chunks of one large file in flight at once.
    unsigned chunks_in_flight = 4;
    /// Called on an I/O thread after each successful read with the time it took (from
    /// the first submission to the last completion). Must be thread-safe and cheap.
    std::function<void(const blob&, std::chrono::nanoseconds)> on_read;
    /// A read that takes longer than this fails with `errc::read_timed_out`, naming the
    /// file (or is skipped and counted, under `on_error::skip`); zero: no limit. Meant for
    /// network file systems, where a hung server would otherwise stall the run for good.
    /// The kernel may keep such a read a while longer: its memory stays reserved until then.
    std::chrono::milliseconds read_timeout{0};
    /** Entries of a listing with a root (`walk`, `read_index`) are promised to stay below
        it, and by default that holds for symlinks too: each file is opened with
        `openat2(RESOLVE_BENEATH)` relative to the root, and an entry whose path or symlinks
        lead out of it fails with `errc::path_escapes_root`. Datasets that are symlink farms
        (links into another disk) set this to follow symlinks wherever they lead. Absolute
        entries and listings without a root are opened as given. */
    bool symlinks_may_leave_root = false;
    /// Which files each run reads, in what order, and its resume state (`epoch_options`;
    /// default: the whole list, in list order).
    epoch_options epochs{};
};

namespace detail {
class reader;
} // namespace detail

/** The local file source: reads every file of a listing whole, many at once.

    Reads are spread over the runtime's I/O threads, each with its own io_uring ring
    (`concurrency` reads in flight in total); a small file costs one linked
    open/read/close submission, a large one is read in chunks. Where io_uring is
    unavailable, files are read with `pread` on the blocking pool, and that is said once.

    Errors name the path: a missing file, a permission denied, a directory where a file
    was expected, a file whose size differs from its listing. With
    `errors = on_error::skip` such files are counted in the run's stats and logged instead.

    @code
    auto pipe = conveyor::file::files(conveyor::file::walk("/data/train"), {.concurrency = 64})
              | conveyor::map(decode);
    @endcode
*/
CONVEYOR_DECL pipeline<blob> files(std::shared_ptr<const listing> shared, source_options o = {});

/// Reads the files of `l` (moved or copied into the pipeline; pass a `shared_ptr` to share
/// one large listing between pipelines without copies).
CONVEYOR_DECL pipeline<blob> files(listing l, source_options o = {});

/// Reads the given paths (see `from_paths`).
CONVEYOR_DECL pipeline<blob> files(const std::vector<std::string>& paths, source_options o = {});

/** Map-style random access to the files of a listing: `async_get(i)` (or the blocking `get(i)`) reads file `i`.

    Calls may overlap freely (that is the point: many in flight). A coroutine on one of the
    runtime's I/O threads reads through that thread's ring directly; any other caller hops
    to an I/O thread and back.

    @par Thread Safety
    Safe.
*/
class dataset {
public:
    CONVEYOR_DECL explicit dataset(listing l, runtime& rt = runtime::shared(), source_options o = {});

    std::size_t size() const noexcept { return files_->size(); }
    const listing& files() const noexcept { return *files_; }

    /** Reads file `i`; throws `conveyor::error` naming the path if it cannot.
        @par Completion Signature
        `blob` */
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<blob> async_get(std::size_t i);

    /// Reads file `i`, blocking the calling thread (which must not be an I/O thread).
    CONVEYOR_DECL blob get(std::size_t i);

private:
    std::shared_ptr<const listing> files_;
    runtime& rt_;
    std::shared_ptr<detail::reader> reader_; // the source's reader, shared by all calls
    std::atomic<std::size_t> next_lane_{0};
};

} // namespace conveyor::file

#if CONVEYOR_HEADER_ONLY
#include <conveyor/file/impl/source.ipp>
#endif

#endif
