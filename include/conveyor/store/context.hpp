// conveyor/store/context.hpp — what the reads of a pipeline share: the runtime, the S3
// client, the web clients (one per server) and the node cache, given once and handed to
// every source, index reader and writer that takes a store context.
#ifndef CONVEYOR_STORE_CONTEXT_HPP
#define CONVEYOR_STORE_CONTEXT_HPP

#include <conveyor/core/location.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/detail/config.hpp>
#include <conveyor/http/options.hpp>
#include <conveyor/s3/client.hpp>
#include <conveyor/store/store.hpp>

#include <array>
#include <memory>
#include <mutex>
#include <optional>

namespace conveyor::store {

/// What the stores need besides a location: the clients and settings of each kind.
struct store_options {
    /// The runtime whose I/O threads serve local and web reads (S3 reads are served by the
    /// client's). Null: `runtime::shared()`, made when a read first needs it.
    runtime* rt = nullptr;
    /// The client for `s3://` locations (a cheap handle; copies share it). None: reading an
    /// `s3://` location fails, saying that one is needed.
    std::optional<s3::client> s3;
    /// Settings of the web clients (TLS: CA file or folder, verification; timeouts;
    /// connections per server) for `http(s)://` locations.
    http::client_options http{};
    /** A node-local cache for remote locations: with it, the store of an `s3://` or
        `http(s)://` location comes wrapped in a `cached_store` (`store/cache.hpp`). */
    std::optional<cache_options> cache;
};

/** The stores of one set of `store_options`, made once per kind of location at first use
    and kept: so every read through a context shares one S3 client, one web client per
    server (its keep-alive connections reused from read to read) and one cache. Sources
    take a `std::shared_ptr<const context>`; give one to several sources to share them
    all.

    @par Thread Safety
    Safe. */
class context {
public:
    CONVEYOR_DECL explicit context(store_options o = {});

    /** The store serving `where` (see `open_store` for which serves what), the same one for
        every location of its kind.
        @throws conveyor::error naming `where` for an `s3://` location without an S3 client. */
    CONVEYOR_DECL std::shared_ptr<const store> store_for(const location& where) const;

    const store_options& options() const noexcept { return o_; }
    /// The runtime of local and web reads (`store_options::rt`, else `runtime::shared()`).
    CONVEYOR_DECL runtime& rt() const;

private:
    store_options o_;
    mutable std::mutex mu_;
    mutable std::array<std::shared_ptr<const store>, 3> stores_; // by location_kind
};

/// True when the store serving `where` is remote (`store::remote`), known without a client.
CONVEYOR_DECL bool is_remote(const location& where) noexcept;

/// A context over `o`, to share between sources.
inline std::shared_ptr<const context> make_context(store_options o = {})
{
    return std::make_shared<const context>(std::move(o));
}

} // namespace conveyor::store

#if CONVEYOR_HEADER_ONLY
#include <conveyor/store/impl/context.ipp>
#endif

#endif
