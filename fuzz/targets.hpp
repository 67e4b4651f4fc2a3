// fuzz/targets.hpp — the fuzz targets' bodies, one function per target, shared by the
// libFuzzer entry point (fuzz/main.cpp, one executable per target) and by the replay test
// (tests/fuzz/replay.cpp), which feeds them every input in fuzz/regressions/<target>/.
//
// Each body drives the library's own parsing code with one input. Bad input must end in
// the error the API documents for it (`conveyor::error`, caught here); anything else is a
// finding: a crash, a sanitizer report, another exception (it escapes, and std::terminate
// aborts), a hang or unbounded memory (libFuzzer's -timeout and -rss_limit_mb), or a
// broken invariant (`check` aborts with a message).
#ifndef CONVEYOR_FUZZ_TARGETS_HPP
#define CONVEYOR_FUZZ_TARGETS_HPP

#include <conveyor/core/slice.hpp>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <string_view>

namespace conveyor::fuzz {

using input = std::span<const std::uint8_t>;

/// A target: its name (the executable is `fuzz_<name>`, its inputs fuzz/regressions/<name>/).
struct target {
    std::string_view name;
    void (*run)(input);
};

// shard_targets.cpp
void tar(input in);         ///< tar_reader, whole and in chunks: the same members or the same error
void tar_gzip(input in);    ///< sample_parser over gzip input, two chunkings agree
void samples(input in);     ///< member names (one per line) grouped into samples; the key rule against webdataset's regex
void index_json(input in);  ///< shard::parse_index (round trip through to_json) and file::read_index
// s3_targets.cpp
void sigv4(input in);       ///< canonical request, signing and presigning of a fuzzed request
void s3_xml(input in);      ///< ListObjectsV2, error, multipart replies (first byte chooses)
void aws_config(input in);  ///< resolve_config over fuzzed config/credentials/JSON credentials files
// image_targets.cpp
void labels(input in);      ///< validation map, classes file, JSON labels
void image(input in);       ///< decoder::decode with max_pixels (targets jpeg, png, webp, avif: same body, other seeds)
// http_targets.cpp
void http_response(input in); ///< the client's response reading (client_impl::exchange) over an in-memory stream

/// Every target, by name.
std::span<const target> all_targets();

/// Aborts with `what` when `ok` is false: a broken invariant is a finding.
void check(bool ok, std::string_view what);

/// A deterministic 64-bit hash of the input (FNV-1a): targets draw their options from it,
/// so an input always runs the same way and the seeds stay plain files.
std::uint64_t hash_of(input in) noexcept;

/// Checks what a caught `conveyor::error` says: a message, with no raw control characters
/// (every part of it went through `detail::printable`).
void check_message(const std::exception& e);

/// The input as a slice that ends where its allocation ends, so that a read past its end is
/// an overflow AddressSanitizer sees (pooled buffers are rounded up to a size class).
slice tail_slice(input in);

/// A path that reads as `in`: an in-memory file (memfd), one per `slot`, rewritten on each
/// call; for the parsers that take a path.
std::string memory_file(int slot, input in);

inline std::string_view as_text(input in) noexcept
{
    return {reinterpret_cast<const char*>(in.data()), in.size()};
}

} // namespace conveyor::fuzz

#endif
