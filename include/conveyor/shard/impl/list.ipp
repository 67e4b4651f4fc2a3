// conveyor/shard/impl/list.ipp — brace expansion and shard list resolution.
#ifndef CONVEYOR_SHARD_IMPL_LIST_IPP
#define CONVEYOR_SHARD_IMPL_LIST_IPP

#include <conveyor/core/detail/ascii.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/core/location.hpp>
#include <conveyor/s3/client.hpp>
#include <conveyor/shard/index.hpp>
#include <conveyor/shard/list.hpp>
#include <conveyor/store/context.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>

namespace conveyor::shard {
namespace detail {

[[noreturn]] inline void bad_pattern(std::string_view pattern, std::size_t pos, std::string why)
{
    throw error(make_error_code(conveyor::errc::invalid_argument),
                {.stage = "shard list", .where = std::string(pattern), .offset = static_cast<std::int64_t>(pos), .detail = std::move(why)});
}

inline std::string unescape(std::string_view s)
{
    std::string out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\\' && i + 1 < s.size()) ++i;
        out += s[i];
    }
    return out;
}

inline bool parse_int(std::string_view s, std::int64_t& v)
{
    if (s.empty() || s.size() > 18) return false;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    return ec == std::errc{} && p == s.data() + s.size();
}

/// The items of a range group's text (`a..b` or `a..b..step`), or false when it is not one.
inline bool expand_range(std::string_view inner, std::vector<std::string>& items, std::string_view pattern, std::size_t pos,
                         std::size_t max_items)
{
    const auto d1 = inner.find("..");
    if (d1 == std::string_view::npos) return false;
    std::string_view a = inner.substr(0, d1), b = inner.substr(d1 + 2), step_text;
    if (const auto d2 = b.find(".."); d2 != std::string_view::npos) {
        step_text = b.substr(d2 + 2);
        b = b.substr(0, d2);
    }
    std::int64_t step = 1;
    if (!step_text.empty() && (!parse_int(step_text, step) || step == 0)) return false;
    step = step < 0 ? -step : step;
    std::int64_t x, y;
    const bool letters = a.size() == 1 && b.size() == 1 && std::isalpha(static_cast<unsigned char>(a[0])) &&
                         std::isalpha(static_cast<unsigned char>(b[0]));
    if (letters) {
        x = a[0];
        y = b[0];
    } else if (!parse_int(a, x) || !parse_int(b, y)) {
        return false;
    }
    const std::uint64_t span = static_cast<std::uint64_t>(x < y ? y - x : x - y) / static_cast<std::uint64_t>(step) + 1;
    if (span > max_items) bad_pattern(pattern, pos, "the range {" + std::string(inner) + "} has " + std::to_string(span) + " items, more than the limit of " + std::to_string(max_items));
    auto padded = [](std::string_view t) { return t.size() > 1 && (t[0] == '0' || (t[0] == '-' && t[1] == '0')); };
    const std::size_t width = (!letters && (padded(a) || padded(b))) ? std::max(a.size(), b.size()) : 0;
    const std::int64_t dir = x <= y ? step : -step;
    for (std::int64_t v = x;; v += dir) {
        if (letters) {
            items.emplace_back(1, static_cast<char>(v));
        } else {
            std::string t = std::to_string(v < 0 ? -v : v);
            const std::size_t w = width > 0 && v < 0 ? width - 1 : width;
            if (t.size() < w) t.insert(0, w - t.size(), '0');
            if (v < 0) t.insert(0, 1, '-');
            items.push_back(std::move(t));
        }
        if ((dir > 0 && v + dir > y) || (dir < 0 && v + dir < y)) break;
    }
    return true;
}

inline void expand_into(std::string_view s, std::size_t base, std::string_view pattern, std::size_t max_items, std::vector<std::string>& out);

inline std::vector<std::string> expand_part(std::string_view s, std::size_t base, std::string_view pattern, std::size_t max_items)
{
    std::vector<std::string> out;
    expand_into(s, base, pattern, max_items, out);
    return out;
}

// `s` starts at byte `base` of `pattern` (for messages).
inline void expand_into(std::string_view s, std::size_t base, std::string_view pattern, std::size_t max_items, std::vector<std::string>& out)
{
    std::size_t open = std::string_view::npos;
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\\') {
            ++i;
            continue;
        }
        if (s[i] == '}') bad_pattern(pattern, base + i, "a '}' closes no '{'");
        if (s[i] == '{') {
            open = i;
            break;
        }
    }
    if (open == std::string_view::npos) {
        if (out.size() >= max_items) bad_pattern(pattern, 0, "the pattern expands to more than " + std::to_string(max_items) + " items");
        out.push_back(unescape(s));
        return;
    }
    // The matching '}' and the top-level commas between.
    std::size_t close = std::string_view::npos, depth = 0;
    std::vector<std::size_t> commas;
    for (std::size_t i = open + 1; i < s.size(); ++i) {
        if (s[i] == '\\') {
            ++i;
            continue;
        }
        if (s[i] == '{') ++depth;
        else if (s[i] == '}') {
            if (depth == 0) {
                close = i;
                break;
            }
            --depth;
        } else if (s[i] == ',' && depth == 0) {
            commas.push_back(i);
        }
    }
    if (close == std::string_view::npos) bad_pattern(pattern, base + open, "this '{' is never closed");
    const std::string_view inner = s.substr(open + 1, close - open - 1);
    std::vector<std::string> alts;
    if (!commas.empty()) {
        std::size_t from = open + 1;
        commas.push_back(close);
        for (std::size_t c : commas) {
            expand_into(s.substr(from, c - from), base + from, pattern, max_items, alts);
            from = c + 1;
        }
    } else if (!expand_range(inner, alts, pattern, base + open, max_items)) {
        // Neither a list nor a range: the braces are plain text (as in the shell).
        for (auto& x : expand_part(inner, base + open + 1, pattern, max_items)) alts.push_back("{" + x + "}");
    }
    const std::string prefix = unescape(s.substr(0, open));
    const auto rest = expand_part(s.substr(close + 1), base + close + 1, pattern, max_items);
    if (alts.size() * rest.size() > max_items || out.size() + alts.size() * rest.size() > max_items)
        bad_pattern(pattern, base + open, "the pattern expands to more than " + std::to_string(max_items) + " items");
    for (const auto& a : alts)
        for (const auto& r : rest) out.push_back(prefix + a + r);
}

