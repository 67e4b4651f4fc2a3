// Cancellation storm (ctest label `fault`): 1,000 runs over local files, S3 objects, local
// tar shards and S3 shards streamed (through the SigV4 proxy of with_s3_server.sh), each
// decoding JPEGs, each broken out of after a random number of items (none, the first,
// mid-batch, ...) and its range destroyed. Every teardown must end within a watchdog's
// limit; no stage function may be called, nor a coroutine stage resumed, once the range's
// destructor has returned; the run's context must be freed with it; the process must hold
// exactly the descriptors it held before the run; and LeakSanitizer (the asan preset) must
// find nothing at exit. The teardown times (from the break to the destructor's return) are
// printed per source kind, one JSON line each: reported, not asserted.
// CONVEYOR_CANCEL_RUNS sets the number of runs (1,000 by default).
#include "support.hpp"

#include <conveyor/core/stages.hpp>
#include <conveyor/file/index.hpp>
#include <conveyor/file/source.hpp>
#include <conveyor/image/batch.hpp>
#include <conveyor/image/encode.hpp>
#include <conveyor/image/stage.hpp>
#include <conveyor/image/synthetic.hpp>
#include <conveyor/shard/source.hpp>
#include <conveyor/shard/writer.hpp>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <dirent.h>
#include <unistd.h>

using namespace s3test;
namespace fs = std::filesystem;
namespace img = conveyor::image;
namespace shard = conveyor::shard;

namespace {

using clock_type = std::chrono::steady_clock;

enum class source_kind { files, s3_objects, local_shards, s3_shards };
constexpr std::array<const char*, 4> kind_names{"files", "s3-objects", "local-shards", "s3-shards"};

// The dataset every run reads: 24 JPEGs of 40 x 30 in 4 classes, as files, as S3 objects,
// and packed 4 to a shard into 6 local and 6 S3 shards (jpg and cls fields).
constexpr std::size_t image_count = 24;
constexpr std::size_t per_shard = 4;
constexpr std::size_t shard_count = image_count / per_shard;
constexpr std::size_t batch_size = 4;
const std::string s3_prefix = "cancel-storm/";

struct storm_data {
    fs::path dir;
    cv::file::listing files;
    std::vector<std::string> keys; // S3 object keys
    std::string local_shards;      // shard spec
    std::string s3_shards;         // shard spec

