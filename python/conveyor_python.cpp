// The `conveyor` Python module: image batches from a folder or a list of files, exported
// through the DLPack protocol (`__dlpack__`, `__dlpack_device__`) so that
// `torch.from_dlpack(batch)` takes the batch's own memory without a copy.
#include <conveyor/core/runtime.hpp>
#include <conveyor/file/index.hpp>
#include <conveyor/file/source.hpp>
#include <conveyor/image/batch.hpp>
#include <conveyor/image/dlpack.hpp>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace py = pybind11;
namespace image = conveyor::image;

namespace {

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

/// One tensor of a batch, holding the batch's slab.
struct py_tensor {
    image::tensor t;
    image::slab slab;

    py::capsule dlpack(py::object /*stream*/) const
    {
        return dlpack_capsule(image::to_dlpack(t, slab.owner(), image::dlpack_device(slab.kind())));
    }
    py::tuple dlpack_device() const
    {
        const DLDevice d = image::dlpack_device(slab.kind());
        return py::make_tuple(static_cast<int>(d.device_type), d.device_id);
    }
    std::uintptr_t data_ptr() const { return reinterpret_cast<std::uintptr_t>(t.data); }
    py::tuple shape() const { return py::cast(t.shape); }
};

struct py_batch {
    image::image_batch b;

    py_tensor images() const { return {b.images, b.slab}; }
    py_tensor labels() const { return {b.labels, b.slab}; }
};

/// A run of the pipeline, iterated from Python.
class py_batches {
public:
    py_batches(conveyor::pipeline<image::image_batch> p, std::size_t threads)
    {
        if (threads > 0) rt_ = std::make_unique<conveyor::runtime>(conveyor::runtime_options{.compute_threads = threads});
        if (rt_) p.on(*rt_);
        run_.emplace(p.run());
    }
    ~py_batches() { close(); }

    py_batch next()
    {
        if (!run_) throw py::stop_iteration();
        std::optional<image::image_batch> b;
        {
            py::gil_scoped_release unlocked; // the run's threads need no GIL; the consumer waits without it
            b = run_->next();
        }
        if (!b) {
            close();
            throw py::stop_iteration();
        }
        return {std::move(*b)};
    }

    std::uint64_t skipped() const { return run_ ? run_->stats().skipped.load() : skipped_; }

    void close()
    {
        if (!run_) return;
        skipped_ = run_->stats().skipped.load();
        py::gil_scoped_release unlocked;
        run_.reset();
        rt_.reset();
    }

private:
    std::unique_ptr<conveyor::runtime> rt_; // destroyed after the run
    std::optional<conveyor::range<image::image_batch>> run_;
    std::uint64_t skipped_ = 0;
};

image::crop_mode crop_of(const std::string& s)
{
    if (s == "center") return image::crop_mode::center;
    if (s == "none") return image::crop_mode::none;
    if (s == "random_resized") return image::crop_mode::random_resized;
    throw py::value_error("crop must be 'center', 'none' or 'random_resized', not '" + s + "'");
}

std::array<float, 3> three(const std::optional<std::vector<float>>& v, float fill)
{
    if (!v) return {fill, fill, fill};
    if (v->size() == 1) return {(*v)[0], (*v)[0], (*v)[0]};
    if (v->size() != 3) throw py::value_error("mean and std take 1 or 3 values");
    return {(*v)[0], (*v)[1], (*v)[2]};
}

std::unique_ptr<py_batches> image_batches(const std::variant<std::string, std::vector<std::string>>& source, std::size_t batch,
                                          std::uint32_t size, const std::string& layout, const std::string& dtype,
                                          const std::optional<std::vector<float>>& mean,
                                          const std::optional<std::vector<float>>& std_, const std::string& crop,
                                          bool dct_scaling, double flip, std::uint64_t seed, bool partial, std::size_t threads,
                                          std::size_t slabs, bool skip_errors)
{
    conveyor::file::listing l;
    if (const auto* dir = std::get_if<std::string>(&source))
        l = conveyor::file::walk(*dir, {.extensions = {".jpg", ".jpeg", ".png"}, .labels = true});
    else
        l = conveyor::file::from_paths(std::get<std::vector<std::string>>(source));

    image::batch_options b{.size = batch, .partial = partial, .slabs = slabs};
    if (layout == "nchw") b.layout = image::tensor_layout::nchw;
    else if (layout != "nhwc") throw py::value_error("layout must be 'nhwc' or 'nchw'");
    const auto type = image::dtype_named(dtype);
    if (!type || *type == image::dtype::int64) throw py::value_error("dtype must be 'uint8', 'float32' or 'float16'");
    b.type = *type;
    b.mean = three(mean, 0.0f);
    b.std = three(std_, 1.0f);

    image::decode_image_options d;
    d.decode = {.size = {size, size}, .crop = crop_of(crop), .dct_scaling = dct_scaling, .flip = flip, .seed = seed};
    d.errors = skip_errors ? conveyor::on_error::skip : conveyor::on_error::fail;
    auto p = conveyor::file::files(std::move(l)) | image::decode_batches(std::move(d), b);
    return std::make_unique<py_batches>(std::move(p), threads);
}

} // namespace

