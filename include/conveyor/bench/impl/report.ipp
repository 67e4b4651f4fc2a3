// conveyor/bench/impl/report.ipp — the HTML report and its SVG plots (see report.hpp).
#ifndef CONVEYOR_BENCH_IMPL_REPORT_IPP
#define CONVEYOR_BENCH_IMPL_REPORT_IPP

#include <conveyor/bench/report.hpp>

#include <sched.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <system_error>

namespace conveyor::detail::svg_report {

// The Okabe-Ito palette, which stays distinct under the common colour-vision deficiencies;
// yellow last, as it is faint on white.
inline constexpr const char* palette[] = {"#0072B2", "#E69F00", "#009E73", "#D55E00",
                                          "#CC79A7", "#56B4E9", "#000000", "#F0E442"};
inline constexpr std::size_t palette_size = sizeof palette / sizeof palette[0];

inline constexpr const char* font = "system-ui, -apple-system, Segoe UI, Roboto, Helvetica, Arial, sans-serif";

/// A coordinate for an SVG attribute: at most two decimals, never NaN or inf, and bounded
/// so that a point far outside the plot does not turn into a number a renderer chokes on.
CONVEYOR_DECL std::string num(double v)
{
    if (!std::isfinite(v)) v = 0;
    v = std::clamp(v, -1e6, 1e6);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f", v);
    std::string s(buf);
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
    if (s == "-0") s = "0";
    return s;
}

/// The width of `text` in a sans-serif font of `size` px, estimated (about 0.6 em a
/// character): layout needs it and SVG without scripts cannot measure.
CONVEYOR_DECL double text_width(std::string_view text, double size)
{
    std::size_t chars = 0;
    for (const char c : text)
        if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++chars;
    return static_cast<double>(chars) * size * 0.6;
}

/// `text` cut to about `width` px (at `size`), ending with an ellipsis when cut.
CONVEYOR_DECL std::string fit_text(std::string_view text, double width, double size)
{
    if (text_width(text, size) <= width) return std::string(text);
    const auto room = static_cast<std::size_t>(std::max(1.0, width / (size * 0.6) - 1));
    std::string out;
    std::size_t chars = 0;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        if ((c & 0xC0) != 0x80 && chars++ == room) break;
        out += text[i];
    }
    return out + "\u2026";
}

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
        return (v - lo) / (hi - lo);
    }

    std::string label(double v) const { return bench::si_format(v, log ? v / 10 : step); }
};

/// An axis `length` px long over data in [lo, hi] (finite, and > 0 when `log`), with
/// about `target` labels. `fixed_lo`, when finite (and > 0 for a log axis), is where it
/// starts whatever the data. The axis ends at ticks (the first and last "nice" values
/// around the data) unless `hug`: then it ends where the data do, when they span enough
/// (any range on a linear axis, a decade on a log one) to keep two labelled ticks inside.
CONVEYOR_DECL axis make_axis(double lo, double hi, bool log, double fixed_lo, int target, double length, bool hug)
{
    axis a;
    a.log = log;
    const bool fixed = std::isfinite(fixed_lo) && (!log || fixed_lo > 0);
    if (fixed) lo = fixed_lo;
    if (hi < lo) hi = lo;
    if (log) {
        a.ticks = bench::log_ticks(lo, hi, target);
        a.lo = fixed ? fixed_lo : a.ticks.front().value;
        a.hi = a.ticks.back().value;
        if (hug && hi >= lo * 10) {
            a.lo = lo;
            a.hi = hi;
        }
        // Minor ticks only where decades are wide enough for them not to blur into a band.
        const double decades = std::log10(a.hi) - std::log10(a.lo);
        if (length / decades < 40)
            std::erase_if(a.ticks, [](const bench::axis_tick& t) {
                const double mantissa = t.value / std::pow(10.0, std::floor(std::log10(t.value) + 1e-9));
                return !t.labeled && std::abs(mantissa - 1) > 1e-6;
            });
    } else {
        const auto t = bench::nice_ticks(lo, hi, target);
        a.lo = fixed ? fixed_lo : t.front();
        a.hi = t.back();
        a.step = t.size() > 1 ? t[1] - t[0] : 0;
        for (const double v : t) a.ticks.push_back({v, true});
        if (!(a.hi > a.lo)) a.hi = a.lo + (a.lo == 0 ? 1 : std::abs(a.lo));
        if (hug && hi > lo) {
            const double eps = (hi - lo) * 1e-9;
            const auto inside = std::count_if(t.begin(), t.end(), [&](double v) { return v >= lo - eps && v <= hi + eps; });
            if (inside >= 2) {
                if (!fixed) a.lo = lo;
                a.hi = hi;
            }
        }
    }
    const double eps = (a.hi - a.lo) * 1e-9;
    std::erase_if(a.ticks, [&](const bench::axis_tick& t) {
        return log ? t.value < a.lo * (1 - 1e-9) || t.value > a.hi * (1 + 1e-9) : t.value < a.lo - eps || t.value > a.hi + eps;
    });
    return a;
}

