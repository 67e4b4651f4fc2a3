// Tests of conveyor/core/{error,buffer,channel}.hpp: error codes and messages, the buffer
// pool, and the bounded sequenced channel between stages.
#include "../support.hpp"

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/detail/channel.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/core/run_context.hpp>

#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/system/system_error.hpp>

#include <algorithm>
#include <cerrno>
#include <numeric>
#include <random>
#include <set>
#include <stdexcept>
#include <system_error>

namespace asio = boost::asio;
using conveyor::detail::channel;
using namespace std::chrono_literals;
using test::code_of;
using test::what_of;

namespace {

// ---- coroutine plumbing for channel tests -------------------------------------------------
// Channel tests drive everything on a local io_context from the test thread: after
// `settle(io)` every coroutine has run as far as it can, so "still waiting" is a fact, not a
// guess about timing.

struct outcome {
    bool done = false;
    std::exception_ptr error;
};

void start(asio::io_context& io, asio::awaitable<void> a, outcome& o)
{
    asio::co_spawn(io, std::move(a), [&o](std::exception_ptr e) {
        o.done = true;
        o.error = e;
    });
}

void settle(asio::io_context& io)
{
    // poll() also stops early when the io_context runs out of counted work (a coroutine
    // parked in a channel's waiter list is not counted), so go on until nothing is ready.
    do {
        io.restart();
    } while (io.poll() > 0);
}

asio::awaitable<void> yield_now()
{
    co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
}

asio::awaitable<void> send_each(channel<int>& ch, std::vector<int> items, int* sent, bool* last)
{
    for (int x : items) {
        *last = co_await ch.send(x);
        if (!*last) co_return;
        ++*sent;
    }
}

asio::awaitable<void> send_at_each(channel<int>& ch, std::vector<std::uint64_t> seqs, int yields_seed)
{
    std::uint64_t r = static_cast<std::uint64_t>(yields_seed);
    for (auto s : seqs) {
        r = test::mix(r);
        for (std::uint64_t k = 0; k < r % 4; ++k) co_await yield_now();
        { const bool ok_ = co_await ch.send_at(s, static_cast<int>(s)); REQUIRE(ok_); }
    }
}

asio::awaitable<void> receive_all(channel<int>& ch, std::vector<int>* got, std::size_t max)
{
    std::vector<int> batch;
    while (co_await ch.receive_some(batch, max)) {
        CHECK(batch.size() <= max);
        got->insert(got->end(), batch.begin(), batch.end());
        batch.clear();
    }
}

asio::awaitable<void> receive_one(channel<int>& ch, std::optional<int>* got)
{
    *got = co_await ch.receive();
}

} // namespace

// ==== errors ===================================================================================

TEST_CASE("every core error code has its own message in the conveyor.core category")
{
    using conveyor::errc;
    const auto& cat = conveyor::core_category();
    CHECK(std::string_view(cat.name()) == "conveyor.core");
    CHECK(cat.message(static_cast<int>(errc::cancelled)) == "pipeline cancelled");
    CHECK(cat.message(static_cast<int>(errc::invalid_argument)) == "invalid argument");
    CHECK(cat.message(static_cast<int>(errc::stream_ended)) == "range was moved from");
    CHECK(cat.message(static_cast<int>(errc::stage_failed)) == "stage failed");
    CHECK(cat.message(0) == "unknown conveyor.core error");
    CHECK(cat.message(999) == "unknown conveyor.core error");

    static_assert(std::is_error_code_enum_v<errc>);
    std::error_code ec = errc::stage_failed; // implicit, through make_error_code
    CHECK(ec.value() == static_cast<int>(errc::stage_failed));
    CHECK(&ec.category() == &cat);
    CHECK(ec == errc::stage_failed);
    CHECK(ec != errc::cancelled);
    CHECK(conveyor::make_error_code(errc::cancelled).message() == "pipeline cancelled");
    CHECK(static_cast<int>(errc::cancelled) != 0); // zero would read as "no error"
}

TEST_CASE("an error's message says what failed, where, and why")
{
    using conveyor::errc;
    using ctx = conveyor::error::context;
    const auto enoent = std::make_error_code(std::errc::no_such_file_or_directory);
    struct row {
        std::error_code ec;
        ctx c;
        std::string expected;
    };
    const row rows[] = {
        {errc::cancelled, {}, "conveyor: pipeline cancelled"},
        {enoent, {.stage = "files", .where = "/data/x.jpg"}, "conveyor: stage 'files': /data/x.jpg: " + enoent.message()},
        // A key the path already ends with is not said twice...
        {enoent, {.stage = "files", .key = "n01/x.jpg", .where = "/data/n01/x.jpg"},
         "conveyor: stage 'files': /data/n01/x.jpg: " + enoent.message()},
        {enoent, {.key = "/data/x.jpg", .where = "/data/x.jpg"}, "conveyor: /data/x.jpg: " + enoent.message()},
        // ...any other key is.
        {enoent, {.stage = "tar", .key = "n01/img1", .where = "/s/shard-3.tar"},
         "conveyor: stage 'tar': /s/shard-3.tar: item 'n01/img1': " + enoent.message()},
        {enoent, {.key = "k9"}, "conveyor: item 'k9': " + enoent.message()},
        {errc::invalid_argument, {.where = "s3://b/shard-0.tar", .offset = 512, .detail = "bad tar header"},
         "conveyor: s3://b/shard-0.tar: at byte 512: bad tar header (invalid argument)"},
        {errc::invalid_argument, {.offset = 0}, "conveyor: at byte 0: invalid argument"},
        // The code's message is left out where the detail already says it...
        {enoent, {.detail = "open /x: " + enoent.message()}, "conveyor: open /x: " + enoent.message()},
        // ...and where the code only says that a user function failed.
        {errc::stage_failed, {.stage = "map", .key = "k1", .detail = "boom"}, "conveyor: stage 'map': item 'k1': boom"},
        {std::error_code{}, {.detail = "just a detail"}, "conveyor: just a detail"},
    };
    for (const auto& r : rows) {
        const conveyor::error e(r.ec, r.c);
        CAPTURE(r.expected);
        CHECK(std::string(e.what()) == r.expected);
        CHECK(e.code() == r.ec);
    }
}

