// bench/support/svg.hpp — the drawing primitives the report's plots share: SVG elements,
// coordinates, text fitting and axes. Internal to the bench support library.
#ifndef CONVEYOR_BENCH_SUPPORT_SVG_HPP
#define CONVEYOR_BENCH_SUPPORT_SVG_HPP

#include "support/report.hpp"

#include <cmath>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor::bench::svg {

// The Okabe-Ito palette, which stays distinct under the common colour-vision deficiencies;
// yellow last, as it is faint on white.
inline constexpr const char* palette[] = {"#0072B2", "#E69F00", "#009E73", "#D55E00",
                                          "#CC79A7", "#56B4E9", "#000000", "#F0E442"};
inline constexpr std::size_t palette_size = sizeof palette / sizeof palette[0];

inline constexpr const char* font = "system-ui, -apple-system, Segoe UI, Roboto, Helvetica, Arial, sans-serif";

/// A coordinate for an SVG attribute: at most two decimals, never NaN or inf, and bounded
/// so that a point far outside the plot does not turn into a number a renderer chokes on.
std::string num(double v);

/// The width of `text` in a sans-serif font of `size` px, estimated (about 0.6 em a
/// character): layout needs it and SVG without scripts cannot measure.
double text_width(std::string_view text, double size);

/// `text` cut to about `width` px (at `size`), ending with an ellipsis when cut.
std::string fit_text(std::string_view text, double width, double size);

/// An axis: its ends, how values map onto it, its ticks.
struct axis {
    double lo = 0, hi = 1;
    bool log = false;
    std::vector<bench::axis_tick> ticks;
    double step = 0; // linear tick step, for the labels' decimals

    /// Where `v` falls between the ends, 0 to 1 (outside for values past the ends).
    double frac(double v) const
    {
        if (log) return (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
        return (v * 0.5 - lo * 0.5) / (hi * 0.5 - lo * 0.5); // halves: no overflow across +-1.7e308
    }

    std::string label(double v) const { return bench::si_format(v, log ? v / 10 : step); }
};

/// An axis `length` px long over data in [lo, hi] (finite, and > 0 when `log`), with
/// about `target` labels. `fixed_lo`, when finite (and > 0 for a log axis), is where it
/// starts whatever the data. The axis ends at ticks (the first and last "nice" values
/// around the data) unless `hug`: then it ends where the data do, when they span enough
/// (any range on a linear axis, a decade on a log one) to keep two labelled ticks inside.
axis make_axis(double lo, double hi, bool log, double fixed_lo, int target, double length, bool hug);

/// The opening `<svg>` element of a `width` x `height` drawing, its `<title>`, a white
/// background and, when `title` is not empty, the title drawn across the top.
std::string svg_open(double width, double height, std::string_view title);

/// A `<text>` element at (x, y); `content` is escaped, `attributes` are written as given.
std::string text(double x, double y, std::string_view content, std::string_view attributes = {});

/// A `<line>` element from (x1, y1) to (x2, y2).
std::string line(double x1, double y1, double x2, double y2, std::string_view attributes = {});

/// A `<rect>` element; a negative width or height is drawn as 0.
std::string rect(double x, double y, double w, double h, std::string_view attributes = {});

} // namespace conveyor::bench::svg

#endif
