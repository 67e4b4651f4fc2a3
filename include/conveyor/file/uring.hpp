// conveyor/file/uring.hpp — TRANSITIONAL, to be deleted: the ring moved to
// <conveyor/file/detail/uring.hpp> (namespace conveyor::file::detail). This forwarder only
// keeps file/source.hpp and conveyor.hpp building until they include the new header.
#ifndef CONVEYOR_FILE_URING_HPP
#define CONVEYOR_FILE_URING_HPP

#include <conveyor/file/detail/uring.hpp>

namespace conveyor::file {
using detail::directory;
using detail::file_ref;
using detail::uring;
using detail::uring_options;
using detail::uring_service;
} // namespace conveyor::file

#endif
