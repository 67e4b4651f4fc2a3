// conveyor._conveyor: the C++ half of the Python module. The `conveyor` package
// (python/conveyor/__init__.py) builds a pipeline's description in Python and hands it here
// as a dict; this file turns it into the C++ pipeline of the same stages (sources, shuffle,
// decode_batches, to_cuda), runs it, and exports each batch through the DLPack protocol
// (`__dlpack__`, `__dlpack_device__`), so that `torch.from_dlpack` takes the batch's own
// memory without a copy. The GIL is released whenever C++ works or waits.
#include <conveyor/core/describe.hpp>
#include <conveyor/core/mix.hpp>
#include <conveyor/core/detail/describe_json.hpp>
#include <conveyor/core/order.hpp>
#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/core/stages.hpp>
#include <conveyor/file/index.hpp>
#include <conveyor/file/source.hpp>
#include <conveyor/image/batch.hpp>
#include <conveyor/image/columns.hpp>
#include <conveyor/image/fields.hpp>
#include <conveyor/image/describe.hpp>
#include <conveyor/image/dlpack.hpp>
#include <conveyor/image/labels.hpp>
#include <conveyor/s3/client.hpp>
#include <conveyor/s3/describe.hpp>
#include <conveyor/s3/source.hpp>
#include <conveyor/shard/describe.hpp>
#include <conveyor/shard/list.hpp>
#include <conveyor/shard/source.hpp>
#include <conveyor/version.hpp>
#if CONVEYOR_WITH_CUDA
#include <conveyor/cuda/batch.hpp>
#include <conveyor/cuda/describe.hpp>
#include <conveyor/cuda/device.hpp>
#include <conveyor/cuda/staging.hpp>
#endif

#include "samples.hpp"
#include "values.hpp"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <chrono>
#include <deque>
#include <mutex>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace py = pybind11;
namespace cv = conveyor;
namespace file = conveyor::file;
namespace image = conveyor::image;
namespace shard = conveyor::shard;
namespace cp = conveyor_python;
using namespace std::chrono_literals;

namespace {

// ---- reading the description --------------------------------------------------------------
//
// The description's sections are the library's option structs, described once
// (conveyor/<module>/describe.hpp): each section's keys are the fields' names, read by
// `detail::read_options`, which refuses a key that is no field. The conveyor package's
// keywords are these names, but for the few it spells otherwise (its `_ALIASES` table).

namespace json = boost::json;

/// A Python value of the description as JSON (None, bool, int, float, str, list, tuple, dict).
json::value to_json(const py::handle& v)
{
    if (v.is_none()) return nullptr;
    if (py::isinstance<py::bool_>(v)) return v.cast<bool>();
    if (py::isinstance<py::int_>(v)) {
        if (v.cast<py::int_>() < py::int_(0)) return v.cast<std::int64_t>();
        return v.cast<std::uint64_t>();
    }
    if (py::isinstance<py::float_>(v)) return v.cast<double>();
    if (py::isinstance<py::str>(v)) return json::string(v.cast<std::string>());
    if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
        json::array a;
        for (const auto& e : v) a.push_back(to_json(e));
        return a;
    }
    if (py::isinstance<py::dict>(v)) {
        json::object o;
        for (const auto& [k, e] : v.cast<py::dict>()) o[py::str(k).cast<std::string>()] = to_json(e);
        return o;
    }
    throw py::type_error("a pipeline's description holds None, bool, int, float, str, lists and dicts, not " +
                         py::str(py::type::handle_of(v)).cast<std::string>());
}

bool has(const py::dict& d, const char* name) { return d.contains(name) && !d[name].is_none(); }

template <class T>
T get(const py::dict& d, const char* name, T fallback)
{
    return has(d, name) ? d[name].cast<T>() : fallback;
}

/// Section `name` of the description read into `out` (absent or None: `out` as it is).
template <class T>
void read_section(const py::dict& spec, const char* name, T& out)
{
    if (has(spec, name)) conveyor::detail::read_options(to_json(py::object(spec[name])), out, name);
}

/// The files and S3 sources' own settings: what to list or read (the binding's, since the
/// library takes these as a listing, not as options).
struct source_spec {
    std::string root, index, classes, url, bucket, prefix;
    bool labels = true;
    std::vector<std::string> extensions;
    std::optional<std::vector<std::string>> paths, keys;
};
BOOST_DESCRIBE_STRUCT(source_spec, (), (root, index, classes, url, bucket, prefix, labels, extensions, paths, keys))

/// The description's sections by role: each one's field names, and a check of a section.
struct role {
    std::function<std::vector<std::string>()> fields;
    std::function<void(const json::value&)> check;
};

template <class T>
role role_of()
{
    return {[] { return conveyor::detail::option_names<T>(); }, [](const json::value& v) { (void)conveyor::detail::options_from_json<T>(v); }};
}

const std::map<std::string, role>& roles()
{
    static const std::map<std::string, role> r{
        {"order", role_of<cv::order_options>()},
        {"source", role_of<source_spec>()},
        {"s3", role_of<cv::s3::config_options>()},
        {"shard", role_of<shard::source_options>()},
        {"cache", role_of<cv::store::cache_options>()},
        {"shuffle", role_of<cv::shuffle_options>()},
        {"decode", role_of<image::decode_image_options>()},
        {"decode_options", role_of<image::decode_options>()},
        {"collate", role_of<image::collate_options>()},
#if CONVEYOR_WITH_CUDA
        {"to_cuda", role_of<cv::cuda::staging_options>()},
#endif
    };
    return r;
}

const role& role_named(const std::string& name)
{
    const auto it = roles().find(name);
    if (it == roles().end()) throw py::value_error("no option struct for role '" + name + "'");
    return it->second;
}

