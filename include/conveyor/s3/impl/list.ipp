// conveyor/s3/impl/list.ipp — listing: ListObjectsV2 pages, whole listings, and the
// cursor that follows continuation tokens.
#ifndef CONVEYOR_S3_IMPL_LIST_IPP
#define CONVEYOR_S3_IMPL_LIST_IPP

#include <conveyor/s3/client.hpp>
#include <conveyor/s3/detail/client_state.hpp>
#include <conveyor/s3/detail/xml.hpp>

#include <algorithm>

namespace conveyor::s3 {
namespace detail {

CONVEYOR_DECL asio::awaitable<list_page> client_state::list(std::string_view bucket, const list_options& lo)
{
    op o{.method = boost::beast::http::verb::get, .name = "ListObjectsV2", .bucket = bucket, .key = {}};
    std::string q = "list-type=2&encoding-type=url&max-keys=" + std::to_string(std::clamp(lo.max_keys, 1u, 1000u));
    if (!lo.prefix.empty()) q += "&prefix=" + encode_query(lo.prefix);
    if (!lo.delimiter.empty()) q += "&delimiter=" + encode_query(lo.delimiter);
    if (!lo.continuation_token.empty()) q += "&continuation-token=" + encode_query(lo.continuation_token);
    if (!lo.start_after.empty()) q += "&start-after=" + encode_query(lo.start_after);
    o.query = std::move(q);
    o.max_body = max_document_bytes;
    auto resp = co_await execute(o);
    try {
        co_return parse_list_page(resp.body.view());
    } catch (const conveyor::error& e) {
        throw failure(o, e.code(), {}, 1, e.ctx().detail);
    }
}

CONVEYOR_DECL asio::awaitable<std::vector<object_info>> client_state::list_all(std::string_view bucket, std::string_view prefix,
                                                                               listing_tally* tally)
{
    std::vector<object_info> all;
    list_options lo{.prefix = std::string(prefix)};
    listing_cursor cursor(bucket, prefix);
    for (;;) {
        auto page = co_await list(bucket, lo);
        if (tally) tally->add(page);
        for (auto& o : page.objects) all.push_back(std::move(o));
        if (!cursor.next(*this, page, lo)) break;
    }
    co_return all;
}

CONVEYOR_DECL bool listing_cursor::next(const client_state& s, list_page& page, list_options& lo)
{
    ++pages_;
    if (!page.truncated) return false;
    if (!lo.continuation_token.empty()) sent_.insert(lo.continuation_token);
    if (sent_.contains(page.next_continuation_token)) {
        std::string token = page.next_continuation_token;
        if (token.size() > 200) token = token.substr(0, 200) + "...";
        const bool empty = page.objects.empty() && page.common_prefixes.empty();
        op o{.name = "ListObjectsV2", .bucket = bucket_, .key = prefix_};
        throw s.failure(o, make_error_code(errc::bad_reply), {}, 1,
                        "the listing of prefix '" + prefix_ + "' in bucket '" + bucket_ + "' goes round in circles: page " +
                            std::to_string(pages_) + (empty ? " (empty)" : "") + " is truncated and gives continuation token '" +
                            token + "', which was sent before; it is not followed again");
    }
    lo.continuation_token = std::move(page.next_continuation_token);
    return true;
}

} // namespace detail
} // namespace conveyor::s3

#endif
