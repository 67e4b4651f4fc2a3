// conveyor/core/detail/ascii.hpp — ASCII case, the one way conveyor writes it: header
// names for the signer, URL schemes and INI keys for the S3 configuration, file name
// extensions for directory walks. Bytes outside A-Z are left as they are (UTF-8 included).
#ifndef CONVEYOR_CORE_DETAIL_ASCII_HPP
#define CONVEYOR_CORE_DETAIL_ASCII_HPP

#include <algorithm>
#include <cstddef>
#include <string_view>

namespace conveyor::detail {

constexpr char ascii_lower(char c) noexcept { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

/// Equal but for the case of ASCII letters.
constexpr bool iequals(std::string_view a, std::string_view b) noexcept
{
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (ascii_lower(a[i]) != ascii_lower(b[i])) return false;
    return true;
}

/// Case-insensitive (ASCII) ordering of header names: the order of their lower-case forms.
constexpr bool iless(std::string_view a, std::string_view b) noexcept
{
    const std::size_t n = std::min(a.size(), b.size());
    for (std::size_t i = 0; i < n; ++i) {
        const auto x = static_cast<unsigned char>(ascii_lower(a[i]));
        const auto y = static_cast<unsigned char>(ascii_lower(b[i]));
        if (x != y) return x < y;
    }
    return a.size() < b.size();
}

} // namespace conveyor::detail

#endif
