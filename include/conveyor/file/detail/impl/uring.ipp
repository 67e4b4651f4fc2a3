// conveyor/file/detail/impl/uring.ipp — the io_uring ring: setup, submission, reaping, and
// each operation's prepare and complete (see detail/uring.hpp).
//
// Why one file of this length: it is one job, the ring's private implementation
// (`uring::impl`). Its operation types are nested in it because each one reads and changes
// the ring's state while it runs: the SQE budget, the registered-file slots, the list of
// operations in flight, the group cancellation and the backlog. Split into files they
// would need that state made public to them, which is the encapsulation this file keeps.
#ifndef CONVEYOR_FILE_DETAIL_IMPL_URING_IPP
#define CONVEYOR_FILE_DETAIL_IMPL_URING_IPP

#include <conveyor/file/detail/uring.hpp>

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include <liburing.h>

#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <vector>

namespace conveyor::file::detail {

/// One operation in flight: receives the CQEs of its SQEs, then completes.
struct uring_op {
    virtual ~uring_op() = default;
    /// One CQE of this operation arrived; `tag` says which of its SQEs it answers.
    virtual void on_cqe(unsigned tag, int res) = 0;
    /// All CQEs are in; completes the caller's handler (unless it was abandoned). The ring
    /// deletes the op after.
    virtual void finish() = 0;

    uring_op* prev = nullptr; // the ring's list of operations in flight
    uring_op* next = nullptr;
    uring_op* owner = nullptr; // the file operation a chunk read belongs to, else null
    std::uint64_t group = 0;   // who started it (a pipeline run), for group cancellation
    int pending = 0;           // CQEs still to come
    bool started = false;
};

CONVEYOR_DECL std::error_code errno_code(int negative_res) noexcept
{
    return {-negative_res, std::system_category()};
}

CONVEYOR_DECL directory::directory(const std::string& path)
{
    fd_ = ::open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd_ < 0) error_ = std::error_code(errno, std::system_category());
}

CONVEYOR_DECL directory::~directory()
{
    if (fd_ >= 0) ::close(fd_);
}

CONVEYOR_DECL open_file::~open_file()
{
    if (fd_ >= 0) ::close(fd_);
}

CONVEYOR_DECL open_how how_to_open(const file_ref& f, std::uint64_t extra) noexcept
{
    open_how how{};
    how.flags = O_RDONLY | O_NONBLOCK | extra;
    how.resolve = f.beneath ? RESOLVE_BENEATH : 0;
    return how;
}

CONVEYOR_DECL std::error_code open_error(int res, const file_ref& f) noexcept
{
    if (res == -EXDEV && f.beneath) return make_error_code(errc::path_escapes_root);
    return errno_code(res);
}

// The ring itself, its operations and their bookkeeping. Everything here runs on the
// thread of the ring's io_context.
class uring::impl {
public:
    struct base_op;

