// conveyor/conveyor.hpp — everything conveyor offers that this build enables.
//
// Internals (the io_uring ring, S3's XML replies, the channel between stages) live under
// detail/ directories and are not included here.
#ifndef CONVEYOR_CONVEYOR_HPP
#define CONVEYOR_CONVEYOR_HPP

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/checksum.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/core/location.hpp>
#include <conveyor/core/memory_budget.hpp>
#include <conveyor/core/metrics.hpp>
#include <conveyor/core/mix.hpp>
#include <conveyor/core/order.hpp>
#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/range.hpp>
#include <conveyor/core/run_context.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/core/sink.hpp>
#include <conveyor/core/slice.hpp>
#include <conveyor/core/source.hpp>
#include <conveyor/core/stages.hpp>
#include <conveyor/core/stream.hpp>
#if CONVEYOR_WITH_CUDA
#include <conveyor/cuda/batch.hpp>
#include <conveyor/cuda/decode.hpp>
#include <conveyor/cuda/device.hpp>
#include <conveyor/cuda/error.hpp>
#include <conveyor/cuda/nvjpeg.hpp>
#include <conveyor/cuda/staging.hpp>
#endif
#include <conveyor/file/error.hpp>
#include <conveyor/file/chunks.hpp>
#include <conveyor/file/index.hpp>
#include <conveyor/file/source.hpp>
#include <conveyor/image/batch.hpp>
#include <conveyor/image/columns.hpp>
#include <conveyor/image/decode.hpp>
#include <conveyor/image/dlpack.hpp>
#include <conveyor/image/encode.hpp>
#include <conveyor/image/split.hpp>
#include <conveyor/image/synthetic.hpp>
#include <conveyor/image/error.hpp>
#include <conveyor/image/fields.hpp>
#include <conveyor/image/npy.hpp>
#include <conveyor/image/stage.hpp>
#include <conveyor/http/chunks.hpp>
#include <conveyor/http/client.hpp>
#include <conveyor/http/endpoint.hpp>
#include <conveyor/http/error.hpp>
#include <conveyor/s3/chunks.hpp>
#include <conveyor/s3/client.hpp>
#include <conveyor/s3/config.hpp>
#include <conveyor/s3/credentials.hpp>
#include <conveyor/s3/error.hpp>
#include <conveyor/s3/provider.hpp>
#include <conveyor/s3/sigv4.hpp>
#include <conveyor/s3/source.hpp>
#include <conveyor/shard/dataset.hpp>
#include <conveyor/shard/error.hpp>
#include <conveyor/shard/index.hpp>
#include <conveyor/shard/list.hpp>
#include <conveyor/shard/sample.hpp>
#include <conveyor/shard/tar_options.hpp>
#include <conveyor/shard/source.hpp>
#include <conveyor/shard/untar.hpp>
#include <conveyor/shard/writer.hpp>
#include <conveyor/store/cache.hpp>
#include <conveyor/store/context.hpp>
#include <conveyor/store/file.hpp>
#include <conveyor/store/http.hpp>
#include <conveyor/store/objects.hpp>
#include <conveyor/store/open.hpp>
#include <conveyor/store/s3.hpp>
#include <conveyor/store/store.hpp>
#include <conveyor/version.hpp>

#endif
