// conveyor/store/open.hpp — the one place that maps a location to the store serving it.
#ifndef CONVEYOR_STORE_OPEN_HPP
#define CONVEYOR_STORE_OPEN_HPP

#include <conveyor/core/chunks.hpp>
#include <conveyor/core/location.hpp>
#include <conveyor/detail/config.hpp>
#include <conveyor/store/context.hpp>
#include <conveyor/store/store.hpp>

#include <memory>

namespace conveyor::store {

/** The store that serves `where`: local paths the file store (`store/file.hpp`, reads
    through the io_uring rings of `o.rt`), `s3://` the S3 store over `o.s3`
    (`store/s3.hpp`, on that client's runtime), `http(s)://` the web store
    (`store/http.hpp`, one client per server made with `o.http`). The store serves every
    location of the same kind with the same options. With `o.cache`, a remote store comes
    wrapped in a `cached_store` (`store/cache.hpp`) over that folder. A store of its own
    each call: to share stores (web connections) between reads, keep a `context`.
    @throws conveyor::error naming `where` for an `s3://` location without `o.s3`. */
CONVEYOR_DECL std::shared_ptr<const store> open_store(const location& where, const store_options& o = {});

/** A reader of the object at `where` in chunks, on `rt`'s I/O threads:
    `open_store(where, o with rt)->read_chunks(where, co)`. Throws `conveyor::error` naming
    `where` when no store can serve it. */
CONVEYOR_DECL std::unique_ptr<chunk_reader> open_chunks(runtime& rt, const location& where, const chunk_options& co,
                                                        store_options o = {});

} // namespace conveyor::store

#if CONVEYOR_HEADER_ONLY
#include <conveyor/store/impl/open.ipp>
#endif

#endif
