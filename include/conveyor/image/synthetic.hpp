// conveyor/image/synthetic.hpp — procedurally drawn ImageFolder datasets of JPEGs, for the
// quickstart, tests and benchmarks: no download, and a person can see the classes differ.
#ifndef CONVEYOR_IMAGE_SYNTHETIC_HPP
#define CONVEYOR_IMAGE_SYNTHETIC_HPP

#include <conveyor/detail/config.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace conveyor::image {

/** What `make_synthetic_images` makes: `count` JPEGs of `width` x `height` spread evenly over
    `classes` class folders of `dir` (ImageFolder layout: dir/<class>/<class>_<n>.jpg). Each
    class is a shape in a colour of its own (a red circle, a blue square, ...), drawn at a
    random place, size and angle over a textured background with a few grey distractor
    shapes, so that JPEGs come out at about ImageNet's size (~100 KB at 500 x 375, quality 94; ImageNet averages ~110 KB).
    Image `n` of a class is a pure function of (`seed`, class, n). */
struct synthetic_images {
    std::filesystem::path dir;
    std::size_t classes = 10;   ///< at most 100 (ten shapes x ten colours)
    std::size_t count = 2560;
    std::uint32_t width = 500;
    std::uint32_t height = 375;
    int quality = 94;
    std::uint64_t seed = 1;
    unsigned threads = 0;       ///< drawing and encoding threads; 0: one per core
};

/// What `make_synthetic_images` did.
struct synthetic_summary {
    std::size_t files = 0;   ///< in the dataset now
    std::size_t written = 0; ///< of which made by this call (the others were there)
    std::uint64_t bytes = 0; ///< of all the files
    std::vector<std::string> classes;
};

/// The class names of a synthetic dataset of `classes` classes ("red_circle", "blue_square", ...).
CONVEYOR_DECL std::vector<std::string> synthetic_class_names(std::size_t classes);

/// The pixels (RGB, HWC) of image `n` of class `cls`: what `make_synthetic_images` encodes.
CONVEYOR_DECL std::vector<std::uint8_t> draw_synthetic_image(const synthetic_images& o, std::size_t cls, std::size_t n);

/** Makes the dataset `o` describes; files already there (same name, not empty) are kept, so a
    second call costs a directory walk. Each file is written under a temporary name and
    renamed. `progress(done, total)` is called from one thread as files are done. Throws
    `conveyor::error` naming the file that could not be written. */
CONVEYOR_DECL synthetic_summary make_synthetic_images(const synthetic_images& o,
                                                      const std::function<void(std::size_t, std::size_t)>& progress = {});

} // namespace conveyor::image

#if CONVEYOR_HEADER_ONLY
#include <conveyor/image/impl/synthetic.ipp>
#endif

#endif
