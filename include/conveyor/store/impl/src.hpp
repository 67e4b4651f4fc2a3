// conveyor/store/impl/src.hpp — the store module's non-template definitions, compiled once
// (CONVEYOR_SEPARATE_COMPILATION; see conveyor/src.hpp).
#ifndef CONVEYOR_STORE_IMPL_SRC_HPP
#define CONVEYOR_STORE_IMPL_SRC_HPP

#if !defined(CONVEYOR_SEPARATE_COMPILATION)
#error "conveyor/store/impl/src.hpp is for CONVEYOR_SEPARATE_COMPILATION builds"
#endif

#include <conveyor/store/impl/cache.ipp>
#include <conveyor/store/impl/context.ipp>
#include <conveyor/store/impl/file.ipp>
#include <conveyor/store/impl/http.ipp>
#include <conveyor/store/impl/objects.ipp>
#include <conveyor/store/impl/open.ipp>
#include <conveyor/store/impl/s3.ipp>
#include <conveyor/store/impl/store.ipp>

#endif
