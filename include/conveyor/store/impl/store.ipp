// conveyor/store/impl/store.ipp — what every store shares.
#ifndef CONVEYOR_STORE_IMPL_STORE_IPP
#define CONVEYOR_STORE_IMPL_STORE_IPP

#include <conveyor/core/detail/read_file.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/store/store.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include <condition_variable>
#include <exception>
#include <mutex>

namespace conveyor::store {
namespace detail {

/// Where a blocking read waits for its result.
struct read_handoff {
    std::mutex mu;
    std::condition_variable cv;
    bool ready = false;
    slice value;
    std::exception_ptr failed;
};

inline asio::awaitable<void> fulfil(asio::awaitable<slice> a, read_handoff& h)
{
    slice value;
    std::exception_ptr failed;
    try {
        value = co_await std::move(a);
    } catch (...) {
        failed = std::current_exception();
    }
    std::lock_guard lk(h.mu);
    h.value = std::move(value);
    h.failed = std::move(failed);
    h.ready = true;
    h.cv.notify_one();
}

} // namespace detail

CONVEYOR_DECL asio::awaitable<object_version> store::async_version(location) const
{
    co_return object_version{};
}

CONVEYOR_DECL asio::awaitable<slice> store::async_read_range(location where, std::uint64_t offset, std::uint64_t length) const
{
    const auto object = co_await async_open(std::move(where));
    co_return co_await object->async_read(offset, length);
}

CONVEYOR_DECL slice store::run_blocking(const location& where, asio::awaitable<slice> a) const
{
    // Blocking an I/O thread on work that may need that very thread would hang: refuse.
    if (rt().current_io_lane())
        throw conveyor::error(std::make_error_code(std::errc::operation_not_permitted),
                              {.stage = "store", .where = where.printable(),
                               .detail = "a blocking read was called on one of the runtime's I/O threads; co_await async_read there instead"});
    // Not `use_future`: the exception is moved across under a mutex and released by the
    // caller, so no reference to it is left behind on the I/O thread (see s3::client::run).
    detail::read_handoff h;
    asio::co_spawn(rt().next_io_executor(), detail::fulfil(std::move(a), h), asio::detached);
    std::unique_lock lk(h.mu);
    h.cv.wait(lk, [&] { return h.ready; });
    if (h.failed) std::rethrow_exception(std::move(h.failed));
    return std::move(h.value);
}

CONVEYOR_DECL slice store::read(const location& where) const
{
    return run_blocking(where, async_read(where));
}

namespace detail {
[[noreturn]] inline void refuse_too_large(const location& where, std::uint64_t size, std::uint64_t max_bytes, std::string_view limit_name)
{
    throw conveyor::error(std::make_error_code(std::errc::file_too_large),
                          {.stage = "store", .where = where.printable(), .detail = conveyor::detail::over_limit(size, max_bytes, limit_name)});
}
} // namespace detail

CONVEYOR_DECL asio::awaitable<slice> store::async_read_small(location where, std::uint64_t max_bytes, std::string limit_name) const
{
    const object_version v = co_await async_version(where);
    if (v.size >= 0 && static_cast<std::uint64_t>(v.size) > max_bytes)
        detail::refuse_too_large(where, static_cast<std::uint64_t>(v.size), max_bytes, limit_name);
    slice s = co_await async_read(where);
    if (s.size() > max_bytes) detail::refuse_too_large(where, s.size(), max_bytes, limit_name);
    co_return s;
}

CONVEYOR_DECL slice store::read_small(const location& where, std::uint64_t max_bytes, std::string_view limit_name) const
{
    if (!remote()) {
        // A local file: its size is known before a byte is read, and no runtime is needed.
        auto f = conveyor::detail::read_whole_file(where.path(), max_bytes, limit_name);
        if (f.ec) throw conveyor::error(f.ec, {.stage = "store", .where = where.printable(), .detail = "cannot read the file: " + f.why});
        return slice(buffer::copy_of(std::move(f.text)));
    }
    return run_blocking(where, async_read_small(where, max_bytes, std::string(limit_name)));
}

} // namespace conveyor::store

#endif
