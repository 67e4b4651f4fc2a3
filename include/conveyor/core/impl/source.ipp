// conveyor/core/impl/source.ipp — the source core's non-template parts.
#ifndef CONVEYOR_CORE_IMPL_SOURCE_IPP
#define CONVEYOR_CORE_IMPL_SOURCE_IPP

#include <conveyor/core/source.hpp>

namespace conveyor::detail {

CONVEYOR_DECL void check_key_index(std::string_view stage, std::uint64_t i, std::uint64_t size, std::string_view items)
{
    if (i < size) return;
    throw error(std::make_error_code(std::errc::result_out_of_range),
                {.stage = std::string(stage),
                 .detail = "index " + std::to_string(i) + " is past the end (" + std::to_string(size) + " " + std::string(items) + ")"});
}

} // namespace conveyor::detail

#endif
