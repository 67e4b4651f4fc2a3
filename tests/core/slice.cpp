// Tests of conveyor/core/slice.hpp: shared, sliceable views of a buffer.
#include "support.hpp"

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/core/slice.hpp>

#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace cv = conveyor;

namespace {

/// A pooled buffer holding `text`.
cv::buffer filled(cv::buffer_pool& pool, std::string_view text)
{
    cv::buffer b = pool.acquire(text.size());
    std::memcpy(b.data(), text.data(), text.size());
    return b;
}

} // namespace

TEST_CASE("a slice views a buffer's bytes, and its sub-slices view parts of them without a copy")
{
    cv::buffer_pool pool;
    cv::buffer b = filled(pool, "header|member one|member two");
    const std::byte* bytes = b.data();
    const cv::slice whole(std::move(b));
    CHECK(whole.view() == "header|member one|member two");
    CHECK(whole.data() == bytes); // the buffer's own memory, not a copy
    CHECK(whole.offset() == 0);

    const cv::slice one = whole.sub(7, 10);
    const cv::slice two = whole.sub(18);
    CHECK(one.view() == "member one");
    CHECK(two.view() == "member two");
    CHECK(one.data() == bytes + 7);
    CHECK(one.offset() == 7);
    CHECK(two.offset() == 18);
    CHECK(share_storage(one, two));
    CHECK(share_storage(whole, one));

    // A slice of a slice counts from its own start; offset() from the storage's.
    const cv::slice inner = one.sub(7, 3);
    CHECK(inner.view() == "one");
    CHECK(inner.offset() == 14);
}

