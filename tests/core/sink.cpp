// Tests of conveyor/core/sink.hpp: stages of one's own, written with `make_stream` and the
// sink it hands the body: unordered and ordered sends, holes, and a sink that closes when
// nobody reads on.
#include "support.hpp"

#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/core/sink.hpp>
#include <conveyor/core/stages.hpp>
#include <conveyor/core/stream.hpp>

#include <boost/asio/this_coro.hpp>

#include <atomic>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace asio = boost::asio;
namespace cv = conveyor;
using test::iota;

static_assert(std::is_copy_constructible_v<cv::sink<int>>);
static_assert(!std::is_constructible_v<cv::sink<int>, std::shared_ptr<cv::detail::channel<int>>>); // made by make_stream
static_assert(!std::is_constructible_v<cv::stream<int>, std::shared_ptr<cv::run_context>, std::shared_ptr<cv::detail::channel<int>>>);

namespace {

// A stage of one's own: each number n becomes n copies of itself, sent one by one.
struct repeat_each {
    cv::stream<int> operator()(const std::shared_ptr<cv::run_context>& ctx, cv::stream<int> in) const
    {
        return cv::make_stream<int>(ctx, "repeat_each", 4, [in](cv::sink<int>& out) mutable -> asio::awaitable<void> {
            while (auto n = co_await in.async_next())
                for (int i = 0; i < *n; ++i)
                    if (!co_await out.send(*n)) {
                        in.close();
                        co_return;
                    }
        });
    }
};

} // namespace

TEST_CASE("a stage of one's own sends to its sink, and the stream ends when its body returns")
{
    cv::runtime rt;
    auto p = (cv::from_range(std::vector<int>{1, 2, 3}) | repeat_each{}).on(rt);
    CHECK(test::collect(p) == std::vector<int>{1, 2, 2, 3, 3, 3});
}

TEST_CASE("a sink sends a batch at a time, and its capacity is the stream's")
{
    // Checked here, not on the I/O thread that runs the body.
    auto ok = std::make_shared<std::atomic<bool>>(false);
    cv::runtime rt;
    auto p = cv::pipeline<int>([ok](const std::shared_ptr<cv::run_context>& ctx) {
                 return cv::make_stream<int>(ctx, "batches", 8, [ok](cv::sink<int>& out) -> asio::awaitable<void> {
                     std::vector<int> batch = iota(5);
                     const bool sent = co_await out.send_all(batch);
                     *ok = sent && batch.empty() && out.capacity() == 8; // the batch was moved from
                 });
             }).on(rt);
    CHECK(test::collect(p) == iota(5));
    CHECK(ok->load());
}

TEST_CASE("a sink's ordered sends arrive in sequence order, skipped numbers left out")
{
    auto ok = std::make_shared<std::atomic<bool>>(false);
    cv::runtime rt;
    auto p = cv::pipeline<std::string>([ok](const std::shared_ptr<cv::run_context>& ctx) {
                 return cv::make_stream<std::string>(ctx, "ordered", 8, [ok](cv::sink<std::string>& out) -> asio::awaitable<void> {
                     // Each send must succeed (GCC 12: no co_await inside && or ?:).
                     if (!co_await out.send_at(2, "c")) co_return;
                     if (!co_await out.skip_at(1)) co_return;
                     std::vector<std::optional<std::string>> run{std::string("d"), std::nullopt, std::string("f")};
                     if (!co_await out.send_run_at(3, std::span<std::optional<std::string>>(run))) co_return;
                     std::optional<std::string> g("g");
                     std::size_t placed = 0;
                     const asio::any_io_executor ex = co_await asio::this_coro::executor;
                     if (!out.try_send_run_at(6, std::span<std::optional<std::string>>(&g, 1), placed, ex) || placed != 1) co_return;
                     if (!co_await out.send_at(0, "a")) co_return;
                     *ok = true;
                 });
             }).on(rt);
    CHECK(test::collect(p) == std::vector<std::string>{"a", "c", "d", "f", "g"});
    CHECK(ok->load());
}

TEST_CASE("a sink is closed once nobody reads on, and its sends then complete with false")
{
    cv::runtime rt;
    auto saw_closed = std::make_shared<std::atomic<bool>>(false);
    auto p = (cv::pipeline<int>([saw_closed](const std::shared_ptr<cv::run_context>& ctx) {
                  return cv::make_stream<int>(ctx, "endless", 4, [saw_closed](cv::sink<int>& out) -> asio::awaitable<void> {
                      for (int i = 0;; ++i)
                          if (!co_await out.send(i)) break;
                      *saw_closed = out.closed();
                  });
              }) |
              cv::take(3))
                 .on(rt);
    CHECK(test::collect(p) == iota(3));
    CHECK(test::eventually([&] { return saw_closed->load(); }));
}
