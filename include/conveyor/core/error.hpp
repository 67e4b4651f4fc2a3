// conveyor/core/error.hpp — the core module's error codes and the user-facing exception.
#ifndef CONVEYOR_CORE_ERROR_HPP
#define CONVEYOR_CORE_ERROR_HPP

#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>

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

/** The exception thrown to users.

    It carries an error code and says what failed and where: the stage, the item's key,
    the path or URL, and a byte offset where one applies. `what()` is a sentence for
    people, e.g. `conveyor: stage 'files': /data/x.jpg: No such file or directory`.
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
    static std::string describe(std::error_code ec, const context& c)
    {
        std::string s = "conveyor:";
        if (!c.stage.empty()) s += " stage '" + c.stage + "':";
        if (!c.where.empty()) s += " " + c.where + ":";
        // The key is worth saying unless the path already ends with it.
        // (As whole path components: "/data/11.jpg" does not end with the key "1.jpg".)
        const bool key_in_where =
            c.where.size() >= c.key.size() &&
            c.where.compare(c.where.size() - c.key.size(), c.key.size(), c.key) == 0 &&
            (c.where.size() == c.key.size() || c.where[c.where.size() - c.key.size() - 1] == '/');
        if (!c.key.empty() && !key_in_where) s += " item '" + c.key + "':";
        if (c.offset >= 0) s += " at byte " + std::to_string(c.offset) + ":";
        if (!c.detail.empty()) {
            s += " " + c.detail;
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