    impl(asio::io_context& ctx, uring_options opts) : ctx_(ctx), opts_(opts), efd_(ctx)
    {
        // A linked statx/open/read/close needs four entries at once; below that a chain would
        // be split over two submissions and race.
        opts_.entries = std::max(opts_.entries, 8u);
        opts_.max_files = std::max(opts_.max_files, 1u);
        io_uring_params p{};
        // Not SINGLE_ISSUER: shutdown submits its cancel from whichever thread destroys the context.
        // CQSIZE: every file in flight can have four completions (statx, open, read, close)
        // waiting, plus chunk reads and cancels; a completion queue that small overflows into
        // the kernel's list.
        p.flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_CQSIZE;
        p.cq_entries = std::max(2 * opts_.entries, 5 * opts_.max_files + opts_.entries);
        int r = io_uring_queue_init_params(opts_.entries, &ring_, &p);
        if (r == -EINVAL) { // older kernels lack some flags
            p = {};
            p.flags = IORING_SETUP_CQSIZE;
            p.cq_entries = std::max(2 * opts_.entries, 5 * opts_.max_files + opts_.entries);
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

    impl(const impl&) = delete;
    impl& operator=(const impl&) = delete;

    ~impl() { shutdown(); }

    void cancel_group(std::uint64_t group)
    {
        std::vector<base_op*> victims;
        for (auto* op : backlog_)
            if (op->group == group) victims.push_back(static_cast<base_op*>(op));
        for (auto* op = head_; op; op = op->next)
            if (op->group == group && !op->owner) victims.push_back(static_cast<base_op*>(op));
        for (auto* op : victims) abandon(op, std::make_error_code(std::errc::operation_canceled));
        schedule_flush();
    }

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
        // The batch's storage is kept between calls (a reap of 128 completions reallocated it
        // eight times). A handler resumed below may start operations but never reaps, so
        // the member is not in use twice; taken out while in use all the same.
        std::vector<reaped> batch = std::move(spare_batch_);
        batch.clear();
        io_uring_cqe* cqe;
        unsigned head, n = 0;
        io_uring_for_each_cqe(&ring_, head, cqe)
        {
            batch.push_back({cqe->user_data, cqe->res});
            ++n;
        }
        if (n == 0) {
            spare_batch_ = std::move(batch);
            return false;
        }
        io_uring_cq_advance(&ring_, n);
        for (const auto& d : batch) {
            if (d.user_data == 0) continue; // a cancel or a standalone close
            auto* op = reinterpret_cast<uring_op*>(d.user_data & ~std::uint64_t{7});
            op->on_cqe(static_cast<unsigned>(d.user_data & 7), d.res);
            if (--op->pending == 0) {
                unlink(op);
                --in_flight_;
                std::unique_ptr<uring_op> owned(op);
                if (!stopping_) op->finish(); // at shutdown the handler is destroyed, not resumed
            }
        }
        spare_batch_ = std::move(batch);
        return true;
    }

    static std::uint64_t tagged(uring_op* op, unsigned tag) { return reinterpret_cast<std::uint64_t>(op) | tag; }

    // Asks the kernel to cancel the SQE `tag` of `op` (its CQE then says -ECANCELED, or the
    // result, if it finished first). The cancel's own CQE is ignored.
    void cancel_sqe(uring_op* op, unsigned tag)
    {
        io_uring_sqe* sqe = get_sqe(1);
        io_uring_prep_cancel64(sqe, tagged(op, tag), 0);
        io_uring_sqe_set_data64(sqe, 0);
        schedule_flush();
    }

    /* Completes `op`'s handler now with `ec` and leaves the operation to wind down: the
       kernel is asked to cancel what is in flight, and the op (its buffer, path and file
       slot) lives on until its last CQE, however late. One not yet started (waiting for a
       file slot) is simply dropped. */
    void abandon(base_op* op, std::error_code ec)
    {
        if (op->delivered) return;
        if (!op->started) {
            std::erase(backlog_, static_cast<uring_op*>(op));
            std::unique_ptr<uring_op> owned(op);
            op->deliver_error(ec, true);
            return;
        }
        op->cancel_in_kernel(ec);
        op->deliver_error(ec, true);
    }

    // Abandons `op` if it is still one of this ring's operations (in flight or waiting for a
    // slot) with serial number `id`, as a cancellation of its handler asks; else nothing.
    // A linear search: cancelling single operations is rare, and the ring holds a few hundred.
    void abandon_serial(base_op* op, std::uint64_t id)
    {
        bool held = std::find(backlog_.begin(), backlog_.end(), static_cast<uring_op*>(op)) != backlog_.end();
        for (uring_op* o = head_; o && !held; o = o->next) held = o == op;
        if (held && op->serial == id) abandon(op, std::make_error_code(std::errc::operation_canceled));
    }

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
            uring_op* op = backlog_.front();
            backlog_.pop_front();
            start(static_cast<base_op*>(op));
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

    void link(uring_op* op)
    {
        op->next = head_;
        if (head_) head_->prev = op;
        head_ = op;
        ++in_flight_;
    }
    void unlink(uring_op* op)
    {
        if (op->prev) op->prev->next = op->next;
        else head_ = op->next;
        if (op->next) op->next->prev = op->prev;
        op->prev = op->next = nullptr;
    }

    // Starts a new operation whose handler does (`here`) or does not complete on this
    // ring's context (uring::completes_here).
    void launch(base_op* op, bool here)
    {
        op->here = here;
        start(op);
    }

    void start(base_op* op)
    {
        if (!available_) {
            std::unique_ptr<uring_op> owned(op);
            op->deliver_error(make_error_code(errc::uring_unavailable), false);
            return;
        }
        op->listen_for_cancellation();
        if (!op->prepare()) {
            backlog_.push_back(op); // waits for a file slot
            return;
        }
        op->started = true;
        link(op);
        schedule_flush();
    }

