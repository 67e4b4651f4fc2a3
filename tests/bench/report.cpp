// Tests of conveyor/bench/report.hpp: escaping, tick choice and labels, where the line
// plot puts data, gaps and edge cases, the share bars, the machine's facts, and the page.
// report_html_check.py checks the page's well-formedness on a sample (report_sample.cpp).
#include "support/report.hpp"

#include <doctest/doctest.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

namespace bench = conveyor::bench;
namespace fs = std::filesystem;

namespace {

constexpr double not_a_number = std::numeric_limits<double>::quiet_NaN();
constexpr double inf = std::numeric_limits<double>::infinity();

std::size_t count(const std::string& s, const std::string& what)
{
    std::size_t n = 0;
    for (auto pos = s.find(what); pos != std::string::npos; pos = s.find(what, pos + what.size())) ++n;
    return n;
}

// The numeric value of attribute `name` of one tag.
double attribute(const std::string& tag, const std::string& name)
{
    std::smatch m;
    const std::regex re("\\s" + name + "=\"([^\"]*)\"");
    REQUIRE_MESSAGE(std::regex_search(tag, m, re), "no " << name << " in " << tag);
    return std::stod(m[1]);
}

// Every tag of `svg` that starts with `start` (e.g. "<polyline", "<rect x"), whole.
std::vector<std::string> tags(const std::string& svg, const std::string& start)
{
    std::vector<std::string> out;
    for (auto pos = svg.find(start); pos != std::string::npos; pos = svg.find(start, pos + 1))
        out.push_back(svg.substr(pos, svg.find('>', pos) - pos + 1));
    return out;
}

struct point {
    double x, y;
};

std::vector<point> polyline_points(const std::string& tag)
{
    const auto start = tag.find("points=\"");
    REQUIRE(start != std::string::npos);
    std::istringstream in(tag.substr(start + 8, tag.find('"', start + 8) - start - 8));
    std::vector<point> out;
    std::string pair;
    while (in >> pair) {
        const auto comma = pair.find(',');
        out.push_back({std::stod(pair.substr(0, comma)), std::stod(pair.substr(comma + 1))});
    }
    return out;
}

struct area {
    double left, top, width, height;
};

area plot_area(const std::string& svg)
{
    const auto r = tags(svg, "<rect x");
    for (const auto& t : r) {
        if (t.find("class=\"plot-area\"") != std::string::npos)
            return {attribute(t, "x"), attribute(t, "y"), attribute(t, "width"), attribute(t, "height")};
    }
    FAIL("no plot area in the SVG");
    return {};
}

// No NaN or infinity may reach the SVG's geometry (si_format's own test covers the labels).
// A plain scan: std::regex recurses per character and overflows the stack on long SVGs.
void check_finite(const std::string& svg)
{
    static const std::set<std::string> geometry = {"x", "y", "x1", "y1", "x2", "y2", "cx", "cy", "r", "width", "height",
                                                   "points", "d", "viewBox"};
    std::string bad;
    for (auto eq = svg.find("=\""); eq != std::string::npos; eq = svg.find("=\"", eq + 2)) {
        auto name_start = eq;
        while (name_start > 0 && (std::isalnum(static_cast<unsigned char>(svg[name_start - 1])) || svg[name_start - 1] == '-'))
            --name_start;
        const std::string name = svg.substr(name_start, eq - name_start);
        if (!geometry.count(name)) continue;
        std::string value = svg.substr(eq + 2, svg.find('"', eq + 2) - eq - 2);
        for (auto& c : value) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        if (value.find("nan") != std::string::npos || value.find("inf") != std::string::npos)
            bad += name + "=\"" + value + "\" ";
    }
    CHECK_MESSAGE(bad.empty(), bad);
    CHECK(svg.find(">nan<") == std::string::npos);
    CHECK(svg.find(">inf<") == std::string::npos);
}

std::string slurp(const fs::path& p)
{
    std::ifstream in(p, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

} // namespace

TEST_CASE("html_escape makes markup characters entities and keeps text and valid UTF-8")
{
    CHECK(bench::html_escape("a & b < c > d \"e\" 'f'") == "a &amp; b &lt; c &gt; d &quot;e&quot; &#39;f&#39;");
    CHECK(bench::html_escape("plain text, 1/2") == "plain text, 1/2");
    CHECK(bench::html_escape("") == "");
    CHECK(bench::html_escape("tab\tline\n") == "tab\tline\n");
    CHECK(bench::html_escape("\xC3\xA9t\xC3\xA9 \xE2\x86\x92 \xF0\x9F\x93\x88") == "\xC3\xA9t\xC3\xA9 \xE2\x86\x92 \xF0\x9F\x93\x88");
}

TEST_CASE("html_escape replaces what XML cannot hold: control characters and invalid UTF-8")
{
    const std::string fffd = "\xEF\xBF\xBD";
    CHECK(bench::html_escape(std::string("a\x01z", 3)) == "a" + fffd + "z");
    CHECK(bench::html_escape(std::string("a\0z", 3)) == "a" + fffd + "z");
    CHECK(bench::html_escape("a\xFFz") == "a" + fffd + "z");          // never a UTF-8 byte
    CHECK(bench::html_escape("a\xC3") == "a" + fffd);                 // cut short
    CHECK(bench::html_escape("\xC0\xAF") == fffd + fffd);             // overlong '/'
    CHECK(bench::html_escape("\xED\xA0\x80") == fffd + fffd + fffd); // a UTF-16 surrogate
}

TEST_CASE("nice_ticks picks 1-2-5 steps that cover the range")
{
    CHECK(bench::nice_ticks(0, 100) == std::vector<double>{0, 20, 40, 60, 80, 100});
    CHECK(bench::nice_ticks(0, 7) == std::vector<double>{0, 1, 2, 3, 4, 5, 6, 7});
    CHECK(bench::nice_ticks(-3, 12) == std::vector<double>{-5, 0, 5, 10, 15});
    CHECK(bench::nice_ticks(1e6, 3.4e6) == std::vector<double>{1e6, 1.5e6, 2e6, 2.5e6, 3e6, 3.5e6});
    const auto small = bench::nice_ticks(0.013, 0.087);
    REQUIRE(small.size() == 9);
    CHECK(small.front() == doctest::Approx(0.01));
    CHECK(small.back() == doctest::Approx(0.09));
    // Equal ends: widened around the value, not a division by zero.
    const auto flat = bench::nice_ticks(5, 5);
    REQUIRE(flat.size() >= 2);
    CHECK(flat.front() < 5);
    CHECK(flat.back() > 5);
    CHECK(bench::nice_ticks(0, 0).size() >= 2);
    CHECK(bench::nice_ticks(not_a_number, 1).empty());
    CHECK(bench::nice_ticks(0, inf).empty());
}

TEST_CASE("nice_ticks holds its promises over many random ranges")
{
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<double> exponent(-6, 9), unit(-1, 1);
    for (int i = 0; i < 2000; ++i) {
        const double scale = std::pow(10.0, exponent(rng));
        double lo = unit(rng) * scale, hi = unit(rng) * scale;
        if (lo > hi) std::swap(lo, hi);
        const auto t = bench::nice_ticks(lo, hi, 5);
        INFO("lo " << lo << " hi " << hi);
        REQUIRE(t.size() >= 2);
        CHECK(t.size() <= 12);
        CHECK(t.front() <= lo + std::abs(lo) * 1e-12);
        CHECK(t.back() >= hi - std::abs(hi) * 1e-12);
        const double step = t[1] - t[0];
        const double mantissa = step / std::pow(10.0, std::floor(std::log10(step)));
        CHECK((std::abs(mantissa - 1) < 1e-6 || std::abs(mantissa - 2) < 1e-6 || std::abs(mantissa - 5) < 1e-6 ||
               std::abs(mantissa - 10) < 1e-6));
        for (std::size_t k = 1; k < t.size(); ++k) CHECK(t[k] - t[k - 1] == doctest::Approx(step));
    }
}

TEST_CASE("log_ticks puts the ends at powers of ten and labels 2 and 5 only where there is room")
{
    auto labelled = [](const std::vector<bench::axis_tick>& t) {
        std::vector<double> v;
        for (const auto& x : t)
            if (x.labeled) v.push_back(x.value);
        return v;
    };
    // Two decades, room for 10 labels: 1 2 5 10 20 50 100, and minor ticks between.
    const auto two = bench::log_ticks(1, 100, 10);
    CHECK(two.front().value == 1);
    CHECK(two.back().value == 100);
    CHECK(two.size() == 1 + 8 + 1 + 8 + 1);
    const auto l2 = labelled(two);
    REQUIRE(l2.size() == 7);
    const double expected[] = {1, 2, 5, 10, 20, 50, 100};
    for (std::size_t i = 0; i < 7; ++i) CHECK(l2[i] == doctest::Approx(expected[i]));

    // Latencies of 0.05 to 700 ms: 0.01 to 1000, five decades, powers only.
    const auto five = bench::log_ticks(0.05, 700, 10);
    CHECK(five.front().value == doctest::Approx(0.01));
    CHECK(five.back().value == doctest::Approx(1000));
    const auto l5 = labelled(five);
    REQUIRE(l5.size() == 6);
    CHECK(l5[0] == doctest::Approx(0.01));
    CHECK(l5[5] == doctest::Approx(1000));

    // Twelve decades and room for 5 labels: every third power, no minor ticks.
    const auto wide = bench::log_ticks(1e-3, 1e9, 5);
    CHECK(wide.size() == 13);
    const auto lw = labelled(wide);
    REQUIRE(lw.size() == 5);
    CHECK(lw[1] == doctest::Approx(1));
    CHECK(lw[4] == doctest::Approx(1e9));

    // Exact powers stay the ends; one value makes one decade.
    CHECK(bench::log_ticks(10, 1000).front().value == doctest::Approx(10));
    CHECK(bench::log_ticks(10, 1000).back().value == doctest::Approx(1000));
    CHECK(bench::log_ticks(7, 7).front().value == doctest::Approx(1));
    CHECK(bench::log_ticks(7, 7).back().value == doctest::Approx(10));
    // One decade: every tick labelled.
    const auto one = bench::log_ticks(3, 8, 10);
    CHECK(one.size() == 10);
    CHECK(labelled(one).size() == 10);
    CHECK(bench::log_ticks(0, 10).empty());
    CHECK(bench::log_ticks(-1, 10).empty());
    CHECK(bench::log_ticks(1, not_a_number).empty());
}

TEST_CASE("si_format writes SI prefixes and as many decimals as the ticks need")
{
    CHECK(bench::si_format(0) == "0");
    CHECK(bench::si_format(1500) == "1.5k");
    CHECK(bench::si_format(3.4e6) == "3.4M");
    CHECK(bench::si_format(2.5e9) == "2.5G");
    CHECK(bench::si_format(-1200) == "-1.2k");
    CHECK(bench::si_format(250) == "250");
    CHECK(bench::si_format(0.05) == "0.05");
    CHECK(bench::si_format(999.96) == "1k");
    CHECK(bench::si_format(12345, 0, 4) == "12.35k");
    CHECK(bench::si_format(not_a_number) == "n/a");
    CHECK(bench::si_format(inf) == "n/a");
    CHECK(bench::si_format(1500, 500) == "1.5k");
    CHECK(bench::si_format(2000, 500) == "2k");
    CHECK(bench::si_format(0.1 * 3, 0.1) == "0.3");
    CHECK(bench::si_format(1001, 1) == "1.001k");
    CHECK(bench::si_format(-1e-17, 0.2) == "0");
}

TEST_CASE("a line plot maps data onto its plot area")
{
    bench::line_plot p{.title = "t", .x_label = "x", .y_label = "y"};
    p.series.push_back({.name = "s", .x = {0, 5, 10}, .y = {0, 50, 100}});
    const std::string svg = bench::svg_line_plot(p);
    check_finite(svg);
    const area a = plot_area(svg);
    CHECK(a.width > 500);
    CHECK(a.height > 200);
    const auto lines = tags(svg, "<polyline");
    REQUIRE(lines.size() == 1);
    const auto pts = polyline_points(lines[0]);
    REQUIRE(pts.size() == 3);
    // The axes are exactly [0, 10] and [0, 100] (nice already), y upwards.
    CHECK(pts[0].x == doctest::Approx(a.left).epsilon(1e-4));
    CHECK(pts[0].y == doctest::Approx(a.top + a.height).epsilon(1e-4));
    CHECK(pts[1].x == doctest::Approx(a.left + a.width / 2).epsilon(1e-4));
    CHECK(pts[1].y == doctest::Approx(a.top + a.height / 2).epsilon(1e-4));
    CHECK(pts[2].x == doctest::Approx(a.left + a.width).epsilon(1e-4));
    CHECK(pts[2].y == doctest::Approx(a.top).epsilon(1e-4));
    // Ticks labelled 0 .. 100 on y, with SI labels past 1000 on x when asked.
    CHECK(svg.find(">100</text>") != std::string::npos);
    CHECK(svg.find("viewBox=\"0 0 ") != std::string::npos);
    CHECK(svg.find("width=\"100%\"") != std::string::npos);
    CHECK(count(svg, "<svg") == 2); // the plot, and the clip of its data
    CHECK(count(svg, "</svg>") == 2);
}

TEST_CASE("the x axis ends with the data, the y axis at a tick")
{
    bench::line_plot p{.title = "over time", .x_label = "time (s)", .y_label = "items/s"};
    p.series.push_back({.name = "s", .x = {0, 18.5, 37}, .y = {0, 730, 365}});
    const std::string svg = bench::svg_line_plot(p);
    const area a = plot_area(svg);
    const auto pts = polyline_points(tags(svg, "<polyline")[0]);
    CHECK(pts[0].x == doctest::Approx(a.left).epsilon(1e-4));
    CHECK(pts[1].x == doctest::Approx(a.left + a.width / 2).epsilon(1e-4));
    CHECK(pts[2].x == doctest::Approx(a.left + a.width).epsilon(1e-4));
    // y from 0 to 800 (ticks 100 apart, 0 at the bottom): 730 is 73/80 of the way up.
    CHECK(pts[1].y == doctest::Approx(a.top + a.height * (1 - 730.0 / 800)).epsilon(1e-4));
    CHECK(svg.find(">800</text>") != std::string::npos);
    CHECK(svg.find(">30</text>") != std::string::npos);
    CHECK(svg.find(">40</text>") == std::string::npos); // past the data
}

TEST_CASE("a log x axis puts each decade the same width apart")
{
    bench::line_plot p{.title = "cdf", .x_label = "latency (ms)", .y_label = "fraction", .log_x = true};
    p.series.push_back({.name = "file", .x = {0.1, 1, 10, -1, 0}, .y = {0.1, 0.5, 1, 0.7, 0.8}});
    const std::string svg = bench::svg_line_plot(p);
    check_finite(svg);
    const area a = plot_area(svg);
    const auto lines = tags(svg, "<polyline");
    REQUIRE(lines.size() == 1); // the non-positive x end the line without a second segment
    const auto pts = polyline_points(lines[0]);
    REQUIRE(pts.size() == 3);
    CHECK(pts[0].x == doctest::Approx(a.left).epsilon(1e-4));
    CHECK(pts[1].x == doctest::Approx(a.left + a.width / 2).epsilon(1e-4));
    CHECK(pts[2].x == doctest::Approx(a.left + a.width).epsilon(1e-4));
    CHECK(svg.find(">0.1</text>") != std::string::npos);
    CHECK(svg.find(">10</text>") != std::string::npos);
    // The y axis of fractions starts at 0 by itself.
    CHECK(pts[1].y == doctest::Approx(a.top + a.height / 2).epsilon(1e-4));
}

TEST_CASE("dashed series, markers with tooltips and marks are drawn")
{
    bench::line_plot p{.title = "sweep", .x_label = "in flight", .y_label = "objects/s", .log_x = true};
    p.series.push_back({.name = "measured", .x = {1, 4, 16, 64}, .y = {50, 200, 700, 800}, .markers = true});
    p.series.push_back({.name = "Little's law bound", .x = {1, 4, 16, 64}, .y = {50, 200, 800, 3200}, .dashed = true});
    p.marks.push_back({16, "knee: 16"});
    p.y_min = 0;
    const std::string svg = bench::svg_line_plot(p);
    check_finite(svg);
    CHECK(count(svg, "stroke-dasharray=\"7 4\"") == 2); // the line and its legend swatch
    CHECK(count(svg, "<circle") == 4 + 1);               // the points and the legend's dot
    CHECK(svg.find("<title>measured: in flight = 16, objects/s = 700</title>") != std::string::npos);
    CHECK(svg.find(">knee: 16</text>") != std::string::npos);
    CHECK(svg.find(">Little&#39;s law bound</text>") != std::string::npos);
    // The mark's line stands where x = 16 is on the axis from 1 to 64 (2/3 of the way).
    const area a = plot_area(svg);
    const auto mark = svg.substr(svg.find("<g class=\"mark\">"));
    const auto line = tags(mark, "<line")[0];
    CHECK(attribute(line, "x1") == doctest::Approx(a.left + a.width * 2 / 3).epsilon(1e-4));
    CHECK(attribute(line, "y1") == doctest::Approx(a.top));
    CHECK(attribute(line, "y2") == doctest::Approx(a.top + a.height));
}

TEST_CASE("NaN and infinite points are gaps, never numbers in the SVG")
{
    bench::line_plot p{.title = "gaps"};
    p.series.push_back({.name = "a", .x = {0, 1, 2, 3, 4, 5, 6}, .y = {1, 2, not_a_number, 3, 4, inf, 5}});
    p.series.push_back({.name = "b", .x = {not_a_number, 1, 2}, .y = {1, -inf, 2}});
    p.marks.push_back({not_a_number, "lost"});
    const std::string svg = bench::svg_line_plot(p);
    check_finite(svg);
    CHECK(count(svg, "<polyline") == 2); // a: 0-1 and 3-4; 6 alone and b's 2 alone as dots
    CHECK(count(svg, "<circle") == 2);
    CHECK(svg.find("lost") == std::string::npos);
}

TEST_CASE("a plot without drawable points says no data")
{
    bench::line_plot none{.title = "nothing"};
    CHECK(bench::svg_line_plot(none).find(">no data</text>") != std::string::npos);

    bench::line_plot all_nan{.title = "NaN"};
    all_nan.series.push_back({.name = "s", .x = {not_a_number, 1}, .y = {1, not_a_number}});
    all_nan.series.push_back({.name = "short", .x = {1, 2}, .y = {}});
    const std::string svg = bench::svg_line_plot(all_nan);
    CHECK(svg.find(">no data</text>") != std::string::npos);
    check_finite(svg);

    bench::line_plot log_negative{.title = "log", .log_y = true};
    log_negative.series.push_back({.name = "s", .x = {1, 2}, .y = {0, -3}});
    CHECK(bench::svg_line_plot(log_negative).find(">no data</text>") != std::string::npos);
}

TEST_CASE("one point or equal values make a plot, not a division by zero")
{
    bench::line_plot one{.title = "one"};
    one.series.push_back({.name = "s", .x = {3}, .y = {7}});
    std::string svg = bench::svg_line_plot(one);
    check_finite(svg);
    REQUIRE(count(svg, "<circle") == 1);
    const area a1 = plot_area(svg);
    const auto dot = tags(svg, "<circle")[0];
    CHECK(attribute(dot, "cx") == doctest::Approx(a1.left + a1.width / 2).epsilon(1e-4)); // x widened around 3
    CHECK(attribute(dot, "cy") > a1.top + 10);                                            // room above 7
    CHECK(attribute(dot, "cy") < a1.top + a1.height);

    bench::line_plot flat{.title = "flat", .log_x = true, .log_y = true};
    flat.series.push_back({.name = "s", .x = {5, 5, 5}, .y = {2, 2, 2}});
    svg = bench::svg_line_plot(flat);
    check_finite(svg);
    CHECK(count(svg, "<polyline") == 1);

    bench::line_plot zeros{.title = "zeros"};
    zeros.series.push_back({.name = "s", .x = {0, 1}, .y = {0, 0}});
    svg = bench::svg_line_plot(zeros);
    check_finite(svg);
    const area a = plot_area(svg);
    const auto pts = polyline_points(tags(svg, "<polyline")[0]);
    CHECK(pts[0].y == doctest::Approx(a.top + a.height)); // 0 at the bottom of an axis from 0
}

TEST_CASE("y_min sets the bottom of the y axis")
{
    bench::line_plot p{.title = "from 50", .y_min = 50};
    p.series.push_back({.name = "s", .x = {0, 10}, .y = {60, 100}});
    const std::string svg = bench::svg_line_plot(p);
    const area a = plot_area(svg);
    const auto pts = polyline_points(tags(svg, "<polyline")[0]);
    CHECK(pts[0].y == doctest::Approx(a.top + a.height * (1 - 10.0 / 50)).epsilon(1e-4));
    CHECK(pts[1].y == doctest::Approx(a.top).epsilon(1e-4));

    // Negative data: no automatic 0.
    bench::line_plot negative{.title = "negative"};
    negative.series.push_back({.name = "s", .x = {0, 10}, .y = {-40, 40}});
    const std::string svg2 = bench::svg_line_plot(negative);
    const area a2 = plot_area(svg2);
    const auto pts2 = polyline_points(tags(svg2, "<polyline")[0]);
    CHECK(pts2[0].y == doctest::Approx(a2.top + a2.height).epsilon(1e-4));
    CHECK(pts2[1].y == doctest::Approx(a2.top).epsilon(1e-4));
}

TEST_CASE("plots escape every string they are given")
{
    bench::line_plot p{.title = "<b>t</b>", .x_label = "x & y", .y_label = "\"quoted\""};
    p.series.push_back({.name = "<script>alert(1)</script>", .x = {1, 2}, .y = {1, 2}, .markers = true});
    p.marks.push_back({1.5, "a<b"});
    const std::string svg = bench::svg_line_plot(p);
    CHECK(svg.find("<script>") == std::string::npos);
    CHECK(svg.find("<b>") == std::string::npos);
    CHECK(svg.find("&lt;script&gt;alert(1)&lt;/script&gt;") != std::string::npos);
    CHECK(svg.find("x &amp; y") != std::string::npos);
    CHECK(svg.find("&quot;quoted&quot;") != std::string::npos);
    CHECK(svg.find(">a&lt;b</text>") != std::string::npos);

    bench::share_plot s{.title = "a&b"};
    s.rows.push_back({.name = "<stage>", .busy = 1});
    const std::string bars = bench::svg_share_plot(s);
    CHECK(bars.find("<stage>") == std::string::npos);
    CHECK(bars.find("&lt;stage&gt;") != std::string::npos);
    CHECK(bars.find("a&amp;b") != std::string::npos);
}

TEST_CASE("share bars are as wide as their shares, scaled to 100%")
{
    bench::share_plot p{.title = "shares"};
    p.rows.push_back({.name = "decode", .busy = 0.5, .starved = 0.25, .blocked = 0.25, .bottleneck = true});
    p.rows.push_back({.name = "read", .busy = 0.1, .starved = 0.3, .blocked = 0.1}); // adds up to 0.5
    p.rows.push_back({.name = "idle"});
    const std::string svg = bench::svg_share_plot(p);
    check_finite(svg);
    auto widths = [&](const std::string& kind) {
        std::vector<double> v;
        for (const auto& t : tags(svg, "<rect x"))
            if (t.find("class=\"" + kind + "\"") != std::string::npos) v.push_back(attribute(t, "width"));
        return v;
    };
    const auto busy = widths("busy"), starved = widths("starved"), blocked = widths("blocked");
    REQUIRE(busy.size() == 2);
    REQUIRE(starved.size() == 2);
    REQUIRE(blocked.size() == 2);
    const double full = busy[0] + starved[0] + blocked[0];
    CHECK(full > 300);
    CHECK(busy[0] == doctest::Approx(full / 2).epsilon(1e-3));
    CHECK(starved[0] == doctest::Approx(full / 4).epsilon(1e-3));
    CHECK(blocked[0] == doctest::Approx(full / 4).epsilon(1e-3));
    CHECK(busy[1] + starved[1] + blocked[1] == doctest::Approx(full).epsilon(1e-3));
    CHECK(busy[1] == doctest::Approx(full * 0.2).epsilon(1e-3));
    CHECK(starved[1] == doctest::Approx(full * 0.6).epsilon(1e-3));
    CHECK(svg.find("bottleneck</text>") != std::string::npos);
    CHECK(count(svg, "bottleneck</text>") == 1);
    CHECK(svg.find("<title>read: starved 60.0%</title>") != std::string::npos);
    CHECK(svg.find(">no data</text>") != std::string::npos); // the idle row

    bench::share_plot empty{.title = "empty"};
    CHECK(bench::svg_share_plot(empty).find(">no data</text>") != std::string::npos);
}

TEST_CASE("machine_facts finds the CPU, cores, memory, kernel and the storage of a path")
{
    const auto facts = bench::machine_facts({"/", "/proc/self", "/no/such/dir/yet"});
    std::map<std::string, std::string> f(facts.begin(), facts.end());
    for (const auto& [k, v] : facts) {
        INFO(k << ": " << v);
        CHECK(!v.empty());
    }
    if (slurp("/proc/cpuinfo").find("model name") != std::string::npos) CHECK(!f["CPU"].empty());
    REQUIRE(f.count("cores") == 1);
    CHECK(std::stol(f["cores"]) == sysconf(_SC_NPROCESSORS_ONLN));
    CHECK(f["memory"].find("iB") != std::string::npos);
    CHECK(f["kernel"].rfind("Linux ", 0) == 0);
    REQUIRE(f.count("storage /") == 1);
    CHECK(f["storage /"].find(" on / (") != std::string::npos);
    // The longest mount point wins: /proc/self is on procfs, not on the root file system.
    CHECK(f["storage /proc/self"].rfind("proc on /proc (", 0) == 0);
    // A path not made yet is on the mount of its nearest existing folder.
    CHECK(f["storage /no/such/dir/yet"] == f["storage /"]);
    CHECK(bench::machine_facts().size() == facts.size() - 3);
}

TEST_CASE("html_report writes a page with every block, escaped, creating the folders")
{
    bench::html_report r("run <1> & co");
    r.add_heading("Throughput");
    r.add_paragraph("items/s per stage <over time>");
    bench::line_plot lp{.title = "per stage"};
    lp.series.push_back({.name = "decode", .x = {0, 1}, .y = {1, 2}});
    r.add_plot("throughput", lp);
    r.add_plot("shares", bench::share_plot{.title = "shares", .rows = {{.name = "decode", .busy = 1}}});
    r.add_table("results", {"stage", "items/s"}, {{"decode", "2215"}, {"<x>"}});
    r.add_facts("machine", {{"CPU", "Some <CPU>"}});
    r.add_code("config", "{\"a\": \"</pre>\"}");

    const std::string page = r.str();
    CHECK(page.rfind("<!DOCTYPE html>", 0) == 0);
    CHECK(page.find("<title>run &lt;1&gt; &amp; co</title>") != std::string::npos);
    for (const char* id : {"throughput", "shares", "results", "machine", "config"})
        CHECK(page.find(std::string("id=\"") + id + "\"") != std::string::npos);
    CHECK(page.find("<figure id=\"throughput\">") != std::string::npos);
    CHECK(page.find("<figcaption>per stage</figcaption>") != std::string::npos);
    CHECK(page.find("<td class=\"n\">2215</td>") != std::string::npos);
    CHECK(page.find("<td>&lt;x&gt;</td><td></td>") != std::string::npos); // padded to the header
    CHECK(page.find("<th scope=\"row\">CPU</th><td>Some &lt;CPU&gt;</td>") != std::string::npos);
    CHECK(page.find("&lt;/pre&gt;") != std::string::npos);
    CHECK(page.find("<script") == std::string::npos);
    CHECK(count(page, "<table") == count(page, "</table>"));

    const fs::path dir = fs::temp_directory_path() / ("conveyor-report-test-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    const fs::path file = dir / "a" / "b" / "report.html";
    r.write(file);
    CHECK(slurp(file) == page);
    fs::remove_all(dir);
}

TEST_CASE("html_report::write names the path and the reason when it cannot write")
{
    const fs::path dir = fs::temp_directory_path() / ("conveyor-report-test-fail-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    { std::ofstream(dir / "file") << "x"; }
    bench::html_report r("t");
    // A folder where a file is.
    try {
        r.write(dir / "file" / "report.html");
        FAIL("write succeeded below a file");
    } catch (const std::runtime_error& e) {
        const std::string what = e.what();
        CHECK(what.find((dir / "file").string()) != std::string::npos);
        CHECK(what.find("ot a directory") != std::string::npos);
    }
    // A file where a folder is.
    try {
        r.write(dir);
        FAIL("write succeeded onto a folder");
    } catch (const std::runtime_error& e) {
        const std::string what = e.what();
        CHECK(what.find(dir.string()) != std::string::npos);
        CHECK(what.find("s a directory") != std::string::npos);
    }
    fs::remove_all(dir);
}

TEST_CASE("random and extreme data never crash a plot nor put NaN in it")
{
    std::mt19937_64 rng(11);
    const double specials[] = {0, -0.0, 1e-310, -1e-310, 1e300, -1e300, 1.7e308, -1.7e308, not_a_number, inf, -inf, 1, -1};
    std::uniform_int_distribution<int> pick(0, 12), length(0, 6), coin(0, 1);
    std::uniform_real_distribution<double> exponent(-12, 12);
    auto value = [&] { return coin(rng) ? specials[pick(rng)] : (coin(rng) ? 1 : -1) * std::pow(10.0, exponent(rng)); };
    for (int i = 0; i < 1500; ++i) {
        bench::line_plot p{.title = "fuzz", .log_x = coin(rng) == 1, .log_y = coin(rng) == 1};
        for (int s = length(rng) / 2; s >= 0; --s) {
            bench::plot_series series{.name = "s", .dashed = coin(rng) == 1, .markers = coin(rng) == 1};
            for (int k = length(rng); k > 0; --k) {
                series.x.push_back(value());
                series.y.push_back(value());
            }
            p.series.push_back(std::move(series));
        }
        if (coin(rng)) p.marks.push_back({value(), "m"});
        if (coin(rng)) p.y_min = value();
        const std::string svg = bench::svg_line_plot(p);
        INFO(svg);
        check_finite(svg);
        CHECK(count(svg, "<svg") == count(svg, "</svg>"));

        bench::share_plot shares{.title = "fuzz"};
        shares.rows.push_back({.name = "r", .busy = value(), .starved = value(), .blocked = value()});
        const std::string bars = bench::svg_share_plot(shares);
        check_finite(bars);
    }
}
