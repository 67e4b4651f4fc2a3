// conveyor/http/impl/src.hpp — the http module's non-template definitions, compiled once
// (CONVEYOR_SEPARATE_COMPILATION; see conveyor/src.hpp).
#ifndef CONVEYOR_HTTP_IMPL_SRC_HPP
#define CONVEYOR_HTTP_IMPL_SRC_HPP

#if !defined(CONVEYOR_SEPARATE_COMPILATION)
#error "conveyor/http/impl/src.hpp is for CONVEYOR_SEPARATE_COMPILATION builds"
#endif

// One line per impl/*.ipp file of the module.
#include <conveyor/http/impl/chunks.ipp>
#include <conveyor/http/impl/client.ipp>
#include <conveyor/http/impl/endpoint.ipp>
#include <conveyor/http/impl/error.ipp>
#include <conveyor/http/impl/options.ipp>

#endif
