// Helpers of the image tests: files as bytes, JPEGs made at run time with TurboJPEG.
#ifndef CONVEYOR_TESTS_IMAGE_SUPPORT_HPP
#define CONVEYOR_TESTS_IMAGE_SUPPORT_HPP

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/slice.hpp>

#include <turbojpeg.h>

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor_test_image {

/// `s` in storage of its own, as a field's bytes are.
inline conveyor::slice slice_of(std::string_view s)
{
    return conveyor::slice(conveyor::buffer::copy_of(s));
}
inline conveyor::slice slice_of(const std::vector<std::byte>& b)
{
    return conveyor::slice(conveyor::buffer::copy_of(std::span<const std::byte>(b)));
}

/// A .npy file of format `major`.0 with header text `header` (padded as NumPy pads it, to
/// 64 bytes with its prefix) and `data` after it.
inline std::string npy_file(std::string header, std::string_view data, int major = 1)
{
    const std::size_t prefix = major == 1 ? 10 : 12;
    header += '\n';
    while ((prefix + header.size()) % 64 != 0) header.insert(header.size() - 1, " ");
    std::string out("\x93NUMPY", 6);
    out += static_cast<char>(major);
    out += '\0';
    const std::size_t n = header.size();
    out += static_cast<char>(n & 0xFF);
    out += static_cast<char>((n >> 8) & 0xFF);
    if (major != 1) {
        out += static_cast<char>((n >> 16) & 0xFF);
        out += static_cast<char>((n >> 24) & 0xFF);
    }
    return out + header + std::string(data);
}

inline std::uint64_t mix(std::uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

inline std::vector<std::byte> read_bytes(const std::filesystem::path& p)
{
    std::ifstream in(p, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open " + p.string());
    std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::byte> b(c.size());
    for (std::size_t i = 0; i < c.size(); ++i) b[i] = std::byte(c[i]);
    return b;
}

/// A w x h RGB picture: 16x16 blocks of colours that differ from block to block, with a
/// gradient inside each, so crops, flips and channel orders all show.
inline std::vector<std::uint8_t> block_picture(std::uint32_t w, std::uint32_t h)
{
    std::vector<std::uint8_t> px(std::size_t{w} * h * 3);
    for (std::uint32_t y = 0; y < h; ++y)
        for (std::uint32_t x = 0; x < w; ++x) {
            const std::uint64_t r = mix((y / 16) * 7919 + (x / 16));
            auto* p = &px[(std::size_t{y} * w + x) * 3];
            p[0] = std::uint8_t((r & 0xFF) / 2 + (x % 16) * 4);
            p[1] = std::uint8_t(((r >> 8) & 0xFF) / 2 + (y % 16) * 4);
            p[2] = std::uint8_t(((r >> 16) & 0xFF) / 2 + 32);
        }
    return px;
}

/// `block_picture(w, h)` compressed by TurboJPEG (`flags`: e.g. TJFLAG_PROGRESSIVE).
inline std::vector<std::byte> make_jpeg(std::uint32_t w, std::uint32_t h, int subsamp, int quality, int flags = 0)
{
    const auto px = block_picture(w, h);
    tjhandle tj = tjInitCompress();
    REQUIRE(tj != nullptr);
    unsigned char* out = nullptr;
    unsigned long size = 0;
    const int rc = tjCompress2(tj, px.data(), int(w), 0, int(h), TJPF_RGB, &out, &size, subsamp, quality, flags);
    tjDestroy(tj);
    REQUIRE(rc == 0);
    std::vector<std::byte> b(size);
    for (unsigned long i = 0; i < size; ++i) b[i] = std::byte(out[i]);
    tjFree(out);
    return b;
}

/// Calls `edit` with the first byte after the length of `jpeg`'s frame header (SOF0: the
/// precision, then height and width, big-endian).
template <class F>
void patch_sof(std::vector<std::byte>& jpeg, F edit)
{
    for (std::size_t i = 2; i + 4 < jpeg.size(); ++i)
        if (jpeg[i] == std::byte{0xFF} && (jpeg[i + 1] == std::byte{0xC0} || jpeg[i + 1] == std::byte{0xC2})) {
            edit(&jpeg[i + 4]);
            return;
        }
    FAIL("no SOF marker");
}

} // namespace conveyor_test_image

#endif