// Regression test, fixed bug (minor): error::describe leaves the key out when `where` merely ends with the same
// characters ("/data/11.jpg" ends with "1.jpg"), not only when it ends with the key as whole
// path components, so the message can name the wrong file without saying which item failed.
TEST_CASE("an error names the item unless the path ends with it as whole components")
{
    const auto enoent = std::make_error_code(std::errc::no_such_file_or_directory);
    const conveyor::error e(enoent, {.stage = "files", .key = "1.jpg", .where = "/data/11.jpg"});
    CHECK(std::string(e.what()) == "conveyor: stage 'files': /data/11.jpg: item '1.jpg': " + enoent.message());
    const conveyor::error whole(enoent, {.key = "1.jpg", .where = "/data/1.jpg"});
    CHECK(std::string(whole.what()) == "conveyor: /data/1.jpg: " + enoent.message());
}

TEST_CASE("an error keeps its context and its code")
{
    const conveyor::error e(conveyor::errc::invalid_argument,
                            {.stage = "tar", .key = "n01/img1", .where = "/s/shard-3.tar", .offset = 1536, .detail = "truncated"});
    CHECK(e.stage() == "tar");
    CHECK(e.key() == "n01/img1");
    CHECK(e.where() == "/s/shard-3.tar");
    CHECK(e.offset() == 1536);
    CHECK(e.ctx().detail == "truncated");
    CHECK(e.code() == conveyor::errc::invalid_argument);
    const std::system_error& as_system = e; // catchable as a system_error
    CHECK(as_system.code().category() == conveyor::core_category());
    CHECK(conveyor::error(conveyor::errc::cancelled, {}).offset() == -1);
}

TEST_CASE("Boost error codes convert to std ones with the same value and message")
{
    const boost::system::error_code b = asio::error::operation_aborted;
    const std::error_code s = conveyor::to_std_error(b);
    CHECK(s.value() == ECANCELED);
    CHECK(s.message() == b.message());
    CHECK(s == std::errc::operation_canceled);
    CHECK_FALSE(conveyor::to_std_error(boost::system::error_code{}));
}

TEST_CASE("with_context names the stage and item and keeps the original as the nested exception")
{
    using conveyor::detail::with_context;
    SUBCASE("a std::exception becomes stage_failed with its message as the detail")
    {
        auto e = with_context(std::make_exception_ptr(std::runtime_error("bad pixels")), "decode", "k7");
        try {
            std::rethrow_exception(e);
        } catch (const conveyor::error& x) {
            CHECK(x.code() == conveyor::errc::stage_failed);
            CHECK(x.stage() == "decode");
            CHECK(x.key() == "k7");
            CHECK(std::string(x.what()) == "conveyor: stage 'decode': item 'k7': bad pixels");
            CHECK_THROWS_WITH_AS(std::rethrow_if_nested(x), "bad pixels", std::runtime_error);
        }
    }
    SUBCASE("a system_error keeps its code, and its text when that says more")
    {
        const auto enoent = std::make_error_code(std::errc::no_such_file_or_directory);
        auto e = with_context(std::make_exception_ptr(std::system_error(enoent, "/data/a.jpg")), "files", "a.jpg");
        CHECK(code_of(e) == enoent);
        CHECK(what_of(e) == "conveyor: stage 'files': item 'a.jpg': /data/a.jpg: " + enoent.message());
        auto plain = with_context(std::make_exception_ptr(std::system_error(enoent)), "files", "");
        CHECK(what_of(plain) == "conveyor: stage 'files': " + enoent.message());
    }
    SUBCASE("a Boost system_error keeps its code")
    {
        auto e = with_context(std::make_exception_ptr(boost::system::system_error(asio::error::connection_reset)), "http", "obj");
        CHECK(code_of(e).value() == ECONNRESET);
        CHECK(what_of(e) == "conveyor: stage 'http': item 'obj': " + std::make_error_code(std::errc::connection_reset).message());
    }
    SUBCASE("an error that already names a stage is passed on untouched")
    {
        auto original = std::make_exception_ptr(conveyor::error(conveyor::errc::invalid_argument, {.stage = "inner"}));
        CHECK(with_context(original, "outer", "k") == original);
    }
    SUBCASE("an error without a stage gets this one, keeping its own context")
    {
        auto e = with_context(std::make_exception_ptr(conveyor::error(conveyor::errc::invalid_argument, {.where = "/x", .offset = 3})),
                              "tar", "k");
        try {
            std::rethrow_exception(e);
        } catch (const conveyor::error& x) {
            CHECK(x.stage() == "tar");
            CHECK(x.where() == "/x");
            CHECK(x.offset() == 3);
            CHECK(x.key() == "k");
            CHECK(x.code() == conveyor::errc::invalid_argument);
        }
    }
    SUBCASE("something that is not an exception is still reported")
    {
        auto e = with_context(std::make_exception_ptr(42), "map", "k");
        CHECK(what_of(e) == "conveyor: stage 'map': item 'k': unknown exception");
    }
}

