// conveyor/core/error.hpp — the core module's error codes and the user-facing exception.
#ifndef CONVEYOR_CORE_ERROR_HPP
#define CONVEYOR_CORE_ERROR_HPP

#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>

namespace conveyor {

/// Error codes of the core module (runtime, streams, stages).
enum class errc {
    /// The pipeline was cancelled (its range was destroyed or the runtime shut down).
    cancelled = 1,
    /// A stage was configured with an invalid option (e.g. a batch size of zero).
    invalid_argument,
    /// A range was read after it was moved from.
    stream_ended,
    /// A stage's user function threw; the nested exception says what it threw.
    stage_failed,
};

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

/// The category of `conveyor::errc`.
inline const std::error_category& core_category() noexcept
{
    static const detail::core_category_impl cat;
    return cat;
}

/// Makes a `std::error_code` from a core error value.
inline std::error_code make_error_code(errc e) noexcept
{
    return {static_cast<int>(e), core_category()};
}

namespace detail {

/** The length in bytes of the UTF-8 sequence that starts `s` (not empty), or 0 when `s`
    does not start with a valid one (a stray continuation byte, an overlong form, a
    surrogate, a code point above U+10FFFF, a cut sequence); `cp` receives the code point. */
inline std::size_t utf8_sequence(std::string_view s, char32_t& cp) noexcept
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

/** Appends the first character of `s` (a UTF-8 sequence, or one byte that is not part of
    one) to `out` as it should appear in a message; returns how many bytes of `s` it took.
    Control characters (C0, DEL, C1), the Unicode line separators and the bidirectional
    overrides and isolates, which a terminal or an editor would act on or hide, are
    escaped; so is each byte that is not valid UTF-8. Backslashes are not: a message is
    for people, and escaping twice must change nothing. */
inline std::size_t append_printable(std::string& out, std::string_view s)
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

/// How long a key, path or URL may be in a message before `printable` shortens it: they
/// are rarely longer.
inline constexpr std::size_t part_max = 200;
/// The same for a sentence that may itself quote such parts (an error's detail, a line
/// that repeats an error's what()).
inline constexpr std::size_t sentence_max = 1000;

/** `s` made fit to repeat in a message or a log line: what `append_printable` escapes is
    escaped, and when the result would be longer than `max` bytes, only its start and its
    end are kept, around "…", followed by the length of `s` in bytes:
    `first part…last part (50000000 bytes)`.

    Every message and log line that repeats a user-supplied path, key, URL or text goes
    through this one function (`conveyor::error` does it for its key, where and detail),
    so a NUL cannot cut a message short, a newline cannot forge a log line, and a 50 MB
    key does not make a 50 MB message. A result of at most `max` bytes is returned as it
    is: applying it twice changes nothing. */
inline std::string printable(std::string_view s, std::size_t max = part_max)
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

/** `url` with everything that could be user-info ("user:secret@") replaced by "***", for
    messages and logs. A secret may hold any character, '/', '?', '#' and '@' included, so
    the URL's own syntax cannot tell where it ends: everything from the start (after
    "scheme://" when the URL starts with one) up to the last '@' is hidden. This hides
    more than the user-info when a path or query holds an '@'; it never hides less.
    Every message that shows a URL given by a user shows it through this function. */
inline std::string redact_userinfo(std::string_view url)
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

/** Why `entry`, an entry of an index (a path or an object key that a user supplied), can
    be neither ("is empty", "is longer than 1024 bytes", "holds a NUL byte", "holds a
    control character"), or "" when it can be. A control character in a path or a key is
    never meant (the index is corrupt or hostile) and cannot be shown as it is; a NUL would
    end the path at the system call. The file and S3 index readers both apply this rule,
    then their own (a path stays below its root; S3 takes any other UTF-8 in a key). */
inline std::string index_entry_problem(std::string_view entry, std::size_t max_bytes)
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

/** Entry `position` of an index, for messages: `entry 3 "a/b.jpg"` (shown with
    `printable`), or `entry 3` when it is empty. */
inline std::string index_entry_name(std::size_t position, std::string_view entry)
{
    std::string s = "entry " + std::to_string(position);
    if (!entry.empty()) s += " \"" + printable(entry) + "\"";
    return s;
}

} // namespace detail

/** The exception thrown to users.

    It carries an error code and says what failed and where: the stage, the item's key,
    the path or URL, and a byte offset where one applies. `what()` is a sentence for
    people, e.g. `conveyor: stage 'files': /data/x.jpg: No such file or directory`, in
    which every part is escaped and shortened by `detail::printable` (the parts may come
    from users, files or servers); the accessors return the parts as they were given.
*/
class error : public std::system_error {
public:
    /// What failed and where; every part but `code` is optional.
    struct context {
        std::string stage;     ///< name of the stage or source that failed
        std::string key;       ///< the item's key (sample key, object key), if known
        std::string where;     ///< path or URL, if known
        std::int64_t offset = -1; ///< byte offset in `where`, or -1
        std::string detail;    ///< further explanation
    };

    error(std::error_code ec, context ctx)
        : std::system_error(ec), what_(describe(ec, ctx)), ctx_(std::move(ctx))
    {
    }

    /// One sentence: what failed, where, and why.
    const char* what() const noexcept override { return what_.c_str(); }

    /// The stage that failed ("" if unknown).
    const std::string& stage() const noexcept { return ctx_.stage; }
    /// The key of the item being processed ("" if unknown).
    const std::string& key() const noexcept { return ctx_.key; }
    /// The path or URL involved ("" if none).
    const std::string& where() const noexcept { return ctx_.where; }
    /// The byte offset in `where()`, or -1.
    std::int64_t offset() const noexcept { return ctx_.offset; }
    /// All of the context.
    const context& ctx() const noexcept { return ctx_; }

private:
    std::string what_;
    // Every part is shown through detail::printable: each may come from user input.
    static std::string describe(std::error_code ec, const context& c)
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

    context ctx_;
};

/// Converts a Boost error code (what Asio reports) to a std one, keeping the message.
inline std::error_code to_std_error(const boost::system::error_code& ec)
{
    return static_cast<std::error_code>(ec);
}

} // namespace conveyor

template <>
struct std::is_error_code_enum<conveyor::errc> : std::true_type {};

#endif
