// make_index: writes the index (a JSON array of paths relative to the root, or of object
// keys relative to the bucket) and, for an ImageFolder layout, the classes file, for a
// directory of samples or an S3 prefix: index once, then train many times from the index.
//
//   make_index --root /data/imagenet/train --ext .JPEG --index train.json --classes classes.json
//   make_index --root s3://imagenet/train/ --endpoint http://127.0.0.1:9000 --ext .JPEG \
//              --workers 32 --index s3://imagenet/index/train.json --classes classes.json
//
// Either output may be a local path or an s3://bucket/key URL (uploaded with PutObject).
// Exit status: 0 written; 1 failed (a bad URL, a bucket or directory that cannot be
// listed, an output that cannot be written); 2 bad usage; 3 nothing matched (no object or
// file under the root, none with a wanted ending, or none in a class directory), nothing
// written.
#include "progress.hpp"

#include <conveyor/core/location.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/file/index.hpp>
#include <conveyor/s3/client.hpp>
#include <conveyor/s3/config.hpp>
#include <conveyor/s3/source.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

namespace {

namespace cv = conveyor;
namespace cf = conveyor::file;
namespace s3 = conveyor::s3;

constexpr int exit_failed = 1;
constexpr int exit_usage = 2;
constexpr int exit_nothing_matched = 3;

struct args {
    std::string root, index_out, classes_out;
    std::vector<std::string> exts;
    // S3 only
    std::string endpoint, region, profile, credentials_file;
    unsigned workers = 16;
    bool anonymous = false;
};

double seconds_since(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// ".JPEG, .png" (or "any ending" without a filter), for messages.
std::string endings(const std::vector<std::string>& exts)
{
    if (exts.empty()) return "any ending";
    std::string s;
    for (const auto& e : exts) s += (s.empty() ? "" : ", ") + (e.empty() ? std::string("(no extension)") : e);
    return s;
}

int index_directory(const args& a)
{
    const auto t0 = std::chrono::steady_clock::now();
    const std::string index_out = a.index_out.empty() ? a.root + "/index.json" : a.index_out;
    const cf::listing l = cf::walk(a.root, {.extensions = a.exts, .labels = !a.classes_out.empty()});
    // The index must not list itself when written inside the root.
    cf::listing indexed = l;
    std::erase_if(indexed.entries, [&](const cf::entry& e) { return (l.root / e.path) == index_out; });
    if (indexed.entries.empty()) {
        const cf::listing all = cf::walk(a.root);
        if (all.entries.empty()) std::fprintf(stderr, "make_index: no files under %s; nothing written\n", a.root.c_str());
        else
            std::fprintf(stderr, "make_index: none of the %zu files under %s has %s%s; nothing written\n", all.size(), a.root.c_str(),
                         endings(a.exts).c_str(), a.classes_out.empty() ? "" : " inside a class directory (a first-level directory)");
        return exit_nothing_matched;
    }
    cf::write_index(indexed, index_out);
    if (!a.classes_out.empty()) cf::write_classes(l, a.classes_out);
    std::uint64_t bytes = 0;
    for (const auto& e : indexed.entries) bytes += static_cast<std::uint64_t>(e.size);
    std::fprintf(stderr, "make_index: %zu files (%.2f GB) under %s -> %s", indexed.size(), static_cast<double>(bytes) / 1e9,
                 a.root.c_str(), index_out.c_str());
    if (!a.classes_out.empty()) std::fprintf(stderr, "; %zu classes -> %s", l.classes.size(), a.classes_out.c_str());
    std::fprintf(stderr, " (%.2f s)\n", seconds_since(t0));
    return 0;
}

int index_prefix(const args& a)
{
    const auto t0 = std::chrono::steady_clock::now();
    const cv::location root(a.root, cv::location_kind::s3); // throws naming the URL when it is not one
    // The prefix is a directory, as a local root is: s3://b/train lists train/..., not training/...
    std::string prefix = root.key();
    if (!prefix.empty() && prefix.back() != '/') prefix += '/';
    const std::string where = "s3://" + root.bucket() + "/" + prefix;
    const std::string index_out = a.index_out.empty() ? "index.json" : a.index_out;

    s3::config_options co;
    co.endpoint_url = a.endpoint;
    co.region = a.region;
    co.profile = a.profile;
    co.credentials_file = a.credentials_file;
    co.anonymous = a.anonymous;
    s3::client_options o;
    o.http.max_connections = std::max(1u, a.workers);
    cv::runtime rt({.io_threads = 1});
    s3::client c(rt, co, o);
    std::fprintf(stderr, "make_index: listing %s with %u workers (%s)\n", where.c_str(), a.workers, c.cfg().describe().c_str());

    // The listing counts every object (before the ending filter) on the I/O thread that
    // lists; this thread waits in list_objects meanwhile, and reads the totals after.
    std::size_t listed = 0;
    std::uint64_t listed_bytes = 0;
    s3::object_list l;
    {
        examples::progress_line shown("make_index: listed objects");
        l = s3::list_objects(c, root.bucket(), prefix,
                             {.parallel = std::max(1u, a.workers), .extensions = a.exts, .on_progress = [&](std::size_t n, std::uint64_t b) {
                                  listed = n;
                                  listed_bytes = b;
                                  shown.update(n, b);
                              }});
    }
    const double list_seconds = seconds_since(t0);
    if (listed == 0) {
        std::fprintf(stderr, "make_index: no objects under %s (keys are case-sensitive; is the prefix right?); nothing written\n",
                     where.c_str());
        return exit_nothing_matched;
    }
    // The outputs must not list themselves when written under the prefix (a second run).
    const std::size_t with_outputs = l.size();
    for (const auto* out : {&index_out, &a.classes_out}) {
        if (out->empty()) continue;
        const cv::location u(*out);
        if (u.is_s3() && u.bucket() == l.bucket) std::erase_if(l.objects, [&](const s3::object_info& obj) { return obj.key == u.key(); });
    }
    const std::size_t outputs = with_outputs - l.size();
    const std::size_t by_ending = l.size();
    if (by_ending == 0) {
        std::fprintf(stderr, "make_index: none of the %zu objects under %s has %s (compared without regard to case); nothing written\n",
                     listed, where.c_str(), endings(a.exts).c_str());
        return exit_nothing_matched;
    }
    if (!a.classes_out.empty()) {
        s3::assign_labels(l, prefix);
        if (l.empty()) {
            std::fprintf(stderr,
                         "make_index: none of the %zu objects under %s with %s lies in a class \"directory\" (a first key "
                         "component below the prefix); nothing written\n",
                         by_ending, where.c_str(), endings(a.exts).c_str());
            return exit_nothing_matched;
        }
    }
    s3::write_index(c, l, index_out);
    if (!a.classes_out.empty()) s3::write_classes(c, l, a.classes_out);

    std::uint64_t bytes = 0;
    for (const auto& obj : l.objects)
        if (obj.size > 0) bytes += static_cast<std::uint64_t>(obj.size);
    std::fprintf(stderr, "make_index: %s: listed %zu objects (%.2f GB) in %.2f s; kept %zu (%.2f GB)", where.c_str(), listed,
                 static_cast<double>(listed_bytes) / 1e9, list_seconds, l.size(), static_cast<double>(bytes) / 1e9);
    if (!a.exts.empty()) std::fprintf(stderr, ", %zu without %s", listed - with_outputs, endings(a.exts).c_str());
    if (outputs) std::fprintf(stderr, ", %zu of this run's own outputs", outputs);
    if (!a.classes_out.empty()) std::fprintf(stderr, ", %zu outside the class directories", by_ending - l.size());
    std::fprintf(stderr, " -> %s", index_out.c_str());
    if (!a.classes_out.empty()) std::fprintf(stderr, "; %zu classes -> %s", l.classes.size(), a.classes_out.c_str());
    std::fprintf(stderr, " (%.2f s)\n", seconds_since(t0));
    return 0;
}

} // namespace

int main(int argc, char** argv)
{
    CLI::App app{"Write an index file (a JSON array of paths relative to a directory, or of object keys relative to "
                 "the bucket) and a classes file, for a directory or an S3 prefix"};
    args a;
    app.add_option("--root", a.root, "directory to index (walked recursively, sorted), or s3://bucket/prefix/ (listed, sorted by key; "
                   "the prefix is a directory: s3://b/train means the keys under train/)")
        ->required();
    app.add_option("--ext", a.exts, "keep only these endings, e.g. --ext .JPEG .png (compared without regard to case)");
    app.add_option("--index", a.index_out,
                   "where to write the index: a local path or s3://bucket/key (default: ROOT/index.json for a directory, "
                   "./index.json for an S3 prefix)");
    app.add_option("--classes", a.classes_out,
                   "also write a classes file {\"dir\": {\"id\": N, \"name\": \"dir\"}} from the first-level directories "
                   "(ImageFolder layout; for S3 the first key component below the prefix): a local path or s3://bucket/key. "
                   "Files outside a class directory are then left out of the index");
    auto* s3_opts = app.add_option_group("S3", "for an s3:// root or output (credentials: the S3 module's chain)");
    s3_opts->add_option("--endpoint", a.endpoint, "S3 endpoint URL (default: AWS_ENDPOINT_URL, the profile, or AWS)");
    s3_opts->add_option("--region", a.region, "region (default: AWS_REGION, the profile, or us-east-1)");
    s3_opts->add_option("--profile", a.profile, "profile of ~/.aws/credentials and ~/.aws/config (default: AWS_PROFILE)");
    s3_opts->add_option("--credentials", a.credentials_file, "a JSON credentials file (aws_access_key_id, aws_secret_access_key, ...)");
    s3_opts->add_option("--workers", a.workers, "\"directories\" of the prefix listed at once")
        ->check(CLI::Range(1u, 1024u))
        ->capture_default_str();
    s3_opts->add_flag("--anonymous", a.anonymous, "send unsigned requests (public buckets)");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        const int rc = app.exit(e);
        return rc == 0 ? 0 : exit_usage;
    }

    try {
        const cv::location root(a.root);
        if (root.is_s3()) return index_prefix(a);
        // A local root with an output in S3 needs the client too: write locally, then upload.
        auto on_s3 = [](const std::string& out) { return !out.empty() && cv::location(out).is_s3(); };
        if (on_s3(a.index_out) || on_s3(a.classes_out)) {
            std::fprintf(stderr, "make_index: an s3:// output needs an s3:// root (index keys are relative to the bucket); "
                                 "write the index of a directory locally\n");
            return exit_usage;
        }
        args local = a;
        local.root = root.path(); // file:// taken off
        return index_directory(local);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "make_index: %s\n", e.what());
        return exit_failed;
    }
}
