// run_config.hpp — the configuration of `conveyor-bench run`: one JSON file (plus `--set`
// overrides) describing a storage benchmark, checked field by field against a schema so
// that every mistake is named (key path, file, what was expected, the closest valid key).
#ifndef CONVEYOR_BENCH_RUN_CONFIG_HPP
#define CONVEYOR_BENCH_RUN_CONFIG_HPP

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

/// One field of the schema: its dotted path, kind, default and a line of documentation.
struct field_spec {
    std::string_view path;
    field_kind kind;
    std::string_view default_json; ///< the default, as JSON text
    std::string_view doc;
    std::string_view storage_type = {}; ///< only meaningful for this `storage.type` ("" : any)
};

/// Every field a configuration may hold, in the order bench/README.md documents them.
const std::vector<field_spec>& schema();

/// The schema's field at `path`, or null.
const field_spec* find_field(std::string_view path);

/// "a string", "an integer", ... (for error messages and bench/README.md).
std::string_view kind_name(field_kind k);

/// S3 credentials given in the configuration (all empty: the S3 module's default chain).
struct credentials_config {
    std::string access_key_id, secret_access_key, session_token;
};

/// Where the data is.
struct storage_config {
    std::string type; ///< "fs", "s3" or "synthetic"
    // fs
    std::vector<std::string> dirs;
    // s3
    std::string bucket;
    std::vector<std::string> prefixes;
    std::string endpoint, region;
    credentials_config credentials;
    bool anonymous = false;
    // synthetic: `items` keys, each `size` bytes, each read taking `latency_ms`
    std::uint64_t items = 0;
    std::uint64_t size = 0;
    double latency_ms = 0;
};

/// How the dataset is laid out.
struct dataset_config {
    bool labels = true;                  ///< classes from first-level directories / key prefixes
    std::string classes;                 ///< a classes file (ids for the class directories)
    std::string index;                   ///< an index file: local path or s3:// URL
    std::vector<std::string> extensions; ///< keep only these file endings (empty: all)
    std::vector<std::string> shards;     ///< shard specs for access "shards" (brace patterns, index .json, s3://prefix/)
};

/// What to do with each sample.
struct work_config {
    std::string kind;   ///< "read", "decode" or "batch"
    std::uint32_t size = 224;
    std::string crop;   ///< "none", "center" or "random_resized"
    std::size_t batch = 64;
    std::size_t threads = 0; ///< compute threads (0: the runtime's default)
};

/// A whole benchmark.
struct run_config {
    storage_config storage;
    dataset_config dataset;
    std::size_t listing_workers = 16;
    std::string access;  ///< "sequential", "random" or "shards"
    work_config work;
    std::size_t in_flight = 64;
    std::size_t epochs = 1;
    std::uint64_t samples = 0; ///< items per epoch at most (0: all)
    double seconds = 0;        ///< each epoch stops after this long (0: no limit)
    std::string output;
    std::uint64_t stats_interval_ms = 100;
    std::size_t io_threads = 0;
    std::uint64_t seed = 1;

    boost::json::object effective; ///< the configuration after defaults and overrides
    std::string origin;            ///< where it came from (the file, "--set", "defaults")
};

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
