// conveyor/http/impl/endpoint.ipp — endpoints: their Host header and URL, and an endpoint
// from a location (the library's one URL parser).
#ifndef CONVEYOR_HTTP_IMPL_ENDPOINT_IPP
#define CONVEYOR_HTTP_IMPL_ENDPOINT_IPP

#include <conveyor/http/endpoint.hpp>

#include <conveyor/core/detail/ascii.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/core/location.hpp>

#include <string>
#include <utility>

namespace conveyor::http {

CONVEYOR_DECL std::string endpoint::host_header() const
{
    const bool bracket = host.find(':') != std::string::npos;
    std::string h = bracket ? "[" + host + "]" : host;
    if (port != (tls ? 443 : 80)) h += ":" + std::to_string(port);
    return h;
}

CONVEYOR_DECL std::string endpoint::url() const
{
    return (tls ? "https://" : "http://") + host_header() + base_path;
}

namespace detail {

/// Refuses a URL with an '@' anywhere, not only in its user-info: "http://user:12/34@host"
/// reads as host "user", port 12 and path "/34@host", and would send half a secret as the
/// path.
inline void refuse_credentials(std::string_view url)
{
    if (url.find('@') != std::string_view::npos)
        conveyor::detail::bad_url(url, "credentials in the URL are not supported; use the credentials chain");
}

} // namespace detail

CONVEYOR_DECL endpoint endpoint_of(const location& where)
{
    if (!where.is_http()) conveyor::detail::bad_url(where.url(), "not an http:// or https:// URL");
    detail::refuse_credentials(where.url());
    return endpoint{.tls = where.tls(), .host = where.host(), .port = where.port(), .base_path = {}};
}

CONVEYOR_DECL endpoint parse_endpoint(std::string_view url)
{
    // The scheme and the '@' first, in an endpoint's words; then the location's rules.
    const std::string_view scheme = conveyor::detail::url_scheme(url);
    if (scheme.empty()) conveyor::detail::bad_url(url, "not a URL; expected http://host[:port] or https://host[:port]");
    if (!conveyor::detail::iequals(scheme, "http") && !conveyor::detail::iequals(scheme, "https"))
        conveyor::detail::bad_url(url, conveyor::detail::url_part(url, "scheme", scheme) + " is not http or https");
    detail::refuse_credentials(url);
    const location where(url);
    // The target is validated: a '?' in it, or a '#' in the URL, can only start a query or
    // a fragment.
    if (where.target().find('?') != std::string::npos || where.url().find('#') != std::string::npos)
        conveyor::detail::bad_url(url, "an endpoint has no query or fragment");
    endpoint e = endpoint_of(where);
    std::string path = where.target();
    while (!path.empty() && path.back() == '/') path.pop_back();
    e.base_path = std::move(path);
    return e;
}

} // namespace conveyor::http

#endif