// ---- tensors and batches ---------------------------------------------------------------------

// A DLPack capsule as the protocol wants it: named "dltensor" until a consumer takes it
// (and renames it "used_dltensor"); a capsule nobody took frees its tensor itself.
py::capsule dlpack_capsule(DLManagedTensor* t)
{
    PyObject* cap = PyCapsule_New(t, "dltensor", [](PyObject* self) {
        if (!PyCapsule_IsValid(self, "dltensor")) return; // consumed: the consumer calls the deleter
        auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(self, "dltensor"));
        if (m && m->deleter) m->deleter(m);
    });
    if (!cap) {
        t->deleter(t);
        throw py::error_already_set();
    }
    return py::reinterpret_steal<py::capsule>(cap);
}

/// One tensor of a batch: makes a DLPack tensor that holds the batch's memory.
struct py_tensor {
    std::function<DLManagedTensor*()> make;
    DLDevice device{};
    std::vector<std::int64_t> shape;
    std::string dtype;
    std::uintptr_t data = 0;

    py::capsule dlpack(const py::object& /*stream*/) const
    {
        // The data is ready: a CUDA batch was synchronized before it was handed out, so
        // the consumer's stream needs no event to wait for.
        return dlpack_capsule(make());
    }
    py::tuple dlpack_device() const { return py::make_tuple(static_cast<int>(device.device_type), device.device_id); }
};

/// A batch as Python sees it: images, labels, keys, its position in the run.
struct py_batch {
    py_tensor images, labels;
    std::vector<std::string> keys;
    py::dict columns; // the other fields asked for (decode_image_options::extra_fields), by name
    std::uint64_t index = 0;
    std::size_t size = 0;
};

py_batch wrap(image::image_batch b)
{
    auto held = std::make_shared<image::image_batch>(std::move(b));
    const DLDevice dev = image::dlpack_device(held->slab.kind());
    py_batch out;
    out.images = {[held] { return image::to_dlpack(*held); }, dev, held->images.shape,
                  std::string(image::name_of(held->images.type)), reinterpret_cast<std::uintptr_t>(held->images.data)};
    out.labels = {[held] { return image::labels_to_dlpack(*held); }, dev, held->labels.shape, "int64",
                  reinterpret_cast<std::uintptr_t>(held->labels.data)};
    out.keys = held->keys;
    out.index = held->index;
    out.size = held->size();
    return out;
}

#if CONVEYOR_WITH_CUDA
using device_batch = cv::cuda::device_batch<image::image_batch>;

py_batch wrap(device_batch b)
{
    auto held = std::make_shared<device_batch>(std::move(b));
    const DLDevice dev{kDLCUDA, held->device()};
    const auto& t = held->tensors();
    py_batch out;
    out.images = {[held] { return cv::cuda::to_dlpack(*held); }, dev, held->host().images.shape,
                  std::string(image::name_of(held->host().images.type)), reinterpret_cast<std::uintptr_t>(t.at(0).data)};
    out.labels = {[held] { return cv::cuda::labels_to_dlpack(*held); }, dev, held->host().labels.shape, "int64",
                  reinterpret_cast<std::uintptr_t>(t.at(1).data)};
    out.keys = held->host().keys;
    out.index = held->host().index;
    out.size = held->host().size();
    return out;
}
#endif

// ---- statistics --------------------------------------------------------------------------

double seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

py::dict stats_dict(const cv::stats_snapshot& s)
{
    py::dict d;
    d["elapsed_s"] = seconds(s.elapsed);
    d["delivered"] = s.delivered;
    d["consumer_wait_s"] = seconds(s.consumer_waited);
    d["consumer_wait_share"] = s.elapsed.count() > 0 ? seconds(s.consumer_waited) / seconds(s.elapsed) : 0.0;
    d["skipped"] = s.skipped;
    py::list stages;
    for (const auto& st : s.stages) {
        py::dict x;
        x["name"] = st.name;
        x["workers"] = st.workers;
        x["finished"] = st.finished;
        x["items"] = st.items;
        x["bytes"] = st.bytes_known ? py::object(py::int_(st.bytes)) : py::object(py::none());
        x["elapsed_s"] = seconds(st.elapsed);
        x["busy_s"] = seconds(st.busy);
        x["starved_s"] = seconds(st.starved);
        x["blocked_s"] = seconds(st.blocked);
        x["busy_share"] = st.busy_share();
        x["queue_capacity"] = st.queue_capacity;
        x["queue_size"] = st.queue_size;
        x["queue_mean"] = st.queue_mean;
        if (st.is_source) {
            x["in_flight"] = st.in_flight;
            x["retries"] = st.retries;
        }
        stages.append(std::move(x));
    }
    d["stages"] = std::move(stages);
    const auto neck = cv::bottleneck(s);
    d["bottleneck"] = neck ? s.stages[*neck].name : std::string("consumer");
    d["summary"] = cv::format_shares(s);
    return d;
}

// ---- a run ------------------------------------------------------------------------------

/// One epoch's run, iterated from Python: batches, samples (handed over in chunks), or
/// batches of samples. Every item handed out gets the next number (a chunk's samples one
/// each); the items count as used (`progress`) once Python says so (`used(n)`: the first n),
/// so that what the loop has not yet seen (a chunk's rest, items in a Python stage's pool)
/// is read again after a restart.
class py_run {
public:
    template <class Item>
    py_run(std::shared_ptr<cv::runtime> rt, cv::range<Item> r, cp::run_state progress, cp::members as = cp::members::bytes)
        : rt_(std::move(rt)), run_(std::move(r)), progress_(std::move(progress)), as_(as)
    {
    }
    py_run(const py_run&) = delete;
    py_run& operator=(const py_run&) = delete;
    ~py_run()
    {
        // Destroyed with the GIL held (by the Python object's deallocation): the run's
        // threads take the GIL only to let Python values go, never while the run waits for
        // them, so stopping it without the GIL cannot deadlock.
        py::gil_scoped_release unlocked;
        run_ = std::monostate{};
    }

