// conveyor/http/impl/endpoint.ipp — endpoints: their Host header and URL, and parsing one
// from a URL (Boost.URL).
#ifndef CONVEYOR_HTTP_IMPL_ENDPOINT_IPP
#define CONVEYOR_HTTP_IMPL_ENDPOINT_IPP

#include <conveyor/http/endpoint.hpp>

#include <conveyor/core/error.hpp>

#include <boost/url/parse.hpp>
#include <boost/url/url_view.hpp>

#include <charconv>
#include <system_error>
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

CONVEYOR_DECL endpoint parse_endpoint(std::string_view url)
{
    std::string shown = conveyor::detail::redact_userinfo(url);
    const bool quote_parts = shown == url;
    auto fail = [&](std::string why) -> endpoint {
        throw conveyor::error(std::make_error_code(std::errc::invalid_argument),
                              {.stage = "http", .key = {}, .where = std::move(shown), .offset = -1, .detail = std::move(why)});
    };
    // "<what> 'part'" where the part may be shown, else just "the <what>".
    auto named = [&](const char* what, std::string_view part) {
        return quote_parts ? std::string(what) + " '" + std::string(part) + "'" : std::string("the ") + what;
    };
    auto r = boost::urls::parse_uri(url);
    if (!r) return fail("not a URL (" + r.error().message() + "); expected http://host[:port] or https://host[:port]");
    const boost::urls::url_view u = *r;
    endpoint e;
    const auto scheme = u.scheme_id();
    if (scheme == boost::urls::scheme::https) e.tls = true;
    else if (scheme != boost::urls::scheme::http) return fail(named("scheme", u.scheme()) + " is not http or https");
    if (!u.has_authority() || u.host().empty()) return fail("no host");
    // An '@' anywhere is refused with the user-info: "http://user:12/34@host" parses as host
    // "user", port 12 and path "/34@host", and would send half a secret as the path.
    if (u.has_userinfo() || url.find('@') != std::string_view::npos)
        return fail("credentials in the URL are not supported; use the credentials chain");
    if (u.has_query() || u.has_fragment()) return fail("an endpoint has no query or fragment");
    e.host = u.host_type() == boost::urls::host_type::ipv6 ? std::string(u.host_ipv6_address().to_string()) : std::string(u.host());
    if (u.has_port()) {
        // Boost.URL's port_number() wraps ports above 65535 ("99999" reads as 34463).
        const auto digits = u.port();
        unsigned long p = 0;
        const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), p);
        if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || p == 0 || p > 65535)
            return fail(named("port", digits) + " is not a port number (1 to 65535)");
        e.port = static_cast<std::uint16_t>(p);
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