    ~storm_data()
    {
        std::error_code ec;
        if (!dir.empty()) fs::remove_all(dir, ec);
    }
};

storm_data& data()
{
    static storm_data d = [] {
        storm_data s;
        s.dir = fs::temp_directory_path() / ("conveyor-cancel-" + std::to_string(::getpid()));
        fs::remove_all(s.dir);
        img::synthetic_images o{.dir = s.dir / "images", .classes = 4, .count = image_count, .width = 40, .height = 30,
                                .quality = 80, .seed = 5, .threads = 1};
        img::make_synthetic_images(o);
        s.files = cv::file::walk(o.dir, {.extensions = {".jpg"}, .labels = true});
        REQUIRE(s.files.size() == image_count);

        auto c = make_client();
        fs::create_directories(s.dir / "shards");
        shard::writer_options lo{.pattern = (s.dir / "shards" / "shard-%06d.tar").string(), .max_count = per_shard};
        shard::writer_options so{.pattern = "s3://" + bucket() + "/" + s3_prefix + "shards/shard-%06d.tar", .max_count = per_shard};
        shard::writer local(lo), remote(so, c);
        auto objects = std::make_shared<std::vector<std::pair<std::string, std::string>>>(); // object name, bytes
        for (std::size_t i = 0; i < s.files.size(); ++i) {
            const auto path = s.files.full_path(i);
            std::string bytes(fs::file_size(path), '\0');
            std::FILE* f = std::fopen(path.c_str(), "rb");
            REQUIRE(f);
            REQUIRE(std::fread(bytes.data(), 1, bytes.size(), f) == bytes.size());
            std::fclose(f);
            const auto label = s.files.entries[i].label;
            const std::string key = "s" + std::to_string(i), cls = std::to_string(label);
            const shard::field_view fields[] = {{"jpg", bytes_of(bytes)}, {"cls", bytes_of(cls)}};
            local.write(key, fields);
            remote.write(key, fields);
            const std::string object = s.files.classes[static_cast<std::size_t>(label)] + "/" + key + ".jpg";
            s.keys.push_back(s3_prefix + "images/" + object);
            objects->emplace_back(object, std::move(bytes));
        }
        local.close();
        remote.close();
        auto blobs = cv::generate(image_count, [objects](std::uint64_t i) {
            const auto& [name, bytes] = (*objects)[i];
            return cv::blob{name, cv::buffer::copy_of(bytes), "", -1, i};
        });
        auto [count, stored] = s3::upload_all(std::move(blobs).on(rt()), c, bucket(), {.prefix = s3_prefix + "images/", .concurrency = 8});
        REQUIRE(count == image_count);
        const std::string range = "shard-{000000..00000" + std::to_string(shard_count - 1) + "}.tar";
        s.local_shards = (s.dir / "shards" / range).string();
        s.s3_shards = "s3://" + bucket() + "/" + s3_prefix + "shards/" + range;
        return s;
    }();
    return d;
}

/// The descriptors this process has open (those of /proc/self/fd but the one reading it),
/// each with what it points to.
std::map<int, std::string> open_fds()
{
    std::map<int, std::string> out;
    DIR* d = ::opendir("/proc/self/fd");
    REQUIRE(d);
    const int own = ::dirfd(d);
    while (const dirent* e = ::readdir(d)) {
        if (e->d_name[0] == '.') continue;
        const int fd = std::atoi(e->d_name);
        if (fd == own) continue;
        char target[512];
        const auto n = ::readlink(("/proc/self/fd/" + std::string(e->d_name)).c_str(), target, sizeof target - 1);
        out[fd] = n > 0 ? std::string(target, static_cast<std::size_t>(n)) : "?";
    }
    ::closedir(d);
    return out;
}

std::string fd_diff(const std::map<int, std::string>& before, const std::map<int, std::string>& after)
{
    std::string s;
    for (const auto& [fd, what] : after)
        if (!before.contains(fd) || before.at(fd) != what) s += " +" + std::to_string(fd) + " (" + what + ")";
    for (const auto& [fd, what] : before)
        if (!after.contains(fd)) s += " -" + std::to_string(fd) + " (" + what + ")";
    return s;
}

/// Waits until each I/O thread has run what was posted to it before this call (the idle
/// connections a client's destructor closes there, for one).
void io_barrier()
{
    for (std::size_t lane = 0; lane < rt().options().io_threads; ++lane) {
        std::promise<void> done;
        auto f = done.get_future();
        asio::post(rt().io_executor(lane), [&done] { done.set_value(); });
        REQUIRE(f.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    }
}

/** Ends the process, naming the run, when a phase of it outlasts its limit: a teardown that
    hangs cannot be unstuck from the test's thread, and ctest's timeout would say less. */
class watchdog {
public:
    watchdog() : thread_([this] { watch(); }) {}
    ~watchdog()
    {
        {
            std::lock_guard lk(mu_);
            quit_ = true;
        }
        cv_.notify_one();
        thread_.join();
    }
    void arm(std::string what, std::chrono::seconds limit)
    {
        {
            std::lock_guard lk(mu_);
            what_ = std::move(what);
            deadline_ = clock_type::now() + limit;
            limit_ = limit;
        }
        cv_.notify_one();
    }
    void disarm() { arm({}, std::chrono::seconds(0)); }

private:
    void watch()
    {
        std::unique_lock lk(mu_);
        while (!quit_) {
            if (what_.empty()) {
                cv_.wait(lk);
                continue;
            }
            const auto deadline = deadline_;
            if (cv_.wait_until(lk, deadline, [&] { return quit_ || deadline_ != deadline; })) continue;
            std::fprintf(stderr, "\nFATAL: cancellation storm: %s did not finish within %llds; ending the test run\n",
                         what_.c_str(), static_cast<long long>(limit_.count()));
            std::fflush(stderr);
            std::_Exit(3);
        }
    }

    std::mutex mu_;
    std::condition_variable cv_;
    std::string what_;
    clock_type::time_point deadline_{};
    std::chrono::seconds limit_{0};
    bool quit_ = false;
    std::thread thread_;
};

/// What one run's stage functions report: the calls made after its range was gone.
struct call_guard {
    std::atomic<bool> gone{false};
    std::atomic<std::uint64_t> calls{0};
    std::atomic<std::uint64_t> late{0};
    void call()
    {
        calls.fetch_add(1, std::memory_order_relaxed);
        if (gone.load(std::memory_order_acquire)) late.fetch_add(1, std::memory_order_relaxed);
    }
};

/// A map on the compute pool and a coroutine map on the I/O threads (which waits a little
/// on a timer, so that cancellation finds some of its calls suspended), both reporting to
/// `g`; then a shuffle, as a user's pipeline has.
template <class T>
cv::pipeline<T> guarded(cv::pipeline<T> p, const std::shared_ptr<call_guard>& g, std::uint64_t seed)
{
    return std::move(p) | cv::map([g](T x) {
               g->call();
               return x;
           },
                                  {.concurrency = 2, .where = cv::run_on::compute, .name = "guard_compute"}) |
           cv::map([g, seed](T x) -> asio::awaitable<T> {
               g->call();
               asio::steady_timer t(co_await asio::this_coro::executor);
               t.expires_after(std::chrono::microseconds(conveyor_test::mix(seed + x.index) % 300));
               co_await t.async_wait(asio::use_awaitable);
               g->call();
               co_return x;
           },
                   {.concurrency = 4, .name = "guard_io"}) |
           cv::shuffle({.buffer = 8, .seed = seed});
}

struct run_result {
    double teardown_ms = 0;
    std::size_t items = 0; // items taken before the break
};

/// Teardown times of one kind, and their distribution.
struct distribution {
    std::vector<double> ms;
    double at(double q) const
    {
        auto v = ms;
        std::sort(v.begin(), v.end());
        if (v.empty()) return 0;
        return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5))];
    }
};

