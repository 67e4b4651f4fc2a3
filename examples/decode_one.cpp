// decode_one: decodes one image with decode_image's options and writes exactly what the
// stage would hand on (PPM for RGB/BGR, PGM for grey), so you can see what your
// augmentations do.
//
//   decode_one photo.jpg -o full.ppm
//   decode_one photo.jpg --size 224x224 --crop rrc --flip --seed 7 --epoch 3 -o train.ppm
//   decode_one photo.jpg --size 224x224 --crop center --format gray -o val.pgm
//   decode_one sample.jpg --key train/n01440764_10026 --size 224x224 --crop rrc -o s.ppm
//
// The random crop and flip depend on (seed, epoch, key). The key is the file's path as
// given, unless --key names the sample key it has in the pipeline (a shard's __key__, or
// the path below the dataset root). BGR output is written as it is stored (a viewer shows
// red and blue swapped).
#include <conveyor/core/runtime.hpp>
#include <conveyor/file/source.hpp>
#include <conveyor/image/decode.hpp>
#include <conveyor/image/stage.hpp>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

namespace cv = conveyor;
namespace image = conveyor::image;

namespace {

std::optional<image::extent> parse_size(const std::string& s)
{
    const auto x = s.find_first_of("xX");
    if (x == std::string::npos) return std::nullopt;
    try {
        std::size_t a = 0, b = 0;
        const unsigned long w = std::stoul(s.substr(0, x), &a), h = std::stoul(s.substr(x + 1), &b);
        if (a != x || b != s.size() - x - 1 || w == 0 || h == 0 || w > 65535 || h > 65535) return std::nullopt;
        return image::extent{static_cast<std::uint32_t>(w), static_cast<std::uint32_t>(h)};
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

void write_pnm(const std::string& path, const image::decoded_image& img)
{
    std::ofstream out(path, std::ios::binary);
    if (!out) throw std::runtime_error("cannot write " + path);
    out << (img.channels == 1 ? "P5" : "P6") << '\n' << img.width << ' ' << img.height << "\n255\n";
    out.write(reinterpret_cast<const char*>(img.data().data()), static_cast<std::streamsize>(img.size_bytes()));
    if (!out) throw std::runtime_error("cannot write " + path);
}

} // namespace

int main(int argc, char** argv)
{
    CLI::App app{"decode_one: decode one JPEG, PNG, WebP or AVIF as the decode_image stage would, and write the result as PPM/PGM"};
    std::string in, out, size_text, crop = "none", format = "rgb", key, method = "decode";
    std::vector<double> scale{0.08, 1.0}, ratio{3.0 / 4.0, 4.0 / 3.0};
    double flip = 0, center_fraction = 0.875;
    std::uint64_t seed = 0, epoch = 0;
    bool no_dct = false, lenient = false;
    app.add_option("input", in, "the image (JPEG, PNG, WebP or AVIF; the format is told from its bytes)")->required()->check(CLI::ExistingFile);
    app.add_option("-o,--output", out, "where to write the result: a PPM (RGB, BGR) or PGM (gray)")->required();
    app.add_option("--size", size_text, "output size WxH (default: the crop's own size)");
    app.add_option("--crop", crop, "none, center or rrc (torchvision's RandomResizedCrop)")
        ->check(CLI::IsMember({"none", "center", "rrc"}));
    app.add_option("--scale", scale, "rrc: range of the crop's area, as a fraction of the image's (min,max)")
        ->delimiter(',')
        ->expected(2);
    app.add_option("--ratio", ratio, "rrc: range of the crop's aspect ratio w/h (min,max)")->delimiter(',')->expected(2);
    app.add_option("--center-fraction", center_fraction, "center: fraction of the largest centred region of the output's shape");
    app.add_flag("--flip{1.0}", flip, "flip horizontally; --flip=P flips with probability P (seeded)");
    app.add_option("--seed", seed, "seed of the random crop and flip");
    app.add_option("--epoch", epoch, "epoch (the augmentation changes with it)");
    app.add_option("--key", key, "the sample key to draw the augmentation for (default: the input path)");
    app.add_option("--format", format, "rgb, bgr or gray")->check(CLI::IsMember({"rgb", "bgr", "gray"}));
    app.add_option("--crop-method", method, "JPEG crops: decode (whole image, then crop) or transform (lossless MCU crop first)")
        ->check(CLI::IsMember({"decode", "transform"}));
    app.add_flag("--no-dct-scaling", no_dct, "decode JPEGs at full size before resizing");
    app.add_flag("--lenient", lenient, "decode what a damaged JPEG still holds, instead of failing on codec warnings");
    CLI11_PARSE(app, argc, argv);

    image::decode_options o;
    if (!size_text.empty()) {
        const auto s = parse_size(size_text);
        if (!s) {
            std::cerr << "decode_one: --size must be WxH with both in 1..65535, e.g. 224x224 (got \"" << size_text << "\")\n";
            return 2;
        }
        o.size = *s;
    }
    o.crop = crop == "center" ? image::crop_mode::center : crop == "rrc" ? image::crop_mode::random_resized : image::crop_mode::none;
    o.scale = {scale[0], scale[1]};
    o.ratio = {ratio[0], ratio[1]};
    o.center_fraction = center_fraction;
    o.flip = flip;
    o.seed = seed;
    o.format = format == "gray" ? image::pixel_format::gray : format == "bgr" ? image::pixel_format::bgr : image::pixel_format::rgb;
    o.dct_scaling = !no_dct;
    o.jpeg_crop = method == "transform" ? image::jpeg_crop_method::transform_then_decode : image::jpeg_crop_method::decode_then_crop;
    o.strict = !lenient;

    try {
        cv::runtime rt({.io_threads = 1, .compute_threads = 1});
        std::optional<image::decoded> got;
        auto stats = std::make_shared<image::decode_stats>();
        if (key.empty()) {
            // The stage itself, on the file source: exactly what a pipeline hands on.
            auto pipe = cv::file::files(std::vector<std::string>{in}) | image::decode_image({.decode = o, .stats = stats});
            pipe.on(rt);
            pipe.set_epoch(epoch);
            for (auto& d : pipe) got = std::move(d);
            if (!got) throw std::runtime_error("the pipeline gave no image");
        } else {
            // The same decode as the stage's, for a sample key that is not this file's path.
            std::ifstream f(in, std::ios::binary);
            const std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
            got.emplace();
            got->key = key;
            got->origin = in;
            got->image = image::decoder(rt.buffers()).decode(std::as_bytes(std::span(bytes)), o,
                                                             {.key = key, .origin = in, .epoch = epoch, .stats = stats.get()});
        }
        const auto info = [&] {
            std::ifstream f(in, std::ios::binary);
            const std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
            return image::decoder{}.info(std::as_bytes(std::span(bytes)));
        }();
        const auto r = image::crop_for(info.height, info.width, o, {.key = got->key, .epoch = epoch});
        const bool flipped = image::flip_for(o, {.key = got->key, .epoch = epoch});
        write_pnm(out, got->image);
        std::cerr << "decode_one: " << in << " (" << (info.kind == image::image_kind::jpeg ? "JPEG" : "PNG") << " " << info.width << "x"
                  << info.height << ", key \"" << got->key << "\", epoch " << epoch << "): crop " << r.width << "x" << r.height << " at ("
                  << r.left << ", " << r.top << ")" << (flipped ? ", flipped" : "") << " -> " << got->image.width << "x" << got->image.height
                  << " " << format << (stats->warnings ? ", " + std::to_string(stats->warnings.load()) + " codec warning(s) tolerated" : "")
                  << "; wrote " << out << "\n";
        return 0;
    } catch (const std::exception& e) {
        std::cerr << "decode_one: " << e.what() << "\n";
        return 1;
    }
}
