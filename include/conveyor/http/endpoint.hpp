// conveyor/http/endpoint.hpp — where an HTTP server is: scheme, host, port.
#ifndef CONVEYOR_HTTP_ENDPOINT_HPP
#define CONVEYOR_HTTP_ENDPOINT_HPP

#include <conveyor/core/error.hpp>

#include <boost/url/parse.hpp>
#include <boost/url/url_view.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace conveyor::http {

/** An HTTP(S) server: what a connection pool connects to.

    `host` is a name or an address as written in the URL (IPv6 without brackets);
    `port` is always set (80 or 443 when the URL has none). `base_path` is the URL's path
    without a trailing slash ("" for most endpoints); S3 path-style targets go below it.
*/
struct endpoint {
    bool tls = false;
    std::string host;
    std::uint16_t port = 0;
    std::string base_path;

    /// The value of a `Host` header for this endpoint: the port is left out when it is the
    /// scheme's default, as clients and signers expect.
    std::string host_header() const
    {
        const bool bracket = host.find(':') != std::string::npos;
        std::string h = bracket ? "[" + host + "]" : host;
        if (port != (tls ? 443 : 80)) h += ":" + std::to_string(port);
        return h;
    }

    /// "https://host[:port]" (no path): for messages and logs.
    std::string url() const { return (tls ? "https://" : "http://") + host_header() + base_path; }

    friend bool operator==(const endpoint&, const endpoint&) = default;
};

/** Parses "http://host[:port][/path]" or "https://...". Throws `conveyor::error` with
    `std::errc::invalid_argument` naming the URL when it is not one. */
inline endpoint parse_endpoint(std::string_view url)
{
    auto fail = [&](std::string why) -> endpoint {
        // A URL may carry "user:secret@": never repeat that part.
        std::string shown(url);
        const auto scheme_end = shown.find("://");
        const auto at = shown.find('@', scheme_end == std::string::npos ? 0 : scheme_end + 3);
        const auto slash = shown.find('/', scheme_end == std::string::npos ? 0 : scheme_end + 3);
        if (scheme_end != std::string::npos && at != std::string::npos && (slash == std::string::npos || at < slash))
            shown.replace(scheme_end + 3, at - scheme_end - 3, "***");
        throw conveyor::error(std::make_error_code(std::errc::invalid_argument),
                              {.stage = "http", .key = {}, .where = std::move(shown), .offset = -1, .detail = std::move(why)});
    };
    auto r = boost::urls::parse_uri(url);
    if (!r) return fail("not a URL (" + r.error().message() + "); expected http://host[:port] or https://host[:port]");
    const boost::urls::url_view u = *r;
    endpoint e;
    const auto scheme = u.scheme_id();
    if (scheme == boost::urls::scheme::https) e.tls = true;
    else if (scheme != boost::urls::scheme::http) return fail("scheme '" + std::string(u.scheme()) + "' is not http or https");
    if (!u.has_authority() || u.host().empty()) return fail("no host");
    if (u.has_userinfo()) return fail("credentials in the URL are not supported; use the credentials chain");
    if (u.has_query() || u.has_fragment()) return fail("an endpoint has no query or fragment");
    e.host = u.host_type() == boost::urls::host_type::ipv6 ? std::string(u.host_ipv6_address().to_string()) : std::string(u.host());
    if (u.has_port()) {
        const auto p = u.port_number();
        if (p == 0) return fail("port '" + std::string(u.port()) + "' is not a port number");
        e.port = p;
    } else {
        e.port = e.tls ? 443 : 80;
    }
    std::string path(u.encoded_path());
    while (!path.empty() && path.back() == '/') path.pop_back();
    e.base_path = std::move(path);
    return e;
}

} // namespace conveyor::http

#endif
