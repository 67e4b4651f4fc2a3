// conveyor/core/impl/location.ipp — parsing a URL or a path into a location.
#ifndef CONVEYOR_CORE_IMPL_LOCATION_IPP
#define CONVEYOR_CORE_IMPL_LOCATION_IPP

#include <conveyor/core/detail/ascii.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/core/location.hpp>

#include <system_error>

namespace conveyor {
namespace detail {

[[noreturn]] inline void bad_location(std::string_view url, std::string why)
{
    throw conveyor::error(std::make_error_code(std::errc::invalid_argument),
                          {.stage = "url", .where = redact_userinfo(url), .detail = std::move(why)});
}

/// The length of `url`'s scheme name (RFC 3986: a letter, then letters, digits, '+', '-'
/// and '.') when a ':' follows it, else 0.
inline std::size_t scheme_length(std::string_view url) noexcept
{
    auto letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
    if (url.empty() || !letter(url[0])) return 0;
    std::size_t i = 1;
    while (i < url.size() && (letter(url[i]) || (url[i] >= '0' && url[i] <= '9') || url[i] == '+' || url[i] == '-' || url[i] == '.')) ++i;
    return i < url.size() && url[i] == ':' ? i : 0;
}

inline bool is_bucket_text(std::string_view b) noexcept
{
    return !b.empty() && b.size() <= 255 &&
           b.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == std::string_view::npos;
}

} // namespace detail

CONVEYOR_DECL location::location(std::string_view url)
{
    if (url.empty()) detail::bad_location(url, "an empty location names nothing");
    const std::size_t n = detail::scheme_length(url);
    const std::string_view scheme = url.substr(0, n);
    const bool known = n > 0 && (detail::iequals(scheme, "file") || detail::iequals(scheme, "s3") ||
                                 detail::iequals(scheme, "http") || detail::iequals(scheme, "https"));
    const bool slashes = n > 0 && url.substr(n + 1).starts_with("//");
    if (n == 0 || (!known && !slashes)) {
        // No scheme: a path (a ':' inside a file name is allowed, "a:b/c.tar").
        kind_ = location_kind::local;
        path_ = std::string(url);
        url_ = path_;
        return;
    }
    if (!known)
        detail::bad_location(url, "the scheme '" + std::string(scheme) + "://' is not one conveyor reads (file://, s3://, http://, https://)");
    std::string lower;
    for (char c : scheme) lower += detail::ascii_lower(c);
    if (!slashes) detail::bad_location(url, "'" + lower + ":' must be followed by '//' (" + lower + (lower == "s3" ? "://bucket/key)" : "://…)"));
    const std::string_view rest = url.substr(n + 3);
    if (lower == "file") {
        kind_ = location_kind::local;
        if (rest.empty()) detail::bad_location(url, "a file:// URL needs a path");
        path_ = std::string(rest);
        url_ = path_;
    } else if (lower == "s3") {
        kind_ = location_kind::s3;
        const auto slash = rest.find('/');
        bucket_ = std::string(rest.substr(0, slash));
        if (slash != std::string_view::npos) key_ = std::string(rest.substr(slash + 1));
        if (bucket_.empty()) detail::bad_location(url, "no bucket (expected s3://bucket/key)");
        if (!detail::is_bucket_text(bucket_)) detail::bad_location(url, "not a bucket name (letters, digits, '.', '-' and '_')");
        url_ = "s3://" + std::string(rest);
    } else {
        kind_ = location_kind::http;
        const auto end = rest.find_first_of("/?#");
        if (rest.substr(0, end).empty()) detail::bad_location(url, "a web URL needs a host (" + lower + "://host/path)");
        url_ = lower + "://" + std::string(rest);
    }
}

CONVEYOR_DECL location::location(std::string_view url, location_kind want) : location(url)
{
    if (kind_ == want) return;
    switch (want) {
    case location_kind::s3:
        detail::bad_location(url, "not an s3:// URL (expected s3://bucket/key)");
    case location_kind::http:
        detail::bad_location(url, "not an http:// or https:// URL");
    case location_kind::local:
        break;
    }
    detail::bad_location(url, "not a local path");
}

CONVEYOR_DECL bool location::is_prefix() const noexcept
{
    return url_.ends_with('/') || (kind_ == location_kind::s3 && key_.empty());
}

CONVEYOR_DECL std::string location::printable() const
{
    return detail::printable(kind_ == location_kind::local ? url_ : detail::redact_userinfo(url_));
}

CONVEYOR_DECL const char* to_string(location_kind k) noexcept
{
    switch (k) {
    case location_kind::local:
        return "local";
    case location_kind::s3:
        return "s3";
    case location_kind::http:
        return "http";
    }
    return "unknown";
}

} // namespace conveyor

#endif
