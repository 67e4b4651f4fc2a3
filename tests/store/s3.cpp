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

#include <conveyor/core/checksum.hpp>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

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
    o.share = cv::split{};
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

TEST_CASE("eight processes reading the same objects through one cache make one GET per object")
{
    auto c = make_client();
    const fs::path dir = fs::temp_directory_path() / ("conveyor-store-cache-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const auto st = cv::store::open_store(cv::location("s3://" + bucket() + "/"), {.s3 = c});
    struct object {
        std::string key, bytes;
    };
    std::vector<object> objects;
    for (std::size_t i = 0; i < 4; ++i) {
        // Under the client's part size, so that one fetch is one GET (a whole GET of a larger
        // object comes in ranged parts; one of an empty object costs a 416 then a GET).
        objects.push_back({"cache/obj-" + std::to_string(i), pattern(i == 3 ? 1 : (std::size_t{3} << 20) / (i + 1) + 17 * i, 70 + i)});
        auto w = st->open_writer(cv::location("s3://" + bucket() + "/" + objects.back().key), {});
        w->write(bytes_of(objects.back().bytes));
        w->commit();
    }
    std::vector<std::string> urls;
    for (const auto& o : objects) urls.push_back("s3://" + bucket() + "/" + o.key);
    std::vector<std::int64_t> gets_before;
    for (const auto& o : objects) gets_before.push_back(requests_for(path_of(o.key)));

    // Eight processes at once, half reading in chunks and half whole, half in reverse order.
    std::vector<pid_t> pids;
    for (int p = 0; p < 8; ++p) {
        std::vector<std::string> args{CONVEYOR_CACHE_READER};
        if (p % 2) args.push_back("--whole");
        args.push_back(dir.string());
        if (p % 4 < 2) args.insert(args.end(), urls.begin(), urls.end());
        else args.insert(args.end(), urls.rbegin(), urls.rend());
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        const std::string out = (dir / ("out-" + std::to_string(p) + ".txt")).string();
        posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        pid_t pid = 0;
        REQUIRE(posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) == 0);
        posix_spawn_file_actions_destroy(&fa);
        pids.push_back(pid);
    }
    for (pid_t pid : pids) {
        int status = 0;
        REQUIRE(::waitpid(pid, &status, 0) == pid);
        CHECK(WIFEXITED(status));
        CHECK(WEXITSTATUS(status) == 0);
    }
    std::uint64_t hits = 0, misses = 0;
    for (int p = 0; p < 8; ++p) {
        std::ifstream in(dir / ("out-" + std::to_string(p) + ".txt"));
        std::string line;
        std::size_t lines = 0;
        while (std::getline(in, line)) {
            unsigned long long h = 0, m = 0, w = 0;
            if (std::sscanf(line.c_str(), "stats hits=%llu misses=%llu waits=%llu", &h, &m, &w) == 3) {
                hits += h;
                misses += m;
                continue;
            }
            ++lines;
            std::istringstream fields(line);
            std::string url, crc;
            std::uint64_t size = 0;
            fields >> url >> size >> crc;
            const auto i = static_cast<std::size_t>(std::find(urls.begin(), urls.end(), url) - urls.begin());
            REQUIRE(i < objects.size());
            CHECK(size == objects[i].bytes.size());
            char want[9];
            std::snprintf(want, sizeof want, "%08x", cv::crc32c(bytes_of(objects[i].bytes)));
            CHECK(crc == want);
        }
        CHECK(lines == objects.size());
    }
    CHECK(misses == objects.size());
    CHECK(hits == 7 * objects.size());
    for (std::size_t i = 0; i < objects.size(); ++i) {
        INFO(objects[i].key);
        CHECK(requests_for(path_of(objects[i].key)) - gets_before[i] == 1); // exactly one GET, counted at the proxy
    }
    fs::remove_all(dir);
}