CONVEYOR_DECL std::string svg_open(double width, double height, std::string_view title)
{
    std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 " + num(width) + " " + num(height) +
                    "\" width=\"100%\" role=\"img\" aria-label=\"" + bench::html_escape(title) + "\" font-family=\"" + font +
                    "\" font-size=\"12\">\n";
    s += "<title>" + bench::html_escape(title) + "</title>\n";
    s += "<rect width=\"" + num(width) + "\" height=\"" + num(height) + "\" fill=\"#fff\"/>\n";
    if (!title.empty())
        s += "<text x=\"" + num(width / 2) + "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"600\" fill=\"#222\">" +
             bench::html_escape(title) + "</text>\n";
    return s;
}

CONVEYOR_DECL std::string text(double x, double y, std::string_view content, std::string_view attributes = {})
{
    std::string s = "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\"";
    if (!attributes.empty()) (s += ' ') += attributes;
    return s + ">" + bench::html_escape(content) + "</text>\n";
}

CONVEYOR_DECL std::string line(double x1, double y1, double x2, double y2, std::string_view attributes = {})
{
    std::string s = "<line x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) + "\" y2=\"" + num(y2) + "\"";
    if (!attributes.empty()) (s += ' ') += attributes;
    return s + "/>\n";
}

CONVEYOR_DECL std::string rect(double x, double y, double w, double h, std::string_view attributes = {})
{
    std::string s = "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(std::max(0.0, w)) + "\" height=\"" +
                    num(std::max(0.0, h)) + "\"";
    if (!attributes.empty()) (s += ' ') += attributes;
    return s + "/>\n";
}

/// A UTF-8 sequence's length from its first byte, 0 when it cannot start one.
inline int utf8_length(unsigned char c)
{
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) return 2;
    if ((c & 0xF0) == 0xE0) return 3;
    if ((c & 0xF8) == 0xF0) return 4;
    return 0;
}

} // namespace conveyor::detail::svg_report

namespace conveyor::bench {

CONVEYOR_DECL std::string html_escape(std::string_view text)
{
    static constexpr std::string_view replacement = "\xEF\xBF\xBD"; // U+FFFD
    std::string out;
    out.reserve(text.size() + text.size() / 8);
    std::size_t i = 0;
    while (i < text.size()) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (c < 0x80) {
            switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&quot;"; break;
            case '\'': out += "&#39;"; break;
            case '\t':
            case '\n':
            case '\r': out += static_cast<char>(c); break;
            default:
                if (c < 0x20) out += replacement; // not allowed in XML 1.0, even as a reference
                else out += static_cast<char>(c);
            }
            ++i;
            continue;
        }
        const int len = conveyor::detail::svg_report::utf8_length(c);
        bool valid = len > 1 && i + static_cast<std::size_t>(len) <= text.size();
        std::uint32_t cp = valid ? c & (0x7F >> len) : 0;
        for (int k = 1; valid && k < len; ++k) {
            const auto cc = static_cast<unsigned char>(text[i + static_cast<std::size_t>(k)]);
            valid = (cc & 0xC0) == 0x80;
            cp = (cp << 6) | (cc & 0x3F);
        }
        // Overlong forms, UTF-16 surrogates, past U+10FFFF, and U+FFFE/U+FFFF (not XML characters).
        static constexpr std::uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
        valid = valid && cp >= least[len] && (cp < 0xD800 || cp > 0xDFFF) && cp <= 0x10FFFF && cp != 0xFFFE && cp != 0xFFFF;
        if (valid) {
            out.append(text.substr(i, static_cast<std::size_t>(len)));
            i += static_cast<std::size_t>(len);
        } else {
            out += replacement;
            ++i;
        }
    }
    return out;
}

