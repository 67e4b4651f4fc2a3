// conveyor_bench.cpp — conveyor-bench: file-reading benchmarks and their test data.
//
// Subcommands:
//   gen-files      make a deterministic ImageNet-like file set (lognormal sizes, mean ~110 KB;
//                  conveyor::bench::synthetic_files, the same set the examples use)
//   drop-cache     drop a file set from the page cache (posix_fadvise DONTNEED per file)
//   files          read every file once per repeat with one engine: uring (conveyor's
//                  file source), pread (a thread pool), ring (a bare io_uring loop without
//                  conveyor: the ceiling for uring on this machine) or ifstream (the naive
//                  baseline)
//   random-access  random dataset::get(i) calls at 1, 4, 16 and 64 in flight
//   s3-get, s3-put S3 GETs through conveyor's S3 source, uploads through its sink
//                  (in s3_bench.cpp)
//   shards         tar shards read as samples through the shard source, or with cat
//                  (in shard_bench.cpp)
//   mix            the same items from one source and drawn from three by conveyor::mix
//                  (in mix_bench.cpp)
//   decode         JPEG decode: conveyor's decoder and decode_image stage beside a plain
//                  tjDecompress2 loop (in decode_bench.cpp)
//   tensors        the seeds' tensor-loading cases: single_image, random_image, random_gpu,
//                  random_to_gpu (in tensor_bench.cpp)
//   run            a benchmark described by a JSON configuration: sweeps, built-in cases,
//                  a summary table and an HTML report (in run_bench.cpp)
//
// Results go to standard output, one JSON object per line; progress and human summaries
// go to standard error. Any read failure or byte-count mismatch exits non-zero.

#include "s3_bench.hpp"
#include "shard_bench.hpp"
#include "mix_bench.hpp"
#include "pipeline_bench.hpp"
#include "run_bench.hpp"
#if CONVEYOR_WITH_CUDA
#include "h2d_bench.hpp"
#include "gpu_decode_bench.hpp"
#endif
#include "decode_bench.hpp"
#include "tensor_bench.hpp"

#include "support/bench.hpp"
#include "support/synthetic.hpp"
#include <conveyor/core/buffer.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/file/source.hpp>

#include <CLI/CLI.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>

#include <fcntl.h>
#include <liburing.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <latch>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

namespace {

namespace cv = conveyor;
namespace cb = conveyor::bench;
namespace fs = std::filesystem;
namespace asio = boost::asio;

// ---- deterministic numbers -----------------------------------------------------------

/// splitmix64 (Steele, Lea, Flood 2014): the random-access index sequence, the same on
/// every machine.
struct splitmix64 {
    std::uint64_t s;
    std::uint64_t operator()() noexcept
    {
        std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    }
    /// Uniform in [0, n).
    std::uint64_t below(std::uint64_t n) noexcept { return (*this)() % n; }
};

// ---- small helpers --------------------------------------------------------------------

[[noreturn]] void fail(const std::string& what)
{
    throw std::runtime_error(what);
}

std::string errno_text(const std::string& what, const std::string& path, int e)
{
    return what + " " + path + ": " + std::strerror(e);
}

struct fd_guard {
    int fd = -1;
    ~fd_guard()
    {
        if (fd >= 0) ::close(fd);
    }
};

/// Where the file list comes from: a directory walk or an index file.
struct source_args {
    std::string dir;
    std::string index;
    std::string root;
    std::size_t limit = 0;

