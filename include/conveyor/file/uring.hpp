// conveyor/file/uring.hpp — an io_uring ring driven by an Asio io_context.
#ifndef CONVEYOR_FILE_URING_HPP
#define CONVEYOR_FILE_URING_HPP

#include <conveyor/file/error.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include <liburing.h>

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace conveyor::file {

namespace asio = boost::asio;

/// Settings of a ring.
struct uring_options {
    /// Submission queue entries (the completion queue gets twice as many).
    unsigned entries = 256;
    /// Files open at once: the size of the registered (direct) file table. Reads beyond
    /// this wait in a backlog until a slot frees.
    unsigned max_files = 256;
};

namespace detail {

/// One operation in flight: receives the CQEs of its SQEs, then completes.
struct uring_op {
    virtual ~uring_op() = default;
    /// One CQE of this operation arrived; `tag` says which of its SQEs it answers.
    virtual void on_cqe(unsigned tag, int res) = 0;
    /// All CQEs are in; completes the caller's handler. The ring deletes the op after.
    virtual void finish() = 0;

    uring_op* prev = nullptr; // the ring's list of operations in flight
    uring_op* next = nullptr;
    std::uint64_t group = 0;  // who started it (a pipeline run), for group cancellation
    int pending = 0;          // CQEs still to come
    bool started = false;
};

inline std::error_code errno_code(int negative_res) noexcept
{
    return {-negative_res, std::system_category()};
}

} // namespace detail

/** An io_uring ring whose completions are delivered on an `asio::io_context`.

    The ring's eventfd is registered with the kernel and watched by Asio, so completions
    wake the same event loop as network I/O. Operations prepared during one turn of the
    loop are submitted together by one `io_uring_submit` at the end of the turn; completions
    are reaped in batches (`io_uring_for_each_cqe`, then one `io_uring_cq_advance`).

    Whole-file reads use registered ("direct") file descriptors (opened without O_CLOEXEC,
    which the kernel rejects for them: they are not in the process's fd table at all) so
    that a small file is
    one linked chain of three SQEs — `openat` into a slot, `read`, `close` of the slot —
    submitted at once: one file costs no system call of its own.

    @par Thread Safety
    Unsafe: every member must be called on the thread running the io_context (the ring
    is single-issuer). Asynchronous operations complete through their handler's
    associated executor.
*/
class uring {
public:
    using handler_type = asio::any_completion_handler<void(std::error_code, std::uint64_t)>;

    /// Creates the ring. If the kernel refuses (old kernel, seccomp, `io_uring_disabled`),
    /// `available()` is false and `unavailable_reason()` says why.
    uring(asio::io_context& ctx, uring_options opts) : ctx_(ctx), opts_(opts), efd_(ctx)
    {
        // A linked open/read/close needs three entries at once; below that a chain would be
        // split over two submissions and race.
        opts_.entries = std::max(opts_.entries, 8u);
        opts_.max_files = std::max(opts_.max_files, 1u);
        io_uring_params p{};
        // Not SINGLE_ISSUER: shutdown submits its cancel from whichever thread destroys the context.
        // CQSIZE: every file in flight can have three completions (open, read, close) waiting,
        // plus chunk reads; a completion queue that small overflows into the kernel's list.
        p.flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_CQSIZE;
        p.cq_entries = std::max(2 * opts_.entries, 4 * opts_.max_files + opts_.entries);
        int r = io_uring_queue_init_params(opts_.entries, &ring_, &p);
        if (r == -EINVAL) { // older kernels lack some flags
            p = {};
            p.flags = IORING_SETUP_CQSIZE;
            p.cq_entries = std::max(2 * opts_.entries, 4 * opts_.max_files + opts_.entries);
            r = io_uring_queue_init_params(opts_.entries, &ring_, &p);
        }
        if (r < 0) {
            reason_ = std::string("io_uring_queue_init failed: ") + std::strerror(-r);
            return;
        }
        ring_ok_ = true;
        if ((r = io_uring_register_files_sparse(&ring_, opts_.max_files)) < 0) {
            reason_ = std::string("registering a sparse file table failed (kernel older than 5.19?): ") + std::strerror(-r);
            return;
        }
        const int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (fd < 0) {
            reason_ = std::string("eventfd failed: ") + std::strerror(errno);
            return;
        }
        efd_.assign(fd);
        if ((r = io_uring_register_eventfd(&ring_, fd)) < 0) {
            reason_ = std::string("io_uring_register_eventfd failed: ") + std::strerror(-r);
            return;
        }
        free_slots_.reserve(opts_.max_files);
        for (unsigned i = opts_.max_files; i > 0; --i) free_slots_.push_back(static_cast<int>(i - 1));
        available_ = true;
        arm();
    }

    uring(const uring&) = delete;
    uring& operator=(const uring&) = delete;

    ~uring() { shutdown(); }

    bool available() const noexcept { return available_; }
    const std::string& unavailable_reason() const noexcept { return reason_; }
    asio::io_context& context() noexcept { return ctx_; }
    /// Operations in flight or waiting for a file slot.
    std::size_t in_flight() const noexcept { return in_flight_ + backlog_.size(); }

    /** Stat `path` (io_uring `statx`, following symlinks) and complete with its size.
        A directory or special file completes with `errc::not_a_regular_file`.
        @par Completion Signature
        `void(std::error_code, std::uint64_t size)` */
    template <class Token>
    auto async_file_size(std::string path, std::uint64_t group, Token&& token)
    {
        return asio::async_initiate<Token, void(std::error_code, std::uint64_t)>(
            [this](auto handler, std::string path, std::uint64_t group) {
                start(new stat_op(*this, std::move(path), group, handler_type(std::move(handler))));
            },
            token, std::move(path), group);
    }

    /** Read the first `len` bytes of `path` into `dst` with one linked chain:
        `openat` (direct) → `read` → `close` (direct). Completes with the bytes read,
        which is less than `len` at end of file.
        @par Completion Signature
        `void(std::error_code, std::uint64_t bytes)` */
    template <class Token>
    auto async_read_small(std::string path, std::byte* dst, std::uint32_t len, std::uint64_t group, Token&& token)
    {
        return asio::async_initiate<Token, void(std::error_code, std::uint64_t)>(
            [this, dst, len](auto handler, std::string path, std::uint64_t group) {
                start(new small_read_op(*this, std::move(path), dst, len, group, handler_type(std::move(handler))));
            },
            token, std::move(path), group);
    }

    /** Read `len` bytes of `path` into `dst` in chunks of `chunk` bytes, up to
        `parallel` chunks in flight: `openat` (direct), the reads, `close` (direct).
        Completes with the bytes read (less than `len` if the file was shorter).
        @par Completion Signature
        `void(std::error_code, std::uint64_t bytes)` */
    template <class Token>
    auto async_read_large(std::string path, std::byte* dst, std::uint64_t len, std::uint32_t chunk,
                          unsigned parallel, std::uint64_t group, Token&& token)
    {
        return asio::async_initiate<Token, void(std::error_code, std::uint64_t)>(
            [this, dst, len, chunk, parallel](auto handler, std::string path, std::uint64_t group) {
                start(new large_read_op(*this, std::move(path), dst, len, std::max<std::uint32_t>(chunk, 4096),
                                        std::max(parallel, 1u), group, handler_type(std::move(handler))));
            },
            token, std::move(path), group);
    }

    /// Cancels every operation of `group` (io_uring `ASYNC_CANCEL`); they complete with
    /// `operation_canceled` (or their result, if they finished first).
    void cancel_group(std::uint64_t group)
    {
        for (auto it = backlog_.begin(); it != backlog_.end();) {
            if ((*it)->group == group) {
                detail::uring_op* op = *it;
                it = backlog_.erase(it);
                cancelled_backlog(op);
            } else {
                ++it;
            }
        }
        for (auto* op = head_; op; op = op->next) {
            if (op->group != group) continue;
            io_uring_sqe* sqe = get_sqe(1);
            io_uring_prep_cancel64(sqe, reinterpret_cast<std::uint64_t>(op), IORING_ASYNC_CANCEL_ALL);
            io_uring_sqe_set_data64(sqe, 0);
        }
        schedule_flush();
    }

private:
    // ---- submission and completion ------------------------------------------------------

    // An SQE, submitting what is queued first if fewer than `need` are free (so a linked
    // chain is never split across a full queue).
    io_uring_sqe* get_sqe(unsigned need)
    {
        // Submitting here does not reap: completions are handled only at the end of a loop
        // turn or on the eventfd, never inside an operation's own bookkeeping.
        if (io_uring_sq_space_left(&ring_) < need) submit_now(false);
        io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
        while (!sqe) { // the kernel has not consumed the queue yet
            submit_now(false);
            sqe = io_uring_get_sqe(&ring_);
        }
        return sqe;
    }

    void schedule_flush()
    {
        if (flush_scheduled_) return;
        flush_scheduled_ = true;
        // The ring may be destroyed before its context runs this (a ring used on its own,
        // outside a runtime): the token says whether it still exists.
        asio::post(ctx_, [this, alive = std::weak_ptr<void>(alive_)] {
            if (alive.expired()) return;
            flush_scheduled_ = false;
            submit_now(true);
        });
    }

    void submit_now(bool then_reap)
    {
        if (!ring_ok_) return;
        int r;
        do {
            r = io_uring_submit(&ring_);
        } while (r == -EINTR);
        if (r == -EAGAIN || r == -EBUSY) {
            // Completion queue pressure: submit again on the next turn, after reaping.
            if (!stopping_) schedule_flush();
        }
        if (then_reap) reap(); // what completed inline is ready now: no need to wait for the eventfd
    }

    void arm()
    {
        efd_.async_wait(asio::posix::stream_descriptor::wait_read, [this](const boost::system::error_code& ec) {
            if (ec) return; // closed at shutdown
            std::uint64_t v;
            while (::read(efd_.native_handle(), &v, sizeof v) > 0) {
            }
            reap();
            arm();
        });
    }

    void reap()
    {
        reap_ring();
        // Completions that did not fit wait in the kernel's overflow list and reach the ring
        // only on an enter with GETEVENTS: without this flush, a quiet ring would never see them.
        while (io_uring_cq_has_overflow(&ring_)) {
            io_uring_get_events(&ring_);
            if (!reap_ring()) break;
        }
    }

    // Handles what is in the completion queue now; false if it was empty.
    bool reap_ring()
    {
        struct done {
            std::uint64_t user_data;
            int res;
        };
        std::vector<done> batch;
        io_uring_cqe* cqe;
        unsigned head, n = 0;
        io_uring_for_each_cqe(&ring_, head, cqe)
        {
            batch.push_back({cqe->user_data, cqe->res});
            ++n;
        }
        if (n == 0) return false;
        io_uring_cq_advance(&ring_, n);
        for (const auto& d : batch) {
            if (d.user_data == 0) continue; // a cancel or a standalone close
            auto* op = reinterpret_cast<detail::uring_op*>(d.user_data & ~std::uint64_t{7});
            op->on_cqe(static_cast<unsigned>(d.user_data & 7), d.res);
            if (--op->pending == 0) {
                unlink(op);
                --in_flight_;
                std::unique_ptr<detail::uring_op> owned(op);
                if (!stopping_) op->finish(); // at shutdown the handler is destroyed, not resumed
            }
        }
        return true;
    }

    static std::uint64_t tagged(detail::uring_op* op, unsigned tag) { return reinterpret_cast<std::uint64_t>(op) | tag; }

    // ---- file slots -------------------------------------------------------------------------

    int take_slot()
    {
        if (free_slots_.empty()) return -1;
        const int s = free_slots_.back();
        free_slots_.pop_back();
        return s;
    }

    void release_slot(int slot)
    {
        free_slots_.push_back(slot);
        while (!backlog_.empty() && !free_slots_.empty()) {
            detail::uring_op* op = backlog_.front();
            backlog_.pop_front();
            start(op);
        }
    }

    // Closes a slot whose linked close was cancelled, then frees it.
    void close_slot_alone(int slot)
    {
        io_uring_sqe* sqe = get_sqe(1);
        io_uring_prep_close_direct(sqe, static_cast<unsigned>(slot));
        io_uring_sqe_set_data64(sqe, 0);
        schedule_flush();
        release_slot(slot);
    }

    // ---- operations -----------------------------------------------------------------------

    void link(detail::uring_op* op)
    {
        op->next = head_;
        if (head_) head_->prev = op;
        head_ = op;
        ++in_flight_;
    }
    void unlink(detail::uring_op* op)
    {
        if (op->prev) op->prev->next = op->next;
        else head_ = op->next;
        if (op->next) op->next->prev = op->prev;
        op->prev = op->next = nullptr;
    }

    void start(detail::uring_op* op)
    {
        if (!available_) {
            std::unique_ptr<detail::uring_op> owned(op);
            fail_unstarted(op, make_error_code(errc::uring_unavailable));
            return;
        }
        if (!static_cast<base_op*>(op)->prepare()) {
            backlog_.push_back(op); // waits for a file slot
            return;
        }
        op->started = true;
        link(op);
        schedule_flush();
    }

    void cancelled_backlog(detail::uring_op* op)
    {
        std::unique_ptr<detail::uring_op> owned(op);
        fail_unstarted(op, std::make_error_code(std::errc::operation_canceled));
    }

    void fail_unstarted(detail::uring_op* op, std::error_code ec) { static_cast<base_op*>(op)->complete(ec, 0); }

    struct base_op : detail::uring_op {
        base_op(uring& r, std::uint64_t g, handler_type h) : ring(r), handler(std::move(h)) { group = g; }
        /// Prepares the SQEs; false if it must wait for a file slot.
        virtual bool prepare() = 0;
        void complete(std::error_code ec, std::uint64_t n)
        {
            auto ex = asio::get_associated_executor(handler, ring.ctx_.get_executor());
            asio::dispatch(ex, [h = std::move(handler), ec, n]() mutable { std::move(h)(ec, n); });
        }
        uring& ring;
        handler_type handler;
    };

    struct stat_op final : base_op {
        stat_op(uring& r, std::string p, std::uint64_t g, handler_type h) : base_op(r, g, std::move(h)), path(std::move(p)) {}
        bool prepare() override
        {
            io_uring_sqe* sqe = ring.get_sqe(1);
            io_uring_prep_statx(sqe, AT_FDCWD, path.c_str(), 0, STATX_TYPE | STATX_SIZE, &st);
            io_uring_sqe_set_data64(sqe, tagged(this, 0));
            pending = 1;
            return true;
        }
        void on_cqe(unsigned, int r) override { res = r; }
        void finish() override
        {
            if (res < 0) return complete(detail::errno_code(res), 0);
            if (!S_ISREG(st.stx_mode)) return complete(make_error_code(errc::not_a_regular_file), 0);
            complete({}, st.stx_size);
        }
        std::string path;
        struct statx st {};
        int res = 0;
    };

    struct small_read_op final : base_op {
        small_read_op(uring& r, std::string p, std::byte* d, std::uint32_t l, std::uint64_t g, handler_type h)
            : base_op(r, g, std::move(h)), path(std::move(p)), dst(d), len(l)
        {
        }
        bool prepare() override
        {
            slot = ring.take_slot();
            if (slot < 0) return false;
            io_uring_sqe* open = ring.get_sqe(3);
            io_uring_prep_openat_direct(open, AT_FDCWD, path.c_str(), O_RDONLY, 0, static_cast<unsigned>(slot));
            open->flags |= IOSQE_IO_LINK;
            io_uring_sqe_set_data64(open, tagged(this, 0));
            io_uring_sqe* read = ring.get_sqe(2);
            io_uring_prep_read(read, slot, dst, len, 0);
            read->flags |= IOSQE_FIXED_FILE | IOSQE_IO_HARDLINK; // close runs even if the read fails
            io_uring_sqe_set_data64(read, tagged(this, 1));
            io_uring_sqe* close = ring.get_sqe(1);
            io_uring_prep_close_direct(close, static_cast<unsigned>(slot));
            io_uring_sqe_set_data64(close, tagged(this, 2));
            pending = 3;
            return true;
        }
        void on_cqe(unsigned tag, int r) override { res[tag] = r; }
        void finish() override
        {
            // A failed open cancels the rest of the chain, close included: close alone.
            if (res[2] == -ECANCELED && res[0] >= 0) ring.close_slot_alone(slot);
            else ring.release_slot(slot);
            if (res[0] < 0) return complete(detail::errno_code(res[0]), 0);
            if (res[1] < 0) return complete(detail::errno_code(res[1]), 0);
            complete({}, static_cast<std::uint64_t>(res[1]));
        }
        std::string path;
        std::byte* dst;
        std::uint32_t len;
        int slot = -1;
        int res[3] = {0, 0, 0};
    };

    // open (direct) → up to `parallel` chunk reads at a time → close (direct). Each chunk
    // read is an op of its own that reports to this one; this op holds one pending count
    // from the open's success until its close completes.
    struct large_read_op final : base_op {
        large_read_op(uring& r, std::string p, std::byte* d, std::uint64_t l, std::uint32_t c, unsigned par,
                      std::uint64_t g, handler_type h)
            : base_op(r, g, std::move(h)), path(std::move(p)), dst(d), len(l), chunk(c), parallel(par)
        {
        }

        struct chunk_read final : detail::uring_op {
            chunk_read(large_read_op& p, std::uint64_t off, std::uint32_t n) : parent(p), offset(off), length(n)
            {
                group = p.group;
                pending = 1;
            }
            void on_cqe(unsigned, int r) override { parent.chunk_done(offset, length, r); }
            void finish() override {}
            large_read_op& parent;
            std::uint64_t offset;
            std::uint32_t length;
        };

        bool prepare() override
        {
            slot = ring.take_slot();
            if (slot < 0) return false;
            io_uring_sqe* open = ring.get_sqe(1);
            io_uring_prep_openat_direct(open, AT_FDCWD, path.c_str(), O_RDONLY, 0, static_cast<unsigned>(slot));
            io_uring_sqe_set_data64(open, tagged(this, 0));
            pending = 1;
            return true;
        }

        void on_cqe(unsigned tag, int r) override
        {
            if (tag == 0) { // the open
                if (r < 0) {
                    err = detail::errno_code(r);
                    ring.release_slot(slot);
                    return;
                }
                ++pending; // held until the close completes
                refill();
            } else { // the close
                if (r == -ECANCELED) ring.close_slot_alone(slot);
                else ring.release_slot(slot);
            }
        }

        void chunk_done(std::uint64_t offset, std::uint32_t length, int r)
        {
            --reading;
            if (r < 0) {
                if (!err) err = detail::errno_code(r);
            } else if (r == 0) {
                eof = true; // the file ended before `len`: the caller sees fewer bytes
            } else {
                done_bytes += static_cast<std::uint64_t>(r);
                if (static_cast<std::uint32_t>(r) < length) // a partial read: ask for the rest
                    issue(offset + static_cast<std::uint64_t>(r), length - static_cast<std::uint32_t>(r));
            }
            refill();
        }

        void refill()
        {
            if (ring.stopping_ && !err) err = std::make_error_code(std::errc::operation_canceled);
            while (!err && !eof && reading < parallel && next_offset < len) {
                const auto n = static_cast<std::uint32_t>(std::min<std::uint64_t>(chunk, len - next_offset));
                issue(next_offset, n);
                next_offset += n;
            }
            if (reading == 0 && !closing) {
                closing = true;
                io_uring_sqe* close = ring.get_sqe(1);
                io_uring_prep_close_direct(close, static_cast<unsigned>(slot));
                io_uring_sqe_set_data64(close, tagged(this, 1));
                ring.schedule_flush();
            }
        }

        void issue(std::uint64_t offset, std::uint32_t n)
        {
            auto* c = new chunk_read(*this, offset, n);
            io_uring_sqe* sqe = ring.get_sqe(1);
            io_uring_prep_read(sqe, slot, dst + offset, n, offset);
            sqe->flags |= IOSQE_FIXED_FILE;
            io_uring_sqe_set_data64(sqe, tagged(c, 0));
            c->started = true;
            ring.link(c);
            ++reading;
            ring.schedule_flush();
        }

        void finish() override
        {
            if (err) return complete(err, 0);
            complete({}, done_bytes);
        }

        std::string path;
        std::byte* dst;
        std::uint64_t len;
        std::uint32_t chunk;
        unsigned parallel;
        int slot = -1;
        std::error_code err;
        std::uint64_t next_offset = 0;
        std::uint64_t done_bytes = 0;
        unsigned reading = 0;
        bool eof = false;
        bool closing = false;
    };

    void shutdown()
    {
        if (!ring_ok_) return;
        stopping_ = true;
        // Cancel everything, then wait (bounded) for the kernel to let go of our buffers.
        if (head_) {
            io_uring_sqe* sqe = get_sqe(1);
            io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY);
            io_uring_sqe_set_data64(sqe, 0);
            submit_now(false);
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
            while (head_ && std::chrono::steady_clock::now() < deadline) {
                __kernel_timespec ts{0, 50'000'000};
                io_uring_cqe* cqe;
                io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);
                reap();
                submit_now(false); // closes queued by operations winding down
            }
        }
        for (auto* op : backlog_) delete op;
        backlog_.clear();
        available_ = false;
        boost::system::error_code ignored;
        efd_.close(ignored);
        io_uring_queue_exit(&ring_);
        ring_ok_ = false;
    }

    asio::io_context& ctx_;
    uring_options opts_;
    io_uring ring_{};
    bool ring_ok_ = false;
    bool available_ = false;
    std::string reason_;
    asio::posix::stream_descriptor efd_;
    bool flush_scheduled_ = false;
    bool stopping_ = false;
    std::shared_ptr<int> alive_ = std::make_shared<int>(0); // see schedule_flush
    std::vector<int> free_slots_;
    std::deque<detail::uring_op*> backlog_;
    detail::uring_op* head_ = nullptr;
    std::size_t in_flight_ = 0;
};

/** The ring of an `io_context`, as an Asio service: one ring per I/O thread, created on
    first use with the options given then.

    @par Thread Safety
    `get` is safe from any thread; the ring itself belongs to the context's thread.
*/
class uring_service : public asio::detail::execution_context_service_base<uring_service> {
public:
    explicit uring_service(asio::execution_context& ctx) : execution_context_service_base<uring_service>(ctx) {}

    /// The ring of `ctx` (whose service this is), created with `opts` if it is new.
    uring& get(asio::io_context& ctx, const uring_options& opts)
    {
        std::call_once(once_, [&] { ring_ = std::make_unique<uring>(ctx, opts); });
        return *ring_;
    }

    void shutdown() override { ring_.reset(); }

private:
    std::once_flag once_;
    std::unique_ptr<uring> ring_;
};

} // namespace conveyor::file

#endif
