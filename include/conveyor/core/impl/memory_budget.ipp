// conveyor/core/impl/memory_budget.ipp — the memory budget: leases, a FIFO of waiters.
#ifndef CONVEYOR_CORE_IMPL_MEMORY_BUDGET_IPP
#define CONVEYOR_CORE_IMPL_MEMORY_BUDGET_IPP

#include <conveyor/core/memory_budget.hpp>

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/post.hpp>

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <list>
#include <mutex>
#include <string>
#include <vector>

namespace conveyor {

namespace detail {

struct budget_state : std::enable_shared_from_this<budget_state> {
    struct waiter {
        std::uint64_t id;
        std::size_t bytes;
        asio::any_io_executor ex;
        asio::any_completion_handler<void(std::error_code, memory_lease)> h;
    };
    /// A waiter taken out of the queue with what to complete it with.
    struct outcome {
        waiter w;
        std::error_code ec;
        std::size_t granted = 0; // bytes of the lease (0 when cancelled)
    };

    explicit budget_state(std::size_t l) : limit(std::max<std::size_t>(l, 1)) {}

    // Whether `bytes` fit now. Called with `mu` held.
    bool fits(std::size_t bytes) const noexcept
    {
        if (limit == memory_budget::unlimited) return true;
        if (in_use == 0) return true; // alone: also a request larger than the whole budget
        return bytes <= limit && in_use <= limit - bytes;
    }

    // Leases `bytes`. Called with `mu` held.
    void take(std::size_t bytes) noexcept
    {
        if (limit != memory_budget::unlimited && bytes > limit) ++oversize;
        in_use += bytes;
        peak = std::max(peak, in_use);
        ++acquires;
    }

    // Moves the waiters at the front that fit now into `out`. Called with `mu` held.
    void grant_front(std::vector<outcome>& out)
    {
        while (!queue.empty() && fits(queue.front().bytes)) {
            take(queue.front().bytes);
            const std::size_t n = queue.front().bytes;
            out.push_back({std::move(queue.front()), {}, n});
            queue.pop_front();
        }
    }

    // Completes each on its executor, never inline (a release may run anywhere: inside a
    // lease's destructor, under a caller's lock).
    void complete(std::vector<outcome>& done)
    {
        for (auto& o : done) {
            memory_lease lease = o.granted ? make_lease(o.granted) : memory_lease{};
            auto ex = o.w.ex;
            asio::post(ex, [h = std::move(o.w.h), ec = o.ec, lease = std::move(lease)]() mutable {
                auto s = asio::get_associated_cancellation_slot(h);
                if (s.is_connected()) s.clear();
                std::move(h)(ec, std::move(lease));
            });
        }
    }

    memory_lease make_lease(std::size_t n) { return memory_lease(shared_from_this(), n); }

    void release(std::size_t bytes) noexcept
    {
        std::vector<outcome> done;
        {
            std::lock_guard lk(mu);
            in_use -= std::min(bytes, in_use);
            try {
                grant_front(done);
            } catch (...) { // out of memory for the list: the next release tries again
            }
        }
        try {
            complete(done);
        } catch (...) {
        }
    }

    void cancel(std::uint64_t id)
    {
        std::vector<outcome> done;
        {
            std::lock_guard lk(mu);
            auto it = std::find_if(queue.begin(), queue.end(), [id](const waiter& w) { return w.id == id; });
            if (it == queue.end()) return; // granted already: its completion is on its way
            done.push_back({std::move(*it), std::make_error_code(std::errc::operation_canceled), 0});
            queue.erase(it);
            grant_front(done); // a large waiter at the front may have held the others back
        }
        complete(done);
    }

