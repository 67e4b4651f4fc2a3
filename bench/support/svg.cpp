// bench/support/svg.cpp — the plots' drawing primitives (see svg.hpp).
#include "support/svg.hpp"

#include <algorithm>
#include <cstdio>

namespace conveyor::bench::svg {

std::string num(double v)
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

double text_width(std::string_view text, double size)
{
    std::size_t chars = 0;
    for (const char c : text)
        if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++chars;
    return static_cast<double>(chars) * size * 0.6;
}

std::string fit_text(std::string_view text, double width, double size)
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

axis make_axis(double lo, double hi, bool log, double fixed_lo, int target, double length, bool hug)
{
    axis a;
    a.log = log;
    const bool fixed = std::isfinite(fixed_lo) && (!log || fixed_lo > 0);
    if (fixed) lo = fixed_lo;
    if (hi < lo) hi = lo;
    if (log) {
        a.ticks = bench::log_ticks(lo, hi, target);
        if (a.ticks.empty()) a.ticks = {{lo, true}, {hi > lo ? hi : lo * 10, true}}; // not reached with finite data
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
        auto t = bench::nice_ticks(lo, hi, target);
        if (t.empty()) t = {lo, hi > lo ? hi : lo + 1}; // not reached with finite data
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

std::string svg_open(double width, double height, std::string_view title)
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

std::string text(double x, double y, std::string_view content, std::string_view attributes)
{
    std::string s = "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\"";
    if (!attributes.empty()) (s += ' ') += attributes;
    return s + ">" + bench::html_escape(content) + "</text>\n";
}

std::string line(double x1, double y1, double x2, double y2, std::string_view attributes)
{
    std::string s = "<line x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) + "\" y2=\"" + num(y2) + "\"";
    if (!attributes.empty()) (s += ' ') += attributes;
    return s + "/>\n";
}

std::string rect(double x, double y, double w, double h, std::string_view attributes)
{
    std::string s = "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(std::max(0.0, w)) + "\" height=\"" +
                    num(std::max(0.0, h)) + "\"";
    if (!attributes.empty()) (s += ' ') += attributes;
    return s + "/>\n";
}

} // namespace conveyor::bench::svg
