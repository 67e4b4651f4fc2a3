// conveyor/store/http.hpp — the store of http(s):// resources, over the http module.
#ifndef CONVEYOR_STORE_HTTP_HPP
#define CONVEYOR_STORE_HTTP_HPP

#include <conveyor/detail/config.hpp>
#include <conveyor/http/options.hpp>
#include <conveyor/store/store.hpp>

namespace conveyor::store {

/** Resources on a web server, read with plain GETs (ranged for `async_read_range` and
    offsets), streamed (`http::read_chunks`), each read on a client of its own made with
    the store's options (its connections closed when the read is done). A web server
    offers no listing and no upload: `list` and `open_writer` throw
    `conveyor::error` (`std::errc::operation_not_supported`) naming the location. */
class http_store final : public store {
public:
    /// A store reading on `rt`'s I/O threads (null: `runtime::shared()`) with clients made
    /// with `o`.
    http_store(runtime* rt, http::client_options o) : rt_(rt), o_(std::move(o)) {}

    CONVEYOR_DECL runtime& rt() const override;
    bool remote() const noexcept override { return true; }
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<slice> async_read(location where) const override;
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<std::shared_ptr<const ranged_object>> async_open(location where) const override;
    CONVEYOR_DECL std::unique_ptr<chunk_reader> read_chunks(const location& where, const chunk_options& o) const override;
    CONVEYOR_DECL std::vector<listed_object> list(const location& where) const override;
    CONVEYOR_DECL std::unique_ptr<object_writer> open_writer(const location& where, const write_options& o) const override;

private:
    runtime* rt_;
    http::client_options o_;
};

} // namespace conveyor::store

#if CONVEYOR_HEADER_ONLY
#include <conveyor/store/impl/http.ipp>
#endif

#endif