TEST_CASE("the storage goes back to its pool only when the last slice of it is destroyed")
{
    cv::buffer_pool pool;
    REQUIRE(pool.cached_bytes() == 0);
    std::optional<cv::slice> part;
    {
        cv::slice whole(filled(pool, std::string(10'000, 'x')));
        part = whole.sub(100, 50);
        CHECK(whole.use_count() == 2);
    }
    // The whole is gone; the part still holds the storage.
    CHECK(pool.cached_bytes() == 0);
    CHECK(part->view() == std::string(50, 'x'));
    CHECK(part->use_count() == 1);
    part.reset();
    CHECK(pool.cached_bytes() > 0);
    // And the pool hands the memory out again instead of allocating.
    const auto allocations = pool.allocations();
    (void)pool.acquire(10'000);
    CHECK(pool.allocations() == allocations);
}

TEST_CASE("a slice past the end is an error naming both ranges, never a shorter slice")
{
    cv::buffer_pool pool;
    const cv::slice s(filled(pool, "0123456789"));
    for (auto [offset, length] : {std::pair<std::size_t, std::size_t>{5, 6}, {11, 0}, {0, 11}, {3, std::size_t(-1)}}) {
        CAPTURE(offset);
        CAPTURE(length);
        try {
            (void)s.sub(offset, length);
            FAIL("no error");
        } catch (const cv::error& e) {
            CHECK(e.code() == cv::errc::invalid_argument);
            CHECK(std::string(e.what()).find("outside a slice of 10 bytes") != std::string::npos);
            CHECK(std::string(e.what()).find("[" + std::to_string(offset) + ", ") != std::string::npos);
        }
    }
    CHECK_THROWS_AS((void)s.sub(11), cv::error);
    // At the very end, an empty slice is fine; it shares nothing.
    const cv::slice end = s.sub(10, 0);
    CHECK(end.empty());
    CHECK(end.use_count() == 0);
    CHECK(s.sub(10).empty());
}

TEST_CASE("empty slices hold no storage")
{
    const cv::slice none;
    CHECK(none.empty());
    CHECK(none.size() == 0);
    CHECK(none.use_count() == 0);
    CHECK(none.offset() == 0);
    CHECK(none.view().empty());
    const cv::slice of_empty{cv::buffer{}};
    CHECK(of_empty.use_count() == 0);
    CHECK_FALSE(share_storage(none, of_empty));
    CHECK_THROWS_AS((void)none.sub(0, 1), cv::error);
}

TEST_CASE("slices of one storage may die on many threads at once: it is returned exactly once")
{
    cv::buffer_pool pool(std::size_t{64} << 20);
    for (int round = 0; round < 20; ++round) {
        std::vector<cv::slice> parts;
        {
            const cv::slice whole(filled(pool, std::string(64 * 1024, 'y')));
            for (std::size_t i = 0; i < 64; ++i) parts.push_back(whole.sub(i * 1024, 1024));
        }
        std::vector<std::thread> threads;
        for (int t = 0; t < 4; ++t)
            threads.emplace_back([mine = std::vector<cv::slice>(parts.begin() + t * 16, parts.begin() + (t + 1) * 16)]() mutable {
                for (auto& p : mine) CHECK(p.view() == std::string(1024, 'y'));
                mine.clear();
            });
        parts.clear();
        for (auto& t : threads) t.join();
    }
    // Twenty buffers of one size class, each returned once: one cached, twenty handed out
    // again from the cache after the first allocation.
    CHECK(pool.allocations() == 1);
}

TEST_CASE("compact copies a small view into storage of its own from the same pool, and leaves a whole-storage slice as it is")
{
    cv::buffer_pool pool;
    cv::buffer b = pool.acquire(1000);
    for (std::size_t i = 0; i < 1000; ++i) b.data()[i] = std::byte(i % 251);
    const cv::slice whole(std::move(b));
    const cv::slice part = whole.sub(100, 50);
    CHECK(part.storage_size() == 1000);
    const auto allocations = pool.allocations();
    const cv::slice own = part.compact();
    CHECK(own.size() == 50);
    CHECK(own.storage_size() == 50);
    CHECK_FALSE(share_storage(own, whole));
    CHECK(std::equal(own.span().begin(), own.span().end(), part.span().begin()));
    CHECK(pool.allocations() == allocations + 1); // taken from the storage's own pool
    const cv::slice same = whole.compact();
    CHECK(share_storage(same, whole));
    CHECK(same.data() == whole.data());
    CHECK(cv::slice{}.compact().size() == 0);
}

TEST_CASE("into_buffer moves the storage out when the slice is its only owner and spans it all, and copies otherwise")
{
    cv::buffer_pool pool;
    cv::buffer b = pool.acquire(1000);
    for (std::size_t i = 0; i < 1000; ++i) b.data()[i] = std::byte(i % 251);
    const std::byte* const at = b.data();
    const auto allocations = pool.allocations();

    // The only owner, spanning the whole buffer: the same memory comes back, no copy.
    cv::slice whole(std::move(b));
    cv::buffer moved = std::move(whole).into_buffer();
    CHECK(whole.empty());
    CHECK(whole.use_count() == 0);
    CHECK(moved.data() == at);
    CHECK(moved.size() == 1000);
    CHECK(pool.allocations() == allocations);

    // Shared with another slice: a copy, and the other slice's bytes stay as they were.
    cv::slice a(std::move(moved));
    const cv::slice keep = a;
    cv::buffer copied = std::move(a).into_buffer();
    CHECK(copied.data() != keep.data());
    CHECK(copied.size() == 1000);
    CHECK(std::equal(keep.span().begin(), keep.span().end(), copied.data()));
    CHECK(keep.use_count() == 1);

    // A part of its storage: a copy of just those bytes.
    cv::slice part = keep.sub(100, 50);
    cv::buffer small = std::move(part).into_buffer();
    CHECK(small.size() == 50);
    CHECK(std::equal(small.data(), small.data() + 50, keep.data() + 100));

    // Storage shared in as const (it may be read elsewhere): never moved, even when sole owner.
    auto shared = std::make_shared<const cv::buffer>(cv::buffer::copy_of(std::string_view("abcdef")));
    const std::byte* const shared_at = shared->data();
    cv::slice from_const(std::move(shared));
    cv::buffer c = std::move(from_const).into_buffer();
    CHECK(c.data() != shared_at);
    CHECK(std::string_view(reinterpret_cast<const char*>(c.data()), c.size()) == "abcdef");

    CHECK(std::move(cv::slice{}).into_buffer().size() == 0);
}
