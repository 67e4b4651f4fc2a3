// run_config.hpp — the configuration of `conveyor-bench run`: one JSON file (plus `--set`
// overrides) describing a storage benchmark, checked field by field against a schema so
// that every mistake is named (key path, file, what was expected, the closest valid key).
// The schema is `run_config` itself: its fields, described with Boost.Describe, are the
// keys, their types the kinds and their initial values the defaults; each field's meaning
// is its comment here (bench/README.md's table lists them, checked by run_tests.cpp).
#ifndef CONVEYOR_BENCH_RUN_CONFIG_HPP
#define CONVEYOR_BENCH_RUN_CONFIG_HPP

#include <conveyor/core/detail/describe_json.hpp>

#include <boost/describe/class.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor::bench::run {

/// A mistake in a configuration (unknown key, wrong type, missing source): the command
/// exits with status 2 and prints `what()`, which names the key and where it came from.
class config_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// What kind of value a field holds.
enum class field_kind { string, integer, number, boolean, string_list };

/// One field of the schema: its dotted path, kind and default (from `run_config`'s description).
struct field_spec {
    std::string path;
    field_kind kind;
    boost::json::value default_value;
    std::string_view storage_type = {}; ///< only meaningful for this `storage.type` ("" : any)
};

/// Every field a configuration may hold, in `run_config`'s order (bench/README.md's).
const std::vector<field_spec>& schema();

/// The schema's field at `path`, or null.
const field_spec* find_field(std::string_view path);

/// "a string", "an integer", ... (for error messages and bench/README.md).
std::string_view kind_name(field_kind k);

/// S3 credentials given in the configuration (all empty: the S3 module's default chain).
struct credentials_config {
    std::string access_key_id;     ///< s3: explicit credentials (all empty: the S3 module's default chain: environment, ~/.aws files)
    std::string secret_access_key; ///< s3: explicit credentials
    std::string session_token;     ///< s3: explicit credentials (optional)
};

/// Where the data is. Each field but `type` is for one storage type (`storage_type_of`).
struct storage_config {
    /// where the data is: "fs" (local directories), "s3" (a bucket) or "synthetic" (a fake source of known latency)
    std::string type;
    std::vector<std::string> dirs;     ///< fs: data directories (their first-level subdirectories are the classes)
    std::string bucket;                ///< s3: the bucket
    /// s3: key prefixes to read (their first-level "subdirectories" are the classes); empty: the whole bucket
    std::vector<std::string> prefixes;
    std::string endpoint;              ///< s3: endpoint URL, e.g. http://127.0.0.1:9000 (empty: AWS_ENDPOINT_URL, the profile, or AWS)
    std::string region;                ///< s3: region (empty: AWS_REGION, the profile, or us-east-1)
    bool anonymous = false;            ///< s3: unsigned requests (public buckets)
    credentials_config credentials;    ///< s3: explicit credentials
    std::uint64_t items = 10000;       ///< synthetic: number of keys
    std::uint64_t size = 4096;         ///< synthetic: bytes per item
    double latency_ms = 10;            ///< synthetic: how long each read waits (a timer, no CPU)
};

/// How the dataset is laid out.
struct dataset_config {
    bool labels = true;                  ///< labels from the first-level subdirectories (fs) or key prefixes (s3)
    /// a classes file {"n01440764": {"id": 0, "name": "tench"}, ...} (ids instead of sorted order)
    std::string classes;
    /// an index file (JSON array of relative paths or keys): a local path or an s3:// URL; instead of listing
    std::string index;
    std::vector<std::string> extensions; ///< keep only files / keys with these endings, e.g. [".jpg", ".JPEG"] (empty: all)
    /// access "shards": shard specs (brace patterns, an index .json, s3://bucket/prefix/); empty: the .tar files of the dirs or prefixes
    std::vector<std::string> shards;
};

/// What to do with each sample.
struct work_config {
    /// what to do per sample: "read" (bytes only), "decode" (decode to work.size), "batch" (decode into batches of work.batch)
    std::string kind = "read";
    std::uint32_t size = 224;    ///< decode and batch: output side in pixels
    std::string crop = "center"; ///< decode and batch: "none", "center" or "random_resized"
    std::size_t batch = 64;      ///< batch: images per batch
    std::size_t threads = 0;     ///< decode and batch: compute threads (0: one per core)
};

