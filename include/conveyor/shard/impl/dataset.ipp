// conveyor/shard/impl/dataset.ipp — random access to samples by ranged reads of shards.
#ifndef CONVEYOR_SHARD_IMPL_DATASET_IPP
#define CONVEYOR_SHARD_IMPL_DATASET_IPP

#include <conveyor/core/error.hpp>
#include <conveyor/core/source.hpp>
#include <conveyor/core/location.hpp>
#include <conveyor/shard/dataset.hpp>
#include <conveyor/shard/detail/sample_reader.hpp>
#include <conveyor/shard/error.hpp>
#include <conveyor/shard/list.hpp>
#include <conveyor/store/context.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>

namespace conveyor::shard {
namespace detail {

struct dataset_state {
    runtime* rt = nullptr;
    dataset_index index;
    std::vector<std::string> urls;    // resolved
    std::vector<location> where;      // the same, parsed
    std::vector<std::shared_ptr<const store::store>> stores; // the store of each shard
    std::vector<std::uint64_t> first; // first sample of each shard; one more at the end: the total
    dataset_options o;
    std::mutex mu;
    std::unordered_map<std::size_t, std::shared_ptr<const store::ranged_object>> open; // shards open now
    std::deque<std::size_t> opened;                                                  // in the order they were opened
    std::atomic<std::size_t> next_lane{0};
};

/// Shard `s`, opened for ranged reads (a local file on the blocking pool) if it is not open yet.
inline asio::awaitable<std::shared_ptr<const store::ranged_object>> shard_object(std::shared_ptr<dataset_state> st, std::size_t s)
{
    {
        std::lock_guard lk(st->mu);
        if (auto it = st->open.find(s); it != st->open.end()) co_return it->second;
    }
    auto f = co_await st->stores[s]->async_open(st->where[s]);
    std::lock_guard lk(st->mu);
    if (st->open.emplace(s, f).second) {
        st->opened.push_back(s);
        // Forget the oldest: a read in flight keeps its file open through its own copy.
        while (st->open.size() > std::max<std::size_t>(1, st->o.max_open_files)) {
            st->open.erase(st->opened.front());
            st->opened.pop_front();
        }
    }
    co_return f;
}

/// Which shard and which of its entries sample `i` is (throws past the end).
inline std::pair<std::size_t, std::size_t> locate(const dataset_state& st, std::size_t i)
{
    conveyor::detail::check_key_index("shard dataset", i, st.first.back(), "samples");
    const auto s = static_cast<std::size_t>(std::upper_bound(st.first.begin(), st.first.end(), i) - st.first.begin() - 1);
    return {s, i - st.first[s]};
}

inline asio::awaitable<sample> read_sample(std::shared_ptr<dataset_state> st, std::size_t i)
{
    const auto [s, e] = locate(*st, i);
    const index_entry& ent = st->index.shards[s].entries[e];
    const std::string& url = st->urls[s];
    const auto object = co_await shard_object(st, s);
    slice bytes = co_await object->async_read(ent.offset, ent.size);
    if (bytes.size() != ent.size)
        throw shard_error(errc::index_mismatch, url, ent.offset,
                          "the index gives sample '" + ent.key + "' " + std::to_string(ent.size) + " bytes here, the shard has " +
                              std::to_string(bytes.size()));
    tar_options to = st->o.tar;
    to.require_end_of_archive = false; // one sample's members, not an archive
    sample_parser parser(url, {.tar = to, .shard = s, .first_index = e});
    parser.feed(chunk{std::move(bytes), ent.offset});
    parser.finish();
    std::optional<sample> got;
    try {
        got = parser.next();
        if (got && parser.next()) got.reset(); // more than one sample: not what the index says
    } catch (const conveyor::error& x) {
        throw shard_error(errc::index_mismatch, url, ent.offset,
                          "sample '" + ent.key + "' cannot be read where the index puts it: " + x.what());
    }
    if (!got || got->key != ent.key)
        throw shard_error(errc::index_mismatch, url, ent.offset,
                          "the index puts sample '" + ent.key + "' here, the shard holds " +
                              (got ? "sample '" + got->key + "'" : std::string("no single sample")));
    got->origin = url;
    co_return std::move(*got);
}

} // namespace detail

CONVEYOR_DECL dataset::dataset(dataset_index index, std::string base, runtime& rt, dataset_options o)
    : s_(std::make_shared<detail::dataset_state>())
{
    s_->rt = &rt;
    s_->o = std::move(o);
    s_->first.push_back(0);
    // One store per kind of location, shared by the shards of that kind.
    const std::shared_ptr<const store::context> stores =
        s_->o.store ? s_->o.store : store::make_context({.rt = &rt, .s3 = s_->o.s3, .http = s_->o.http});
    for (const auto& sh : index.shards) {
        location where(detail::beside(base, sh.url));
        if (detail::compressed_by_name(where.url()))
            throw error(make_error_code(conveyor::errc::invalid_argument),
                        {.stage = "shard dataset", .where = where.printable(), .detail = "a compressed shard cannot be read at an offset: random access needs uncompressed shards"});
        s_->stores.push_back(stores->store_for(where));
        s_->urls.push_back(where.url());
        s_->where.push_back(std::move(where));
        s_->first.push_back(s_->first.back() + sh.entries.size());
    }
    s_->index = std::move(index);
}

CONVEYOR_DECL dataset dataset::open(const std::string& index_url, runtime& rt, dataset_options o)
{
    const std::string url = location(index_url).url();
    const std::shared_ptr<const store::context> stores = o.store ? o.store : store::make_context({.rt = &rt, .s3 = o.s3, .http = o.http});
    auto index = load_index(url, *stores, o.max_index_bytes);
    if (!o.store) o.store = stores; // the dataset's reads share the index's web clients
    return dataset(std::move(index), detail::folder_of(url), rt, std::move(o));
}

CONVEYOR_DECL std::size_t dataset::size() const noexcept
{
    return static_cast<std::size_t>(s_->first.back());
}

CONVEYOR_DECL const dataset_index& dataset::index() const noexcept
{
    return s_->index;
}

CONVEYOR_DECL std::pair<std::size_t, std::size_t> dataset::locate(std::size_t i) const
{
    return detail::locate(*s_, i);
}

CONVEYOR_DECL const std::string& dataset::shard_url(std::size_t s) const
{
    return s_->urls.at(s);
}

CONVEYOR_DECL asio::awaitable<sample> dataset::async_get(std::size_t i) const
{
    return detail::read_sample(s_, i);
}

namespace detail {

/// What a blocking `get` hands back from the lane: the sample, or its error as a value.
/// (A `conveyor::error` crosses threads as a copy: an exception_ptr's count is kept inside
/// libstdc++, where ThreadSanitizer cannot see it, and was reported as a race.)
struct got_sample {
    std::optional<sample> value;
    std::optional<conveyor::error> failed;
    std::exception_ptr other;
};

inline asio::awaitable<got_sample> read_sample_as_value(std::shared_ptr<dataset_state> st, std::size_t i)
{
    got_sample g;
    try {
        g.value = co_await read_sample(std::move(st), i);
    } catch (const conveyor::error& e) {
        g.failed.emplace(e);
    } catch (...) {
        g.other = std::current_exception();
    }
    co_return g;
}

} // namespace detail

CONVEYOR_DECL sample dataset::get(std::size_t i) const
{
    const std::size_t lane = s_->next_lane++ % s_->rt->io_lanes();
    auto g = asio::co_spawn(s_->rt->io_executor(lane), detail::read_sample_as_value(s_, i), asio::use_future).get();
    if (g.failed) throw *g.failed;
    if (g.other) std::rethrow_exception(g.other);
    return std::move(*g.value);
}

} // namespace conveyor::shard

#endif
