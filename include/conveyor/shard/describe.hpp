// conveyor/shard/describe.hpp — the shard source's value settings described (Boost.Describe),
// for `detail::read_options`: the Python module's `shards()` settings are these fields.
// The order (`order_options`), the errors (`on_error`) and the cache (`store::cache_options`)
// are described on their own; members that hold objects or per-run state (`share`,
// `chunks`, `tar`, `s3`, `http`, `cache`, `store`, `resume`) are given in C++ only and not described.
#ifndef CONVEYOR_SHARD_DESCRIBE_HPP
#define CONVEYOR_SHARD_DESCRIBE_HPP

#include <conveyor/core/describe.hpp>
#include <conveyor/shard/source.hpp>
#include <conveyor/store/describe.hpp>

#include <boost/describe/class.hpp>

namespace conveyor::shard {

BOOST_DESCRIBE_STRUCT(source_options, (), (resampled, shards_in_flight, capacity))

} // namespace conveyor::shard

#endif
