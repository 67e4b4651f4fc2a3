// Tests of S3 checksums (s3::checksum_options) through the SigV4 proxy, which keeps S3's
// additional checksums for s3rver (tests/s3/server/s3_checksums.py, written apart from
// conveyor's): uploads send them and are refused when their bytes arrive altered; GETs,
// whole, in ranged parts and streamed, verify them and fetch an altered object once more.
#include "support.hpp"

#include <conveyor/core/checksum.hpp>
#include <conveyor/s3/chunks.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/json.hpp>

#include <chrono>
#include <optional>
#include <string>

using namespace s3test;
using namespace std::chrono_literals;

namespace {

namespace bhttp = boost::beast::http;

/// A streamed object read to its end: its bytes, or the request error it ended with.
struct streamed {
    std::string bytes;
    std::optional<s3::request_error> error;
};

streamed read_stream(s3::client& c, const std::string& key, std::size_t chunk)
{
    auto r = s3::read_chunks(c, bucket(), key, {.chunk_size = chunk, .chunks_in_flight = 2});
    auto f = asio::co_spawn(
        rt().io_executor(0),
        [&r]() -> asio::awaitable<streamed> {
            streamed out;
            try {
                while (auto ch = co_await r->async_next()) out.bytes += ch->bytes.view();
            } catch (const s3::request_error& e) {
                out.error = e; // as a value: an exception carried across threads is a race to TSan
            }
            co_return out;
        },
        asio::use_future);
    REQUIRE_MESSAGE(f.wait_for(60s) == std::future_status::ready, "the stream did not end (hang)");
    return f.get();
}

/// Sets the checksum the proxy keeps with `key` (a wrong one: bytes altered at rest).
void keep_checksum(const std::string& key, const std::string& algorithm, const std::string& value, const std::string& type = "FULL_OBJECT")
{
    auto [st, text] = admin(bhttp::verb::post, "/checksums",
                            R"({"bucket": ")" + bucket() + R"(", "key": ")" + key + R"(", "algorithm": ")" + algorithm +
                                R"(", "value": ")" + value + R"(", "type": ")" + type + R"("})");
    REQUIRE_MESSAGE(st == 200, text);
}

/// The algorithm the proxy computes for objects that have no checksum ("null": none).
void default_checksum(const std::string& algorithm_or_null)
{
    auto [st, text] = admin(bhttp::verb::post, "/checksums", R"({"default": )" + algorithm_or_null + "}");
    REQUIRE_MESSAGE(st == 200, text);
}

/// What the proxy keeps with `key`: [algorithm, value, type], or null.
boost::json::value kept(const std::string& key)
{
    auto [st, text] = admin(bhttp::verb::get, "/checksums");
    REQUIRE(st == 200);
    const boost::json::value all = boost::json::parse(text);
    const auto& objects = all.at("objects").as_object();
    const auto it = objects.find(bucket() + "/" + key);
    return it == objects.end() ? boost::json::value(nullptr) : it->value();
}

std::string crc64_base64(const std::string& data)
{
    cv::checksum c(cv::checksum_algorithm::crc64nvme);
    c.update(bytes_of(data));
    return c.base64();
}

s3::client_options checked_parts()
{
    auto o = fast_retries();
    o.part_size = 1u << 20;                 // GETs: ranged parts of 1 MiB
    o.multipart_threshold = 6u << 20;       // PUTs: multipart above 6 MiB
    o.upload_part_size = 5u << 20;
    return o;
}

struct reset_default {
    ~reset_default() { default_checksum("null"); }
};

} // namespace

