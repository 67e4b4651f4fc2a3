// conveyor/s3/sigv4.hpp — AWS Signature Version 4: signed headers and presigned URLs.
#ifndef CONVEYOR_S3_SIGV4_HPP
#define CONVEYOR_S3_SIGV4_HPP

#include <conveyor/detail/config.hpp>

#include <conveyor/core/error.hpp> // what signing throws
#include <conveyor/s3/credentials.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>

// Declared here rather than included: Beast's header and OpenSSL's are for the definitions
// (impl/sigv4.ipp) alone. These are the very declarations of Boost.Beast 1.81 and OpenSSL 3.
namespace boost::beast::http {
enum class verb;
template <class Allocator>
class basic_fields;
using fields = basic_fields<std::allocator<char>>;
} // namespace boost::beast::http
struct evp_mac_ctx_st; // OpenSSL's EVP_MAC_CTX

/* How a request is signed (AWS's "Signature Version 4"), in four steps:

     canonical request   METHOD \n canonical URI \n canonical query \n canonical headers \n
                         \n signed headers \n payload hash
     string to sign      AWS4-HMAC-SHA256 \n 20150830T123600Z \n 20150830/region/service/aws4_request
                         \n hex(SHA-256(canonical request))
     signing key         HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region), service), "aws4_request")
     signature           hex(HMAC(signing key, string to sign))

   `conveyor::s3::sigv4` holds each step for any AWS service (AWS's own test suite is checked
   against it); `conveyor::s3::signer` puts them together the way S3 wants them. */

namespace conveyor::s3 {

/// The payload hash of a request whose body is not signed (S3 GETs, presigned URLs).
inline constexpr std::string_view unsigned_payload = "UNSIGNED-PAYLOAD";

/// The SHA-256 of `data` as 64 lowercase hex digits: the payload hash of a signed PUT.
CONVEYOR_DECL std::string sha256_hex(std::span<const std::byte> data);

/// The SHA-256 of the bytes of `data` as 64 lowercase hex digits.
CONVEYOR_DECL std::string sha256_hex(std::string_view data);

namespace detail {
struct mac_ctx_deleter {
    CONVEYOR_DECL void operator()(evp_mac_ctx_st* ctx) const noexcept;
};
} // namespace detail

/// The steps of Signature Version 4, usable for any AWS service.
namespace sigv4 {

/// The signing algorithm's name, as it appears in the string to sign and the Authorization header.
inline constexpr std::string_view algorithm = "AWS4-HMAC-SHA256";

/// The longest a presigned URL may stay valid (AWS refuses more): 7 days.
inline constexpr std::chrono::seconds max_presign_expiry{7 * 24 * 3600};

/** A request's time as SigV4 writes it.

    `amz_date()` is the `X-Amz-Date` value ("20150830T123600Z", UTC, whole seconds) and
    `date()` its first eight characters, the day of the credential scope. Times are taken
    to lie in years 0000 to 9999.

    @par Thread Safety
    @e Distinct @e objects: Safe.@n
    @e Shared @e objects: Safe.
*/
class timestamp {
public:
    /// The time `t`, truncated to the second.
    CONVEYOR_DECL explicit timestamp(std::chrono::system_clock::time_point t) noexcept;

    /// "YYYYMMDDTHHMMSSZ".
    std::string_view amz_date() const noexcept { return {text_.data(), text_.size()}; }
    /// "YYYYMMDD".
    std::string_view date() const noexcept { return {text_.data(), 8}; }
    /// The UTC day: what a signing key depends on.
    std::chrono::sys_days day() const noexcept { return day_; }

private:
    std::array<char, 16> text_{};
    std::chrono::sys_days day_{};
};

/** The credential scope: "YYYYMMDD/region/service/aws4_request".

    @param date The day, "YYYYMMDD" (see `timestamp::date`).
*/
CONVEYOR_DECL std::string credential_scope(std::string_view date, std::string_view region, std::string_view service);

/** The key that signs one day's requests to one region and service.

    Made by the HMAC chain kDate = HMAC("AWS4" + secret, date), kRegion = HMAC(kDate, region),
    kService = HMAC(kRegion, service), kSigning = HMAC(kService, "aws4_request"). Deriving it
    costs four HMACs, so `signer` makes one per day and keeps it. The key bytes are wiped
    when the object is destroyed; the secret itself is not kept.

    @par Thread Safety
    @e Distinct @e objects: Safe.@n
    @e Shared @e objects: Safe (every member is const).
*/
class signing_key {
public:
    /** Derives the key.

        @param secret_access_key The secret from the credentials.
        @param date The day, "YYYYMMDD".
        @param region The region, e.g. "us-east-1".
        @param service The service, e.g. "s3".
        @throws conveyor::error if OpenSSL cannot compute HMAC-SHA256 (its message never
                holds the secret).
    */
    CONVEYOR_DECL signing_key(std::string_view secret_access_key, std::string_view date, std::string_view region,
                std::string_view service);
    CONVEYOR_DECL ~signing_key();
    signing_key(const signing_key&) = delete;
    signing_key& operator=(const signing_key&) = delete;

