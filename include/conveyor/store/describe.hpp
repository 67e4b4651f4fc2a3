// conveyor/store/describe.hpp — the store module's option structs described (Boost.Describe),
// for `detail::read_options`: the Python module's `cache=` settings are these fields.
#ifndef CONVEYOR_STORE_DESCRIBE_HPP
#define CONVEYOR_STORE_DESCRIBE_HPP

#include <conveyor/core/detail/describe_json.hpp>
#include <conveyor/store/store.hpp>

#include <boost/describe/class.hpp>

namespace conveyor::store {

BOOST_DESCRIBE_STRUCT(cache_options, (), (dir, max_bytes, trust, fsync))

} // namespace conveyor::store

#endif
