// Tests of conveyor/store/cache.hpp without a server: a cached_store over an in-memory
// "remote" store that counts its reads and says each object's ETag. Hits and misses,
// versions (ETag change, trust), eviction, leftovers of a crashed run, keys that try to
// leave the folder, damaged files, a read-only folder and a full disk.
#include <conveyor/core/error.hpp>
#include <conveyor/core/location.hpp>
#include <conveyor/store/cache.hpp>
#include <conveyor/store/open.hpp>

#include "support.hpp"
#include "../support/common.hpp"

#include <doctest/doctest.h>

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace cv = conveyor;
namespace fs = std::filesystem;
namespace asio = boost::asio;

using namespace store_test;

namespace {

cv::runtime& rt()
{
    static cv::runtime r({.io_threads = 2});
    return r;
}

/// A "remote" store in memory: objects by URL, each with an ETag; counts what it is asked.
class memory_store final : public cv::store::store {
public:
    void put(const std::string& url, std::string bytes, std::string etag)
    {
        std::lock_guard lk(mu_);
        objects_[url] = {std::move(bytes), std::move(etag)};
    }
    cv::runtime& rt() const override { return ::rt(); }
    bool remote() const noexcept override { return true; }
    asio::awaitable<cv::slice> async_read(cv::location where, std::int64_t = -1) const override
    {
        ++reads;
        co_return cv::slice(cv::buffer::copy_of(get(where).first));
    }
    asio::awaitable<cv::store::object_version> async_version(cv::location where) const override
    {
        ++versions;
        auto [bytes, etag] = get(where);
        co_return cv::store::object_version{etag, static_cast<std::int64_t>(bytes.size())};
    }
    asio::awaitable<std::shared_ptr<const cv::store::ranged_object>> async_open(cv::location where) const override
    {
        ++opens;
        co_return std::make_shared<ranged>(get(where).first);
    }
    std::unique_ptr<cv::chunk_reader> read_chunks(const cv::location& where, const cv::chunk_options& o) const override
    {
        ++reads;
        return std::make_unique<chunks>(where.url(), get(where).first, o);
    }
    std::vector<cv::store::listed_object> list(const cv::location&) const override { return {}; }
    std::unique_ptr<cv::store::object_writer> open_writer(const cv::location&, const cv::store::write_options&) const override { return nullptr; }