    void add_to(CLI::App& sub)
    {
        auto* d = sub.add_option("--dir", dir, "directory to read (walked recursively, sorted)")->check(CLI::ExistingDirectory);
        auto* i = sub.add_option("--index", index, "index file: a JSON array of paths relative to --root")->check(CLI::ExistingFile);
        auto* r = sub.add_option("--root", root, "root directory of the paths in --index")->check(CLI::ExistingDirectory);
        d->excludes(i);
        i->needs(r);
        sub.add_option("--limit", limit, "use only the first N files (0: all)");
    }
};

/// The file set, listed once before any timing, with every file's size known.
struct file_set {
    cv::file::listing listing;
    // The same listing, shared with conveyor's pipelines without a copy (set by load_files,
    // after which `listing` is left empty).
    std::shared_ptr<const cv::file::listing> shared_listing;
    std::vector<std::string> paths; // what to open: listing.full_path(i)
    std::vector<std::int64_t> sizes;
    std::uint64_t total_bytes = 0;
};

file_set load_files(const source_args& a)
{
    file_set s;
    if (!a.dir.empty()) s.listing = cv::file::walk(a.dir);
    else if (!a.index.empty()) s.listing = cv::file::read_index(a.index, a.root);
    else fail("give --dir, or --index with --root");
    if (a.limit && s.listing.entries.size() > a.limit) s.listing.entries.resize(a.limit);
    if (s.listing.entries.empty()) fail("no files to read");
    s.paths.reserve(s.listing.entries.size());
    s.sizes.reserve(s.listing.entries.size());
    for (std::size_t i = 0; i < s.listing.size(); ++i) {
        s.paths.push_back(s.listing.full_path(i));
        std::int64_t size = s.listing.entries[i].size;
        if (size < 0) { // index files carry no sizes
            struct stat st {};
            if (::stat(s.paths.back().c_str(), &st) != 0) fail(errno_text("cannot stat", s.paths.back(), errno));
            size = st.st_size;
        }
        s.sizes.push_back(size);
        s.total_bytes += static_cast<std::uint64_t>(size);
    }
    s.shared_listing = std::make_shared<const cv::file::listing>(std::move(s.listing));
    s.listing = {};
    return s;
}

/** Drops `paths` from the page cache: writes back dirty pages first (DONTNEED only drops
    clean ones, and freshly generated files are dirty), then `posix_fadvise(DONTNEED)` per
    file. Returns the fraction of pages still resident in a sample of up to 256 files
    (mmap + mincore), so a cold run can say whether it really was cold. */
double drop_cache(const std::vector<std::string>& paths)
{
    bool synced = false;
    for (auto& p : paths) {
        fd_guard f{::open(p.c_str(), O_RDONLY | O_CLOEXEC)};
        if (f.fd < 0) fail(errno_text("cannot open", p, errno));
        if (!synced) {
            ::syncfs(f.fd);
            synced = true;
        }
        if (int e = ::posix_fadvise(f.fd, 0, 0, POSIX_FADV_DONTNEED)) fail(errno_text("posix_fadvise failed on", p, e));
    }
    const std::size_t step = std::max<std::size_t>(1, paths.size() / 256);
    const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    std::uint64_t pages = 0, resident = 0;
    std::vector<unsigned char> vec;
    for (std::size_t i = 0; i < paths.size(); i += step) {
        fd_guard f{::open(paths[i].c_str(), O_RDONLY | O_CLOEXEC)};
        struct stat st {};
        if (f.fd < 0 || ::fstat(f.fd, &st) != 0 || st.st_size == 0) continue;
        const auto len = static_cast<std::size_t>(st.st_size);
        void* m = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, f.fd, 0);
        if (m == MAP_FAILED) continue;
        vec.resize((len + page - 1) / page);
        if (::mincore(m, len, vec.data()) == 0) {
            pages += vec.size();
            for (unsigned char c : vec) resident += c & 1;
        }
        ::munmap(m, len);
    }
    return pages ? static_cast<double>(resident) / static_cast<double>(pages) : 0.0;
}

/// `drop_cache`, warning when pages stay cached (tmpfs, for one, cannot drop them).
double drop_cache_and_say(const std::vector<std::string>& paths)
{
    const double left = drop_cache(paths);
    if (left > 0.01)
        std::fprintf(stderr, "warning: %.1f%% of sampled pages are still cached after dropping; the run is not cold\n",
                     100.0 * left);
    return left;
}

/** Options of the runtimes the benchmarks make: the defaults, except `io_threads` when
    given, and a log that also notes whether file reads fell back to `pread` (so that
    results say which backend they measured). */
cv::runtime_options bench_runtime_options(std::size_t io_threads, std::atomic<bool>& fell_back_to_pread)
{
    cv::runtime_options o;
    o.io_threads = io_threads;
    o.log = [&fell_back_to_pread](std::string_view line) {
        if (line.find("pread") != std::string_view::npos) fell_back_to_pread = true;
        std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
    };
    return o;
}

/// The file backend a runtime used: its option, or what the environment or a fallback chose.
const char* backend_name(const cv::runtime& rt, const std::atomic<bool>& fell_back_to_pread)
{
    if (fell_back_to_pread || rt.options().backend == cv::io_backend::pread) return "pread";
    return "uring";
}

// ---- gen-files ------------------------------------------------------------------------

struct gen_args {
    cb::synthetic_files set;
    std::string index_out;
};

int cmd_gen_files(const gen_args& a)
{
    cb::progress bar("gen-files", a.set.count);
    cb::stopwatch clock;
    const auto rep = cb::generate(a.set, [&bar](std::uint64_t done, std::uint64_t bytes) { bar.update(done, bytes); });
    bar.finish();

    if (!a.index_out.empty()) {
        cv::file::listing l;
        l.entries.reserve(a.set.count);
        for (std::uint64_t i = 1; i <= a.set.count; ++i) l.entries.push_back({a.set.name(i)});
        cv::file::write_index(l, a.index_out);
    }

    const double mean = rep.files ? static_cast<double>(rep.bytes) / static_cast<double>(rep.files) : 0.0;
    const std::string dir = a.set.dir.string();
    std::fprintf(stderr, "gen-files: %llu files (%llu written, %llu already there) in %s, %.3f GB, mean %.1f KB, %.1f s\n",
                 static_cast<unsigned long long>(rep.files), static_cast<unsigned long long>(rep.written),
                 static_cast<unsigned long long>(rep.files - rep.written), dir.c_str(), static_cast<double>(rep.bytes) / 1e9,
                 mean / 1e3, clock.seconds());
    cb::json_line()
        .add("bench", "gen-files")
        .add("dir", dir)
        .add("files", rep.files)
        .add("written", rep.written)
        .add("bytes", rep.bytes)
        .add("written_bytes", rep.written_bytes)
        .add("mean_bytes", mean)
        .add("seed", a.set.seed)
        .add("seconds", clock.seconds())
        .print();
    return 0;
}

// ---- files ----------------------------------------------------------------------------

struct files_args {
    source_args src;
    std::string engine = "uring";
    std::size_t concurrency = 64;
    std::size_t repeat = 1;
    bool cold = false;
    bool unordered = false;
    std::size_t io_threads = 0;
    std::size_t capacity = 0; // 0: the source's default
    std::size_t buffers = 1;  // pread: buffers each thread reads into in turn
    std::size_t ring_buffers = 0; // ring: buffers in all (0: twice the reads in flight)
    bool no_consumer = false;     // ring: the reader threads put their buffers back themselves
};

