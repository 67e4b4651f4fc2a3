// conveyor/s3/config.hpp — where S3 requests go and with which credentials: s3:// URLs,
// endpoints, addressing style, region and the credentials chain.
#ifndef CONVEYOR_S3_CONFIG_HPP
#define CONVEYOR_S3_CONFIG_HPP

#include <conveyor/detail/config.hpp>

#include <conveyor/core/error.hpp> // what these functions throw
#include <conveyor/http/endpoint.hpp>
#include <conveyor/s3/credentials.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace conveyor::s3 {

/** How a bucket is named in a request.

    `virtual_hosted` puts the bucket in the host name (`bucket.s3.us-east-1.amazonaws.com`),
    `path` puts it first in the path (`host/bucket/key`). `automatic` chooses virtual-hosted
    for AWS's own endpoints when the bucket name is a DNS label that the endpoint's TLS
    certificate covers, and path-style otherwise (every custom endpoint: MinIO, Ceph,
    CORTX, Samsung DSS...).
*/
enum class addressing { automatic, path, virtual_hosted };

class credentials_provider; // conveyor/s3/provider.hpp

/// "automatic", "path" or "virtual-hosted".
CONVEYOR_DECL std::string_view to_string(addressing a) noexcept;

/** What a user may set explicitly; anything empty comes from the chain (see
    `resolve_config`). */
struct config_options {
    /// Explicit credentials: they win over everything else.
    std::optional<credentials> creds;
    /// Force unsigned requests (public buckets), unless `creds` is set.
    bool anonymous = false;
    /// The seeds' JSON credentials file: `{"aws_access_key_id": "...",
    /// "aws_secret_access_key": "...", "aws_session_token": "..." (optional),
    /// "bucket_name": "..." (optional), "endpoint_url": "..." (optional)}`.
    /// When set it is always read: its endpoint and bucket apply even when `creds` wins.
    std::string credentials_file;
    /// The profile of ~/.aws/credentials and ~/.aws/config; else `AWS_PROFILE`, else "default".
    std::string profile;
    /// e.g. "eu-west-1"; else `AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's, "us-east-1".
    std::string region;
    /// "http://127.0.0.1:9000", "https://s3.example.com"; else the JSON file's,
    /// `AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL`, the profile's, AWS's for the region.
    std::string endpoint_url;
    /// `automatic` takes the profile's `s3 = / addressing_style` if it has one.
    addressing style = addressing::automatic;
};

/// The resolved configuration: what the S3 client needs to address and sign requests.
struct config {
    credentials creds;          ///< `.source` says where they came from
    /// Where temporary credentials come from (web identity, the container endpoint, the
    /// instance metadata service): the client fetches them on first use and refreshes
    /// them before they expire; `creds` is then empty. Null: `creds` is all there is.
    std::shared_ptr<credentials_provider> provider;
    std::string region;         ///< never empty
    http::endpoint endpoint;    ///< where requests go (before the bucket is added to the host)
    bool aws_endpoint = true;   ///< the endpoint is AWS's own (virtual-hosted addressing possible)
    addressing style = addressing::automatic;
    std::string default_bucket; ///< `bucket_name` of the JSON credentials file, else ""

    /** One line for logs: endpoint, region, addressing and `creds.describe()`. Never a
        secret. */
    CONVEYOR_DECL std::string describe() const;
};