// Regression test, fixed bug (minor): with_context keeps the text of a std::system_error (`c.detail = x.what()`)
// but drops that of a boost::system::system_error, which is what Asio and Beast throw: the
// "GET /bucket/key" a caller put there to say what failed is lost from the message.
TEST_CASE("with_context keeps the text of a Boost system_error too")
{
    auto e = conveyor::detail::with_context(
        std::make_exception_ptr(boost::system::system_error(asio::error::connection_reset, "GET /bucket/key")), "s3", "key");
    CHECK(code_of(e).value() == ECONNRESET);
    const auto what = what_of(e);
    CAPTURE(what);
    CHECK(what.find("GET /bucket/key") != std::string::npos);
}

// ==== buffers ==================================================================================

TEST_CASE("size classes hold every size with at most a quarter wasted")
{
    using namespace conveyor::detail;
    CHECK(class_size(0) == 4096);
    CHECK(class_size(class_count - 1) == (std::size_t{4} << 30));
    for (std::size_t c = 1; c < class_count; ++c) CHECK(class_size(c) > class_size(c - 1));

    auto check_size = [](std::size_t n) {
        const std::size_t c = class_for(n);
        REQUIRE(c < class_count);
        CHECK(class_size(c) >= n);
        if (c > 0) CHECK(class_size(c - 1) < n); // the smallest class that fits
        if (n >= 4096) CHECK(class_size(c) - n <= n / 4);
    };
    for (std::size_t n = 1; n <= (std::size_t{1} << 20); ++n) {
        const std::size_t c = class_for(n);
        if (class_size(c) < n || (c > 0 && class_size(c - 1) >= n) || (n >= 4096 && class_size(c) - n > n / 4)) {
            CAPTURE(n);
            check_size(n); // report the first failure in detail
            break;
        }
    }
    for (std::size_t shift = 20; shift <= 28; ++shift)
        for (std::size_t n : {(std::size_t{1} << shift) - 1, std::size_t{1} << shift, (std::size_t{1} << shift) + 1,
                              (std::size_t{5} << (shift - 2)) + 1, (std::size_t{7} << (shift - 2)) - 1}) {
            if (n > (std::size_t{256} << 20)) continue;
            CAPTURE(n);
            check_size(n);
        }
    CHECK(class_for((std::size_t{4} << 30) + 1) == class_count); // too large to pool
}

TEST_CASE("a buffer pool hands out page-aligned buffers of the asked size")
{
    conveyor::buffer_pool pool;
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{4095}, std::size_t{4096}, std::size_t{4097},
                          std::size_t{110'000}, std::size_t{1} << 20, (std::size_t{3} << 20) + 7}) {
        CAPTURE(n);
        auto b = pool.acquire(n);
        CHECK(b.size() == n);
        CHECK(b.capacity() >= n);
        CHECK(b.capacity() >= 4096);
        if (n >= 4096) CHECK(b.capacity() - n <= n / 4);
        REQUIRE(b.data() != nullptr);
        CHECK(reinterpret_cast<std::uintptr_t>(b.data()) % 4096 == 0);
        CHECK(b.empty() == (n == 0));
        CHECK(b.span().size() == n);
        if (n) {
            std::memset(b.data(), 0xab, b.capacity()); // the whole capacity is ours (ASan checks)
            CHECK(b.view().size() == n);
        }
    }
    // Beyond the largest class the pool allocates exactly, and does not keep the memory.
    const std::size_t huge = (std::size_t{4} << 30) + 4096;  // address space only: never touched
    {
        auto b = pool.acquire(huge);
        CHECK(b.size() == huge);
        CHECK(b.capacity() == huge);
        CHECK(reinterpret_cast<std::uintptr_t>(b.data()) % 4096 == 0);
    }
    CHECK(pool.cached_bytes() < huge);
}

TEST_CASE("a buffer pool maps large buffers 2 MiB-aligned, writable to the end, and reuses them")
{
    conveyor::buffer_pool pool;
    const std::size_t n = (std::size_t{3} << 20) + 123;
    const std::byte* first = nullptr;
    {
        auto b = pool.acquire(n);
        REQUIRE(b.capacity() >= n);
        CHECK(reinterpret_cast<std::uintptr_t>(b.data()) % (std::size_t{2} << 20) == 0);
        std::memset(b.data(), 0x5a, b.capacity());
        CHECK(b.data()[b.capacity() - 1] == std::byte{0x5a});
        first = b.data();
    }
    const auto allocations = pool.allocations();
    auto again = pool.acquire(n);
    CHECK(again.data() == first);
    CHECK(pool.allocations() == allocations);
}

