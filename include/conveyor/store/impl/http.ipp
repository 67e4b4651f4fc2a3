// conveyor/store/impl/http.ipp — the store of http(s):// resources.
#ifndef CONVEYOR_STORE_IMPL_HTTP_IPP
#define CONVEYOR_STORE_IMPL_HTTP_IPP

#include <conveyor/core/error.hpp>
#include <conveyor/http/chunks.hpp>
#include <conveyor/store/http.hpp>

#include <algorithm>
#include <cstring>
#include <system_error>
#include <vector>

namespace conveyor::store {
namespace detail {

[[noreturn]] inline void http_unsupported(const location& where, const char* what)
{
    throw conveyor::error(std::make_error_code(std::errc::operation_not_supported),
                          {.stage = "store", .where = where.printable(), .detail = std::string("a web server offers no ") + what});
}

/// Every chunk of `reader` in one slice (the first chunk itself when it is the only one).
inline asio::awaitable<slice> gather(runtime& rt, std::unique_ptr<chunk_reader> reader)
{
    std::vector<slice> parts;
    std::size_t total = 0;
    while (auto c = co_await reader->async_next()) {
        total += c->bytes.size();
        parts.push_back(std::move(c->bytes));
    }
    if (parts.size() == 1) co_return std::move(parts.front());
    buffer all = rt.buffers().acquire(total);
    all.resize(total);
    std::size_t at = 0;
    for (const auto& p : parts) {
        if (p.size()) std::memcpy(all.data() + at, p.data(), p.size());
        at += p.size();
    }
    co_return slice(std::move(all));
}

/// A web resource named for ranged reads (each one a ranged GET on a client of its own).
class http_object final : public ranged_object {
public:
    http_object(runtime& rt, location where, http::client_options o) : rt_(rt), where_(std::move(where)), o_(std::move(o)) {}
    asio::awaitable<slice> async_read(std::uint64_t offset, std::uint64_t length) const override
    {
        if (length == 0) co_return slice{};
        // One ranged GET, its body in one chunk.
        chunk_options co{.chunk_size = static_cast<std::size_t>(length), .chunks_in_flight = 1, .offset = offset, .length = length};
        co_return co_await gather(rt_, http::read_chunks(rt_, where_, co, o_));
    }

private:
    runtime& rt_;
    location where_;
    http::client_options o_;
};

} // namespace detail

CONVEYOR_DECL runtime& http_store::rt() const
{
    return rt_ ? *rt_ : runtime::shared();
}

CONVEYOR_DECL asio::awaitable<slice> http_store::async_read(location where) const
{
    co_return co_await detail::gather(rt(), http::read_chunks(rt(), where, {}, o_));
}

CONVEYOR_DECL asio::awaitable<std::shared_ptr<const ranged_object>> http_store::async_open(location where) const
{
    co_return std::make_shared<detail::http_object>(rt(), std::move(where), o_);
}

CONVEYOR_DECL std::unique_ptr<chunk_reader> http_store::read_chunks(const location& where, const chunk_options& o) const
{
    return http::read_chunks(rt(), where, o, o_);
}

CONVEYOR_DECL std::vector<listed_object> http_store::list(const location& where) const
{
    detail::http_unsupported(where, "listing");
}

CONVEYOR_DECL std::unique_ptr<object_writer> http_store::open_writer(const location& where, const write_options&) const
{
    detail::http_unsupported(where, "upload");
}

} // namespace conveyor::store

#endif