/** Resolves the configuration from `o`, the environment and the shared AWS files.

    Credentials, first found wins:
    1. `o.creds`;
    2. `o.anonymous` (unsigned requests);
    3. the JSON file `o.credentials_file`;
    4. `AWS_ACCESS_KEY_ID` + `AWS_SECRET_ACCESS_KEY` (+ `AWS_SESSION_TOKEN`);
    5. the profile's role: `role_arn` with `source_profile` (whose own role, web identity,
       static keys or credential process sign the request) or `credential_source`
       (`Environment`, `Ec2InstanceMetadata`, `EcsContainer`): STS `AssumeRole`
       (`assume_role_provider`); the profile is `o.profile`, else `AWS_PROFILE`, else
       "default";
    6. web identity: `AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN` (+
       `AWS_ROLE_SESSION_NAME`), else the profile's `web_identity_token_file` + `role_arn`
       (+ `role_session_name`): STS `AssumeRoleWithWebIdentity` (`web_identity_provider`);
    7. the profile's static keys: its section of the shared credentials file
       (`AWS_SHARED_CREDENTIALS_FILE`, else ~/.aws/credentials), then its `[profile name]`
       (or `[default]`) section of the config file (`AWS_CONFIG_FILE`, else ~/.aws/config);
    8. the profile's `credential_process` (`process_provider`);
    9. the container credentials endpoint: `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` or
       `_FULL_URI` (`container_provider`);
    10. the EC2 instance metadata service, unless `AWS_EC2_METADATA_DISABLED=true`
       (`instance_metadata_provider`): where it does not answer, anonymous access;
    11. anonymous access, with a source that says no credentials were found.
    Steps 5, 6 and 8 to 10 set `provider`: their credentials are fetched by the client, on first
    use, and refreshed in the background before they expire.

    Region: `o.region`, `AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's `region`,
    "us-east-1". Endpoint: `o.endpoint_url`, the JSON file's `endpoint_url`,
    `AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL`, the profile's `endpoint_url` (its `s3 =`
    sub-section first, then top level), then `https://s3.<region>.amazonaws.com`.
    Empty environment variables count as unset.

    The shared files are read only when a value is still missing after the options and
    the environment; a file that does not exist is skipped. A profile named in `o.profile`
    or `AWS_PROFILE` that neither file has is an error naming the profile and both files.

    @throws conveyor::error naming the file (and line), variable or option at fault and
    what is wrong with it: an unreadable file, bad JSON, a missing or non-string key, an
    INI line that is neither a section, a comment nor `key = value`, half a key pair, a
    profile that needs a credential provider conveyor lacks (SSO) or an MFA code, a role
    whose source profiles make a loop, an
    endpoint that is not an http(s) URL, a region that is not a region name. The message
    never contains a secret access key or session token.

    @par Thread Safety
    Reads the environment: do not call while another thread changes it.
*/
CONVEYOR_DECL config resolve_config(const config_options& o = {});

/** Where a request for (bucket, key) goes: the endpoint to connect to, the `Host` header
    and the encoded request path (no query). */
struct request_target {
    http::endpoint endpoint; ///< virtual-hosted: host is "bucket.<endpoint host>"
    std::string host;        ///< the `Host` header (port only when not the default)
    std::string path;        ///< e.g. "/bucket/a%20b.jpg" or "/a%20b.jpg"
};

/** The request target for `key` in `bucket` under `c`.

    Key "" means the bucket itself: "/bucket" path-style, "/" virtual-hosted; bucket ""
    (and key "") means the service ("/"). The endpoint's `base_path` comes first in the
    path. Path-style is used unless `c.style` is `virtual_hosted`, or it is `automatic`,
    the endpoint is AWS's own and `virtual_hostable(bucket, c.endpoint.tls)`.

    @throws conveyor::error with `std::errc::invalid_argument` when the bucket is not a
    bucket name (letters, digits, '.', '-', '_'), or when `virtual_hosted` is forced for a
    bucket that cannot be a host name or an endpoint that is an IP address.
*/
CONVEYOR_DECL request_target target_for(const config& c, std::string_view bucket, std::string_view key);

/** True when `bucket` can go in the host name: 3 to 63 characters of lowercase letters,
    digits, hyphens and (without TLS only: a wildcard certificate covers one label) dots,
    starting and ending with a letter or digit, and not shaped like an IPv4 address. */
CONVEYOR_DECL bool virtual_hostable(std::string_view bucket, bool tls) noexcept;

/// S3's limit on the length of an object key, in bytes (of UTF-8).
inline constexpr std::size_t max_key_bytes = 1024;

/** Percent-encodes an object key for a request path, S3's way: every byte but
    `A-Z a-z 0-9 - . _ ~` and '/' becomes %XX with uppercase hex (UTF-8 bytes one by one).
    This is also the canonical URI that SigV4 signs for S3. */
CONVEYOR_DECL std::string encode_key(std::string_view key);

/// As `encode_key`, but '/' is encoded too: for query parameter names and values.
CONVEYOR_DECL std::string encode_query(std::string_view value);

/** "s3://bucket/key", the key as written (not encoded): for messages and logs.
    `c` is accepted so callers need not change if messages come to name custom endpoints. */
CONVEYOR_DECL std::string object_uri(const config& c, std::string_view bucket, std::string_view key);

} // namespace conveyor::s3

#if CONVEYOR_HEADER_ONLY
#include <conveyor/s3/impl/config.ipp>
#endif

#endif