/// What one pass over the file set measured.
struct pass_result {
    std::uint64_t files = 0;
    std::uint64_t bytes = 0;
    double seconds = 0;
    cb::latency_histogram latency;
    cb::resource_usage usage; // CPU time of the pass; peak RSS so far
};

/// The naive baseline: one thread, std::ifstream, each whole file into a std::vector.
pass_result read_ifstream(const file_set& s)
{
    pass_result r;
    const auto before = cb::usage_now();
    cb::stopwatch clock;
    for (std::size_t i = 0; i < s.paths.size(); ++i) {
        cb::stopwatch t;
        std::ifstream in(s.paths[i], std::ios::binary);
        if (!in) fail("cannot open " + s.paths[i]);
        in.seekg(0, std::ios::end);
        const auto size = static_cast<std::size_t>(in.tellg());
        in.seekg(0, std::ios::beg);
        std::vector<char> data(size);
        if (!in.read(data.data(), static_cast<std::streamsize>(size))) fail("cannot read " + s.paths[i]);
        r.latency.record(t.elapsed());
        r.bytes += data.size();
        ++r.files;
    }
    r.seconds = clock.seconds();
    r.usage = cb::usage_now() - before;
    return r;
}

/// The pass of a threaded engine (`pread`, `ring`) that began at `before` on `clock`, now
/// that its threads are done: `error`, their first failure, fails the run.
pass_result ended_pass(const cb::stopwatch& clock, const cb::resource_usage& before, const std::string& error,
                       std::uint64_t files, std::uint64_t bytes, const std::vector<cb::latency_histogram>& lat)
{
    pass_result r;
    r.seconds = clock.seconds();
    r.usage = cb::usage_now() - before;
    if (!error.empty()) fail(error);
    r.files = files;
    r.bytes = bytes;
    for (const auto& h : lat) r.latency.merge(h);
    return r;
}

/// N threads, each taking the next file from a shared counter: open, fstat, pread until
/// full, close, into the thread's own reused buffer (or `buffers` of them in turn: with as
/// many buffers in use as the uring engine has reads in flight and blobs queued, the
/// kernel copies into memory that has left the CPU's caches, as it does there).
///
/// The buffers are page-aligned, from a `buffer_pool` like the uring engine's, and written
/// once before the clock starts. Where the kernel's copy lands matters: a destination a few
/// bytes past a cache-line boundary can cost the copy several times the CPU of an aligned
/// one, and a buffer grown inside the pass lands wherever malloc puts it (see
/// docs/perf/page-cache-copy.md).
pass_result read_pread(const file_set& s, std::size_t threads, std::size_t buffers)
{
    std::atomic<std::size_t> next{0};
    std::atomic<std::uint64_t> files{0}, bytes{0};
    std::mutex mu;
    std::string error;
    std::vector<cb::latency_histogram> lat(threads);
    const std::size_t largest = s.sizes.empty() ? 0 : static_cast<std::size_t>(*std::max_element(s.sizes.begin(), s.sizes.end()));
    cv::buffer_pool memory;
    std::vector<std::vector<cv::buffer>> thread_bufs(threads);
    for (auto& bufs : thread_bufs) {
        for (std::size_t b = 0; b < std::max<std::size_t>(buffers, 1); ++b) {
            bufs.push_back(memory.acquire(largest));
            std::memset(bufs.back().data(), 0, bufs.back().size());
        }
    }
    const auto before = cb::usage_now();
    cb::stopwatch clock;
    {
        std::vector<std::jthread> pool;
        for (std::size_t t = 0; t < threads; ++t) {
            pool.emplace_back([&, t] {
                auto& bufs = thread_bufs[t];
                std::size_t turn = 0;
                auto& h = lat[t];
                std::uint64_t my_files = 0, my_bytes = 0;
                auto stop = [&](std::string what) {
                    std::lock_guard lk(mu);
                    if (error.empty()) error = std::move(what);
                    next.store(s.paths.size());
                };
                for (std::size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < s.paths.size();) {
                    cb::stopwatch timer;
                    const char* path = s.paths[i].c_str();
                    fd_guard f{::open(path, O_RDONLY | O_CLOEXEC)};
                    if (f.fd < 0) return stop(errno_text("cannot open", path, errno));
                    struct stat st {};
                    if (::fstat(f.fd, &st) != 0) return stop(errno_text("cannot stat", path, errno));
                    const auto size = static_cast<std::size_t>(st.st_size);
                    auto& buf = bufs[turn++ % bufs.size()];
                    if (buf.size() < size) buf = memory.acquire(size); // grew since the listing
                    std::size_t got = 0;
                    while (got < size) {
                        const ssize_t n = ::pread(f.fd, buf.data() + got, size - got, static_cast<off_t>(got));
                        if (n < 0) {
                            if (errno == EINTR) continue;
                            return stop(errno_text("cannot read", path, errno));
                        }
                        if (n == 0) break; // shrank: the byte check reports it
                        got += static_cast<std::size_t>(n);
                    }
                    ::close(f.fd);
                    f.fd = -1;
                    h.record(timer.elapsed());
                    ++my_files;
                    my_bytes += got;
                }
                files += my_files;
                bytes += my_bytes;
            });
        }
    }
    return ended_pass(clock, before, error, files, bytes, lat);
}