    /// The day this key signs for, "YYYYMMDD".
    std::string_view date() const noexcept { return std::string_view(scope_).substr(0, 8); }
    /// The credential scope this key belongs to, "YYYYMMDD/region/service/aws4_request".
    const std::string& scope() const noexcept { return scope_; }
    /// kSigning itself (for tests against published values). As secret as the secret
    /// access key for its day, region and service: never log it.
    std::span<const unsigned char, 32> bytes() const noexcept { return key_; }

    /** The signature of `string_to_sign`: hex(HMAC-SHA256(key, string_to_sign)).

        @param out Receives the 64 lowercase hex digits.
    */
    CONVEYOR_DECL void sign(std::string_view string_to_sign, std::span<char, 64> out) const;

    /// The signature of `string_to_sign`, as 64 lowercase hex digits.
    CONVEYOR_DECL std::string sign(std::string_view string_to_sign) const;

private:
    std::array<unsigned char, 32> key_{};
    std::string scope_;
    // An HMAC context already keyed with key_: each signature starts from a copy of it,
    // which saves re-keying (two SHA-256 blocks) and OpenSSL's parameter lookups.
    std::unique_ptr<evp_mac_ctx_st, detail::mac_ctx_deleter> keyed_;
};

/// A header of the request to sign: its name in any case, its value as sent.
struct header {
    std::string_view name;
    std::string_view value;
};

/** What the canonical request is made of.

    Nothing here is copied: every view must outlive the call it is passed to.
*/
struct request {
    /// The method, upper case: "GET", "PUT"...
    std::string_view method;
    /** The path exactly as sent: percent-encoded once by the caller, starting with '/'.

        Without `normalize_path` (S3) it is signed as sent, escapes and all: encode keys
        once with RFC 3986's unreserved characters (`A-Z a-z 0-9 - . _ ~`) and '/' left as
        they are, as AWS's SDKs do. Only bytes that no path can carry on the wire (space,
        controls, non-ASCII, '"', '<', '>', '\', '^', '`', '{', '|', '}', and '%' that
        starts no escape) are percent-encoded, as a client would have to send them.
    */
    std::string_view path;
    /** The query as sent, without the '?' (may be empty). Parameters may come in any order
        and be percent-encoded or not: each name and value is decoded and encoded again
        with only the unreserved characters left bare, as S3 computes it. '+' is a plus
        sign, not a space; '%' that starts no escape is a literal '%'. */
    std::string_view query;
    /// Every header to sign, the Host header among them. Names repeated are joined by ','
    /// in their order here.
    std::span<const header> headers;
    /// Hex SHA-256 of the body, or `unsigned_payload`.
    std::string_view payload_hash;
    /** Whether the path is normalized first, as every AWS service but S3 wants: dot
        segments are resolved, empty segments dropped, and each segment is then encoded
        again as it stands, '%' included (so "%20" becomes "%2520"), which is what AWS
        calls double encoding. S3 does neither: leave false. */
    bool normalize_path = false;
};

/// A canonical request and the list of headers it signs.
struct canonical_request {
    /// The canonical request's text (lines joined by '\n', no trailing newline).
    std::string text;
    /// The signed headers: lower-case names, sorted, joined by ';' ("host;range;x-amz-date").
    std::string signed_headers;
};

/** Builds the canonical request of `r`.

    Header values are trimmed, and each run of white space inside (spaces, tabs, line
    breaks of folded values) becomes one space; header names are lower-cased and sorted.
    The query's parameters are sorted by encoded name, then by encoded value; a parameter
    without '=' has an empty value.

    @throws std::bad_alloc only.
*/
CONVEYOR_DECL canonical_request make_canonical_request(const request& r);

/// The same, appending to `text` and `signed_headers` (which callers may reuse).
CONVEYOR_DECL void write_canonical_request(const request& r, std::string& text, std::string& signed_headers);

/// The canonical URI of `path` (see `request::path` and `request::normalize_path`).
CONVEYOR_DECL std::string canonical_uri(std::string_view path, bool normalize_path = false);

/// The canonical query of `query` (see `request::query`).
CONVEYOR_DECL std::string canonical_query(std::string_view query);

/// The signed-headers list of `headers`: what `canonical_request::signed_headers` will be.
CONVEYOR_DECL std::string signed_header_names(std::span<const header> headers);

/** The string to sign:
    "AWS4-HMAC-SHA256\n" amz_date "\n" scope "\n" hex(SHA-256(canonical_request)).

    @param amz_date The request's time, "YYYYMMDDTHHMMSSZ" (see `timestamp::amz_date`).
    @param scope The credential scope (see `credential_scope`).
    @param canonical_request The canonical request's text.
*/
CONVEYOR_DECL std::string string_to_sign(std::string_view amz_date, std::string_view scope, std::string_view canonical_request);

/** The Authorization header's value:
    "AWS4-HMAC-SHA256 Credential=<id>/<scope>, SignedHeaders=<list>, Signature=<hex>". */
CONVEYOR_DECL std::string authorization(std::string_view access_key_id, std::string_view scope, std::string_view signed_headers,
                          std::string_view signature);

/** The query parameters a presigned URL carries before its signature, percent-encoded and
    in canonical order: X-Amz-Algorithm, X-Amz-Credential, X-Amz-Date, X-Amz-Expires,
    X-Amz-Security-Token (when `session_token` is not empty), X-Amz-SignedHeaders.

    Append them to the request's query, build the canonical request over the whole query,
    then append "&X-Amz-Signature=" and the signature.
*/
CONVEYOR_DECL std::string presign_parameters(std::string_view access_key_id, std::string_view scope, std::string_view amz_date,
                               std::chrono::seconds expires, std::string_view signed_headers,
                               std::string_view session_token = {});

} // namespace sigv4

/** Signs S3 requests with Signature Version 4.

    Holds the credentials, the region and the service, and a cache of signing keys: one
    key per UTC day (the current day's and the previous one's are kept, so requests signed
    around midnight by threads whose clocks disagree slightly do not derive keys in turns).

    For S3 the path is never normalized: it is signed as the caller encoded it. For any
    other service name (one that does not start with "s3") it is normalized as AWS's
    other services want (see `sigv4::request::normalize_path`).

    Anonymous credentials (an empty access key id) sign nothing: `sign` leaves requests
    as they are and `presign` returns the target unchanged.

    @par Thread Safety
    @e Distinct @e objects: Safe.@n
    @e Shared @e objects: Safe: every member is const, and the key cache is guarded, so
    one signer may serve any number of I/O threads at once. Copies share the key cache.
*/
class signer {
public:
    /** A signer for `region` and `service`.

        @param c The credentials; the secret never appears in any message or exception.
        @param region The region, e.g. "us-east-1" (MinIO and most S3-compatible stores
               accept "us-east-1").
        @param service The service name in the credential scope.
    */
    CONVEYOR_DECL signer(credentials c, std::string region, std::string service = "s3");