    /// The next batch (a `Batch`, or a dict of lists for batches of samples), or a list of
    /// the next samples; raises StopIteration at the end of the epoch. Waits without the GIL.
    py::object next()
    {
        for (;;) {
            std::optional<py::object> got;
            bool done = true;
            std::visit(
                [&](auto& r) {
                    if constexpr (!std::is_same_v<std::decay_t<decltype(r)>, std::monostate>) got = pull(r, done);
                },
                run_);
            if (got) return std::move(*got);
            if (done) {
                finish();
                throw py::stop_iteration();
            }
            // Between waits: a Ctrl-C (or another signal's handler) raises here, and the
            // run stops before the exception leaves.
            if (PyErr_CheckSignals() != 0) {
                const py::error_already_set pending;
                close();
                throw pending;
            }
        }
    }

    /// Records the first `n` items handed out as used (a number below what was recorded
    /// before changes nothing).
    void used(std::uint64_t n)
    {
        std::lock_guard lk(mu_);
        while (marked_ < n && !pending_.empty()) {
            for (const auto& id : pending_.front()) progress_.consumed(id);
            pending_.pop_front();
            ++marked_;
        }
    }

    /// The progress as JSON ("" when none is kept, or before the run began).
    std::string state() const { return progress_.json(); }

    py::dict stats() const
    {
        py::dict d;
        std::visit(
            [&](const auto& r) {
                if constexpr (!std::is_same_v<std::decay_t<decltype(r)>, std::monostate>) d = stats_dict(r.snapshot());
                else if (final_) d = stats_dict(*final_);
            },
            run_);
        return d;
    }

    void close()
    {
        finish();
        py::gil_scoped_release unlocked;
        run_ = std::monostate{};
    }

private:
    /// Samples handed to Python at once, when that many are ready: one wait and one
    /// crossing of the GIL for many small items.
    static constexpr std::size_t chunk = 64;

    // Waits (without the GIL) up to 100 ms for the next item; samples: and takes the ones
    // ready after it, up to `chunk`. Then, with the GIL, makes what Python gets.
    template <class Item>
    std::optional<py::object> pull(cv::range<Item>& r, bool& done)
    {
        std::vector<Item> got;
        {
            py::gil_scoped_release unlocked; // the run's threads need no GIL; the wait is without it
            if (auto first = r.next_for(100ms)) {
                got.push_back(std::move(*first));
                if constexpr (std::is_same_v<Item, shard::sample> || std::is_same_v<Item, image::decoded_sample>)
                    while (got.size() < chunk)
                        if (auto more = r.next_for(std::chrono::nanoseconds(0))) got.push_back(std::move(*more));
                        else break;
            }
            done = r.done();
            for (auto& item : got) handed(item);
        }
        if (got.empty()) return std::nullopt;
        if constexpr (std::is_same_v<Item, shard::sample>) {
            py::list out;
            for (const auto& smp : got) out.append(cp::dict_of(smp, nullptr, as_));
            return py::object(std::move(out));
        } else if constexpr (std::is_same_v<Item, image::decoded_sample>) {
            py::list out;
            for (auto& smp : got) out.append(cp::sample_to_python(std::move(smp)));
            return py::object(std::move(out));
        } else if constexpr (std::is_same_v<Item, std::vector<shard::sample>>) {
            return py::object(columns_of(got.front()));
        } else if constexpr (std::is_same_v<Item, image::sample_batch>) {
            auto& b = got.front();
            py::dict d;
            py::list keys;
            for (const auto& k : b.keys) keys.append(py::str(k));
            d["__key__"] = std::move(keys);
            for (auto& c : b.columns) {
                std::string name = c.name;
                d[py::str(name)] = cp::column_to_python(c);
            }
            return py::object(std::move(d));
        } else {
            auto& b = got.front();
            py::dict columns;
            for (const auto& c : columns_of(b)) columns[py::str(c.name)] = cp::column_to_python(c);
            py_batch out = wrap(std::move(b));
            out.columns = std::move(columns);
            return py::cast(std::move(out));
        }
    }

    // An item leaves for Python: its ids wait for `used`.
    void handed(image::image_batch& b)
    {
        // Python may keep batches as long as it likes (a list of an epoch's batches): the
        // slab leaves the stage's bound, which then counts the pipeline's own slabs only.
        b.slab.detach();
        pend(b.ids);
    }
#if CONVEYOR_WITH_CUDA
    void handed(device_batch& b)
    {
        b.synchronize(); // the copies are done before Python sees the tensors
        b.host().slab.detach();
        pend(b.host().ids);
    }
#endif
    void handed(const shard::sample& s) { pend({shard::id_of(s)}); }
    void handed(const image::decoded_sample& s) { pend({s.id}); }
    void handed(const image::sample_batch& b) { pend(b.ids); }
    // The columns of the other fields, which stay on the host.
    static const std::vector<image::batch_column>& columns_of(const image::image_batch& b) { return b.columns; }
#if CONVEYOR_WITH_CUDA
    static const std::vector<image::batch_column>& columns_of(const device_batch& b) { return b.host().columns; }
#endif
    void handed(const std::vector<shard::sample>& v)
    {
        std::vector<cv::sample_id> ids;
        ids.reserve(v.size());
        for (const auto& s : v) ids.push_back(shard::id_of(s));
        pend(std::move(ids));
    }
    void pend(std::vector<cv::sample_id> ids)
    {
        std::lock_guard lk(mu_);
        pending_.push_back(std::move(ids));
    }

