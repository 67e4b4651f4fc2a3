// The Python module's samples: shard samples as the dicts webdataset yields, dicts back into
// samples, and the user's Python functions as pipeline stages on a pool of threads that take
// the GIL only for the call. Part of conveyor._conveyor (python/_conveyor.cpp).
#ifndef CONVEYOR_PYTHON_SAMPLES_HPP
#define CONVEYOR_PYTHON_SAMPLES_HPP

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/detail/offload.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/core/mix.hpp>
#include <conveyor/core/order.hpp>
#include <conveyor/core/stages.hpp>
#include <conveyor/shard/sample.hpp>

#include <pybind11/pybind11.h>

#include <boost/asio/thread_pool.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace conveyor_python {

namespace py = pybind11;
namespace cv = conveyor;
namespace shard = conveyor::shard;

/** A Python object as a sample field's `object`: a strong reference, dropped with the GIL
    taken on whatever thread lets the last copy go (after the interpreter has begun to
    finalize, it is left: no thread may take the GIL then). Every `object` in the samples
    of the module's pipelines is made here. Call with the GIL held. */
inline std::shared_ptr<const void> hold(py::object o)
{
    PyObject* p = o.release().ptr();
    return std::shared_ptr<const void>(p, [](const void* q) {
        if (!Py_IsInitialized() || _Py_IsFinalizing()) return;
        py::gil_scoped_acquire gil;
        Py_DECREF(static_cast<PyObject*>(const_cast<void*>(q)));
    });
}

/// The Python object a field holds (made by `hold`). GIL held.
inline py::object held(const std::shared_ptr<const void>& o)
{
    return py::reinterpret_borrow<py::object>(static_cast<PyObject*>(const_cast<void*>(o.get())));
}

/// A member's bytes as Python `bytes`. GIL held.
inline py::object bytes_of(const cv::slice& s)
{
    return py::reinterpret_steal<py::object>(PyBytes_FromStringAndSize(reinterpret_cast<const char*>(s.data()),
                                                                       static_cast<Py_ssize_t>(s.size())));
}

/** The exporter behind a member's memoryview: a Python object of type `_MemberBytes` that
    holds the slice, and so the read buffer the slice points into, for as long as a view of it
    lives. A plain CPython type (not a pybind11 class): making one is an allocation and a
    copy of the slice, and its buffer is the slice's bytes, read-only. */
struct member_object {
    PyObject_HEAD
    cv::slice data;
};

inline void member_dealloc(PyObject* self)
{
    std::destroy_at(&reinterpret_cast<member_object*>(self)->data);
    PyTypeObject* type = Py_TYPE(self);
    PyObject_Free(self);
    Py_DECREF(type); // instances of a heap type hold a reference to it
}

inline int member_getbuffer(PyObject* self, Py_buffer* view, int flags)
{
    const cv::slice& s = reinterpret_cast<member_object*>(self)->data;
    // Read-only: PyBUF_WRITABLE is refused with BufferError.
    return PyBuffer_FillInfo(view, self, const_cast<std::byte*>(s.data()), static_cast<Py_ssize_t>(s.size()), 1, flags);
}

/// The `_MemberBytes` type, made once by `add_member_type` at the module's import.
inline PyTypeObject*& member_type()
{
    static PyTypeObject* type = nullptr;
    return type;
}

/// Makes `_MemberBytes` and adds it to module `m`. GIL held.
inline void add_member_type(py::module_& m)
{
    static PyType_Slot slots[] = {
        {Py_tp_dealloc, reinterpret_cast<void*>(&member_dealloc)},
        {Py_bf_getbuffer, reinterpret_cast<void*>(&member_getbuffer)},
        {Py_tp_doc, const_cast<char*>("The read-only bytes behind a member's memoryview (Pipeline.memoryviews()); it keeps the "
                                      "read buffer they are in alive.")},
        {0, nullptr},
    };
    // Made only here: Python cannot make one (it would hold no slice).
    static PyType_Spec spec = {"conveyor._conveyor._MemberBytes", static_cast<int>(sizeof(member_object)), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, slots};
    PyObject* type = PyType_FromSpec(&spec);
    if (type == nullptr) throw py::error_already_set();
    member_type() = reinterpret_cast<PyTypeObject*>(type);
    m.add_object("_MemberBytes", py::reinterpret_borrow<py::object>(type)); // the module's reference; ours stays for the process
}

/** A member's bytes as a read-only `memoryview` over conveyor's read buffer: no copy. The
    view keeps the whole buffer it points into alive (a shard chunk holds many members).
    GIL held. */