    /* What every operation started by a caller has: its file, its handler, and the state
       of its completion. `delivered` is set once the handler was called (or handed to the
       executor): an abandoned operation still receives its CQEs but calls nobody. */
    struct base_op : uring_op {
        base_op(impl& r, file_ref f, std::uint64_t g) : ring(r), file(std::move(f)) { group = g; }
        /// Prepares the SQEs; false if it must wait for a file slot.
        virtual bool prepare() = 0;
        /// Asks the kernel to cancel what is in flight; `why` is the error it ends with.
        virtual void cancel_in_kernel(std::error_code why) = 0;
        /// Completes the handler with `ec` (posted, never inline, when `post`).
        virtual void deliver_error(std::error_code ec, bool post) = 0;
        /// The handler's cancellation slot.
        virtual asio::cancellation_slot slot() = 0;

        // Asio per-operation cancellation: a cancellation delivered to the handler's slot
        // abandons this operation. The slot's handler names the op by its address and
        // serial number and the ring looks it up among the ops it holds (`abandon_serial`),
        // so that it never reaches an op that is gone. An op that dies with its handler
        // never called (at shutdown) clears the slot first (`forget_slot`): the handler
        // would otherwise name a ring that may be gone too.
        void listen_for_cancellation()
        {
            if (serial) return; // already listening (an op started again from the backlog)
            auto s = slot();
            if (!s.is_connected()) return;
            serial = ++ring.next_serial_;
            s.assign([r = &ring, op = this, id = serial](asio::cancellation_type_t type) {
                if (type != asio::cancellation_type::none) r->abandon_serial(op, id);
            });
        }

        // Clears the handler's slot if this op listens there and its handler was never
        // called nor handed on. Called by each op's destructor, while the handler still exists.
        template <class Handler>
        void forget_slot(Handler& h) noexcept
        {
            if (!serial || delivered || !h) return;
            auto s = h.get_cancellation_slot();
            if (s.is_connected()) s.clear();
        }

        // Calls `h(ec, args...)` on its executor: inline when already there (normal
        // completions, from reap), posted when `post` (abandoning, from a cancellation
        // handler or another op's bookkeeping). The slot is cleared just before the call.
        // A handler that completes on the ring's own context (`here`) is called directly
        // when this is its thread: what a dispatch would do, without the executor's
        // type erasure and its allocation.
        template <class Handler, class... Args>
        void deliver(Handler& h, bool post, std::error_code ec, Args... args)
        {
            if (delivered) return;
            delivered = true;
            if (!post && here && ring.ctx_.get_executor().running_in_this_thread())
                return call_now(std::move(h), ec, std::move(args)...); // the op may be gone once it has run
            auto ex = asio::get_associated_executor(h, ring.ctx_.get_executor());
            auto call = [h = std::move(h), ec, ... args = std::move(args)]() mutable {
                call_now(std::move(h), ec, std::move(args)...);
            };
            // Posted through the ring's context, then dispatched to the handler's executor (an
            // any_completion_executor offers dispatch only).
            if (post) asio::post(ring.ctx_, asio::bind_executor(ex, std::move(call)));
            else asio::dispatch(ex, std::move(call));
        }

        // Clears `h`'s slot and calls it.
        template <class Handler, class... Args>
        static void call_now(Handler h, std::error_code ec, Args... args)
        {
            auto s = h.get_cancellation_slot();
            if (s.is_connected()) s.clear();
            std::move(h)(ec, std::move(args)...);
        }

        impl& ring;
        file_ref file;
        bool delivered = false;
        bool here = false; // the handler completes on the ring's context (uring::completes_here)
        std::uint64_t serial = 0; // nonzero once listening on the handler's slot
    };

    struct read_op : base_op {
        read_op(impl& r, file_ref f, buffer b, std::uint64_t g, read_handler h)
            : base_op(r, std::move(f), g), buf(std::move(b)), handler(std::move(h))
        {
        }
        ~read_op() override { forget_slot(handler); }
        void deliver_error(std::error_code ec, bool post) override { deliver(handler, post, ec, buffer{}); }
        void complete(std::error_code ec, std::uint64_t n)
        {
            if (ec) return deliver_error(ec, false);
            buf.resize(static_cast<std::size_t>(n));
            deliver(handler, false, ec, std::move(buf));
        }
        asio::cancellation_slot slot() override { return handler.get_cancellation_slot(); }

