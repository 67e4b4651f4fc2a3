// conveyor/core/runtime.hpp — I/O threads, compute pool, buffers: where pipelines run.
#ifndef CONVEYOR_CORE_RUNTIME_HPP
#define CONVEYOR_CORE_RUNTIME_HPP

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/core/memory_budget.hpp>
#include <conveyor/detail/config.hpp>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace conveyor {

namespace asio = boost::asio;

class run_context;

/** The CPUs this process may run on: those of the calling thread's affinity mask
    (`taskset`, a container's cpuset), fewer where a cgroup v2 CPU quota (`cpu.max`) allows
    less (rounded up), and at least 1; `std::thread::hardware_concurrency()` where neither
    can be read. The runtime's default thread counts follow it. */
CONVEYOR_DECL std::size_t usable_cpus() noexcept;

/** How many ranks of a distributed job run on this node, as the launcher says in the
    environment; the first found of:
    - `LOCAL_WORLD_SIZE` (torchrun);
    - `SLURM_NTASKS_PER_NODE`, then `SLURM_TASKS_PER_NODE` (Slurm): a count (`4`), or
      Slurm's list of counts per node (`2(x3),1`: 2 on each of the first three nodes, 1 on
      the fourth), of which this node's entry is taken (`SLURM_NODEID`, counted from 0) or,
      without `SLURM_NODEID`, the largest;
    - `OMPI_COMM_WORLD_LOCAL_SIZE` (Open MPI's mpirun);
    - where none of these is set but `LOCAL_RANK` is (a launcher that gives each rank one
      device of the node and no count), `devices`: the devices on this node, which the
      caller knows (the Python module passes `torch.cuda.device_count()`), unless 0;
    - else 1.
    Throws `conveyor::error` (`errc::invalid_argument`) naming the variable when the one
    it reads is not a count of at least 1 (or `SLURM_NODEID` is not an index into the list).
    A runtime's default compute threads are this rank's share of the node's cores:
    `usable_cpus() / local_ranks()`. */
CONVEYOR_DECL std::size_t local_ranks(std::size_t devices = 0);

/// How the file source reads.
enum class io_backend {
    automatic, ///< io_uring if the kernel allows it, else `pread` on the blocking pool
    uring,     ///< io_uring; fail if unavailable
    pread,     ///< `pread` on the blocking pool, even where io_uring works
};

/// Settings of a `runtime`. Zero means "choose for this machine".
struct runtime_options {
    /// I/O threads, each with its own `io_context` and io_uring ring. 0: min(cores, 4),
    /// cores being `usable_cpus()`.
    std::size_t io_threads = 0;
    /// Threads for CPU work (decode, parsing, user maps). 0: this rank's share of the cores
    /// this process may use, `usable_cpus() / local_ranks(local_devices)` and at least 1, so
    /// that the ranks on one node together start one thread per core.
    std::size_t compute_threads = 0;
    /// The devices (GPUs) on this node, for `local_ranks(local_devices)` when
    /// `compute_threads` is 0: what a launcher that sets `LOCAL_RANK` and no count of the
    /// node's ranks leaves the count to. 0: not known.
    std::size_t local_devices = 0;
    /// Threads for blocking system calls (the `pread` backend). 0: 16.
    std::size_t blocking_threads = 0;
    /// Submission queue entries per io_uring ring.
    unsigned ring_entries = 256;
    /// Most file operations in flight on one ring (also the registered-file table size).
    unsigned ring_max_in_flight = 256;
    /// Which file I/O backend to use. The environment variable CONVEYOR_IO_BACKEND
    /// (`uring` or `pread`) overrides `automatic`.
    io_backend backend = io_backend::automatic;
    /// Idle memory the buffer pool may keep.
    std::size_t buffer_pool_bytes = std::size_t{256} << 20;
    /// The runtime's memory budget: bytes that chunk readers may hold at once, from the
    /// read of a chunk until its last slice dies (see `memory_budget`). 0: a quarter of the
    /// memory this process may use (`memory_budget::default_limit()`);
    /// `memory_budget::unlimited`: no limit.
    std::size_t memory_limit = 0;
    /// Where diagnostics go (one line each). Default: standard error.
    std::function<void(std::string_view)> log;
};

