// conveyor/core/impl/location.ipp — parsing a URL or a path into a location: Boost.URL reads
// schemes and web URLs; S3 URLs and paths follow the rules of location.hpp.
#ifndef CONVEYOR_CORE_IMPL_LOCATION_IPP
#define CONVEYOR_CORE_IMPL_LOCATION_IPP

#include <conveyor/core/detail/ascii.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/core/location.hpp>

#include <boost/url/parse.hpp>
#include <boost/url/url_view.hpp>

#include <charconv>
#include <system_error>

namespace conveyor {
namespace detail {

CONVEYOR_DECL std::string_view url_scheme(std::string_view url) noexcept
{
    // "x:" is an absolute URI (with an empty hier-part) exactly when x is a scheme.
    const auto colon = url.find(':');
    if (colon == std::string_view::npos || colon == 0) return {};
    if (!boost::urls::parse_uri(url.substr(0, colon + 1))) return {};
    return url.substr(0, colon);
}

[[noreturn]] CONVEYOR_DECL void bad_url(std::string_view url, std::string why)
{
    throw conveyor::error(std::make_error_code(std::errc::invalid_argument),
                          {.stage = "url", .where = redact_userinfo(url), .detail = std::move(why)});
}

CONVEYOR_DECL std::string url_part(std::string_view url, std::string_view what, std::string_view part)
{
    if (redact_userinfo(url) != url) return "the " + std::string(what);
    return std::string(what) + " '" + std::string(part) + "'";
}

inline bool is_bucket_text(std::string_view b) noexcept
{
    return !b.empty() && b.size() <= 255 &&
           b.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == std::string_view::npos;
}

} // namespace detail

CONVEYOR_DECL location::location(std::string_view url)
{
    if (url.empty()) detail::bad_url(url, "an empty location names nothing");
    const std::string_view scheme = detail::url_scheme(url);
    std::string lower;
    for (char c : scheme) lower += detail::ascii_lower(c);
    const bool known = lower == "file" || lower == "s3" || lower == "http" || lower == "https";
    const bool slashes = !scheme.empty() && url.substr(scheme.size() + 1).starts_with("//");
    if (scheme.empty() || (!known && !slashes)) {
        // No scheme: a path (a ':' inside a file name is allowed, "a:b/c.tar").
        kind_ = location_kind::local;
        path_ = std::string(url);
        url_ = path_;
        return;
    }
    if (!known)
        detail::bad_url(url, "the scheme '" + std::string(scheme) + "://' is not one conveyor reads (file://, s3://, http://, https://)");
    if (!slashes) detail::bad_url(url, "'" + lower + ":' must be followed by '//' (" + lower + (lower == "s3" ? "://bucket/key)" : "://…)"));
    const std::string_view rest = url.substr(scheme.size() + 3);
    if (lower == "file") {
        kind_ = location_kind::local;
        if (rest.empty()) detail::bad_url(url, "a file:// URL needs a path");
        path_ = std::string(rest);
        url_ = path_;
    } else if (lower == "s3") {
        kind_ = location_kind::s3;
        const auto slash = rest.find('/');
        bucket_ = std::string(rest.substr(0, slash));
        if (slash != std::string_view::npos) key_ = std::string(rest.substr(slash + 1));
        if (bucket_.empty()) detail::bad_url(url, "no bucket (expected s3://bucket/key)");
        if (!detail::is_bucket_text(bucket_)) detail::bad_url(url, "not a bucket name (letters, digits, '.', '-' and '_')");
        url_ = "s3://" + std::string(rest);
    } else {
        kind_ = location_kind::http;
        tls_ = lower == "https";
        auto r = boost::urls::parse_uri(url);
        if (!r)
            detail::bad_url(url, "not a well-formed URL (" + r.error().message() +
                                     "): spaces, braces, non-ASCII text and a '%' not followed by two hex digits must be percent-encoded");
        const boost::urls::url_view u = *r;
        if (!u.has_authority() || u.host().empty()) detail::bad_url(url, "no host (expected " + lower + "://host/path)");
        // Boost.URL 1.81 ends a port at its first non-digit and reads the rest as a path
        // ("http://h:8o/x": port 8, path "o/x"): the authority must run to '/', '?' or '#'.
        if (const auto authority = rest.substr(0, rest.find_first_of("/?#")); u.encoded_authority() != authority)
            detail::bad_url(url, "not a well-formed URL: " + detail::url_part(url, "authority", authority) + " is not [user-info@]host[:port]");
        host_ = u.host_type() == boost::urls::host_type::ipv6 ? std::string(u.host_ipv6_address().to_string()) : std::string(u.host());
        if (u.has_port()) {
            // Boost.URL's port_number() wraps ports above 65535 ("99999" reads as 34463).
            const auto digits = u.port();
            unsigned long p = 0;
            const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), p);
            if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || p == 0 || p > 65535)
                detail::bad_url(url, detail::url_part(url, "port", digits) + " is not a port number (1 to 65535)");
            port_ = static_cast<std::uint16_t>(p);
        } else {
            port_ = tls_ ? 443 : 80;
        }
        target_ = u.encoded_path().empty() ? std::string("/") : std::string(u.encoded_path());
        if (u.has_query()) target_ += "?" + std::string(u.encoded_query());
        url_ = lower + "://" + std::string(rest);
    }
}

CONVEYOR_DECL location::location(std::string_view url, location_kind want) : location(url)
{
    if (kind_ == want) return;
    switch (want) {
    case location_kind::s3:
        detail::bad_url(url, "not an s3:// URL (expected s3://bucket/key)");
    case location_kind::http:
        detail::bad_url(url, "not an http:// or https:// URL");
    case location_kind::local:
        break;
    }
    detail::bad_url(url, "not a local path");
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
