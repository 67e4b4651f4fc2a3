// make_shards: packs a dataset into webdataset tar shards (each sample a `jpg` member, its
// bytes as they are, and a `cls` member, the class id in decimal), on local disk or S3,
// with a dataset index, optionally in a full random order across the whole dataset.
//
// Inputs (one of):
//   --folder DIR                       an ImageFolder: class subdirectories, sorted, id = position
//   --list INDEX.json --root DIR [--classes CLASSES.json]
//                                      an index of paths (make_index's) and a classes file
//   --tar TRAIN.tar                    ImageNet's train archive: a tar of per-class tars
//                                      (n01440764.tar, ...), indexed in place, never extracted
//
//   make_shards --tar ILSVRC2012_img_train.tar --output out/shard-%06d.tar --maxsize 1e9
//               --shuffle --seed 1 --workers 8 --index out/index.json
//
// Samples are read back in the chosen order, --reads-in-flight per worker: files whole
// through the file source (io_uring), a tar's members by byte offset through
// file::ranged_file; several shards are written at once; the shard boundaries
// are planned first from the sizes alone, so the output is the same bytes for a given input
// and seed whatever --workers is. Memory: the index (a key and four numbers a sample),
// plus the samples in flight.
#include "progress.hpp"

#include <conveyor/core/location.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/core/stages.hpp>
#include <conveyor/file/chunks.hpp>
#include <conveyor/file/index.hpp>
#include <conveyor/file/source.hpp>
#include <conveyor/s3/client.hpp>
#include <conveyor/s3/config.hpp>
#include <conveyor/shard/detail/tar.hpp>
#include <conveyor/shard/index.hpp>
#include <conveyor/shard/writer.hpp>

#include <CLI/CLI.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <future>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace cv = conveyor;
namespace sd = conveyor::shard::detail;

namespace {

/// One sample to write: where its bytes lie and what it is called.
struct item {
    std::uint32_t source = 0; ///< file it is read from (an index into `dataset::files`)
    std::uint64_t offset = 0; ///< where its bytes start in that file
    std::uint64_t size = 0;
    std::int64_t label = -1;
    std::string key;
};

struct dataset {
    std::vector<std::string> files; ///< what `item::source` indexes
    std::vector<item> items;
    std::vector<std::string> classes;
    std::uint64_t skipped = 0;      ///< members of the outer tar that are not class tars
};

[[noreturn]] void fail(const std::string& where, std::string what, int err = 0)
{
    throw cv::error(err ? std::error_code(err, std::system_category()) : std::make_error_code(std::errc::invalid_argument),
                    {.stage = "make_shards", .key = "", .where = where, .offset = -1, .detail = std::move(what)});
}

/// A sample key from a relative path: the extension dropped, and any other dot of the base
/// name made '_' (a reader would split the name at the first dot).
std::string key_of(std::string_view rel)
{
    std::string k(rel);
    const auto slash = k.rfind('/');
    const auto base = slash == std::string::npos ? 0 : slash + 1;
    const auto dot = k.rfind('.');
    if (dot != std::string::npos && dot > base) k.resize(dot);
    for (std::size_t i = base; i < k.size(); ++i)
        if (k[i] == '.') k[i] = '_';
    return k;
}

// ---- positioned reads -----------------------------------------------------------------

/// Reads exactly `n` bytes at `offset`, or fails naming the file and offset.
void read_at(int fd, const std::string& path, std::uint64_t offset, std::byte* out, std::size_t n)
{
    std::size_t done = 0;
    while (done < n) {
        const ssize_t r = ::pread(fd, out + done, n - done, static_cast<off_t>(offset + done));
        if (r < 0) {
            if (errno == EINTR) continue;
            throw cv::error(std::error_code(errno, std::system_category()),
                            {.stage = "make_shards", .key = "", .where = path, .offset = static_cast<std::int64_t>(offset + done), .detail = "read failed"});
        }
        if (r == 0)
            throw cv::error(std::make_error_code(std::errc::io_error),
                            {.stage = "make_shards", .key = "", .where = path, .offset = static_cast<std::int64_t>(offset + done),
                             .detail = "the file ended early (it changed since it was indexed?)"});
        done += static_cast<std::size_t>(r);
    }
}

struct open_file {
    int fd = -1;
    explicit open_file(const std::string& path)
    {
        fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) fail(path, "cannot open", errno);
    }
    ~open_file()
    {
        if (fd >= 0) ::close(fd);
    }
    open_file(const open_file&) = delete;
    open_file& operator=(const open_file&) = delete;
};