namespace detail {
/// The lane index of the I/O thread we are on, or -1 on any other thread.
inline thread_local int current_lane = -1;
} // namespace detail

/** The threads and memory that pipelines run on.

    - I/O lanes: each is one thread running one `asio::io_context`. Network I/O and the
      file module's io_uring ring live on a lane; stage coroutines run on one lane.
    - A compute pool for CPU work, kept off the I/O threads.
    - A blocking pool (created on first use) for system calls that may block.
    - A buffer pool shared by everything that reads, and a memory budget that bounds the
      bytes chunk readers hold at once.

    Destroying a runtime cancels every pipeline still running on it, waits for their work
    to stop, and joins its threads.

    @par Thread Safety
    Safe: every member may be called from any thread, except that the destructor must not
    run on one of the runtime's own threads.
*/
class runtime {
public:
    using io_executor_type = asio::io_context::executor_type;
    using pool_executor_type = asio::thread_pool::executor_type;

    CONVEYOR_DECL explicit runtime(runtime_options opts = {});

    runtime(const runtime&) = delete;
    runtime& operator=(const runtime&) = delete;

    CONVEYOR_DECL ~runtime();

    /// The process-wide runtime used by pipelines that were not given one.
    CONVEYOR_DECL static runtime& shared();

    const runtime_options& options() const noexcept { return opts_; }
    std::size_t io_lanes() const noexcept { return lanes_.size(); }

    asio::io_context& io_context(std::size_t lane) { return lanes_.at(lane)->ctx; }
    io_executor_type io_executor(std::size_t lane) { return lanes_.at(lane)->ctx.get_executor(); }
    /// The lanes in turn: spreads pipelines over the I/O threads.
    io_executor_type next_io_executor() { return io_executor(next_lane_++ % lanes_.size()); }

    /// The index of this runtime's I/O thread that the caller runs on, if it runs on one.
    CONVEYOR_DECL std::optional<std::size_t> current_io_lane() const noexcept;

    pool_executor_type compute_executor() { return compute_.get_executor(); }

    /// The pool for blocking system calls, created on first use.
    CONVEYOR_DECL pool_executor_type blocking_executor();

    buffer_pool& buffers() noexcept { return buffers_; }

    /// The budget of bytes in flight that chunk readers take from (`runtime_options::memory_limit`);
    /// its counters (`stats()`: in use, peak, waits) are the runtime's.
    memory_budget& memory() noexcept { return memory_; }
    const memory_budget& memory() const noexcept { return memory_; }

    /// Writes one diagnostic line.
    CONVEYOR_DECL void log(std::string_view line) const;

    /// Writes `line` unless a line with the same `topic` was already written by this runtime.
    CONVEYOR_DECL void log_once(std::string_view topic, std::string_view line);

    // Pipelines register their runs so that the destructor can stop them.
    CONVEYOR_DECL void attach(const std::shared_ptr<run_context>& r);
    CONVEYOR_DECL void detach(const run_context* r);

private:
    struct lane {
        asio::io_context ctx{1}; // concurrency hint 1: one thread per context, no locking
        asio::executor_work_guard<asio::io_context::executor_type> guard{ctx.get_executor()};
        std::thread thread;
    };

    CONVEYOR_DECL static runtime_options resolve(runtime_options o);

    CONVEYOR_DECL void cancel_all_runs();

    runtime_options opts_;
    std::vector<std::unique_ptr<lane>> lanes_;
    asio::thread_pool compute_;
    std::atomic<asio::thread_pool*> blocking_{nullptr};
    buffer_pool buffers_;
    memory_budget memory_;
    std::atomic<std::size_t> next_lane_{0};
    std::mutex mu_;
    std::condition_variable runs_cv_;
    std::set<std::string, std::less<>> logged_topics_;
    std::vector<std::weak_ptr<run_context>> runs_;
};

} // namespace conveyor

#if CONVEYOR_HEADER_ONLY
// The runtime's definitions need the complete run_context (its destructor stops the runs
// still going), so run_context.hpp includes them, after its own class.
#include <conveyor/core/run_context.hpp>
#endif

#endif