// The ring engine's reader threads (`--io-threads`, 2 by default), files per batch (the
// reads in flight shared among them) and buffers in all.
std::size_t ring_threads(const files_args& a) { return a.io_threads ? a.io_threads : 2; }
std::size_t ring_batch(const files_args& a) { return std::max<std::size_t>(a.concurrency / ring_threads(a), 1); }
std::size_t ring_buffers_used(const files_args& a)
{
    const std::size_t in_flight = ring_batch(a) * ring_threads(a);
    return std::max(a.ring_buffers ? a.ring_buffers : 2 * in_flight, in_flight);
}

/* The ring engine: what io_uring itself allows on this machine, without conveyor, for the
   uring engine to be measured against. `threads` reader threads, each with its own ring,
   take the next `batch` files from a shared counter and submit them as linked chains (the
   chains conveyor's file source submits: `openat` of the path into a registered file
   slot, `read` of the whole file, `close` of the slot) in one `io_uring_enter`, waiting
   for all of them. The buffers (page-aligned, from a `buffer_pool`, each holding the largest file,
   written before the clock starts) sit on one shared LIFO stack. With a consumer (the
   default, as the uring engine has one: the range-for), each batch is handed to a consumer
   thread (a mutex and condition variable, one wake-up per batch), which checks each file's
   size and puts the buffers back; without one, the readers put their buffers back
   themselves, as `pread` does. Latency is a batch's time, from submission to its last
   completion, counted for each of its files. */