// ---- inputs ---------------------------------------------------------------------------

dataset from_listing(const cv::file::listing& l)
{
    dataset d;
    d.classes = l.classes;
    d.files.reserve(l.size());
    d.items.reserve(l.size());
    for (std::size_t i = 0; i < l.size(); ++i) {
        const auto& e = l.entries[i];
        d.files.push_back(l.full_path(i));
        std::uint64_t size = 0;
        if (e.size >= 0) {
            size = static_cast<std::uint64_t>(e.size);
        } else {
            struct stat st {};
            if (::stat(d.files.back().c_str(), &st) != 0) fail(d.files.back(), "cannot stat", errno);
            size = static_cast<std::uint64_t>(st.st_size);
        }
        d.items.push_back({static_cast<std::uint32_t>(i), 0, size, e.label, key_of(e.path)});
    }
    return d;
}

/// One tar's members, walked header by header with positioned reads (data never read,
/// but for pax records and GNU long names).
struct tar_member {
    std::string name;
    std::uint64_t data = 0; ///< offset of its data in the file
    std::uint64_t size = 0;
    bool regular = false;
};

std::vector<tar_member> walk_tar(int fd, const std::string& path, std::uint64_t begin, std::uint64_t end)
{
    std::vector<tar_member> out;
    std::byte block[sd::tar_block];
    std::string long_name;
    std::vector<std::pair<std::string, std::string>> pax, global;
    for (std::uint64_t at = begin; at + sd::tar_block <= end;) {
        read_at(fd, path, at, block, sd::tar_block);
        if (sd::is_zero_block(block)) break;
        sd::tar_header h;
        if (auto why = sd::decode_tar_header(block, h); !why.empty())
            throw cv::error(std::make_error_code(std::errc::invalid_argument),
                            {.stage = "make_shards", .key = "", .where = path, .offset = static_cast<std::int64_t>(at), .detail = why});
        const std::uint64_t data = at + sd::tar_block, size = static_cast<std::uint64_t>(h.size);
        if (data + size > end)
            throw cv::error(std::make_error_code(std::errc::invalid_argument),
                            {.stage = "make_shards", .key = h.name, .where = path, .offset = static_cast<std::int64_t>(at),
                             .detail = "member of " + std::to_string(size) + " bytes runs past the end of its archive"});
        const std::uint64_t next = data + sd::tar_padded(size);
        auto read_text = [&](std::size_t limit) {
            if (size > limit)
                throw cv::error(std::make_error_code(std::errc::invalid_argument),
                                {.stage = "make_shards", .key = "", .where = path, .offset = static_cast<std::int64_t>(at), .detail = "metadata member too large"});
            std::string s(static_cast<std::size_t>(size), '\0');
            read_at(fd, path, data, reinterpret_cast<std::byte*>(s.data()), s.size());
            return s;
        };
        switch (h.kind) {
        case sd::tar_kind::gnu_long_name: {
            long_name = read_text(1 << 20);
            long_name.resize(std::strlen(long_name.c_str()));
            break;
        }
        case sd::tar_kind::pax_local:
        case sd::tar_kind::pax_global: {
            auto& recs = h.kind == sd::tar_kind::pax_local ? pax : global;
            if (h.kind == sd::tar_kind::pax_local) recs.clear();
            if (auto why = sd::parse_pax_records(read_text(1 << 20), recs); !why.empty())
                throw cv::error(std::make_error_code(std::errc::invalid_argument),
                                {.stage = "make_shards", .key = "", .where = path, .offset = static_cast<std::int64_t>(at), .detail = why});
            break;
        }
        case sd::tar_kind::gnu_sparse:
            throw cv::error(std::make_error_code(std::errc::not_supported),
                            {.stage = "make_shards", .key = h.name, .where = path, .offset = static_cast<std::int64_t>(at), .detail = "a GNU sparse member"});
        default: {
            tar_member m{h.name, data, size, h.kind == sd::tar_kind::regular};
            for (const auto* recs : {&global, &pax})
                for (const auto& [k, v] : *recs) {
                    if (k == "path") m.name = v;
                    if (k == "size") m.size = std::stoull(v);
                }
            if (!long_name.empty()) m.name = long_name;
            if (m.size != size) {
                if (data + m.size > end) fail(path, "pax size of member '" + m.name + "' runs past the end of its archive");
                out.push_back(m);
                at = data + sd::tar_padded(m.size);
                long_name.clear();
                pax.clear();
                continue;
            }
            out.push_back(std::move(m));
            long_name.clear();
            pax.clear();
        }
        }
        at = next;
    }
    return out;
}

