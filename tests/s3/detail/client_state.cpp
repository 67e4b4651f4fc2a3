// Tests of conveyor/s3/detail/client_state.hpp: the helpers of the request executor and
// the transfers (Content-Range parsing).
#include "../../support/common.hpp"

#include <conveyor/s3/detail/client_state.hpp>

#include <cstdint>

namespace s3 = conveyor::s3;

TEST_CASE("Content-Range values are parsed strictly")
{
    std::uint64_t f = 0, l = 0;
    std::int64_t t = 0;
    CHECK(s3::detail::parse_content_range("bytes 0-8388607/1073741824", f, l, t));
    CHECK(f == 0);
    CHECK(l == 8388607);
    CHECK(t == 1073741824);
    CHECK(s3::detail::parse_content_range("bytes 5-9/*", f, l, t));
    CHECK(t == -1);
    CHECK_FALSE(s3::detail::parse_content_range("bytes 9-5/10", f, l, t));
    CHECK_FALSE(s3::detail::parse_content_range("items 0-1/2", f, l, t));
    CHECK_FALSE(s3::detail::parse_content_range("bytes 0-x/2", f, l, t));
    CHECK_FALSE(s3::detail::parse_content_range("bytes -1/2", f, l, t));
}
