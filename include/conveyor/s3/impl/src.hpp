// conveyor/s3/impl/src.hpp — the s3 module's non-template definitions, compiled once
// (CONVEYOR_SEPARATE_COMPILATION; see conveyor/src.hpp).
#ifndef CONVEYOR_S3_IMPL_SRC_HPP
#define CONVEYOR_S3_IMPL_SRC_HPP

#if !defined(CONVEYOR_SEPARATE_COMPILATION)
#error "conveyor/s3/impl/src.hpp is for CONVEYOR_SEPARATE_COMPILATION builds"
#endif

// One line per impl/*.ipp file of the module, e.g. #include <conveyor/s3/impl/x.ipp>
#include <conveyor/s3/detail/impl/credentials_cache.ipp>
#include <conveyor/s3/detail/impl/throttle.ipp>
#include <conveyor/s3/detail/impl/xml.ipp>
#include <conveyor/s3/impl/client.ipp>
#include <conveyor/s3/impl/config.ipp>
#include <conveyor/s3/impl/credentials.ipp>
#include <conveyor/s3/impl/error.ipp>
#include <conveyor/s3/impl/execute.ipp>
#include <conveyor/s3/impl/list.ipp>
#include <conveyor/s3/impl/multipart.ipp>
#include <conveyor/s3/impl/provider.ipp>
#include <conveyor/s3/impl/sigv4.ipp>
#include <conveyor/s3/impl/source.ipp>
#include <conveyor/s3/impl/transfer.ipp>
#include <conveyor/s3/impl/chunks.ipp>

#endif