dataset from_tar_of_tars(const std::string& path)
{
    open_file f(path);
    struct stat st {};
    if (::fstat(f.fd, &st) != 0) fail(path, "cannot stat", errno);
    const auto outer = walk_tar(f.fd, path, 0, static_cast<std::uint64_t>(st.st_size));
    dataset d;
    d.files.push_back(path);
    std::vector<const tar_member*> class_tars;
    for (const auto& m : outer) {
        if (m.regular && m.name.size() > 4 && m.name.ends_with(".tar"))
            class_tars.push_back(&m);
        else if (m.regular)
            ++d.skipped;
    }
    auto class_name = [](const tar_member* m) {
        std::string n = m->name.substr(0, m->name.size() - 4);
        if (auto s = n.rfind('/'); s != std::string::npos) n.erase(0, s + 1);
        return n;
    };
    std::sort(class_tars.begin(), class_tars.end(), [&](auto* a, auto* b) { return class_name(a) < class_name(b); });
    for (std::size_t c = 0; c < class_tars.size(); ++c) {
        const auto* ct = class_tars[c];
        d.classes.push_back(class_name(ct));
        if (c > 0 && d.classes[c] == d.classes[c - 1]) fail(path, "two class tars are named " + d.classes[c]);
        for (const auto& m : walk_tar(f.fd, path, ct->data, ct->data + ct->size)) {
            if (!m.regular) continue;
            std::string rel = m.name;
            if (auto s = rel.rfind('/'); s != std::string::npos) rel.erase(0, s + 1);
            d.items.push_back({0, m.data, m.size, static_cast<std::int64_t>(c), key_of(d.classes[c] + "/" + rel)});
        }
    }
    return d;
}

// ---- writing --------------------------------------------------------------------------

struct run_settings {
    std::string output;
    std::uint64_t max_count = 100'000;
    std::uint64_t max_size = 3'000'000'000;
    unsigned workers = 4;
    unsigned reads_in_flight = 32;
    bool fsync = false;
};

struct shared_run {
    const dataset& d;
    const std::vector<std::uint64_t>& order;  // position -> item
    const std::vector<std::uint64_t>& starts; // shard -> first position
    const run_settings& s;
    const cv::s3::client* s3;
    cv::runtime& rt;
    cv::file::ranged_file whole; // the one file of a tar of tars
    std::vector<cv::shard::index_shard> shards;
    std::atomic<std::uint64_t> next{0}, samples{0}, bytes{0};
    std::mutex mu;
    std::exception_ptr failed;
    std::atomic<bool> stop{false};
};

/// Appends sample `it` (its bytes `data`) to `w`; throws if the bytes are not what the
/// index said.
void write_sample(shared_run& r, cv::shard::writer& w, const item& it, std::span<const std::byte> data)
{
    if (data.size() != it.size)
        throw cv::error(std::make_error_code(std::errc::io_error),
                        {.stage = "make_shards", .key = it.key, .where = r.d.files[it.source], .offset = static_cast<std::int64_t>(it.offset),
                         .detail = "read " + std::to_string(data.size()) + " of " + std::to_string(it.size) + " bytes (the file changed since it was indexed?)"});
    const std::string cls = std::to_string(it.label);
    const cv::shard::field_view fields[] = {{"jpg", data}, {"cls", std::as_bytes(std::span(cls.data(), cls.size()))}};
    w.write(it.key, fields);
    r.samples.fetch_add(1, std::memory_order_relaxed);
    r.bytes.fetch_add(it.size, std::memory_order_relaxed);
}