inline bool ends_with_any(std::string_view s, const std::vector<std::string>& suffixes)
{
    return std::any_of(suffixes.begin(), suffixes.end(), [&](const std::string& x) { return s.ends_with(x); });
}

[[noreturn]] inline void bad_spec(std::string_view spec, std::string why)
{
    throw error(make_error_code(conveyor::errc::invalid_argument), {.stage = "shard list", .where = std::string(spec), .detail = std::move(why)});
}

} // namespace detail

CONVEYOR_DECL std::string detail::folder_of(std::string_view url)
{
    const auto slash = url.rfind('/');
    return slash == std::string_view::npos ? std::string() : std::string(url.substr(0, slash + 1));
}

CONVEYOR_DECL std::string detail::beside(std::string_view folder, std::string_view url)
{
    const bool relative = !url.empty() && url[0] != '/' && url.find("://") == std::string_view::npos;
    return relative ? std::string(folder) + std::string(url) : std::string(url);
}

CONVEYOR_DECL bool detail::compressed_by_name(std::string_view url) noexcept
{
    return url.ends_with(".gz") || url.ends_with(".tgz");
}

CONVEYOR_DECL dataset_index load_index(const std::string& url, const s3::client* s3, std::uint64_t max_bytes)
{
    store::store_options so;
    if (s3) so.s3 = *s3;
    return load_index(url, store::context(std::move(so)), max_bytes);
}

CONVEYOR_DECL dataset_index load_index(const std::string& url, const store::context& stores, std::uint64_t max_bytes)
{
    const location where(url);
    const slice text = stores.store_for(where)->read_small(where, max_bytes, "list_options::max_index_bytes, dataset_options::max_index_bytes");
    return parse_index(std::string_view(reinterpret_cast<const char*>(text.data()), text.size()), url);
}

CONVEYOR_DECL std::vector<std::string> expand_braces(std::string_view pattern, std::size_t max_items)
{
    return detail::expand_part(pattern, 0, pattern, max_items);
}

CONVEYOR_DECL bool names_s3(const std::vector<std::string>& specs)
{
    for (const auto& whole : specs) {
        for (std::string_view rest = whole;;) {
            const auto sep = rest.find("::");
            // The scheme alone: a part may be a pattern ("https://h/s-{0..9}.tar") that is
            // not a location before its braces are expanded.
            if (conveyor::detail::iequals(conveyor::detail::url_scheme(rest.substr(0, sep)), "s3")) return true;
            if (sep == std::string_view::npos) break;
            rest.remove_prefix(sep + 2);
        }
    }
    return false;
}

CONVEYOR_DECL std::vector<shard_ref> resolve(const std::vector<std::string>& specs, const list_options& o)
{
    std::shared_ptr<const store::context> stores = o.store;
    if (!stores) {
        store::store_options so;
        if (o.s3) so.s3 = *o.s3;
        stores = store::make_context(std::move(so));
    }
    std::vector<shard_ref> out;
    for (const auto& whole : specs) {
        std::string_view rest = whole;
        for (;;) {
            const auto sep = rest.find("::");
            const std::string_view spec = rest.substr(0, sep);
            if (spec.empty()) detail::bad_spec(whole, "an empty shard list");
            if (spec.ends_with(".json")) {
                const std::string url = location(spec).url();
                const auto index = load_index(url, *stores, o.max_index_bytes);
                const std::string base = detail::folder_of(url);
                for (const auto& s : index.shards) {
                    shard_ref r;
                    r.url = location(detail::beside(base, s.url)).url();
                    r.size = static_cast<std::int64_t>(s.bytes);
                    r.samples = static_cast<std::int64_t>(s.samples);
                    out.push_back(std::move(r));
                }
            } else if (spec.ends_with('/')) {
                const location prefix(spec);
                const auto objects = stores->store_for(prefix)->list(prefix);
                std::size_t found = 0;
                for (const auto& obj : objects) {
                    if (!detail::ends_with_any(obj.url, o.suffixes)) continue;
                    out.push_back({obj.url, obj.size, -1});
                    ++found;
                }
                if (found == 0) detail::bad_spec(spec, "no object under this prefix ends in a shard suffix (" + std::to_string(objects.size()) + " listed)");
            } else {
                for (const auto& u : expand_braces(spec)) out.push_back({location(u).url(), -1, -1});
            }
            if (sep == std::string_view::npos) break;
            rest.remove_prefix(sep + 2);
        }
    }
    if (out.empty()) throw error(make_error_code(conveyor::errc::invalid_argument), {.stage = "shard list", .detail = "no shards were named"});
    return out;
}

} // namespace conveyor::shard

#endif
