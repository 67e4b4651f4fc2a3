// conveyor/store/impl/objects.ipp — the object source's reader.
#ifndef CONVEYOR_STORE_IMPL_OBJECTS_IPP
#define CONVEYOR_STORE_IMPL_OBJECTS_IPP

#include <conveyor/store/objects.hpp>

#include <conveyor/core/error.hpp>
#include <conveyor/core/location.hpp>
#include <conveyor/core/run_context.hpp>
#include <conveyor/core/source.hpp>

#include <system_error>
#include <utility>

namespace conveyor::store {
namespace detail {

CONVEYOR_DECL std::string object_name(const location& where)
{
    if (where.is_s3()) return where.key();
    if (where.is_local()) return where.path();
    std::string_view t = where.target();
    t = t.substr(0, t.find('?'));
    if (t.starts_with('/')) t.remove_prefix(1);
    return std::string(t);
}

CONVEYOR_DECL void check_labels(std::size_t labels, std::size_t count, std::string_view stage, std::string_view where)
{
    if (labels == 0 || labels == count) return;
    throw conveyor::error(std::make_error_code(std::errc::invalid_argument),
                          {.stage = std::string(stage), .where = std::string(where),
                           .detail = "the object list has " + std::to_string(labels) + " labels for " + std::to_string(count) +
                                     " objects"});
}

CONVEYOR_DECL asio::awaitable<blob> read_object_blob(std::shared_ptr<const store> st, location where, std::int64_t size_hint, blob b)
{
    slice bytes = co_await st->async_read(std::move(where), size_hint);
    b.data = std::move(bytes).into_buffer(); // no copy: a store's whole read owns its buffer
    co_return b;
}

/// The object source's reader of one run (named types, not closures: they end up in
/// coroutine frames of functions compiled once, where closures would have no linkage).
struct list_reader {
    std::shared_ptr<const context> ctx;
    std::shared_ptr<const object_list> list;
    asio::awaitable<blob> operator()(std::uint64_t i) const
    {
        const listed_object& obj = list->objects[i];
        location where(obj.url);
        const std::int64_t label = i < list->labels.size() ? list->labels[i] : -1;
        blob b{object_name(where), buffer{}, where.printable(), label, i};
        auto st = ctx->store_for(where); // throws naming the URL: the item's error, under the policy
        return read_object_blob(std::move(st), std::move(where), obj.size, std::move(b));
    }
};

/// Makes each run's reader: over the given context, or one of the run's own on its runtime.
struct open_list_reader {
    std::shared_ptr<const context> ctx;
    std::shared_ptr<const object_list> list;
    std::optional<cache_options> cache;
    list_reader operator()(run_context& run) const
    {
        return {ctx ? ctx : make_context({.rt = &run.rt(), .cache = cache}), list};
    }
};

} // namespace detail

CONVEYOR_DECL pipeline<blob> objects(std::shared_ptr<const object_list> list, objects_options o)
{
    if (!list) list = std::make_shared<const object_list>();
    detail::check_labels(list->labels.size(), list->objects.size(), "objects",
                         list->objects.empty() ? std::string() : location(list->objects.front().url).printable());
    source_settings<blob> s{.concurrency = o.concurrency, .ordered = o.ordered, .errors = o.errors, .capacity = o.capacity,
                            .on_read = std::move(o.on_read), .epochs = std::move(o.epochs)};
    const std::uint64_t count = list->size();
    // With a context on a runtime of its own, its I/O threads read (the web clients' pools
    // live there); otherwise the run's.
    runtime* io = o.store && o.store->options().rt ? o.store->options().rt : nullptr;
    return keyed_source<blob>("objects", count, std::move(s), detail::open_list_reader{std::move(o.store), std::move(list), std::move(o.cache)}, io);
}

CONVEYOR_DECL pipeline<blob> objects(object_list list, objects_options o)
{
    return objects(std::make_shared<const object_list>(std::move(list)), std::move(o));
}

CONVEYOR_DECL pipeline<blob> objects(const std::vector<std::string>& urls, objects_options o)
{
    return objects(object_list::from_urls(urls), std::move(o));
}

} // namespace conveyor::store

#endif