        // Takes a file slot and prepares the head of every read: `statx` (tag 0) beside, not
        // linked to, `openat2` into the slot (tag 1), with `more` entries kept free for the
        // rest of the chain. Not linked: io_uring always runs a statx in an io-wq worker, and
        // a chain behind it would go there too, where a page-cache read completes inside the
        // submit otherwise: a linked chain would cost every warm read a worker's hand-off.
        // A special file's read is cancelled when the statx or the open
        // completes. Returns the open's SQE, or null if no slot is free.
        // A small read's fast try (`file.listed_regular`) sends no statx: `st` says regular,
        // and the caller counts the statx as done.
        io_uring_sqe* prepare_open(unsigned more)
        {
            slot_id = ring.take_slot();
            if (slot_id < 0) return nullptr;
            if (file.listed_regular) {
                st.stx_mode = S_IFREG;
            } else {
                io_uring_sqe* stat = ring.get_sqe(2 + more);
                io_uring_prep_statx(stat, file.dirfd(), file.path.c_str(), 0, STATX_TYPE, &st);
                io_uring_sqe_set_data64(stat, tagged(this, 0));
            }
            io_uring_sqe* open = ring.get_sqe(1 + more);
            how = how_to_open(file); // direct descriptors take no O_CLOEXEC
            io_uring_prep_openat2_direct(open, file.dirfd(), file.path.c_str(), &how, static_cast<unsigned>(slot_id));
            io_uring_sqe_set_data64(open, tagged(this, 1));
            return open;
        }

        buffer buf; // the kernel writes here: owned until the last CQE, even once abandoned
        read_handler handler;
        int slot_id = -1;
        open_how how{};
        struct statx st {};
    };

    struct stat_op final : base_op {
        stat_op(impl& r, file_ref f, std::uint64_t g, size_handler h) : base_op(r, std::move(f), g), handler(std::move(h)) {}
        ~stat_op() override { forget_slot(handler); }
        bool prepare() override
        {
            io_uring_sqe* sqe = ring.get_sqe(1);
            io_uring_prep_statx(sqe, file.dirfd(), file.path.c_str(), 0, STATX_TYPE | STATX_SIZE, &st);
            io_uring_sqe_set_data64(sqe, tagged(this, 0));
            pending = 1;
            return true;
        }
        void on_cqe(unsigned, int r) override { res = r; }
        void cancel_in_kernel(std::error_code) override { ring.cancel_sqe(this, 0); }
        void deliver_error(std::error_code ec, bool post) override { deliver(handler, post, ec, std::uint64_t{0}); }
        asio::cancellation_slot slot() override { return handler.get_cancellation_slot(); }
        void finish() override
        {
            if (res < 0) return deliver_error(errno_code(res), false);
            if (!S_ISREG(st.stx_mode)) return deliver_error(make_error_code(errc::not_a_regular_file), false);
            deliver(handler, false, std::error_code{}, static_cast<std::uint64_t>(st.stx_size));
        }
        size_handler handler;
        struct statx st {};
        int res = 0;
    };