TEST_CASE("s3 checksums: a PUT sends CRC64NVME, the store checks it, and a GET verifies it")
{
    auto c = make_client();
    const std::string key = "checksums/small.bin", data = pattern(300'000, 61);
    c.run(c.async_put(bucket(), key, bytes_of(data)));
    const auto k = kept(key);
    REQUIRE(k.is_array());
    CHECK(k.as_array()[0].as_string() == "crc64nvme");
    CHECK(k.as_array()[1].as_string() == crc64_base64(data)); // the proxy's own CRC agreed
    const auto before = c.stats();
    CHECK(c.run(c.async_get(bucket(), key, static_cast<std::int64_t>(data.size()))).view() == data);
    CHECK(c.run(c.async_get(bucket(), key)).view() == data); // size unknown: a ranged GET, then HeadObject
    const auto after = c.stats();
    CHECK(after.checksums_verified - before.checksums_verified == 2);
    CHECK(after.checksum_failures == before.checksum_failures);
}

TEST_CASE("s3 checksums: a multipart upload sends each part's CRC and the whole object's, read back in ranged parts")
{
    auto c = make_client(checked_parts());
    const std::string key = "checksums/multipart.bin", data = pattern((12u << 20) + 777, 62);
    const auto put = c.run(c.async_put(bucket(), key, bytes_of(data)));
    CHECK(put.parts == 3);
    const auto k = kept(key);
    REQUIRE(k.is_array());
    CHECK(k.as_array()[1].as_string() == crc64_base64(data)); // full-object: the parts combined
    CHECK(k.as_array()[2].as_string() == "FULL_OBJECT");
    const auto before = c.stats();
    CHECK(c.run(c.async_get(bucket(), key)).view() == data); // 13 ranged parts, their CRCs combined
    CHECK(c.stats().checksums_verified - before.checksums_verified == 1);
}

TEST_CASE("s3 checksums: an upload whose bytes arrive altered is refused (BadDigest) and sent again")
{
    auto c = make_client();
    const std::string key = "checksums/altered-upload.bin", data = pattern(200'000, 63);
    arm_fault(key, "corrupt", 1, 503, "SlowDown", "PUT");
    const auto before = c.stats();
    c.run(c.async_put(bucket(), key, bytes_of(data)));
    CHECK(c.stats().retries - before.retries == 1);
    CHECK(c.run(c.async_get(bucket(), key, static_cast<std::int64_t>(data.size()))).view() == data);
    // Without checksums the altered bytes are stored as they came.
    auto o = fast_retries();
    o.checksums.upload.reset();
    o.checksums.verify = false;
    auto plain = make_client(o);
    arm_fault(key, "corrupt", 1, 503, "SlowDown", "PUT");
    plain.run(plain.async_put(bucket(), key, bytes_of(data)));
    CHECK(plain.run(plain.async_get(bucket(), key)).view() != data);
    CHECK(kept(key).is_null());
}

TEST_CASE("s3 checksums: bytes altered in transfer are fetched once more; altered twice, the error names the object")
{
    for (bool split : {false, true}) {
        CAPTURE(split);
        auto c = make_client(checked_parts());
        const std::string key = std::string("checksums/transfer-") + (split ? "split" : "whole") + ".bin";
        // Split: 2 parts of 1 MiB; the corrupt fault changes the middle byte of a reply's body,
        // which for the first GET (read up to 1 MiB, then closed) must lie in its first part.
        const std::string data = pattern(split ? (1u << 20) + 300'005 : 500'000, 64);
        c.run(c.async_put(bucket(), key, bytes_of(data)));
        const std::int64_t hint = split ? -1 : static_cast<std::int64_t>(data.size());
        arm_fault(key, "corrupt", 1);
        auto before = c.stats();
        CHECK(c.run(c.async_get(bucket(), key, hint)).view() == data);
        CHECK(c.stats().checksum_failures - before.checksum_failures == 1);
        CHECK(c.stats().checksums_verified - before.checksums_verified == 1);

        clear_faults();
        arm_fault(key, "corrupt", split ? 100 : 2); // every GET of both fetches (a split one makes several)
        before = c.stats();
        auto err = error_of([&] { c.run(c.async_get(bucket(), key, hint)); });
        REQUIRE(err);
        CHECK(err->code() == s3::errc::checksum_mismatch);
        const std::string what = err->what();
        MESSAGE(what);
        CHECK(what.find(key) != std::string::npos);
        CHECK(what.find("CRC64NVME") != std::string::npos);
        CHECK(what.find(crc64_base64(data)) != std::string::npos); // the value the store keeps
        CHECK(c.stats().checksum_failures - before.checksum_failures == 2);
        clear_faults();
    }
}

TEST_CASE("s3 checksums: an object whose stored checksum does not match (altered at rest) is never returned")
{
    auto c = make_client();
    const std::string key = "checksums/at-rest.bin", data = pattern(100'000, 65);
    c.run(c.async_put(bucket(), key, bytes_of(data)));
    keep_checksum(key, "crc32c", "AAAAAA==");
    const auto gets = requests_for(path_of(key));
    auto err = error_of([&] { c.run(c.async_get(bucket(), key, static_cast<std::int64_t>(data.size()))); });
    REQUIRE(err);
    CHECK(err->code() == s3::errc::checksum_mismatch);
    CHECK(std::string(err->what()).find("CRC32C") != std::string::npos);
    CHECK(requests_for(path_of(key)) - gets == 2); // fetched twice, then the error
}

TEST_CASE("s3 checksums: CRC32C, CRC32, SHA-1 and SHA-256 the store computed are verified, whole and in parts")
{
    reset_default restore;
    auto o = checked_parts();
    o.checksums.upload.reset(); // the proxy keeps none: it computes its default for each read
    auto c = make_client(o);
    const std::string small = pattern(70'000, 66), large = pattern((2u << 20) + 3, 67);
    c.run(c.async_put(bucket(), "checksums/algos-small.bin", bytes_of(small)));
    c.run(c.async_put(bucket(), "checksums/algos-large.bin", bytes_of(large)));
    for (const char* a : {"\"crc32c\"", "\"crc32\"", "\"sha1\"", "\"sha256\"", "\"crc64nvme\""}) {
        CAPTURE(a);
        default_checksum(a);
        const auto before = c.stats();
        CHECK(c.run(c.async_get(bucket(), "checksums/algos-small.bin", static_cast<std::int64_t>(small.size()))).view() == small);
        CHECK(c.run(c.async_get(bucket(), "checksums/algos-large.bin")).view() == large);
        CHECK(read_stream(c, "checksums/algos-small.bin", 16'384).bytes == small);
        CHECK(c.stats().checksums_verified - before.checksums_verified == 3);
        CHECK(c.stats().checksum_failures == before.checksum_failures);
    }
}

TEST_CASE("s3 checksums: composite checksums are skipped, objects with none are counted, and verify=false asks for none")
{
    reset_default restore;
    default_checksum("null");
    auto c = make_client();
    const std::string key = "checksums/composite.bin", data = pattern(50'000, 68);
    c.run(c.async_put(bucket(), key, bytes_of(data)));
    keep_checksum(key, "crc32c", "d2VpcmQ=-3", "COMPOSITE");
    auto before = c.stats();
    CHECK(c.run(c.async_get(bucket(), key, static_cast<std::int64_t>(data.size()))).view() == data);
    CHECK(c.stats().checksums_skipped - before.checksums_skipped == 1);
    CHECK(c.stats().checksums_verified == before.checksums_verified);

    auto o = fast_retries();
    o.checksums.upload.reset();
    auto none = make_client(o);
    none.run(none.async_put(bucket(), key, bytes_of(data))); // replaced, with no checksum kept
    before = none.stats();
    CHECK(none.run(none.async_get(bucket(), key, static_cast<std::int64_t>(data.size()))).view() == data);
    CHECK(none.stats().checksums_absent - before.checksums_absent == 1);

    keep_checksum(key, "crc32c", "AAAAAA=="); // wrong, but nobody asks
    o.checksums.verify = false;
    auto off = make_client(o);
    CHECK(off.run(off.async_get(bucket(), key, static_cast<std::int64_t>(data.size()))).view() == data);
    const auto st = off.stats();
    CHECK(st.checksums_verified + st.checksum_failures + st.checksums_skipped + st.checksums_absent == 0);
}

TEST_CASE("s3 checksums: a streamed object is verified as it streams, and bytes altered on the way fail the stream")
{
    auto c = make_client();
    const std::string key = "checksums/streamed.bin", data = pattern((3u << 20) + 99, 69);
    c.run(c.async_put(bucket(), key, bytes_of(data)));
    auto before = c.stats();
    auto got = read_stream(c, key, 1u << 20);
    CHECK_FALSE(got.error);
    CHECK(got.bytes == data);
    CHECK(c.stats().checksums_verified - before.checksums_verified == 1);
    // Cut mid-body and resumed with a ranged GET: the running CRC goes on over the rest.
    clear_faults();
    auto [st, text] = admin(bhttp::verb::post, "/faults",
                            R"({"key": ")" + key + R"(", "method": "GET", "kind": "reset_after", "after_bytes": 1500000, "count": 1})");
    REQUIRE_MESSAGE(st == 200, text);
    const auto gets = requests_for(path_of(key));
    before = c.stats();
    got = read_stream(c, key, 1u << 20);
    CHECK_FALSE(got.error);
    CHECK(got.bytes == data);
    CHECK(requests_for(path_of(key)) - gets == 2);
    CHECK(c.stats().checksums_verified - before.checksums_verified == 1);
    // Altered on the way: the chunks went out, and the stream ends with the error.
    arm_fault(key, "corrupt", 1);
    got = read_stream(c, key, 1u << 20);
    REQUIRE(got.error);
    CHECK(got.error->code() == s3::errc::checksum_mismatch);
    CHECK(std::string(got.error->what()).find(key) != std::string::npos);
    clear_faults();
}
