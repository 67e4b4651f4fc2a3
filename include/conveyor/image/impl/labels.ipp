// conveyor/image/impl/labels.ipp — JSON labels and validation maps (see labels.hpp).
#ifndef CONVEYOR_IMAGE_IMPL_LABELS_IPP
#define CONVEYOR_IMAGE_IMPL_LABELS_IPP

#include <conveyor/image/labels.hpp>

#include <conveyor/core/detail/read_file.hpp>

#include <conveyor/core/error.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/basic_parser_impl.hpp>
#include <boost/json/error.hpp>
#include <boost/json/value.hpp>

#include <cerrno>
#include <charconv>
#include <fstream>
#include <limits>
#include <sstream>
#include <system_error>

namespace conveyor::image {

namespace detail {

/// True if `s` is a decimal number as JSON writes one (no sign, no leading zero but "0")
/// that fits in 64 bits; its value in `out`.
inline bool canonical_index(std::string_view s, std::uint64_t& out) noexcept
{
    if (s.empty() || (s.size() > 1 && s.front() == '0')) return false;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc{} && end == s.data() + s.size();
}

/// What a JSON value is, for messages: its kind and (shortened) text.
inline std::string json_describe(const boost::json::value& v)
{
    const char* kind = v.is_object() ? "an object" : v.is_array() ? "an array" : v.is_string() ? "a string" : v.is_bool() ? "a boolean"
                                                  : v.is_null()    ? "null" : "a number";
    if (v.is_double()) {
        char buf[32];
        const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v.get_double());
        return std::string(kind) + " (" + std::string(buf, ec == std::errc{} ? end : buf) + ")";
    }
    return std::string(kind) + " (" + conveyor::detail::printable(boost::json::serialize(v), 60) + ")";
}

/// `v` as a label, or why it is not one.
inline std::optional<std::int64_t> json_integer(const boost::json::value& v) noexcept
{
    if (v.is_int64()) return v.get_int64();
    if (v.is_uint64() && v.get_uint64() <= std::uint64_t(std::numeric_limits<std::int64_t>::max())) return std::int64_t(v.get_uint64());
    return std::nullopt;
}

CONVEYOR_DECL std::string line_and_column(std::string_view text, std::size_t at)
{
    at = std::min(at, text.size());
    std::size_t line = 1, col = 1;
    for (std::size_t i = 0; i < at; ++i) {
        if (text[i] == '\n') {
            ++line;
            col = 1;
        } else {
            ++col;
        }
    }
    return "line " + std::to_string(line) + ", column " + std::to_string(col);
}

/// The events of a label map file: one object of names and integers.
struct label_map_handler {
    static constexpr std::size_t max_object_size = std::size_t(-1);
    static constexpr std::size_t max_array_size = std::size_t(-1);
    static constexpr std::size_t max_key_size = std::size_t(-1);
    static constexpr std::size_t max_string_size = std::size_t(-1);

    explicit label_map_handler(std::string source) : map(std::make_shared<label_map>(std::move(source))) {}

    std::shared_ptr<label_map> map;
    std::string problem; ///< what was wrong, when a handler stopped the parser
    std::string name;    ///< the name being read
    std::string text;    ///< the start of a string value, for the message
    int depth = 0;

    bool fail(boost::system::error_code& ec, std::string why)
    {
        problem = std::move(why);
        ec = boost::json::error::syntax; // stops the parser; `problem` says what it was
        return false;
    }
    std::string entry() const { return "entry \"" + conveyor::detail::printable(name, 120) + "\""; }
    /// A value other than an integer where an entry's value goes.
    bool not_integer(boost::system::error_code& ec, const std::string& what)
    {
        if (depth == 0) return fail(ec, "not a JSON object of entries such as {\"0\": 490}: the top level is " + what);
        return fail(ec, entry() + " holds " + what + ", not an integer class id");
    }
    bool value(std::int64_t v, boost::system::error_code& ec)
    {
        if (depth != 1) return not_integer(ec, "a number");
        if (name.empty()) return fail(ec, "an entry with an empty name");
        if (map->find(std::string_view(name))) return fail(ec, entry() + " is named twice");
        map->insert(name, v);
        return true;
    }