    signer(const signer&) = default;
    signer& operator=(const signer&) = default;

    /// The credentials requests are signed with.
    const credentials& creds() const noexcept { return creds_; }
    /// The region of the credential scope.
    const std::string& region() const noexcept { return region_; }
    /// The service of the credential scope.
    const std::string& service() const noexcept { return service_; }

    /** Signs a request in place, with the Authorization header.

        Sets X-Amz-Date, X-Amz-Content-Sha256 (= `payload_hash`), X-Amz-Security-Token
        when the credentials have a session token (and removes a stale one when they have
        none), and Authorization, replacing earlier values: a request may be signed again
        for a retry. Signs Host, Content-MD5, Content-Type, Range and every x-amz-* header
        present; any other header is sent unsigned.

        @param method The request's method.
        @param target The request target exactly as sent: the already-encoded path, then
               optionally '?' and the query (in any order, encoded either way; the
               canonical query is built from it by AWS's rules).
        @param headers The request's headers; the caller has set Host.
        @param payload_hash `unsigned_payload`, or the body's `sha256_hex` (S3 checks it).
        @param now The request's time.

        @throws conveyor::error (`std::errc::invalid_argument`) when there is no Host
                header; conveyor::error if OpenSSL fails.
    */
    CONVEYOR_DECL void sign(boost::beast::http::verb method, std::string_view target, boost::beast::http::fields& headers,
              std::string_view payload_hash = unsigned_payload,
              std::chrono::system_clock::time_point now = std::chrono::system_clock::now()) const;

    /** A presigned request target: `target` with X-Amz-Algorithm, X-Amz-Credential,
        X-Amz-Date, X-Amz-Expires, X-Amz-SignedHeaders=host, X-Amz-Security-Token (with a
        session token) and X-Amz-Signature added to its query. The payload is unsigned.

        @param method The method the URL will be used with.
        @param target The encoded path, optionally with '?' and a query.
        @param host The Host header the URL will be sent with ("host[:port]").
        @param expires How long the URL stays valid: 1 second to 7 days.
        @param now The time the validity starts from.

        @throws conveyor::error (`std::errc::invalid_argument`) when `expires` is out of
                range; conveyor::error if OpenSSL fails.
    */
    CONVEYOR_DECL std::string presign(boost::beast::http::verb method, std::string_view target, std::string_view host,
                        std::chrono::seconds expires,
                        std::chrono::system_clock::time_point now = std::chrono::system_clock::now()) const;

    /** The signing key for the day of `t`, from the cache or freshly derived (and then
        cached). The same day gives the same key object while it stays cached. */
    CONVEYOR_DECL std::shared_ptr<const sigv4::signing_key> key_for(std::chrono::system_clock::time_point t) const;

private:
    struct key_cache;

    CONVEYOR_DECL std::shared_ptr<const sigv4::signing_key> key_for_day(const sigv4::timestamp& ts) const;

    credentials creds_;
    std::string region_;
    std::string service_;
    bool normalize_path_ = false;
    std::shared_ptr<key_cache> cache_;
};

} // namespace conveyor::s3

#if CONVEYOR_HEADER_ONLY
#include <conveyor/s3/impl/sigv4.ipp>
#endif

#endif