    mutable std::mutex mu;
    const std::size_t limit;
    std::size_t in_use = 0;
    std::size_t peak = 0;
    std::uint64_t acquires = 0;
    std::uint64_t waits = 0;
    std::uint64_t oversize = 0;
    std::uint64_t next_id = 0;
    std::list<waiter> queue;
};

} // namespace detail

CONVEYOR_DECL void memory_lease::release() noexcept
{
    if (!state_) return;
    auto s = std::move(state_);
    s->release(std::exchange(bytes_, 0));
}

CONVEYOR_DECL memory_budget::memory_budget(std::size_t limit) : state_(std::make_shared<detail::budget_state>(limit)) {}

CONVEYOR_DECL memory_budget::~memory_budget()
{
    // Waiters left behind (a budget destroyed while readers wait, which a runtime never
    // does: its runs end first) are completed as cancelled rather than dropped.
    std::vector<detail::budget_state::outcome> done;
    {
        std::lock_guard lk(state_->mu);
        for (auto& w : state_->queue) done.push_back({std::move(w), std::make_error_code(std::errc::operation_canceled), 0});
        state_->queue.clear();
    }
    state_->complete(done);
}

CONVEYOR_DECL std::size_t memory_budget::default_limit()
{
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    std::uint64_t total = pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page)
                                                : std::uint64_t{4} << 30;
    // A container's limit (cgroup v2), where lower than the machine's memory.
    std::ifstream in("/sys/fs/cgroup/memory.max");
    std::string v;
    if (in >> v && v != "max") {
        try {
            const std::uint64_t cg = std::stoull(v);
            if (cg > 0) total = std::min(total, cg);
        } catch (...) {
        }
    }
    const std::uint64_t quarter = std::max<std::uint64_t>(total / 4, std::uint64_t{256} << 20);
    return static_cast<std::size_t>(std::min<std::uint64_t>(quarter, unlimited - 1));
}

CONVEYOR_DECL std::optional<memory_lease> memory_budget::try_acquire(std::size_t bytes)
{
    std::lock_guard lk(state_->mu);
    if (!state_->queue.empty() || !state_->fits(bytes)) return std::nullopt;
    state_->take(bytes);
    return memory_lease(state_, bytes);
}

CONVEYOR_DECL memory_lease memory_budget::acquire_now(std::size_t bytes)
{
    std::lock_guard lk(state_->mu);
    state_->take(bytes);
    return memory_lease(state_, bytes);
}

CONVEYOR_DECL void memory_budget::start_acquire(std::size_t bytes, asio::any_io_executor ex, acquire_handler h)
{
    std::vector<detail::budget_state::outcome> done;
    {
        std::lock_guard lk(state_->mu);
        if (state_->queue.empty() && state_->fits(bytes)) {
            state_->take(bytes);
            done.push_back({{0, bytes, std::move(ex), std::move(h)}, {}, bytes});
        } else {
            const std::uint64_t id = state_->next_id++;
            ++state_->waits;
            auto slot = h.get_cancellation_slot();
            if (slot.is_connected()) {
                // Holds the state weakly: a slot that outlives the budget does nothing.
                std::weak_ptr<detail::budget_state> weak = state_;
                slot.assign([weak, id](asio::cancellation_type_t type) {
                    if (type == asio::cancellation_type::none) return;
                    if (auto s = weak.lock()) s->cancel(id);
                });
            }
            state_->queue.push_back({id, bytes, std::move(ex), std::move(h)});
        }
    }
    state_->complete(done); // posted: never inside the initiating call
}

CONVEYOR_DECL std::size_t memory_budget::limit() const noexcept
{
    return state_->limit;
}

CONVEYOR_DECL std::size_t memory_budget::in_use() const noexcept
{
    std::lock_guard lk(state_->mu);
    return state_->in_use;
}

CONVEYOR_DECL std::size_t memory_budget::peak() const noexcept
{
    std::lock_guard lk(state_->mu);
    return state_->peak;
}

CONVEYOR_DECL std::uint64_t memory_budget::waits() const noexcept
{
    std::lock_guard lk(state_->mu);
    return state_->waits;
}

CONVEYOR_DECL memory_budget_stats memory_budget::stats() const
{
    std::lock_guard lk(state_->mu);
    return {state_->limit, state_->in_use, state_->peak, state_->queue.size(), state_->acquires, state_->waits, state_->oversize};
}

CONVEYOR_DECL slice leased_slice(buffer b, memory_lease lease)
{
    struct leased {
        buffer b;
        memory_lease lease;
    };
    auto h = std::make_shared<leased>(leased{std::move(b), std::move(lease)});
    return slice(std::shared_ptr<const buffer>(h, &h->b));
}

} // namespace conveyor

#endif