    bool on_document_begin(boost::system::error_code&) { return true; }
    bool on_document_end(boost::system::error_code&) { return true; }
    bool on_object_begin(boost::system::error_code& ec)
    {
        if (depth != 0) return not_integer(ec, "an object");
        ++depth;
        return true;
    }
    bool on_object_end(std::size_t, boost::system::error_code&)
    {
        --depth;
        return true;
    }
    bool on_array_begin(boost::system::error_code& ec) { return not_integer(ec, "an array"); }
    bool on_array_end(std::size_t, boost::system::error_code&) { return true; }
    bool on_key_part(boost::json::string_view s, std::size_t n, boost::system::error_code&)
    {
        if (n == s.size()) name.clear();
        name.append(s.data(), s.size());
        return true;
    }
    bool on_key(boost::json::string_view s, std::size_t n, boost::system::error_code&)
    {
        if (n == s.size()) name.clear();
        name.append(s.data(), s.size());
        return true;
    }
    bool on_string_part(boost::json::string_view s, std::size_t n, boost::system::error_code&)
    {
        if (n == s.size()) text.clear();
        text.append(s.data(), std::min<std::size_t>(s.size(), 200));
        return true;
    }
    bool on_string(boost::json::string_view s, std::size_t n, boost::system::error_code& ec)
    {
        if (n == s.size()) text.clear();
        text.append(s.data(), std::min<std::size_t>(s.size(), 200));
        return not_integer(ec, "a string (\"" + conveyor::detail::printable(text, 60) + "\")");
    }
    bool on_number_part(boost::json::string_view, boost::system::error_code&) { return true; }
    bool on_int64(std::int64_t v, boost::json::string_view, boost::system::error_code& ec) { return value(v, ec); }
    bool on_uint64(std::uint64_t v, boost::json::string_view s, boost::system::error_code& ec)
    {
        if (v > std::uint64_t(std::numeric_limits<std::int64_t>::max()))
            return not_integer(ec, "a number (" + std::string(s.data(), s.size()) + ") beyond 64-bit integers");
        return value(std::int64_t(v), ec);
    }
    bool on_double(double, boost::json::string_view s, boost::system::error_code& ec)
    {
        return not_integer(ec, "a number (" + conveyor::detail::printable(std::string_view(s.data(), s.size()), 60) + ")");
    }
    bool on_bool(bool b, boost::system::error_code& ec) { return not_integer(ec, b ? "a boolean (true)" : "a boolean (false)"); }
    bool on_null(boost::system::error_code& ec) { return not_integer(ec, "null"); }
    bool on_comment_part(boost::json::string_view, boost::system::error_code&) { return true; }
    bool on_comment(boost::json::string_view, boost::system::error_code&) { return true; }
};

CONVEYOR_DECL std::int64_t json_label_of(std::string_view text, const json_label& l, std::string_view key, std::string_view where)
{
    // Messages are built only when one is needed: this runs once per image.
    auto field_name = [&] { return "the JSON field '" + l.field + "'"; };
    boost::system::error_code ec;
    const boost::json::value doc = boost::json::parse(text, ec);
    if (ec)
        throw image_error(errc::bad_label, key, where,
                          field_name() + " is not valid JSON (" + ec.message() + "): \"" + conveyor::detail::printable(text, 60) + "\"");
    const boost::json::value* v = &doc;
    if (!l.path.empty() && l.path.front() == '/') {
        boost::system::error_code pec;
        v = doc.find_pointer(l.path, pec);
        if (!v)
            throw image_error(errc::missing_field, key, where,
                              field_name() + " has no value at JSON Pointer '" + conveyor::detail::printable(l.path, 80) + "' (" +
                                  pec.message() + "); the document is " + json_describe(doc));
    } else if (!l.path.empty()) {
        std::string_view rest = l.path;
        while (true) {
            const auto dot = rest.find('.');
            const std::string_view part = rest.substr(0, dot);
            const boost::json::value* next = nullptr;
            if (const auto* obj = v->if_object()) {
                next = obj->if_contains(part);
            } else if (const auto* arr = v->if_array()) {
                std::uint64_t i = 0;
                if (canonical_index(part, i) && i < arr->size()) next = &(*arr)[std::size_t(i)];
            }
            if (!next) {
                const std::size_t begin = l.path.size() - rest.size();
                const std::string at = begin == 0 ? "the document" : "'" + l.path.substr(0, begin - 1) + "'";
                throw image_error(errc::missing_field, key, where,
                                  field_name() + " has no '" + l.path + "': " + at + " has no '" + std::string(part) + "', it is " +
                                      json_describe(*v));
            }
            v = next;
            if (dot == std::string_view::npos) break;
            rest.remove_prefix(dot + 1);
        }
    }
    const auto label = json_integer(*v);
    if (!label)
        throw image_error(errc::bad_label, key, where,
                          field_name() + (l.path.empty() ? std::string() : " at '" + l.path + "'") + " holds " + json_describe(*v) +
                              ", not an integer label");
    return *label;
}

CONVEYOR_DECL std::string_view key_stem(std::string_view key) noexcept
{
    const auto slash = key.rfind('/');
    if (slash != std::string_view::npos) key.remove_prefix(slash + 1);
    return key.substr(0, key.find('.'));
}

CONVEYOR_DECL std::optional<std::uint64_t> key_number(std::string_view key) noexcept
{
    const std::string_view stem = key_stem(key);
    auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
    std::size_t end = stem.size();
    while (end > 0 && !is_digit(stem[end - 1])) --end;
    if (end == 0) return std::nullopt;
    std::size_t begin = end;
    while (begin > 0 && is_digit(stem[begin - 1])) --begin;
    std::uint64_t n = 0;
    const auto [p, ec] = std::from_chars(stem.data() + begin, stem.data() + end, n);
    if (ec != std::errc{}) return std::nullopt;
    return n;
}

CONVEYOR_DECL std::int64_t map_label_of(const label_map_options& o, std::string_view key, std::string_view where,
                                        const std::uint64_t* position)
{
    const label_map& m = *o.map;
    auto map_name = [&] { return "the label map " + conveyor::detail::printable(m.source(), 120); };
    label_lookup by = o.by;
    if (by == label_lookup::automatic) by = !m.indexed() ? label_lookup::key : position ? label_lookup::position : label_lookup::key_number;
    switch (by) {
    case label_lookup::position: {
        if (!position)
            throw image_error(errc::bad_options, key, where,
                              "label_lookup::position on a shard sample: its index counts within one shard, not the dataset; "
                              "look it up by key_number or key");
        if (!m.indexed())
            throw image_error(errc::bad_options, key, where, map_name() + " is keyed by names, not indices: look it up by key");
        if (auto l = m.find(*position)) return *l;
        throw image_error(errc::bad_label, key, where, map_name() + " has no entry \"" + std::to_string(*position) + "\" (the position)");
    }
    case label_lookup::key_number: {
        if (!o.first_number)
            throw image_error(errc::bad_options, key, where,
                              "label_map_options::first_number is not set: say which key number is entry \"0\" of " + map_name() +
                                  " (1 for ImageNet's ILSVRC2012_val_00000001, 0 for keys counted from 0)");
        if (!m.indexed())
            throw image_error(errc::bad_options, key, where, map_name() + " is keyed by names, not indices: look it up by key");
        const auto n = key_number(key);
        if (!n) throw image_error(errc::bad_label, key, where, "the key has no number to look up in " + map_name());
        if (*n < *o.first_number)
            throw image_error(errc::bad_label, key, where,
                              "the key's number " + std::to_string(*n) + " is below first_number " + std::to_string(*o.first_number) +
                                  " (" + map_name() + ")");
        const std::uint64_t entry = *n - *o.first_number;
        if (auto l = m.find(entry)) return *l;
        throw image_error(errc::bad_label, key, where,
                          map_name() + " has no entry \"" + std::to_string(entry) + "\" (key number " + std::to_string(*n) + " less " +
                              std::to_string(*o.first_number) + ")");
    }
    case label_lookup::key:
    case label_lookup::automatic:
        break;
    }
    if (auto l = m.find(key)) return *l;
    const std::string_view stem = key_stem(key);
    if (auto l = m.find(stem)) return *l;
    throw image_error(errc::bad_label, key, where,
                      map_name() + " has no entry for the key or its stem \"" + conveyor::detail::printable(stem, 120) + "\"");
}

} // namespace detail

