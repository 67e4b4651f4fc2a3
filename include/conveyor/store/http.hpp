// conveyor/store/http.hpp — the store of http(s):// resources, over the http module.
#ifndef CONVEYOR_STORE_HTTP_HPP
#define CONVEYOR_STORE_HTTP_HPP

#include <conveyor/detail/config.hpp>
#include <conveyor/http/options.hpp>
#include <conveyor/store/store.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace conveyor::http {
class client;
} // namespace conveyor::http

namespace conveyor::store {

/** Resources on web servers, read with plain GETs (ranged for `async_read_range` and
    offsets), streamed (`http::read_chunks`), through one `http::client` per server
    (scheme, host and port), made with the store's options at its first read and kept
    while the store lives: its keep-alive connections serve the reads that follow (a
    dataset's many small ranged reads of one shard cost no new connection each). A web server
    offers no listing and no upload: `list` and `open_writer` throw
    `conveyor::error` (`std::errc::operation_not_supported`) naming the location. */
class http_store final : public store {
public:
    /// A store reading on `rt`'s I/O threads (null: `runtime::shared()`) with clients made
    /// with `o`, one per server.
    http_store(runtime* rt, http::client_options o) : rt_(rt), o_(std::move(o)) {}

    CONVEYOR_DECL runtime& rt() const override;
    bool remote() const noexcept override { return true; }
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<slice> async_read(location where, std::int64_t size_hint = -1) const override;
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<std::shared_ptr<const ranged_object>> async_open(location where) const override;
    CONVEYOR_DECL std::unique_ptr<chunk_reader> read_chunks(const location& where, const chunk_options& o) const override;
    CONVEYOR_DECL std::vector<listed_object> list(const location& where) const override;
    CONVEYOR_DECL std::unique_ptr<object_writer> open_writer(const location& where, const write_options& o) const override;

    /// The client for `where`'s server (made at the first read of that server).
    CONVEYOR_DECL std::shared_ptr<http::client> client_for(const location& where) const;

private:
    runtime* rt_;
    http::client_options o_;
    mutable std::mutex mu_;
    mutable std::map<std::string, std::shared_ptr<http::client>> clients_; // by `endpoint::url()`
};

} // namespace conveyor::store

#if CONVEYOR_HEADER_ONLY
#include <conveyor/store/impl/http.ipp>
#endif

#endif
