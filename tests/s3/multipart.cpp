// Tests of conveyor/s3/multipart.hpp against s3rver behind the SigV4-checking proxy
// (tests/s3/server/with_s3_server.sh): an upload fed part by part, aborted when it fails or
// is dropped; and the shard writer streaming shards to S3 through it (shard/writer.hpp).
#include "support.hpp"

#include <conveyor/s3/multipart.hpp>
#include <conveyor/shard/writer.hpp>

#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

using namespace s3test;
using boost::beast::http::verb;

namespace {

std::int64_t deletes_seen()
{
    auto [st, text] = admin(verb::get, "/stats");
    auto v = boost::json::parse(text);
    auto& by = v.at("requests_by_method").as_object();
    return by.contains("DELETE") ? by.at("DELETE").to_number<std::int64_t>() : 0;
}

bool exists(s3::client& c, const std::string& key)
{
    try {
        c.run(c.async_head(bucket(), key));
        return true;
    } catch (const s3::request_error& e) {
        if (e.reply().status == 404) return false;
        throw;
    }
}

s3::client_options upload_parts(unsigned attempts = 10)
{
    auto o = fast_retries(attempts);
    o.upload_part_size = 5u << 20;
    o.upload_parts_in_flight = 2;
    return o;
}

} // namespace

TEST_CASE("a multipart upload fed part by part stores the parts in the order given")
{
    auto c = make_client(upload_parts());
    const std::string a = pattern(5u << 20, 21), b = pattern(5u << 20, 22), tail = pattern(123'457, 23);
    s3::multipart_upload up(c, bucket(), "multipart/streamed.bin", "application/x-tar");
    CHECK(up.upload_id().empty());
    for (const auto* part : {&a, &b, &tail}) up.upload_part(cv::buffer::copy_of(*part));
    CHECK_FALSE(up.upload_id().empty());
    const auto r = up.complete();
    CHECK(r.parts == 3);
    CHECK(r.bytes == a.size() + b.size() + tail.size());
    CHECK(c.run(c.async_get(bucket(), "multipart/streamed.bin")).view() == a + b + tail);
}

TEST_CASE("a multipart upload dropped before it completes is aborted")
{
    auto c = make_client(upload_parts());
    const auto before = deletes_seen();
    {
        s3::multipart_upload up(c, bucket(), "multipart/dropped.bin");
        up.upload_part(cv::buffer::copy_of(pattern(5u << 20, 24)));
    }
    CHECK(conveyor_test::eventually([&] { return deletes_seen() > before; }, std::chrono::seconds(10)));
    CHECK_FALSE(exists(c, "multipart/dropped.bin"));
}

TEST_CASE("a multipart upload whose part fails is aborted and fails the next call with upload_aborted")
{
    auto c = make_client(upload_parts(2));
    const auto before = deletes_seen();
    arm_fault("multipart/failing.bin", "status", 100, 400, "InvalidPart", "PUT");
    s3::multipart_upload up(c, bucket(), "multipart/failing.bin");
    auto e = error_of([&] {
        for (int i = 0; i < 4; ++i) up.upload_part(cv::buffer::copy_of(pattern(5u << 20, 30 + i)));
        up.complete();
    });
    clear_faults();
    REQUIRE(e);
    CHECK(e->code() == s3::errc::upload_aborted);
    CHECK(e->reply().code == "InvalidPart");
    CHECK(conveyor_test::eventually([&] { return deletes_seen() > before; }, std::chrono::seconds(10)));
    CHECK_FALSE(exists(c, "multipart/failing.bin"));
}

TEST_CASE("shard writer streams S3 shards as multipart uploads, a small one as one PutObject, with the local bytes")
{
    auto c = make_client(upload_parts());
    const auto local = std::filesystem::temp_directory_path() / ("conveyor-s3-shards-" + std::to_string(::getpid()));
    std::filesystem::remove_all(local);
    cv::shard::dataset_index remote_index;
    for (const bool remote : {true, false}) {
        cv::shard::writer_options o;
        o.pattern = remote ? "s3://" + bucket() + "/shards/shard-%06d.tar" : (local / "shard-%06d.tar").string();
        o.max_size = 11u << 20;
        std::optional<cv::shard::writer> w;
        if (remote) w.emplace(o, c); else w.emplace(o);
        for (int i = 0; i < 6; ++i) {
            const std::string jpg = pattern(i < 4 ? (3u << 20) + 1000u * i : 20'000, 40 + i), cls = std::to_string(i);
            const cv::shard::field_view f[] = {{"jpg", bytes_of(jpg)}, {"cls", bytes_of(cls)}};
            w->write("s/" + std::to_string(i), f);
        }
        w->close();
        if (remote) remote_index = w->index();
    }
    REQUIRE(remote_index.shards.size() == 2);
    CHECK(remote_index.shards[0].samples == 4);  // 12 MiB >= 11 MiB: three parts
    CHECK(remote_index.shards[0].url == "s3://" + bucket() + "/shards/shard-000000.tar");
    for (int s = 0; s < 2; ++s) {
        const auto name = cv::shard::format_shard_name("shard-%06d.tar", s);
        std::ifstream in(local / name, std::ios::binary);
        std::stringstream ss;
        ss << in.rdbuf();
        const auto got = c.run(c.async_get(bucket(), "shards/" + name));
        CHECK(got.size() == remote_index.shards[s].bytes);
        CHECK(got.view() == ss.str());
    }
    std::filesystem::remove_all(local);
}

TEST_CASE("shard writer aborts the upload of an S3 shard that fails, and no object appears")
{
    auto c = make_client(upload_parts(2));
    const auto before = deletes_seen();
    arm_fault("shards-fail/shard-000000.tar", "status", 100, 400, "InvalidPart", "PUT");
    auto e = error_of([&] {
        cv::shard::writer w({.pattern = "s3://" + bucket() + "/shards-fail/shard-%06d.tar"}, c);
        const std::string jpg = pattern(4u << 20, 50);
        const cv::shard::field_view f[] = {{"jpg", bytes_of(jpg)}};
        for (int i = 0; i < 5; ++i) w.write("k" + std::to_string(i), f);
        w.close();
    });
    clear_faults();
    REQUIRE(e);
    CHECK(e->code() == s3::errc::upload_aborted);
    CHECK(conveyor_test::eventually([&] { return deletes_seen() > before; }, std::chrono::seconds(10)));
    CHECK_FALSE(exists(c, "shards-fail/shard-000000.tar"));
}
