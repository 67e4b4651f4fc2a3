// conveyor/image/impl/fields.hpp — the template of the decode_fields stage.
#ifndef CONVEYOR_IMAGE_IMPL_FIELDS_HPP
#define CONVEYOR_IMAGE_IMPL_FIELDS_HPP

#include <conveyor/core/runtime.hpp>
#include <conveyor/image/fields.hpp>

#include <algorithm>

namespace conveyor::image {

template <class T>
    requires(std::is_same_v<T, shard::sample> || std::is_same_v<T, blob>)
stream<decoded_sample> decode_fields_stage::operator()(const std::shared_ptr<run_context>& ctx, stream<T> in) const
{
    const std::uint64_t epoch = ctx->epoch();
    const std::size_t threads = std::max<std::size_t>(ctx->rt().options().compute_threads, 1);
    auto f = [o = o_, stats = stats_, dec = decoder(ctx->rt().buffers()), epoch](T item) -> decoded_sample {
        if constexpr (std::is_same_v<T, blob>) return decode_sample(shard::sample_of(std::move(item)), *o, dec, epoch, stats.get());
        else return decode_sample(item, *o, dec, epoch, stats.get());
    };
    return conveyor::map(std::move(f), {.concurrency = q_.concurrency ? q_.concurrency : 2 * threads,
                                        .ordered = q_.ordered,
                                        .where = run_on::compute,
                                        .errors = q_.errors,
                                        .capacity = q_.capacity,
                                        .name = "decode_fields"})(ctx, std::move(in));
}

} // namespace conveyor::image

#endif
