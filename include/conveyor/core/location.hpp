// conveyor/core/location.hpp — where an object lives: a URL or a path, parsed once.
#ifndef CONVEYOR_CORE_LOCATION_HPP
#define CONVEYOR_CORE_LOCATION_HPP

#include <conveyor/detail/config.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace conveyor {

/// Which kind of storage serves a location.
enum class location_kind {
    local, ///< a path on this machine (a plain path or `file://…`)
    s3,    ///< an object in an S3-compatible store (`s3://bucket/key`)
    http,  ///< a resource on a web server (`http://…`, `https://…`)
};

/** A URL or a path, parsed once into what the stores need.

    The rules, the same for every caller:
    - the scheme is what RFC 3986 calls one (a letter, then letters, digits, '+', '-' and
      '.', before the first ':'), compared without regard to case (`S3://b/x` is S3,
      `FILE:///d` local);
    - `file://` followed by a path, and any text that does not start with a scheme, is a
      local path (`file://` taken off; the path is not percent-decoded). So is a text whose
      "scheme" is not one conveyor reads and is not followed by `//` (`a:b/c.tar`);
    - `s3://bucket/key`: the bucket is letters, digits, '.', '-' and '_' (S3's rules as
      relaxed by Ceph and old us-east-1 buckets); the key is taken as written (no
      percent-decoding, as the AWS CLI does: spaces, '?', '#' and any UTF-8 are part of it)
      and may be empty (`s3://bucket`, `s3://bucket/`: the bucket itself). An S3 URL is not
      an RFC 3986 URI, and is not read as one;
    - `http://…` and `https://…` are RFC 3986 URIs, read with Boost.URL, and sent as
      written, so what a server could not read is refused here: they need a host (a name,
      an IPv4 address, or an IPv6 address in brackets, `http://[::1]:8080/x`); a port, when
      written, is 1 to 65535 (`http://h:/x` and `http://h:99999/x` are errors, not the
      default port); spaces, braces, non-ASCII text and malformed '%' escapes must be
      percent-encoded (`%20`), and the path keeps its escapes as written (`target()`).
      User-info (`user:pass@`) is accepted here and hidden in every message; what connects
      (`http::endpoint_of`, `http::read_chunks`) refuses it;
    - a known scheme without its `//` (`s3:bucket/key`, a bare `s3:`), another scheme
      with `//` (`gs://…`), an empty text, a bucket that is not a bucket name, and a web URL
      that breaks the rules above are errors.

    Errors are `conveyor::error` (`std::errc::invalid_argument`, stage "url") naming the
    URL, with anything that could be user-info hidden (`detail::redact_userinfo`); when
    something was hidden, no part of the URL is quoted in the reason either.

    @par Thread Safety
    Distinct objects: safe. Shared objects: safe for const calls.
*/
class location {
public:
    /// Parses `url` (see the class). @throws conveyor::error naming `url`.
    CONVEYOR_DECL explicit location(std::string_view url);

    /** Parses `url` and requires it to be of kind `want`: e.g. `location(url,
        location_kind::s3)` for an API that takes S3 URLs only.
        @throws conveyor::error naming `url` when it is not one, saying what was expected. */
    CONVEYOR_DECL location(std::string_view url, location_kind want);

    location_kind kind() const noexcept { return kind_; }
    bool is_local() const noexcept { return kind_ == location_kind::local; }
    bool is_s3() const noexcept { return kind_ == location_kind::s3; }
    bool is_http() const noexcept { return kind_ == location_kind::http; }

    /** The location in one spelling per object, to store in lists and compare: the local
        path (no `file://`), `s3://bucket/key` with a lower-case scheme, or the web URL with
        a lower-case scheme. Two texts that name the same object this parser can tell apart
        give the same `url()`. */
    const std::string& url() const noexcept { return url_; }

    /// A local location's path (`file://` taken off); "" for other kinds.
    const std::string& path() const noexcept { return path_; }
    /// An S3 location's bucket; "" for other kinds.
    const std::string& bucket() const noexcept { return bucket_; }
    /// An S3 location's key as written (may be ""); "" for other kinds.
    const std::string& key() const noexcept { return key_; }

    /// A web location's host: a name (its '%' escapes decoded), an IPv4 address, or an
    /// IPv6 address without its brackets; "" for other kinds.
    const std::string& host() const noexcept { return host_; }
    /// A web location's port: the URL's, else 80 for http:// and 443 for https://; 0 for
    /// other kinds.
    std::uint16_t port() const noexcept { return port_; }
    /// True for an https:// location.
    bool tls() const noexcept { return tls_; }
    /// A web location's request target: its path as written ("/" when it has none) and
    /// "?query" when it has one (the fragment is not sent); "" for other kinds.
    const std::string& target() const noexcept { return target_; }

    /// True when the location names a folder or a prefix rather than one object: its text
    /// ends with '/' (an S3 location with an empty key is its bucket's prefix).
    CONVEYOR_DECL bool is_prefix() const noexcept;

    /// `url()` as messages and logs show it: user-info hidden, made printable.
    CONVEYOR_DECL std::string printable() const;

private:
    location_kind kind_ = location_kind::local;
    std::string url_;
    std::string path_;
    std::string bucket_;
    std::string key_;
    std::string host_;
    std::string target_;
    std::uint16_t port_ = 0;
    bool tls_ = false;
};

/// "local", "s3" or "http": for messages.
CONVEYOR_DECL const char* to_string(location_kind k) noexcept;

namespace detail {

/// The scheme of `url` as written, by RFC 3986's grammar (Boost.URL's), when a ':' follows
/// it; "" when the text starts with none. Shared by every parser of URLs in the library.
CONVEYOR_DECL std::string_view url_scheme(std::string_view url) noexcept;

/// Throws the error of a URL that cannot be read: `std::errc::invalid_argument`, stage
/// "url", naming `url` through `redact_userinfo`, with `why`.
[[noreturn]] CONVEYOR_DECL void bad_url(std::string_view url, std::string why);

/// "<what> '<part>'" when `url` holds nothing `redact_userinfo` would hide, else "the
/// <what>": a URL with an '@' may hold a secret anywhere before it, in any part.
CONVEYOR_DECL std::string url_part(std::string_view url, std::string_view what, std::string_view part);

} // namespace detail

} // namespace conveyor

#if CONVEYOR_HEADER_ONLY
#include <conveyor/core/impl/location.ipp>
#endif

#endif