CONVEYOR_DECL void label_map::insert(std::string name, std::int64_t label)
{
    std::uint64_t i = 0;
    const bool numeric = detail::canonical_index(name, i);
    auto [it, fresh] = by_name_.emplace(std::move(name), label);
    if (!fresh)
        throw detail::image_error(errc::bad_label, {}, source_, "the entry \"" + conveyor::detail::printable(it->first, 120) + "\" is named twice");
    if (indexed_ && numeric) {
        by_index_.emplace(i, label);
    } else if (indexed_) {
        indexed_ = false;
        by_index_.clear();
    }
}

CONVEYOR_DECL std::shared_ptr<const label_map> parse_label_map(std::string_view text, std::string_view source)
{
    // Parsed as events (no DOM): a name given twice is seen, and an error's position is
    // where the parser stopped.
    boost::json::basic_parser<detail::label_map_handler> p(boost::json::parse_options{}, std::string(source));
    boost::system::error_code ec;
    const std::size_t used = p.write_some(false, text.data(), text.size(), ec);
    if (ec) {
        auto& h = p.handler();
        const std::string at = detail::line_and_column(text, used);
        const std::string why = h.problem.empty() ? "not valid JSON at " + at + ": " + ec.message() : h.problem + " (" + at + ")";
        throw detail::image_error(errc::bad_label, {}, source, why);
    }
    const auto rest = text.substr(used);
    if (rest.find_first_not_of(" \t\r\n") != std::string_view::npos)
        throw detail::image_error(errc::bad_label, {}, source,
                                  "text after the JSON object, at " + detail::line_and_column(text, used + rest.find_first_not_of(" \t\r\n")));
    return std::move(p.handler().map);
}

CONVEYOR_DECL std::shared_ptr<const label_map> load_label_map(const std::filesystem::path& path)
{
    const auto f = conveyor::detail::read_whole_file(path, conveyor::detail::default_max_index_bytes, "detail::default_max_index_bytes");
    if (f.ec)
        throw conveyor::error(f.ec, {.stage = "label map", .where = path.string(), .detail = "cannot read the label map file: " + f.why});
    return parse_label_map(f.text, path.string());
}

} // namespace conveyor::image

#endif
