// conveyor/shard/impl/untar.ipp — the untar stage.
#ifndef CONVEYOR_SHARD_IMPL_UNTAR_IPP
#define CONVEYOR_SHARD_IMPL_UNTAR_IPP

#include <conveyor/shard/untar.hpp>

#include <conveyor/shard/detail/sample_reader.hpp>

#include <exception>
#include <utility>
#include <vector>

namespace conveyor::shard {

CONVEYOR_DECL stream<sample> untar_stage::operator()(const std::shared_ptr<run_context>& ctx, stream<blob> in) const
{
    auto out = conveyor::detail::make_channel<sample>(*ctx, o_.capacity);
    ctx->spawn(run(ctx, std::move(in), conveyor::detail::sink_to(out), o_), o_.name);
    return conveyor::detail::stream_of(ctx, std::move(out));
}

CONVEYOR_DECL asio::awaitable<void> untar_stage::run(std::shared_ptr<run_context> ctx, stream<blob> in,
                                                    sink<sample> out, untar_options o)
{
    constexpr std::size_t batch = 64;
    std::vector<blob> got;
    std::vector<sample> put;
    while (co_await in.async_next_batch(got, 16)) {
        for (auto& b : got) {
            const std::string key = b.key;
            detail::sample_reader_options ro{.tar = o.tar, .shard = b.index};
            detail::sample_reader reader(
                std::make_unique<detail::memory_chunk_reader>(slice(std::move(b.data)), b.origin.empty() ? b.key : b.origin),
                ro, &ctx->rt());
            std::exception_ptr failed;
            try {
                while (auto s = co_await reader.async_next()) {
                    put.push_back(std::move(*s));
                    if (put.size() >= batch && !co_await out.send_all(put)) {
                        in.close();
                        co_return;
                    }
                }
            } catch (...) {
                failed = std::current_exception();
            }
            if (failed) {
                if (o.errors == on_error::fail || ctx->stopping()) {
                    ctx->fail(failed, o.name, key);
                    co_return;
                }
                try {
                    std::rethrow_exception(failed);
                } catch (const std::exception& e) {
                    ctx->note_skip(o.name + ": " + e.what() + " (the rest of the shard is skipped)");
                }
            }
        }
        got.clear();
        if (!put.empty() && !co_await out.send_all(put)) {
            in.close();
            co_return;
        }
    }
    if (!put.empty()) co_await out.send_all(put);
    conveyor::detail::channel_of(out)->close();
}

} // namespace conveyor::shard

#endif
