// conveyor/s3/provider.hpp — temporary credentials from where training runs: the EC2
// instance metadata service, the container credentials endpoint (ECS, EKS Pod Identity)
// and STS for a web-identity token (EKS service accounts); and the cache that refreshes
// them before they expire.
#ifndef CONVEYOR_S3_PROVIDER_HPP
#define CONVEYOR_S3_PROVIDER_HPP

#include <conveyor/detail/config.hpp>

#include <conveyor/http/endpoint.hpp>
#include <conveyor/s3/credentials.hpp>

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace conveyor {
namespace asio = boost::asio;
class runtime;
} // namespace conveyor

namespace conveyor::s3 {

/// Credentials and the time they stop being valid (none: they do not expire).
struct timed_credentials {
    credentials creds;
    std::optional<std::chrono::system_clock::time_point> expiration;
};

/** A source of temporary credentials, asked again before they expire.

    @par Thread Safety
    `async_fetch` may run on any of the runtime's I/O threads, one call at a time (the
    `credentials_cache` that owns a provider never overlaps two fetches).
*/
class credentials_provider {
public:
    virtual ~credentials_provider() = default;

    /// What it is and where it asks, for messages and logs; never a secret or a token.
    virtual std::string name() const = 0;

    /** Fetches credentials; must be awaited on one of `rt`'s I/O threads. Returns nullopt
        when the source is not there at all (no metadata service answers on this machine):
        the chain then ends in anonymous access. Throws `conveyor::error`
        (`errc::credentials_failed`, or a transport error's code) naming the provider
        when it answers with an error or with something that holds no credentials. */
    virtual asio::awaitable<std::optional<timed_credentials>> async_fetch(runtime& rt) = 0;
};

/// Settings of the EC2 instance metadata provider.
struct instance_metadata_options {
    /// The service: `AWS_EC2_METADATA_SERVICE_ENDPOINT`, else http://169.254.169.254
    /// (http://[fd00:ec2::254] with `AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE=IPv6`).
    http::endpoint endpoint{.tls = false, .host = "169.254.169.254", .port = 80, .base_path = ""};
    /// Each request's time limit (`AWS_METADATA_SERVICE_TIMEOUT`, seconds; 1 s as the SDKs):
    /// short, so that a machine without the service is not held up.
    std::chrono::milliseconds timeout{1000};
    /// Attempts per request (`AWS_METADATA_SERVICE_NUM_ATTEMPTS`; 1 as the SDKs).
    unsigned attempts = 1;
    /// IMDSv1 (no session token) where the service refuses the token request (403, 404,
    /// 405); false with `AWS_EC2_METADATA_V1_DISABLED=true`.
    bool allow_v1 = true;
};

/** The EC2 instance metadata service (IMDSv2): a session token (`PUT /latest/api/token`,
    6 hours, kept and renewed), the instance profile's role name, then its credentials
    JSON (`AccessKeyId`, `SecretAccessKey`, `Token`, `Expiration`, `Code`). A service that
    does not answer at all (not an EC2 instance) gives nullopt. */
CONVEYOR_DECL std::shared_ptr<credentials_provider> instance_metadata_provider(instance_metadata_options o = {});

/// Settings of the container credentials provider.
struct container_options {
    /// The URL: http://169.254.170.2 + `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`, or
    /// `AWS_CONTAINER_CREDENTIALS_FULL_URI` (https, or http to a loopback address or to
    /// ECS's and EKS's link-local hosts 169.254.170.2, 169.254.170.23, fd00:ec2::23).
    std::string url;
    /// The `Authorization` header: the file's contents, read again at each fetch (EKS Pod
    /// Identity rotates it; `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE`), else `token`
    /// (`AWS_CONTAINER_AUTHORIZATION_TOKEN`), else none.
    std::string token_file;
    std::string token;
    std::chrono::milliseconds timeout{2000};
    unsigned attempts = 3;
};

/** The container credentials endpoint of ECS tasks and EKS Pod Identity: a GET whose JSON
    has `AccessKeyId`, `SecretAccessKey`, `Token` and `Expiration`. Throws
    `conveyor::error` (`std::errc::invalid_argument`) at once for a URL it may not use. */
CONVEYOR_DECL std::shared_ptr<credentials_provider> container_provider(container_options o);

/// Settings of the web-identity provider.
struct web_identity_options {
    /// The token (`AWS_WEB_IDENTITY_TOKEN_FILE`), read again at each fetch: Kubernetes
    /// rotates it.
    std::string token_file;
    /// `AWS_ROLE_ARN`.
    std::string role_arn;
    /// `AWS_ROLE_SESSION_NAME`; else "conveyor-" and the time in milliseconds.
    std::string session_name;
    /// STS: `AWS_ENDPOINT_URL_STS`, `AWS_ENDPOINT_URL`, the profile's `sts` /
    /// `endpoint_url`, else https://sts.<region>.amazonaws.com (https://sts.amazonaws.com
    /// with `AWS_STS_REGIONAL_ENDPOINTS=legacy`).
    http::endpoint sts;
    std::chrono::milliseconds timeout{5000};
    unsigned attempts = 3;
};

/** STS `AssumeRoleWithWebIdentity` (unsigned: the token is the proof) for a role, with the
    token in a file: EKS's IAM roles for service accounts. Throws `conveyor::error`
    naming the file when the token cannot be read, and STS's code and message (never the
    token) when STS refuses it. */
CONVEYOR_DECL std::shared_ptr<credentials_provider> web_identity_provider(web_identity_options o);

/// Settings of the assume-role provider.
struct assume_role_options {
    std::string role_arn;        ///< the profile's `role_arn`
    std::string session_name;    ///< `role_session_name`; else "conveyor-" and the time in milliseconds
    std::string external_id;     ///< `external_id`, if the role's trust policy asks for one
    std::chrono::seconds duration{0}; ///< `duration_seconds`; 0: STS's default (an hour)
    std::string region = "us-east-1"; ///< the signature's region
    http::endpoint sts;          ///< as for `web_identity_options::sts`
    std::chrono::milliseconds timeout{5000};
    unsigned attempts = 3;
};

/** STS `AssumeRole`, signed (SigV4, service "sts") with the source credentials: `source`'s
    when given (fetched again for each call: they may be temporary themselves, as with a
    chain of roles, a web identity or the container endpoint), else `source_creds`. */
CONVEYOR_DECL std::shared_ptr<credentials_provider> assume_role_provider(assume_role_options o, credentials source_creds,
                                                                         std::shared_ptr<credentials_provider> source = nullptr);

/// Settings of the credential-process provider.
struct process_options {
    std::string command; ///< the profile's `credential_process`: a program and its arguments,
                         ///< split as a POSIX shell would (quotes, backslashes), run without one
    std::string profile; ///< for messages
    std::chrono::milliseconds timeout{60'000};
};

/** Runs the profile's `credential_process` and reads the JSON it prints: `Version` 1,
    `AccessKeyId`, `SecretAccessKey`, `SessionToken` and `Expiration` (both optional; with
    no `Expiration` the credentials do not expire). A command that fails, prints something
    else or outlives the timeout is an error naming the profile, the program and its exit
    status, with the first line of what it wrote to stderr. */
CONVEYOR_DECL std::shared_ptr<credentials_provider> process_provider(process_options o);

/** Parses an ISO 8601 UTC time as these services send it: "2026-11-28T07:00:00Z", with or
    without fractional seconds, "Z" or "+00:00". nullopt for anything else. */
CONVEYOR_DECL std::optional<std::chrono::system_clock::time_point> parse_iso8601(std::string_view text) noexcept;

/// When temporary credentials are fetched again.
struct refresh_windows {
    /// Refresh in the background this long before they expire, while requests go on with
    /// the current ones (15 minutes, as the AWS SDKs)...
    std::chrono::seconds advisory{15 * 60};
    /// ... and make requests wait for new ones this long before (10 minutes).
    std::chrono::seconds mandatory{10 * 60};
    /// For credentials that live shorter than 4 times `advisory`, the windows are half and
    /// a quarter of their lifetime instead, so that short-lived ones are still used.
};

} // namespace conveyor::s3

#if CONVEYOR_HEADER_ONLY
#include <conveyor/s3/impl/provider.ipp>
#endif

#endif
