// tests/support/described.hpp — a check that every described field of an option struct
// round-trips through JSON (conveyor/core/detail/describe_json.hpp).
#ifndef CONVEYOR_TESTS_SUPPORT_DESCRIBED_HPP
#define CONVEYOR_TESTS_SUPPORT_DESCRIBED_HPP

#include <conveyor/core/detail/describe_json.hpp>

#include <boost/json/serialize.hpp>

#include <doctest/doctest.h>

#include <limits>
#include <string>

namespace conveyor::test {

/// `x` with every described leaf changed: a flipped bool, another number, a longer string,
/// the next enumerator, an optional set or reset, one more element.
template <class T>
T changed(const T& x)
{
    namespace d = conveyor::detail;
    if constexpr (std::is_same_v<T, bool>) return !x;
    else if constexpr (std::is_integral_v<T>) return x == std::numeric_limits<T>::max() ? T(x - 1) : T(x + 1);
    else if constexpr (std::is_floating_point_v<T>) return x + T(0.5);
    else if constexpr (std::is_same_v<T, std::string>) return x + "~";
    else if constexpr (d::described_enum<T>) {
        const auto names = d::enumerator_names<T>();
        const auto now = conveyor::detail::option_to_json(x);
        for (std::size_t i = 0; i < names.size(); ++i)
            if (now.is_string() && names[i] == now.as_string()) {
                T out{};
                boost::describe::enum_from_string(names[(i + 1) % names.size()].c_str(), out);
                return out;
            }
        return x;
    } else if constexpr (d::is_duration<T>::value) return x + T(1);
    else if constexpr (d::is_optional<T>::value) return x ? T() : T(changed(typename T::value_type{}));
    else if constexpr (d::is_vector<T>::value) {
        T out = x;
        out.push_back(changed(typename T::value_type{}));
        return out;
    } else if constexpr (d::is_std_array<T>::value) {
        T out = x;
        for (auto& e : out) e = changed(e);
        return out;
    } else {
        T out = x;
        boost::mp11::mp_for_each<boost::describe::describe_members<T, boost::describe::mod_public>>(
            [&](auto m) { out.*m.pointer = changed(x.*m.pointer); });
        return out;
    }
}

/** Every described field of `T` is written and read back: a `T` with every field changed
    from its default gives JSON that reads back to the same JSON, and differs from the
    default's at every key. */
template <class T>
void check_round_trip()
{
    namespace d = conveyor::detail;
    const T defaults{};
    const T x = changed(defaults);
    const auto written = d::option_to_json(x);
    const auto back = d::option_to_json(d::options_from_json<T>(written));
    CHECK(boost::json::serialize(back) == boost::json::serialize(written));
    const auto& o = written.as_object();
    const auto default_json = d::option_to_json(defaults);
    const auto& dflt = default_json.as_object();
    for (const auto& name : d::option_names<T>()) {
        INFO("field ", name);
        REQUIRE(o.contains(name));
        CHECK(o.at(name) != dflt.at(name));
    }
    CHECK(o.size() == d::option_names<T>().size());
}

} // namespace conveyor::test

#endif