PYBIND11_MODULE(conveyor, m)
{
    m.doc() = "conveyor: image batches decoded in C++ and handed to PyTorch, JAX or CuPy through DLPack, without a copy";

    py::class_<py_tensor>(m, "Tensor", "One tensor of a batch (its memory stays alive while this or an exported tensor lives).")
        .def("__dlpack__", &py_tensor::dlpack, py::arg("stream") = py::none())
        .def("__dlpack_device__", &py_tensor::dlpack_device)
        .def_property_readonly("data_ptr", &py_tensor::data_ptr, "The address of the first element.")
        .def_property_readonly("shape", &py_tensor::shape)
        .def_property_readonly("dtype", [](const py_tensor& t) { return std::string(image::name_of(t.t.type)); });

    py::class_<py_batch>(m, "Batch", "A batch of images: a DLPack tensor itself (the images), with .labels and .keys.")
        .def("__dlpack__", [](const py_batch& b, py::object s) { return b.images().dlpack(std::move(s)); },
             py::arg("stream") = py::none())
        .def("__dlpack_device__", [](const py_batch& b) { return b.images().dlpack_device(); })
        .def("__len__", [](const py_batch& b) { return b.b.size(); })
        .def_property_readonly("images", &py_batch::images)
        .def_property_readonly("labels", &py_batch::labels)
        .def_property_readonly("keys", [](const py_batch& b) { return b.b.keys; })
        .def_property_readonly("index", [](const py_batch& b) { return b.b.index; })
        .def_property_readonly("data_ptr", [](const py_batch& b) { return b.images().data_ptr(); },
                               "The address of the images (for checking that consumers did not copy).");

    py::class_<py_batches>(m, "Batches", "An iterator of Batch objects; close() (or dropping it) stops the run.")
        .def("__iter__", [](py_batches& self) -> py_batches& { return self; }, py::return_value_policy::reference_internal)
        .def("__next__", &py_batches::next)
        .def("close", &py_batches::close)
        .def_property_readonly("skipped", &py_batches::skipped, "Images skipped for errors (skip_errors=True).");

    m.def("image_batches", &image_batches, py::arg("source"), py::kw_only(), py::arg("batch") = 64, py::arg("size") = 224,
          py::arg("layout") = "nhwc", py::arg("dtype") = "uint8", py::arg("mean") = py::none(), py::arg("std") = py::none(),
          py::arg("crop") = "center", py::arg("dct_scaling") = true, py::arg("flip") = 0.0, py::arg("seed") = 0,
          py::arg("partial") = true, py::arg("threads") = 0, py::arg("slabs") = 0, py::arg("skip_errors") = false,
          R"(Batches of images decoded from `source`: a folder in ImageFolder layout (one directory per
class; labels in sorted order) or a list of file paths (labels -1). Images are cropped
(`crop`) and resized to size x size; batches are uint8 NHWC, or float32/float16 normalized
as (x/255 - mean)/std, NHWC or NCHW.)");

    m.def("center_crop",
          [](std::int64_t height, std::int64_t width, std::uint32_t size, double fraction) {
              const image::decode_options o{.size = {size, size}, .crop = image::crop_mode::center, .center_fraction = fraction};
              const auto r = image::crop_for(height, width, o, {});
              return py::make_tuple(r.top, r.left, r.height, r.width);
          },
          py::arg("height"), py::arg("width"), py::arg("size"), py::arg("fraction") = 0.875,
          "The (top, left, height, width) region the center crop keeps of an image of height x width.");
}