pass_result read_ring(const file_set& s, const files_args& a)
{
    const std::size_t threads = ring_threads(a), batch = ring_batch(a), total_buffers = ring_buffers_used(a);
    const bool consumer = !a.no_consumer;
    const std::size_t largest = s.sizes.empty() ? 0 : static_cast<std::size_t>(*std::max_element(s.sizes.begin(), s.sizes.end()));
    // One read per file, into buffers that each hold the largest file: meant for small files.
    constexpr std::size_t most_per_file = std::size_t{1} << 30, most_in_all = std::size_t{8} << 30;
    if (largest > most_per_file)
        fail("ring: reads each file with one read, so files up to 1 GiB; the largest here has " + std::to_string(largest) +
             " bytes");
    if (largest * total_buffers > most_in_all)
        fail("ring: " + std::to_string(total_buffers) + " buffers of " + std::to_string(largest) +
             " bytes (the largest file) would take more than 8 GiB; lower --concurrency or --ring-buffers");

    cv::buffer_pool memory;
    std::vector<cv::buffer> owned;
    owned.reserve(total_buffers);
    for (std::size_t b = 0; b < total_buffers; ++b) {
        owned.push_back(memory.acquire(std::max<std::size_t>(largest, 1)));
        std::memset(owned.back().data(), 0, owned.back().size());
    }

    struct done_file {
        std::size_t index; // into the file set
        std::size_t buf;   // into `owned`
        std::int64_t got;  // bytes read
    };
    std::mutex mu;
    std::condition_variable room_cv, work_cv; // buffers came back; a batch came for the consumer
    std::vector<std::size_t> free_bufs(total_buffers);
    for (std::size_t b = 0; b < total_buffers; ++b) free_bufs[b] = total_buffers - 1 - b;
    std::vector<done_file> handed; // batches waiting for the consumer
    std::size_t readers_left = threads;
    std::string error;
    std::atomic<std::size_t> next{0};
    std::atomic<bool> stop{false};
    std::vector<cb::latency_histogram> lat(threads);

    auto say_error = [&](std::string what) {
        std::lock_guard lk(mu);
        if (error.empty()) error = std::move(what);
        stop = true;
        room_cv.notify_all();
        work_cv.notify_all();
    };
    // What the uring engine's consumer does with a batch: checks every file's size, counts
    // the files and bytes (when all are right), and puts the buffers back.
    std::uint64_t files = 0, bytes = 0; // counted with `mu` held
    auto consume = [&](std::span<const done_file> done) {
        std::uint64_t got_bytes = 0;
        for (const auto& f : done) {
            if (f.got != s.sizes[f.index]) {
                say_error("ring: " + s.paths[f.index] + ": read " + std::to_string(f.got) + " bytes, expected " +
                          std::to_string(s.sizes[f.index]));
                got_bytes = 0;
                break;
            }
            got_bytes += static_cast<std::uint64_t>(f.got);
        }
        std::lock_guard lk(mu);
        if (!stop) {
            files += done.size();
            bytes += got_bytes;
        }
        for (const auto& f : done) free_bufs.push_back(f.buf);
        room_cv.notify_all();
    };

    const auto before = cb::usage_now();
    cb::stopwatch clock;
    {
        std::jthread consumer_thread;
        if (consumer) {
            consumer_thread = std::jthread([&] {
                std::vector<done_file> got;
                for (;;) {
                    {
                        std::unique_lock lk(mu);
                        work_cv.wait(lk, [&] { return !handed.empty() || readers_left == 0 || stop; });
                        if (handed.empty()) return;
                        got.swap(handed);
                    }
                    consume(got);
                    got.clear();
                }
            });
        }
        std::vector<std::jthread> readers;
        for (std::size_t t = 0; t < threads; ++t) {
            readers.emplace_back([&, t] {
                struct reader_done {
                    std::mutex& mu;
                    std::size_t& left;
                    std::condition_variable& cv;
                    ~reader_done()
                    {
                        std::lock_guard lk(mu);
                        --left;
                        cv.notify_all();
                    }
                } leaving{mu, readers_left, work_cv};
                io_uring ring{};
                const unsigned entries = std::bit_ceil(static_cast<unsigned>(3 * batch));
                if (int e = io_uring_queue_init(entries, &ring, 0); e < 0)
                    return say_error("ring: io_uring_queue_init: " + std::string(std::strerror(-e)));
                struct ring_guard {
                    io_uring* r;
                    ~ring_guard() { io_uring_queue_exit(r); }
                } ring_closer{&ring};
                if (int e = io_uring_register_files_sparse(&ring, static_cast<unsigned>(batch)); e < 0)
                    return say_error("ring: io_uring_register_files_sparse: " + std::string(std::strerror(-e)));
                std::vector<done_file> done(batch);
                std::vector<int> open_res(batch), close_res(batch);
                auto& h = lat[t];
                while (!stop) {
                    const std::size_t first = next.fetch_add(batch, std::memory_order_relaxed);
                    if (first >= s.paths.size()) break;
                    const std::size_t m = std::min(batch, s.paths.size() - first);
                    {
                        std::unique_lock lk(mu);
                        room_cv.wait(lk, [&] { return free_bufs.size() >= m || stop; });
                        if (stop) break;
                        for (std::size_t j = 0; j < m; ++j) {
                            done[j] = {first + j, free_bufs.back(), -1};
                            free_bufs.pop_back();
                        }
                    }
                    cb::stopwatch timer;
                    for (std::size_t j = 0; j < m; ++j) {
                        const auto slot = static_cast<unsigned>(j);
                        io_uring_sqe* sqe = io_uring_get_sqe(&ring);
                        io_uring_prep_openat_direct(sqe, AT_FDCWD, s.paths[done[j].index].c_str(), O_RDONLY, 0, slot);
                        sqe->flags |= IOSQE_IO_LINK;
                        sqe->user_data = j * 3;
                        sqe = io_uring_get_sqe(&ring);
                        io_uring_prep_read(sqe, static_cast<int>(slot), owned[done[j].buf].data(),
                                           static_cast<unsigned>(s.sizes[done[j].index]), 0);
                        sqe->flags |= IOSQE_FIXED_FILE | IOSQE_IO_LINK;
                        sqe->user_data = j * 3 + 1;
                        sqe = io_uring_get_sqe(&ring);
                        io_uring_prep_close_direct(sqe, slot);
                        sqe->user_data = j * 3 + 2;
                    }
                    if (int e = io_uring_submit_and_wait(&ring, static_cast<unsigned>(3 * m)); e < 0)
                        return say_error("ring: io_uring_submit_and_wait: " + std::string(std::strerror(-e)));
                    std::size_t seen = 0;
                    while (seen < 3 * m) {
                        io_uring_cqe* cqe = nullptr;
                        if (int e = io_uring_wait_cqe(&ring, &cqe); e < 0)
                            return say_error("ring: io_uring_wait_cqe: " + std::string(std::strerror(-e)));
                        const std::size_t j = cqe->user_data / 3;
                        switch (cqe->user_data % 3) {
                        case 0: open_res[j] = cqe->res; break;
                        case 1: done[j].got = cqe->res; break;
                        default: close_res[j] = cqe->res; break;
                        }
                        io_uring_cqe_seen(&ring, cqe);
                        ++seen;
                    }
                    const auto took = timer.elapsed();
                    for (std::size_t j = 0; j < m; ++j) {
                        const std::string& path = s.paths[done[j].index];
                        if (open_res[j] < 0) return say_error(errno_text("ring: cannot open", path, -open_res[j]));
                        if (done[j].got < 0) return say_error(errno_text("ring: cannot read", path, static_cast<int>(-done[j].got)));
                        // A short read breaks the chain, so its close is cancelled: the size
                        // check below names that file.
                        const bool short_read = done[j].got != s.sizes[done[j].index];
                        if (close_res[j] < 0 && !(short_read && close_res[j] == -ECANCELED))
                            return say_error(errno_text("ring: cannot close", path, -close_res[j]));
                        h.record(took);
                    }
                    const std::span<const done_file> batch_done(done.data(), m);
                    if (consumer) {
                        std::lock_guard lk(mu);
                        handed.insert(handed.end(), batch_done.begin(), batch_done.end());
                        work_cv.notify_one();
                    } else {
                        consume(batch_done);
                    }
                }
            });
        }
    }
    return ended_pass(clock, before, error, files, bytes, lat);
}

/// conveyor's file source: `files(listing, {.concurrency = N})` drained by range-for.
class uring_reader {
public:
    uring_reader(const file_set& s, const files_args& a)
        : rt_(bench_runtime_options(a.io_threads, fell_back_)), sizes_(&s.sizes),
          pipe_(cv::file::files(s.shared_listing, {.concurrency = a.concurrency,
                                            .ordered = !a.unordered,
                                            .capacity = a.capacity, // 0: the source's default
                                            .on_read = [this](const cv::blob&, std::chrono::nanoseconds d) { lat_.record(d); }})
                    .on(rt_))
    {
    }

    std::size_t io_lanes() const noexcept { return rt_.io_lanes(); }
    /// "uring", or "pread" where the runtime read with pread instead (known after a pass).
    const char* backend() const noexcept { return backend_name(rt_, fell_back_); }