inline py::object view_of(const cv::slice& s)
{
    auto* o = PyObject_New(member_object, member_type());
    if (o == nullptr) throw py::error_already_set();
    std::construct_at(&o->data, s);
    PyObject* view = PyMemoryView_FromObject(reinterpret_cast<PyObject*>(o));
    Py_DECREF(o); // the view holds it
    if (view == nullptr) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(view);
}

/// How members reach Python: copied into `bytes` (webdataset's type) or as memoryviews.
enum class members { bytes, views };

/// A field's value in Python: its object, or its bytes. GIL held.
inline py::object value_of(const shard::field& f, members as = members::bytes)
{
    if (f.object) return held(f.object);
    return as == members::views ? view_of(f.data) : bytes_of(f.data);
}

/** Sample `s` as webdataset yields it: `{"__key__": ..., "__url__": ..., <field>: bytes}`
    (memoryviews with `members::views`). `made`, when given, receives each field's Python
    value in field order (to recognise values a function hands back untouched). GIL held. */
inline py::dict dict_of(const shard::sample& s, std::vector<PyObject*>* made = nullptr, members as = members::bytes)
{
    py::dict d;
    d["__key__"] = py::str(s.key);
    d["__url__"] = py::str(s.origin);
    for (const auto& f : s.fields) {
        py::object v = value_of(f, as);
        if (made) made->push_back(v.ptr());
        d[py::str(f.name)] = std::move(v);
    }
    return d;
}

/// Names the type of `o` for a message. GIL held.
inline std::string type_name(const py::handle& o)
{
    return py::str(py::type::handle_of(o).attr("__name__")).cast<std::string>();
}

/** The sample a function returned (`d`) in place of `from`: `__key__` and `__url__` from the
    dict (kept from `from` when absent), every other entry a field in the dict's order: a
    bytes-like value is the field's bytes (the same object `from`'s field was given as
    reuses its bytes, no copy; any other buffer is copied), any other value is carried as
    an object. The sample keeps `from`'s place in the epoch (its id). GIL held. */
inline shard::sample sample_from(const py::handle& d, const shard::sample& from, const std::vector<PyObject*>& made,
                                 const std::string& stage)
{
    if (!py::isinstance<py::dict>(d))
        throw cv::error(cv::make_error_code(cv::errc::stage_failed),
                        {.stage = stage, .key = from.key, .where = from.origin,
                         .detail = "the function returned " + type_name(d) + ", not a sample (a dict)"});
    shard::sample s;
    s.origin = from.origin;
    s.key = from.key;
    s.offset = from.offset;
    s.end = from.end;
    s.shard = from.shard;
    s.index = from.index;
    s.work = from.work;
    s.whole = from.whole;
    s.source = from.source;
    s.pass = from.pass;
    for (const auto& [k, v] : py::reinterpret_borrow<py::dict>(d)) {
        if (!py::isinstance<py::str>(k))
            throw cv::error(cv::make_error_code(cv::errc::stage_failed),
                            {.stage = stage, .key = from.key, .where = from.origin,
                             .detail = "a sample's field names are str, not " + type_name(k)});
        std::string name = k.cast<std::string>();
        if (name == "__key__") {
            s.key = py::str(v).cast<std::string>();
            continue;
        }
        if (name == "__url__") {
            s.origin = py::str(v).cast<std::string>();
            continue;
        }
        if (name.starts_with("__")) continue; // webdataset's other metadata (__local_path__ ...)
        shard::field f{.name = std::move(name)};
        bool reused = false;
        for (std::size_t i = 0; i < made.size() && i < from.fields.size(); ++i)
            if (made[i] == v.ptr()) {
                f.data = from.fields[i].data;
                f.object = from.fields[i].object;
                f.offset = from.fields[i].offset;
                reused = true;
                break;
            }
        if (!reused) {
            if (PyObject_CheckBuffer(v.ptr()) && !py::isinstance<py::str>(v)) {
                const py::buffer_info info = py::reinterpret_borrow<py::buffer>(v).request();
                const auto bytes = static_cast<std::size_t>(info.size * info.itemsize);
                f.data = cv::slice(cv::buffer::copy_of(std::span(static_cast<const std::byte*>(info.ptr), bytes)));
            } else {
                f.object = hold(py::reinterpret_borrow<py::object>(v));
            }
        }
        s.fields.push_back(std::move(f));
    }
    return s;
}

/// The text of the Python exception being handled (`Type: message`). GIL held.
inline std::string python_error_text(const py::error_already_set& e)
{
    std::string type = e.type() ? py::str(e.type().attr("__name__")).cast<std::string>() : std::string("Exception");
    std::string value = e.value() ? py::str(e.value()).cast<std::string>() : std::string();
    return value.empty() ? type : type + ": " + value;
}

