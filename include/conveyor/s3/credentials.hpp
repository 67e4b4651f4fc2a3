// conveyor/s3/credentials.hpp — AWS credentials, kept out of logs and messages.
#ifndef CONVEYOR_S3_CREDENTIALS_HPP
#define CONVEYOR_S3_CREDENTIALS_HPP

#include <conveyor/detail/config.hpp>

#include <string>

namespace conveyor::s3 {

/** An access key pair and optional session token.

    Empty `access_key_id` means anonymous: requests go unsigned (public buckets).
    Nothing in conveyor prints `secret_access_key` or `session_token`; `describe()` is the
    only text about credentials that logs and errors may carry.
*/
struct credentials {
    std::string access_key_id;
    std::string secret_access_key;
    std::string session_token;  ///< for temporary credentials (STS); sent as x-amz-security-token
    std::string source;         ///< where they came from, e.g. "environment", "profile default"

    bool anonymous() const noexcept { return access_key_id.empty(); }

    /// "access key AKIA…WXYZ from environment": the key id shortened, never the secret.
    CONVEYOR_DECL std::string describe() const;
};

} // namespace conveyor::s3

#if CONVEYOR_HEADER_ONLY
#include <conveyor/s3/impl/credentials.ipp>
#endif

#endif
