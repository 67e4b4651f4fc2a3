// bench/support/line_plot.cpp — a line plot as SVG (see report.hpp).
#include "support/report.hpp"
#include "support/svg.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace conveyor::bench {

std::string svg_line_plot(const line_plot& p)
{
    namespace r = svg;
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
        // Flat data: room above, so that the line does not lie on the frame.
        if (y_lo == y_hi) {
            const double above = p.log_y ? y_hi * 2 : y_hi + (y_hi == 0 ? 1 : std::abs(y_hi) * 0.2);
            if (std::isfinite(above)) y_hi = above;
        }
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
        if (!(x >= left - 0.5 && x <= left + plot_width + 0.5)) continue; // NaN too
        (t.labeled ? grid : faint_grid) += "M" + r::num(x) + " " + r::num(top) + "V" + r::num(bottom);
        ticks += "M" + r::num(x) + " " + r::num(bottom) + "v" + (t.labeled ? "5" : "3");
    }
    for (const auto& t : ya.ticks) {
        const double y = py(t.value);
        if (!(y >= top - 0.5 && y <= bottom + 0.5)) continue;
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

} // namespace conveyor::bench
