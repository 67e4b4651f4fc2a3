// conveyor/s3/impl/client.hpp — the templates of conveyor/s3/client.hpp.
#ifndef CONVEYOR_S3_IMPL_CLIENT_HPP
#define CONVEYOR_S3_IMPL_CLIENT_HPP

namespace conveyor::s3 {

template <class T>
T client::run(asio::awaitable<T> a) const
{
    // Not `use_future` nor a std::promise: both leave a reference to an exception on the
    // I/O thread, released there while the caller reads the exception (a race that
    // ThreadSanitizer reports, as libstdc++'s reference count is invisible to it). Here
    // the exception is moved across under a mutex and released by the caller.
    // Blocking one of the runtime's I/O threads on work that may need that very thread
    // would hang: refuse instead.
    if (on_lane())
        throw conveyor::error(std::make_error_code(std::errc::operation_not_permitted),
                              {.stage = "s3", .detail = "client::run (or a blocking S3 call built on it) was called on one of the "
                                                        "runtime's I/O threads; co_await the operation there instead"});
    handoff<T> h;
    asio::co_spawn(next_io_executor(), fulfil(std::move(a), h), asio::detached);
    std::unique_lock lk(h.mu);
    h.cv.wait(lk, [&] { return h.ready; });
    if (h.failed) std::rethrow_exception(std::move(h.failed));
    return std::move(*h.value);
}

template <class T>
asio::awaitable<void> client::fulfil(asio::awaitable<T> a, handoff<T>& h)
{
    std::optional<T> value;
    std::exception_ptr failed;
    try {
        value.emplace(co_await std::move(a));
    } catch (...) {
        failed = std::current_exception();
    }
    std::lock_guard lk(h.mu);
    h.value = std::move(value);
    h.failed = std::move(failed);
    h.ready = true;
    h.cv.notify_one();
}

} // namespace conveyor::s3

#endif
