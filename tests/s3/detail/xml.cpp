// Tests of conveyor/s3/detail/xml.hpp: S3's XML error replies, ListObjectsV2 pages and
// the multipart upload documents.
#include "../../support/common.hpp"

#include <conveyor/s3/client.hpp>
#include <conveyor/s3/detail/xml.hpp>
#include <conveyor/s3/error.hpp>

#include <string>
#include <system_error>

namespace s3 = conveyor::s3;

TEST_CASE("an S3 XML error reply gives status, code, message and request id")
{
    const std::string body = R"(<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message>
<Resource>/bucket/a &amp; b.jpg</Resource><RequestId>4442587FB7D0A2F9</RequestId></Error>)";
    auto r = s3::detail::parse_error_reply(404, body, "header-id");
    CHECK(r.status == 404);
    CHECK(r.code == "NoSuchKey");
    CHECK(r.message == "The specified key does not exist.");
    CHECK(r.resource == "/bucket/a & b.jpg");
    CHECK(r.request_id == "4442587FB7D0A2F9");  // the body's id wins over the header's
    CHECK(r.describe() == "HTTP 404 NoSuchKey: The specified key does not exist. (request id 4442587FB7D0A2F9)");
    CHECK(r.to_error_code() == s3::errc::no_such_key);
    CHECK_FALSE(r.retryable());
}

TEST_CASE("an error reply without an XML body still gives the status and the header's request id")
{
    auto r = s3::detail::parse_error_reply(503, "<html>Service Unavailable</html>", "abc");
    CHECK(r.code.empty());
    CHECK(r.request_id == "abc");
    CHECK(r.describe() == "HTTP 503 (request id abc)");
    CHECK(r.retryable());
    CHECK(r.to_error_code() == s3::errc::throttled);

    auto broken = s3::detail::parse_error_reply(500, "<Error><Code>Internal", "");
    CHECK(broken.status == 500);
    CHECK(broken.code.empty());
    CHECK(broken.retryable());
}

TEST_CASE("a ListObjectsV2 page gives objects, prefixes and the continuation token")
{
    const std::string body = R"(<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Name>bucket</Name><Prefix>train/</Prefix><KeyCount>3</KeyCount><MaxKeys>2</MaxKeys>
  <IsTruncated>true</IsTruncated><NextContinuationToken>tok/en+=</NextContinuationToken>
  <Contents><Key>train/a.jpg</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified>
    <ETag>&quot;0123&quot;</ETag><Size>110000</Size><StorageClass>STANDARD</StorageClass></Contents>
  <Contents><Key>train/b &amp; c.jpg</Key><ETag>"4567"</ETag><Size>0</Size></Contents>
  <CommonPrefixes><Prefix>train/n01/</Prefix></CommonPrefixes>
</ListBucketResult>)";
    auto p = s3::detail::parse_list_page(body);
    REQUIRE(p.objects.size() == 2);
    CHECK(p.objects[0].key == "train/a.jpg");
    CHECK(p.objects[0].size == 110000);
    CHECK(p.objects[0].etag == "\"0123\"");
    CHECK(p.objects[0].last_modified == "2026-01-01T00:00:00.000Z");
    CHECK(p.objects[1].key == "train/b & c.jpg");
    CHECK(p.objects[1].size == 0);
    REQUIRE(p.common_prefixes.size() == 1);
    CHECK(p.common_prefixes[0] == "train/n01/");
    CHECK(p.truncated);
    CHECK(p.next_continuation_token == "tok/en+=");
}

TEST_CASE("a url-encoded ListObjectsV2 page is decoded, with '+' for a space")
{
    const std::string body = R"(<ListBucketResult><EncodingType>url</EncodingType><IsTruncated>false</IsTruncated>
  <Contents><Key>donn%C3%A9es/%C3%A9t%C3%A9+1.jpg</Key><Size>5</Size></Contents>
  <Contents><Key>a%2Bb%3Dc%25d</Key><Size>1</Size></Contents>
  <CommonPrefixes><Prefix>x+y/</Prefix></CommonPrefixes></ListBucketResult>)";
    auto p = s3::detail::parse_list_page(body);
    REQUIRE(p.objects.size() == 2);
    CHECK(p.objects[0].key == "données/été 1.jpg");
    CHECK(p.objects[1].key == "a+b=c%d");
    CHECK(p.common_prefixes.at(0) == "x y/");
    CHECK_FALSE(p.truncated);
}

TEST_CASE("malformed ListObjectsV2 replies are bad_reply errors")
{
    auto code_of = [](std::string body) -> std::error_code {
        try {
            (void)s3::detail::parse_list_page(body);
        } catch (const conveyor::error& e) {
            return e.code();
        }
        return {};
    };
    CHECK(code_of("<ListBucketResult><Contents>") == s3::errc::bad_reply);
    CHECK(code_of("<SomethingElse/>") == s3::errc::bad_reply);
    CHECK(code_of("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>") == s3::errc::bad_reply);
    CHECK(code_of("<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>") == s3::errc::bad_reply);
    CHECK(code_of("<ListBucketResult><EncodingType>url</EncodingType><Contents><Key>%zz</Key></Contents></ListBucketResult>") ==
          s3::errc::bad_reply);
}

TEST_CASE("multipart documents: upload id, completion body, and an error hidden in a 200")
{
    CHECK(s3::detail::parse_upload_id("<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key><UploadId>abc-123</UploadId>"
                                      "</InitiateMultipartUploadResult>") == "abc-123");
    CHECK_THROWS_AS(s3::detail::parse_upload_id("<InitiateMultipartUploadResult/>"), conveyor::error);

    const auto body = s3::detail::complete_multipart_body({"\"e1\"", "\"e2\""});
    CHECK(body.find("<Part><PartNumber>1</PartNumber><ETag>&quot;e1&quot;</ETag></Part>") != std::string::npos);
    CHECK(body.find("<Part><PartNumber>2</PartNumber><ETag>&quot;e2&quot;</ETag></Part>") != std::string::npos);

    CHECK_FALSE(s3::detail::complete_reply_error("<CompleteMultipartUploadResult><ETag>x</ETag></CompleteMultipartUploadResult>"));
    auto err = s3::detail::complete_reply_error("<Error><Code>InternalError</Code><Message>retry</Message></Error>");
    REQUIRE(err);
    CHECK(err->code == "InternalError");
    CHECK(err->retryable());
}
