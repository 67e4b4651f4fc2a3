// Tests of conveyor/s3/source.hpp against s3rver behind the SigV4-checking proxy: the S3
// source (keys, index files, prefix listings; ordered and completion order; retries
// delivered exactly once; skipping), random access, and stopping early. ImageFolder labels
// from key prefixes run against a server scripted here (no s3rver needed).
#include "support.hpp"

#include "../support/http_server.hpp"

#include <conveyor/core/location.hpp>
#include <conveyor/core/stages.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

using namespace s3test;

namespace {

// Puts `n` objects "<prefix>obj-<i>" with distinct contents once per test binary run.
std::vector<std::string> ensure_objects(const s3::client& c, const std::string& prefix, int n, std::size_t size = 20'000)
{
    std::vector<std::string> keys;
    for (int i = 0; i < n; ++i) {
        char name[32];
        std::snprintf(name, sizeof name, "obj-%04d", i);
        keys.push_back(prefix + name);
    }
    auto blobs = cv::generate(static_cast<std::uint64_t>(n), [size](std::uint64_t i) {
        char name[32];
        std::snprintf(name, sizeof name, "obj-%04d", static_cast<int>(i));
        return cv::blob{name, cv::buffer::copy_of(pattern(size + i, 100 + i)), "", -1, i};
    });
    auto [count, bytes] = s3::upload_all(std::move(blobs).on(rt()), c, bucket(), {.prefix = prefix, .concurrency = 16});
    REQUIRE(count == static_cast<std::size_t>(n));
    return keys;
}

std::size_t index_of(const std::string& key) { return static_cast<std::size_t>(std::stoi(key.substr(key.size() - 4))); }

} // namespace

TEST_CASE("s3 source delivers every object once, in order, with its bytes")
{
    auto c = make_client();
    auto keys = ensure_objects(c, "source/ordered/", 200);
    std::size_t i = 0;
    for (auto& b : s3::objects(c, bucket(), keys, {.concurrency = 32}).on(rt())) {
        REQUIRE(i < keys.size());
        CHECK(b.key == keys[i]);
        CHECK(b.index == i);
        CHECK(b.origin == "s3://" + bucket() + "/" + keys[i]);
        CHECK(b.data.view() == pattern(20'000 + i, 100 + i));
        ++i;
    }
    CHECK(i == keys.size());
}

TEST_CASE("s3 source takes each epoch's order and share, and merged states resume on another world size, each object once")
{
    auto c = make_client();
    auto keys = ensure_objects(c, "source/epochs/", 60, 2'000);
    const cv::order_options order{.seed = 4, .shuffle = true};
    const std::uint64_t epoch = 2;
    std::vector<cv::progress> states;
    std::set<std::string> used;
    for (std::uint64_t r = 0; r < 2; ++r) {
        auto state = std::make_shared<cv::progress>();
        std::vector<std::uint64_t> got;
        const cv::split share{.rank = r, .world_size = 2};
        for (auto& b : s3::objects(c, bucket(), keys, {.concurrency = 8, .epochs = {.order = order, .share = share, .resume = state}}).on(rt()).run(epoch)) {
            CHECK(b.key == keys[b.index]);
            CHECK(b.data.view() == pattern(2'000 + b.index, 100 + b.index));
            state->consumed(b);
            CHECK(used.insert(b.key).second);
            got.push_back(b.index);
            if (got.size() == 7 + 10 * r) break;
        }
        const auto share_of = cv::epoch_share(keys.size(), share, epoch, order);
        for (std::size_t k = 0; k < got.size(); ++k) CHECK(got[k] == share_of[k].item); // the epoch's order, this rank's share
        states.push_back(cv::progress::from_json(state->to_json()));
    }
    const auto merged = cv::progress::merge(states);
    std::set<std::string> after;
    for (std::uint64_t r = 0; r < 3; ++r) {
        auto state = std::make_shared<cv::progress>(merged);
        for (auto& b : s3::objects(c, bucket(), keys, {.concurrency = 8, .epochs = {.order = order, .share = cv::split{.rank = r, .world_size = 3}, .resume = state}})
                           .on(rt())
                           .run(epoch)) {
            CHECK_FALSE(used.contains(b.key));
            CHECK(after.insert(b.key).second);
        }
    }
    CHECK(used.size() + after.size() == keys.size()); // every object of the epoch once
}

TEST_CASE("s3 source in completion order still delivers each object exactly once")
{
    auto c = make_client();
    auto keys = ensure_objects(c, "source/unordered/", 150);
    std::map<std::string, int> seen;
    for (auto& b : s3::objects(c, bucket(), keys, {.concurrency = 64, .ordered = false}).on(rt())) {
        ++seen[b.key];
        CHECK(b.data.view() == pattern(20'000 + index_of(b.key), 100 + index_of(b.key)));
    }
    CHECK(seen.size() == keys.size());
    for (auto& [k, n] : seen) CHECK_MESSAGE(n == 1, k);
}

TEST_CASE("s3 source retries transient failures and delivers each retried object once")
{
    auto c = make_client();
    auto keys = ensure_objects(c, "source/retried/", 60);
    clear_faults();
    arm_fault("source/retried/obj-0007", "status", 2, 503, "SlowDown");
    arm_fault("source/retried/obj-0013", "reset", 1);
    arm_fault("source/retried/obj-0042", "truncate", 1);
    std::map<std::string, int> seen;
    for (auto& b : s3::objects(c, bucket(), keys, {.concurrency = 16, .ordered = false}).on(rt())) {
        ++seen[b.key];
        CHECK(b.data.view() == pattern(20'000 + index_of(b.key), 100 + index_of(b.key)));
    }
    clear_faults();
    CHECK(seen.size() == keys.size());
    for (auto& [k, n] : seen) CHECK_MESSAGE(n == 1, k);
    // Each fault cost exactly the GETs it should (a reset on a kept-alive connection may be
    // retried by the HTTP client itself, as a stale connection: still one more GET).
    CHECK(requests_for(path_of("source/retried/obj-0007")) == 3);
    CHECK(requests_for(path_of("source/retried/obj-0013")) == 2);
    CHECK(requests_for(path_of("source/retried/obj-0042")) == 2);
    CHECK(requests_for(path_of("source/retried/obj-0001")) == 1);
    CHECK(c.stats().retries >= 3);
}

TEST_CASE("s3 source fails on a missing key with its name, or skips it when asked")
{
    auto c = make_client();
    auto keys = ensure_objects(c, "source/skip/", 10);
    keys.insert(keys.begin() + 5, "source/skip/missing.jpg");

    std::string what;
    try {
        for (auto& b : s3::objects(c, bucket(), keys, {.concurrency = 4}).on(rt())) (void)b;
    } catch (const cv::error& e) {
        what = e.what();
    }
    CHECK(what.find("source/skip/missing.jpg") != std::string::npos);
    CHECK(what.find("404") != std::string::npos);

    std::vector<std::string> got;
    auto p = s3::objects(c, bucket(), keys, {.concurrency = 4, .errors = cv::on_error::skip}).on(rt());
    auto r = p.run();
    for (auto& b : r) got.push_back(b.key);
    CHECK(got.size() == 10);
    CHECK(std::find(got.begin(), got.end(), "source/skip/missing.jpg") == got.end());
    CHECK(r.stats().skipped == 1);
}

TEST_CASE("s3 source reads keys from an index file, local or in the bucket")
{
    auto c = make_client();
    auto keys = ensure_objects(c, "source/indexed/", 20);
    std::string json = "[";
    for (std::size_t i = 0; i < keys.size(); ++i) json += (i ? ",\"" : "\"") + keys[i].substr(std::string("source/").size()) + "\"";
    json += "]";

    const auto local = std::filesystem::temp_directory_path() / ("conveyor-s3-index-" + std::to_string(::getpid()) + ".json");
    std::ofstream(local) << json;
    auto from_local = s3::read_index(bucket(), local.string(), "source/");
    std::filesystem::remove(local);
    REQUIRE(from_local.size() == keys.size());
    CHECK(from_local.objects[3].key == keys[3]);

    c.run(c.async_put(bucket(), "source/index.json", bytes_of(json)));
    auto from_bucket = s3::read_index(c, "s3://" + bucket() + "/source/index.json", "source/");
    REQUIRE(from_bucket.size() == keys.size());
    std::size_t n = 0;
    for (auto& b : s3::objects(c, std::move(from_bucket)).on(rt())) {
        CHECK(b.key == keys[n]);
        ++n;
    }
    CHECK(n == keys.size());

    c.run(c.async_put(bucket(), "source/bad-index.json", bytes_of(std::string("{\"not\": \"an array\"}"))));
    CHECK_THROWS_WITH_AS(s3::read_index(c, "s3://" + bucket() + "/source/bad-index.json"), doctest::Contains("JSON array"), cv::error);
}

TEST_CASE("s3 source reads everything under a prefix")
{
    auto c = make_client();
    auto a = ensure_objects(c, "source/tree/a/", 5);
    auto b = ensure_objects(c, "source/tree/b/", 7);
    c.run(c.async_put(bucket(), "source/tree/top.bin", bytes_of(std::string("top"))));
    auto list = s3::list_url(c, "s3://" + bucket() + "/source/tree/");
    REQUIRE(list.size() == 13);
    CHECK(list.objects.back().key == "source/tree/top.bin");
    CHECK(list.objects.front().size == 20'000);
    std::size_t n = 0, bytes = 0;
    for (auto& blob : s3::objects(c, list).on(rt())) {
        ++n;
        bytes += blob.data.size();
    }
    CHECK(n == 13);
    CHECK(bytes == 5 * 20'000 + 10 + 7 * 20'000 + 21 + 3);
}

TEST_CASE("s3 dataset fetches any object by index, many at once")
{
    auto c = make_client();
    auto keys = ensure_objects(c, "source/dataset/", 30);
    s3::dataset ds(c, s3::object_list::from_keys(bucket(), keys));
    CHECK(ds.size() == 30);
    auto b = ds.get(17);
    CHECK(b.key == keys[17]);
    CHECK(b.data.view() == pattern(20'017, 117));

    auto all = asio::co_spawn(rt().io_executor(0),
                              [&]() -> asio::awaitable<std::size_t> {
                                  std::size_t total = 0;
                                  for (std::size_t i = 0; i < ds.size(); i += 3) total += (co_await ds.async_get(i)).data.size();
                                  co_return total;
                              },
                              asio::use_future)
                   .get();
    CHECK(all == 10 * 20'000 + (0 + 3 + 6 + 9 + 12 + 15 + 18 + 21 + 24 + 27));
    CHECK_THROWS_AS(ds.get(30), cv::error);
}

TEST_CASE("breaking out of an s3 source stops its requests promptly")
{
    auto c = make_client();
    auto keys = ensure_objects(c, "source/early/", 100);
    // Every object is slow; the loop leaves after the first.
    arm_fault("source/early/", "delay", 1000, 0, "", "GET");
    CHECK(conveyor_test::finishes_within(std::chrono::seconds(30), "early break from the s3 source", [&] {
        for (auto& b : s3::objects(c, bucket(), keys, {.concurrency = 8}).on(rt())) {
            (void)b;
            break;
        }
    }));
    clear_faults();
}

// =======================================================================================
// ImageFolder labels from key prefixes (against a scripted loopback server)

namespace {

/// A ListObjectsV2 page (never truncated) of `keys`, each object's size the length of its key.
std::string labels_list_reply(const std::vector<std::string>& keys, const std::vector<std::string>& prefixes)
{
    std::string s = R"(<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">)";
    s += "<Name>pictures</Name><KeyCount>" + std::to_string(keys.size() + prefixes.size()) + "</KeyCount><IsTruncated>false</IsTruncated>";
    for (const auto& k : keys) s += "<Contents><Key>" + k + "</Key><Size>" + std::to_string(k.size()) + "</Size></Contents>";
    for (const auto& p : prefixes) s += "<CommonPrefixes><Prefix>" + p + "</Prefix></CommonPrefixes>";
    s += "</ListBucketResult>";
    return conveyor_test::reply(200, s, "Content-Type: application/xml\r\n");
}

/// The (still encoded) value of query parameter `name` of `target`.
std::string labels_query(std::string_view target, std::string_view name)
{
    const std::string want = std::string(name) + "=";
    for (auto at = target.find('?'); at != std::string_view::npos; at = target.find('&', at + 1)) {
        const auto rest = target.substr(at + 1);
        if (rest.substr(0, want.size()) == want) return std::string(rest.substr(want.size(), rest.find('&') - want.size()));
    }
    return {};
}

/// A bucket "pictures" holding train/readme.txt, train/dog/{b,a}.jpg, train/cat/{1,2}.jpg,
/// train/cat/deep/3.jpg and train/emu/x.jpg: ListObjectsV2 (with and without the delimiter)
/// and GETs, whose body is the key.
asio::awaitable<bool> picture_bucket(conveyor_test::peer& p, const boost::beast::http::request<boost::beast::http::string_body>& req,
                                     std::size_t)
{
    const std::string target(req.target());
    if (target.find("list-type=2") != std::string::npos) {
        const std::string prefix = labels_query(target, "prefix");
        std::string page;
        if (!labels_query(target, "delimiter").empty())
            page = labels_list_reply({"train/readme.txt"}, {"train/cat/", "train/dog/", "train/emu/"});
        else if (prefix == "train%2Fcat%2F")
            page = labels_list_reply({"train/cat/1.jpg", "train/cat/2.jpg", "train/cat/deep/3.jpg"}, {});
        else if (prefix == "train%2Fdog%2F")
            page = labels_list_reply({"train/dog/a.jpg", "train/dog/b.jpg"}, {});
        else if (prefix == "train%2Femu%2F")
            page = labels_list_reply({"train/emu/x.jpg"}, {});
        else
            page = labels_list_reply({}, {});
        co_return co_await p.write(page);
    }
    const std::string key = target.substr(std::string("/pictures/").size());
    co_return co_await p.write(conveyor_test::reply(200, key));
}

} // namespace

TEST_CASE("s3 listings give ImageFolder labels from the first key component under the prefix, when asked")
{
    conveyor_test::test_server srv(picture_bucket);
    cv::runtime lrt({.io_threads = 1, .compute_threads = 1});
    s3::client c(lrt, path_style_config(srv.endpoint()), fast_retries());

    // By default no labels, as before: every object, label -1.
    const auto plain = s3::list_url(c, "s3://pictures/train/");
    CHECK(plain.size() == 7);
    CHECK(plain.labels.empty());
    for (auto& b : s3::objects(c, plain).on(lrt)) CHECK(b.label == -1);

    // With labels: cat 0, dog 1, emu 2 (sorted); train/readme.txt, directly under the prefix, is left out.
    const auto l = s3::list_url(c, "s3://pictures/train/", {.labels = true});
    CHECK(l.classes == std::vector<std::string>{"cat", "dog", "emu"});
    REQUIRE(l.size() == 6);
    REQUIRE(l.labels.size() == 6);
    std::map<std::string, std::int64_t> got;
    std::size_t n = 0;
    for (auto& b : s3::objects(c, l).on(lrt)) {
        CHECK(b.data.view() == b.key); // the scripted server's body
        CHECK(b.label == l.labels[b.index]);
        got[b.key] = b.label;
        ++n;
    }
    CHECK(n == 6);
    CHECK(got == std::map<std::string, std::int64_t>{{"train/cat/1.jpg", 0}, {"train/cat/2.jpg", 0}, {"train/cat/deep/3.jpg", 0},
                                                      {"train/dog/a.jpg", 1}, {"train/dog/b.jpg", 1}, {"train/emu/x.jpg", 2}});
    // The dataset gives the same labels.
    s3::dataset ds(c, l);
    CHECK(ds.get(5).label == 2);

    // Ids from a classes file: dog 7, cat 3; emu is not named, so its objects are left out.
    const auto named = s3::list_objects(c, "pictures", "train/", {.labels = true, .classes = {{"dog", 7, "dog"}, {"cat", 3, "cat"}}});
    REQUIRE(named.size() == 5);
    CHECK(named.labels == std::vector<std::int64_t>{3, 3, 3, 7, 7});
    CHECK(named.classes.size() == 8);
    CHECK(named.classes[7] == "dog");
}

TEST_CASE("s3 listings keep only the wanted endings, report progress page by page, and write an index read_index reads back")
{
    conveyor_test::test_server srv(picture_bucket);
    cv::runtime lrt({.io_threads = 1, .compute_threads = 1});
    s3::client c(lrt, path_style_config(srv.endpoint()), fast_retries());

    // Progress: after each of the four pages (the top level, then cat, dog, emu in any
    // order), the running totals of everything listed, before the ending filter.
    std::vector<std::size_t> seen;
    std::uint64_t bytes = 0;
    const auto jpgs = s3::list_objects(c, "pictures", "train/",
                                       {.parallel = 2, .extensions = {".JPG"}, .on_progress = [&](std::size_t n, std::uint64_t b) {
                                            seen.push_back(n);
                                            bytes = b;
                                        }});
    REQUIRE(seen.size() == 4);
    CHECK(seen.front() == 1); // train/readme.txt, on the top level's page
    CHECK(std::is_sorted(seen.begin(), seen.end()));
    CHECK(seen.back() == 7);
    std::uint64_t all_bytes = 0; // each object's size is its key's length (the scripted server)
    for (const char* k : {"train/readme.txt", "train/cat/1.jpg", "train/cat/2.jpg", "train/cat/deep/3.jpg", "train/dog/a.jpg",
                          "train/dog/b.jpg", "train/emu/x.jpg"})
        all_bytes += std::string_view(k).size();
    CHECK(bytes == all_bytes);
    // ".JPG" keeps the .jpg keys (case does not matter) and drops the readme.
    REQUIRE(jpgs.size() == 6);
    CHECK(jpgs.objects.front().key == "train/cat/1.jpg");
    CHECK(jpgs.labels.empty());

    // Labels come after the filter: a class with no kept object is no class.
    const auto texts = s3::list_objects(c, "pictures", "train/", {.labels = true, .extensions = {".txt"}});
    CHECK(texts.empty());
    CHECK(texts.classes.empty());
    const auto labelled = s3::list_objects(c, "pictures", "train/", {.labels = true, .extensions = {".jpg"}});
    CHECK(labelled.classes == std::vector<std::string>{"cat", "dog", "emu"});

    // The index and classes files, written locally, read back.
    const auto dir = std::filesystem::temp_directory_path() / ("conveyor-s3-index-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    s3::write_index(c, labelled, (dir / "index.json").string());
    s3::write_classes(labelled, dir / "classes.json");
    const auto back = s3::read_index("pictures", (dir / "index.json").string());
    REQUIRE(back.size() == labelled.size());
    for (std::size_t i = 0; i < back.size(); ++i) CHECK(back.objects[i].key == labelled.objects[i].key);
    const auto classes = cv::file::read_classes(dir / "classes.json");
    REQUIRE(classes.size() == 3);
    CHECK(classes[2].dir == "emu");
    CHECK(classes[2].id == 2);
    // A key read_index would refuse is refused when written, naming it; nothing is written.
    auto bad = s3::object_list::from_keys("pictures", {"train/ok.jpg", std::string("train/bad\x01.jpg")});
    CHECK_THROWS_WITH_AS(s3::write_index(bad, dir / "bad.json"), doctest::Contains("entry 1"), cv::error);
    CHECK(!std::filesystem::exists(dir / "bad.json"));
    // An s3:// destination must name an object.
    CHECK_THROWS_WITH_AS(s3::write_index(c, labelled, "s3://pictures/index/"), doctest::Contains("names no object"), cv::error);
    CHECK(cv::location("S3://b/k").is_s3());
    CHECK(!cv::location("/data/s3://x").is_s3());
    std::filesystem::remove_all(dir);
}

TEST_CASE("s3 assign_labels takes the prefix as a directory and leaves out keys outside any class")
{
    auto l = s3::object_list::from_keys("b", {"data/a/1", "data/b/2", "data/3", "database/c/4", "data//5", "other/a/6"});
    s3::assign_labels(l, "data"); // "data" means "data/": not "database/"
    REQUIRE(l.size() == 2);
    CHECK(l.objects[0].key == "data/a/1");
    CHECK(l.objects[1].key == "data/b/2");
    CHECK(l.labels == std::vector<std::int64_t>{0, 1});
    CHECK(l.classes == std::vector<std::string>{"a", "b"});

    // An empty prefix: the bucket's top level is the root.
    auto top = s3::object_list::from_keys("b", {"x/1", "y/2", "z"});
    s3::assign_labels(top, "");
    CHECK(top.labels == std::vector<std::int64_t>{0, 1});
    // Class ids out of bounds, and a list whose labels do not match its objects.
    auto bad = s3::object_list::from_keys("b", {"p/a/1"});
    CHECK_THROWS_WITH_AS(s3::assign_labels(bad, "p/", {{"a", -1, ""}}), doctest::Contains("outside [0,"), cv::error);
    cv::runtime lrt({.io_threads = 1, .compute_threads = 1});
    conveyor_test::test_server srv(picture_bucket);
    s3::client c(lrt, path_style_config(srv.endpoint()), fast_retries());
    auto odd = s3::object_list::from_keys("pictures", {"train/cat/1.jpg", "train/cat/2.jpg"});
    odd.labels = {0};
    CHECK_THROWS_WITH_AS((void)s3::objects(c, odd), doctest::Contains("1 labels for 2 objects"), cv::error);
}

TEST_CASE("s3 source and dataset read through a store context: with a node cache, the second epoch asks no GET")
{
    auto c = make_client();
    auto keys = ensure_objects(c, "source/cached/", 12, 3'000);
    const auto dir = std::filesystem::temp_directory_path() / ("conveyor-s3-source-cache-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    auto gets = [&] {
        std::int64_t n = 0;
        for (const auto& k : keys) n += requests_for(path_of(k));
        return n;
    };
    auto read_epoch = [&](const s3::source_options& o) {
        std::size_t seen = 0;
        for (auto& b : s3::objects(c, bucket(), keys, o).on(rt())) {
            CHECK(b.key == keys[b.index]);
            CHECK(b.origin == "s3://" + bucket() + "/" + keys[b.index]);
            CHECK(b.data.view() == pattern(3'000 + b.index, 100 + b.index));
            ++seen;
        }
        CHECK(seen == keys.size());
    };

    // The source's own context over `cache`: the first epoch fetches each object once,
    // the second reads them from the folder (a HeadObject each to see they did not change).
    const auto before = gets();
    read_epoch({.concurrency = 4, .cache = cv::store::cache_options{.dir = (dir / "own").string(), .fsync = false}});
    CHECK(gets() - before == static_cast<std::int64_t>(keys.size()));
    read_epoch({.concurrency = 4, .cache = cv::store::cache_options{.dir = (dir / "own").string(), .fsync = false}});
    CHECK(gets() - before == static_cast<std::int64_t>(keys.size()));

    // A context shared by a source and a dataset: what the source fetched, the dataset
    // serves from the cache.
    const auto ctx = cv::store::make_context({.s3 = c, .cache = cv::store::cache_options{.dir = (dir / "shared").string(), .trust = true, .fsync = false}});
    const auto mid = gets();
    read_epoch({.concurrency = 4, .store = ctx});
    CHECK(gets() - mid == static_cast<std::int64_t>(keys.size()));
    const s3::dataset ds(c, s3::object_list::from_keys(bucket(), keys), ctx);
    for (std::size_t i = 0; i < keys.size(); ++i) CHECK(ds.get(i).data.view() == pattern(3'000 + i, 100 + i));
    CHECK(gets() - mid == static_cast<std::int64_t>(keys.size()));

    // A context over another client is refused, naming the bucket: its reads would sign
    // with credentials other than the ones the caller gave.
    const auto other = cv::store::make_context({.s3 = make_client()});
    const auto refused = [&](auto f) {
        try {
            f();
        } catch (const cv::error& e) {
            CHECK(std::string(e.what()).find("s3://" + bucket()) != std::string::npos);
            CHECK(std::string(e.what()).find("another client") != std::string::npos);
            return true;
        }
        return false;
    };
    CHECK(refused([&] { (void)s3::objects(c, bucket(), keys, {.store = other}); }));
    CHECK(refused([&] { s3::dataset(c, s3::object_list::from_keys(bucket(), keys), other); }));
    CHECK(refused([&] { (void)s3::objects(c, bucket(), keys, {.store = cv::store::make_context()}); }));
    std::filesystem::remove_all(dir);
}
