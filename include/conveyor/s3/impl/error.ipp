// conveyor/s3/impl/error.ipp — definitions for conveyor/s3/error.hpp.
#ifndef CONVEYOR_S3_IMPL_ERROR_IPP
#define CONVEYOR_S3_IMPL_ERROR_IPP

#include <conveyor/s3/error.hpp>

#include <string>
#include <system_error>

namespace conveyor::s3 {

namespace detail {
class s3_category_impl final : public std::error_category {
public:
    const char* name() const noexcept override { return "conveyor.s3"; }
    std::string message(int ev) const override
    {
        switch (static_cast<errc>(ev)) {
        case errc::access_denied: return "access denied";
        case errc::no_such_key: return "no such key";
        case errc::no_such_bucket: return "no such bucket";
        case errc::request_refused: return "request refused by the server";
        case errc::server_error: return "server error";
        case errc::throttled: return "throttled by the server (slow down)";
        case errc::bad_reply: return "malformed reply from the server";
        case errc::object_changed: return "object changed while being read";
        case errc::upload_aborted: return "multipart upload aborted";
        case errc::credentials_failed: return "no usable credentials from the credentials provider";
        case errc::checksum_mismatch: return "the object's bytes do not match its checksum";
        }
        return "unknown conveyor.s3 error";
    }
};
} // namespace detail

CONVEYOR_DECL const std::error_category& s3_category() noexcept
{
    static const detail::s3_category_impl cat;
    return cat;
}

CONVEYOR_DECL std::error_code make_error_code(errc e) noexcept
{
    return {static_cast<int>(e), s3_category()};
}

CONVEYOR_DECL std::string reply_error::describe() const
{
    std::string s = "HTTP " + std::to_string(status);
    if (!code.empty()) s += " " + code;
    if (!message.empty()) s += ": " + message;
    if (!request_id.empty()) s += " (request id " + request_id + ")";
    return s;
}

CONVEYOR_DECL std::error_code reply_error::to_error_code() const
{
    if (status == 403 || status == 401) return make_error_code(errc::access_denied);
    if (status == 404) return make_error_code(code == "NoSuchBucket" ? errc::no_such_bucket : errc::no_such_key);
    if (status == 412 && code == "PreconditionFailed") return make_error_code(errc::object_changed);
    if (status == 400 && (code == "BadDigest" || code == "XAmzContentChecksumMismatch")) return make_error_code(errc::checksum_mismatch);
    if (status == 503 || status == 429 || code == "SlowDown") return make_error_code(errc::throttled);
    if (status >= 500) return make_error_code(errc::server_error);
    return make_error_code(errc::request_refused);
}

CONVEYOR_DECL bool reply_error::retryable() const noexcept
{
    if (status == 500 || status == 502 || status == 503 || status == 504 || status == 429) return true;
    // BadDigest: the upload's bytes arrived altered (the checksum was computed from the same
    // bytes here): sent again, they may arrive whole.
    return code == "RequestTimeout" || code == "SlowDown" || code == "InternalError" || code == "BadDigest" ||
           code == "XAmzContentChecksumMismatch";
}

} // namespace conveyor::s3

#endif
