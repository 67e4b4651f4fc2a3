// conveyor/store/impl/http.ipp — the store of http(s):// resources.
#ifndef CONVEYOR_STORE_IMPL_HTTP_IPP
#define CONVEYOR_STORE_IMPL_HTTP_IPP

#include <conveyor/core/error.hpp>
#include <conveyor/http/chunks.hpp>
#include <conveyor/http/client.hpp>
#include <conveyor/http/endpoint.hpp>
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

/// A web resource named for ranged reads (each one a ranged GET on its server's client).
class http_object final : public ranged_object {
public:
    http_object(runtime& rt, std::shared_ptr<http::client> c, std::string target)
        : rt_(rt), c_(std::move(c)), target_(std::move(target))
    {
    }
    asio::awaitable<slice> async_read(std::uint64_t offset, std::uint64_t length) const override
    {
        if (length == 0) co_return slice{};
        // One ranged GET, its body in one chunk.
        chunk_options co{.chunk_size = static_cast<std::size_t>(length), .chunks_in_flight = 1, .offset = offset, .length = length};
        co_return co_await gather(rt_, http::read_chunks(c_, target_, co));
    }

private:
    runtime& rt_;
    std::shared_ptr<http::client> c_;
    std::string target_;
};

} // namespace detail

CONVEYOR_DECL runtime& http_store::rt() const
{
    return rt_ ? *rt_ : runtime::shared();
}

CONVEYOR_DECL std::shared_ptr<http::client> http_store::client_for(const location& where) const
{
    const http::endpoint ep = http::endpoint_of(where); // refuses what cannot connect (user-info)
    std::lock_guard lk(mu_);
    auto& c = clients_[ep.url()];
    if (!c) c = std::make_shared<http::client>(rt(), ep, o_);
    return c;
}

CONVEYOR_DECL asio::awaitable<slice> http_store::async_read(location where, std::int64_t) const
{
    co_return co_await detail::gather(rt(), read_chunks(where, {}));
}

CONVEYOR_DECL asio::awaitable<std::shared_ptr<const ranged_object>> http_store::async_open(location where) const
{
    co_return std::make_shared<detail::http_object>(rt(), client_for(where), where.target());
}

CONVEYOR_DECL std::unique_ptr<chunk_reader> http_store::read_chunks(const location& where, const chunk_options& o) const
{
    return http::read_chunks(client_for(where), where.target(), o);
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
