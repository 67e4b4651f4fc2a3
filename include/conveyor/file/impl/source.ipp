// conveyor/file/impl/source.ipp — the file source's reader and the dataset, over the
// whole-file reads of conveyor/file/detail/impl/read_file.ipp (io_uring or pread).
#ifndef CONVEYOR_FILE_IMPL_SOURCE_IPP
#define CONVEYOR_FILE_IMPL_SOURCE_IPP

#include <conveyor/file/source.hpp>

#include <conveyor/core/detail/offload.hpp>
#include <conveyor/core/run_context.hpp>
#include <conveyor/core/source.hpp>
#include <conveyor/file/detail/uring.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/associator.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <tuple>
#include <utility>

#include <conveyor/file/detail/impl/read_file.ipp>

namespace conveyor::file {
namespace detail {
/** Reads the files of one listing, item by item: the reader of a file source's run (one
    per run, shared by its workers on every lane) and of a dataset. Each I/O lane gets its
    ring on first use there, and a run's cancellation cancels what that ring has in flight
    for the run. Each lane's state is touched only on that lane's thread. */
class reader {
public:
    reader(runtime& rt, std::shared_ptr<const listing> files, source_options o, std::string stage, run_context* ctx)
        : rt_(rt), files_(std::move(files)), opts_(std::move(o)), stage_(std::move(stage)), ctx_(ctx),
          group_(ctx ? reinterpret_cast<std::uintptr_t>(ctx) : 0),
          pread_env_(make_read_env(rt, nullptr, open_root(*files_), opts_, group_)), lanes_(rt.io_lanes())
    {
    }

    const listing& files() const noexcept { return *files_; }

    /// Reads file `i`. Runs on one of the runtime's I/O lanes.
    CONVEYOR_DECL asio::awaitable<read_outcome<blob>> operator()(std::uint64_t i);

private:
    struct lane_state {
        bool ready = false;
        read_env env; // this lane's ring (null: the pread backend) and the shared settings
    };

    CONVEYOR_DECL const read_env& env_here(std::size_t lane);

    runtime& rt_;
    std::shared_ptr<const listing> files_;
    source_options opts_;
    std::string stage_;
    run_context* ctx_; // the run this reader serves; null for a dataset
    std::uint64_t group_; // the run's cancellation group on the rings
    read_env pread_env_;  // no ring; its root is opened once per run (or per dataset)
    std::vector<lane_state> lanes_;
};

CONVEYOR_DECL const read_env& reader::env_here(std::size_t lane)
{
    auto& st = lanes_[lane];
    if (st.ready) return st.env;
    // The ring must be created and used on its own thread, so each lane asks for it there:
    // a runtime's rings come up lazily, on first use.
    st.env = pread_env_;
    st.env.ring = ring_for(rt_, lane);
    st.ready = true;
    if (st.env.ring && ctx_) {
        uring* ring = st.env.ring;
        const std::uint64_t group = group_;
        ctx_->on_cancel(rt_.io_executor(lane), [ring, group] { ring->cancel_group(group); });
    }
    return st.env;
}

CONVEYOR_DECL asio::awaitable<read_outcome<blob>> reader::operator()(std::uint64_t i)
{
    const int lane = conveyor::detail::current_lane;
    const read_env* env = &pread_env_; // off the lanes (never, in practice): pread
    if (lane >= 0 && static_cast<std::size_t>(lane) < lanes_.size()) {
        try {
            env = &env_here(static_cast<std::size_t>(lane));
        } catch (...) {
            // No backend to read with (io_backend::uring where io_uring is refused): that
            // fails the whole run, whatever the error policy says about single files.
            auto e = std::current_exception();
            if (ctx_) ctx_->fail(e, stage_);
            return ready(read_outcome<blob>(e));
        }
    }
    // Not a coroutine itself: the caller awaits the read's own coroutine (one frame per
    // file). The environment and the stage's name live in the reader, which outlives the
    // read (its callers hold it).
    if (env->timeout.count() > 0) return read_file(*env, files_, i, stage_);
    return read_file_now(*env, files_, i, stage_);
}

/// The reader of one run, as keyed_source calls it (named types, not closures: they end up
/// in coroutine frames of functions compiled once, where closures would have no linkage).
struct shared_reader {
    std::shared_ptr<reader> r;
    asio::awaitable<read_outcome<blob>> operator()(std::uint64_t i) const { return (*r)(i); }
};

/// Makes each run's reader.
struct open_reader {
    std::shared_ptr<const listing> files;
    source_options opts;
    shared_reader operator()(run_context& ctx) const
    {
        return {std::make_shared<reader>(ctx.rt(), files, opts, "files", &ctx)};
    }
};

} // namespace detail

CONVEYOR_DECL pipeline<blob> files(std::shared_ptr<const listing> shared, source_options o)
{
    if (!shared) shared = std::make_shared<const listing>();
    const std::size_t capacity = o.capacity ? o.capacity : 2 * std::max<std::size_t>(o.concurrency, 1);
    source_settings<blob> s{.concurrency = o.concurrency, .ordered = o.ordered, .errors = o.errors, .capacity = capacity,
                            .on_read = o.on_read, .epochs = o.epochs};
    const std::uint64_t count = shared->size();
    return keyed_source<blob>("files", count, std::move(s), detail::open_reader{shared, std::move(o)});
}

CONVEYOR_DECL pipeline<blob> files(listing l, source_options o)
{
    return files(std::make_shared<const listing>(std::move(l)), std::move(o));
}

CONVEYOR_DECL pipeline<blob> files(const std::vector<std::string>& paths, source_options o)
{
    return files(from_paths(paths), std::move(o));
}

CONVEYOR_DECL dataset::dataset(listing l, runtime& rt, source_options o)
    : files_(std::make_shared<const listing>(std::move(l))), rt_(rt),
      reader_(std::make_shared<detail::reader>(rt, files_, std::move(o), "file dataset", nullptr))
{
}

namespace detail {
/// Reads file `i` with `r` on the calling lane; throws the error if it cannot.
CONVEYOR_DECL asio::awaitable<blob> read_or_throw(std::shared_ptr<reader> r, std::size_t i)
{
    auto got = co_await (*r)(i);
    if (!got) std::rethrow_exception(got.error_ptr());
    co_return std::move(got).value();
}
} // namespace detail

CONVEYOR_DECL asio::awaitable<blob> dataset::async_get(std::size_t i)
{
    conveyor::detail::check_key_index("file dataset", i, files_->size(), "files");
    if (rt_.current_io_lane()) co_return co_await detail::read_or_throw(reader_, i);
    const std::size_t target = next_lane_++ % rt_.io_lanes();
    co_return co_await asio::co_spawn(rt_.io_executor(target), detail::read_or_throw(reader_, i), asio::use_awaitable);
}

CONVEYOR_DECL blob dataset::get(std::size_t i)
{
    conveyor::detail::check_key_index("file dataset", i, files_->size(), "files");
    const std::size_t target = next_lane_++ % rt_.io_lanes();
    return asio::co_spawn(rt_.io_executor(target), detail::read_or_throw(reader_, i), asio::use_future).get();
}

} // namespace conveyor::file

#endif
