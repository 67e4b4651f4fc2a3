// The Python module's decoded values: a decoded field (text, an integer, JSON, a NumPy array,
// an image, bytes, a value a Python stage put there) and a batch's column as Python objects.
// Arrays and images become NumPy arrays over conveyor's own memory (no copy), which the
// package turns into torch tensors (torch.from_numpy, no copy either). Part of
// conveyor._conveyor (python/_conveyor.cpp). Every function here runs with the GIL held.
#ifndef CONVEYOR_PYTHON_VALUES_HPP
#define CONVEYOR_PYTHON_VALUES_HPP

#include "samples.hpp"

#include <conveyor/image/columns.hpp>
#include <conveyor/image/fields.hpp>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <boost/json/value.hpp>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace conveyor_python {

namespace image = conveyor::image;
namespace json = boost::json;

/// Whatever keeps `T` alive, as the base object of a NumPy array made over its memory.
template <class T>
py::capsule keeper(T value)
{
    return py::capsule(new T(std::move(value)), [](void* p) { delete static_cast<T*>(p); });
}

/// Strides in bytes of an array of `shape`, C order or Fortran order.
inline std::vector<py::ssize_t> byte_strides(const std::vector<std::int64_t>& shape, std::size_t item, bool fortran)
{
    std::vector<py::ssize_t> st(shape.size());
    py::ssize_t step = static_cast<py::ssize_t>(item);
    if (fortran) {
        for (std::size_t i = 0; i < shape.size(); ++i) {
            st[i] = step;
            step *= static_cast<py::ssize_t>(shape[i]);
        }
    } else {
        for (std::size_t i = shape.size(); i-- > 0;) {
            st[i] = step;
            step *= static_cast<py::ssize_t>(shape[i]);
        }
    }
    return st;
}

/// A NumPy array over `data` (kept alive by `base`); read-only unless `writable` (memory
/// of its own: decoded pixels, stacked values), since a view into a shard's bytes shares
/// them with whatever else holds them.
inline py::array numpy_over(const std::string& descr, const std::vector<std::int64_t>& shape, std::vector<py::ssize_t> strides,
                            const void* data, py::handle base, bool writable)
{
    std::vector<py::ssize_t> dims(shape.begin(), shape.end());
    py::array a(py::dtype(descr), std::move(dims), std::move(strides), data, base);
    if (!writable) py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
    return a;
}

/// A JSON document as Python objects (dict, list, str, int, float, bool, None).
inline py::object from_json(const json::value& v)
{
    switch (v.kind()) {
    case json::kind::null: return py::none();
    case json::kind::bool_: return py::bool_(v.get_bool());
    case json::kind::int64: return py::int_(v.get_int64());
    case json::kind::uint64: return py::int_(v.get_uint64());
    case json::kind::double_: return py::float_(v.get_double());
    case json::kind::string: {
        const auto& s = v.get_string();
        return py::str(s.data(), s.size());
    }
    case json::kind::array: {
        const auto& a = v.get_array();
        py::list out(a.size());
        for (std::size_t i = 0; i < a.size(); ++i) out[i] = from_json(a[i]);
        return std::move(out);
    }
    case json::kind::object: {
        py::dict out;
        for (const auto& [k, x] : v.get_object()) out[py::str(k.data(), k.size())] = from_json(x);
        return std::move(out);
    }
    }
    return py::none();
}

/// A decoded field's value in Python. Arrays and images are NumPy arrays over the memory
/// they were decoded into (the package makes torch tensors of them).
inline py::object value_to_python(image::field_value v)
{
    return std::visit(
        [](auto&& x) -> py::object {
            using X = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<X, std::monostate>) {
                return py::none();
            } else if constexpr (std::is_same_v<X, cv::slice>) {
                return bytes_of(x);
            } else if constexpr (std::is_same_v<X, std::int64_t>) {
                return py::int_(x);
            } else if constexpr (std::is_same_v<X, std::string>) {
                return py::str(x);
            } else if constexpr (std::is_same_v<X, json::value>) {
                return from_json(x);
            } else if constexpr (std::is_same_v<X, image::array_value>) {
                const void* data = x.data.data();
                auto strides = byte_strides(x.shape, x.item_size(), x.fortran_order);
                std::string descr = x.descr;
                auto shape = x.shape;
                return numpy_over(descr, shape, std::move(strides), data, keeper(std::move(x.data)), false);
            } else if constexpr (std::is_same_v<X, image::decoded_image>) {
                std::vector<std::int64_t> shape{x.height, x.width, x.channels};
                const void* data = x.pixels.data();
                return numpy_over("|u1", shape, byte_strides(shape, 1, false), data, keeper(std::move(x.pixels)), true);
            } else {
                static_assert(std::is_same_v<X, image::object_value>);
                return held(x.object);
            }
        },
        std::move(v));
}

/// A decoded field's value in Python, from a value others still hold (shared memory is
/// shared, an image's pixels are copied).
inline py::object shared_value_to_python(const image::field_value& v)
{
    if (const auto* im = std::get_if<image::decoded_image>(&v)) {
        py::array_t<std::uint8_t> a({static_cast<py::ssize_t>(im->height), static_cast<py::ssize_t>(im->width),
                                     static_cast<py::ssize_t>(im->channels)});
        std::memcpy(a.mutable_data(), im->pixels.data(), im->size_bytes());
        return std::move(a);
    }
    return std::visit(
        [](const auto& x) -> py::object {
            using X = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<X, image::decoded_image>) return py::none(); // above
            else if constexpr (std::is_same_v<X, image::array_value>) return value_to_python(image::field_value(x));
            else if constexpr (std::is_same_v<X, json::value> || std::is_same_v<X, std::string> || std::is_same_v<X, std::int64_t> ||
                               std::is_same_v<X, cv::slice> || std::is_same_v<X, image::object_value> ||
                               std::is_same_v<X, std::monostate>)
                return value_to_python(image::field_value(x));
        },
        v);
}

/// A batch's column: a NumPy array of the stacked values, or a list of one value per item.
/// The column stays as it was (its memory shared with the arrays made here).
inline py::object column_to_python(const image::batch_column& c)
{
    if (c.stacked) {
        const auto& t = *c.stacked;
        std::vector<py::ssize_t> strides(t.strides.size());
        for (std::size_t i = 0; i < strides.size(); ++i) strides[i] = static_cast<py::ssize_t>(t.strides[i] * static_cast<std::int64_t>(t.item_size));
        const void* data = t.data;
        return numpy_over(t.descr, t.shape, std::move(strides), data, keeper(t.owner), true);
    }
    py::list out(c.values.size());
    for (std::size_t i = 0; i < c.values.size(); ++i) out[i] = shared_value_to_python(c.values[i]);
    return std::move(out);
}

/// A decoded sample as a dict: `__key__`, `__url__`, each field's value.
inline py::dict sample_to_python(image::decoded_sample s)
{
    py::dict d;
    d["__key__"] = py::str(s.key);
    d["__url__"] = py::str(s.origin);
    for (auto& f : s.fields) d[py::str(f.name)] = value_to_python(std::move(f.value));
    return d;
}

} // namespace conveyor_python

#endif
