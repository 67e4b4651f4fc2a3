// conveyor/core/detail/describe_json.hpp — option structs described with Boost.Describe,
// read from and written to JSON: the one mapping under the Python keywords and the bench's
// configuration keys, so that a key is the C++ field's name by construction.
#ifndef CONVEYOR_CORE_DETAIL_DESCRIBE_JSON_HPP
#define CONVEYOR_CORE_DETAIL_DESCRIBE_JSON_HPP

#include <boost/describe/enum.hpp>
#include <boost/describe/enum_from_string.hpp>
#include <boost/describe/enum_to_string.hpp>
#include <boost/describe/enumerators.hpp>
#include <boost/describe/members.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <boost/mp11/algorithm.hpp>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace conveyor::detail {

/** A JSON value that does not fit the described field it is for: an unknown key (the
    message names it and the valid keys), a value of the wrong type or out of the field's
    range (the message names the key path, what was expected and what was given).
    `path()` is the dotted key path ("decode.size.width"). */
class option_error : public std::invalid_argument {
public:
    option_error(std::string path, const std::string& message, bool unknown_key = false)
        : std::invalid_argument(message), path_(std::move(path)), unknown_key_(unknown_key)
    {
    }
    const std::string& path() const noexcept { return path_; }
    /// The key is no field (rather than a field given a bad value).
    bool unknown_key() const noexcept { return unknown_key_; }

private:
    std::string path_;
    bool unknown_key_ = false;
};

/// A struct whose public data members are described (`BOOST_DESCRIBE_STRUCT`).
template <class T>
concept described_struct = std::is_class_v<T> && boost::describe::has_describe_members<T>::value;

/// An enum whose enumerators are described (`BOOST_DESCRIBE_ENUM`).
template <class T>
concept described_enum = std::is_enum_v<T> && boost::describe::has_describe_enumerators<T>::value;

template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};
template <class T>
struct is_vector : std::false_type {};
template <class T, class A>
struct is_vector<std::vector<T, A>> : std::true_type {};
template <class T>
struct is_std_array : std::false_type {};
template <class T, std::size_t N>
struct is_std_array<std::array<T, N>> : std::true_type {};
template <class T>
struct is_duration : std::false_type {};
template <class R, class P>
struct is_duration<std::chrono::duration<R, P>> : std::true_type {};

/// The described members' names of `T`, in declaration order.
template <described_struct T>
std::vector<std::string> option_names()
{
    std::vector<std::string> out;
    using members = boost::describe::describe_members<T, boost::describe::mod_public>;
    boost::mp11::mp_for_each<members>([&](auto m) { out.emplace_back(m.name); });
    return out;
}

/// The described enumerators' names of `E`, in declaration order.
template <described_enum E>
std::vector<std::string> enumerator_names()
{
    std::vector<std::string> out;
    boost::mp11::mp_for_each<boost::describe::describe_enumerators<E>>([&](auto e) { out.emplace_back(e.name); });
    return out;
}

inline std::string join_names(const std::vector<std::string>& names)
{
    std::string s;
    for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
    return s;
}

inline std::string option_path(std::string_view parent, std::string_view key)
{
    return parent.empty() ? std::string(key) : std::string(parent) + "." + std::string(key);
}

/// How a value is shown in an error: its JSON, shortened.
inline std::string shown(const boost::json::value& v)
{
    std::string s = boost::json::serialize(v);
    if (s.size() > 60) s = s.substr(0, 57) + "...";
    return s;
}

[[noreturn]] inline void wrong_option(std::string_view path, std::string_view expected, const boost::json::value& v)
{
    throw option_error(std::string(path), std::string(path) + ": expected " + std::string(expected) + ", got " + shown(v));
}

/// What a field of type `T` takes, in words ("an integer in [0, 4294967295]").
template <class T>
std::string expected_of()
{
    if constexpr (std::is_same_v<T, bool>) return "a boolean";
    else if constexpr (std::is_integral_v<T>)
        return "an integer in [" + std::to_string(std::numeric_limits<T>::min()) + ", " + std::to_string(std::numeric_limits<T>::max()) + "]";
    else if constexpr (std::is_floating_point_v<T>) return "a number";
    else if constexpr (std::is_same_v<T, std::string>) return "a string";
    else if constexpr (described_enum<T>) return "one of " + join_names(enumerator_names<T>());
    else if constexpr (is_duration<T>::value) return "a number of seconds";
    else if constexpr (is_optional<T>::value) return expected_of<typename T::value_type>() + " or null";
    else if constexpr (is_vector<T>::value) return "a list";
    else if constexpr (is_std_array<T>::value) return "a list of " + std::to_string(std::tuple_size_v<T>);
    else return "an object";
}

template <class T>
void read_option(const boost::json::value& v, T& out, std::string_view path);

/** Reads the keys of `v` (an object) into the described members of `out`; members whose
    key is absent keep their value. An unknown key throws `option_error` naming it and the
    valid keys. */
