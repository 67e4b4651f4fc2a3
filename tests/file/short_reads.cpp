// Short reads: a read of a regular file may return fewer bytes than asked before the file's
// end (a signal, a network or FUSE file system), and the file source must ask again for the
// rest rather than report a shrunk file; a file that did shrink is still an error naming it.
// A local disk almost never returns a short read, so these tests make every read short with
// the test-only cap `conveyor::file::detail::read_cap_for_tests` (each read asks for at most
// that many bytes), on both backends (io_uring: the linked small-file chain, the chunked
// large-file reads; pread).
#include "support.hpp"

#include <map>

namespace cv = conveyor;
namespace cf = conveyor::file;
namespace cfd = conveyor::file::detail;
namespace fs = std::filesystem;
using ftest::temp_dir;

namespace {

/// Every read asks for at most `cap` bytes while this lives.
struct read_cap {
    explicit read_cap(std::uint32_t cap) { cfd::read_cap_for_tests.store(cap); }
    ~read_cap() { cfd::read_cap_for_tests.store(0); }
    read_cap(const read_cap&) = delete;
    read_cap& operator=(const read_cap&) = delete;
};

cv::runtime_options short_read_opts(const ftest::backend_case& bc)
{
    cv::runtime_options o;
    o.io_threads = 2;
    o.backend = bc.backend;
    o.log = ftest::log_capture().sink();
    return o;
}

std::size_t sizes(std::size_t i)
{
    // Empty, one read's worth and around it, several reads, and files past the chunk size
    // (read in chunks, each one short too).
    static constexpr std::size_t s[] = {0, 1, 999, 1000, 1001, 4096, 12345, 65535, 65536, 65537, 200'003};
    return i < std::size(s) ? s[i] : 3000 + (ftest::mix(i) % 30000);
}

} // namespace

TEST_CASE("short reads of regular files are continued, not reported as shrunk files")
{
    temp_dir d;
    const auto t = ftest::make_tree(d.path(), 40, 3, sizes);
    const auto l = cf::walk(d.path());
    read_cap cap(1000);
    for (const auto& bc : ftest::backends()) {
        INFO(std::string(bc.name));
        cv::runtime rt(short_read_opts(bc));
        cf::source_options so;
        so.chunk_size = 64 * 1024;
        auto p = cf::files(l, so).on(rt);
        const auto got = ftest::run_all(p);
        if (got.error) {
            const auto e = ftest::as_error(got.error);
            FAIL("the run failed: " << std::string(e ? e->what() : "not a conveyor::error"));
        }
        ftest::check_in_order(got.blobs, l, t);
    }
}

TEST_CASE("a file listed without its size is read whole through short reads")
{
    temp_dir d;
    const auto t = ftest::make_tree(d.path(), 12, 1, sizes);
    std::vector<std::string> paths;
    for (const auto& r : t.rel) paths.push_back((d.path() / r).string());
    read_cap cap(777);
    for (const auto& bc : ftest::backends()) {
        INFO(std::string(bc.name));
        cv::runtime rt(short_read_opts(bc));
        auto p = cf::files(paths).on(rt); // sizes unknown: a statx first
        const auto got = ftest::run_all(p);
        REQUIRE_FALSE(got.error);
        REQUIRE(got.blobs.size() == t.contents.size());
        for (std::size_t i = 0; i < got.blobs.size(); ++i) CHECK(ftest::bytes_of(got.blobs[i]) == t.contents[i]);
    }
}

TEST_CASE("under short reads, a file that really shrank is still errc::file_shrank naming it")
{
    temp_dir d;
    const auto t = ftest::make_tree(d.path(), 6, 1, [](std::size_t i) { return i == 2 ? 150'000 : 5000 + i; });
    const auto l = cf::walk(d.path());
    const std::string bad = t.rel[2];
    fs::resize_file(d.path() / bad, 4321);
    read_cap cap(1000);
    for (const auto& bc : ftest::backends()) {
        for (std::uint32_t chunk : {64u * 1024, 8u << 20}) { // chunked, and one small-file chain
            INFO(std::string(bc.name) << ", chunk " << chunk);
            cv::runtime rt(short_read_opts(bc));
            cf::source_options so;
            so.chunk_size = chunk;
            auto p = cf::files(l, so).on(rt);
            const auto e = ftest::as_error(ftest::run_all(p).error);
            REQUIRE(e);
            CHECK(ftest::same_code(e->code(), cf::errc::file_shrank));
            CHECK(std::string(e->what()).find((d.path() / bad).string()) != std::string::npos);
            CHECK(std::string(e->what()).find("listed with 150000 bytes, read 4321") != std::string::npos);
        }
    }
}