/// A user's function on samples: `map` (a dict in, a dict out; None drops the sample, as
/// webdataset's map does) or `filter` (keeps the samples it returns true for).
struct python_op {
    enum class kind { map, filter };
    kind what = kind::map;
    py::object fn;            ///< the callable (owned with the GIL: see `python_stage`)
    std::size_t threads = 4;  ///< Python threads calling it
    bool ordered = true;      ///< samples leave in input order
    members as = members::bytes; ///< how the function gets the members
    std::string name;         ///< the stage's name in errors and statistics
};

/** The pool of threads a Python stage calls its function on, and the function. Destroyed
    without the GIL (the pool's threads may be waiting for it); the function is let go with
    the GIL taken. */
struct python_pool {
    explicit python_pool(python_op op) : op(std::move(op)), threads(this->op.threads) {}
    python_pool(const python_pool&) = delete;
    python_pool& operator=(const python_pool&) = delete;
    ~python_pool()
    {
        threads.join();
        if (Py_IsInitialized() && !_Py_IsFinalizing()) {
            py::gil_scoped_acquire gil;
            op.fn = py::object();
        } else {
            (void)op.fn.release(); // the interpreter is going: nothing may be released now
        }
    }
    python_op op;
    boost::asio::thread_pool threads;
};

/// Where a run records the items used: its source's `progress`, or a mix's `mix_progress`
/// (which gives each of its sources a `progress` of its own); neither: none kept.
struct run_state {
    std::shared_ptr<cv::progress> one;
    std::shared_ptr<cv::mix_progress> mix;

    void consumed(const cv::sample_id& id) const
    {
        if (mix) (void)mix->consumed(id);
        else if (one) one->consumed(id);
    }
    /// The state as JSON; "" when none is kept or nothing was recorded.
    std::string json() const
    {
        if (mix) return mix->empty() ? std::string() : mix->to_json();
        if (one) return one->empty() ? std::string() : one->to_json();
        return {};
    }
};

/** What a Python stage hands on: the sample the function made, or nothing (dropped). A
    sample dropped by a filter (or a map's None) is recorded as used in `progress` at once,
    so that a resumed epoch does not read it again. */
inline auto python_call(std::shared_ptr<python_pool> pool, run_state progress)
{
    return [pool, progress](shard::sample s) -> boost::asio::awaitable<std::optional<shard::sample>> {
        const auto id = shard::id_of(s);
        // The call's closure holds plain pointers only: `offload` takes it by value, and
        // GCC 12 destroys a closure passed by value to a coroutine twice. This frame keeps
        // the sample alive across the call; the stage keeps the pool.
        auto out = co_await cv::detail::offload(pool->threads.get_executor(), [op = &pool->op, in = &s]() -> std::optional<shard::sample> {
            py::gil_scoped_acquire gil;
            const shard::sample& s = *in;
            try {
                std::vector<PyObject*> made;
                py::dict d = dict_of(s, &made, op->as);
                py::object r = op->fn(d);
                if (op->what == python_op::kind::filter) {
                    if (!r.cast<bool>()) return std::nullopt;
                    return sample_from(d, s, made, op->name);
                }
                if (r.is_none()) return std::nullopt;
                return sample_from(r, s, made, op->name);
            } catch (py::error_already_set& e) {
                throw cv::error(cv::make_error_code(cv::errc::stage_failed),
                                {.stage = op->name, .key = s.key, .where = s.origin, .detail = python_error_text(e)});
            } catch (const py::cast_error& e) {
                throw cv::error(cv::make_error_code(cv::errc::stage_failed),
                                {.stage = op->name, .key = s.key, .where = s.origin, .detail = e.what()});
            }
        });
        if (!out) progress.consumed(id);
        co_return out;
    };
}

/// The stages that run `op` on a stream of samples: the calls on its pool, the dropped
/// samples left out.
template <class Pipeline>
auto with_python_op(Pipeline p, std::shared_ptr<python_pool> pool, run_state progress, cv::on_error errors)
{
    const auto& op = pool->op;
    cv::map_options mo{.concurrency = 2 * std::max<std::size_t>(op.threads, 1), .ordered = op.ordered, .errors = errors, .name = op.name};
    return std::move(p) | cv::map(python_call(pool, std::move(progress)), std::move(mo))
           | cv::filter([](const std::optional<shard::sample>& s) { return s.has_value(); })
           | cv::map([](std::optional<shard::sample> s) { return std::move(*s); });
}

} // namespace conveyor_python

#endif