template <described_struct T>
void read_options(const boost::json::value& v, T& out, std::string_view path = {})
{
    if (!v.is_object()) wrong_option(path.empty() ? std::string_view("options") : path, "an object", v);
    using members = boost::describe::describe_members<T, boost::describe::mod_public>;
    for (const auto& kv : v.as_object()) {
        bool found = false;
        boost::mp11::mp_for_each<members>([&](auto m) {
            if (found || kv.key() != m.name) return;
            found = true;
            read_option(kv.value(), out.*m.pointer, option_path(path, m.name));
        });
        if (!found) {
            const std::string where = path.empty() ? std::string() : " in \"" + std::string(path) + "\"";
            throw option_error(option_path(path, kv.key()), "unknown key \"" + std::string(kv.key()) + "\"" + where +
                                                                "; valid keys: " + join_names(option_names<T>()), true);
        }
    }
}

/// A `T` from its defaults and the keys of `v` (see `read_options`).
template <described_struct T>
T options_from_json(const boost::json::value& v, std::string_view path = {})
{
    T out{};
    read_options(v, out, path);
    return out;
}

template <class T>
void read_option(const boost::json::value& v, T& out, std::string_view path)
{
    if constexpr (std::is_same_v<T, bool>) {
        if (!v.is_bool()) wrong_option(path, expected_of<T>(), v);
        out = v.as_bool();
    } else if constexpr (std::is_integral_v<T>) {
        if (v.is_int64()) {
            if (!std::in_range<T>(v.as_int64())) wrong_option(path, expected_of<T>(), v);
            out = static_cast<T>(v.as_int64());
        } else if (v.is_uint64()) {
            if (!std::in_range<T>(v.as_uint64())) wrong_option(path, expected_of<T>(), v);
            out = static_cast<T>(v.as_uint64());
        } else if (v.is_double() && v.as_double() == std::floor(v.as_double()) && std::abs(v.as_double()) < 9.0e15) {
            const auto i = static_cast<std::int64_t>(v.as_double());
            if (!std::in_range<T>(i)) wrong_option(path, expected_of<T>(), v);
            out = static_cast<T>(i);
        } else {
            wrong_option(path, expected_of<T>(), v);
        }
    } else if constexpr (std::is_floating_point_v<T>) {
        if (!v.is_number()) wrong_option(path, expected_of<T>(), v);
        out = static_cast<T>(v.to_number<double>());
    } else if constexpr (std::is_same_v<T, std::string>) {
        if (!v.is_string()) wrong_option(path, expected_of<T>(), v);
        out = std::string(v.as_string());
    } else if constexpr (described_enum<T>) {
        if (!v.is_string() || !boost::describe::enum_from_string(v.as_string().c_str(), out)) wrong_option(path, expected_of<T>(), v);
    } else if constexpr (is_duration<T>::value) {
        if (!v.is_number() || !std::isfinite(v.to_number<double>())) wrong_option(path, expected_of<T>(), v);
        out = std::chrono::duration_cast<T>(std::chrono::duration<double>(v.to_number<double>()));
    } else if constexpr (is_optional<T>::value) {
        if (v.is_null()) {
            out.reset();
        } else {
            typename T::value_type x{};
            if constexpr (described_struct<typename T::value_type>) {
                read_option(v, x, path);
            } else {
                try {
                    read_option(v, x, path);
                } catch (const option_error&) {
                    wrong_option(path, expected_of<T>(), v); // say that null is taken too
                }
            }
            out = std::move(x);
        }
    } else if constexpr (is_vector<T>::value) {
        if (!v.is_array()) wrong_option(path, expected_of<T>(), v);
        T got;
        const auto& a = v.as_array();
        got.resize(a.size());
        for (std::size_t i = 0; i < a.size(); ++i) read_option(a[i], got[i], std::string(path) + "[" + std::to_string(i) + "]");
        out = std::move(got);
    } else if constexpr (is_std_array<T>::value) {
        if (!v.is_array() || v.as_array().size() != out.size()) wrong_option(path, expected_of<T>(), v);
        T got{};
        for (std::size_t i = 0; i < got.size(); ++i) read_option(v.as_array()[i], got[i], std::string(path) + "[" + std::to_string(i) + "]");
        out = got;
    } else {
        static_assert(described_struct<T>, "an option's type must be bool, an integer, a float, std::string, a described enum, "
                                           "a duration, an optional, a vector, an array or a described struct");
        read_options(v, out, path);
    }
}

/// `x` as JSON, as `read_option` reads it back.
template <class T>
boost::json::value option_to_json(const T& x)
{
    if constexpr (std::is_same_v<T, bool> || std::is_integral_v<T> || std::is_floating_point_v<T>) return boost::json::value(x);
    else if constexpr (std::is_same_v<T, std::string>) return boost::json::value(x);
    else if constexpr (described_enum<T>) {
        const char* name = boost::describe::enum_to_string(x, nullptr);
        return name ? boost::json::value(name) : boost::json::value(static_cast<std::int64_t>(x));
    } else if constexpr (is_duration<T>::value) return boost::json::value(std::chrono::duration<double>(x).count());
    else if constexpr (is_optional<T>::value) return x ? option_to_json(*x) : boost::json::value(nullptr);
    else if constexpr (is_vector<T>::value || is_std_array<T>::value) {
        boost::json::array a;
        for (const auto& e : x) a.push_back(option_to_json(e));
        return a;
    } else {
        static_assert(described_struct<T>, "see read_option");
        boost::json::object o;
        using members = boost::describe::describe_members<T, boost::describe::mod_public>;
        boost::mp11::mp_for_each<members>([&](auto m) { o[m.name] = option_to_json(x.*m.pointer); });
        return o;
    }
}

} // namespace conveyor::detail

#endif
