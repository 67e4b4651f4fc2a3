// Tests of conveyor/s3/error.hpp: the error codes and their messages, and what an S3
// reply means (its error code, and whether it is worth trying again).
#include "../support/common.hpp"

#include <conveyor/s3/error.hpp>

#include <set>
#include <string>
#include <system_error>
#include <utility>

namespace s3 = conveyor::s3;

TEST_CASE("every s3 error code has its own message")
{
    using s3::errc;
    const std::pair<errc, const char*> all[] = {
        {errc::access_denied, "access denied"},
        {errc::no_such_key, "no such key"},
        {errc::no_such_bucket, "no such bucket"},
        {errc::request_refused, "request refused by the server"},
        {errc::server_error, "server error"},
        {errc::throttled, "throttled by the server (slow down)"},
        {errc::bad_reply, "malformed reply from the server"},
        {errc::object_changed, "object changed while being read"},
        {errc::upload_aborted, "multipart upload aborted"},
    };
    std::set<std::string> seen;
    for (const auto& [e, text] : all) {
        std::error_code ec = e;
        CAPTURE(text);
        CHECK(ec.category().name() == std::string("conveyor.s3"));
        CHECK(ec.message() == text);
        CHECK(seen.insert(ec.message()).second);
    }
    CHECK(std::error_code(s3::make_error_code(errc::no_such_key)).message() == "no such key");
    CHECK(std::error_code(static_cast<errc>(999)).message() == "unknown conveyor.s3 error");
}

TEST_CASE("s3 replies map to error codes and retry advice")
{
    auto reply = [](unsigned status, std::string code) {
        s3::reply_error r;
        r.status = status;
        r.code = std::move(code);
        return r;
    };
    CHECK(reply(403, "SignatureDoesNotMatch").to_error_code() == s3::errc::access_denied);
    CHECK(reply(403, "InvalidAccessKeyId").to_error_code() == s3::errc::access_denied);
    CHECK(reply(404, "NoSuchBucket").to_error_code() == s3::errc::no_such_bucket);
    CHECK(reply(404, "").to_error_code() == s3::errc::no_such_key);
    CHECK(reply(412, "PreconditionFailed").to_error_code() == s3::errc::object_changed);
    CHECK(reply(400, "InvalidArgument").to_error_code() == s3::errc::request_refused);
    CHECK(reply(502, "").to_error_code() == s3::errc::server_error);
    for (unsigned st : {500u, 502u, 503u, 504u, 429u}) CHECK(reply(st, "").retryable());
    CHECK(reply(400, "RequestTimeout").retryable());
    for (unsigned st : {400u, 401u, 403u, 404u, 405u, 409u, 412u, 416u}) CHECK_FALSE(reply(st, "Whatever").retryable());
}
