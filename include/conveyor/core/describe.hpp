// conveyor/core/describe.hpp — the core option structs described (Boost.Describe): their
// fields' names and types, for `detail::read_options` and `detail::option_to_json`, under
// the Python keywords and the bench's configuration keys. The fields' meaning is documented
// once, where each struct is declared.
#ifndef CONVEYOR_CORE_DESCRIBE_HPP
#define CONVEYOR_CORE_DESCRIBE_HPP

#include <conveyor/core/detail/describe_json.hpp>
#include <conveyor/core/order.hpp>
#include <conveyor/core/run_context.hpp>
#include <conveyor/core/stages/batch.hpp>
#include <conveyor/core/stages/shuffle.hpp>

#include <boost/describe/class.hpp>
#include <boost/describe/enum.hpp>

namespace conveyor {

BOOST_DESCRIBE_ENUM(on_error, fail, skip)
BOOST_DESCRIBE_ENUM(uneven, drop, pad)
BOOST_DESCRIBE_STRUCT(order_options, (), (seed, shuffle, policy))
BOOST_DESCRIBE_STRUCT(shuffle_options, (), (buffer, initial, seed))
BOOST_DESCRIBE_STRUCT(batch_options, (), (partial, capacity))

} // namespace conveyor

#endif