    pass_result pass()
    {
        pass_result r;
        lat_.reset();
        const auto before = cb::usage_now();
        cb::stopwatch clock;
        for (auto& b : pipe_) {
            if (b.index >= sizes_->size() || static_cast<std::int64_t>(b.data.size()) != (*sizes_)[b.index])
                fail("uring: " + b.origin + ": read " + std::to_string(b.data.size()) + " bytes, expected " +
                     (b.index < sizes_->size() ? std::to_string((*sizes_)[b.index]) : "none (index out of range)"));
            r.bytes += b.data.size();
            ++r.files;
        }
        r.seconds = clock.seconds();
        r.usage = cb::usage_now() - before;
        r.latency = lat_.merged();
        return r;
    }

private:
    std::atomic<bool> fell_back_{false}; // before rt_: its log may set it
    cv::runtime rt_;
    const std::vector<std::int64_t>* sizes_;
    cb::concurrent_histogram lat_;
    cv::pipeline<cv::blob> pipe_;
};

int cmd_files(const files_args& a)
{
    const file_set s = load_files(a.src);
    std::fprintf(stderr, "files: %zu files, %.3f GB, engine %s, concurrency %zu%s\n", s.paths.size(),
                 static_cast<double>(s.total_bytes) / 1e9, a.engine.c_str(), a.concurrency, a.cold ? ", cold" : ", warm");
    std::optional<uring_reader> uring;
    if (a.engine == "uring") uring.emplace(s, a);
    const std::size_t concurrency = a.engine == "ifstream" ? 1 : a.concurrency;

    // Everything the run needs besides the data itself (the listing, the paths) is loaded
    // now: what the peak grows by from here is the read path's own memory.
    const double rss_before_mb = static_cast<double>(cb::current_rss_bytes()) / 1e6;
    std::vector<double> fps, mbps, p50, p99, cpu_gb, cpu_file, user_file, busy;
    for (std::size_t rep = 0; rep < a.repeat; ++rep) {
        const double cached = a.cold ? drop_cache_and_say(s.paths) : 1.0;
        pass_result r = a.engine == "ifstream" ? read_ifstream(s)
                        : a.engine == "pread"  ? read_pread(s, a.concurrency, a.buffers)
                        : a.engine == "ring"   ? read_ring(s, a)
                                               : uring->pass();
        if (r.files != s.paths.size() || r.bytes != s.total_bytes)
            fail(a.engine + ": read " + std::to_string(r.files) + " files, " + std::to_string(r.bytes) + " bytes; expected " +
                 std::to_string(s.paths.size()) + " files, " + std::to_string(s.total_bytes) + " bytes");
        const double gb = static_cast<double>(r.bytes) / 1e9;
        // CPU seconds as microseconds per file read.
        auto per_file = [&r](double cpu_s) { return r.files ? cpu_s * 1e6 / static_cast<double>(r.files) : 0.0; };
        const double cpu_per_file = per_file(r.usage.cpu_s()), user_per_file = per_file(r.usage.user_s);
        const double cpus_busy = r.seconds > 0 ? r.usage.cpu_s() / r.seconds : 0.0;
        cb::json_line line;
        line.add("bench", "files")
            .add("engine", a.engine)
            .add("concurrency", concurrency)
            .add("cold", a.cold);
        if (a.cold) line.add("cached_after_drop", cached, 3);
        if (a.engine == "pread") line.add("buffers", a.buffers);
        if (a.engine == "ring")
            line.add("io_threads", ring_threads(a)).add("consumer", !a.no_consumer).add("buffers", ring_buffers_used(a));
        if (uring) line.add("backend", uring->backend()).add("ordered", !a.unordered).add("io_threads", uring->io_lanes());
        line.add("repeat", rep)
            .add("files", r.files)
            .add("bytes", r.bytes)
            .add("seconds", r.seconds)
            .add("files_per_s", static_cast<double>(r.files) / r.seconds)
            .add("MB_per_s", static_cast<double>(r.bytes) / 1e6 / r.seconds)
            .add("p50_us", r.latency.percentile_us(50))
            .add("p99_us", r.latency.percentile_us(99))
            .add("cpu_s", r.usage.cpu_s())
            .add("cpu_s_per_GB", gb > 0 ? r.usage.cpu_s() / gb : 0.0)
            .add("cpu_us_per_file", cpu_per_file)
            .add("user_us_per_file", user_per_file)
            .add("sys_us_per_file", per_file(r.usage.system_s))
            .add("cpus_busy", cpus_busy, 2)
            .add("voluntary_switches", r.usage.voluntary_switches)
            .add("involuntary_switches", r.usage.involuntary_switches)
            .add("max_rss_MB", r.usage.max_rss_mb())
            .add("rss_before_MB", rss_before_mb)
            .add("rss_growth_MB", r.usage.max_rss_mb() - rss_before_mb)
            .add("minor_faults", r.usage.minor_faults)
            .print();
        fps.push_back(static_cast<double>(r.files) / r.seconds);
        mbps.push_back(static_cast<double>(r.bytes) / 1e6 / r.seconds);
        p50.push_back(r.latency.percentile_us(50));
        p99.push_back(r.latency.percentile_us(99));
        cpu_gb.push_back(gb > 0 ? r.usage.cpu_s() / gb : 0.0);
        cpu_file.push_back(cpu_per_file);
        user_file.push_back(user_per_file);
        busy.push_back(cpus_busy);
    }
    std::fprintf(stderr,
                 "files: %s x%zu %s, %zu repeat(s): files/s best %.0f median %.0f | MB/s best %.0f median %.0f | "
                 "p50 %.0f us p99 %.0f us (median) | CPU %.2f s/GB, %.1f us/file of which %.1f in user space, "
                 "%.2f CPUs busy (medians)\n",
                 a.engine.c_str(), concurrency, a.cold ? "cold" : "warm", a.repeat, *std::max_element(fps.begin(), fps.end()),
                 cb::median(fps), *std::max_element(mbps.begin(), mbps.end()), cb::median(mbps), cb::median(p50),
                 cb::median(p99), cb::median(cpu_gb), cb::median(cpu_file), cb::median(user_file), cb::median(busy));
    return 0;
}

