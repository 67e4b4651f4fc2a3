// conveyor/image/impl/synthetic.ipp — drawing and writing synthetic ImageFolder datasets.
#ifndef CONVEYOR_IMAGE_IMPL_SYNTHETIC_IPP
#define CONVEYOR_IMAGE_IMPL_SYNTHETIC_IPP

#include <conveyor/core/error.hpp>
#include <conveyor/image/encode.hpp>
#include <conveyor/image/error.hpp>
#include <conveyor/image/synthetic.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <numbers>
#include <system_error>
#include <thread>

namespace conveyor::image {

namespace detail {

inline constexpr const char* synthetic_shapes[10] = {"circle", "square", "triangle", "ring", "cross",
                                                     "diamond", "star", "ellipse", "hexagon", "bar"};
inline constexpr const char* synthetic_colours[10] = {"red", "orange", "yellow", "green", "cyan",
                                                      "blue", "purple", "pink", "white", "black"};
inline constexpr std::uint8_t synthetic_rgb[10][3] = {{220, 30, 30},  {245, 140, 20},  {240, 220, 40}, {40, 170, 60},
                                                      {40, 200, 210}, {40, 70, 220},   {140, 50, 190}, {245, 120, 180},
                                                      {250, 250, 250}, {15, 15, 15}};

/// Class `cls`'s shape and colour: every (shape, colour) pair once over 100 classes.
inline std::pair<std::size_t, std::size_t> synthetic_look(std::size_t cls)
{
    const std::size_t shape = cls % 10;
    return {shape, (cls / 10 + shape) % 10};
}

/// splitmix64: a small, good generator, seeded per image.
struct synthetic_rng {
    std::uint64_t s;
    std::uint64_t next()
    {
        std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    }
    double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; } // [0, 1)
    double uniform(double a, double b) { return a + (b - a) * uniform(); }
};

/// A signed distance (negative inside) from shape `shape`'s outline, in units of its radius,
/// at shape-local point (x, y); exact for the circle and ring, close enough elsewhere for
/// one pixel of anti-aliasing.
inline double synthetic_distance(std::size_t shape, double x, double y)
{
    const double ax = std::abs(x), ay = std::abs(y);
    const auto polygon = [&](int sides, double apothem) {
        double d = -1e9;
        for (int i = 0; i < sides; ++i) {
            const double a = 2 * std::numbers::pi * i / sides - std::numbers::pi / 2;
            d = std::max(d, x * std::cos(a) + y * std::sin(a));
        }
        return d - apothem;
    };
    switch (shape) {
    case 0: return std::hypot(x, y) - 1;                                              // circle
    case 1: return std::max(ax, ay) - 0.8;                                            // square
    case 2: return polygon(3, 0.5);                                                   // triangle
    case 3: return std::abs(std::hypot(x, y) - 0.75) - 0.25;                          // ring
    case 4: return std::min(std::max(ax - 1, ay - 0.3), std::max(ax - 0.3, ay - 1)); // cross
    case 5: return (ax + ay / 0.55 - 1) * 0.48;                                       // diamond (a rhombus)
    case 6: {                                                                         // star
        const double r = std::hypot(x, y), t = std::atan2(y, x);
        return r - (0.55 + 0.45 * std::pow(0.5 + 0.5 * std::cos(5 * t + std::numbers::pi / 2), 2));
    }
    case 7: return std::hypot(x, y / 0.55) * 0.55 - 0.55;                             // ellipse
    case 8: return polygon(6, 0.85);                                                  // hexagon
    default: return std::max(ax - 1, ay - 0.25);                                      // bar
    }
}

/// Paints shape `shape` of `radius` pixels at (cx, cy), turned by `angle`, in `rgb` with
/// opacity `alpha`, anti-aliased over one pixel.
inline void synthetic_paint(std::vector<std::uint8_t>& px, std::uint32_t w, std::uint32_t h, std::size_t shape, double cx,
                            double cy, double radius, double angle, const std::uint8_t* rgb, double alpha)
{
    const double c = std::cos(angle), s = std::sin(angle);
    const double reach = radius * 1.5 + 2;
    const auto x0 = static_cast<std::int64_t>(std::max(0.0, std::floor(cx - reach)));
    const auto x1 = static_cast<std::int64_t>(std::min<double>(w - 1, std::ceil(cx + reach)));
    const auto y0 = static_cast<std::int64_t>(std::max(0.0, std::floor(cy - reach)));
    const auto y1 = static_cast<std::int64_t>(std::min<double>(h - 1, std::ceil(cy + reach)));
    for (std::int64_t y = y0; y <= y1; ++y)
        for (std::int64_t x = x0; x <= x1; ++x) {
            const double dx = (static_cast<double>(x) + 0.5 - cx) / radius, dy = (static_cast<double>(y) + 0.5 - cy) / radius;
            const double d = synthetic_distance(shape, c * dx + s * dy, -s * dx + c * dy) * radius; // in pixels
            const double cover = std::clamp(0.5 - d, 0.0, 1.0) * alpha;
            if (cover <= 0) continue;
            std::uint8_t* p = px.data() + (static_cast<std::size_t>(y) * w + static_cast<std::size_t>(x)) * 3;
            for (int k = 0; k < 3; ++k) p[k] = static_cast<std::uint8_t>(std::lround(p[k] + (rgb[k] - p[k]) * cover));
        }
}

} // namespace detail

