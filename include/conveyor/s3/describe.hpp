// conveyor/s3/describe.hpp — the S3 client's user settings described (Boost.Describe), for
// `detail::read_options`: the Python module's S3 settings are these fields. Explicit
// credentials (`config_options::creds`) are given in C++ only and not described.
#ifndef CONVEYOR_S3_DESCRIBE_HPP
#define CONVEYOR_S3_DESCRIBE_HPP

#include <conveyor/core/detail/describe_json.hpp>
#include <conveyor/s3/config.hpp>

#include <boost/describe/class.hpp>
#include <boost/describe/enum.hpp>

namespace conveyor::s3 {

BOOST_DESCRIBE_ENUM(addressing, automatic, path, virtual_hosted)
BOOST_DESCRIBE_STRUCT(config_options, (), (anonymous, credentials_file, profile, region, endpoint_url, style))

} // namespace conveyor::s3

#endif
