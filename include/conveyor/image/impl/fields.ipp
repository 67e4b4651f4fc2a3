// conveyor/image/impl/fields.ipp — the field decoders (see fields.hpp).
#ifndef CONVEYOR_IMAGE_IMPL_FIELDS_IPP
#define CONVEYOR_IMAGE_IMPL_FIELDS_IPP

#include <conveyor/core/error.hpp>
#include <conveyor/image/error.hpp>
#include <conveyor/image/fields.hpp>
#include <conveyor/image/labels.hpp>

#include <boost/json/parse_options.hpp>
#include <boost/json/stream_parser.hpp>

#include <charconv>

#include <algorithm>
#include <array>
#include <cstring>
#include <exception>
#include <utility>

namespace conveyor::image {

namespace detail {

CONVEYOR_DECL std::optional<std::int64_t> parse_decimal(std::string_view text) noexcept
{
    auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
    while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
    while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
    if (text.size() > 1 && text.front() == '+' && text[1] != '-') text.remove_prefix(1); // from_chars takes '-' only
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (text.empty() || ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
    return v;
}

CONVEYOR_DECL std::vector<std::string_view> alternatives(std::string_view spec)
{
    std::vector<std::string_view> out;
    for (;;) {
        const auto semi = spec.find(';');
        out.push_back(spec.substr(0, semi));
        if (semi == std::string_view::npos) return out;
        spec.remove_prefix(semi + 1);
    }
}

CONVEYOR_DECL std::string field_options_problem(const field_options& o)
{
    if (o.max_json_depth == 0) return "max_json_depth must be at least 1";
    return {};
}

CONVEYOR_DECL std::string spec_problem(std::string_view spec)
{
    if (spec.empty()) return "a field name is empty";
    for (std::string_view a : alternatives(spec))
        if (a.empty()) return "the field spec '" + conveyor::detail::printable(spec, 80) + "' has an empty alternative";
    return {};
}

CONVEYOR_DECL conveyor::error missing_field_error(std::string_view spec, std::string_view key, std::string_view origin,
                                                  const std::vector<std::string_view>& have)
{
    std::string names;
    for (std::string_view n : have) names += (names.empty() ? "" : ", ") + std::string(n);
    const bool one = spec.find(';') == std::string_view::npos;
    return image_error(errc::missing_field, key, origin,
                       (one ? "the field '" + std::string(spec) + "' is" : "none of the fields '" + std::string(spec) + "' is") +
                           " not in the sample, which has: " + (names.empty() ? std::string("no fields") : names));
}

} // namespace detail

CONVEYOR_DECL const field_value* decoded_sample::find(std::string_view name) const noexcept
{
    for (const auto& f : fields)
        if (f.name == name) return &f.value;
    return nullptr;
}

CONVEYOR_DECL field_value* decoded_sample::find(std::string_view name) noexcept
{
    for (auto& f : fields)
        if (f.name == name) return &f.value;
    return nullptr;
}

CONVEYOR_DECL std::string_view field_extension(std::string_view name) noexcept
{
    const auto dot = name.rfind('.');
    return dot == std::string_view::npos ? name : name.substr(dot + 1);
}

namespace detail {

inline bool equal_without_case(std::string_view a, std::string_view b) noexcept
{
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
        char x = a[i], y = b[i];
        if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
        if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
        if (x != y) return false;
    }
    return true;
}

/// The name of the built-in decoder of `k`, for messages.
inline const char* decoder_name(field_kind k) noexcept
{
    switch (k) {
    case field_kind::integer: return "integer decoder";
    case field_kind::text: return "text decoder";
    case field_kind::json: return "JSON decoder";
    case field_kind::array: return "NumPy decoder";
    case field_kind::image: return "image decoder";
    case field_kind::bytes: break;
    }
    return "bytes";
}

/// The start of every field error's detail: which field, which decoder.
inline std::string field_part(std::string_view field, std::string_view decoder)
{
    return "field '" + std::string(field) + "' (" + std::string(decoder) + "): ";
}

/// The byte where `text` stops being UTF-8, or npos when all of it is.
inline std::size_t first_bad_utf8(std::string_view text) noexcept
{
    std::size_t i = 0;
    while (i < text.size()) {
        // Eight ASCII bytes at a time: most text is mostly ASCII.
        while (i + 8 <= text.size()) {
            std::uint64_t w;
            std::memcpy(&w, text.data() + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= text.size()) break;
        if (static_cast<unsigned char>(text[i]) < 0x80) {
            ++i;
            continue;
        }
        char32_t cp = 0;
        const std::size_t n = conveyor::detail::utf8_sequence(text.substr(i), cp);
        if (n == 0) return i;
        i += n;
    }
    return std::string_view::npos;
}

inline field_value decode_text(const shard::field& f, const field_context& c)
{
    const std::string_view text = f.data.view();
    if (const std::size_t bad = first_bad_utf8(text); bad != std::string_view::npos)
        throw image_error(errc::bad_field, c.key, c.origin,
                          field_part(f.name, "text decoder") + "not UTF-8 at byte " + std::to_string(bad) + " (" +
                              line_and_column(text, bad) + ")");
    return std::string(text);
}

inline field_value decode_integer(const shard::field& f, const field_context& c)
{
    if (const std::optional<std::int64_t> v = parse_decimal(f.data.view())) return *v;
    throw image_error(errc::bad_label, c.key, c.origin,
                      field_part(f.name, "integer decoder") + "holds \"" + conveyor::detail::printable(f.data.view(), 40) +
                          "\", not a decimal integer in 64 bits");
}

inline field_value decode_json(const shard::field& f, const field_context& c, const field_options& o)
{
    std::string_view text = f.data.view();
    if (text.size() > o.max_json_bytes)
        throw image_error(errc::bad_field, c.key, c.origin,
                          field_part(f.name, "JSON decoder") + "the document is " + std::to_string(text.size()) +
                              " bytes, more than the limit of " + std::to_string(o.max_json_bytes) + " (field_options::max_json_bytes)");
    std::size_t skipped = 0;
    if (text.starts_with("\xEF\xBB\xBF")) { // a UTF-8 byte order mark, as Python's json.loads of bytes takes it
        text.remove_prefix(3);
        skipped = 3;
    }
    boost::json::parse_options po;
    po.max_depth = o.max_json_depth;
    boost::json::stream_parser p({}, po);
    boost::system::error_code ec;
    const std::size_t used = p.write(text.data(), text.size(), ec);
    if (!ec) p.finish(ec);
    if (ec) {
        const std::size_t at = std::min(used, text.size()) + skipped;
        const bool deep = ec == boost::json::error::too_deep;
        throw image_error(errc::bad_field, c.key, c.origin,
                          field_part(f.name, "JSON decoder") + (deep ? "nested deeper than " + std::to_string(o.max_json_depth) +
                                                                           " (field_options::max_json_depth)"
                                                                     : "not valid JSON (" + ec.message() + ")") +
                              " at byte " + std::to_string(at) + " (" + line_and_column(f.data.view(), at) + ")");
    }
    return p.release();
}

inline field_value decode_array(const shard::field& f, const field_context& c, const field_options& o)
{
    array_value a;
    std::string why = parse_npy(f.data, {.max_header_bytes = o.max_npy_header_bytes}, a);
    if (!why.empty()) throw image_error(errc::bad_field, c.key, c.origin, field_part(f.name, "NumPy decoder") + why);
    return a;
}

/// `e` (a decoder's error, of the sample of `c`) naming field `f` and decoder `which` too.
inline conveyor::error with_field(const conveyor::error& e, const shard::field& f, const field_context& c, std::string_view which)
{
    return conveyor::error(e.code(), {.stage = e.stage(),
                                      .key = std::string(c.key),
                                      .where = conveyor::detail::redact_userinfo(c.origin),
                                      .offset = e.offset(),
                                      .detail = field_part(f.name, which) + (e.ctx().detail.empty() ? e.code().message() : e.ctx().detail)});
}

inline field_value decode_image_field(const shard::field& f, const field_context& c)
{
    static const decode_options whole;
    static const decoder own;
    const decoder& dec = c.decoder ? *c.decoder : own;
    try {
        return dec.decode(f.data.span(), c.image ? *c.image : whole, {.key = c.key, .origin = c.origin, .epoch = c.epoch, .stats = c.stats});
    } catch (const conveyor::error& e) {
        throw with_field(e, f, c, "image decoder");
    }
}

/// Runs user decoder `d`; what it throws names the field and the decoder, the original nested.
inline field_value run_user_decoder(const field_decoder& d, const shard::field& f, const field_context& c, const std::string& which)
{
    try {
        return d(f, c);
    } catch (const conveyor::error& e) {
        std::throw_with_nested(with_field(e, f, c, which));
    } catch (const std::exception& e) {
        std::throw_with_nested(image_error(errc::field_decoder_failed, c.key, c.origin, field_part(f.name, which) + e.what()));
    } catch (...) {
        std::throw_with_nested(image_error(errc::field_decoder_failed, c.key, c.origin, field_part(f.name, which) + "unknown exception"));
    }
}

} // namespace detail

CONVEYOR_DECL field_kind default_field_kind(std::string_view name) noexcept
{
    const std::string_view ext = field_extension(name);
    // webdataset's `autodecode.decoders`, looked up with case.
    static constexpr std::array<std::pair<std::string_view, field_kind>, 10> basic{{{"txt", field_kind::text},
                                                                                      {"text", field_kind::text},
                                                                                      {"transcript", field_kind::text},
                                                                                      {"cls", field_kind::integer},
                                                                                      {"cls2", field_kind::integer},
                                                                                      {"index", field_kind::integer},
                                                                                      {"inx", field_kind::integer},
                                                                                      {"id", field_kind::integer},
                                                                                      {"json", field_kind::json},
                                                                                      {"jsn", field_kind::json}}};
    for (const auto& [e, k] : basic)
        if (ext == e) return k;
    if (ext == "npy") return field_kind::array;
    for (std::string_view e : {"jpg", "jpeg", "jpe", "jfif", "png", "webp", "avif"})
        if (detail::equal_without_case(ext, e)) return field_kind::image;
    return field_kind::bytes;
}

CONVEYOR_DECL field_value decode_field(const shard::field& f, const field_context& c, const field_options& o)
{
    if (f.object) return object_value{f.object};
    if (!o.only.empty() && std::find(o.only.begin(), o.only.end(), f.name) == o.only.end()) return f.data;
    if (!o.by_name.empty())
        if (const auto it = o.by_name.find(f.name); it != o.by_name.end() && it->second) {
            field_value v = detail::run_user_decoder(it->second, f, c, "the user decoder for '" + f.name + "'");
            if (!std::holds_alternative<std::monostate>(v)) return v;
        }
    const std::string_view ext = field_extension(f.name);
    for (const auto& [e, d] : o.by_extension)
        if (d && detail::equal_without_case(e, ext)) {
            field_value v = detail::run_user_decoder(d, f, c, "the user decoder for extension '" + e + "'");
            if (!std::holds_alternative<std::monostate>(v)) return v;
            break;
        }
    field_context ctx = c;
    if (!ctx.image) ctx.image = &o.image;
    switch (default_field_kind(f.name)) {
    case field_kind::integer: return detail::decode_integer(f, ctx);
    case field_kind::text: return detail::decode_text(f, ctx);
    case field_kind::json: return detail::decode_json(f, ctx, o);
    case field_kind::array: return detail::decode_array(f, ctx, o);
    case field_kind::image: return detail::decode_image_field(f, ctx);
    case field_kind::bytes: break;
    }
    return f.data;
}

CONVEYOR_DECL decoded_sample decode_sample(const shard::sample& s, const field_options& o, const decoder& dec, std::uint64_t epoch,
                                           decode_stats* stats)
{
    decoded_sample out{.key = s.key, .origin = s.origin, .fields = {}, .id = shard::id_of(s)};
    out.fields.reserve(s.fields.size());
    const field_context c{.key = s.key, .origin = s.origin, .epoch = epoch, .image = &o.image, .decoder = &dec, .stats = stats};
    for (const auto& f : s.fields) out.fields.push_back({.name = f.name, .value = decode_field(f, c, o)});
    return out;
}

CONVEYOR_DECL decode_fields_stage::decode_fields_stage(field_options o, fields_queue_options q)
    : q_(q), stats_(std::make_shared<decode_stats>())
{
    if (std::string why = detail::field_options_problem(o); !why.empty())
        throw conveyor::error(make_error_code(errc::bad_options), {.stage = "decode_fields", .detail = std::move(why)});
    o_ = std::make_shared<const field_options>(std::move(o));
}

} // namespace conveyor::image

#endif
