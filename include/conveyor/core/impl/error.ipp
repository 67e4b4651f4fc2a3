// conveyor/core/impl/error.ipp — the core error category, messages and the escaping of
// what users supply.
#ifndef CONVEYOR_CORE_IMPL_ERROR_IPP
#define CONVEYOR_CORE_IMPL_ERROR_IPP

#include <conveyor/core/error.hpp>

namespace conveyor {

namespace detail {
class core_category_impl final : public std::error_category {
public:
    const char* name() const noexcept override { return "conveyor.core"; }
    std::string message(int ev) const override
    {
        switch (static_cast<errc>(ev)) {
        case errc::cancelled: return "pipeline cancelled";
        case errc::invalid_argument: return "invalid argument";
        case errc::stream_ended: return "range was moved from";
        case errc::stage_failed: return "stage failed";
        }
        return "unknown conveyor.core error";
    }
};
} // namespace detail

CONVEYOR_DECL const std::error_category& core_category() noexcept
{
    static const detail::core_category_impl cat;
    return cat;
}

namespace detail {

CONVEYOR_DECL std::size_t utf8_sequence(std::string_view s, char32_t& cp) noexcept
{
    const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
    const unsigned char lead = byte(0);
    if (lead < 0x80) {
        cp = lead;
        return 1;
    }
    // The sequence's length, the lead byte's payload bits, and the smallest code point
    // that needs that length (anything smaller is an overlong form).
    std::size_t n = 0;
    char32_t min = 0;
    if ((lead & 0xE0) == 0xC0) {
        n = 2, min = 0x80, cp = lead & 0x1F;
    } else if ((lead & 0xF0) == 0xE0) {
        n = 3, min = 0x800, cp = lead & 0x0F;
    } else if ((lead & 0xF8) == 0xF0) {
        n = 4, min = 0x10000, cp = lead & 0x07;
    } else {
        return 0;
    }
    if (s.size() < n) return 0;
    for (std::size_t i = 1; i < n; ++i) {
        if ((byte(i) & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (byte(i) & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

CONVEYOR_DECL std::size_t append_printable(std::string& out, std::string_view s)
{
    static constexpr char hex[] = "0123456789ABCDEF";
    char32_t cp = 0;
    const std::size_t n = utf8_sequence(s, cp);
    if (n == 0) {
        const auto byte = static_cast<unsigned char>(s[0]);
        out += "\\x";
        out += hex[byte >> 4];
        out += hex[byte & 0xF];
        return 1;
    }
    if (cp == '\n') out += "\\n";
    else if (cp == '\t') out += "\\t";
    else if (cp == '\r') out += "\\r";
    else if (cp < 0x20 || cp == 0x7F) {
        out += "\\x";
        out += hex[cp >> 4];
        out += hex[cp & 0xF];
    } else if ((cp >= 0x80 && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029 || (cp >= 0x202A && cp <= 0x202E) ||
               (cp >= 0x2066 && cp <= 0x2069)) {
        out += "\\u";
        for (int shift = 12; shift >= 0; shift -= 4) out += hex[(cp >> shift) & 0xF];
    } else {
        out.append(s.data(), n);
    }
    return n;
}

CONVEYOR_DECL std::string printable(std::string_view s, std::size_t max)
{
    max = std::max<std::size_t>(max, 64);
    std::string out;
    std::size_t i = 0;
    while (i < s.size() && out.size() <= max) i += append_printable(out, s.substr(i));
    if (out.size() <= max) return out;

    // Too long: the start and the end, at most `max` bytes in all with the marker.
    const std::string marker_end = " (" + std::to_string(s.size()) + " bytes)";
    constexpr std::string_view ellipsis = "\xE2\x80\xA6"; // "…" in UTF-8
    const std::size_t room = max - ellipsis.size() - marker_end.size();
    const std::size_t head_room = room * 2 / 3, tail_room = room - head_room;
    std::string head;
    std::size_t head_end = 0;
    for (std::string one; head_end < s.size(); one.clear()) {
        const std::size_t n = append_printable(one, s.substr(head_end));
        if (head.size() + one.size() > head_room) break;
        head += one;
        head_end += n;
    }
    // The end: the characters of the last `tail_room` bytes (each shows as at least its own
    // size), less as many of the first of them as it takes to fit.
    std::size_t from = std::max(head_end, s.size() - std::min(s.size(), tail_room));
    for (int k = 0; k < 3 && from < s.size() && (static_cast<unsigned char>(s[from]) & 0xC0) == 0x80; ++k) ++from;
    std::size_t tail_size = 0;
    for (std::size_t j = from; j < s.size();) {
        std::string one;
        j += append_printable(one, s.substr(j));
        tail_size += one.size();
    }
    while (tail_size > tail_room) {
        std::string one;
        from += append_printable(one, s.substr(from));
        tail_size -= one.size();
    }
    out = std::move(head);
    out += ellipsis;
    while (from < s.size()) from += append_printable(out, s.substr(from));
    return out + marker_end;
}

CONVEYOR_DECL std::string redact_userinfo(std::string_view url)
{
    const auto at = url.rfind('@');
    if (at == std::string_view::npos) return std::string(url);
    // "scheme://" is kept when it is one: a letter, then letters, digits, '+', '-', '.'.
    std::size_t start = 0;
    const auto sep = url.find("://");
    if (sep != std::string_view::npos && sep > 0 && sep + 3 <= at) {
        const auto scheme = url.substr(0, sep);
        const auto is_alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
        const bool ok = is_alpha(scheme.front()) && std::all_of(scheme.begin(), scheme.end(), [&](char c) {
                            return is_alpha(c) || (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.';
                        });
        if (ok) start = sep + 3;
    }
    std::string out(url.substr(0, start));
    out += "***";
    out += url.substr(at);
    return out;
}

CONVEYOR_DECL std::string index_entry_problem(std::string_view entry, std::size_t max_bytes)
{
    if (entry.empty()) return "is empty";
    if (entry.size() > max_bytes) return "is longer than " + std::to_string(max_bytes) + " bytes";
    for (std::size_t i = 0; i < entry.size();) {
        char32_t cp = 0;
        const std::size_t n = utf8_sequence(entry.substr(i), cp);
        if (n == 0) {
            ++i; // not UTF-8: a path may hold any byte but NUL (S3 refuses such keys itself)
            continue;
        }
        if (cp == 0) return "holds a NUL byte";
        if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F)) return "holds a control character";
        i += n;
    }
    return {};
}

CONVEYOR_DECL std::string what_of(const std::exception_ptr& e)
{
    try {
        std::rethrow_exception(e);
    } catch (const std::exception& x) {
        return x.what();
    } catch (...) {
        return "unknown exception";
    }
}

CONVEYOR_DECL std::string skip_line(std::string_view stage, std::string_view key, const std::exception_ptr& e)
{
    std::string s(stage);
    s += ": ";
    if (!key.empty()) {
        s += key;
        s += ": ";
    }
    return s + what_of(e);
}

CONVEYOR_DECL std::string index_entry_name(std::size_t position, std::string_view entry)
{
    std::string s = "entry " + std::to_string(position);
    if (!entry.empty()) s += " \"" + printable(entry) + "\"";
    return s;
}

} // namespace detail

// Every part is shown through detail::printable: each may come from user input.
CONVEYOR_DECL std::string error::describe(std::error_code ec, const context& c)
{
    std::string s = "conveyor:";
    if (!c.stage.empty()) s += " stage '" + detail::printable(c.stage, detail::part_max) + "':";
    if (!c.where.empty()) s += " " + detail::printable(c.where, detail::part_max) + ":";
    // The key is worth saying unless the path already ends with it.
    // (As whole path components: "/data/11.jpg" does not end with the key "1.jpg".)
    const bool key_in_where =
        c.where.size() >= c.key.size() &&
        c.where.compare(c.where.size() - c.key.size(), c.key.size(), c.key) == 0 &&
        (c.where.size() == c.key.size() || c.where[c.where.size() - c.key.size() - 1] == '/');
    if (!c.key.empty() && !key_in_where) s += " item '" + detail::printable(c.key, detail::part_max) + "':";
    if (c.offset >= 0) s += " at byte " + std::to_string(c.offset) + ":";
    if (!c.detail.empty()) {
        s += " " + detail::printable(c.detail, detail::sentence_max);
        // The code's message adds nothing when the detail already says it, or when the
        // code only says that a user function failed.
        if (ec && ec != make_error_code(errc::stage_failed) && c.detail.find(ec.message()) == std::string::npos)
            s += " (" + ec.message() + ")";
    } else {
        s += " " + ec.message();
    }
    return s;
}

} // namespace conveyor

#endif
