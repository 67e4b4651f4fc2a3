// conveyor/image/npy.hpp — NumPy's .npy format: an array's header read, its elements left
// where they are (a view into the member's bytes).
#ifndef CONVEYOR_IMAGE_NPY_HPP
#define CONVEYOR_IMAGE_NPY_HPP

#include <conveyor/core/slice.hpp>
#include <conveyor/detail/config.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace conveyor::image {

/** A NumPy array as a `.npy` file stores it (NumPy's `numpy.lib.format`): its type, its
    shape, its order, and its elements as they lie in the file, not copied.

    `descr` is the header's dtype descriptor: for a plain type its string, the byte order
    first (`<` little-endian, `>` big-endian, `|` not applicable, `=` native) then the kind
    and size in bytes (`<f4`, `|u1`, `|b1`, `<i8`, `>c16`, `|S10`, `<U5`, `<M8[ns]`);
    for a structured type the list literal as the header writes it
    (`[('x', '<f4'), ('y', '<i4', (2,))]`), which `numpy.lib.format.descr_to_dtype` reads
    back after `ast.literal_eval`. The elements are in C order (last index fastest) or,
    with `fortran_order`, Fortran order (first index fastest), in the byte order `descr`
    says: they are not converted.

    `data` is exactly `item_size() * elements()` bytes (the reader checks it), a view that
    shares the member's storage; it may be unaligned for the element type (a tar member's
    data start where the shard puts them), so read it with `memcpy`, or copy it, before
    treating it as an array of the element type.

    @par Thread Safety
    Distinct objects: safe. Shared objects: unsafe.
*/
struct array_value {
    std::string descr;
    std::vector<std::int64_t> shape; ///< empty for a 0-d array (one element)
    bool fortran_order = false;
    slice data;

    /// Bytes per element (`npy_item_size(descr)`); 0 when `descr` is not one it knows.
    CONVEYOR_DECL std::size_t item_size() const noexcept;
    /// Elements: the product of `shape` (1 for a 0-d array, 0 when a dimension is 0).
    CONVEYOR_DECL std::size_t elements() const noexcept;
};

/// Limits of `read_npy`.
struct npy_limits {
    /// The longest header accepted, in bytes: NumPy's own bound (`max_header_size`, 10,000
    /// since NumPy 1.24), past which it refuses to evaluate a header.
    std::size_t max_header_bytes = 10'000;
};

/** Bytes per element of a NumPy dtype descriptor as `.npy` headers write them (see
    `array_value::descr`): booleans `b1`; integers `i1 i2 i4 i8`, `u1 u2 u4 u8`; floats
    `f2 f4 f8 f12 f16`; complex `c8 c16 c24 c32`; bytes `S<n>`; UTF-32 text `U<n>` (4n
    bytes); raw `V<n>`; datetimes and durations `M8`, `m8` with or without a unit
    (`<M8[ns]`); each with a byte order `<`, `>`, `|` or `=`; or a structured list of
    `(name, descr)` and `(name, descr, shape)` entries (nested lists too), whose size is
    the sum of its fields'. Nothing for object arrays (`|O`: pickled Python objects) or a
    descriptor that is none of these. */
CONVEYOR_DECL std::optional<std::size_t> npy_item_size(std::string_view descr);

/** Reads the `.npy` file in `bytes`: format versions 1.0, 2.0 and 3.0 (the header's
    length in 2 or 4 bytes, its text Latin-1 or UTF-8, Python 2's `3L` integers in the
    first two), a header that is the dictionary of `descr`, `fortran_order` and `shape`
    and nothing else. The elements are a view into `bytes` (no copy).

    Anything that is not such a file is `errc::bad_field`, with what is wrong: the magic
    string, a version it does not know, a header that runs past the data, is longer than
    `limits.max_header_bytes`, or does not parse, a dtype it cannot size (object arrays
    included: their elements are pickles), a negative dimension, a shape whose size does
    not fit in memory, and data shorter or longer than the shape and the type make. No
    memory is taken by what the header claims: the check is arithmetic on the claim,
    against the bytes that are there. */
CONVEYOR_DECL array_value read_npy(const slice& bytes, const npy_limits& limits = {});

/// `read_npy` with the failure in `ec` (`errc::bad_field`) instead of thrown; returns an
/// empty array then.
CONVEYOR_DECL array_value read_npy(const slice& bytes, std::error_code& ec, const npy_limits& limits = {});

namespace detail {

/// What is wrong with `bytes` as a `.npy` file, or "" when `out` holds it.
CONVEYOR_DECL std::string parse_npy(const slice& bytes, const npy_limits& limits, array_value& out);

} // namespace detail

} // namespace conveyor::image

#if CONVEYOR_HEADER_ONLY
#include <conveyor/image/impl/npy.ipp>
#endif

#endif