    /// A batch of samples as a dict of lists: `__key__`, `__url__` and each field any
    /// sample has (in order of first appearance), None where a sample lacks it. GIL held.
    py::dict columns_of(const std::vector<shard::sample>& v) const
    {
        std::vector<std::string> names;
        for (const auto& s : v)
            for (const auto& f : s.fields)
                if (std::find(names.begin(), names.end(), f.name) == names.end()) names.push_back(f.name);
        py::dict d;
        py::list keys, urls;
        for (const auto& s : v) {
            keys.append(py::str(s.key));
            urls.append(py::str(s.origin));
        }
        d["__key__"] = std::move(keys);
        d["__url__"] = std::move(urls);
        for (const auto& name : names) {
            py::list col;
            for (const auto& s : v) {
                const auto* f = s.find(name);
                col.append(f ? cp::value_of(*f, as_) : py::object(py::none()));
            }
            d[py::str(name)] = std::move(col);
        }
        return d;
    }

    void finish()
    {
        std::visit(
            [&](auto& r) {
                if constexpr (!std::is_same_v<std::decay_t<decltype(r)>, std::monostate>) final_ = r.snapshot();
            },
            run_);
    }

    std::shared_ptr<cv::runtime> rt_; // outlives the run
    std::variant<std::monostate, cv::range<image::image_batch>,
#if CONVEYOR_WITH_CUDA
                 cv::range<device_batch>,
#endif
                 cv::range<shard::sample>, cv::range<std::vector<shard::sample>>, cv::range<image::decoded_sample>,
                 cv::range<image::sample_batch>>
        run_;
    cp::run_state progress_;
    cp::members as_; // how the members of raw samples reach Python
    std::optional<cv::stats_snapshot> final_;
    std::mutex mu_;
    std::deque<std::vector<cv::sample_id>> pending_; // items handed out, not yet used, in order
    std::uint64_t marked_ = 0;                       // items recorded as used
};

// ---- the resolved source ------------------------------------------------------------------

/// A pipeline's source resolved once (listed, indexes read, clients made), and the stages
/// after it; `run(epoch, ...)` makes each epoch's run.
class py_dataset {
public:
    py_dataset(std::shared_ptr<cv::runtime> rt, const py::dict& spec, std::uint64_t rank, std::uint64_t world, std::uint64_t worker,
               std::uint64_t workers)
        : rt_(std::move(rt)), split_{rank, world, worker, workers}
    {
        if (world == 0 || rank >= world) throw py::value_error("rank must be below world_size");
        if (workers == 0 || worker >= workers) throw py::value_error("worker must be below workers");
        kind_ = get<std::string>(spec, "kind", "");
        read_section(spec, "order", order_);
        read_stages(spec);
        if (kind_ == "mix") {
            open_mix(spec);
            return;
        }
        const bool mapped = static_cast<bool>(decode_.label_map.map); // labels given to every file or object
        py::gil_scoped_release unlocked; // listings and index reads may take a while
        if (kind_ == "files") open_files(spec);
        else if (kind_ == "s3") open_objects(spec);
        else if (kind_ == "shards") open_shards(spec);
        else throw py::value_error("unknown source kind '" + kind_ + "'");
        // A file or object made a sample has a `cls` field only when its source gave a label.
        if (!mapped && kind_ == "files" && (file_spec_.paths || !file_spec_.labels)) decode_.label_field.clear();
        if (!mapped && kind_ == "s3" && !file_spec_.labels && file_spec_.classes.empty()) decode_.label_field.clear();
    }
    py_dataset(const py_dataset&) = delete;
    py_dataset& operator=(const py_dataset&) = delete;
    ~py_dataset()
    {
        // The Python stages' threads may be waiting for the GIL: they are joined without it.
        py::gil_scoped_release unlocked;
        ops_.clear();
    }

    /// Items this slot reads in `epoch`, when known.
    std::optional<std::uint64_t> items(std::uint64_t epoch) const
    {
        if (kind_ == "files" || kind_ == "s3") return cv::epoch_share(list_size(), split_, epoch, order_).size();
        if (kind_ == "mix" || shard_.resampled) return std::nullopt;
        std::uint64_t n = 0;
        for (const auto& piece : cv::epoch_share(shards_.size(), split_, epoch, order_)) {
            const auto s = shards_[piece.item].samples;
            if (s < 0) return std::nullopt;
            n += static_cast<std::uint64_t>(s);
        }
        return n;
    }

    /// Epoch `epoch`'s run, from the progress `state` (JSON; empty or absent: from the start).
    std::unique_ptr<py_run> run(std::uint64_t epoch, const std::optional<std::string>& state)
    {
        py::gil_scoped_release unlocked;
        cp::run_state st;
        const bool resumed = state && !state->empty();
        if (kind_ == "mix") {
            st.mix = std::make_shared<cv::mix_progress>(children_.size());
            if (resumed) *st.mix = cv::mix_progress::from_json(*state);
            std::vector<cv::pipeline<shard::sample>> sources;
            for (std::size_t k = 0; k < children_.size(); ++k) sources.push_back(children_[k]->samples({.one = st.mix->source(k)}));
            cv::mix_options mo = mix_;
            mo.share = split_;
            mo.resume = st.mix;
            return outputs(with_ops(cv::mix<shard::sample>(std::move(sources), std::move(mo)), st), st, epoch);
        }
        if (kind_ != "shards" || !shard_.resampled) {
            st.one = std::make_shared<cv::progress>();
            if (resumed) *st.one = cv::progress::from_json(*state);
        }
        if (kind_ != "shards" && has_decode_ && has_collate_ && image_batches_ && ops_.empty()) {
            // Files and objects decoded straight from their blobs into batches.
            auto blobs = list_source(st.one);
            if (shuffle_) blobs = std::move(blobs) | cv::shuffle(*shuffle_);
            return images(std::move(blobs) | image::decode_batches(decode_, batch_), st, epoch);
        }
        return outputs(samples(st), st, epoch);
    }

