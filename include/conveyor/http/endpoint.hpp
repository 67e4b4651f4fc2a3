// conveyor/http/endpoint.hpp — where an HTTP server is: scheme, host, port.
#ifndef CONVEYOR_HTTP_ENDPOINT_HPP
#define CONVEYOR_HTTP_ENDPOINT_HPP

#include <conveyor/core/location.hpp>
#include <conveyor/detail/config.hpp>

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
    CONVEYOR_DECL std::string host_header() const;

    /// "https://host[:port]" (no path): for messages and logs.
    CONVEYOR_DECL std::string url() const;

    friend bool operator==(const endpoint&, const endpoint&) = default;
};

/** The server of a web location: its scheme, host and port (`location::tls`, `host`,
    `port`), with no base path. Throws `conveyor::error` (`std::errc::invalid_argument`,
    stage "url", naming the location without its user-info) when `where` is not an
    `http://` or `https://` location, or when its URL holds an '@' (credentials belong in
    the credentials chain, and are never sent from a URL). */
CONVEYOR_DECL endpoint endpoint_of(const location& where);

/** Parses "http://host[:port][/path]" or "https://..." through `conveyor::location` (its
    rules: IPv6 hosts in brackets, ports 1 to 65535, the scheme in any case), the path
    becoming the base path. Throws `conveyor::error` (`std::errc::invalid_argument`, stage
    "url") naming the URL when it is not one, when it has a query or a fragment, or when it
    holds an '@' (credentials belong in the credentials chain). The URL is named through
    `conveyor::detail::redact_userinfo`, and when that hides anything no part of the URL
    is quoted in the reason: a URL with an '@' may hold a secret anywhere before it. */
CONVEYOR_DECL endpoint parse_endpoint(std::string_view url);

} // namespace conveyor::http

#if CONVEYOR_HEADER_ONLY
#include <conveyor/http/impl/endpoint.ipp>
#endif

#endif
