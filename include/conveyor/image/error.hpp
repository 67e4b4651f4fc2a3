// conveyor/image/error.hpp — error codes of the image module (decoding JPEG, PNG, WebP and AVIF images, and sample fields).
#ifndef CONVEYOR_IMAGE_ERROR_HPP
#define CONVEYOR_IMAGE_ERROR_HPP

#include <conveyor/detail/config.hpp>

#include <conveyor/core/error.hpp>

#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>

namespace conveyor::image {

/** Error codes of the image module. Each comes to users inside a `conveyor::error` whose
    `key()` is the sample's key and whose `where()` is the shard URL or file path the bytes
    came from; its detail quotes what the codec said. */
enum class errc {
    /// The bytes start with none of the signatures of JPEG, PNG, WebP (RIFF....WEBP) and
    /// AVIF (an ISO-BMFF ftyp box with the brand avif or avis): the format is told from
    /// the bytes, never from the name.
    not_an_image = 1,
    /// The data end before the image does (a JPEG's "premature end of data", a PNG cut
    /// before its last image data, a WebP or AVIF whose container claims more bytes than
    /// there are). In lenient mode (`decode_options::strict = false`) a
    /// JPEG cut short decodes, its missing part grey, and is counted as a warning instead.
    truncated,
    /// The data are damaged: a bad marker, Huffman code, checksum or zlib stream, a WebP
    /// bitstream or AVIF box that does not parse, or a codec warning about corrupt data in
    /// strict mode.
    corrupt,
    /// A valid image of a kind this decoder does not produce: CMYK or YCCK JPEG, 12-bit
    /// or lossless JPEG, and the like; or a WebP or AVIF when this build of conveyor was
    /// configured without libwebp or libavif (the message says so).
    unsupported,
    /// The header claims more pixels than `decode_options::max_pixels` (a decompression
    /// bomb guard: checked before any pixel memory is taken); or a PNG's metadata chunks
    /// pass the decoder's limits (8 MiB a chunk, 16 MiB in all, 1,000 chunks); or a
    /// progressive JPEG has more than 500 scans; or an AVIF is larger than libavif's own
    /// limits (16384 x 16384 pixels, 32768 on a side).
    too_large,
    /// The input is empty, or its header gives a width or a height of zero.
    zero_size,
    /// The options cannot be applied (an output span of the wrong size, a crop range
    /// that is empty or inverted).
    bad_options,
    /// A shard sample has none of the image fields asked for, or not the label field, or
    /// its JSON label field lacks the key asked for (`json_label`).
    missing_field,
    /// A sample's label field is not a decimal integer, a JSON label not an integer, an
    /// item has no entry in the label map, or a label map file is malformed.
    bad_label,
    /// A sample's field is not what its decoder reads (see `decode_field`): text that is
    /// not UTF-8, JSON that does not parse or passes a limit, a NumPy array whose header
    /// is malformed or does not match its data.
    bad_field,
    /// A field decoder given by the user (`field_options::by_name`, `by_extension`) threw
    /// something other than a `conveyor::error`; it is kept as the nested exception.
    field_decoder_failed,
};

/// The category of `conveyor::image::errc`.
CONVEYOR_DECL const std::error_category& image_category() noexcept;

/// Makes a `std::error_code` from an image error value.
CONVEYOR_DECL std::error_code make_error_code(errc e) noexcept;

namespace detail {

/** The `conveyor::error` of an image that cannot be decoded: `code`, the sample's `key`,
    the shard URL or path `where` (user-info redacted) and `detail` saying what the codec
    reported. */
CONVEYOR_DECL conveyor::error image_error(errc code, std::string_view key, std::string_view where, std::string detail);

} // namespace detail

} // namespace conveyor::image

template <>
struct std::is_error_code_enum<conveyor::image::errc> : std::true_type {};

#if CONVEYOR_HEADER_ONLY
#include <conveyor/image/impl/error.ipp>
#endif

#endif