    /// The source's items as samples (files and objects as webdataset takes a loose file),
    /// with the Python stages and the shuffle after it; `st` is where it records progress.
    cv::pipeline<shard::sample> samples(const cp::run_state& st)
    {
        if (kind_ == "shards") {
            shard::source_options so = shard_;
            so.order = order_;
            so.share = split_;
            so.errors = errors_;
            so.s3 = s3_;
            so.resume = st.one;
            so.cache = cache_dir();
            return with_ops(shard::shards(shards_, so).on(*rt_), st);
        }
        return with_ops(list_source(st.one) | cv::map([](cv::blob b) { return shard::sample_of(std::move(b)); }, {.name = "samples"}), st);
    }

    /// The files or S3 objects, in this epoch's order and share.
    cv::pipeline<cv::blob> list_source(const std::shared_ptr<cv::progress>& progress)
    {
        const cv::epoch_options epochs{.order = order_, .share = split_, .resume = progress};
        return kind_ == "files" ? file::files(listing_, {.errors = errors_, .epochs = epochs}).on(*rt_)
                                : cv::s3::objects(*s3_, objects_, {.errors = errors_, .epochs = epochs, .cache = cache_dir()}).on(*rt_);
    }

    /// The Python stages on samples, the shuffle where the builder put it among them.
    cv::pipeline<shard::sample> with_ops(cv::pipeline<shard::sample> p, const cp::run_state& st)
    {
        for (std::size_t i = 0; i <= ops_.size(); ++i) {
            if (i == shuffle_at_ && shuffle_) p = std::move(p) | cv::shuffle(*shuffle_);
            if (i < ops_.size()) p = cp::with_python_op(std::move(p), ops_[i], st, errors_);
        }
        return p;
    }

    /// What the run hands Python: decoded images in batches, decoded samples (or batches of
    /// their fields), batches of samples, or the samples themselves.
    std::unique_ptr<py_run> outputs(cv::pipeline<shard::sample> p, const cp::run_state& st, std::uint64_t epoch)
    {
        if (has_decode_ && has_collate_ && image_batches_)
            return images(std::move(p) | image::decode_batches(decode_, batch_), st, epoch);
        if (has_decode_) { // every field decoded, one sample at a time
            image::field_options fo = decode_.extra_decode;
            fo.image = decode_.decode;
            auto decoded = std::move(p) | image::decode_fields(std::move(fo), {.concurrency = decode_.concurrency, .errors = errors_});
            if (!has_collate_) return std::make_unique<py_run>(rt_, std::move(decoded).run(epoch), st);
            image::collate_fields_options co{.fields = tuple_, .partial = batch_.partial, .errors = errors_};
            return std::make_unique<py_run>(rt_, (std::move(decoded) | image::collate_fields(batch_.size, std::move(co))).run(epoch), st);
        }
        if (has_collate_)
            return std::make_unique<py_run>(rt_, (std::move(p) | cv::batch(batch_.size, {.partial = batch_.partial})).run(epoch), st,
                                            members_);
        return std::make_unique<py_run>(rt_, std::move(p).run(epoch), st, members_);
    }

    std::unique_ptr<py_run> images(cv::pipeline<image::image_batch> p, const cp::run_state& progress, std::uint64_t epoch)
    {
#if CONVEYOR_WITH_CUDA
        if (cuda_) return std::make_unique<py_run>(rt_, (std::move(p) | cv::cuda::to_cuda(*cuda_)).run(epoch), progress);
#endif
        return std::make_unique<py_run>(rt_, std::move(p).run(epoch), progress);
    }

    /// The node cache, when one was given with a folder.
    std::optional<cv::store::cache_options> cache_dir() const
    {
        if (cache_ && !cache_->dir.empty()) return cache_;
        return std::nullopt;
    }

    py::tuple split() const { return py::make_tuple(split_.rank, split_.world_size, split_.worker, split_.workers); }

    /// Shards: the resolved list, each with its URL, bytes and samples (-1: unknown).
    py::list shards() const
    {
        py::list out;
        for (const auto& s : shards_) {
            py::dict d;
            d["url"] = s.url;
            d["size"] = s.size;
            d["samples"] = s.samples;
            out.append(std::move(d));
        }
        return out;
    }

private:
    void read_stages(const py::dict& spec)
    {
        if (has(spec, "shuffle")) read_section(spec, "shuffle", shuffle_.emplace());
        shuffle_at_ = get<std::size_t>(spec, "shuffle_at", 0);
        has_decode_ = has(spec, "decode");
        has_collate_ = has(spec, "collate");
        image_batches_ = get<bool>(spec, "image_batches", true);
        if (has(spec, "tuple")) tuple_ = spec["tuple"].cast<std::vector<std::string>>();
        members_ = get<bool>(spec, "views", false) ? cp::members::views : cp::members::bytes;
        read_python_ops(spec);
        read_section(spec, "decode", decode_);
        errors_ = decode_.errors; // one setting: a bad item, unreadable or undecodable
        if (!has_decode_) errors_ = get<std::string>(spec, "on_error", "fail") == "skip" ? cv::on_error::skip : cv::on_error::fail;
        if (const auto map = get<std::string>(spec, "label_map_file", ""); !map.empty()) decode_.label_map.map = image::load_label_map(map);
        read_section(spec, "collate", batch_);
        if (batch_.type == image::dtype::int64) throw py::value_error("dtype must be 'uint8', 'float32' or 'float16'");
        if (has(spec, "to_cuda")) {
#if CONVEYOR_WITH_CUDA
            read_section(spec, "to_cuda", cuda_.emplace());
            if (cv::cuda::devices().devices == 0)
                throw cv::error(cv::make_error_code(cv::errc::invalid_argument),
                                {.stage = "to_cuda", .detail = "no usable GPU here: " + cv::cuda::devices().reason});
            batch_.allocator = cv::cuda::pinned_slab_allocator(); // copies at the link's rate, overlapped
#else
            throw cv::error(cv::make_error_code(cv::errc::invalid_argument),
                            {.stage = "to_cuda", .detail = "this build of conveyor has no CUDA (CONVEYOR_WITH_CUDA)"});
#endif
        }
        read_section(spec, "shard", shard_);
        if (has(spec, "cache")) read_section(spec, "cache", cache_.emplace());
        read_section(spec, "s3", s3_config_);
        read_section(spec, "source", file_spec_);
        if (has(spec, "urls")) urls_ = spec["urls"].cast<std::vector<std::string>>();
    }