CONVEYOR_DECL std::vector<std::string> synthetic_class_names(std::size_t classes)
{
    if (classes == 0 || classes > 100)
        throw conveyor::error(make_error_code(errc::bad_options),
                              {.stage = "synthetic_images", .detail = "classes must be 1 to 100, got " + std::to_string(classes)});
    std::vector<std::string> names;
    for (std::size_t c = 0; c < classes; ++c) {
        const auto [shape, colour] = detail::synthetic_look(c);
        names.push_back(std::string(detail::synthetic_colours[colour]) + "_" + detail::synthetic_shapes[shape]);
    }
    // ImageFolder numbers classes in sorted order: name them so that sorting keeps this order.
    for (std::size_t c = 0; c < classes; ++c) {
        char prefix[8];
        std::snprintf(prefix, sizeof prefix, "%02zu_", c);
        names[c] = prefix + names[c];
    }
    return names;
}

CONVEYOR_DECL std::vector<std::uint8_t> draw_synthetic_image(const synthetic_images& o, std::size_t cls, std::size_t n)
{
    const std::uint32_t w = o.width, h = o.height;
    if (w < 8 || h < 8)
        throw conveyor::error(make_error_code(errc::bad_options), {.stage = "synthetic_images", .detail = "images must be at least 8x8"});
    detail::synthetic_rng rng{o.seed * 0x100000001b3ULL ^ (cls << 32) ^ n};
    for (int i = 0; i < 4; ++i) rng.next();
    std::vector<std::uint8_t> px(std::size_t{w} * h * 3);
    // Background: a gradient between two muted colours, a coarse random field over it (value
    // noise on a 24-pixel grid), and fine grain: what gives a JPEG of a photo its size.
    double a[3], b[3];
    for (int k = 0; k < 3; ++k) {
        a[k] = rng.uniform(60, 190);
        b[k] = rng.uniform(60, 190);
    }
    const double theta = rng.uniform(0, 2 * std::numbers::pi), gx = std::cos(theta), gy = std::sin(theta);
    const std::uint32_t cell = 24, gw = w / cell + 2, gh = h / cell + 2;
    std::vector<double> grid(std::size_t{gw} * gh);
    for (auto& g : grid) g = rng.uniform(-28, 28);
    const double span = std::abs(gx) * w + std::abs(gy) * h;
    for (std::uint32_t y = 0; y < h; ++y) {
        const double fy = static_cast<double>(y) / cell;
        const auto iy = static_cast<std::uint32_t>(fy);
        const double ty = fy - iy;
        for (std::uint32_t x = 0; x < w; ++x) {
            const double fx = static_cast<double>(x) / cell;
            const auto ix = static_cast<std::uint32_t>(fx);
            const double tx = fx - ix;
            const double coarse = (grid[iy * gw + ix] * (1 - tx) + grid[iy * gw + ix + 1] * tx) * (1 - ty) +
                                  (grid[(iy + 1) * gw + ix] * (1 - tx) + grid[(iy + 1) * gw + ix + 1] * tx) * ty;
            double t = ((gx * x + gy * y) - std::min(0.0, gx * w) - std::min(0.0, gy * h)) / span;
            t = std::clamp(t, 0.0, 1.0);
            const double grain = static_cast<double>(rng.next() % 49) - 24;
            std::uint8_t* p = px.data() + (std::size_t{y} * w + x) * 3;
            const std::uint64_t tint = rng.next(); // a little colour noise too, as in photos
            for (int k = 0; k < 3; ++k) {
                const double chroma = static_cast<double>((tint >> (16 * k)) % 17) - 8;
                p[k] = static_cast<std::uint8_t>(std::clamp(a[k] * (1 - t) + b[k] * t + coarse + grain + chroma, 0.0, 255.0));
            }
        }
    }
    // Distractors: a few grey shapes of any kind, half transparent.
    const double small = std::min(w, h);
    const int distractors = 2 + static_cast<int>(rng.next() % 4);
    for (int i = 0; i < distractors; ++i) {
        const auto v = static_cast<std::uint8_t>(rng.uniform(70, 200));
        const std::uint8_t grey[3] = {v, v, v};
        detail::synthetic_paint(px, w, h, rng.next() % 10, rng.uniform(0, w), rng.uniform(0, h), rng.uniform(0.05, 0.14) * small,
                                rng.uniform(0, 2 * std::numbers::pi), grey, 0.6);
    }
    // The class's own shape, large and opaque, somewhere in the middle two thirds.
    const auto [shape, colour] = detail::synthetic_look(cls);
    const double radius = rng.uniform(0.18, 0.32) * small;
    detail::synthetic_paint(px, w, h, shape, rng.uniform(w / 3.0, 2 * w / 3.0), rng.uniform(h / 3.0, 2 * h / 3.0), radius,
                            rng.uniform(0, 2 * std::numbers::pi), detail::synthetic_rgb[colour], 1.0);
    return px;
}

