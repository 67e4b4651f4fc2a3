// conveyor/image/dtype.hpp — the element types of tensors, and the one table that maps each
// to every other type system (its size, its name, DLPack's and the CUDA stage's type code
// and bits, the C++ type that holds it).
#ifndef CONVEYOR_IMAGE_DTYPE_HPP
#define CONVEYOR_IMAGE_DTYPE_HPP

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace conveyor::image {

/// The element type of a tensor.
enum class dtype {
    uint8,   ///< unsigned 8-bit integer (pixels as decoded)
    int64,   ///< signed 64-bit integer (labels)
    float16, ///< IEEE 754 binary16 (half)
    float32, ///< IEEE 754 binary32
};

/// The kind of number an element holds. The values are DLPack's type codes (kDLInt,
/// kDLUInt, kDLFloat), which `cuda::element_type` uses too, so a kind converts to either
/// as it is (dlpack.ipp checks the codes against DLPack's own).
enum class number_kind : std::uint8_t {
    signed_integer = 0,
    unsigned_integer = 1,
    floating = 2,
};

/// What every other type system needs to know of a `dtype`.
struct dtype_traits {
    image::dtype type;
    std::string_view name; ///< as NumPy and PyTorch spell it
    number_kind kind;
    std::uint8_t bits;
    /// Bytes per element.
    constexpr std::size_t size() const noexcept { return bits / 8u; }
};

/// The mapping, one row per `dtype` in the enum's order. Every conversion of a `dtype`
/// (to bytes, names, DLPack, CUDA element types) reads this table and nothing else.
inline constexpr std::array<dtype_traits, 4> dtype_table{{
    {dtype::uint8, "uint8", number_kind::unsigned_integer, 8},
    {dtype::int64, "int64", number_kind::signed_integer, 64},
    {dtype::float16, "float16", number_kind::floating, 16},
    {dtype::float32, "float32", number_kind::floating, 32},
}};

/// The row of `t` in `dtype_table`.
constexpr const dtype_traits& traits_of(dtype t) noexcept
{
    return dtype_table[static_cast<std::size_t>(t)];
}

/// Bytes per element of `t`.
constexpr std::size_t size_of(dtype t) noexcept
{
    return traits_of(t).size();
}

/// The name of `t` ("uint8", "int64", "float16", "float32").
constexpr std::string_view name_of(dtype t) noexcept
{
    return traits_of(t).name;
}

/// The `dtype` called `name` (as `name_of` spells it), or nothing.
constexpr std::optional<dtype> dtype_named(std::string_view name) noexcept
{
    for (const auto& row : dtype_table)
        if (row.name == name) return row.type;
    return std::nullopt;
}

/// The C++ type that holds one element of `T` in host memory. C++20 has no half type, so a
/// float16 element is held as its bits.
template <dtype T>
struct host_element;
template <>
struct host_element<dtype::uint8> {
    using type = std::uint8_t;
};
template <>
struct host_element<dtype::int64> {
    using type = std::int64_t;
};
template <>
struct host_element<dtype::float16> {
    using type = std::uint16_t;
};
template <>
struct host_element<dtype::float32> {
    using type = float;
};
template <dtype T>
using host_element_t = typename host_element<T>::type;

namespace detail {
constexpr bool dtype_table_is_consistent() noexcept
{
    for (std::size_t i = 0; i < dtype_table.size(); ++i)
        if (static_cast<std::size_t>(dtype_table[i].type) != i || dtype_table[i].bits % 8 != 0) return false;
    return sizeof(host_element_t<dtype::uint8>) == size_of(dtype::uint8) &&
           sizeof(host_element_t<dtype::int64>) == size_of(dtype::int64) &&
           sizeof(host_element_t<dtype::float16>) == size_of(dtype::float16) &&
           sizeof(host_element_t<dtype::float32>) == size_of(dtype::float32);
}
static_assert(dtype_table_is_consistent(), "dtype_table: one row per dtype, in the enum's order, whole bytes");
} // namespace detail

} // namespace conveyor::image

#endif
