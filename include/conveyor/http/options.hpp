// conveyor/http/options.hpp — the HTTP client's settings and time limits (a light header:
// the S3 client's options hold them without the client and Beast).
#ifndef CONVEYOR_HTTP_OPTIONS_HPP
#define CONVEYOR_HTTP_OPTIONS_HPP

#include <conveyor/detail/config.hpp>

#include <chrono>
#include <optional>
#include <cstddef>
#include <string>
#include <system_error>
#include <vector>

namespace conveyor::http {

/** How long a request may take. Zero means "no limit" for every field.

    Each expiry has its own error code (`errc::connect_timeout`...), so a message says
    which one struck; `timeout_name` names it with its value, for messages.

    The defaults let a caller that retries (the S3 client tries a request at most three
    times when each attempt times out) report an endpoint that accepts and never answers,
    one that stalls mid-body, or one that cannot be reached, within a minute. */
struct timeouts {
    /// Resolving the host (first use on a lane only), connecting and the TLS handshake.
    std::chrono::milliseconds connect{10'000};
    /// From the request being written until the response's header has arrived.
    std::chrono::milliseconds first_byte{10'000};
    /// Longest pause with no byte moving, while writing the request or reading the body.
    std::chrono::milliseconds idle{15'000};
    /** The whole call, from its start to its end, whatever happens in between: waiting for
        a free connection, connecting, the request and its response, and, for a caller that
        retries (the S3 client), every attempt and the backoff between them. For `async_send`
        alone, the whole `async_send` (its one resend on a fresh connection included). 0: no
        limit. */
    std::chrono::milliseconds total{0};
    /** Each attempt alone: one `async_send`, waiting for a free connection included (a caller
        that retries starts a new one for each attempt). 0: no limit. */
    std::chrono::milliseconds attempt{0};
};

/** Which limit of `t` the error `ec` stands for, with its value, for messages:
    "first byte timeout (10 s)", "total timeout (300 ms)"; "" when `ec` is not one of
    the timeout codes of `errc`. */
CONVEYOR_DECL std::string timeout_name(std::error_code ec, const timeouts& t);

/// Settings of a `client`.
struct client_options {
    /// Most connections to the endpoint, over all lanes. Each lane may open
    /// ceil(max_connections / lanes) of them (at least one); further requests on a lane
    /// wait, first come first served, for one of its connections.
    std::size_t max_connections = 64;
    /// Most idle kept-alive connections to the endpoint, over all lanes: each lane keeps
    /// ceil(max_idle / lanes) of them (0: none, every connection is closed after its
    /// response). A connection that comes back to a lane at its cap, with no request
    /// waiting for it, replaces the lane's least recently used idle one, which is closed.
    /// It bites only below `max_connections`: after a burst, it gives the server back the
    /// connections a steady load does not need, at the cost of opening them again at the
    /// next burst. Unset (the default): `max_connections`, so that a steady load never
    /// churns connections whatever `max_connections` is raised to.
    std::optional<std::size_t> max_idle;
    /** IP addresses to connect to instead of the ones the endpoint's host resolves to
        (curl's `--resolve`), e.g. {"10.0.0.5", "10.0.0.6", "::1"}: the host still names
        the server in `Host`, SNI and the certificate check. Empty: the host is resolved
        (or used as is when it is an address). As with resolved addresses, new connections
        take them in turn, and one that refuses or fails to connect gives way to the next. */
    std::vector<std::string> addresses;
    /// Time limits of each request.
    http::timeouts timeouts;
    /// Verify the server's certificate chain and that it names the endpoint's host.
    bool verify_tls = true;
    /// A PEM file of trusted certificates. With `ca_path`, both are used; with neither,
    /// the system's default verify paths.
    std::string ca_file;
    /// A directory of trusted certificates in OpenSSL's hashed layout (`c_rehash`).
    std::string ca_path;
    /// The `User-Agent` header sent unless the request has one ("" sends none).
    std::string user_agent = "conveyor";
};

} // namespace conveyor::http

#if CONVEYOR_HEADER_ONLY
#include <conveyor/http/impl/options.ipp>
#endif

#endif
