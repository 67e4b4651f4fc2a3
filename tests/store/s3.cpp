// Tests of conveyor/store/s3.hpp against the S3 test server (tests/s3/server): the S3
// store's reads, listing and multipart writes, and one shard list given as s3://, S3://,
// an s3:// prefix, file:// and a plain path, read into the same samples.
#include "../s3/support.hpp"

#include <conveyor/core/location.hpp>
#include <conveyor/shard/dataset.hpp>
#include <conveyor/shard/source.hpp>
#include <conveyor/shard/writer.hpp>
#include <conveyor/store/open.hpp>

#include "support.hpp"

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

using namespace s3test;
namespace fs = std::filesystem;

using namespace store_test;

TEST_CASE("the S3 store reads whole and by range, lists a prefix and writes in parts")
{
    auto c = make_client();
    const auto st = cv::store::open_store(cv::location("s3://" + bucket() + "/"), {.s3 = c});
    CHECK(st->remote());
    const cv::location big("S3://" + bucket() + "/store/big.bin");
    // Over 5 MiB, S3's smallest part: a multipart upload when the client's part size is that small.
    const std::string bytes = pattern((6u << 20) + 123, 5);
    auto w = st->open_writer(big, {});
    w->write(bytes_of(bytes.substr(0, 1000)));
    w->write(bytes_of(bytes.substr(1000)));
    w->commit();
    const cv::location small("s3://" + bucket() + "/store/small.bin");
    auto ws = st->open_writer(small, {.content_type = "text/plain"});
    ws->write(bytes_of("small"));
    ws->commit();

    CHECK(text_of(st->read(big)) == bytes);
    CHECK(text_of(run_on(rt(), st->async_read(small))) == "small");
    CHECK(text_of(run_on(rt(), st->async_read_range(big, 1000, 10))) == bytes.substr(1000, 10));
    const auto listed = st->list(cv::location("s3://" + bucket() + "/store/"));
    REQUIRE(listed.size() == 2);
    CHECK(listed[0].url == "s3://" + bucket() + "/store/big.bin");
    CHECK(listed[0].size == static_cast<std::int64_t>(bytes.size()));
    CHECK(listed[1].url == "s3://" + bucket() + "/store/small.bin");
    // An object dropped before its commit never appears.
    {
        auto gone = st->open_writer(cv::location("s3://" + bucket() + "/store/gone.bin"), {});
        gone->write(bytes_of("x"));
    }
    CHECK(st->list(cv::location("s3://" + bucket() + "/store/")).size() == 2);
    CHECK_THROWS_AS(st->open_writer(cv::location("s3://" + bucket() + "/store/"), {}), cv::error);
}

TEST_CASE("one shard list given as s3://, S3://, an s3:// prefix, file:// and a plain path gives the same samples")
{
    auto c = make_client();
    const fs::path local = fs::temp_directory_path() / ("conveyor-store-s3-" + std::to_string(::getpid()));
    fs::remove_all(local);
    cv::shard::dataset_index remote_index, local_index;
    for (const bool remote : {true, false}) {
        cv::shard::writer_options o;
        o.pattern = remote ? "s3://" + bucket() + "/same/shard-%03d.tar" : (local / "shard-%03d.tar").string();
        o.max_count = 4;
        std::optional<cv::shard::writer> w;
        if (remote) w.emplace(o, c);
        else w.emplace(o);
        for (int i = 0; i < 10; ++i) {
            const std::string jpg = pattern(500 + 3001 * i, 60 + i), cls = std::to_string(i % 4);
            const cv::shard::field_view f[] = {{"jpg", bytes_of(jpg)}, {"cls", bytes_of(cls)}};
            w->write("k" + std::to_string(i), f);
        }
        w->close();
        REQUIRE(w->index().shards.size() == 3);
        (remote ? remote_index : local_index) = w->index();
    }

    cv::shard::source_options o;
    o.share = cv::shard::split{};
    o.order.shuffle = false;
    o.chunks.chunk_size = 4096;
    o.s3 = c;
    cv::shard::list_options lo;
    lo.s3 = &c;
    const std::string names = "/same/shard-{000..002}.tar";
    const auto plain = samples_of(cv::shard::resolve((local / "shard-{000..002}.tar").string(), lo), o);
    REQUIRE(plain.size() == 10);
    const auto lower = cv::shard::resolve("s3://" + bucket() + names, lo);
    const auto upper = cv::shard::resolve("S3://" + bucket() + names, lo);
    CHECK(lower[0].url == upper[0].url); // one spelling
    CHECK(samples_of(lower, o) == plain);
    CHECK(samples_of(upper, o) == plain);
    CHECK(samples_of(cv::shard::resolve("s3://" + bucket() + "/same/", lo), o) == plain);
    CHECK(samples_of(cv::shard::resolve("file://" + (local / "shard-{000..002}.tar").string(), lo), o) == plain);
    // The dataset reads the same samples by ranges, wherever its shards are.
    const cv::shard::dataset on_s3(remote_index, "", rt(), {.s3 = c});
    const cv::shard::dataset on_disk(local_index, "", rt());
    REQUIRE(on_s3.size() == plain.size());
    for (std::size_t i = 0; i < on_s3.size(); ++i) {
        CAPTURE(i);
        const auto a = on_s3.get(i), b = on_disk.get(i);
        CHECK(a.key == b.key);
        REQUIRE(a.fields.size() == b.fields.size());
        for (std::size_t f = 0; f < a.fields.size(); ++f) CHECK(text_of(a.fields[f].data) == text_of(b.fields[f].data));
    }
    fs::remove_all(local);
}
