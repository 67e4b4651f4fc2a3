// conveyor/store/impl/context.ipp — the one place that maps a location to its store. Adding
// a store: its file beside file.hpp, and one line in `kinds` below.
#ifndef CONVEYOR_STORE_IMPL_CONTEXT_IPP
#define CONVEYOR_STORE_IMPL_CONTEXT_IPP

#include <conveyor/core/error.hpp>
#include <conveyor/store/cache.hpp>
#include <conveyor/store/context.hpp>
#include <conveyor/store/file.hpp>
#include <conveyor/store/http.hpp>
#include <conveyor/store/s3.hpp>

#include <system_error>

namespace conveyor::store {
namespace detail {

/// How one kind of location is served.
struct kind_entry {
    location_kind kind;
    bool remote;
    std::shared_ptr<const store> (*make)(const location& where, const store_options& o);
};

inline std::shared_ptr<const store> make_file(const location&, const store_options& o)
{
    return std::make_shared<file_store>(o.rt);
}

inline std::shared_ptr<const store> make_s3(const location& where, const store_options& o)
{
    if (!o.s3)
        throw conveyor::error(std::make_error_code(std::errc::invalid_argument),
                              {.stage = "store", .where = where.printable(),
                               .detail = "reading or writing s3:// locations needs an S3 client: give one in the options of "
                                         "what reads it (their `s3`) or in its store context (`store_options::s3`)"});
    return std::make_shared<s3_store>(*o.s3);
}

inline std::shared_ptr<const store> make_http(const location&, const store_options& o)
{
    return std::make_shared<http_store>(o.rt, o.http);
}

inline constexpr kind_entry kinds[] = {
    {location_kind::local, false, &make_file},
    {location_kind::s3, true, &make_s3},
    {location_kind::http, true, &make_http},
};

inline const kind_entry& entry_of(location_kind k) noexcept
{
    for (const auto& e : kinds)
        if (e.kind == k) return e;
    return kinds[0]; // unreachable: every kind has its entry
}

} // namespace detail

CONVEYOR_DECL context::context(store_options o) : o_(std::move(o)) {}

CONVEYOR_DECL runtime& context::rt() const
{
    return o_.rt ? *o_.rt : runtime::shared();
}

CONVEYOR_DECL std::shared_ptr<const store> context::store_for(const location& where) const
{
    const auto slot = static_cast<std::size_t>(where.kind());
    {
        std::lock_guard lk(mu_);
        if (stores_[slot]) return stores_[slot];
    }
    const auto& e = detail::entry_of(where.kind());
    std::shared_ptr<const store> st = e.make(where, o_); // outside the lock: may throw, may take a while
    if (o_.cache && e.remote) st = std::make_shared<cached_store>(std::move(st), *o_.cache);
    std::lock_guard lk(mu_);
    if (!stores_[slot]) stores_[slot] = std::move(st); // two first reads at once: the first one made wins
    return stores_[slot];
}

CONVEYOR_DECL bool is_remote(const location& where) noexcept
{
    return detail::entry_of(where.kind()).remote;
}

} // namespace conveyor::store

#endif
