// conveyor/cuda/describe.hpp — the CUDA module's value settings described (Boost.Describe),
// for `detail::read_options`: the Python module's `to_cuda()` settings are these fields.
// `staging_options::stream` (a CUDA stream) is given in C++ only and not described.
#ifndef CONVEYOR_CUDA_DESCRIBE_HPP
#define CONVEYOR_CUDA_DESCRIBE_HPP

#include <conveyor/core/detail/describe_json.hpp>
#include <conveyor/cuda/staging.hpp>

#include <boost/describe/class.hpp>

namespace conveyor::cuda {

BOOST_DESCRIBE_STRUCT(staging_options, (), (device, ring, capacity))

} // namespace conveyor::cuda

#endif
