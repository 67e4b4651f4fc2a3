// fuzz/image_targets.cpp — the image module: the decoder (JPEG through TurboJPEG, PNG
// through libspng, WebP through libwebp, AVIF through libavif; crop, DCT scaling, resize,
// flip) and the label files.
#include "targets.hpp"

#include <conveyor/core/error.hpp>
#include <conveyor/file/index.hpp>
#include <conveyor/image/decode.hpp>
#include <conveyor/image/labels.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace conveyor::fuzz {

void labels(input in)
{
    const std::string_view text = as_text(in);
    const std::uint64_t h = hash_of(in);
    // A validation map: what it says, every entry can be found again.
    try {
        const auto map = image::parse_label_map(text, "fuzz://val_map.json");
        check(map && map->source() == "fuzz://val_map.json", "a label map that forgot its source");
        (void)map->find(std::string_view("0"));
        (void)map->find(std::uint64_t{0});
        image::label_map_options o{.map = map, .by = static_cast<image::label_lookup>(h % 4), .first_number = (h & 4) ? 1 : 0};
        const std::uint64_t position = (h >> 8) % 5;
        try {
            (void)image::detail::map_label_of(o, "val/ILSVRC2012_val_00000003.JPEG", "fuzz://shard.tar", (h & 8) ? &position : nullptr);
        } catch (const conveyor::error& e) {
            check_message(e);
        }
    } catch (const conveyor::error& e) {
        check_message(e);
    }
    // A classes file, read from a file as users give it.
    try {
        (void)file::read_classes(memory_file(0, in));
    } catch (const conveyor::error& e) {
        check_message(e);
    }
    // A label inside a sample's JSON field.
    static constexpr std::array<std::string_view, 5> paths{"", "label", "annotations.0.class", "/a~1b/0", "a.b.c.d"};
    try {
        (void)image::detail::json_label_of(text, {.field = "json", .path = std::string(paths[(h >> 16) % paths.size()])}, "key",
                                           "fuzz://shard.tar");
    } catch (const conveyor::error& e) {
        check_message(e);
    }
    (void)image::detail::key_stem(text);
    (void)image::detail::key_number(text);
}

void image(input in)
{
    const std::uint64_t h = hash_of(in);
    const std::span<const std::byte> bytes = std::as_bytes(in);
    image::decode_options o;
    o.format = static_cast<image::pixel_format>(h % 3);
    if (h & 4) o.size = {static_cast<std::uint32_t>(1 + (h >> 8) % 64), static_cast<std::uint32_t>(1 + (h >> 16) % 64)};
    o.crop = static_cast<image::crop_mode>((h >> 24) % 3);
    o.jpeg_crop = static_cast<image::jpeg_crop_method>((h >> 26) % 3);
    o.dct_scaling = (h & 8) != 0;
    o.flip = (h & 16) ? 1.0 : 0.0;
    o.strict = (h & 32) != 0;
    o.seed = h >> 32;
    o.max_pixels = std::uint64_t{1} << 22; // the decompression-bomb guard: 4 Mpx, before any pixel memory
    image::decode_stats stats;
    const image::decode_context ctx{.key = "sample", .origin = "fuzz://shard.tar", .epoch = h >> 40, .stats = &stats};
    const image::decoder d;
    try {
        const auto info = d.info(bytes, ctx);
        const auto size = d.output_size(bytes, o, ctx);
        const auto img = d.decode(bytes, o, ctx);
        check(img.width == size.width && img.height == size.height, "decode's size differs from output_size");
        check(img.channels == image::channels_of(o.format), "decoded channels differ from the format's");
        check(img.pixels.size() >= img.size_bytes(), "decoded pixels shorter than their size");
        check(std::uint64_t{info.width} * info.height <= o.max_pixels, "decoded an image larger than max_pixels");
        if (!o.size.empty()) {
            std::vector<std::uint8_t> out(std::size_t{o.size.width} * o.size.height * image::channels_of(o.format));
            d.decode_into(bytes, o, ctx, out);
        }
    } catch (const conveyor::error& e) {
        check_message(e);
    }
}

} // namespace conveyor::fuzz