TEST_CASE("a buffer pool reuses released buffers instead of allocating")
{
    conveyor::buffer_pool pool;
    CHECK(pool.allocations() == 0);
    const std::byte* first = nullptr;
    for (int i = 0; i < 100; ++i) {
        auto b = pool.acquire(100'000 + static_cast<std::size_t>(i) * 100); // all in the 112 KiB class
        if (!first) first = b.data();
        CHECK(b.data() == first);
    }
    CHECK(pool.allocations() == 1);
    CHECK(pool.cached_bytes() == 112 * 1024);

    // Holding two at once needs a second allocation; afterwards both are reused.
    {
        auto a = pool.acquire(100'000);
        auto b = pool.acquire(100'000);
        CHECK(a.data() != b.data());
        CHECK(pool.cached_bytes() == 0);
    }
    CHECK(pool.allocations() == 2);
    for (int i = 0; i < 10; ++i) {
        auto a = pool.acquire(100'000);
        auto b = pool.acquire(100'000);
    }
    CHECK(pool.allocations() == 2);
    CHECK(pool.cached_bytes() == 2 * 112 * 1024);

    // Another class does not take these.
    { auto c = pool.acquire(5000); }
    CHECK(pool.allocations() == 3);
}

TEST_CASE("a buffer pool keeps at most max_cached_bytes idle")
{
    const std::size_t cls = 112 * 1024;
    conveyor::buffer_pool pool(2 * cls + cls / 2); // room for two idle buffers, not three
    {
        auto a = pool.acquire(100'000);
        auto b = pool.acquire(100'000);
        auto c = pool.acquire(100'000);
        CHECK(pool.allocations() == 3);
    }
    CHECK(pool.cached_bytes() == 2 * cls);
    {
        auto a = pool.acquire(100'000);
        auto b = pool.acquire(100'000);
        auto c = pool.acquire(100'000);
        CHECK(pool.cached_bytes() == 0);
    }
    CHECK(pool.allocations() == 4); // two were reused, one freed and allocated again

    conveyor::buffer_pool none(0);
    for (int i = 0; i < 3; ++i) { auto b = none.acquire(10); }
    CHECK(none.cached_bytes() == 0);
    CHECK(none.allocations() == 3);
}

TEST_CASE("buffers outlive their pool")
{
    conveyor::buffer b;
    std::vector<conveyor::buffer> more;
    {
        conveyor::buffer_pool pool;
        b = pool.acquire(9000);
        for (int i = 0; i < 4; ++i) more.push_back(pool.acquire(9000));
    }
    std::memset(b.data(), 1, b.size()); // ASan reports a use after free if the pool freed it
    CHECK(std::to_integer<int>(b.data()[8999]) == 1);
    more.clear(); // go back to the (now unowned) pool state, which frees them
    b = conveyor::buffer{};
    CHECK(b.data() == nullptr);
}

TEST_CASE("buffers move, and a moved-from buffer is empty")
{
    conveyor::buffer_pool pool;
    auto a = pool.acquire(5000);
    auto* p = a.data();
    conveyor::buffer b(std::move(a));
    CHECK(b.data() == p);
    CHECK(b.size() == 5000);
    CHECK(a.data() == nullptr); // NOLINT(bugprone-use-after-move): the state is specified
    CHECK(a.size() == 0);
    CHECK(a.capacity() == 0);
    CHECK(a.empty());
    a = std::move(b);
    CHECK(a.data() == p);
    a = std::move(a); // self-move keeps it
    CHECK(a.data() == p);
    b = pool.acquire(5000);
    CHECK(pool.allocations() == 2);
    b = std::move(a); // b's old buffer goes back to the pool
    CHECK(pool.cached_bytes() > 0);
}

TEST_CASE("resize never grows a buffer past its capacity")
{
    conveyor::buffer_pool pool;
    auto b = pool.acquire(100);
    b.resize(10);
    CHECK(b.size() == 10);
    b.resize(b.capacity() + 1);
    CHECK(b.size() == b.capacity());
}

TEST_CASE("buffer::copy_of copies bytes into an aligned buffer of exactly that size")
{
    auto b = conveyor::buffer::copy_of("hello, world");
    CHECK(b.view() == "hello, world");
    CHECK(b.size() == 12);
    CHECK(b.capacity() == 12);
    CHECK(reinterpret_cast<std::uintptr_t>(b.data()) % 4096 == 0);

    const std::byte raw[] = {std::byte{0}, std::byte{0xff}, std::byte{7}};
    auto r = conveyor::buffer::copy_of(std::span<const std::byte>(raw));
    REQUIRE(r.size() == 3);
    CHECK(std::equal(r.span().begin(), r.span().end(), std::begin(raw)));

    auto e = conveyor::buffer::copy_of(std::string_view{});
    CHECK(e.empty());
    CHECK(e.view().empty());
}

TEST_CASE("a blob says where its bytes came from and starts unlabelled")
{
    conveyor::blob b{.key = "n01/img.jpg", .data = conveyor::buffer::copy_of("jpeg"), .origin = "/data/n01/img.jpg"};
    CHECK(b.label == -1);
    CHECK(b.index == 0);
    CHECK(b.data.view() == "jpeg");
}

TEST_CASE("a buffer pool can be used from several threads at once")
{
    conveyor::buffer_pool pool;
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&pool, t] {
            for (int i = 0; i < 2000; ++i) {
                auto b = pool.acquire(static_cast<std::size_t>(4096 * (1 + (i + t) % 5)));
                b.data()[0] = std::byte{1};
            }
        });
    for (auto& th : threads) th.join();
    // Every buffer came back; at most 4 threads x 5 classes were ever allocated.
    CHECK(pool.allocations() <= 20);
    CHECK(pool.cached_bytes() > 0);
}

// ==== channel ==================================================================================

TEST_CASE("a channel delivers items in the order they were sent")
{
    asio::io_context io;
    channel<int> ch(8);
    CHECK(ch.capacity() == 8);
    std::vector<int> got;
    outcome prod, cons;
    int sent = 0;
    bool last = false;
    std::vector<int> items(100);
    std::iota(items.begin(), items.end(), 0);
    start(io, send_each(ch, items, &sent, &last), prod);
    start(io, receive_all(ch, &got, 7), cons);
    settle(io);
    CHECK(prod.done);
    CHECK(sent == 100);
    ch.close();
    settle(io);
    REQUIRE(cons.done);
    CHECK_FALSE(cons.error);
    CHECK(got == items);
}

TEST_CASE("send_all moves a batch in order and waits for room")
{
    asio::io_context io;
    channel<int> ch(4);
    std::vector<int> items{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    outcome prod;
    bool result = false;
    start(io,
          [](channel<int>& ch, std::vector<int>& items, bool* r) -> asio::awaitable<void> {
              *r = co_await ch.send_all(items);
          }(ch, items, &result),
          prod);
    settle(io);
    CHECK_FALSE(prod.done); // 4 fit, 6 wait
    std::vector<int> got;
    outcome cons;
    start(io, receive_all(ch, &got, 3), cons);
    settle(io);
    REQUIRE(prod.done);
    CHECK(result);
    CHECK(items.empty());
    ch.close();
    settle(io);
    CHECK(got == std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
}

TEST_CASE("a sender cannot get more than capacity items ahead of the receiver")
{
    asio::io_context io;
    channel<int> ch(4);
    int sent = 0;
    bool last = false;
    outcome prod;
    std::vector<int> items(100);
    std::iota(items.begin(), items.end(), 0);
    start(io, send_each(ch, items, &sent, &last), prod);
    settle(io);
    CHECK(sent == 4);
    CHECK_FALSE(prod.done);

    // However the channel paces its wake-ups, the sender never gets more than the capacity
    // ahead, and it is never left waiting while the receiver waits too.
    int received = 0;
    for (int round = 0; round < 30; ++round) {
        std::optional<int> one;
        outcome r1;
        start(io, receive_one(ch, &one), r1);
        settle(io);
        REQUIRE(r1.done);
        REQUIRE(one.has_value());
        CHECK(*one == received);
        ++received;
        CAPTURE(received);
        CHECK(sent - received <= 4);
        CHECK(sent - received >= 0);
    }
    // Draining everything queued: the sender must run again before the receiver could wait.
    std::vector<int> rest;
    outcome drain;
    start(io,
          [](channel<int>& c, std::vector<int>* out) -> asio::awaitable<void> {
              const bool ok = co_await c.receive_some(*out, 4);
              CHECK(ok);
          }(ch, &rest),
          drain);
    settle(io);
    received += static_cast<int>(rest.size());
    CHECK(sent - received <= 4);
    CHECK(sent - received > 0); // refilled
    // An ordered sender waits until its sequence number is within capacity of the head.
    channel<int> ordered(4);
    outcome far;
    start(io,
          [](channel<int>& c) -> asio::awaitable<void> { { const bool ok_ = co_await c.send_at(6, 6); CHECK(ok_); } }(ordered), far);
    settle(io);
    CHECK_FALSE(far.done); // 6 >= head 0 + 4
    outcome near;
    start(io,
          [](channel<int>& c) -> asio::awaitable<void> {
              for (std::uint64_t s : {0, 1, 2}) { const bool ok_ = co_await c.send_at(s, static_cast<int>(s)); CHECK(ok_); }
          }(ordered),
          near);
    settle(io);
    CHECK(near.done);
    CHECK_FALSE(far.done);
    std::vector<int> got;
    outcome take3;
    start(io,
          [](channel<int>& c, std::vector<int>* out) -> asio::awaitable<void> {
              { const bool ok_ = co_await c.receive_some(*out, 3); CHECK(ok_); }
          }(ordered, &got),
          take3);
    settle(io);
    CHECK(got == std::vector<int>{0, 1, 2});
    CHECK(far.done); // head is 3 now: 6 < 3 + 4
}

TEST_CASE("send_at from several producers in scrambled order is delivered in sequence order")
{
    SUBCASE("with room for everything")
    {
        asio::io_context io;
        channel<int> ch(64);
        std::vector<std::uint64_t> seqs(64);
        std::iota(seqs.begin(), seqs.end(), 0);
        std::shuffle(seqs.begin(), seqs.end(), std::mt19937_64(42));
        std::vector<int> got;
        outcome cons;
        start(io, receive_all(ch, &got, 5), cons);
        // Everything but sequence number 0 first: the receiver must not see any of it yet.
        std::erase(seqs, 0);
        std::vector<outcome> prods(4);
        for (std::size_t p = 0; p < 4; ++p) {
            std::vector<std::uint64_t> mine;
            for (std::size_t i = p; i < seqs.size(); i += 4) mine.push_back(seqs[i]);
            start(io, send_at_each(ch, mine, static_cast<int>(p)), prods[p]);
        }
        settle(io);
        for (auto& p : prods) CHECK(p.done);
        CHECK(got.empty());
        outcome zero;
        start(io, send_at_each(ch, {0}, 9), zero);
        settle(io);
        CHECK(got.size() == 64);
        ch.close();
        settle(io);
        CHECK(cons.done);
        std::vector<int> expected(64);
        std::iota(expected.begin(), expected.end(), 0);
        CHECK(got == expected);
    }
    SUBCASE("through a small channel, producers interleaving at random")
    {
        asio::io_context io;
        channel<int> ch(4);
        constexpr int n = 300, producers = 3;
        std::vector<int> got;
        outcome cons;
        start(io, receive_all(ch, &got, 5), cons);
        std::vector<outcome> prods(producers);
        for (int p = 0; p < producers; ++p) {
            std::vector<std::uint64_t> mine; // p, p + 3, p + 6...: each producer's own are in order
            for (int s = p; s < n; s += producers) mine.push_back(static_cast<std::uint64_t>(s));
            start(io, send_at_each(ch, mine, 100 + p), prods[p]);
        }
        ch.close_at(n);
        settle(io);
        for (auto& p : prods) CHECK(p.done);
        REQUIRE(cons.done);
        CHECK_FALSE(cons.error);
        std::vector<int> expected(n);
        std::iota(expected.begin(), expected.end(), 0);
        CHECK(got == expected);
    }
}

TEST_CASE("skip_at leaves holes that the receiver passes over")
{
    asio::io_context io;
    channel<int> ch(8);
    std::vector<int> got;
    std::vector<std::uint64_t> indices;
    outcome cons;
    start(io,
          [](channel<int>& c, std::vector<int>* out, std::vector<std::uint64_t>* idx) -> asio::awaitable<void> {
              std::vector<int> one;
              std::uint64_t i = 99;
              while (co_await c.receive_some(one, 1, &i)) {
                  out->push_back(one.front());
                  idx->push_back(i);
                  one.clear();
              }
          }(ch, &got, &indices),
          cons);
    outcome prod;
    start(io,
          [](channel<int>& c) -> asio::awaitable<void> {
              { const bool ok_ = co_await c.skip_at(0); CHECK(ok_); } // a hole at the head, while the receiver waits
              co_await yield_now();
              { const bool ok_ = co_await c.send_at(1, 10); CHECK(ok_); }
              { const bool ok_ = co_await c.skip_at(3); CHECK(ok_); }
              { const bool ok_ = co_await c.skip_at(2); CHECK(ok_); }
              { const bool ok_ = co_await c.send_at(4, 40); CHECK(ok_); }
              { const bool ok_ = co_await c.skip_at(5); CHECK(ok_); } // a hole at the end
          }(ch),
          prod);
    settle(io);
    CHECK(prod.done);
    CHECK(got == std::vector<int>{10, 40});
    ch.close();
    settle(io);
    REQUIRE(cons.done);
    CHECK(got == std::vector<int>{10, 40});
    // Delivery indices count items, not holes: parallel stages use them as the output order.
    CHECK(indices == std::vector<std::uint64_t>{0, 1});
}

TEST_CASE("holes make room for senders like items do")
{
    asio::io_context io;
    channel<int> ch(2);
    outcome prod;
    start(io,
          [](channel<int>& c) -> asio::awaitable<void> {
              for (std::uint64_t s = 0; s < 10; ++s) { const bool ok_ = co_await c.skip_at(s); CHECK(ok_); }
              { const bool ok_ = co_await c.send_at(10, 10); CHECK(ok_); }
              c.close();
          }(ch),
          prod);
    std::vector<int> got;
    outcome cons;
    start(io, receive_all(ch, &got, 4), cons);
    settle(io);
    CHECK(prod.done);
    CHECK(cons.done);
    CHECK(got == std::vector<int>{10});
}

TEST_CASE("receive_some takes at least one item even when asked for none")
{
    asio::io_context io;
    channel<int> ch(0); // a zero capacity is taken as one
    CHECK(ch.capacity() == 1);
    outcome prod, cons;
    int sent = 0;
    bool last = false;
    start(io, send_each(ch, {7, 8}, &sent, &last), prod);
    std::vector<int> got;
    start(io,
          [](channel<int>& c, std::vector<int>* out) -> asio::awaitable<void> {
              { const bool ok_ = co_await c.receive_some(*out, 0); CHECK(ok_); }
              CHECK(out->size() == 1);
          }(ch, &got),
          cons);
    settle(io);
    CHECK(cons.done);
    CHECK(got == std::vector<int>{7});
}

TEST_CASE("close ends the stream after the items already sent")
{
    asio::io_context io;
    channel<int> ch(8);
    int sent = 0;
    bool last = false;
    outcome prod;
    start(io, send_each(ch, {1, 2, 3}, &sent, &last), prod);
    settle(io);
    ch.close();
    std::vector<int> got;
    outcome cons;
    start(io, receive_all(ch, &got, 16), cons);
    settle(io);
    REQUIRE(cons.done);
    CHECK(got == std::vector<int>{1, 2, 3});
    // Reading past the end keeps saying "end".
    std::optional<int> after{5};
    outcome again;
    start(io, receive_one(ch, &after), again);
    settle(io);
    CHECK(again.done);
    CHECK_FALSE(after.has_value());

    // A receiver already waiting is woken by close.
    channel<int> empty(4);
    std::optional<int> none{1};
    outcome waiting;
    start(io, receive_one(empty, &none), waiting);
    settle(io);
    CHECK_FALSE(waiting.done);
    empty.close();
    settle(io);
    CHECK(waiting.done);
    CHECK_FALSE(none.has_value());
}

TEST_CASE("close_receiver makes waiting and later senders get false")
{
    asio::io_context io;
    channel<int> ch(2);
    int sent = 0;
    bool last = true;
    outcome prod;
    start(io, send_each(ch, {1, 2, 3, 4, 5}, &sent, &last), prod);
    settle(io);
    CHECK(sent == 2);
    CHECK_FALSE(prod.done);
    CHECK_FALSE(ch.receiver_gone());
    ch.close_receiver();
    CHECK(ch.receiver_gone());
    settle(io);
    CHECK(prod.done);
    CHECK_FALSE(last);
    CHECK(sent == 2);
    outcome later;
    start(io,
          [](channel<int>& c) -> asio::awaitable<void> {
              { const bool ok_ = co_await c.send(9); CHECK_FALSE(ok_); }
              { const bool ok_ = co_await c.send_at(0, 9); CHECK_FALSE(ok_); }
              { const bool ok_ = co_await c.skip_at(1); CHECK_FALSE(ok_); }
              std::vector<int> v{1, 2};
              { const bool ok_ = co_await c.send_all(v); CHECK_FALSE(ok_); }
              CHECK(v.empty());
          }(ch),
          later);
    settle(io);
    CHECK(later.done);
    CHECK_FALSE(later.error);
}

// Regression test, fixed bug: a receiver that shares a channel with the one that called close_receiver (the other
// workers of a parallel map) never sees the end of the stream: close_receiver drops the
// queued items without moving `head_`, so after the producer's close() (end_ = tail_ > head_)
// `ready()` stays false and `receive_some`/`receive_some_blocking` wait forever. In a pipeline
// this hangs `generate | map(f, {.concurrency = 2}) | take(n)` (see stages.cpp).
TEST_CASE("other receivers see the end after one receiver closed the channel")
{
    asio::io_context io;
    channel<int> ch(8);
    int sent = 0;
    bool last = false;
    outcome prod;
    start(io, send_each(ch, {1, 2, 3}, &sent, &last), prod);
    settle(io);
    ch.close_receiver(); // one worker: "downstream is gone, I stop"
    ch.close();          // the producer, told so, ends the stream
    std::optional<int> got{0};
    outcome other; // another worker still asks for the next item
    start(io, receive_one(ch, &got), other);
    settle(io);
    CHECK_MESSAGE(other.done, "a receiver waits forever on a channel whose receiver side was closed");
    if (!other.done) {
        ch.cancel(); // unstick it
        settle(io);
        REQUIRE(other.done);
    } else {
        CHECK_FALSE(other.error);
        CHECK_FALSE(got.has_value());
    }
}

TEST_CASE("cancel makes senders get false and receivers throw errc::cancelled")
{
    asio::io_context io;
    channel<int> full(1), empty(1);
    int sent = 0;
    bool last = true;
    outcome prod, cons;
    start(io, send_each(full, {1, 2, 3}, &sent, &last), prod);
    std::optional<int> got;
    start(io, receive_one(empty, &got), cons);
    settle(io);
    CHECK_FALSE(prod.done);
    CHECK_FALSE(cons.done);
    full.cancel();
    empty.cancel();
    settle(io);
    CHECK(prod.done);
    CHECK_FALSE(last);
    REQUIRE(cons.done);
    REQUIRE(cons.error);
    CHECK(code_of(cons.error) == conveyor::errc::cancelled);
    CHECK(full.receiver_gone());

    // Items still queued are not delivered after a cancel.
    outcome late;
    std::optional<int> x;
    start(io, receive_one(full, &x), late);
    settle(io);
    REQUIRE(late.done);
    CHECK(code_of(late.error) == conveyor::errc::cancelled);
}

TEST_CASE("fail makes the receiver throw the error, before any queued item")
{
    asio::io_context io;
    channel<int> ch(8), empty(8);
    int sent = 0;
    bool last = false;
    outcome prod;
    start(io, send_each(ch, {1, 2, 3}, &sent, &last), prod);
    std::optional<int> none;
    outcome waiting;
    start(io, receive_one(empty, &none), waiting);
    settle(io);
    ch.fail(std::make_exception_ptr(std::runtime_error("disk on fire")));
    ch.fail(std::make_exception_ptr(std::runtime_error("second"))); // the first error stays
    empty.fail(std::make_exception_ptr(std::runtime_error("empty failed")));
    std::optional<int> got;
    outcome cons;
    start(io, receive_one(ch, &got), cons);
    settle(io);
    REQUIRE(cons.done);
    REQUIRE(cons.error);
    CHECK(what_of(cons.error) == "disk on fire");
    REQUIRE(waiting.done); // a waiting receiver is woken
    CHECK(what_of(waiting.error) == "empty failed");
}

// Regression test, fixed bug (doubtful contract, root of the pipeline hang in stages.cpp): `fail()` "ends the
// channel" for the receiver only. A sender waiting for room in a failed channel is never
// woken, and later sends still succeed while there is room; run_context::cancel() then
// deliberately leaves the sink un-cancelled so its error survives, so the last stage of a
// failed run can stay blocked forever in send().
TEST_CASE("fail also stops senders waiting for room")
{
    asio::io_context io;
    channel<int> ch(1);
    int sent = 0;
    bool last = true;
    outcome prod;
    start(io, send_each(ch, {1, 2, 3}, &sent, &last), prod);
    settle(io);
    CHECK_FALSE(prod.done);
    ch.fail(std::make_exception_ptr(std::runtime_error("boom")));
    settle(io);
    CHECK_MESSAGE(prod.done, "a sender blocked on a failed channel is never woken");
    if (prod.done) CHECK_FALSE(last);
    ch.cancel(); // unstick it either way, so the io_context can be destroyed cleanly
    settle(io);
    CHECK(prod.done);
}

TEST_CASE("a plain thread can receive with receive_some_blocking")
{
    asio::io_context io;
    channel<int> ch(4);
    constexpr int n = 2000;
    std::vector<int> items(n);
    std::iota(items.begin(), items.end(), 0);
    int sent = 0;
    bool last = false;
    outcome prod;
    start(io,
          [](channel<int>& c, std::vector<int> v, int* s, bool* l) -> asio::awaitable<void> {
              co_await send_each(c, std::move(v), s, l);
              c.close();
          }(ch, items, &sent, &last),
          prod);
    std::thread producer([&io] { io.run(); });
    std::vector<int> got;
    test::finishes_within(test::generous, "receive_some_blocking until the end", [&] {
        std::vector<int> batch;
        while (ch.receive_some_blocking(batch, 10)) {
            CHECK(batch.size() <= 10);
            got.insert(got.end(), batch.begin(), batch.end());
            batch.clear();
        }
    });
    producer.join();
    CHECK(prod.done);
    CHECK(got == items);
    std::vector<int> after;
    CHECK_FALSE(ch.receive_some_blocking(after, 1));
}

TEST_CASE("a blocked plain-thread receiver wakes on cancel and on fail")
{
    for (bool cancel : {true, false}) {
        CAPTURE(cancel);
        channel<int> ch(4);
        std::exception_ptr caught;
        std::atomic<bool> entered{false};
        std::thread consumer([&] {
            std::vector<int> v;
            entered = true;
            try {
                ch.receive_some_blocking(v, 1);
            } catch (...) {
                caught = std::current_exception();
            }
        });
        REQUIRE(test::eventually([&] { return entered.load(); }));
        std::this_thread::sleep_for(20ms); // most likely blocked by now; either way it must wake
        if (cancel) ch.cancel();
        else ch.fail(std::make_exception_ptr(std::runtime_error("io error")));
        test::finishes_within(test::generous, "the blocked receiver to wake", [&] { consumer.join(); });
        REQUIRE(caught);
        if (cancel) CHECK(code_of(caught) == conveyor::errc::cancelled);
        else CHECK(what_of(caught) == "io error");
    }
}

TEST_CASE("several receivers share a channel and each item is delivered exactly once")
{
    conveyor::runtime rt(conveyor::runtime_options{.io_threads = 3, .compute_threads = 1});
    constexpr int n = 20'000, receivers = 6;
    channel<int> ch(16);
    std::vector<std::vector<int>> got(receivers);
    std::vector<std::promise<void>> done(receivers);
    for (int r = 0; r < receivers; ++r)
        asio::co_spawn(rt.io_executor(static_cast<std::size_t>(r) % 3),
                       [](channel<int>& c, std::vector<int>* out, std::size_t max) -> asio::awaitable<void> {
                           std::vector<int> batch;
                           while (co_await c.receive_some(batch, max)) {
                               out->insert(out->end(), batch.begin(), batch.end());
                               batch.clear();
                           }
                       }(ch, &got[r], 1 + static_cast<std::size_t>(r) % 4),
                       [&p = done[r]](std::exception_ptr e) {
                           if (e) p.set_exception(e);
                           else p.set_value();
                       });
    std::promise<void> sent;
    asio::co_spawn(rt.io_executor(0),
                   [](channel<int>& c) -> asio::awaitable<void> {
                       // Single sends and batches, interleaved, in order.
                       std::vector<int> chunk;
                       for (int i = 0; i < n; ++i) {
                           if (i % 7 == 0) {
                               if (!chunk.empty()) { const bool ok_ = co_await c.send_all(chunk); CHECK(ok_); }
                               { const bool ok_ = co_await c.send(i); CHECK(ok_); }
                               continue;
                           }
                           chunk.push_back(i);
                           if (chunk.size() == 5) { const bool ok_ = co_await c.send_all(chunk); CHECK(ok_); }
                       }
                       { const bool ok_ = co_await c.send_all(chunk); CHECK(ok_); }
                       c.close();
                   }(ch),
                   [&sent](std::exception_ptr e) {
                       if (e) sent.set_exception(e);
                       else sent.set_value();
                   });
    auto f = sent.get_future();
    REQUIRE(f.wait_for(test::generous) == std::future_status::ready);
    f.get();
    for (auto& d : done) {
        auto df = d.get_future();
        REQUIRE_MESSAGE(df.wait_for(test::generous) == std::future_status::ready, "a receiver did not see the end");
        df.get();
    }
    std::vector<int> all;
    for (auto& v : got) {
        CHECK(std::is_sorted(v.begin(), v.end())); // each receiver takes from the head, in order
        all.insert(all.end(), v.begin(), v.end());
    }
    CHECK(all.size() == static_cast<std::size_t>(n));
    std::sort(all.begin(), all.end());
    std::vector<int> expected(n);
    std::iota(expected.begin(), expected.end(), 0);
    CHECK(all == expected);
    int busy = 0;
    for (auto& v : got) busy += !v.empty();
    CHECK(busy >= 2); // the work really was shared
}