/// The samples of positions [first, last) from files, through the file source: each file
/// whole, `reads_in_flight` at once, delivered in order (batched hand-off, no thread
/// wake-up or future per file). The sizes are the index's, so the source trusts them.
void write_from_files(shared_run& r, cv::shard::writer& w, std::uint64_t first, std::uint64_t last)
{
    cv::file::listing l;
    l.entries.reserve(last - first);
    for (std::uint64_t p = first; p < last; ++p) {
        const item& it = r.d.items[r.order[p]];
        l.entries.push_back({r.d.files[it.source], static_cast<std::int64_t>(it.size), it.label});
    }
    const std::size_t window = std::max(1u, r.s.reads_in_flight);
    auto run = cv::file::files(std::move(l), {.concurrency = window}).on(r.rt);
    for (auto& b : run) {
        if (r.stop.load(std::memory_order_relaxed)) return;
        write_sample(r, w, r.d.items[r.order[first + b.index]], b.data.span());
    }
}

/// The samples of positions [first, last) from the one tar of tars, by offset, up to
/// `reads_in_flight` ranged reads ahead of the writing, taken in order.
void write_from_tar(shared_run& r, cv::shard::writer& w, std::uint64_t first, std::uint64_t last)
{
    std::deque<std::future<cv::buffer>> reads;
    std::uint64_t next = first;
    const std::size_t window = std::max(1u, r.s.reads_in_flight);
    struct drain { // reads still in flight when this ends early point at nothing of ours, but wait them out
        std::deque<std::future<cv::buffer>>& q;
        ~drain()
        {
            for (auto& f : q)
                if (f.valid()) f.wait();
        }
    } guard{reads};
    for (std::uint64_t p = first; p < last && !r.stop.load(std::memory_order_relaxed); ++p) {
        while (next < last && reads.size() < window) {
            const item& ahead = r.d.items[r.order[next++]];
            reads.push_back(cv::asio::co_spawn(r.rt.next_io_executor(),
                                               r.whole.async_read(ahead.offset, static_cast<std::size_t>(ahead.size)),
                                               cv::asio::use_future));
        }
        cv::buffer data = reads.front().get();
        reads.pop_front();
        write_sample(r, w, r.d.items[r.order[p]], data.span());
    }
}

void write_shard(shared_run& r, std::uint64_t k)
{
    const std::uint64_t first = r.starts[k], last = k + 1 < r.starts.size() ? r.starts[k + 1] : r.order.size();
    cv::shard::writer_options o{.pattern = r.s.output, .max_count = UINT64_MAX, .max_size = UINT64_MAX, .first_shard = k};
    o.fsync = r.s.fsync;
    std::optional<cv::shard::writer> w;
    if (r.s3)
        w.emplace(o, *r.s3);
    else
        w.emplace(o);
    if (r.whole.is_open())
        write_from_tar(r, *w, first, last);
    else
        write_from_files(r, *w, first, last);
    if (r.stop.load()) return; // the writer removes its shard in progress
    w->close();
    r.shards[k] = std::move(w->index().shards.at(0));
}

void worker(shared_run& r)
{
    try {
        for (;;) {
            const std::uint64_t k = r.next.fetch_add(1);
            if (k >= r.starts.size() || r.stop.load()) return;
            write_shard(r, k);
        }
    } catch (...) {
        std::lock_guard lk(r.mu);
        if (!r.failed) r.failed = std::current_exception();
        r.stop = true;
    }
}