/** One run: starts `p`, takes items until `break_after` of them were taken (-1: the range is
    destroyed without being iterated), breaks, and destroys the range and the pipeline under
    the watchdog. */
template <class T>
run_result storm_run(cv::pipeline<T> p, const std::shared_ptr<call_guard>& g, long break_after, watchdog& dog, const std::string& name)
{
    conveyor_test::run_probe probe;
    auto piped = std::move(p) | probe;
    run_result res;
    dog.arm(name + " while iterating", std::chrono::seconds(60));
    std::optional<cv::range<T>> r(piped.run());
    if (break_after >= 0) {
        for (auto& x : *r) {
            (void)x;
            if (static_cast<long>(res.items) == break_after) break;
            ++res.items;
        }
    }
    dog.arm(name + " tearing down", std::chrono::seconds(10));
    const auto t0 = clock_type::now();
    r.reset();
    const auto t1 = clock_type::now();
    g->gone.store(true, std::memory_order_release);
    { auto drop = std::move(piped); }
    dog.disarm();
    res.teardown_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    CHECK_MESSAGE(probe.run() == nullptr, name << ": the run's context outlived its range");
    return res;
}

} // namespace

TEST_CASE("a storm of runs broken out of after random numbers of items tears down promptly, leaving nothing behind")
{
    const long runs = std::getenv("CONVEYOR_CANCEL_RUNS") ? std::atol(std::getenv("CONVEYOR_CANCEL_RUNS")) : 1000;
    REQUIRE(runs > 0);
    auto& d = data();
    auto files = std::make_shared<const cv::file::listing>(d.files);
    auto object_list = std::make_shared<const s3::object_list>(s3::object_list::from_keys(bucket(), d.keys));
    const img::decode_image_options decode{.decode = {.size = {32, 32}, .crop = img::crop_mode::center}};

    watchdog dog;
    std::mt19937_64 rng(20261128);
    std::array<distribution, 4> times;
    std::array<std::size_t, 4> never_iterated{}, batched{};
    std::vector<std::shared_ptr<call_guard>> guards;

    // One run of `kind` as users write it. Each S3 run has a client of its own, destroyed
    // with it, so that every run must leave exactly the descriptors it found.
    auto one = [&](long run, source_kind kind, bool batches, long break_after) {
        const std::string name = "run " + std::to_string(run) + " (" + kind_names[static_cast<int>(kind)] + ", " +
                                 (batches ? "decode_batches" : "decode_image") + ", break after " + std::to_string(break_after) +
                                 " items)";
        auto g = std::make_shared<call_guard>();
        guards.push_back(g);
        const std::uint64_t seed = static_cast<std::uint64_t>(run);
        std::optional<s3::client> c;
        if (kind == source_kind::s3_objects || kind == source_kind::s3_shards) c.emplace(make_client());
        auto finish = [&](auto p) {
            if (batches)
                return storm_run(std::move(p) | img::decode_batches(decode, {.size = batch_size, .capacity = 1}), g, break_after, dog, name);
            return storm_run(std::move(p) | img::decode_image(decode), g, break_after, dog, name);
        };
        run_result res;
        switch (kind) {
        case source_kind::files:
            res = finish(guarded(cv::file::files(files, {.concurrency = 4}).on(rt()), g, seed));
            break;
        case source_kind::s3_objects:
            res = finish(guarded(s3::objects(*c, object_list, {.concurrency = 4, .capacity = 4}).on(rt()), g, seed));
            break;
        case source_kind::local_shards:
        case source_kind::s3_shards: {
            shard::source_options so{.order = {.seed = seed}, .share = conveyor::split{}, .shards_in_flight = 2, .capacity = 8};
            so.chunks.chunk_size = 4096;
            so.chunks.chunks_in_flight = 2;
            if (c) so.s3 = *c;
            res = finish(guarded(shard::shards(kind == source_kind::s3_shards ? d.s3_shards : d.local_shards, so).on(rt()), g, seed));
            break;
        }
        }
        c.reset();
        return std::pair(name, res);
    };

    // A warm-up run of each kind to the end of its first item: the runtime's rings, pools
    // and threads exist from here on, and the descriptors now open are the baseline.
    for (int k = 0; k < 4; ++k) one(-1 - k, static_cast<source_kind>(k), k % 2 == 0, 1);
    io_barrier();
    const auto baseline = open_fds();
    guards.clear();

    const auto storm_start = clock_type::now();
    std::size_t fd_failures = 0;
    for (long run = 0; run < runs; ++run) {
        const auto kind = static_cast<source_kind>(rng() % 4);
        const bool batches = rng() % 2 == 0;
        // A run of decode_image yields image_count items, one of decode_batches
        // image_count / batch_size; the break comes before the last, mid-batch when
        // batching (a batch is always being filled behind the one taken). One run in eight
        // is destroyed without being iterated, one in eight after its first item.
        const long items = static_cast<long>(batches ? image_count / batch_size : image_count);
        const auto pick = rng() % 8;
        const long break_after = pick == 0 ? -1 : pick == 1 ? 0 : static_cast<long>(rng() % static_cast<std::uint64_t>(items - 1));
        auto [name, res] = one(run, kind, batches, break_after);
        times[static_cast<int>(kind)].ms.push_back(res.teardown_ms);
        never_iterated[static_cast<int>(kind)] += break_after < 0;
        batched[static_cast<int>(kind)] += batches;
        io_barrier();
        const auto now = open_fds();
        if (now != baseline && ++fd_failures <= 5) CHECK_MESSAGE(false, name << " left descriptors changed:" << fd_diff(baseline, now));
    }
    const double storm_s = std::chrono::duration<double>(clock_type::now() - storm_start).count();

    // Late calls would come after their run: looked at once every run is over.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::uint64_t calls = 0, late = 0;
    for (const auto& g : guards) {
        calls += g->calls.load();
        late += g->late.load();
    }
    CHECK(fd_failures == 0);
    CHECK_MESSAGE(late == 0, late << " stage calls came after their run's range was destroyed");
    CHECK(calls > 0);
    CHECK(open_fds() == baseline);

    distribution all;
    for (int k = 0; k < 4; ++k) {
        const auto& t = times[static_cast<std::size_t>(k)];
        all.ms.insert(all.ms.end(), t.ms.begin(), t.ms.end());
        std::printf("{\"test\":\"cancel\",\"kind\":\"%s\",\"runs\":%zu,\"never_iterated\":%zu,\"decode_batches\":%zu,"
                    "\"p50_ms\":%.3f,\"p90_ms\":%.3f,\"p99_ms\":%.3f,\"max_ms\":%.3f}\n",
                    kind_names[static_cast<std::size_t>(k)], t.ms.size(), never_iterated[static_cast<std::size_t>(k)],
                    batched[static_cast<std::size_t>(k)], t.at(0.5), t.at(0.9), t.at(0.99), t.at(1.0));
    }
    std::printf("{\"test\":\"cancel\",\"kind\":\"all\",\"runs\":%zu,\"p50_ms\":%.3f,\"p90_ms\":%.3f,\"p99_ms\":%.3f,\"max_ms\":%.3f,"
                "\"stage_calls\":%llu,\"late_calls\":%llu,\"storm_s\":%.1f}\n",
                all.ms.size(), all.at(0.5), all.at(0.9), all.at(0.99), all.at(1.0), static_cast<unsigned long long>(calls),
                static_cast<unsigned long long>(late), storm_s);
    std::printf("cancel storm: %zu runs in %.1f s; teardown p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms (target p99 < 100 ms); "
                "%llu late calls, descriptors as before: %s\n",
                all.ms.size(), storm_s, all.at(0.5), all.at(0.9), all.at(0.99), all.at(1.0), static_cast<unsigned long long>(late),
                open_fds() == baseline ? "yes" : "no");
    std::fflush(stdout);
}