    // The Python stages on samples, each with its pool of threads (kept for every epoch).
    void read_python_ops(const py::dict& spec)
    {
        if (!has(spec, "ops")) return;
        for (const auto& o : spec["ops"].cast<py::list>()) {
            const auto d = o.cast<py::dict>();
            cp::python_op op;
            const auto what = d["op"].cast<std::string>();
            op.what = what == "filter" ? cp::python_op::kind::filter : cp::python_op::kind::map;
            op.fn = d["fn"];
            op.threads = d["threads"].cast<std::size_t>();
            op.ordered = d["ordered"].cast<bool>();
            op.as = members_;
            if (op.threads == 0) throw py::value_error(what + "() needs at least one thread");
            py::object name = py::getattr(op.fn, "__name__", py::none());
            op.name = what + "(" + (name.is_none() ? type_name_of(op.fn) : py::str(name).cast<std::string>()) + ")";
            ops_.push_back(std::make_shared<cp::python_pool>(std::move(op)));
        }
        if (shuffle_at_ > ops_.size()) throw py::value_error("shuffle_at is past the Python stages");
    }

    static std::string type_name_of(const py::handle& o) { return cp::type_name(o); }

    // A mix: its sources resolved (each with its own order, shuffle and Python stages), the
    // weights, or the Python function of the global index that gives them.
    void open_mix(const py::dict& spec)
    {
        for (const auto& child : spec["sources"].cast<py::list>())
            children_.push_back(std::make_unique<py_dataset>(rt_, child.cast<py::dict>(), split_.rank, split_.world_size, split_.worker,
                                                             split_.workers));
        const auto m = spec["mix"].cast<py::dict>();
        mix_.weights = m["weights"].cast<std::vector<double>>();
        mix_.seed = m["seed"].cast<std::uint64_t>();
        mix_.schedule_step = m["schedule_step"].cast<std::uint64_t>();
        const auto stop = m["stop"].cast<std::string>();
        mix_.stop = stop == "first" ? cv::mix_stop::first : stop == "never" ? cv::mix_stop::never : cv::mix_stop::all;
        if (has(spec, "schedule")) {
            // Called on an I/O thread every `schedule_step` draws: the function is held as a
            // field object is (its last reference dropped with the GIL), called with it.
            auto fn = cp::hold(py::reinterpret_borrow<py::object>(spec["schedule"]));
            mix_.schedule = [fn](std::uint64_t index) -> std::vector<double> {
                py::gil_scoped_acquire gil;
                try {
                    return cp::held(fn)(index).cast<std::vector<double>>();
                } catch (py::error_already_set& e) {
                    throw cv::error(cv::make_error_code(cv::errc::stage_failed),
                                    {.stage = "mix", .detail = "the weight schedule failed at index " + std::to_string(index) + ": " +
                                                               cp::python_error_text(e)});
                } catch (const py::cast_error&) {
                    throw cv::error(cv::make_error_code(cv::errc::stage_failed),
                                    {.stage = "mix", .detail = "the weight schedule returned no list of numbers at index " +
                                                               std::to_string(index)});
                }
            };
        }
    }

    cv::s3::client& s3_client()
    {
        if (!s3_) s3_.emplace(*rt_, s3_config_);
        return *s3_;
    }

    void open_files(const py::dict&)
    {
        const auto& f = file_spec_;
        file::listing l;
        if (f.paths) {
            l = file::from_paths(*f.paths);
        } else {
            file::walk_options wo{.extensions = f.extensions, .labels = f.labels};
            if (!f.classes.empty()) wo.classes = file::read_classes(f.classes);
            l = f.index.empty() ? file::walk(f.root, wo) : file::read_index(f.index, f.root, wo);
        }
        // A label map gives each file its label by its place in the listing as made here,
        // before each epoch takes the files in an order of its own.
        if (decode_.label_map.map) {
            for (std::size_t i = 0; i < l.size(); ++i) {
                const std::uint64_t position = i;
                l.entries[i].label = image::detail::map_label_of(decode_.label_map, l.entries[i].path, l.full_path(i), &position);
            }
            decode_.label_map = {};
        }
        if (l.entries.empty()) throw cv::error(cv::make_error_code(cv::errc::invalid_argument), {.stage = "files", .where = f.root, .detail = "no files found"});
        listing_ = std::make_shared<const file::listing>(std::move(l));
    }

