// bench/support/report.hpp — a self-contained HTML report with plain SVG plots.
//
// Implemented one job per file: text.cpp (escaping, SI numbers), ticks.cpp (axis ticks),
// svg.cpp (drawing primitives shared by the plots), line_plot.cpp, share_plot.cpp,
// machine_facts.cpp and html_report.cpp (the page).
#ifndef CONVEYOR_BENCH_SUPPORT_REPORT_HPP
#define CONVEYOR_BENCH_SUPPORT_REPORT_HPP

#include <cmath>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace conveyor::bench {

/** One line of a line plot: the points (x[i], y[i]) joined in order.

    A point with a NaN or infinite coordinate is skipped and breaks the line (a gap); so is
    a non-positive coordinate on a log axis. Points past the shorter of `x` and `y` are
    ignored. */
struct plot_series {
    std::string name;
    std::vector<double> x, y;
    bool dashed = false;  ///< drawn dashed, e.g. a bound
    bool markers = false; ///< a dot at each point, with a tooltip of its values (sweeps)
};

/// A vertical line across a plot at `x`, labelled (e.g. "knee: 16").
struct plot_mark {
    double x;
    std::string label;
};

/** A line plot: a title, axis labels, one or more series, optional log scales and marks.

    Ticks are "nice" values: 1, 2 or 5 times a power of ten apart on linear axes, powers of
    ten on log axes (with 2 and 5 labelled too where there is room). The y axis ends at
    ticks; the x axis ends where the data (and marks) do, unless they span less than a
    decade on a log axis. Tick labels are SI-formatted (1.2k, 3.4M); pass latencies in
    milliseconds and say so in the label. */
struct line_plot {
    std::string title, x_label, y_label;
    std::vector<plot_series> series;
    bool log_x = false, log_y = false; ///< log scales (non-positive values skipped)
    std::vector<plot_mark> marks;
    /// The bottom of the y axis. NaN: automatic (0 for linear plots whose data are all
    /// >= 0, otherwise the smallest value rounded down to a tick).
    double y_min = NAN;
};

/** One stage's shares of its active time: busy (working), starved (waiting for input),
    blocked (waiting for room downstream). Fractions; each row is drawn as a bar of 100%
    split in proportion to the three (so shares that do not add up to 1 are scaled). */
struct share_row {
    std::string name;
    double busy = 0, starved = 0, blocked = 0;
    bool bottleneck = false; ///< marked as the pipeline's bottleneck
};

/// Stacked horizontal bars, one per stage.
struct share_plot {
    std::string title;
    std::vector<share_row> rows;
};

/** `text` made safe for HTML and XML text and attribute values: `&` `<` `>` `"` `'` become
    entities; control characters that XML forbids and bytes that are not valid UTF-8 become
    U+FFFD, so that any string may go into an SVG. */
std::string html_escape(std::string_view text);

/** "Nice" tick values for a linear axis covering [lo, hi]: about `target` steps of 1, 2 or
    5 times a power of ten, the first tick at or below `lo`, the last at or above `hi`
    (lo == hi is widened around the value). Empty when `lo` or `hi` is not finite. */
std::vector<double> nice_ticks(double lo, double hi, int target = 5);

/// A tick of a log axis: its value, and whether it carries a label.
struct axis_tick {
    double value;
    bool labeled;
};

/** Ticks for a log axis covering [lo, hi] (both > 0): every power of ten from the one at or
    below `lo` to the one above (or at) `hi`, the first and last being the axis' ends;
    minor ticks at 2..9 times each power when the axis spans at most 8 decades. At most
    about `max_labels` ticks are labelled: each power of ten, plus 2 and 5 times each when
    they fit (every tick of an axis of one decade, given room for 10), or every second
    (third...) power when even the powers do not fit. Empty when `lo` or `hi` is not
    finite and positive. */
std::vector<axis_tick> log_ticks(double lo, double hi, int max_labels = 10);

/** `value` with an SI prefix: 1.5k, 3.4M, 12G; below 1000 plain (0.05, 250). With
    `resolution` > 0 (a tick step), enough decimals to tell values that far apart apart;
    otherwise up to `digits` significant digits. Never "nan" or "inf": those print as "n/a". */
std::string si_format(double value, double resolution = 0, int digits = 3);

/** A line plot as one standalone `<svg>` element (width 100%, sized by its viewBox), with
    its title, axes, grid, legend and marks. A plot without a single drawable point says
    "no data". */
std::string svg_line_plot(const line_plot& p);

/** Stacked horizontal bars (busy, starved, blocked), one per row, as one `<svg>` element;
    the bottleneck's name is bold and marked. No rows: "no data". */
std::string svg_share_plot(const share_plot& p);

/** Facts about this machine, in this order, each left out when it cannot be found (never
    made up): ("CPU", model name), ("cores", number online), ("usable cores", CPUs this
    process may run on, only when fewer than online), ("memory", e.g. "23.4 GiB"),
    ("kernel", `uname -sr`), ("host", node name), and for each path given:
    ("storage <path>", "<fstype> on <mount point> (<device or source>)") from
    /proc/self/mountinfo, the mount with the longest mount point containing the path
    (resolved first: symbolic links followed). */
std::vector<std::pair<std::string, std::string>> machine_facts(const std::vector<std::string>& paths = {});

/** A self-contained HTML page: inline CSS and SVG, no scripts, nothing fetched from the
    network, so it opens from a results folder, an email or a CI artifact as it is.

    Blocks appear in the order they are added, after an `<h1>` of the title. Every string
    is escaped.

    @code
    html_report r("conveyor-bench run");
    r.add_plot("throughput", plot);
    r.add_facts("machine", machine_facts({"/data"}));
    r.write(out_dir / "report.html");
    @endcode

    @par Thread Safety
    Distinct objects: safe. Shared objects: unsafe.
*/
class html_report {
public:
    explicit html_report(std::string title);

    /// An `<h2>` section heading.
    void add_heading(std::string_view text);

    /// A `<p>` of text.
    void add_paragraph(std::string_view text);

    /// `<figure id="id">`: the plot's SVG and a `<figcaption>` of its title.
    void add_plot(std::string_view id, const line_plot& p);
    void add_plot(std::string_view id, const share_plot& p);

    /// `<table id="id">` with a header row; rows shorter than the header are padded.
    void add_table(std::string_view id, const std::vector<std::string>& header,
                                 const std::vector<std::vector<std::string>>& rows);

    /// A two-column `<table id="id">`: the fact's name, its value.
    void add_facts(std::string_view id, const std::vector<std::pair<std::string, std::string>>& facts);

    /// `<pre id="id">` of `text` as it is (e.g. the run's configuration as JSON).
    void add_code(std::string_view id, std::string_view text);

    /// The whole document.
    std::string str() const;

    /** Writes the document to `file`, creating its parent folders. Throws
        `std::runtime_error` naming the path and the system's reason when it cannot. */
    void write(const std::filesystem::path& file) const;

private:
    std::string title_;
    std::string body_;
};

} // namespace conveyor::bench

#endif