    mutable std::atomic<int> reads{0}, versions{0}, opens{0};

private:
    struct ranged final : cv::store::ranged_object {
        explicit ranged(std::string b) : bytes(std::move(b)) {}
        asio::awaitable<cv::slice> async_read(std::uint64_t offset, std::uint64_t length) const override
        {
            if (offset >= bytes.size()) co_return cv::slice{};
            co_return cv::slice(cv::buffer::copy_of(bytes.substr(offset, length)));
        }
        std::string bytes;
    };
    struct chunks final : cv::chunk_reader {
        chunks(std::string u, std::string b, cv::chunk_options o) : url_(std::move(u)), bytes(std::move(b)), o(o), at(std::min<std::uint64_t>(o.offset, bytes.size())) {}
        asio::awaitable<std::optional<cv::chunk>> async_next() override
        {
            const std::uint64_t end = o.length >= bytes.size() - o.offset ? bytes.size() : o.offset + o.length;
            if (at >= end) co_return std::nullopt;
            const std::uint64_t n = std::min<std::uint64_t>(o.chunk_size, end - at);
            cv::chunk c{cv::slice(cv::buffer::copy_of(bytes.substr(at, n))), at};
            at += n;
            co_return c;
        }
        const std::string& url() const noexcept override { return url_; }
        std::int64_t size() const noexcept override { return static_cast<std::int64_t>(bytes.size()); }
        std::string url_, bytes;
        cv::chunk_options o;
        std::uint64_t at;
    };
    std::pair<std::string, std::string> get(const cv::location& where) const
    {
        std::lock_guard lk(mu_);
        const auto it = objects_.find(where.url());
        if (it == objects_.end())
            throw cv::error(std::make_error_code(std::errc::no_such_file_or_directory), {.stage = "memory", .where = where.url()});
        return it->second;
    }
    mutable std::mutex mu_;
    std::map<std::string, std::pair<std::string, std::string>> objects_;
};

struct temp_dir {
    fs::path path;
    explicit temp_dir(const std::string& tag) : path(fs::temp_directory_path() / ("conveyor-cache-" + tag + "-" + std::to_string(::getpid())))
    {
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~temp_dir()
    {
        std::error_code ec;
        fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
        fs::remove_all(path, ec);
    }
};

std::string pattern(std::size_t n, unsigned seed)
{
    std::string s(n, '\0');
    std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (auto& c : s) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        c = static_cast<char>(x);
    }
    return s;
}

/// A cached store over `remote` in `dir`, as a new run would open it.
std::shared_ptr<cv::store::cached_store> fresh_run(std::shared_ptr<memory_store> remote, const fs::path& dir, cv::store::cache_options o = {})
{
    o.dir = dir.string();
    o.fsync = false; // the tests do not crash the machine
    cv::store::start_cache_run(o.dir);
    return std::make_shared<cv::store::cached_store>(remote, o);
}

std::string read_whole(const cv::store::store& st, const std::string& url) { return text_of(run_on(rt(), st.async_read(cv::location(url)))); }

std::string read_chunked(const cv::store::store& st, const std::string& url, std::size_t chunk = 1000, std::uint64_t offset = 0)
{
    cv::chunk_options o;
    o.chunk_size = chunk;
    o.offset = offset;
    auto r = st.read_chunks(cv::location(url), o);
    return run_on(rt(), [](std::unique_ptr<cv::chunk_reader> r, std::uint64_t offset) -> asio::awaitable<std::string> {
        std::string out;
        std::uint64_t expect = offset;
        while (auto c = co_await r->async_next()) {
            if (c->offset != expect) throw std::runtime_error("chunk at " + std::to_string(c->offset) + ", expected " + std::to_string(expect));
            expect += c->bytes.size();
            out += text_of(c->bytes);
        }
        co_return out;
    }(std::move(r), offset));
}

std::vector<fs::path> files_under(const fs::path& dir)
{
    std::vector<fs::path> out;
    for (auto& e : fs::recursive_directory_iterator(dir))
        if (e.is_regular_file()) out.push_back(e.path());
    return out;
}

fs::path object_file(const fs::path& dir)
{
    for (auto& p : files_under(dir / "objects")) return p;
    return {};
}

} // namespace

TEST_CASE("a cached store fetches an object once and serves it from the folder after")
{
    temp_dir d("hit");
    auto remote = std::make_shared<memory_store>();
    const std::string a = pattern(10'000, 1), b = pattern(3'500, 2);
    remote->put("s3://bkt/a.tar", a, "\"e1\"");
    remote->put("s3://bkt/b.bin", b, "\"e2\"");
    auto st = fresh_run(remote, d.path);
    CHECK(read_chunked(*st, "s3://bkt/a.tar") == a); // miss: streamed into the folder
    CHECK(read_whole(*st, "s3://bkt/b.bin") == b);   // miss: whole, written from memory
    CHECK(remote->reads == 2);
    CHECK(read_whole(*st, "s3://bkt/a.tar") == a);
    CHECK(read_chunked(*st, "s3://bkt/b.bin", 999) == b);
    CHECK(read_chunked(*st, "s3://bkt/a.tar", 4096, 1234) == a.substr(1234));
    CHECK(text_of(run_on(rt(), st->async_read_range(cv::location("s3://bkt/a.tar"), 9000, 5000))) == a.substr(9000));
    CHECK(remote->reads == 2);
    CHECK(remote->opens == 0);
    CHECK(remote->versions == 2); // the first read of each object in the run
    auto s = st->stats();
    CHECK(s.misses == 2);
    CHECK(s.hits == 4);
    CHECK(s.bytes_written == a.size() + b.size());
    // A later run checks each version once more, and reads nothing else.
    auto st2 = fresh_run(remote, d.path);
    CHECK(read_chunked(*st2, "s3://bkt/a.tar") == a);
    CHECK(read_whole(*st2, "s3://bkt/b.bin") == b);
    CHECK(remote->reads == 2);
    CHECK(remote->versions == 4);
    CHECK(st2->stats().hits == 2);
    // Through open_store: remote locations come wrapped; local ones do not.
    const auto opened = cv::store::open_store(cv::location("http://example.invalid/x"), {.cache = cv::store::cache_options{.dir = d.path.string()}});
    CHECK(dynamic_cast<const cv::store::cached_store*>(opened.get()) != nullptr);
    const auto local = cv::store::open_store(cv::location("/tmp/x"), {.cache = cv::store::cache_options{.dir = d.path.string()}});
    CHECK(dynamic_cast<const cv::store::cached_store*>(local.get()) == nullptr);
}