    void open_objects(const py::dict&)
    {
        const auto& f = file_spec_;
        auto& c = s3_client();
        cv::s3::object_list l;
        if (f.keys) {
            l = cv::s3::object_list::from_keys(f.bucket, *f.keys);
        } else if (!f.index.empty()) {
            // The seeds' index: object keys relative to the bucket, in a local file or in
            // the bucket itself.
            if (cv::location(f.index).is_s3()) {
                l = cv::s3::read_index(c, f.index);
            } else {
                std::string bucket = f.bucket.empty() ? c.cfg().default_bucket : f.bucket;
                if (bucket.empty())
                    throw py::value_error("a local S3 index needs bucket= (or bucket_name in the JSON credentials file)");
                l = cv::s3::read_index(std::move(bucket), f.index);
            }
        }
        if ((f.keys || !f.index.empty()) && (f.labels || !f.classes.empty())) {
            // ImageFolder labels: the first "directory" of each key below `prefix`.
            std::vector<file::class_info> classes;
            if (!f.classes.empty()) classes = file::read_classes(f.classes);
            cv::s3::assign_labels(l, f.prefix, classes);
        }
        if (!f.keys && f.index.empty()) {
            cv::s3::listing_options lo{.labels = f.labels, .extensions = f.extensions};
            if (!f.classes.empty()) lo.classes = file::read_classes(f.classes);
            l = cv::s3::list_url(c, f.url, lo);
        }
        if (decode_.label_map.map) {
            if (l.labels.size() != l.objects.size()) l.labels.assign(l.objects.size(), -1);
            for (std::size_t i = 0; i < l.objects.size(); ++i) {
                const std::uint64_t position = i;
                l.labels[i] = image::detail::map_label_of(decode_.label_map, l.objects[i].key,
                                                          "s3://" + l.bucket + "/" + l.objects[i].key, &position);
            }
            decode_.label_map = {};
        }
        if (l.objects.empty())
            throw cv::error(cv::make_error_code(cv::errc::invalid_argument), {.stage = "s3", .where = f.url.empty() ? f.index : f.url, .detail = "no objects found"});
        objects_ = std::make_shared<const cv::s3::object_list>(std::move(l));
    }

    void open_shards(const py::dict&)
    {
        shard::list_options lo;
        const bool remote_s3 = shard::names_s3(urls_);
        if (remote_s3 || !s3_config_.credentials_file.empty() || !s3_config_.endpoint_url.empty()) lo.s3 = &s3_client();
        shards_ = shard::resolve(urls_, lo);
        for (auto& s : shards_) { // a brace pattern of local files lists no sizes: the files have them
            std::error_code ec;
            if (const cv::location where(s.url); s.size < 0 && where.is_local())
                if (const auto n = std::filesystem::file_size(where.path(), ec); !ec) s.size = static_cast<std::int64_t>(n);
        }
    }

    std::uint64_t list_size() const { return kind_ == "files" ? listing_->size() : objects_->size(); }

    std::shared_ptr<cv::runtime> rt_;
    conveyor::split split_;
    std::string kind_;
    cv::on_error errors_ = cv::on_error::fail;
    conveyor::order_options order_;
    std::optional<cv::shuffle_options> shuffle_;
    std::size_t shuffle_at_ = 0; // the shuffle comes before Python stage `shuffle_at_`
    bool has_decode_ = false, has_collate_ = false;
    cp::members members_ = cp::members::bytes; // how members reach Python: bytes, or memoryviews
    bool image_batches_ = true;       // decode + batch: images decoded into batch tensors (else columns of any fields)
    std::vector<std::string> tuple_;  // to_tuple's fields
    std::vector<std::shared_ptr<cp::python_pool>> ops_;
    std::vector<std::unique_ptr<py_dataset>> children_; // a mix's sources
    cv::mix_options mix_;
    image::decode_image_options decode_;
    image::collate_options batch_;
#if CONVEYOR_WITH_CUDA
    std::optional<cv::cuda::staging_options> cuda_;
#endif
    shard::source_options shard_;
    std::optional<cv::store::cache_options> cache_;
    cv::s3::config_options s3_config_;
    std::optional<cv::s3::client> s3_;
    source_spec file_spec_;
    std::vector<std::string> urls_;
    std::shared_ptr<const file::listing> listing_;
    std::shared_ptr<const cv::s3::object_list> objects_;
    std::vector<shard::shard_ref> shards_;
};

} // namespace

