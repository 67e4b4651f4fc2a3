// bench/support/json_line.cpp — JSON lines (see json_line.hpp).
#include "support/json_line.hpp"

#include <cmath>
#include <system_error>

namespace conveyor::bench {

json_line& json_line::add(std::string_view key, std::string_view value)
{
    field(key);
    quote(value);
    return *this;
}

json_line& json_line::add(std::string_view key, const char* value)
{
    return add(key, std::string_view(value));
}

json_line& json_line::add(std::string_view key, const std::string& value)
{
    return add(key, std::string_view(value));
}

json_line& json_line::add(std::string_view key, bool value)
{
    field(key);
    s_ += value ? "true" : "false";
    return *this;
}

json_line& json_line::add(std::string_view key, double value, int precision)
{
    field(key);
    if (!std::isfinite(value)) {
        s_ += "null";
        return *this;
    }
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::general, precision);
    if (r.ec != std::errc{}) {
        s_ += "null";
        return *this;
    }
    s_.append(buf, r.ptr);
    return *this;
}

json_line& json_line::add(std::string_view key, float value, int precision)
{
    return add(key, static_cast<double>(value), precision);
}

std::string json_line::str() const
{
    return s_.empty() ? std::string("{}") : s_ + "}";
}

void json_line::print(std::FILE* out) const
{
    const std::string line = str() + "\n";
    std::fwrite(line.data(), 1, line.size(), out);
    std::fflush(out);
}

void json_line::field(std::string_view key)
{
    s_ += s_.empty() ? "{" : ",";
    quote(key);
    s_ += ':';
}

void json_line::quote(std::string_view v)
{
    s_ += '"';
    for (const char c : v) {
        switch (c) {
        case '"': s_ += "\\\""; break;
        case '\\': s_ += "\\\\"; break;
        case '\n': s_ += "\\n"; break;
        case '\r': s_ += "\\r"; break;
        case '\t': s_ += "\\t"; break;
        case '\b': s_ += "\\b"; break;
        case '\f': s_ += "\\f"; break;
        default:
            if (static_cast<unsigned char>(c) < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
                s_ += buf;
            } else {
                s_ += c;
            }
        }
    }
    s_ += '"';
}

} // namespace conveyor::bench
