// conveyor/core/impl/source.ipp — the source core's non-template parts.
#ifndef CONVEYOR_CORE_IMPL_SOURCE_IPP
#define CONVEYOR_CORE_IMPL_SOURCE_IPP

#include <conveyor/core/source.hpp>

namespace conveyor::detail {

CONVEYOR_DECL std::string what_of(const std::exception_ptr& e)
{
    try {
        std::rethrow_exception(e);
    } catch (const std::exception& x) {
        return x.what();
    } catch (...) {
        return "unknown exception";
    }
}

} // namespace conveyor::detail

#endif