CONVEYOR_DECL synthetic_summary make_synthetic_images(const synthetic_images& o,
                                                      const std::function<void(std::size_t, std::size_t)>& progress)
{
    synthetic_summary sum;
    sum.classes = synthetic_class_names(o.classes);
    namespace fs = std::filesystem;
    struct job {
        std::size_t cls, n;
        fs::path path;
    };
    std::vector<job> todo;
    for (std::size_t c = 0; c < o.classes; ++c) {
        const fs::path folder = o.dir / sum.classes[c];
        std::error_code ec;
        fs::create_directories(folder, ec);
        if (ec)
            throw conveyor::error(ec, {.stage = "synthetic_images", .where = folder.string(), .detail = "cannot create the class folder"});
        // Class c gets images c, c + classes, c + 2 classes, ... of the count.
        for (std::size_t n = 0, i = c; i < o.count; ++n, i += o.classes) {
            char name[64];
            std::snprintf(name, sizeof name, "%s_%06zu.jpg", sum.classes[c].c_str() + 3, n);
            fs::path p = folder / name;
            const auto size = fs::file_size(p, ec);
            if (!ec && size > 0) {
                sum.bytes += size;
                ++sum.files;
                continue;
            }
            todo.push_back({c, n, std::move(p)});
        }
    }
    const std::size_t total = sum.files + todo.size();
    std::atomic<std::size_t> next{0}, done{sum.files};
    std::atomic<std::uint64_t> bytes{0};
    std::mutex mu;
    std::exception_ptr failed;
    const unsigned threads = std::max(1u, o.threads ? o.threads : std::thread::hardware_concurrency());
    const auto work = [&] {
        try {
            for (std::size_t i; (i = next.fetch_add(1)) < todo.size();) {
                const job& j = todo[i];
                const auto px = draw_synthetic_image(o, j.cls, j.n);
                const buffer jpg = encode_jpeg(px, o.width, o.height, pixel_format::rgb, {.quality = o.quality});
                const fs::path tmp = fs::path(j.path).concat(".tmp");
                {
                    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
                    f.write(reinterpret_cast<const char*>(jpg.data()), static_cast<std::streamsize>(jpg.size()));
                    if (!f) throw conveyor::error(std::make_error_code(std::errc::io_error), {.stage = "synthetic_images", .where = tmp.string(), .detail = "cannot write the image"});
                }
                std::error_code ec;
                fs::rename(tmp, j.path, ec);
                if (ec) throw conveyor::error(ec, {.stage = "synthetic_images", .where = j.path.string(), .detail = "cannot rename the image into place"});
                bytes += jpg.size();
                const std::size_t d = ++done;
                if (progress) {
                    std::lock_guard lk(mu);
                    progress(d, total);
                }
            }
        } catch (...) {
            std::lock_guard lk(mu);
            if (!failed) failed = std::current_exception();
            next = todo.size();
        }
    };
    {
        std::vector<std::jthread> pool;
        for (unsigned t = 1; t < threads && t < todo.size(); ++t) pool.emplace_back(work);
        work();
    }
    if (failed) std::rethrow_exception(failed);
    sum.written = todo.size();
    sum.files = total;
    sum.bytes += bytes.load();
    return sum;
}

} // namespace conveyor::image

#endif