TEST_CASE("a cached object whose ETag changed is fetched again; trust serves it without asking")
{
    temp_dir d("etag");
    auto remote = std::make_shared<memory_store>();
    remote->put("s3://bkt/x", "version one", "\"v1\"");
    CHECK(read_whole(*fresh_run(remote, d.path), "s3://bkt/x") == "version one");
    remote->put("s3://bkt/x", "version two!", "\"v2\"");
    {
        auto trusting = fresh_run(remote, d.path, {.trust = true});
        CHECK(read_whole(*trusting, "s3://bkt/x") == "version one");
        CHECK(read_chunked(*trusting, "s3://bkt/x", 4) == "version one");
        CHECK(remote->versions == 1);
        CHECK(remote->reads == 1);
    }
    auto st = fresh_run(remote, d.path);
    CHECK(read_chunked(*st, "s3://bkt/x", 5) == "version two!");
    CHECK(st->stats().stale == 1);
    CHECK(remote->reads == 2);
    CHECK(read_whole(*st, "s3://bkt/x") == "version two!");
    CHECK(remote->reads == 2);
    CHECK(files_under(d.path / "objects").size() == 1);
}

TEST_CASE("the cache evicts the least recently used files to stay under max_bytes")
{
    temp_dir d("lru");
    auto remote = std::make_shared<memory_store>();
    const std::size_t n = 10'000, file = n + 4096;
    for (const char* k : {"a", "b", "c"}) remote->put(std::string("s3://bkt/") + k, pattern(n, k[0]), "\"e\"");
    auto st = fresh_run(remote, d.path, {.max_bytes = 2 * file + file / 2});
    const auto pause = [] { std::this_thread::sleep_for(std::chrono::milliseconds(30)); }; // past the file times' granularity
    read_whole(*st, "s3://bkt/a");
    pause();
    read_whole(*st, "s3://bkt/b");
    pause();
    read_whole(*st, "s3://bkt/a"); // a is now the most recently used
    pause();
    read_whole(*st, "s3://bkt/c"); // over the limit: b goes
    CHECK(st->stats().evicted == 1);
    CHECK(files_under(d.path / "objects").size() == 2);
    CHECK(remote->reads == 3);
    read_whole(*st, "s3://bkt/a");
    read_whole(*st, "s3://bkt/c");
    CHECK(remote->reads == 3);
    CHECK(read_whole(*st, "s3://bkt/b") == pattern(n, 'b'));
    CHECK(remote->reads == 4);
    std::uint64_t total = 0;
    for (auto& p : files_under(d.path / "objects")) total += fs::file_size(p);
    CHECK(total <= 2 * file + file / 2);
}

TEST_CASE("temporary files of a crashed run are removed when the cache opens; none is ever served")
{
    temp_dir d("crash");
    auto remote = std::make_shared<memory_store>();
    remote->put("s3://bkt/k", pattern(5000, 3), "\"e\"");
    auto st = fresh_run(remote, d.path);
    read_whole(*st, "s3://bkt/k");
    const fs::path published = object_file(d.path);
    REQUIRE(!published.empty());
    // What a writer killed mid-object leaves: a temporary beside the name, nobody holding the lock.
    const fs::path left = published.string() + ".tmp.999999.7";
    std::ofstream(left) << "partial";
    const fs::path other = (d.path / "objects" / "0123456789abcdef0123456789abcdef.tmp.12.0");
    std::ofstream(other) << "partial";
    auto st2 = fresh_run(remote, d.path);
    CHECK(st2->stats().leftovers == 2);
    CHECK(!fs::exists(left));
    CHECK(!fs::exists(other));
    CHECK(read_whole(*st2, "s3://bkt/k") == pattern(5000, 3));
    CHECK(remote->reads == 1);
}