PYBIND11_MODULE(_conveyor, m)
{
    m.doc() = "conveyor's C++ half: pipelines described by the conveyor package, run in C++, batches exported through DLPack";
    // The package's version is the headers' (include/conveyor/version.hpp, where it is kept):
    // conveyor.__version__ is this, and the wheel's metadata reads the same file.
    m.attr("__version__") = CONVEYOR_VERSION_STRING;

    // conveyor::error (and anything derived) arrives as conveyor.Error with the same
    // message: the stage, the key and the URL or path it failed at.
    static py::exception<cv::error> error_type(m, "Error", PyExc_RuntimeError);
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const cv::error& e) {
            error_type(e.what());
        }
    });
    // A section's unknown key is a wrong keyword (TypeError, as Python's own), a bad value
    // a ValueError; both name the key and what it takes.
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const cv::detail::option_error& e) {
            if (e.unknown_key()) PyErr_SetString(PyExc_TypeError, e.what());
            else PyErr_SetString(PyExc_ValueError, e.what());
        }
    });
    error_type.doc() = "A conveyor failure: the message names the stage, the item's key and where it was read from.";

    py::class_<py_tensor>(m, "Tensor", "One tensor of a batch; its memory stays alive while this or any tensor taken from it lives.")
        .def("__dlpack__", &py_tensor::dlpack, py::arg("stream") = py::none(), "A DLPack capsule of the tensor (no copy).")
        .def("__dlpack_device__", &py_tensor::dlpack_device, "(device type, device id) as DLPack numbers them.")
        .def_property_readonly("data_ptr", [](const py_tensor& t) { return t.data; }, "The address of the first element.")
        .def_property_readonly("shape", [](const py_tensor& t) { return py::tuple(py::cast(t.shape)); })
        .def_property_readonly("dtype", [](const py_tensor& t) { return t.dtype; });

    cp::add_member_type(m);

    py::class_<py_batch>(m, "Batch", "A batch: images and labels as DLPack tensors, with the items' keys.")
        .def_readonly("images", &py_batch::images)
        .def_readonly("labels", &py_batch::labels)
        .def_readonly("columns", &py_batch::columns, "The other fields asked for (to_tuple), by name: NumPy arrays or lists.")
        .def_readonly("keys", &py_batch::keys)
        .def_readonly("index", &py_batch::index, "The batch's position in its run (0, 1, ...).")
        .def("__len__", [](const py_batch& b) { return b.size; });

    py::class_<cv::runtime, std::shared_ptr<cv::runtime>>(m, "Runtime", "conveyor's threads: I/O lanes and a compute pool.")
        .def(py::init([](std::size_t threads, std::size_t io_threads, std::size_t local_devices) {
                 py::gil_scoped_release unlocked;
                 // Stopping the runtime joins its threads: without the GIL, wherever the last
                 // reference goes (a Python object's deallocation, or a run stopping without it).
                 return std::shared_ptr<cv::runtime>(
                     new cv::runtime(cv::runtime_options{.io_threads = io_threads, .compute_threads = threads, .local_devices = local_devices}),
                     [](cv::runtime* r) {
                         if (PyGILState_Check()) {
                             py::gil_scoped_release again;
                             delete r;
                         } else {
                             delete r;
                         }
                     });
             }),
             py::arg("threads") = 0, py::arg("io_threads") = 1, py::arg("local_devices") = 0,
             "A runtime with `threads` compute threads (0: this rank's share of the usable cores, their count divided "
             "by local_ranks(local_devices)) and `io_threads` I/O lanes.")
        .def_property_readonly("threads", [](const cv::runtime& rt) { return rt.options().compute_threads; });

    py::class_<py_run>(m, "Run", "One epoch's run; dropping it or close() stops all its work.")
        .def("next", &py_run::next, "The next batch; raises StopIteration at the end of the epoch. Waits without the GIL.")
        .def("close", &py_run::close, "Stops the run and waits until all its work has stopped.")
        .def("used", &py_run::used, py::arg("n"), "Records the first n items handed out as used (for state()).")
        .def("state", &py_run::state, "The progress of the epoch as JSON (every batch handed out counts as used; \"\": none kept).")
        .def("stats", &py_run::stats, "The run's statistics as a dict.");

    py::class_<py_dataset>(m, "Dataset", "A pipeline's source resolved once, with the stages after it.")
        .def(py::init<std::shared_ptr<cv::runtime>, const py::dict&, std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t>(),
             py::arg("runtime"), py::arg("spec"), py::arg("rank"), py::arg("world_size"), py::arg("worker"), py::arg("workers"))
        .def("items", &py_dataset::items, py::arg("epoch"), "Items this slot reads in `epoch`, or None when unknown.")
        .def("run", &py_dataset::run, py::arg("epoch"), py::arg("state"),
             "Starts epoch `epoch`, resuming from `state` (progress JSON; None or \"\": from the start).")
        .def_property_readonly("split", &py_dataset::split, "(rank, world_size, worker, workers)")
        .def_property_readonly("shards", &py_dataset::shards, "Shards: the resolved list ({url, size, samples}; -1: unknown).");

    m.def("option_fields", [](const std::string& r) { return role_named(r).fields(); }, py::arg("role"),
          "The keys of a description's section: the fields of the option struct that plays `role`, by their C++ names.");
    m.def("check_options", [](const std::string& r, const py::object& section) { role_named(r).check(to_json(section)); },
          py::arg("role"), py::arg("section"),
          "Raises TypeError for a key that is no field of `role`'s struct (naming the valid ones), ValueError for a bad value.");

    m.def("local_ranks", &cv::local_ranks, py::arg("devices") = 0,
          "The ranks of the job on this node, from the launcher's environment (LOCAL_WORLD_SIZE, SLURM_NTASKS_PER_NODE, "
          "SLURM_TASKS_PER_NODE, OMPI_COMM_WORLD_LOCAL_SIZE; `devices` where only LOCAL_RANK is set; else 1).");
    m.def("environment_split", [] {
        const auto s = conveyor::split_from_environment();
        return py::make_tuple(s.rank, s.world_size);
    });
    m.def("merge_progress", [](const std::vector<std::string>& parts) {
        std::vector<conveyor::progress> ps;
        for (const auto& p : parts) ps.push_back(conveyor::progress::from_json(p));
        return conveyor::progress::merge(ps).to_json();
    });
    m.def("check_progress", [](const std::string& text) { (void)conveyor::progress::from_json(text); });
    m.def("merge_mix_progress", [](const std::vector<std::string>& parts) {
        std::vector<cv::mix_progress> states;
        for (const auto& p : parts) states.push_back(cv::mix_progress::from_json(p));
        return cv::mix_progress::merge(states).to_json();
    }, py::arg("parts"), "The union of several ranks' mix states (JSON) of one epoch.");
    m.def("check_mix_progress", [](const std::string& text) { (void)cv::mix_progress::from_json(text); });

    m.def("center_crop",
          [](std::int64_t height, std::int64_t width, std::uint32_t size, double fraction) {
              const image::decode_options o{.size = {size, size}, .crop = image::crop_mode::center, .center_fraction = fraction};
              const auto r = image::crop_for(height, width, o, {});
              return py::make_tuple(r.top, r.left, r.height, r.width);
          },
          py::arg("height"), py::arg("width"), py::arg("size"), py::arg("fraction") = 0.875,
          "The (top, left, height, width) region the center crop keeps of an image of height x width.");
}
