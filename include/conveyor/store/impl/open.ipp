// conveyor/store/impl/open.ipp — one-off stores: a context of their own (context.ipp maps
// locations to stores).
#ifndef CONVEYOR_STORE_IMPL_OPEN_IPP
#define CONVEYOR_STORE_IMPL_OPEN_IPP

#include <conveyor/store/context.hpp>
#include <conveyor/store/open.hpp>

namespace conveyor::store {

CONVEYOR_DECL std::shared_ptr<const store> open_store(const location& where, const store_options& o)
{
    return context(o).store_for(where);
}

CONVEYOR_DECL std::unique_ptr<chunk_reader> open_chunks(runtime& rt, const location& where, const chunk_options& co, store_options o)
{
    o.rt = &rt;
    return open_store(where, o)->read_chunks(where, co);
}

} // namespace conveyor::store

#endif
