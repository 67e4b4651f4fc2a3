// Tests of conveyor/core/buffer.hpp: size classes, the buffer pool, buffers and blobs.
#include "support.hpp"

#include <conveyor/core/buffer.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <new>
#include <set>
#include <string>
#include <vector>

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

TEST_CASE("a buffer pool refuses sizes no memory holds with bad_alloc, not a smaller buffer")
{
    // Found by fuzz/ (http_response): a Content-Length near 2^64 made a buffer whose mapping,
    // rounded up to huge pages, wrapped to a few MiB while its capacity said 16 EiB.
    conveyor::buffer_pool pool;
    const std::size_t top = std::numeric_limits<std::size_t>::max();
    for (std::size_t n : {top, top - 10, top - (std::size_t{4} << 20) + 1}) {
        CAPTURE(n);
        CHECK_THROWS_AS((void)pool.acquire(n), std::bad_alloc);
    }
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

TEST_CASE("a buffer pool lends an idle buffer of the next two classes before allocating")
{
    conveyor::buffer_pool pool;
    const std::byte* big = nullptr;
    {
        auto b = pool.acquire(100'000); // 112 KiB class
        big = b.data();
    }
    {
        auto b = pool.acquire(80'000); // 80 KiB class: two below
        CHECK(b.data() == big);
        CHECK(b.size() == 80'000);
        CHECK(b.capacity() == 112 * 1024);
        CHECK(pool.allocations() == 1);
        CHECK(pool.cached_bytes() == 0);
        auto c = pool.acquire(100'000); // the 112 KiB one is out: fresh memory
        CHECK(c.data() != big);
        CHECK(pool.allocations() == 2);
    }
    // It went back to its own class, whole.
    CHECK(pool.cached_bytes() == 2 * 112 * 1024);
    {
        auto b = pool.acquire(60'000); // 64 KiB class: three below, too far
        CHECK(b.capacity() == 64 * 1024);
        CHECK(pool.allocations() == 3);
    }
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

namespace {
/// Minor page faults of the calling thread so far.
long thread_minor_faults()
{
    rusage u{};
    ::getrusage(RUSAGE_THREAD, &u);
    return u.ru_minflt;
}

/// Whether this build runs under ThreadSanitizer, whose shadow memory takes page faults of
/// its own for every page the program writes.
#if defined(__SANITIZE_THREAD__)
constexpr bool under_tsan = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool under_tsan = true;
#else
constexpr bool under_tsan = false;
#endif
#else
constexpr bool under_tsan = false;
#endif

/// Whether the kernel gives huge pages to memory that asks for them (MADV_HUGEPAGE).
bool huge_pages_on_request()
{
    std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string line;
    std::getline(f, line);
    return line.find("[always]") != std::string::npos || line.find("[madvise]") != std::string::npos;
}
} // namespace

TEST_CASE("a buffer pool cuts small buffers from 2 MiB slabs, which take a page fault per slab")
{
    if (!conveyor::detail::use_slabs) {
        MESSAGE("skipped: this build (AddressSanitizer) allocates every buffer on its own");
        return;
    }
    conveyor::buffer_pool pool;
    const std::size_t cls = 112 * 1024;
    std::vector<conveyor::buffer> held;
    for (int i = 0; i < 36; ++i) held.push_back(pool.acquire(100'000));
    // Cut one after another: 18 pieces of 112 KiB fill a slab (the rest of it is too small).
    std::set<std::uintptr_t> slabs;
    for (std::size_t i = 0; i < held.size(); ++i) {
        const auto at = reinterpret_cast<std::uintptr_t>(held[i].data());
        slabs.insert(at >> 21);
        CHECK(at % 4096 == 0);
        if (i % 18 != 0) CHECK(at == reinterpret_cast<std::uintptr_t>(held[i - 1].data()) + cls);
    }
    CHECK(slabs.size() == 2);
    CHECK(pool.allocations() == 36);

    if (!huge_pages_on_request()) {
        MESSAGE("the page-fault check is skipped: transparent huge pages are off on this machine");
    } else if (under_tsan) {
        MESSAGE("the page-fault check is skipped: ThreadSanitizer's shadow memory takes faults of its own");
    } else {
        // 36 buffers of 28 pages each took 1008 faults one by one.
        const long before = thread_minor_faults();
        for (auto& b : held) std::memset(b.data(), 0x11, b.capacity());
        const long faults = thread_minor_faults() - before;
        CHECK_MESSAGE(faults < 100, faults << " page faults for 36 buffers of 112 KiB");
    }

    // Back in the pool, and taken again without cutting more.
    held.clear();
    CHECK(pool.cached_bytes() == 36 * cls);
    for (int i = 0; i < 36; ++i) held.push_back(pool.acquire(100'000));
    CHECK(pool.allocations() == 36);
}

TEST_CASE("a buffer pool's slabs take at most half its cap, and stay with it past the cap")
{
    if (!conveyor::detail::use_slabs) {
        MESSAGE("skipped: this build (AddressSanitizer) allocates every buffer on its own");
        return;
    }
    const std::size_t cls = 112 * 1024;
    conveyor::buffer_pool pool(std::size_t{4} << 20); // slabs: one of 2 MiB (18 buffers)
    std::vector<conveyor::buffer> held;
    for (int i = 0; i < 40; ++i) held.push_back(pool.acquire(100'000));
    CHECK(pool.allocations() == 40);
    held.clear();
    // The 18 slab buffers always stay; the others as long as the 4 MiB allow.
    CHECK(pool.cached_bytes() >= 18 * cls);
    CHECK(pool.cached_bytes() <= (std::size_t{4} << 20) + 18 * cls);
    for (int i = 0; i < 18; ++i) held.push_back(pool.acquire(100'000));
    CHECK(pool.allocations() == 40);

    // A cap too small for a slab: each buffer on its own, as before.
    conveyor::buffer_pool small(3 * cls);
    { auto a = small.acquire(100'000); auto b = small.acquire(100'000); }
    CHECK(reinterpret_cast<std::uintptr_t>(small.acquire(100'000).data()) % 4096 == 0);
    CHECK(small.allocations() == 2);
    CHECK(small.cached_bytes() == 2 * cls);
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
