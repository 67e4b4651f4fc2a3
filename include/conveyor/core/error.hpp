// conveyor/core/error.hpp — the core module's error codes and the user-facing exception.
#ifndef CONVEYOR_CORE_ERROR_HPP
#define CONVEYOR_CORE_ERROR_HPP

#include <conveyor/detail/config.hpp>

#include <boost/system/error_code.hpp>

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

/// The category of `conveyor::errc`.
CONVEYOR_DECL const std::error_category& core_category() noexcept;

/// Makes a `std::error_code` from a core error value.
inline std::error_code make_error_code(errc e) noexcept
{
    return {static_cast<int>(e), core_category()};
}

namespace detail {

/** The length in bytes of the UTF-8 sequence that starts `s` (not empty), or 0 when `s`
    does not start with a valid one (a stray continuation byte, an overlong form, a
    surrogate, a code point above U+10FFFF, a cut sequence); `cp` receives the code point. */
CONVEYOR_DECL std::size_t utf8_sequence(std::string_view s, char32_t& cp) noexcept;

/** Appends the first character of `s` (a UTF-8 sequence, or one byte that is not part of
    one) to `out` as it should appear in a message; returns how many bytes of `s` it took.
    Control characters (C0, DEL, C1), the Unicode line separators and the bidirectional
    overrides and isolates, which a terminal or an editor would act on or hide, are
    escaped; so is each byte that is not valid UTF-8. Backslashes are not: a message is
    for people, and escaping twice must change nothing. */
CONVEYOR_DECL std::size_t append_printable(std::string& out, std::string_view s);

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
CONVEYOR_DECL std::string printable(std::string_view s, std::size_t max = part_max);

/** `url` with everything that could be user-info ("user:secret@") replaced by "***", for
    messages and logs. A secret may hold any character, '/', '?', '#' and '@' included, so
    the URL's own syntax cannot tell where it ends: everything from the start (after
    "scheme://" when the URL starts with one) up to the last '@' is hidden. This hides
    more than the user-info when a path or query holds an '@'; it never hides less.
    Every message that shows a URL given by a user shows it through this function. */
CONVEYOR_DECL std::string redact_userinfo(std::string_view url);

/** Why `entry`, an entry of an index (a path or an object key that a user supplied), can
    be neither ("is empty", "is longer than 1024 bytes", "holds a NUL byte", "holds a
    control character"), or "" when it can be. A control character in a path or a key is
    never meant (the index is corrupt or hostile) and cannot be shown as it is; a NUL would
    end the path at the system call. The file and S3 index readers both apply this rule,
    then their own (a path stays below its root; S3 takes any other UTF-8 in a key). */
CONVEYOR_DECL std::string index_entry_problem(std::string_view entry, std::size_t max_bytes);

/// The message of the exception `e` holds ("unknown exception" for what is not a
/// std::exception), for the skip log.
CONVEYOR_DECL std::string what_of(const std::exception_ptr& e);

/// The skip log's line for an item that `stage` left out because of `e`:
/// "stage: key: message", without the key when the item has none.
CONVEYOR_DECL std::string skip_line(std::string_view stage, std::string_view key, const std::exception_ptr& e);

/** Entry `position` of an index, for messages: `entry 3 "a/b.jpg"` (shown with
    `printable`), or `entry 3` when it is empty. */
CONVEYOR_DECL std::string index_entry_name(std::size_t position, std::string_view entry);

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
    CONVEYOR_DECL static std::string describe(std::error_code ec, const context& c);

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

#if CONVEYOR_HEADER_ONLY
#include <conveyor/core/impl/error.ipp>
#endif

#endif