    // statx (tag 0) → openat2 (1) → read (2) → close (3), linked. The read is hard-linked
    // to the close, so the close runs even if the read fails.
    //
    // A file the listing found regular, of `expect` bytes, first goes without the statx:
    // openat2 → read with RWF_NOWAIT → close. That read completes inside the submit when the
    // file is in the page cache, and never waits: not for the disk (-EAGAIN, or fewer bytes),
    // not for a FIFO's writer, nor is a device read as a file. Only a read of exactly
    // `expect` bytes up to the end is taken; anything else (a cold file, a file that grew or
    // shrank, something else in its place, a failed open) is read again the careful way, with
    // the statx, which also names what went wrong. On warm files this saves the statx's trip
    // through an io-wq worker (a thread wake-up per file); on cold ones it costs an open and
    // close more, against the disk's latency.
    //
    // The buffer holds the size the caller expects plus one byte (a file that grew fills
    // it). A careful read that stops short of that size without failing is continued from
    // where it stopped, by the same chain again (`filled`: the bytes already read): the
    // kernel may return fewer bytes than asked before the end of a regular file (a signal,
    // a network or FUSE file system). Only a read of 0 bytes is the end of the file, and a
    // file that ends before the size expected is the caller's to report (it shrank).
    struct small_read_op final : read_op {
        small_read_op(impl& r, file_ref f, buffer b, std::uint64_t g, read_handler h, std::size_t already = 0)
            : read_op(r, std::move(f), std::move(b), g, std::move(h)), filled(already)
        {
            // An empty file gives no read to tell a device or FIFO from it: the careful way.
            fast = file.listed_regular && buf.size() > 1 && filled == 0;
            file.listed_regular = fast;
        }
        bool prepare() override
        {
            io_uring_sqe* open = prepare_open(2);
            if (!open) return false;
            open->flags |= IOSQE_IO_LINK;
            io_uring_sqe* read = ring.get_sqe(2);
            io_uring_prep_read(read, slot_id, buf.data() + filled, static_cast<unsigned>(capped_read(buf.size() - filled)), filled);
            if (fast) read->rw_flags = RWF_NOWAIT;
            read->flags |= IOSQE_FIXED_FILE | IOSQE_IO_HARDLINK;
            io_uring_sqe_set_data64(read, tagged(this, 2));
            io_uring_sqe* close = ring.get_sqe(1);
            io_uring_prep_close_direct(close, static_cast<unsigned>(slot_id));
            io_uring_sqe_set_data64(close, tagged(this, 3));
            pending = 4;
            if (fast) {
                done[0] = true;
                pending = 3;
            }
            return true;
        }
        bool special() const { return done[0] && res[0] >= 0 && !S_ISREG(st.stx_mode); }
        void on_cqe(unsigned tag, int r) override
        {
            res[tag] = r;
            done[tag] = true;
            // A FIFO or device: its read may wait forever for data. The read starts once the
            // open is done, so cancel it then too (the first cancel may come before it).
            if ((tag == 0 || tag == 1) && special() && !done[2]) ring.cancel_sqe(this, 2);
        }
        void cancel_in_kernel(std::error_code) override
        {
            // Not the close: it must run, or the slot would stay open.
            for (unsigned tag = 0; tag < 3; ++tag)
                if (!done[tag]) ring.cancel_sqe(this, tag);
        }
        void finish() override
        {
            // A failed open cancels the rest of the chain, close included.
            if (res[3] == -ECANCELED && res[1] >= 0) ring.close_slot_alone(slot_id);
            else ring.release_slot(slot_id);
            if (fast && !(res[1] >= 0 && static_cast<std::uint64_t>(res[2]) == buf.size() - 1)) {
                // Not the whole file as listed, without waiting: again, the careful way. An
                // abandoned read (its handler already called) just ends.
                if (delivered) return;
                file.listed_regular = false;
                ring.launch(new small_read_op(ring, std::move(file), std::move(buf), group, std::move(handler)), here);
                return;
            }
            if (res[0] < 0) return complete(errno_code(res[0]), 0);
            if (special()) return complete(make_error_code(errc::not_a_regular_file), 0);
            if (res[1] < 0) return complete(open_error(res[1], file), 0);
            if (res[2] < 0) return complete(errno_code(res[2]), 0);
            const std::size_t got = filled + static_cast<std::size_t>(res[2]);
            if (res[2] > 0 && got + 1 < buf.size()) {
                // A short read, not the end: the rest, unless the read was abandoned.
                if (delivered) return;
                ring.launch(new small_read_op(ring, std::move(file), std::move(buf), group, std::move(handler), got), here);
                return;
            }
            complete({}, got);
        }
        bool fast = false;
        std::size_t filled = 0; // bytes read by earlier passes (a continued short read)
        int res[4] = {0, 0, 0, 0};
        bool done[4] = {false, false, false, false};
    };

    // statx (tag 0) → openat2 (1), linked; then up to `parallel` chunk reads at a time, each
    // an op of its own that reports here; then close (2). This op holds one pending count
    // from the open's success until its close completes, so it outlives its chunk reads.
    struct large_read_op final : read_op {
        large_read_op(impl& r, file_ref f, buffer b, std::uint32_t c, unsigned par, std::uint64_t g, read_handler h)
            : read_op(r, std::move(f), std::move(b), g, std::move(h)), len(buf.size()), chunk(c), parallel(par)
        {
            file.listed_regular = false; // always with the statx: one more CQE per large file is nothing
        }

