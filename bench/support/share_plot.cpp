// bench/support/share_plot.cpp — the stages' busy/starved/blocked shares as stacked bars
// in SVG (see report.hpp).
#include "support/report.hpp"
#include "support/svg.hpp"

#include <algorithm>
#include <cmath>

namespace conveyor::bench {

std::string svg_share_plot(const share_plot& p)
{
    namespace r = svg;
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

} // namespace conveyor::bench
