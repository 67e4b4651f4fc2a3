// conveyor-cache-reader: one of the processes of the store server tests' "several processes
// share one cache" case. Reads each s3:// URL given through a cached store over the folder
// given (in chunks, or whole with --whole), and prints one line per object: its URL, size
// and CRC-32C; then the cache's statistics. The S3 test server's coordinates come from the
// environment (tests/s3/server/with_s3_server.sh).
#include <conveyor/core/checksum.hpp>
#include <conveyor/core/location.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/s3/client.hpp>
#include <conveyor/store/cache.hpp>
#include <conveyor/store/open.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>

#include <openssl/ssl.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace cv = conveyor;
namespace asio = boost::asio;

namespace {

std::string env(const char* name)
{
    const char* v = std::getenv(name);
    if (!v || !*v) {
        std::fprintf(stderr, "conveyor-cache-reader: %s is not set (run under with_s3_server.sh)\n", name);
        std::exit(2);
    }
    return v;
}

asio::awaitable<std::pair<std::uint64_t, std::uint32_t>> read_all(std::shared_ptr<const cv::store::store> st, cv::location where, bool whole)
{
    if (whole) {
        const cv::slice s = co_await st->async_read(where);
        co_return std::pair{std::uint64_t{s.size()}, cv::crc32c(s.span())};
    }
    cv::chunk_options o;
    o.chunk_size = 256 << 10;
    auto r = st->read_chunks(where, o);
    std::uint64_t n = 0;
    std::uint32_t crc = 0;
    while (auto c = co_await r->async_next()) {
        n += c->bytes.size();
        crc = cv::crc32c(c->bytes.span(), crc);
    }
    co_return std::pair{n, crc};
}

} // namespace

int main(int argc, char** argv)
{
    if (argc < 3) {
        std::fprintf(stderr, "usage: conveyor-cache-reader [--whole] DIR s3://bucket/key...\n");
        return 2;
    }
    OPENSSL_init_ssl(0, nullptr);
    int arg = 1;
    const bool whole = std::string(argv[arg]) == "--whole";
    if (whole) ++arg;
    const std::string dir = argv[arg++];
    cv::runtime rt({.io_threads = 2});
    cv::s3::config_options co;
    co.creds = cv::s3::credentials{env("CONVEYOR_TEST_S3_ACCESS_KEY"), env("CONVEYOR_TEST_S3_SECRET_KEY"), "", "test"};
    co.region = env("CONVEYOR_TEST_S3_REGION");
    co.endpoint_url = env("CONVEYOR_TEST_S3_ENDPOINT");
    cv::s3::client c(rt, co);
    int rc = 0;
    try {
        for (; arg < argc; ++arg) {
            const cv::location where(argv[arg]);
            auto st = cv::store::open_store(where, {.s3 = c, .cache = cv::store::cache_options{.dir = dir}});
            auto [n, crc] = asio::co_spawn(rt.io_executor(0), read_all(st, where, whole), asio::use_future).get();
            std::printf("%s %llu %08x\n", argv[arg], static_cast<unsigned long long>(n), crc);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "conveyor-cache-reader: %s\n", e.what());
        rc = 1;
    }
    const auto s = cv::store::cache_stats_of(dir);
    std::printf("stats hits=%llu misses=%llu waits=%llu\n", static_cast<unsigned long long>(s.hits), static_cast<unsigned long long>(s.misses),
                static_cast<unsigned long long>(s.waits));
    return rc;
}
