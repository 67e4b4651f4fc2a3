// conveyor/shard/impl/src.hpp — the shard module's non-template definitions, compiled once
// (CONVEYOR_SEPARATE_COMPILATION; see conveyor/src.hpp).
#ifndef CONVEYOR_SHARD_IMPL_SRC_HPP
#define CONVEYOR_SHARD_IMPL_SRC_HPP

#if !defined(CONVEYOR_SEPARATE_COMPILATION)
#error "conveyor/shard/impl/src.hpp is for CONVEYOR_SEPARATE_COMPILATION builds"
#endif

#include <conveyor/shard/detail/impl/sample_name.ipp>
#include <conveyor/shard/detail/impl/tar.ipp>
#include <conveyor/shard/detail/impl/tar_reader.ipp>
#include <conveyor/shard/detail/impl/gunzip.ipp>
#include <conveyor/shard/detail/impl/sample_reader.ipp>
#include <conveyor/shard/impl/error.ipp>
#include <conveyor/shard/impl/untar.ipp>
#include <conveyor/shard/detail/impl/tar_write.ipp>
#include <conveyor/shard/impl/index.ipp>
#include <conveyor/shard/impl/writer.ipp>
#include <conveyor/shard/impl/list.ipp>
#include <conveyor/shard/impl/source.ipp>
#include <conveyor/shard/impl/dataset.ipp>

#endif
