// conveyor/s3/impl/source.ipp — listing in parallel, index files, the S3 source's reader,
// and the dataset.
#ifndef CONVEYOR_S3_IMPL_SOURCE_IPP
#define CONVEYOR_S3_IMPL_SOURCE_IPP

#include <conveyor/s3/source.hpp>

#include <conveyor/core/detail/ascii.hpp>
#include <conveyor/core/detail/read_file.hpp>
#include <conveyor/core/detail/run_all.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/core/location.hpp>
#include <conveyor/core/source.hpp>
#include <conveyor/s3/detail/client_state.hpp>
#include <conveyor/store/objects.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <atomic>
#include <map>
#include <fstream>
#include <sstream>

namespace conveyor::s3 {

namespace detail {

// The list of `keys` in `bucket`, each with `prefix` put before it.
CONVEYOR_DECL object_list prefixed(std::string bucket, std::vector<std::string> keys, std::string_view prefix)
{
    if (!prefix.empty())
        for (auto& k : keys) k.insert(0, prefix);
    return object_list::from_keys(std::move(bucket), keys);
}

// Refuses key `i` of an index (read from or written to `where`) that cannot name an object.
CONVEYOR_DECL void check_index_key(std::size_t i, std::string_view key, std::string_view where)
{
    // The file index's rule (conveyor::detail::index_entry_problem), with S3's limit.
    if (auto why = conveyor::detail::index_entry_problem(key, max_key_bytes); !why.empty())
        throw conveyor::error(std::make_error_code(std::errc::invalid_argument),
                              {.stage = "s3 listing", .where = std::string(where),
                               .detail = conveyor::detail::index_entry_name(i, key) + " " + why});
}

CONVEYOR_DECL std::vector<std::string> parse_index_json(std::string_view text, std::string_view where)
{
    auto fail = [&](std::string why) {
        return conveyor::error(std::make_error_code(std::errc::invalid_argument), {.stage = "s3 listing", .where = std::string(where), .detail = std::move(why)});
    };
    boost::system::error_code ec;
    auto v = boost::json::parse(text, ec);
    if (ec) throw fail("not valid JSON: " + ec.message());
    if (!v.is_array()) throw fail("not a JSON array of keys");
    std::vector<std::string> keys;
    keys.reserve(v.as_array().size());
    std::size_t i = 0;
    for (const auto& e : v.as_array()) {
        if (!e.is_string()) throw fail("entry " + std::to_string(i) + " is not a string");
        check_index_key(i, e.as_string(), where);
        keys.emplace_back(e.as_string());
        ++i;
    }
    return keys;
}

// The text of `l`'s index, every key checked as `parse_index_json` will check it.
CONVEYOR_DECL std::string index_text(const object_list& l, std::string_view where)
{
    std::vector<std::string_view> keys;
    keys.reserve(l.objects.size());
    for (std::size_t i = 0; i < l.objects.size(); ++i) {
        check_index_key(i, l.objects[i].key, where);
        keys.emplace_back(l.objects[i].key);
    }
    return file::detail::index_text(keys);
}

// Stores `text` at `url` (s3://bucket/key) through `c`.
CONVEYOR_DECL void put_text(const client& c, std::string_view url, const std::string& text)
{
    const location u(url, location_kind::s3);
    if (u.key().empty() || u.key().back() == '/')
        throw conveyor::error(std::make_error_code(std::errc::invalid_argument),
                              {.stage = "s3", .where = u.printable(), .detail = "names no object to write (the key is empty or ends in '/')"});
    c.run(c.async_put(u, std::as_bytes(std::span(text.data(), text.size())), "application/json"));
}

/// One of `list_parallel`'s workers: lists the next "directory" not yet taken, until none
/// is left. (A named type: a closure would have no linkage in a frame compiled once.)
struct directory_lister {
    client_state& s;
    const std::string& bucket;
    const std::vector<std::string>& dirs;
    std::vector<std::vector<object_info>>& found;
    std::size_t& next;
    listing_tally* tally;
    asio::awaitable<void> operator()(std::size_t) const
    {
        while (next < dirs.size()) {
            const std::size_t d = next++;
            found[d] = co_await s.list_all(bucket, dirs[d], tally);
        }
    }
};

// Lists a prefix in parallel: first one level with the delimiter '/', then each common
// prefix ("directory") on its own, several at once. Sorted by key, as S3 lists. Every
// page is added to `tally` (all on this coroutine's executor), when given.
CONVEYOR_DECL asio::awaitable<std::vector<object_info>> list_parallel(std::shared_ptr<client_state> s, std::string bucket, std::string prefix,
                                                                unsigned parallel, listing_tally* tally)
{
    std::vector<object_info> all;
    std::vector<std::string> dirs;
    list_options lo{.prefix = prefix, .delimiter = "/"};
    listing_cursor cursor(bucket, prefix);
    for (;;) {
        auto page = co_await s->list(bucket, lo);
        if (tally) tally->add(page);
        for (auto& o : page.objects) all.push_back(std::move(o));
        for (auto& p : page.common_prefixes) dirs.push_back(std::move(p));
        if (!cursor.next(*s, page, lo)) break;
    }
    std::vector<std::vector<object_info>> found(dirs.size());
    std::size_t next = 0;
    const directory_lister worker{*s, bucket, dirs, found, next, tally};
    co_await conveyor::detail::run_all(std::min<std::size_t>(std::max(1u, parallel), dirs.size()), worker);
    for (auto& f : found)
        for (auto& o : f) all.push_back(std::move(o));
    std::sort(all.begin(), all.end(), [](const object_info& a, const object_info& b) { return a.key < b.key; });
    co_return all;
}

/// Object `i` of `list`, whose bytes are `data`, as a blob (key = object key, origin =
/// its URI): what the source and the dataset deliver.
CONVEYOR_DECL blob object_blob(const config& cfg, const object_list& list, std::uint64_t i, buffer data)
{
    const object_info& obj = list.objects[i];
    const std::int64_t label = i < list.labels.size() ? list.labels[i] : -1;
    return blob{obj.key, std::move(data), object_uri(cfg, list.bucket, obj.key), label, i};
}

/// Refuses a store context whose S3 client is not `c` (the reads would sign with other
/// credentials than the caller chose), naming `stage` and the bucket.
CONVEYOR_DECL void check_context(const client& c, const store::context* ctx, const char* stage, const std::string& bucket);

/// The S3 source's reader and what makes it per run (named types, not closures: they end up
/// in coroutine frames of functions compiled once, where closures would have no linkage).
/// Each object is read through the S3 store of the run's store context.
struct object_reader {
    std::shared_ptr<client_state> s;
    std::shared_ptr<const object_list> list;
    std::shared_ptr<const store::store> st; // the context's store of s3:// locations
    std::uint64_t retries_at_open = 0;
    asio::awaitable<blob> operator()(std::uint64_t i) const
    {
        const object_info& obj = list->objects[i];
        blob b = object_blob(s->cfg, *list, i, buffer{});
        return store::detail::read_object_blob(st, location("s3://" + list->bucket + "/" + obj.key, location_kind::s3), obj.size, std::move(b));
    }
    /// The client's retries since the run opened (the run's metrics show them; a client
    /// shared with other work at the same time counts its retries too).
    std::uint64_t retries() const { return s->retries.load(std::memory_order_relaxed) - retries_at_open; }
};
struct open_reader {
    client c;
    std::shared_ptr<const object_list> list;
    std::shared_ptr<const store::context> ctx; // given, or null: one per run over `c` and `cache`
    std::optional<store::cache_options> cache;
    object_reader operator()(run_context&) const
    {
        auto run_ctx = ctx ? ctx : store::make_context({.rt = &c.rt(), .s3 = c, .cache = cache});
        // An empty list reads nothing, and may name no bucket.
        auto st = list->objects.empty() ? nullptr : run_ctx->store_for(location("s3://" + list->bucket + "/", location_kind::s3));
        auto s = state_of(c);
        return {s, list, std::move(st), s->retries.load(std::memory_order_relaxed)};
    }
};

} // namespace detail

CONVEYOR_DECL object_list list_objects(const client& c, std::string bucket, std::string prefix, unsigned parallel)
{
    return list_objects(c, std::move(bucket), std::move(prefix), listing_options{.parallel = parallel});
}

CONVEYOR_DECL object_list list_url(const client& c, std::string_view url, unsigned parallel)
{
    const location u(url, location_kind::s3);
    return list_objects(c, u.bucket(), u.key(), parallel);
}

CONVEYOR_DECL object_list list_objects(const client& c, std::string bucket, std::string prefix, const listing_options& o)
{
    // The tally lives here, on the blocked caller's stack, until the listing is over.
    detail::listing_tally tally{o.on_progress ? &o.on_progress : nullptr};
    auto objects = c.run(detail::list_parallel(detail::state_of(c), bucket, prefix, o.parallel, &tally));
    if (!o.extensions.empty())
        std::erase_if(objects, [&](const object_info& obj) { return !file::has_extension(obj.key, o.extensions); });
    object_list l{std::move(bucket), std::move(objects)};
    if (o.labels) assign_labels(l, prefix, o.classes);
    return l;
}

CONVEYOR_DECL object_list list_url(const client& c, std::string_view url, const listing_options& o)
{
    const location u(url, location_kind::s3);
    return list_objects(c, u.bucket(), u.key(), o);
}

CONVEYOR_DECL void assign_labels(object_list& l, std::string_view prefix, const std::vector<file::class_info>& classes)
{
    auto fail = [&](const std::string& where, std::string why) {
        return conveyor::error(std::make_error_code(std::errc::invalid_argument),
                               {.stage = "s3 listing", .where = where, .detail = std::move(why)});
    };
    std::string root(prefix);
    if (!root.empty() && root.back() != '/') root += '/';
    // The class of a key: its first path component below the root, or empty (none).
    auto class_of = [&](std::string_view key) -> std::string_view {
        if (key.size() <= root.size() || key.substr(0, root.size()) != root) return {};
        key.remove_prefix(root.size());
        const auto slash = key.find('/');
        if (slash == std::string_view::npos || slash == 0) return {};
        return key.substr(0, slash);
    };
    // Ids index a vector of names: bounded as file::walk bounds them.
    constexpr std::int64_t max_class_id = std::int64_t{1} << 24;
    std::map<std::string, std::int64_t, std::less<>> ids;
    std::vector<std::string> names;
    if (!classes.empty()) {
        std::int64_t max_id = -1;
        for (const auto& c : classes) {
            if (c.id < 0 || c.id >= max_class_id)
                throw fail(c.dir, "class id " + std::to_string(c.id) + " is outside [0, " + std::to_string(max_class_id) + ")");
            ids.emplace(c.dir, c.id);
            max_id = std::max(max_id, c.id);
        }
        names.assign(static_cast<std::size_t>(max_id + 1), std::string());
        for (const auto& c : classes) names[static_cast<std::size_t>(c.id)] = c.dir;
    } else {
        for (const auto& obj : l.objects)
            if (auto c = class_of(obj.key); !c.empty()) ids.emplace(std::string(c), 0);
        std::int64_t next = 0;
        for (auto& [dir, id] : ids) {
            id = next++;
            names.push_back(dir);
        }
    }
    std::vector<object_info> kept;
    std::vector<std::int64_t> labels;
    kept.reserve(l.objects.size());
    labels.reserve(l.objects.size());
    for (auto& obj : l.objects) {
        const auto c = class_of(obj.key);
        if (c.empty()) continue;
        const auto it = ids.find(c);
        if (it == ids.end()) continue;
        labels.push_back(it->second);
        kept.push_back(std::move(obj));
    }
    l.objects = std::move(kept);
    l.labels = std::move(labels);
    l.classes = std::move(names);
}

CONVEYOR_DECL object_list read_index(std::string bucket, const std::string& path, std::string_view prefix, std::uint64_t max_bytes)
{
    const auto f = conveyor::detail::read_whole_file(path, max_bytes, "read_index's max_bytes");
    if (f.ec) throw conveyor::error(f.ec, {.stage = "s3 listing", .where = path, .detail = "cannot read the index file: " + f.why});
    return detail::prefixed(std::move(bucket), detail::parse_index_json(f.text, path), prefix);
}

CONVEYOR_DECL object_list read_index(const client& c, std::string_view index_url, std::string_view prefix, std::uint64_t max_bytes)
{
    const location u(index_url, location_kind::s3);
    auto refuse = [&](std::uint64_t size) {
        throw conveyor::error(std::make_error_code(std::errc::file_too_large),
                              {.stage = "s3 listing", .where = std::string(index_url),
                               .detail = "the index: " + conveyor::detail::over_limit(size, max_bytes, "read_index's max_bytes")});
    };
    const object_info info = c.run(c.async_head(u));
    if (info.size >= 0 && static_cast<std::uint64_t>(info.size) > max_bytes) refuse(static_cast<std::uint64_t>(info.size));
    buffer b = c.run(c.async_get(u, info.size));
    if (b.size() > max_bytes) refuse(b.size()); // replaced by a larger one since the HeadObject
    return detail::prefixed(u.bucket(), detail::parse_index_json(b.view(), index_url), prefix);
}

CONVEYOR_DECL void write_index(const client& c, const object_list& l, std::string_view destination)
{
    const location where(destination);
    if (where.is_local()) return write_index(l, std::filesystem::path(where.path()));
    detail::put_text(c, destination, detail::index_text(l, destination));
}

CONVEYOR_DECL void write_index(const object_list& l, const std::filesystem::path& file)
{
    file::detail::write_text_file(file, detail::index_text(l, file.string()));
}

CONVEYOR_DECL void write_classes(const client& c, const object_list& l, std::string_view destination,
                                 const std::map<std::string, std::string>& names)
{
    if (const location where(destination); where.is_local()) return write_classes(l, std::filesystem::path(where.path()), names);
    detail::put_text(c, destination, file::detail::classes_text(l.classes, names));
}

CONVEYOR_DECL void write_classes(const object_list& l, const std::filesystem::path& file, const std::map<std::string, std::string>& names)
{
    file::detail::write_text_file(file, file::detail::classes_text(l.classes, names));
}

CONVEYOR_DECL void detail::check_context(const client& c, const store::context* ctx, const char* stage, const std::string& bucket)
{
    if (ctx && (!ctx->options().s3 || state_of(*ctx->options().s3) != state_of(c)))
        throw conveyor::error(std::make_error_code(std::errc::invalid_argument),
                              {.stage = stage, .where = "s3://" + bucket,
                               .detail = "the store context given reads s3:// with another client than the one given "
                                         "(set `store_options::s3` to it, or give no context)"});
}

CONVEYOR_DECL pipeline<blob> objects(client c, std::shared_ptr<const object_list> list, source_options o)
{
    if (!list) list = std::make_shared<const object_list>();
    store::detail::check_labels(list->labels.size(), list->objects.size(), "s3", "s3://" + list->bucket);
    detail::check_context(c, o.store.get(), "s3", list->bucket);
    source_settings<blob> s{.concurrency = o.concurrency, .ordered = o.ordered, .errors = o.errors, .capacity = o.capacity,
                            .on_read = std::move(o.on_read), .epochs = std::move(o.epochs)};
    const std::uint64_t count = list->size();
    runtime* io = &c.rt(); // the client's connection pools belong to its runtime's I/O threads: read there
    return keyed_source<blob>("s3", count, std::move(s), detail::open_reader{std::move(c), std::move(list), std::move(o.store), std::move(o.cache)}, io);
}

CONVEYOR_DECL pipeline<blob> objects(client c, object_list list, source_options o)
{
    return objects(std::move(c), std::make_shared<const object_list>(std::move(list)), std::move(o));
}

CONVEYOR_DECL pipeline<blob> objects(client c, std::string bucket, const std::vector<std::string>& keys, source_options o)
{
    return objects(std::move(c), object_list::from_keys(std::move(bucket), keys), std::move(o));
}

CONVEYOR_DECL dataset::dataset(client c, object_list l, std::shared_ptr<const store::context> ctx)
    : c_(std::move(c)), list_(std::make_shared<const object_list>(std::move(l)))
{
    detail::check_context(c_, ctx.get(), "s3 dataset", list_->bucket);
    if (!ctx) ctx = store::make_context({.rt = &c_.rt(), .s3 = c_});
    if (!list_->objects.empty()) st_ = ctx->store_for(location("s3://" + list_->bucket + "/", location_kind::s3));
}

CONVEYOR_DECL asio::awaitable<blob> dataset::async_get(std::size_t i) const
{
    conveyor::detail::check_key_index("s3 dataset", i, list_->size(), "objects");
    // Through the store, whose client hops to one of its I/O threads when called elsewhere.
    const auto& o = list_->objects[i];
    co_return co_await store::detail::read_object_blob(st_, location("s3://" + list_->bucket + "/" + o.key, location_kind::s3), o.size,
                                                       detail::object_blob(c_.cfg(), *list_, i, buffer{}));
}

CONVEYOR_DECL blob dataset::get(std::size_t i) const
{
    return c_.run(async_get(i));
}

CONVEYOR_DECL asio::awaitable<put_result> detail::upload_one::operator()(blob b) const
{
    const std::string key = prefix + b.key;
    // The blob stays in this frame until the upload is done.
    auto r = co_await c.async_put(bucket, key, b.data.span(), content_type);
    co_return r;
}

CONVEYOR_DECL upload_stage::upload_stage(client c, std::string bucket, upload_options o)
    : map_(detail::upload_one{std::move(c), std::move(bucket), o.prefix, o.content_type},
           {.concurrency = std::max<std::size_t>(1, o.concurrency), .ordered = true, .where = run_on::io, .name = "s3 upload"})
{
}

CONVEYOR_DECL stream<put_result> upload_stage::operator()(const std::shared_ptr<run_context>& ctx, stream<blob> in) const
{
    return map_(ctx, std::move(in));
}

CONVEYOR_DECL upload_stage upload(client c, std::string bucket, upload_options o)
{
    return upload_stage(std::move(c), std::move(bucket), std::move(o));
}

} // namespace conveyor::s3

#endif