// ---- random-access --------------------------------------------------------------------

struct random_args {
    source_args src;
    std::uint64_t count = 20000;
    std::uint64_t seed = 1;
    std::vector<std::size_t> inflight{1, 4, 16, 64};
    bool cold = false;
    std::size_t io_threads = 0;
};

int cmd_random_access(const random_args& a)
{
    const file_set s = load_files(a.src);
    std::atomic<bool> fell_back{false};
    cv::runtime rt(bench_runtime_options(a.io_threads, fell_back));
    cv::file::dataset ds(*s.shared_listing, rt);
    if (ds.size() != s.paths.size()) fail("dataset has " + std::to_string(ds.size()) + " items, listing " + std::to_string(s.paths.size()));

    splitmix64 r{a.seed};
    std::vector<std::size_t> idx(a.count);
    for (auto& i : idx) i = static_cast<std::size_t>(r.below(s.paths.size()));

    std::fprintf(stderr, "random-access: %llu random get(i) over %zu files, %zu I/O lane(s)%s\n",
                 static_cast<unsigned long long>(a.count), s.paths.size(), rt.io_lanes(), a.cold ? ", cold" : "");
    std::vector<std::string> table;
    for (const std::size_t k : a.inflight) {
        if (k == 0) continue;
        const double cached = a.cold ? drop_cache_and_say(s.paths) : 1.0;
        std::vector<cb::latency_histogram> lat(k);
        std::atomic<std::uint64_t> bytes{0};
        std::mutex mu;
        std::exception_ptr error;
        std::latch done(static_cast<std::ptrdiff_t>(k));

        auto worker = [&](std::size_t w) -> asio::awaitable<void> {
            auto& h = lat[w];
            std::uint64_t my_bytes = 0;
            for (std::size_t j = w; j < idx.size(); j += k) {
                cb::stopwatch t;
                cv::blob b = co_await ds.async_get(idx[j]);
                h.record(t.elapsed());
                if (static_cast<std::int64_t>(b.data.size()) != s.sizes[idx[j]])
                    fail("random-access: " + s.paths[idx[j]] + ": got " + std::to_string(b.data.size()) + " bytes, expected " +
                         std::to_string(s.sizes[idx[j]]));
                my_bytes += b.data.size();
            }
            bytes += my_bytes;
        };

        const auto before = cb::usage_now();
        cb::stopwatch clock;
        for (std::size_t w = 0; w < k; ++w)
            asio::co_spawn(rt.io_executor(w % rt.io_lanes()), worker(w), [&](std::exception_ptr e) {
                if (e) {
                    std::lock_guard lk(mu);
                    if (!error) error = e;
                }
                done.count_down();
            });
        done.wait();
        const double secs = clock.seconds();
        const auto usage = cb::usage_now() - before;
        if (error) std::rethrow_exception(error);

        cb::latency_histogram all;
        for (auto& h : lat) all.merge(h);
        const double items_per_s = static_cast<double>(a.count) / secs;
        cb::json_line line;
        line.add("bench", "random-access")
            .add("inflight", k)
            .add("cold", a.cold);
        if (a.cold) line.add("cached_after_drop", cached, 3);
        line.add("backend", backend_name(rt, fell_back))
            .add("io_threads", rt.io_lanes())
            .add("items", a.count)
            .add("bytes", bytes.load())
            .add("seconds", secs)
            .add("items_per_s", items_per_s)
            .add("MB_per_s", static_cast<double>(bytes.load()) / 1e6 / secs)
            .add("p50_us", all.percentile_us(50))
            .add("p99_us", all.percentile_us(99))
            .add("max_us", static_cast<double>(all.max()) / 1e3)
            .add("cpu_s", usage.cpu_s())
            .add("max_rss_MB", usage.max_rss_mb())
            .print();
        char row[160];
        std::snprintf(row, sizeof row, "%9zu %12.0f %10.1f %10.1f %10.1f %10.1f", k, items_per_s,
                      static_cast<double>(bytes.load()) / 1e6 / secs, all.percentile_us(50), all.percentile_us(99),
                      static_cast<double>(all.max()) / 1e3);
        table.emplace_back(row);
    }
    std::fprintf(stderr, "%9s %12s %10s %10s %10s %10s\n", "in-flight", "items/s", "MB/s", "p50 us", "p99 us", "max us");
    for (auto& row : table) std::fprintf(stderr, "%s\n", row.c_str());
    return 0;
}

} // namespace