TEST_CASE("cache file names come from a hash: a key with ../ stays inside the folder")
{
    temp_dir d("escape");
    const fs::path outside = d.path / "outside";
    const fs::path cache = d.path / "cache";
    auto remote = std::make_shared<memory_store>();
    const std::string url = "s3://bkt/../../outside/../../etc/x";
    remote->put(url, "escaped?", "\"e\"");
    auto st = fresh_run(remote, cache);
    CHECK(read_whole(*st, url) == "escaped?");
    CHECK(read_chunked(*st, url) == "escaped?");
    CHECK(!fs::exists(outside));
    for (auto& p : files_under(d.path)) {
        CHECK(p.string().rfind(cache.string() + "/", 0) == 0);
        const std::string name = p.filename().string();
        CHECK(name.size() == 32);
        CHECK(name.find_first_not_of("0123456789abcdef") == std::string::npos);
    }
}

TEST_CASE("a cached file truncated or altered on disk is fetched again, never served")
{
    temp_dir d("damage");
    auto remote = std::make_shared<memory_store>();
    const std::string bytes = pattern(20'000, 4);
    remote->put("s3://bkt/d", bytes, "\"e\"");
    read_whole(*fresh_run(remote, d.path), "s3://bkt/d");
    const fs::path f = object_file(d.path);
    REQUIRE(fs::file_size(f) == 4096 + bytes.size());

    fs::resize_file(f, 4096 + 15'000); // truncated
    auto st = fresh_run(remote, d.path);
    CHECK(read_chunked(*st, "s3://bkt/d", 4096) == bytes);
    CHECK(st->stats().invalid == 1);
    CHECK(remote->reads == 2);
    CHECK(fs::file_size(f) == 4096 + bytes.size()); // rewritten whole

    {
        std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
        io.seekp(4096 + 12'345);
        io.put(static_cast<char>(bytes[12'345] ^ 0x20)); // altered, same size
    }
    st = fresh_run(remote, d.path);
    CHECK(read_whole(*st, "s3://bkt/d") == bytes);
    CHECK(st->stats().invalid == 1);
    CHECK(remote->reads == 3);

    {
        std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
        io.seekp(10);
        io.put('\x7f'); // a damaged header
    }
    st = fresh_run(remote, d.path);
    CHECK(text_of(run_on(rt(), st->async_read_range(cv::location("s3://bkt/d"), 100, 50))) == bytes.substr(100, 50)); // passed through
    CHECK(remote->opens == 1);
    CHECK(read_chunked(*st, "s3://bkt/d") == bytes);
    CHECK(remote->reads == 4);
}

TEST_CASE("a read-only cache folder is read around with one warning")
{
    temp_dir d("readonly");
    auto remote = std::make_shared<memory_store>();
    for (int i = 0; i < 4; ++i) remote->put("s3://bkt/r" + std::to_string(i), pattern(3000, i), "\"e\"");
    // Cache one object first, so that the read-only folder still has something to serve.
    read_whole(*fresh_run(remote, d.path), "s3://bkt/r0");
    fs::permissions(d.path / "objects", fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read | fs::perms::group_exec |
                                            fs::perms::others_read | fs::perms::others_exec);
    fs::permissions(d.path / "locks", fs::perms::owner_read | fs::perms::owner_exec | fs::perms::others_read | fs::perms::others_exec);
    // Root writes anywhere: drop to an unprivileged user for the duration (the whole
    // process: glibc's seteuid applies to every thread).
    const bool root = ::geteuid() == 0;
    if (root) REQUIRE(::seteuid(65534) == 0);
    struct restore {
        bool root;
        ~restore()
        {
            if (root) (void)::seteuid(0);
        }
    } restore_uid{root};
    auto st = fresh_run(remote, d.path);
    CHECK(read_whole(*st, "s3://bkt/r0") == pattern(3000, 0)); // still served
    for (int i = 1; i < 4; ++i) {
        CHECK(read_whole(*st, "s3://bkt/r" + std::to_string(i)) == pattern(3000, i));
        CHECK(read_chunked(*st, "s3://bkt/r" + std::to_string(i)) == pattern(3000, i));
    }
    const auto s = st->stats();
    CHECK(s.warnings == 1);
    CHECK(s.hits == 1);
    CHECK(s.bypassed == 6);
    CHECK(remote->reads == 1 + 6);
}

TEST_CASE("a full disk makes the cache read around with one warning; the epoch goes on")
{
    temp_dir d("full");
    auto remote = std::make_shared<memory_store>();
    for (int i = 0; i < 4; ++i) remote->put("s3://bkt/f" + std::to_string(i), pattern(200'000, i), "\"e\"");
    auto st = fresh_run(remote, d.path);
    // A file size limit stands for the full disk: writes past it fail (EFBIG, with SIGXFSZ
    // ignored) as they would with ENOSPC, without privileges.
    struct rlimit old{};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
    const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = old;
    small.rlim_cur = 100'000;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
    std::vector<std::string> got;
    for (int i = 0; i < 4; ++i) got.push_back(i % 2 ? read_whole(*st, "s3://bkt/f" + std::to_string(i)) : read_chunked(*st, "s3://bkt/f" + std::to_string(i), 65536));
    ::setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
    for (int i = 0; i < 4; ++i) CHECK(got[i] == pattern(200'000, i));
    const auto s = st->stats();
    CHECK(s.warnings == 1);
    CHECK(files_under(d.path / "objects").empty()); // nothing partial left behind
    CHECK(remote->reads == 5); // the chunked read that met the failure read its object again
}

TEST_CASE("a cache folder on a file system that fills (a small tmpfs): read around with one warning, no partial file")
{
    // The real thing beside the file size limit above: ENOSPC from a tmpfs of 512 KiB, which
    // holds two of the four objects.
    conveyor_test::small_disk disk(512u << 10);
    if (!disk.ok()) {
        MESSAGE("skipped: " << disk.why());
        return;
    }
    auto remote = std::make_shared<memory_store>();
    for (int i = 0; i < 4; ++i) remote->put("s3://bkt/n" + std::to_string(i), pattern(200'000, i), "\"e\"");
    const fs::path dir = disk.path() / "cache";
    auto st = fresh_run(remote, dir);
    for (int i = 0; i < 4; ++i) {
        const std::string url = "s3://bkt/n" + std::to_string(i);
        CHECK((i % 2 ? read_whole(*st, url) : read_chunked(*st, url, 65536)) == pattern(200'000, i));
    }
    CHECK(st->stats().warnings == 1);
    // What stayed in the cache is whole and is served; nothing partial is left under any name.
    const auto kept = files_under(dir / "objects");
    CHECK(kept.size() <= 2);
    for (const auto& f : kept) CHECK(f.filename().string().find("tmp") == std::string::npos);
    auto again = fresh_run(remote, dir);
    const auto reads = remote->reads.load();
    for (int i = 0; i < 4; ++i) CHECK(read_whole(*again, "s3://bkt/n" + std::to_string(i)) == pattern(200'000, i));
    CHECK(static_cast<std::size_t>(remote->reads.load() - reads) == 4 - kept.size());
}

TEST_CASE("concurrent readers of one object in one process fetch it once")
{
    temp_dir d("together");
    auto remote = std::make_shared<memory_store>();
    const std::string bytes = pattern(300'000, 9);
    remote->put("s3://bkt/shared", bytes, "\"e\"");
    auto st = fresh_run(remote, d.path);
    std::vector<std::thread> threads;
    std::atomic<int> good{0};
    for (int i = 0; i < 6; ++i)
        threads.emplace_back([&, i] {
            if ((i % 2 ? read_whole(*st, "s3://bkt/shared") : read_chunked(*st, "s3://bkt/shared", 10'000)) == bytes) ++good;
        });
    for (auto& t : threads) t.join();
    CHECK(good == 6);
    CHECK(remote->reads == 1);
    CHECK(st->stats().misses == 1);
    CHECK(st->stats().hits == 5);
}