        struct chunk_read final : uring_op {
            chunk_read(large_read_op& p, std::uint64_t off, std::uint32_t n) : parent(p), offset(off), length(n)
            {
                group = p.group;
                owner = &p;
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
            if (!prepare_open(0)) return false;
            pending = 2;
            return true;
        }

        void on_cqe(unsigned tag, int r) override
        {
            if (tag == 0) { // the statx
                stat_res = r;
                stat_done = true;
                if (opened) begin();
            } else if (tag == 1) { // the open
                if (r < 0) { // -ECANCELED when the statx failed: finish() says why
                    if (!err) err = open_error(r, file);
                    ring.release_slot(slot_id);
                    return;
                }
                opened = true;
                ++pending; // held until the close completes
                if (stat_done) begin();
            } else { // the close
                if (r == -ECANCELED) ring.close_slot_alone(slot_id);
                else ring.release_slot(slot_id);
            }
        }

        // Both the statx and the open are in: read, or close at once if this is no regular file.
        void begin()
        {
            if (!err && stat_res < 0) err = errno_code(stat_res);
            if (!err && !S_ISREG(st.stx_mode)) err = make_error_code(errc::not_a_regular_file);
            refill();
        }

        void chunk_done(std::uint64_t offset, std::uint32_t length, int r)
        {
            --reading;
            if (r < 0) {
                if (!err) err = errno_code(r);
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
                io_uring_prep_close_direct(close, static_cast<unsigned>(slot_id));
                io_uring_sqe_set_data64(close, tagged(this, 2));
                ring.schedule_flush();
            }
        }

        void issue(std::uint64_t offset, std::uint32_t n)
        {
            auto* c = new chunk_read(*this, offset, n);
            io_uring_sqe* sqe = ring.get_sqe(1);
            io_uring_prep_read(sqe, slot_id, buf.data() + offset, static_cast<unsigned>(capped_read(n)), offset);
            sqe->flags |= IOSQE_FIXED_FILE;
            io_uring_sqe_set_data64(sqe, tagged(c, 0));
            c->started = true;
            ring.link(c);
            ++reading;
            ring.schedule_flush();
        }

        void cancel_in_kernel(std::error_code why) override
        {
            if (!err) err = why; // no further chunks; the close follows the last one in flight
            if (!stat_done) ring.cancel_sqe(this, 0);
            if (!opened) ring.cancel_sqe(this, 1);
            for (auto* op = ring.head_; op; op = op->next)
                if (op->owner == this) ring.cancel_sqe(op, 0);
        }

        void finish() override
        {
            // The statx's failure is the cause, whichever of its CQE and the cancelled
            // open's arrived first.
            if (stat_done && stat_res < 0) return complete(errno_code(stat_res), 0);
            if (err) return complete(err, 0);
            complete({}, done_bytes);
        }

        std::uint64_t len;
        std::uint32_t chunk;
        unsigned parallel;
        int stat_res = 0;
        bool stat_done = false;
        bool opened = false;
        std::error_code err;
        std::uint64_t next_offset = 0;
        std::uint64_t done_bytes = 0;
        unsigned reading = 0;
        bool eof = false;
        bool closing = false;
    };

