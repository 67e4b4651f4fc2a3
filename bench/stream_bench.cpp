// stream_bench.cpp — one large object read three ways, to compare streamed bodies:
//
//   stream  s3::read_chunks: one GET streamed into pooled chunks (dropped as they come)
//   whole   s3::client::async_get: the object whole in one buffer (ranged parts in parallel)
//   file    file::read_chunks of a local file (with --file)
//
//   conveyor-stream-bench --mode stream|whole --endpoint URL --bucket B --key K
//                         [--chunk-mb 8] [--in-flight 4] [--repeat 3] [--anonymous]
//   conveyor-stream-bench --mode file --file PATH [--chunk-mb 8] [--in-flight 4] [--repeat 3]
//
// One mode per process, so that its peak RSS (getrusage's ru_maxrss) is its own: compare
// modes by running the program once per mode, alternating (bench/README.md). One JSON
// object per run on standard output; a summary on standard error.
#include "support/json_line.hpp"
#include "support/timer.hpp"
#include <conveyor/core/chunks.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/file/chunks.hpp>
#include <conveyor/s3/chunks.hpp>
#include <conveyor/s3/client.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>

#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

namespace cv = conveyor;
namespace cb = conveyor::bench;
namespace s3 = conveyor::s3;
namespace asio = boost::asio;

struct args {
    std::string mode = "stream", endpoint, bucket, key, file, region = "us-east-1";
    std::size_t chunk_mb = 8;
    unsigned in_flight = 4;
    int repeat = 3;
    bool anonymous = false;
};

/// Reads every chunk of `r`, touching one byte per page (as a consumer would read them), and
/// lets each go at once; returns the bytes read.
asio::awaitable<std::uint64_t> consume(cv::chunk_reader& r)
{
    std::uint64_t total = 0;
    unsigned sum = 0;
    while (auto c = co_await r.async_next()) {
        for (std::size_t i = 0; i < c->bytes.size(); i += 4096) sum += static_cast<unsigned>(c->bytes.data()[i]);
        total += c->bytes.size();
    }
    if (sum == 1) std::fprintf(stderr, " "); // keep the reads
    co_return total;
}

double peak_rss_mb()
{
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_maxrss) / 1024.0;
}

int run(const args& a)
{
    cv::runtime rt({.io_threads = 1});
    std::optional<s3::client> client;
    if (a.mode != "file") {
        s3::config_options co;
        co.endpoint_url = a.endpoint;
        co.region = a.region;
        co.anonymous = a.anonymous;
        co.style = s3::addressing::path;
        client.emplace(rt, co);
    }
    const cv::chunk_options o{.chunk_size = a.chunk_mb << 20, .chunks_in_flight = a.in_flight};
    for (int rep = 0; rep < a.repeat; ++rep) {
        cb::stopwatch t;
        std::uint64_t bytes = 0;
        if (a.mode == "whole") {
            bytes = client->run(client->async_get(a.bucket, a.key)).size();
        } else {
            auto r = a.mode == "file" ? cv::file::read_chunks(rt, a.file, o) : s3::read_chunks(*client, a.bucket, a.key, o);
            auto f = asio::co_spawn(rt.io_executor(0), consume(*r), asio::use_future);
            bytes = f.get();
        }
        const double secs = t.seconds();
        const auto budget = rt.memory().stats();
        cb::json_line()
            .add("bench", "stream")
            .add("mode", a.mode)
            .add("rep", rep)
            .add("bytes", bytes)
            .add("seconds", secs)
            .add("mb_per_s", static_cast<double>(bytes) / 1e6 / secs)
            .add("chunk_mb", a.chunk_mb)
            .add("in_flight", a.in_flight)
            .add("budget_peak_mb", static_cast<double>(budget.peak) / 1048576.0)
            .add("budget_waits", budget.waits)
            .add("peak_rss_mb", peak_rss_mb())
            .print();
        std::fprintf(stderr, "%s: %.1f MB in %.3f s = %.0f MB/s; budget peak %.0f MiB; peak RSS %.0f MiB\n", a.mode.c_str(),
                     static_cast<double>(bytes) / 1e6, secs, static_cast<double>(bytes) / 1e6 / secs,
                     static_cast<double>(budget.peak) / 1048576.0, peak_rss_mb());
    }
    return 0;
}

} // namespace

int main(int argc, char** argv)
{
    args a;
    for (int i = 1; i < argc; ++i) {
        const std::string k = argv[i];
        auto val = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "missing value after %s\n", k.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (k == "--mode") a.mode = val();
        else if (k == "--endpoint") a.endpoint = val();
        else if (k == "--bucket") a.bucket = val();
        else if (k == "--key") a.key = val();
        else if (k == "--file") a.file = val();
        else if (k == "--region") a.region = val();
        else if (k == "--chunk-mb") a.chunk_mb = std::stoul(val());
        else if (k == "--in-flight") a.in_flight = static_cast<unsigned>(std::stoul(val()));
        else if (k == "--repeat") a.repeat = std::stoi(val());
        else if (k == "--anonymous") a.anonymous = true;
        else {
            std::fprintf(stderr, "unknown argument %s (see the comment at the top of bench/stream_bench.cpp)\n", k.c_str());
            return 2;
        }
    }
    try {
        return run(a);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "stream-bench: %s\n", e.what());
        return 1;
    }
}