/// Shard URLs in the index: relative to the index's folder when the shards are in it or
/// below (so the dataset can move as a whole), else as written.
void relativize(cv::shard::dataset_index& idx, const std::string& index_path)
{
    const auto folder = std::filesystem::absolute(std::filesystem::path(index_path)).parent_path().lexically_normal();
    for (auto& s : idx.shards) {
        if (!cv::location(s.url).is_local()) continue;
        const auto abs = std::filesystem::absolute(s.url).lexically_normal();
        const auto rel = abs.lexically_relative(folder);
        if (!rel.empty() && !rel.string().starts_with("..")) s.url = rel.string();
        else s.url = abs.string();
    }
}

} // namespace

int main(int argc, char** argv)
{
    CLI::App app{"Pack a dataset into webdataset tar shards (jpg + cls), locally or on S3, with a dataset index"};
    std::string folder, list, root, classes_file, tar, index_out, endpoint, region;
    run_settings s;
    double max_size = 3e9;
    bool shuffle = false, anonymous = false;
    std::uint64_t seed = 0;
    std::uint64_t part_mb = 16;
    std::size_t io_threads = 0;
    unsigned parts_in_flight = 8;
    auto* in = app.add_option_group("input", "what to pack (one of)");
    in->add_option("--folder", folder, "an ImageFolder directory: class subdirectories, ids in sorted order");
    in->add_option("--list", list, "an index file: a JSON array of paths relative to --root (make_index's)");
    in->add_option("--tar", tar, "a tar of per-class tars (ImageNet's train archive layout), indexed in place");
    in->require_option(1);
    app.add_option("--root", root, "with --list: the directory its paths are relative to (default: the list's folder)");
    app.add_option("--classes", classes_file, "with --list: a classes file {\"n01440764\": {\"id\": 0, ...}} (default: first directories, sorted)");
    app.add_option("--output", s.output, "shard pattern: out/shard-%06d.tar or s3://bucket/prefix/shard-%06d.tar")->required();
    app.add_option("--maxcount", s.max_count, "samples per shard at most")->check(CLI::PositiveNumber)->capture_default_str();
    app.add_option("--maxsize", max_size, "data bytes per shard: a shard ends once it holds this many (webdataset's rule)")->capture_default_str();
    app.add_flag("--shuffle", shuffle, "a full random permutation of the whole dataset (else: input order)");
    app.add_option("--seed", seed, "seed of the permutation")->capture_default_str();
    app.add_option("--workers", s.workers, "shards written at once")->check(CLI::PositiveNumber)->capture_default_str();
    app.add_option("--reads-in-flight", s.reads_in_flight, "sample reads in flight per worker")->capture_default_str();
    app.add_option("--io-threads", io_threads, "the runtime's I/O threads (0: its default)")->capture_default_str();
    app.add_flag("--fsync", s.fsync, "fsync each local shard before renaming it into place");
    app.add_option("--index", index_out, "write the dataset index here (a local path)");
    app.add_option("--endpoint", endpoint, "S3 endpoint URL (default: AWS_ENDPOINT_URL, the profile, or AWS)");
    app.add_option("--region", region, "S3 region");
    app.add_flag("--anonymous", anonymous, "unsigned S3 requests");
    app.add_option("--part-MB", part_mb, "S3 multipart part size in MiB (>= 5)")->capture_default_str();
    app.add_option("--parts-in-flight", parts_in_flight, "S3 parts of one shard in flight")->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    s.max_size = static_cast<std::uint64_t>(max_size);

    try {
        const auto t0 = std::chrono::steady_clock::now();
        dataset d;
        if (!folder.empty()) {
            d = from_listing(cv::file::walk(folder, {.labels = true}));
        } else if (!list.empty()) {
            if (root.empty()) root = std::filesystem::path(list).parent_path().string();
            cv::file::walk_options wo{.labels = true};
            if (!classes_file.empty()) wo.classes = cv::file::read_classes(classes_file);
            d = from_listing(cv::file::read_index(list, root, wo));
        } else {
            d = from_tar_of_tars(tar);
        }
        const double t_index = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (d.items.empty()) fail(folder + list + tar, "no samples found");

        std::vector<std::uint64_t> order(d.items.size());
        for (std::uint64_t i = 0; i < order.size(); ++i) order[i] = i;
        if (shuffle) {
            // Fisher-Yates with splitmix64: the same permutation on every platform.
            cv::detail::splitmix64 rng(seed);
            for (std::uint64_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
        }
        std::vector<std::uint64_t> sizes(order.size());
        std::uint64_t total = 0;
        for (std::uint64_t p = 0; p < order.size(); ++p) {
            const auto& it = d.items[order[p]];
            sizes[p] = it.size + std::to_string(it.label).size();
            total += it.size;
        }
        const auto starts = cv::shard::plan_shards(sizes, s.max_count, s.max_size);

        cv::runtime rt({.io_threads = io_threads});
        std::optional<cv::s3::client> client;
        if (cv::location(cv::shard::format_shard_name(s.output, 0)).is_s3()) {
            cv::s3::config_options co;
            co.endpoint_url = endpoint;
            co.region = region;
            co.anonymous = anonymous;
            if (!endpoint.empty()) co.style = cv::s3::addressing::path;
            cv::s3::client_options o;
            o.upload_part_size = std::max<std::uint64_t>(part_mb, 5) << 20;
            o.upload_parts_in_flight = std::max(1u, parts_in_flight);
            o.http.max_connections = std::max<std::size_t>(s.workers * o.upload_parts_in_flight, 8);
            client.emplace(rt, co, o);
        }

        shared_run r{d, order, starts, s, client ? &*client : nullptr, rt, {}, {}, {}, {}, {}, {}, {}, {}};
        if (d.files.size() == 1 && !tar.empty()) r.whole = cv::file::ranged_file(rt, tar);
        r.shards.resize(starts.size());
        examples::progress_line bar("make_shards", d.items.size());
        std::vector<std::thread> threads;
        const unsigned n = std::min<std::uint64_t>(s.workers, starts.size());
        for (unsigned i = 0; i < n; ++i) threads.emplace_back(worker, std::ref(r));
        while (r.samples.load() < d.items.size() && !r.stop.load()) {
            bar.update(r.samples.load(), r.bytes.load());
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        for (auto& t : threads) t.join();
        bar.update(r.samples.load(), r.bytes.load());
        bar.finish();
        if (r.failed) std::rethrow_exception(r.failed);

        cv::shard::dataset_index idx;
        idx.shards = std::move(r.shards);
        std::uint64_t shard_bytes = 0;
        for (const auto& sh : idx.shards) shard_bytes += sh.bytes;
        if (!index_out.empty()) {
            relativize(idx, index_out);
            cv::shard::write_index(index_out, idx);
        }
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr,
                     "make_shards: %zu samples, %zu classes, %zu shards, %.3f GB of samples (%.3f GB of shards) in %.2f s "
                     "(index %.2f s): %.1f MB/s, %.0f samples/s%s%s%s\n",
                     d.items.size(), d.classes.size(), idx.shards.size(), total / 1e9, shard_bytes / 1e9, secs, t_index,
                     shard_bytes / 1e6 / secs, d.items.size() / secs, shuffle ? ", shuffled (seed " : "",
                     shuffle ? (std::to_string(seed) + ")").c_str() : "", index_out.empty() ? "" : (" -> " + index_out).c_str());
        if (d.skipped) std::fprintf(stderr, "make_shards: %llu members of %s are not class tars (*.tar) and were not packed\n",
                                    static_cast<unsigned long long>(d.skipped), tar.c_str());
        std::printf("{\"tool\": \"make_shards\", \"samples\": %zu, \"shards\": %zu, \"sample_bytes\": %llu, \"shard_bytes\": %llu, "
                    "\"seconds\": %.3f, \"index_seconds\": %.3f, \"MBps\": %.1f, \"shuffle\": %s, \"workers\": %u}\n",
                    d.items.size(), idx.shards.size(), static_cast<unsigned long long>(total), static_cast<unsigned long long>(shard_bytes),
                    secs, t_index, shard_bytes / 1e6 / secs, shuffle ? "true" : "false", s.workers);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "make_shards: %s\n", e.what());
        return 1;
    }
}
