// Every `@code` example in the public headers' comments, compiled. Each example is
// copied as it stands in its header, wrapped in a function; what the example leaves to
// the user (a decode function, a training step, a key-value store) is a stub here. The
// examples that need only local files run, on a small synthetic ImageFolder; those that
// need an S3 endpoint or a GPU are compiled only.
//
// When an example in a header changes, change it here too: this file is how we know the
// documentation still compiles.
#include <conveyor/conveyor.hpp>

#include <doctest/doctest.h>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <unistd.h>
#include <utility>
#include <vector>

namespace asio = boost::asio;

namespace {

// ---- what the examples leave to the user ------------------------------------------------

std::size_t decode(conveyor::blob b) { return b.data.size(); }

std::atomic<std::size_t> seen{0};

void train_step(const conveyor::image::tensor&, const conveyor::image::tensor&) { ++seen; }
void train_step(const conveyor::image::stacked_tensor&, const conveyor::image::stacked_tensor&) { ++seen; }
void train_on(const conveyor::image::decoded_image&, std::int64_t) { ++seen; }
void train(const conveyor::shard::sample&) { ++seen; }
template <class Data>
void use(const std::string&, const Data&) { ++seen; }

/// A row of a key-value store and the store (core/source.hpp's example).
struct row {
    std::string key;
};
struct kv_store {
    asio::awaitable<row> async_get(std::string key) { co_return row{std::move(key)}; }
};

/// A scratch directory, removed at the end.
struct scratch {
    std::filesystem::path dir;
    scratch()
    {
        dir = std::filesystem::temp_directory_path() /
              ("conveyor-comment-examples-" + std::to_string(::getpid()));
        std::filesystem::remove_all(dir);
        std::filesystem::create_directories(dir);
    }
    ~scratch() { std::filesystem::remove_all(dir); }
};

// ---- core ---------------------------------------------------------------------------

// core/source.hpp: keyed_source
std::size_t example_keyed_source(conveyor::runtime& rt)
{
    auto keys = std::make_shared<std::vector<std::string>>(std::vector<std::string>{"a", "b", "c"});
    auto db = std::make_shared<kv_store>();
    // A source of rows of a key-value store, 16 requests in flight.
    auto rows = conveyor::keyed_source<row>("kv", keys->size(), {.concurrency = 16},
        [keys, db](conveyor::run_context&) {
            return [keys, db](std::uint64_t i) -> asio::awaitable<row> { co_return co_await db->async_get((*keys)[i]); };
        });
    std::size_t n = 0;
    for (auto& r : rows.on(rt)) n += !r.key.empty();
    return n;
}

/// Lines of a text blob (core/sink.hpp's example).
std::vector<std::string> split_lines(const conveyor::blob& b)
{
    std::vector<std::string> lines;
    std::string line;
    for (const std::byte c : b.data.span()) {
        if (c == std::byte{'\n'}) lines.push_back(std::exchange(line, {}));
        else line.push_back(static_cast<char>(c));
    }
    if (!line.empty()) lines.push_back(std::move(line));
    return lines;
}

// core/sink.hpp: a stage of one's own, sending to its sink
std::size_t example_sink(conveyor::runtime& rt, const std::filesystem::path& root)
{
    // A stage that sends each line of each text blob as an item of its own.
    auto lines = [](const std::shared_ptr<conveyor::run_context>& ctx, conveyor::stream<conveyor::blob> in) {
        return conveyor::make_stream<std::string>(ctx, "lines", conveyor::default_stream_capacity,
            [in](conveyor::sink<std::string>& out) mutable -> asio::awaitable<void> {
                while (auto b = co_await in.async_next())
                    for (auto& line : split_lines(*b))
                        if (!co_await out.send(std::move(line))) {
                            in.close(); // upstream stops too
                            co_return;
                        }
            });
    };
    std::size_t n = 0;
    for (auto& line : (conveyor::file::files(conveyor::file::walk(root)) | lines).on(rt)) n += !line.empty();
    return n;
}

// core/stages.hpp: map
template <class Files>
auto example_map(Files files)
{
    using namespace conveyor;
    auto p = files | map([](blob b) { return b.data.size(); }, {.concurrency = 4, .where = run_on::compute});
    return p;
}

// core/pipeline.hpp: on_stats
template <class Files, class Decode>
auto example_on_stats(Files files, Decode decode)
{
    using conveyor::batch;
    auto p = (files | decode | batch(64)).on_stats(std::chrono::seconds(1), [](const conveyor::stats_snapshot& s) {
        std::fprintf(stderr, "%s\n", conveyor::format_shares(s).c_str());
    });
    return p;
}

// ---- file ---------------------------------------------------------------------------

// file/source.hpp: files
auto example_files(const std::filesystem::path& root)
{
    // The example's "/data/train", here a scratch folder.
    auto pipe = conveyor::file::files(conveyor::file::walk(root), {.concurrency = 64})
              | conveyor::map(decode);
    return pipe;
}

// ---- image --------------------------------------------------------------------------

// image/batch.hpp: decode_batches
void example_decode_batches(const std::filesystem::path& root)
{
    auto pipe = conveyor::file::files(conveyor::file::walk(root, {.labels = true}))
              | conveyor::image::decode_batches({.decode = {.size = {224, 224}, .crop = conveyor::image::crop_mode::center}},
                                                {.size = 256, .layout = conveyor::image::tensor_layout::nchw,
                                                 .type = conveyor::image::dtype::float32,
                                                 .mean = conveyor::image::imagenet_mean, .std = conveyor::image::imagenet_std});
    for (auto& b : pipe) train_step(b.images, b.labels);
}

// image/dlpack.hpp: to_dlpack
void example_to_dlpack(const conveyor::image::image_batch& batch)
{
    DLManagedTensor* t = conveyor::image::to_dlpack(batch);
    // hand `t` to a framework; it calls t->deleter(t) when done
    t->deleter(t);
}

// image/labels.hpp: a label from a JSON field, and from a label map
auto example_label_json()
{
    namespace image = conveyor::image;
    return image::decode_image({.label_json = {"json", "annotations.class"}});
}
auto example_label_map()
{
    namespace image = conveyor::image;
    // ImageNet validation shards with keys ILSVRC2012_val_00000001..., labels from a map file:
    return image::decode_image({.label_map = {.map = image::load_label_map("val_map.json"), .first_number = 1}});
}

// image/stage.hpp: decode_image on shard samples
void example_decode_image()
{
    auto pipe = conveyor::shard::shards("/data/shard-{000000..000146}.tar")
              | conveyor::image::decode_image({.decode = {.size = {224, 224},
                                                           .crop = conveyor::image::crop_mode::random_resized,
                                                           .flip = 0.5, .seed = 7},
                                               .errors = conveyor::on_error::skip});
    for (auto& d : pipe) train_on(d.image, d.label);
}

// image/fields.hpp: decode_fields
auto example_decode_fields()
{
    auto pipe = conveyor::shard::shards("/data/shard-{000000..000099}.tar")
              | conveyor::image::decode_fields({.only = {"jpg", "json", "cls"}})
              | conveyor::image::collate_fields(32, {.fields = {"jpg", "json", "cls"}});
    return pipe;
}

// image/columns.hpp: collate_fields
void example_collate_fields()
{
    auto pipe = conveyor::shard::shards("/data/shard-{000000..000099}.tar")
              | conveyor::image::decode_fields()
              | conveyor::image::collate_fields(64, {.fields = {"npy", "cls", "json"}});
    for (auto& b : pipe) train_step(*b.column("npy")->stacked, *b.column("cls")->stacked);
}

// ---- shard --------------------------------------------------------------------------

// shard/source.hpp: shards with resume state
void example_shards_resume()
{
    auto state = std::make_shared<conveyor::progress>();
    auto pipe = conveyor::shard::shards(conveyor::shard::resolve("/data/shard-{000000..000146}.tar"),
                                        {.order = {.seed = 7}, .resume = state})
              | conveyor::shuffle({.buffer = 10'000, .seed = 7});
    for (auto& s : pipe) { train(s); state->consumed(s); }
}

// core/mix.hpp: three shard sets mixed by weight, with one resume state
void example_mix(const std::vector<conveyor::shard::shard_ref>& web_list, const std::vector<conveyor::shard::shard_ref>& book_list,
                 const std::vector<conveyor::shard::shard_ref>& code_list)
{
    auto state = std::make_shared<conveyor::mix_progress>(3);
    auto web = conveyor::shard::shards(web_list, {.order = {.seed = 7}, .resume = state->source(0)});
    auto books = conveyor::shard::shards(book_list, {.order = {.seed = 7}, .resume = state->source(1)});
    auto code = conveyor::shard::shards(code_list, {.order = {.seed = 7}, .resume = state->source(2)});
    auto pipe = conveyor::mix<conveyor::shard::sample>({web, books, code}, {.weights = {0.6, 0.3, 0.1}, .seed = 7, .resume = state})
              | conveyor::shuffle({.buffer = 10'000, .seed = 7});
    for (auto& s : pipe) { train(s); state->consumed(s); }
}

// shard/untar.hpp: untar over blobs that are whole shards
void example_untar(const std::filesystem::path& root, const std::filesystem::path& index)
{
    auto samples = conveyor::file::files(conveyor::file::read_index(index, root)) | conveyor::shard::untar();
    for (auto& s : samples) use(s.key, s.find("jpg")->data);
}

// ---- README.md's quick start (compiled only: it needs a dataset) ----------------------

void train_step(DLManagedTensor* x, DLManagedTensor* y)
{
    x->deleter(x);
    y->deleter(y);
}

void example_readme_quick_start()
{
    namespace cv = conveyor;
    namespace image = conveyor::image;
    cv::runtime rt;   // I/O threads + compute pool

    // Shards on disk, in S3 or behind HTTP: brace ranges, s3:// prefixes, a dataset index.
    auto pipe = cv::shard::shards("/data/imagenet/shard-{000000..001281}.tar", {.order = {.seed = 7}}).on(rt)
              | cv::shuffle({.buffer = 10'000, .seed = 7})              // samples across shards
              | image::decode_batches(                                   // decoded on the compute pool
                    {.decode = {.size = {224, 224}, .crop = image::crop_mode::random_resized,
                                .flip = 0.5, .seed = 7}},
                    {.size = 256, .layout = image::tensor_layout::nchw, .type = image::dtype::float32,
                     .mean = image::imagenet_mean, .std = image::imagenet_std});

    for (int epoch = 0; epoch < 90; ++epoch)
        for (auto& b : pipe) {          // each loop is one epoch, in a new order
            DLManagedTensor* x = image::to_dlpack(b);          // {256, 3, 224, 224} float32, no copy
            DLManagedTensor* y = image::labels_to_dlpack(b);   // {256} int64
            train_step(x, y);           // the framework calls their deleters when done
        }
}

// ---- s3 (compiled only: they need an endpoint) ---------------------------------------

// s3/source.hpp: list_url with labels
auto example_s3_list_labels(const conveyor::s3::client& c)
{
    // s3://imagenet/train/n01440764/x.JPEG is class 0, .../n01443537/y.JPEG class 1, ...
    auto list = conveyor::s3::list_url(c, "s3://imagenet/train/", {.labels = true});
    return list;
}

// s3/source.hpp: objects
void example_s3_objects(conveyor::runtime& rt)
{
    conveyor::s3::client c(rt, {.endpoint_url = "http://127.0.0.1:9000"});
    for (auto& b : conveyor::s3::objects(c, conveyor::s3::list_url(c, "s3://imagenet/train/")).on(rt))
        use(b.key, b.data.span());
}

// s3/source.hpp: upload
void example_s3_upload(conveyor::runtime& rt, conveyor::s3::client& c, const conveyor::file::listing& listing)
{
    auto stored = conveyor::file::files(listing) | conveyor::s3::upload(c, "bucket", {.prefix = "train/"});
    for (const auto& r : stored.on(rt)) std::printf("%s %s\n", r.key.c_str(), r.etag.c_str());
}

// ---- cuda (compiled only where CUDA is enabled: it needs a GPU to run) ----------------

#if CONVEYOR_WITH_CUDA
} // namespace
#include <cuda_runtime_api.h>
namespace {

void train_step(const conveyor::cuda::device_tensor&, const conveyor::cuda::device_tensor&, cudaStream_t) { ++seen; }

// cuda/staging.hpp: to_cuda
void example_to_cuda(conveyor::runtime& rt, const std::vector<conveyor::shard::shard_ref>& list, cudaStream_t my_stream)
{
    auto pipe = conveyor::shard::shards(list).on(rt)
              | conveyor::image::decode_batches({}, {.size = 256})
              | conveyor::cuda::to_cuda({.device = 0});
    for (auto& b : pipe) {
        cudaStreamWaitEvent(my_stream, b.ready(), 0);
        train_step(b.tensors()[0], b.tensors()[1], my_stream);
        b.done_on(my_stream);
    }
}

// cuda/decode.hpp: decode_batches (on the GPU)
void example_gpu_decode_batches(conveyor::runtime& rt, const std::vector<conveyor::shard::shard_ref>& list, cudaStream_t my_stream)
{
    auto pipe = conveyor::shard::shards(list).on(rt)
              | conveyor::cuda::decode_batches({.decode = {.size = {224, 224},
                                                           .crop = conveyor::image::crop_mode::random_resized,
                                                           .flip = 0.5, .seed = 7}},
                                               {.size = 256, .layout = conveyor::image::tensor_layout::nchw,
                                                .type = conveyor::image::dtype::float16,
                                                .mean = conveyor::image::imagenet_mean, .std = conveyor::image::imagenet_std},
                                               {.device = 0});
    for (auto& b : pipe) {
        cudaStreamWaitEvent(my_stream, b.ready(), 0);
        train_step(b.tensors()[0], b.tensors()[1], my_stream);
        b.done_on(my_stream);
    }
}
#endif

// Taking the compiled-only examples' addresses keeps them compiled and checked without
// running them.
[[maybe_unused]] const void* compiled_only[] = {
    reinterpret_cast<const void*>(&example_label_map),
    reinterpret_cast<const void*>(&example_decode_image),
    reinterpret_cast<const void*>(&example_decode_fields),
    reinterpret_cast<const void*>(&example_collate_fields),
    reinterpret_cast<const void*>(&example_shards_resume),
    reinterpret_cast<const void*>(&example_mix),
    reinterpret_cast<const void*>(&example_untar),
    reinterpret_cast<const void*>(&example_readme_quick_start),
    reinterpret_cast<const void*>(&example_s3_list_labels),
    reinterpret_cast<const void*>(&example_s3_objects),
    reinterpret_cast<const void*>(&example_s3_upload),
#if CONVEYOR_WITH_CUDA
    reinterpret_cast<const void*>(&example_to_cuda),
    reinterpret_cast<const void*>(&example_gpu_decode_batches),
#endif
};

} // namespace

TEST_CASE("the headers' examples compile, and those on local files run")
{
    scratch s;
    conveyor::image::make_synthetic_images({.dir = s.dir, .classes = 2, .count = 6, .width = 64, .height = 48, .threads = 1});
    conveyor::runtime rt;

    SUBCASE("keyed_source over a stub store delivers every key")
    {
        CHECK(example_keyed_source(rt) == 3);
    }
    SUBCASE("a stage of one's own sends to its sink")
    {
        CHECK(example_sink(rt, s.dir) > 0); // the images' bytes, cut at newline bytes
    }
    SUBCASE("files | map reads every file of a walk")
    {
        std::size_t n = 0;
        for (auto size : example_files(s.dir)) n += size > 0;
        CHECK(n == 6);
    }
    SUBCASE("map on the compute pool and on_stats over the file source")
    {
        std::size_t n = 0;
        for (auto size : example_map(conveyor::file::files(conveyor::file::walk(s.dir))).on(rt)) n += size > 0;
        CHECK(n == 6);
        std::size_t batches = 0;
        auto p = example_on_stats(conveyor::file::files(conveyor::file::walk(s.dir)), conveyor::map(decode));
        for (auto& b : p.on(rt)) batches += !b.empty();
        CHECK(batches == 1);
    }
    SUBCASE("decode_batches makes normalized batches, and a batch exports as DLPack")
    {
        seen = 0;
        example_decode_batches(s.dir);
        CHECK(seen == 1);
        auto pipe = conveyor::file::files(conveyor::file::walk(s.dir, {.labels = true}))
                  | conveyor::image::decode_batches({.decode = {.size = {32, 32}}}, {.size = 6});
        for (auto& b : pipe) example_to_dlpack(b);
    }
    SUBCASE("label settings build a stage")
    {
        auto stage = example_label_json();
        CHECK(stage.options().label_json.field == "json");
    }
}
