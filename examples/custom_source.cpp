// custom_source: a source of your own on conveyor's source core (conveyor::keyed_source).
//
// The "store" here is a directory of text records read through a slow, asynchronous API
// (each lookup waits `--latency-ms`, as a database or a remote store would). keyed_source
// keeps `--in-flight` lookups going at once, delivers the records in key order, and applies
// the error policy: a missing record fails the run, or with --skip-missing is counted and
// left out. Breaking out of the loop cancels the lookups in flight.
//
//   custom_source --dir /tmp/records --count 200 --in-flight 32 --latency-ms 20
#include <conveyor/conveyor.hpp>

#include <CLI/CLI.hpp>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

namespace asio = boost::asio;
namespace cv = conveyor;

namespace {

/// One record of the store.
struct record {
    std::uint64_t id = 0;
    std::string text;
};

/// A store with an asynchronous lookup that takes a while, as remote stores do.
class slow_store {
public:
    slow_store(std::filesystem::path dir, std::chrono::milliseconds latency) : dir_(std::move(dir)), latency_(latency) {}

    /// Looks up record `id`: the item, or an error naming it (no throw for a missing one).
    asio::awaitable<cv::read_outcome<record>> async_lookup(std::uint64_t id) const
    {
        asio::steady_timer wait(co_await asio::this_coro::executor, latency_);
        co_await wait.async_wait(asio::use_awaitable); // the request's round trip
        const auto path = dir_ / ("record-" + std::to_string(id) + ".txt");
        std::ifstream in(path);
        if (!in)
            co_return cv::error(std::make_error_code(std::errc::no_such_file_or_directory),
                                {.stage = "records", .key = std::to_string(id), .where = path.string()});
        std::stringstream ss;
        ss << in.rdbuf();
        co_return record{id, ss.str()};
    }

private:
    std::filesystem::path dir_;
    std::chrono::milliseconds latency_;
};

/// The source: record ids 0..count-1 from `store`, N lookups at once.
cv::pipeline<record> records(std::shared_ptr<const slow_store> store, std::uint64_t count, cv::source_settings<record> s)
{
    return cv::keyed_source<record>("records", count, std::move(s), [store](cv::run_context&) {
        // The reader: called on an I/O thread with each key; shared by every lookup of the run.
        return [store](std::uint64_t id) { return store->async_lookup(id); };
    });
}

} // namespace

int main(int argc, char** argv)
{
    CLI::App app{"A source of your own on conveyor's source core"};
    std::string dir = "/tmp/conveyor-records";
    std::uint64_t count = 200;
    std::size_t in_flight = 32;
    int latency_ms = 20;
    bool skip_missing = false;
    app.add_option("--dir", dir, "where the records are (made when missing)");
    app.add_option("--count", count, "records to read");
    app.add_option("--in-flight", in_flight, "lookups in flight at once");
    app.add_option("--latency-ms", latency_ms, "how long each lookup waits");
    app.add_flag("--skip-missing", skip_missing, "count and leave out missing records instead of failing");
    CLI11_PARSE(app, argc, argv);

    // A few records to read (every 50th is missing, to show the error policy).
    std::filesystem::create_directories(dir);
    for (std::uint64_t i = 0; i < count; ++i) {
        const auto path = std::filesystem::path(dir) / ("record-" + std::to_string(i) + ".txt");
        if (i % 50 == 49) std::filesystem::remove(path);
        else if (!std::filesystem::exists(path)) std::ofstream(path) << "record " << i << "\n";
    }

    cv::runtime rt;
    auto store = std::make_shared<const slow_store>(dir, std::chrono::milliseconds(latency_ms));
    auto pipe = records(store, count,
                        {.concurrency = in_flight, .errors = skip_missing ? cv::on_error::skip : cv::on_error::fail})
                    .on(rt);
    const auto t0 = std::chrono::steady_clock::now();
    std::uint64_t n = 0, bytes = 0;
    try {
        auto run = pipe.run();
        while (auto r = run.next()) {
            ++n;
            bytes += r->text.size();
        }
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("custom_source: %llu records (%llu bytes) in %.2f s with %zu lookups in flight of %d ms each: "
                    "%.0f records/s; %llu skipped\n",
                    static_cast<unsigned long long>(n), static_cast<unsigned long long>(bytes), s, in_flight, latency_ms,
                    static_cast<double>(n) / s, static_cast<unsigned long long>(run.stats().skipped.load()));
    } catch (const cv::error& e) {
        std::fprintf(stderr, "custom_source: %s (after %llu records; --skip-missing leaves such records out)\n", e.what(),
                     static_cast<unsigned long long>(n));
        return 1;
    }
    return 0;
}