/// A whole benchmark.
struct run_config {
    storage_config storage;
    dataset_config dataset;
    std::size_t listing_workers = 16; ///< listings in parallel (S3 prefixes' top-level "directories")
    /// "sequential" (the source streams every item), "random" (dataset get(i) in a random order, in_flight at once)
    /// or "shards" (tar shards through the shard source)
    std::string access = "sequential";
    work_config work;
    std::size_t in_flight = 64;            ///< reads in flight (the source's concurrency)
    std::size_t epochs = 1;                ///< passes over the data
    std::uint64_t samples = 0;             ///< items per epoch at most (0: all)
    double seconds = 0;                    ///< stop each epoch after this many seconds (0: no limit)
    std::string output = "conveyor-bench-out"; ///< folder for report.html and results.jsonl (empty: write neither)
    std::uint64_t stats_interval_ms = 100; ///< how often metrics are sampled for the time series
    std::size_t io_threads = 0;            ///< the runtime's I/O threads (0: its default)
    std::uint64_t seed = 1;                ///< seed of the random order and the augmentations

    boost::json::object effective; ///< the configuration after defaults and overrides (not a key)
    std::string origin;            ///< where it came from (the file, "--set", "defaults"; not a key)
};

// The keys: every field but `effective` and `origin`.
BOOST_DESCRIBE_STRUCT(credentials_config, (), (access_key_id, secret_access_key, session_token))
BOOST_DESCRIBE_STRUCT(storage_config, (), (type, dirs, bucket, prefixes, endpoint, region, anonymous, credentials, items, size, latency_ms))
BOOST_DESCRIBE_STRUCT(dataset_config, (), (labels, classes, index, extensions, shards))
BOOST_DESCRIBE_STRUCT(work_config, (), (kind, size, crop, batch, threads))
BOOST_DESCRIBE_STRUCT(run_config, (), (storage, dataset, listing_workers, access, work, in_flight, epochs, samples, seconds, output,
                                       stats_interval_ms, io_threads, seed))

/// The storage type a field of `storage_config` is for ("" : every type), by its name.
std::string_view storage_type_of(std::string_view field);

/** Builds configurations: defaults, then a file, then overrides, each checked against
    the schema as it is applied; `finish()` gives the typed configuration. */
class config_builder {
public:
    config_builder();

    /// Merges a JSON object's fields in; `origin` names it in errors (a file name).
    void merge(const boost::json::value& v, std::string_view origin);
    /// Parses and merges a JSON file. Throws `config_error` naming the file.
    void merge_file(const std::string& path);
    /// Applies `key.sub=value` (value parsed as JSON where it parses, else a string).
    void set(std::string_view assignment);
    /// Sets one field (path checked) to `v`; `origin` names it in errors.
    void set_value(std::string_view path, boost::json::value v, std::string_view origin);

    /// The configuration so far (every field, defaults included).
    const boost::json::object& json() const noexcept { return doc_; }
    /// Fields set explicitly (not defaults), each with where it was set.
    const std::map<std::string, std::string>& given() const noexcept { return given_; }

    /// The typed configuration, after the checks that look at several fields together.
    run_config finish() const;

private:
    void merge_object(const boost::json::object& o, const std::string& prefix, std::string_view origin);
    boost::json::value checked(const field_spec& f, const boost::json::value& v, std::string_view origin) const;

    void reset_other_storage(std::string_view type);

    boost::json::object doc_;
    std::map<std::string, std::string> given_; // path -> origin
};

/** Parses `field=v1,v2,...` for `--sweep`: the field must be numeric in the schema; each
    value a number. Throws `config_error`. */
struct sweep_spec {
    std::string field;
    std::vector<double> values;
};
sweep_spec parse_sweep(std::string_view text);

/// The closest of `candidates` to `word` (edit distance), or "" when none is close.
std::string closest(std::string_view word, const std::vector<std::string>& candidates);

/// Reads the value at a dotted path of `o` (null when absent).
const boost::json::value* lookup(const boost::json::object& o, std::string_view path);

} // namespace conveyor::bench::run

#endif