int main(int argc, char** argv)
{
    CLI::App app{"conveyor-bench: file and S3 benchmarks for conveyor (JSON lines on stdout, summaries on stderr)"};
    app.require_subcommand(1);

    gen_args gen;
    auto* g = app.add_subcommand("gen-files", "make a deterministic ImageNet-like file set (lognormal sizes, mean ~110 KB)");
    g->add_option("--dir", gen.set.dir, "directory to fill")->required();
    g->add_option("--count", gen.set.count, "number of files")->capture_default_str();
    g->add_option("--seed", gen.set.seed, "seed of sizes and contents")->capture_default_str();
    g->add_option("--classes", gen.set.classes, "class subdirectories")->check(CLI::PositiveNumber)->capture_default_str();
    g->add_option("--mean-bytes", gen.set.mean_bytes, "mean file size before clamping to [1 KiB, 4 MiB]")->capture_default_str();
    g->add_option("--sigma", gen.set.sigma, "sigma of the lognormal size distribution")->capture_default_str();
    g->add_option("--write-index", gen.index_out, "also write an index file (JSON array of relative paths) here");

    source_args drop;
    auto* d = app.add_subcommand("drop-cache", "drop a file set from the page cache (posix_fadvise DONTNEED per file)");
    drop.add_to(*d);

    files_args fa;
    auto* f = app.add_subcommand("files", "read every file once per repeat with one engine");
    fa.src.add_to(*f);
    f->add_option("--engine", fa.engine,
                  "uring (conveyor's file source), pread (thread pool), ring (a bare io_uring loop without conveyor) or "
                  "ifstream (sequential)")
        ->check(CLI::IsMember({"uring", "pread", "ring", "ifstream"}))
        ->capture_default_str();
    f->add_option("--concurrency", fa.concurrency, "reads in flight (uring, ring) or threads (pread)")->capture_default_str();
    f->add_option("--repeat", fa.repeat, "passes over the file set")->capture_default_str();
    f->add_flag("--cold", fa.cold, "drop the files from the page cache before each pass");
    f->add_flag("--unordered", fa.unordered, "uring: deliver files in completion order");
    f->add_option("--capacity", fa.capacity, "uring: the source's output queue (0: its default)");
    f->add_option("--io-threads", fa.io_threads, "uring: the runtime's I/O threads (0: its default); ring: reader threads (0: 2)")
        ->capture_default_str();
    f->add_option("--ring-buffers", fa.ring_buffers, "ring: buffers in all, at least the reads in flight (0: twice them)")
        ->capture_default_str();
    f->add_flag("--no-consumer", fa.no_consumer, "ring: no consumer thread; the readers check and put back their own buffers");
    f->add_option("--buffers", fa.buffers, "pread: buffers each thread reads into in turn (the memory the copies go to); each holds the largest file")
        ->check(CLI::Range(std::size_t{1}, std::size_t{4096}))
        ->capture_default_str();

    random_args ra;
    auto* r = app.add_subcommand("random-access", "random dataset::get(i) calls at several in-flight counts");
    ra.src.add_to(*r);
    r->add_option("--count", ra.count, "get(i) calls per in-flight count")->capture_default_str();
    r->add_option("--seed", ra.seed, "seed of the index sequence")->capture_default_str();
    r->add_option("--inflight", ra.inflight, "in-flight counts to run")->capture_default_str();
    r->add_flag("--cold", ra.cold, "drop the files from the page cache before each in-flight count");
    r->add_option("--io-threads", ra.io_threads, "the runtime's I/O threads (0: its default)")->capture_default_str();

    auto run_s3 = add_s3_subcommands(app);
    auto run_shards = add_shard_subcommands(app);
    auto run_mix = add_mix_subcommands(app);
    auto run_decode = add_decode_subcommands(app);
    auto run_pipeline = add_pipeline_subcommands(app);
    auto run_tensors = add_tensor_subcommands(app);
    auto run_run = cb::run::add_run_subcommands(app);
#if CONVEYOR_WITH_CUDA
    auto run_h2d = add_h2d_subcommands(app);
    auto run_gpu_decode = add_gpu_decode_subcommands(app);
#endif

    CLI11_PARSE(app, argc, argv);

    try {
        if (*g) return cmd_gen_files(gen);
        if (*d) {
            const file_set s = load_files(drop);
            const double left = drop_cache(s.paths);
            std::fprintf(stderr, "drop-cache: %zu files; %.1f%% of sampled pages still cached%s\n", s.paths.size(),
                         100.0 * left, left > 0.01 ? " (this file system keeps them: runs on it are not cold)" : "");
            return 0;
        }
        if (*f) {
            if (fa.concurrency == 0 || fa.repeat == 0) throw std::invalid_argument("--concurrency and --repeat must be at least 1");
            return cmd_files(fa);
        }
        if (*r) return cmd_random_access(ra);
        if (int rc = run_s3(); rc >= 0) return rc;
        if (int rc = run_shards(); rc >= 0) return rc;
        if (int rc = run_mix(); rc >= 0) return rc;
        if (int rc = run_decode(); rc >= 0) return rc;
        if (int rc = run_pipeline(); rc >= 0) return rc;
        if (int rc = run_tensors(); rc >= 0) return rc;
        if (int rc = run_run(); rc >= 0) return rc;
#if CONVEYOR_WITH_CUDA
        if (int rc = run_h2d(); rc >= 0) return rc;
        if (int rc = run_gpu_decode(); rc >= 0) return rc;
#endif
    } catch (const std::exception& e) {
        std::fprintf(stderr, "conveyor-bench: error: %s\n", e.what());
        return 1;
    }
    return 1;
}
