// bench/support/ticks.cpp — where the axes' ticks go, linear and logarithmic (see report.hpp).
#include "support/report.hpp"

#include <algorithm>
#include <cmath>

namespace conveyor::bench {

std::vector<double> nice_ticks(double lo, double hi, int target)
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

std::vector<axis_tick> log_ticks(double lo, double hi, int max_labels)
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

} // namespace conveyor::bench