    // A read at an offset of a file open with an ordinary descriptor (tag 0). A partial
    // read asks again for the rest, from the CQE: the op stays in flight until the buffer
    // is full, the file ends, or it fails. The file and buffer are owned until the last CQE.
    struct read_at_op final : read_op {
        read_at_op(impl& r, std::shared_ptr<const open_file> f, buffer b, std::uint64_t off, std::uint64_t g,
                   read_handler h)
            : read_op(r, file_ref{}, std::move(b), g, std::move(h)), fd(std::move(f)), offset(off)
        {
        }
        bool prepare() override
        {
            issue();
            return true;
        }
        void issue()
        {
            io_uring_sqe* sqe = ring.get_sqe(1);
            const auto want = static_cast<unsigned>(capped_read(std::min<std::size_t>(buf.size() - filled, 1u << 30)));
            io_uring_prep_read(sqe, fd->fd(), buf.data() + filled, want, offset + filled);
            io_uring_sqe_set_data64(sqe, tagged(this, 0));
            ++pending;
            ring.schedule_flush();
        }
        void on_cqe(unsigned, int r) override
        {
            if (r < 0) {
                res = r;
                return;
            }
            filled += static_cast<std::size_t>(r);
            if (r > 0 && filled < buf.size() && !cancelled && !ring.stopping_) issue(); // partial: the rest
        }
        void cancel_in_kernel(std::error_code) override
        {
            cancelled = true;
            ring.cancel_sqe(this, 0);
        }
        void finish() override
        {
            if (res < 0) return complete(errno_code(res), 0);
            complete({}, filled);
        }
        std::shared_ptr<const open_file> fd;
        std::uint64_t offset;
        std::size_t filled = 0;
        int res = 0;
        bool cancelled = false;
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
            // What is still in the kernel now (a read on a mount that never answers) keeps its
            // memory: freeing buffers the kernel may still write to would be worse than a leak.
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
    std::uint64_t next_serial_ = 0;                          // see base_op::listen_for_cancellation
    std::vector<int> free_slots_;
    struct reaped {
        std::uint64_t user_data;
        int res;
    };
    std::vector<reaped> spare_batch_; // reap_ring's storage, kept between calls
    std::deque<uring_op*> backlog_;
    uring_op* head_ = nullptr;
    std::size_t in_flight_ = 0;
};

CONVEYOR_DECL uring::uring(asio::io_context& ctx, uring_options opts) : impl_(std::make_unique<impl>(ctx, opts)) {}

CONVEYOR_DECL uring::~uring() = default;

CONVEYOR_DECL bool uring::available() const noexcept
{
    return impl_->available_;
}

CONVEYOR_DECL const std::string& uring::unavailable_reason() const noexcept
{
    return impl_->reason_;
}

CONVEYOR_DECL asio::io_context& uring::context() noexcept
{
    return impl_->ctx_;
}

CONVEYOR_DECL std::size_t uring::in_flight() const noexcept
{
    return impl_->in_flight_ + impl_->backlog_.size();
}

CONVEYOR_DECL void uring::cancel_group(std::uint64_t group)
{
    impl_->cancel_group(group);
}

CONVEYOR_DECL void uring::start_file_size(file_ref f, std::uint64_t group, size_handler h, bool here)
{
    impl_->launch(new impl::stat_op(*impl_, std::move(f), group, std::move(h)), here);
}

CONVEYOR_DECL void uring::start_read_small(file_ref f, buffer buf, std::uint64_t group, read_handler h, bool here)
{
    impl_->launch(new impl::small_read_op(*impl_, std::move(f), std::move(buf), group, std::move(h)), here);
}

CONVEYOR_DECL void uring::start_read_large(file_ref f, buffer buf, std::uint32_t chunk, unsigned parallel,
                                           std::uint64_t group, read_handler h, bool here)
{
    impl_->launch(new impl::large_read_op(*impl_, std::move(f), std::move(buf), std::max<std::uint32_t>(chunk, 4096),
                                          std::max(parallel, 1u), group, std::move(h)),
                  here);
}

CONVEYOR_DECL void uring::start_read_at(std::shared_ptr<const open_file> f, buffer buf, std::uint64_t offset,
                                        std::uint64_t group, read_handler h, bool here)
{
    if (buf.empty()) { // nothing to read: no SQE (a 0-byte read would look like end of file)
        auto ex = asio::get_associated_executor(h, impl_->ctx_.get_executor());
        asio::post(impl_->ctx_, asio::bind_executor(ex, [h = std::move(h), b = std::move(buf)]() mutable {
            std::move(h)(std::error_code{}, std::move(b));
        }));
        return;
    }
    impl_->launch(new impl::read_at_op(*impl_, std::move(f), std::move(buf), offset, group, std::move(h)), here);
}

CONVEYOR_DECL uring& uring_service::get(asio::io_context& ctx, const uring_options& opts)
{
    std::call_once(once_, [&] { ring_ = std::make_unique<uring>(ctx, opts); });
    return *ring_;
}

CONVEYOR_DECL void uring_service::shutdown()
{
    ring_.reset();
}

} // namespace conveyor::file::detail

#endif