CONVEYOR_DECL std::vector<double> nice_ticks(double lo, double hi, int target)
{
    if (!std::isfinite(lo) || !std::isfinite(hi)) return {};
    if (hi < lo) std::swap(lo, hi);
    target = std::max(1, target);
    if (!(hi - lo > std::max(std::abs(lo), std::abs(hi)) * 1e-12)) {
        const double d = lo == 0 ? 1 : std::abs(lo) * 0.1;
        lo -= d;
        hi += d;
    }
    const double span = hi - lo;
    if (!std::isfinite(span)) return {lo, hi};
    const double raw = span / target;
    const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
    const double f = raw / magnitude;
    const double step = (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * magnitude;
    const double first = std::floor(lo / step + 1e-9);
    const double last = std::ceil(hi / step - 1e-9);
    if (!(step > 0) || !std::isfinite(first) || !std::isfinite(last) || std::abs(first) > 1e15 || std::abs(last) > 1e15 ||
        last - first > 1000)
        return {lo, hi};
    std::vector<double> ticks;
    for (double i = first; i <= std::max(last, first + 1); ++i) {
        double t = i * step;
        if (std::abs(t) < step * 1e-9) t = 0;
        ticks.push_back(t);
    }
    return ticks;
}

CONVEYOR_DECL std::vector<axis_tick> log_ticks(double lo, double hi, int max_labels)
{
    if (!std::isfinite(lo) || !std::isfinite(hi) || !(lo > 0) || !(hi > 0)) return {};
    if (hi < lo) std::swap(lo, hi);
    max_labels = std::max(2, max_labels);
    // A little slack, so that 1000 computed as 999.9999999 still counts as 10^3.
    const int d0 = static_cast<int>(std::floor(std::log10(lo) + 1e-9));
    int d1 = static_cast<int>(std::ceil(std::log10(hi) - 1e-9));
    if (d1 <= d0) d1 = d0 + 1;
    const int decades = d1 - d0;
    const int every = std::max(1, (decades + max_labels) / max_labels); // ceil((decades + 1) / max_labels)
    const bool minors = decades <= 8;
    const bool minor_labels = decades * 3 + 1 <= max_labels;
    const bool all_minor_labels = decades == 1 && max_labels >= 10;
    std::vector<axis_tick> ticks;
    for (int k = d0; k <= d1; ++k) {
        const double power = std::pow(10.0, k);
        ticks.push_back({power, (k - d0) % every == 0});
        if (k == d1 || !minors) continue;
        for (int m = 2; m <= 9; ++m) ticks.push_back({m * power, all_minor_labels || (minor_labels && (m == 2 || m == 5))});
    }
    return ticks;
}

CONVEYOR_DECL std::string si_format(double value, double resolution, int digits)
{
    if (!std::isfinite(value)) return "n/a";
    if (value == 0) return "0";
    digits = std::clamp(digits, 1, 15);
    double magnitude = std::abs(value);
    if (!(resolution > 0 && std::isfinite(resolution))) {
        resolution = 0;
        // Round first, so that 999.96 with 3 digits is "1k", not "1000".
        const double unit = std::pow(10.0, std::floor(std::log10(magnitude)) - (digits - 1));
        magnitude = std::round(magnitude / unit) * unit;
        if (magnitude < 1e-4 || magnitude >= 1e18) {
            char buf[32];
            std::snprintf(buf, sizeof buf, "%.*g", digits, value);
            return buf;
        }
    }
    static constexpr struct {
        double scale;
        const char* prefix;
    } prefixes[] = {{1e15, "P"}, {1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
    double scale = 1;
    const char* prefix = "";
    for (const auto& p : prefixes) {
        if (magnitude >= p.scale * (1 - 1e-12)) {
            scale = p.scale;
            prefix = p.prefix;
            break;
        }
    }
    const double scaled = value / scale;
    int decimals;
    if (resolution > 0) {
        decimals = static_cast<int>(std::ceil(-std::log10(resolution / scale) - 1e-9));
    } else {
        decimals = digits - 1 - static_cast<int>(std::floor(std::log10(magnitude / scale) + 1e-12));
    }
    decimals = std::clamp(decimals, 0, 9);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, scaled);
    std::string s(buf);
    if (s.find('.') != std::string::npos) {
        while (s.back() == '0') s.pop_back();
        if (s.back() == '.') s.pop_back();
    }
    if (s == "-0") s = "0";
    return s == "0" ? s : s + prefix;
}

CONVEYOR_DECL std::string svg_line_plot(const line_plot& p)
{
    namespace r = conveyor::detail::svg_report;
    constexpr double width = 720, top = 40, plot_height = 280, right = 24;

    // The drawable points: finite, and positive on log axes.
    auto drawable = [&](double x, double y) {
        return std::isfinite(x) && std::isfinite(y) && (!p.log_x || x > 0) && (!p.log_y || y > 0);
    };
    double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo, y_lo = x_lo, y_hi = -x_lo;
    for (const auto& s : p.series) {
        const std::size_t n = std::min(s.x.size(), s.y.size());
        for (std::size_t i = 0; i < n; ++i) {
            if (!drawable(s.x[i], s.y[i])) continue;
            x_lo = std::min(x_lo, s.x[i]);
            x_hi = std::max(x_hi, s.x[i]);
            y_lo = std::min(y_lo, s.y[i]);
            y_hi = std::max(y_hi, s.y[i]);
        }
    }
    const bool has_data = x_lo <= x_hi;
    if (has_data) {
        for (const auto& m : p.marks) {
            if (!std::isfinite(m.x) || (p.log_x && m.x <= 0)) continue;
            x_lo = std::min(x_lo, m.x);
            x_hi = std::max(x_hi, m.x);
        }
    }

    // Y ticks first: their labels' width sets the left margin.
    r::axis ya;
    if (has_data) {
        double y_fixed = p.y_min;
        if (std::isnan(y_fixed) && !p.log_y && y_lo >= 0) y_fixed = 0;
        ya = r::make_axis(y_lo, y_hi, p.log_y, y_fixed, p.log_y ? static_cast<int>(plot_height / 28) : 6, plot_height, false);
    }
    double label_width = 0;
    for (const auto& t : ya.ticks)
        if (t.labeled) label_width = std::max(label_width, r::text_width(ya.label(t.value), 11));
    const double left = (p.y_label.empty() ? 12 : 30) + label_width + 8;
    const double plot_width = width - left - right;
    const double bottom = top + plot_height;

    // The legend's rows, laid out left to right under the x axis label.
    struct legend_item {
        std::size_t series;
        double x, y;
    };
    std::vector<legend_item> legend;
    const double legend_top = bottom + (p.x_label.empty() ? 40 : 60);
    {
        double x = left, y = legend_top;
        for (std::size_t i = 0; i < p.series.size(); ++i) {
            if (p.series[i].name.empty()) continue;
            const double w = 30 + r::text_width(r::fit_text(p.series[i].name, plot_width - 30, 12), 12) + 18;
            if (x > left && x + w > left + plot_width) {
                x = left;
                y += 18;
            }
            legend.push_back({i, x, y});
            x += w;
        }
    }
    const double height = legend.empty() ? legend_top - 8 : legend.back().y + 12;

    std::string s = r::svg_open(width, height, p.title);
    const std::string frame = r::rect(left, top, plot_width, plot_height, "class=\"plot-area\" fill=\"none\" stroke=\"#999\"");
    if (!p.y_label.empty())
        s += r::text(14, top + plot_height / 2, p.y_label,
                     "text-anchor=\"middle\" fill=\"#333\" transform=\"rotate(-90 14 " + r::num(top + plot_height / 2) + ")\"");
    if (!p.x_label.empty())
        s += r::text(left + plot_width / 2, bottom + 40, p.x_label, "text-anchor=\"middle\" fill=\"#333\"");
    if (!has_data) {
        s += frame;
        s += r::text(left + plot_width / 2, top + plot_height / 2, "no data",
                     "text-anchor=\"middle\" font-size=\"16\" fill=\"#888\"");
        return s + "</svg>\n";
    }

    // The x axis ends where the data do (a time series to its last second, a sweep to its
    // largest setting); the y axis at ticks, so that its top is labelled.
    const r::axis xa = r::make_axis(x_lo, x_hi, p.log_x, NAN,
                                    p.log_x ? static_cast<int>(plot_width / 45) : static_cast<int>(plot_width / 90),
                                    plot_width, true);
    auto px = [&](double x) { return left + xa.frac(x) * plot_width; };
    auto py = [&](double y) { return bottom - ya.frac(y) * plot_height; };

    // Grid and ticks: labelled ticks get a grid line, the others (log minors) a fainter one.
    std::string grid, faint_grid, ticks;
    for (const auto& t : xa.ticks) {
        const double x = px(t.value);
        if (x < left - 0.5 || x > left + plot_width + 0.5) continue;
        (t.labeled ? grid : faint_grid) += "M" + r::num(x) + " " + r::num(top) + "V" + r::num(bottom);
        ticks += "M" + r::num(x) + " " + r::num(bottom) + "v" + (t.labeled ? "5" : "3");
    }
    for (const auto& t : ya.ticks) {
        const double y = py(t.value);
        if (y < top - 0.5 || y > bottom + 0.5) continue;
        (t.labeled ? grid : faint_grid) += "M" + r::num(left) + " " + r::num(y) + "H" + r::num(left + plot_width);
        ticks += "M" + r::num(left) + " " + r::num(y) + "h" + (t.labeled ? "-5" : "-3");
    }
    s += "<g fill=\"none\" stroke-width=\"1\">\n";
    if (!faint_grid.empty()) s += "<path stroke=\"#f1f1f1\" d=\"" + faint_grid + "\"/>\n";
    if (!grid.empty()) s += "<path stroke=\"#e3e3e3\" d=\"" + grid + "\"/>\n";
    if (!ticks.empty()) s += "<path stroke=\"#999\" d=\"" + ticks + "\"/>\n";
    s += "</g>\n<g fill=\"#333\" font-size=\"11\">\n";
    for (const auto& t : xa.ticks) {
        const double x = px(t.value);
        if (t.labeled && x >= left - 0.5 && x <= left + plot_width + 0.5)
            s += r::text(x, bottom + 18, xa.label(t.value), "text-anchor=\"middle\"");
    }
    for (const auto& t : ya.ticks) {
        const double y = py(t.value);
        if (t.labeled && y >= top - 0.5 && y <= bottom + 0.5)
            s += r::text(left - 8, y + 4, ya.label(t.value), "text-anchor=\"end\"");
    }
    s += "</g>\n" + frame;

    // The data, in a nested <svg> that clips them to the plot area (a little wider, so that
    // dots on its edges show whole) without ids that several plots on a page could share.
    const double pad = 6;
    s += "<svg x=\"" + r::num(left - pad) + "\" y=\"" + r::num(top - pad) + "\" width=\"" + r::num(plot_width + 2 * pad) +
         "\" height=\"" + r::num(plot_height + 2 * pad) + "\" viewBox=\"" + r::num(left - pad) + " " + r::num(top - pad) + " " +
         r::num(plot_width + 2 * pad) + " " + r::num(plot_height + 2 * pad) + "\" overflow=\"hidden\">\n";
    const std::string x_name = p.x_label.empty() ? "x" : p.x_label;
    const std::string y_name = p.y_label.empty() ? "y" : p.y_label;
    for (std::size_t k = 0; k < p.series.size(); ++k) {
        const auto& series = p.series[k];
        const std::string colour = r::palette[k % r::palette_size];
        // Past the palette, colours repeat with a dotted line.
        std::string dash = series.dashed ? " stroke-dasharray=\"7 4\"" : k >= r::palette_size ? " stroke-dasharray=\"2 3\"" : "";
        std::string lines, dots;
        std::string run;
        std::size_t run_points = 0;
        double run_x = 0, run_y = 0;
        auto flush = [&] {
            if (run_points > 1) lines += "<polyline points=\"" + run + "\"/>\n";
            else if (run_points == 1 && !series.markers)
                dots += "<circle cx=\"" + r::num(run_x) + "\" cy=\"" + r::num(run_y) + "\" r=\"2.5\"/>\n";
            run.clear();
            run_points = 0;
        };
        const std::size_t n = std::min(series.x.size(), series.y.size());
        for (std::size_t i = 0; i < n; ++i) {
            const double x = series.x[i], y = series.y[i];
            const double X = drawable(x, y) ? px(x) : NAN, Y = drawable(x, y) ? py(y) : NAN;
            if (!std::isfinite(X) || !std::isfinite(Y)) {
                flush();
                continue;
            }
            if (run_points++) run += ' ';
            run += r::num(X) + "," + r::num(Y);
            run_x = X;
            run_y = Y;
            if (series.markers) {
                std::string tip = series.name.empty() ? std::string() : series.name + ": ";
                tip += x_name + " = " + si_format(x, 0, 4) + ", " + y_name + " = " + si_format(y, 0, 4);
                dots += "<circle cx=\"" + r::num(X) + "\" cy=\"" + r::num(Y) + "\" r=\"3.5\"><title>" + html_escape(tip) +
                        "</title></circle>\n";
            }
        }
        flush();
        if (!lines.empty())
            s += "<g fill=\"none\" stroke=\"" + colour + "\" stroke-width=\"2\" stroke-linejoin=\"round\" stroke-linecap=\"round\"" +
                 dash + ">\n" + lines + "</g>\n";
        if (!dots.empty()) s += "<g fill=\"" + colour + "\" stroke=\"#fff\" stroke-width=\"1\">\n" + dots + "</g>\n";
    }
    s += "</svg>\n";

    // Marks over the data, their labels staggered so that neighbours do not overlap.
    std::size_t mark_index = 0;
    for (const auto& m : p.marks) {
        if (!std::isfinite(m.x) || (p.log_x && m.x <= 0)) continue;
        const double x = px(m.x);
        if (!std::isfinite(x) || x < left - 0.5 || x > left + plot_width + 0.5) continue;
        s += "<g class=\"mark\">\n";
        s += r::line(x, top, x, bottom, "stroke=\"#444\" stroke-width=\"1.2\" stroke-dasharray=\"3 3\"");
        const bool flip = x > left + plot_width * 0.75;
        s += r::text(flip ? x - 5 : x + 5, top + 15 + 15 * static_cast<double>(mark_index % 3), m.label,
                     std::string("fill=\"#222\" stroke=\"#fff\" stroke-width=\"3\" paint-order=\"stroke\" text-anchor=\"") +
                         (flip ? "end" : "start") + "\"");
        s += "</g>\n";
        ++mark_index;
    }

    for (const auto& item : legend) {
        const auto& series = p.series[item.series];
        const std::string colour = r::palette[item.series % r::palette_size];
        const std::string dash = series.dashed ? " stroke-dasharray=\"7 4\""
                                 : item.series >= r::palette_size ? " stroke-dasharray=\"2 3\""
                                                                  : "";
        s += "<g class=\"legend\">\n";
        s += r::line(item.x, item.y - 4, item.x + 24, item.y - 4, "stroke=\"" + colour + "\" stroke-width=\"2\"" + dash);
        if (series.markers)
            s += "<circle cx=\"" + r::num(item.x + 12) + "\" cy=\"" + r::num(item.y - 4) + "\" r=\"3.5\" fill=\"" + colour + "\"/>\n";
        s += r::text(item.x + 30, item.y, r::fit_text(series.name, plot_width - 30, 12), "fill=\"#222\"");
        s += "</g>\n";
    }
    return s + "</svg>\n";
}

CONVEYOR_DECL std::string svg_share_plot(const share_plot& p)
{
    namespace r = conveyor::detail::svg_report;
    constexpr double width = 720, right = 110, bar_height = 20, pitch = 28, bars_top = 80;
    static constexpr struct {
        const char* name;
        const char* colour;
        const char* ink; // text on the colour
    } kinds[] = {{"busy", "#0072B2", "#fff"}, {"starved (waiting for input)", "#E69F00", "#000"},
                 {"blocked (waiting for room downstream)", "#CC79A7", "#000"}};
    static constexpr const char* short_names[] = {"busy", "starved", "blocked"};

    double names_width = 60;
    for (const auto& row : p.rows) names_width = std::max(names_width, r::text_width(row.name, 12) + 4);
    names_width = std::min(names_width, 220.0);
    const double left = 12 + names_width + 8;
    const double bar_width = width - left - right;
    const double height = p.rows.empty() ? bars_top + 50 : bars_top + pitch * static_cast<double>(p.rows.size()) + 4;

    std::string s = r::svg_open(width, height, p.title);
    // Legend, then the percentage scale.
    double x = left;
    for (const auto& kind : kinds) {
        s += r::rect(x, 36, 12, 12, std::string("fill=\"") + kind.colour + "\"");
        s += r::text(x + 17, 46, kind.name, "fill=\"#222\"");
        x += 17 + r::text_width(kind.name, 12) + 20;
    }
    if (p.rows.empty()) {
        s += r::text(width / 2, bars_top + 20, "no data", "text-anchor=\"middle\" font-size=\"16\" fill=\"#888\"");
        return s + "</svg>\n";
    }
    s += "<g font-size=\"11\" fill=\"#555\" text-anchor=\"middle\">\n";
    for (int q = 0; q <= 4; ++q) {
        const double gx = left + bar_width * q / 4;
        s += r::text(gx, bars_top - 8, std::to_string(q * 25) + "%");
        s += r::line(gx, bars_top - 4, gx, height - 4, "stroke=\"#e3e3e3\"");
    }
    s += "</g>\n";

    for (std::size_t i = 0; i < p.rows.size(); ++i) {
        const auto& row = p.rows[i];
        const double y = bars_top + pitch * static_cast<double>(i);
        const double shares[] = {row.busy, row.starved, row.blocked};
        double total = 0;
        for (const double v : shares)
            if (std::isfinite(v) && v > 0) total += v;
        s += "<g class=\"row\">\n";
        s += "<text x=\"" + r::num(left - 8) + "\" y=\"" + r::num(y + bar_height / 2 + 4) +
             "\" text-anchor=\"end\" fill=\"#222\"" + (row.bottleneck ? " font-weight=\"700\"" : "") + "><title>" +
             html_escape(row.name) + "</title>" + html_escape(r::fit_text(row.name, names_width, 12)) + "</text>\n";
        if (!(total > 0) || !std::isfinite(total)) {
            s += r::rect(left, y, bar_width, bar_height, "fill=\"#f4f4f4\" stroke=\"#ccc\"");
            s += r::text(left + bar_width / 2, y + bar_height / 2 + 4, "no data", "text-anchor=\"middle\" fill=\"#888\"");
        } else {
            double bx = left;
            for (int k = 0; k < 3; ++k) {
                const double v = std::isfinite(shares[k]) && shares[k] > 0 ? shares[k] / total : 0;
                if (v <= 0) continue;
                const double w = v * bar_width;
                char percent[16];
                std::snprintf(percent, sizeof percent, "%.0f%%", v * 100);
                char tip_percent[16];
                std::snprintf(tip_percent, sizeof tip_percent, "%.1f%%", v * 100);
                s += "<rect x=\"" + r::num(bx) + "\" y=\"" + r::num(y) + "\" width=\"" + r::num(w) + "\" height=\"" +
                     r::num(bar_height) + "\" fill=\"" + kinds[k].colour + "\" class=\"" + short_names[k] + "\"><title>" +
                     html_escape(row.name + ": " + short_names[k] + " " + tip_percent) + "</title></rect>\n";
                if (w >= 34)
                    s += r::text(bx + w / 2, y + bar_height / 2 + 4, percent,
                                 std::string("text-anchor=\"middle\" font-size=\"11\" fill=\"") + kinds[k].ink + "\"");
                bx += w;
            }
        }
        if (row.bottleneck)
            s += r::text(left + bar_width + 8, y + bar_height / 2 + 4, "\u25C0 bottleneck", "fill=\"#D55E00\" font-weight=\"700\"");
        s += "</g>\n";
    }
    return s + "</svg>\n";
}

CONVEYOR_DECL std::vector<std::pair<std::string, std::string>> machine_facts(const std::vector<std::string>& paths)
{
    namespace fs = std::filesystem;
    std::vector<std::pair<std::string, std::string>> facts;
    auto trim = [](std::string v) {
        const auto b = v.find_first_not_of(" \t");
        if (b == std::string::npos) return std::string();
        v.erase(v.find_last_not_of(" \t\r\n") + 1);
        return v.substr(b);
    };

    {
        // x86 says "model name"; some ARM and POWER kernels say "Model" or "cpu".
        std::ifstream in("/proc/cpuinfo");
        std::string line, best;
        int best_rank = 99;
        static constexpr const char* keys[] = {"model name", "Model", "cpu model", "cpu"};
        while (std::getline(in, line)) {
            const auto colon = line.find(':');
            if (colon == std::string::npos) continue;
            const std::string key = trim(line.substr(0, colon));
            for (int k = 0; k < 4 && k < best_rank; ++k) {
                if (key != keys[k]) continue;
                std::string value = trim(line.substr(colon + 1));
                if (value.empty()) break;
                // Some model names pad with runs of spaces.
                value.erase(std::unique(value.begin(), value.end(), [](char a, char b) { return a == ' ' && b == ' '; }),
                            value.end());
                best = value;
                best_rank = k;
            }
        }
        if (!best.empty()) facts.emplace_back("CPU", best);
    }

    const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
    if (online > 0) {
        facts.emplace_back("cores", std::to_string(online));
        cpu_set_t set;
        CPU_ZERO(&set);
        if (::sched_getaffinity(0, sizeof set, &set) == 0) {
            const int usable = CPU_COUNT(&set);
            if (usable > 0 && usable < online) facts.emplace_back("usable cores", std::to_string(usable));
        }
    }

    const long pages = ::sysconf(_SC_PHYS_PAGES), page_size = ::sysconf(_SC_PAGESIZE);
    if (pages > 0 && page_size > 0) {
        const double bytes = static_cast<double>(pages) * static_cast<double>(page_size);
        char buf[32];
        if (bytes >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
        else std::snprintf(buf, sizeof buf, "%.0f MiB", bytes / (1024.0 * 1024));
        facts.emplace_back("memory", buf);
    }

    struct utsname names;
    if (::uname(&names) == 0) {
        facts.emplace_back("kernel", std::string(names.sysname) + " " + names.release);
        if (names.nodename[0]) facts.emplace_back("host", names.nodename);
    }

    if (!paths.empty()) {
        // /proc/self/mountinfo: "id parent major:minor root mount-point options [optional...] - fstype source super-options",
        // with spaces and the like in paths escaped as \ooo.
        struct mount {
            std::string point, fstype, source;
        };
        std::vector<mount> mounts;
        auto unescape = [](const std::string& v) {
            std::string out;
            for (std::size_t i = 0; i < v.size(); ++i) {
                if (v[i] == '\\' && i + 3 < v.size() && v[i + 1] >= '0' && v[i + 1] <= '3' &&
                    v[i + 2] >= '0' && v[i + 2] <= '7' && v[i + 3] >= '0' && v[i + 3] <= '7') {
                    out += static_cast<char>((v[i + 1] - '0') * 64 + (v[i + 2] - '0') * 8 + (v[i + 3] - '0'));
                    i += 3;
                } else {
                    out += v[i];
                }
            }
            return out;
        };
        std::ifstream in("/proc/self/mountinfo");
        std::string line;
        while (std::getline(in, line)) {
            std::vector<std::string> fields;
            std::size_t pos = 0;
            while (pos < line.size()) {
                const auto end = line.find(' ', pos);
                fields.push_back(line.substr(pos, end == std::string::npos ? std::string::npos : end - pos));
                if (end == std::string::npos) break;
                pos = end + 1;
            }
            const auto dash = std::find(fields.begin(), fields.end(), "-");
            if (fields.size() < 5 || dash == fields.end() || fields.end() - dash < 3) continue;
            mounts.push_back({unescape(fields[4]), unescape(*(dash + 1)), unescape(*(dash + 2))});
        }
        for (const auto& given : paths) {
            std::error_code ec;
            fs::path resolved = fs::absolute(given, ec);
            if (ec) continue;
            const fs::path canonical = fs::weakly_canonical(resolved, ec);
            if (!ec) resolved = canonical;
            const std::string path = resolved.lexically_normal().generic_string();
            const mount* best = nullptr;
            for (const auto& m : mounts) {
                const bool inside = m.point == "/" || path == m.point ||
                                    (path.size() > m.point.size() && path.compare(0, m.point.size(), m.point) == 0 &&
                                     path[m.point.size()] == '/');
                // The longest mount point wins; of equal ones the later, mounted over the others.
                if (inside && (!best || m.point.size() >= best->point.size())) best = &m;
            }
            if (best) facts.emplace_back("storage " + given, best->fstype + " on " + best->point + " (" + best->source + ")");
        }
    }
    return facts;
}

} // namespace conveyor::bench

namespace conveyor::detail::svg_report {

CONVEYOR_DECL std::string id_attribute(std::string_view id)
{
    return id.empty() ? std::string() : " id=\"" + bench::html_escape(id) + "\"";
}

/// Whether a table cell reads as a number (right-aligned then): 1234, -0.5, 12.3%, 1.2e6.
CONVEYOR_DECL bool numeric_cell(const std::string& v)
{
    if (v.empty()) return false;
    const auto first = static_cast<unsigned char>(v.front());
    if (!std::isdigit(first) && first != '-' && first != '+' && first != '.') return false;
    const char* begin = v.c_str();
    char* end = nullptr;
    (void)std::strtod(begin, &end);
    if (end == begin) return false;
    if (*end == '%') ++end;
    return *end == '\0';
}

inline constexpr const char* style = R"(
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; color: #222;
       max-width: 980px; margin: 2em auto; padding: 0 1em; line-height: 1.45; }
h1 { font-size: 1.6em; margin-bottom: .3em; }
h2 { font-size: 1.25em; margin-top: 1.8em; border-bottom: 1px solid #ddd; padding-bottom: .2em; }
figure { margin: 1.2em 0; }
figure svg { display: block; width: 100%; max-width: 760px; height: auto; }
figcaption { color: #555; font-size: .9em; margin-top: .3em; }
table { border-collapse: collapse; margin: 1em 0; font-size: .92em; }
th, td { border: 1px solid #ddd; padding: .25em .6em; text-align: left; vertical-align: top; }
thead th { background: #f4f4f4; }
table.facts th { font-weight: 600; background: #fafafa; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f6f8fa; border: 1px solid #e3e3e3; padding: .8em; overflow: auto; font-size: .85em; }
)";

} // namespace conveyor::detail::svg_report

namespace conveyor::bench {

CONVEYOR_DECL html_report::html_report(std::string title) : title_(std::move(title)) {}

CONVEYOR_DECL void html_report::add_heading(std::string_view text)
{
    body_ += "<h2>" + html_escape(text) + "</h2>\n";
}

CONVEYOR_DECL void html_report::add_paragraph(std::string_view text)
{
    body_ += "<p>" + html_escape(text) + "</p>\n";
}

CONVEYOR_DECL void html_report::add_plot(std::string_view id, const line_plot& p)
{
    body_ += "<figure" + conveyor::detail::svg_report::id_attribute(id) + ">\n" + svg_line_plot(p) + "<figcaption>" + html_escape(p.title) +
             "</figcaption>\n</figure>\n";
}

CONVEYOR_DECL void html_report::add_plot(std::string_view id, const share_plot& p)
{
    body_ += "<figure" + conveyor::detail::svg_report::id_attribute(id) + ">\n" + svg_share_plot(p) + "<figcaption>" + html_escape(p.title) +
             "</figcaption>\n</figure>\n";
}

CONVEYOR_DECL void html_report::add_table(std::string_view id, const std::vector<std::string>& header,
                                          const std::vector<std::vector<std::string>>& rows)
{
    std::string s = "<table" + conveyor::detail::svg_report::id_attribute(id) + ">\n";
    std::size_t columns = header.size();
    for (const auto& row : rows) columns = std::max(columns, row.size());
    if (!header.empty()) {
        s += "<thead><tr>";
        for (std::size_t c = 0; c < columns; ++c) s += "<th>" + (c < header.size() ? html_escape(header[c]) : "") + "</th>";
        s += "</tr></thead>\n";
    }
    s += "<tbody>\n";
    for (const auto& row : rows) {
        s += "<tr>";
        for (std::size_t c = 0; c < columns; ++c) {
            const std::string cell = c < row.size() ? row[c] : std::string();
            s += (conveyor::detail::svg_report::numeric_cell(cell) ? "<td class=\"n\">" : "<td>") + html_escape(cell) + "</td>";
        }
        s += "</tr>\n";
    }
    body_ += s + "</tbody>\n</table>\n";
}

CONVEYOR_DECL void html_report::add_facts(std::string_view id, const std::vector<std::pair<std::string, std::string>>& facts)
{
    std::string s = "<table class=\"facts\"" + conveyor::detail::svg_report::id_attribute(id) + ">\n<tbody>\n";
    for (const auto& [name, value] : facts)
        s += "<tr><th scope=\"row\">" + html_escape(name) + "</th><td>" + html_escape(value) + "</td></tr>\n";
    body_ += s + "</tbody>\n</table>\n";
}

CONVEYOR_DECL void html_report::add_code(std::string_view id, std::string_view text)
{
    body_ += "<pre" + conveyor::detail::svg_report::id_attribute(id) + "><code>" + html_escape(text) + "</code></pre>\n";
}

CONVEYOR_DECL std::string html_report::str() const
{
    std::string doc = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>";
    doc += html_escape(title_) + "</title>\n<style>" + conveyor::detail::svg_report::style + "</style>\n</head>\n<body>\n";
    doc += "<h1>" + html_escape(title_) + "</h1>\n" + body_ + "</body>\n</html>\n";
    return doc;
}

CONVEYOR_DECL void html_report::write(const std::filesystem::path& file) const
{
    std::error_code ec;
    const auto parent = file.parent_path();
    if (!parent.empty()) {
        std::filesystem::create_directories(parent, ec);
        if (ec) throw std::runtime_error("cannot create the folder " + parent.string() + " for the report: " + ec.message());
    }
    const std::string doc = str();
    std::FILE* out = std::fopen(file.c_str(), "wb");
    if (!out) throw std::runtime_error("cannot write the report " + file.string() + ": " + std::strerror(errno));
    const std::size_t written = std::fwrite(doc.data(), 1, doc.size(), out);
    int error = written == doc.size() ? 0 : errno;
    if (std::fclose(out) != 0 && !error) error = errno;
    if (written != doc.size() || error)
        throw std::runtime_error("cannot write the report " + file.string() + ": " + std::strerror(error ? error : EIO));
}

} // namespace conveyor::bench

#endif
