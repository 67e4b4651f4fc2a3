// bench/support/text.cpp — text for HTML and SVG: escaping, and numbers with SI prefixes
// (see report.hpp).
#include "support/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>

namespace conveyor::bench {

namespace {

/// A UTF-8 sequence's length from its first byte, 0 when it cannot start one.
inline int utf8_length(unsigned char c)
{
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) return 2;
    if ((c & 0xF0) == 0xE0) return 3;
    if ((c & 0xF8) == 0xF0) return 4;
    return 0;
}

} // namespace

std::string html_escape(std::string_view text)
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
        const int len = utf8_length(c);
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

std::string si_format(double value, double resolution, int digits)
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

} // namespace conveyor::bench
