// run_tests.cpp — tests of `conveyor-bench run`: configuration parsing and its errors,
// the sweep's knee, Little's law on the synthetic source, metrics snapshots against the
// items delivered, and a short end-to-end run on an ImageFolder writing the report.
#include "run_bench.hpp"

#include <conveyor/image/synthetic.hpp>

#include <boost/json/parse.hpp>

#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace cr = conveyor::bench::run;
namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

/// A fresh directory under the system's temporary directory, removed at the end.
struct temp_dir {
    fs::path path;
    explicit temp_dir(const std::string& name)
        : path(fs::temp_directory_path() / ("conveyor-run-tests-" + name + "-" + std::to_string(::getpid())))
    {
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~temp_dir()
    {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

fs::path write_file(const fs::path& p, const std::string& text)
{
    std::ofstream(p) << text;
    return p;
}

std::string read_file(const fs::path& p)
{
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

/// The message of the config_error `f` throws ("" when it throws none).
template <class F>
std::string config_error_of(F f)
{
    try {
        f();
    } catch (const cr::config_error& e) {
        return e.what();
    }
    return {};
}

bool contains(const std::string& s, const std::string& part)
{
    return s.find(part) != std::string::npos;
}

/// A throwaway output stream for JSON lines and tables.
struct null_files {
    std::FILE* out = std::fopen("/dev/null", "w");
    std::FILE* err = std::fopen("/dev/null", "w");
    ~null_files()
    {
        std::fclose(out);
        std::fclose(err);
    }
};

/// A small ImageFolder of JPEGs (3 classes, 12 each), made once per test process.
const fs::path& image_folder()
{
    static temp_dir dir("images");
    static const bool made = [] {
        conveyor::image::make_synthetic_images({.dir = dir.path, .classes = 3, .count = 36, .width = 96, .height = 72, .threads = 2});
        return true;
    }();
    (void)made;
    return dir.path;
}

} // namespace

TEST_CASE("a valid configuration file gives the typed configuration")
{
    temp_dir t("valid");
    const auto file = write_file(t.path / "bench.json", R"({
        "storage": {"type": "fs", "dirs": [")" + t.path.string() + R"("]},
        "dataset": {"labels": true, "extensions": ["jpg", ".png"]},
        "access": "random", "work": {"kind": "batch", "size": 128, "crop": "random_resized", "batch": 32},
        "in_flight": 16, "epochs": 2, "samples": 100, "seconds": 1.5, "output": "out", "stats_interval_ms": 50
    })");
    cr::config_builder b;
    b.merge_file(file.string());
    const auto c = b.finish();
    CHECK(c.storage.type == "fs");
    REQUIRE(c.storage.dirs.size() == 1);
    CHECK(c.storage.dirs[0] == t.path.string());
    CHECK(c.dataset.extensions == std::vector<std::string>{".jpg", ".png"});
    CHECK(c.access == "random");
    CHECK(c.work.kind == "batch");
    CHECK(c.work.size == 128);
    CHECK(c.work.crop == "random_resized");
    CHECK(c.work.batch == 32);
    CHECK(c.in_flight == 16);
    CHECK(c.epochs == 2);
    CHECK(c.samples == 100);
    CHECK(c.seconds == doctest::Approx(1.5));
    CHECK(c.output == "out");
    CHECK(c.stats_interval_ms == 50);
    CHECK(c.listing_workers == 16); // a default
    // The effective configuration keeps only the chosen storage type's fields.
    const auto& storage = c.effective.at("storage").as_object();
    CHECK(storage.contains("dirs"));
    CHECK_FALSE(storage.contains("bucket"));
    CHECK_FALSE(storage.contains("latency_ms"));
}

TEST_CASE("the schema is run_config's described fields, and bench/README.md's table lists each with its type and default")
{
    // Every described field is a key, by its name, with the struct's initial value.
    const auto& schema = cr::schema();
    REQUIRE(schema.size() == 33);
    CHECK(schema.front().path == "storage.type");
    CHECK(cr::find_field("storage.credentials.session_token") != nullptr);
    CHECK(cr::find_field("storage.credentials.session_token")->storage_type == "s3");
    CHECK(cr::find_field("work.crop")->default_value == json::value("center"));
    CHECK(cr::find_field("storage.latency_ms")->default_value == json::value(10));
    CHECK(cr::find_field("work.size")->kind == cr::field_kind::integer);
    CHECK(cr::find_field("effective") == nullptr);
    CHECK(cr::find_field("origin") == nullptr);

    // The README's rows, in order: | `path` | type | `default` | meaning |
    const std::string readme = read_file(fs::path(CONVEYOR_SOURCE_DIR) / "bench" / "README.md");
    std::istringstream lines(readme.substr(readme.find("### Fields")));
    std::vector<std::vector<std::string>> rows;
    for (std::string line; std::getline(lines, line);) {
        if (!line.starts_with("| `")) {
            if (!rows.empty()) break;
            continue;
        }
        std::vector<std::string> cells;
        std::size_t start = 1;
        for (int i = 0; i < 3; ++i) {
            const auto bar = line.find(" | ", start);
            std::string cell = line.substr(start, bar - start);
            while (!cell.empty() && cell.front() == ' ') cell.erase(cell.begin());
            if (cell.size() >= 2 && cell.front() == '`' && cell.back() == '`') cell = cell.substr(1, cell.size() - 2);
            cells.push_back(cell);
            start = bar + 3;
        }
        rows.push_back(cells);
    }
    REQUIRE(rows.size() == schema.size());
    for (std::size_t i = 0; i < rows.size(); ++i) {
        INFO("README row ", i, ": ", rows[i][0]);
        CHECK(rows[i][0] == schema[i].path);
        std::string kind(cr::kind_name(schema[i].kind));
        kind = kind.substr(kind.find(' ') + 1);                                   // "a string" -> "string"
        if (kind.starts_with("non-negative ")) kind = kind.substr(13);            // "integer", "number"
        if (kind.find(" (") != std::string::npos) kind = kind.substr(0, kind.find(" (")); // "boolean"
        CHECK(rows[i][1] == kind);
        CHECK(json::parse(rows[i][2]) == schema[i].default_value);
    }
}

TEST_CASE("an unknown key names the file, the key path and the closest valid key")
{
    temp_dir t("unknown");
    const auto file = write_file(t.path / "bench.json", R"({"storage": {"type": "s3", "bukcet": "data"}})");
    cr::config_builder b;
    const auto msg = config_error_of([&] { b.merge_file(file.string()); });
    CHECK(contains(msg, file.string()));
    CHECK(contains(msg, "\"storage.bukcet\""));
    CHECK(contains(msg, "did you mean \"storage.bucket\""));

    const auto top = config_error_of([&] { cr::config_builder().merge(json::parse(R"({"in_flihgt": 4})"), "x.json"); });
    CHECK(contains(top, "x.json"));
    CHECK(contains(top, "did you mean \"in_flight\""));
    // Nothing close: the valid keys are listed.
    const auto far = config_error_of([&] { cr::config_builder().merge(json::parse(R"({"work": {"zzzzzzzz": 1}})"), "x.json"); });
    CHECK(contains(far, "valid keys of \"work\""));
    CHECK(contains(far, "kind"));
}

TEST_CASE("a value of the wrong type names the key, what was expected and what was given")
{
    temp_dir t("type");
    const auto file = write_file(t.path / "bench.json", R"({"in_flight": "many"})");
    cr::config_builder b;
    const auto msg = config_error_of([&] { b.merge_file(file.string()); });
    CHECK(contains(msg, file.string()));
    CHECK(contains(msg, "in_flight"));
    CHECK(contains(msg, "expected a non-negative integer"));
    CHECK(contains(msg, "got a string (\"many\")"));

    CHECK(contains(config_error_of([] { cr::config_builder().merge(json::parse(R"({"storage": {"dirs": "/data"}})"), "f.json"); }),
                   "storage.dirs: expected a list of strings, got a string"));
    CHECK(contains(config_error_of([] { cr::config_builder().merge(json::parse(R"({"storage": {"dirs": ["/a", 3]}})"), "f.json"); }),
                   "storage.dirs[1]: expected a string, got an integer"));
    CHECK(contains(config_error_of([] { cr::config_builder().merge(json::parse(R"({"epochs": 1.5})"), "f.json"); }), "whole number"));
    CHECK(contains(config_error_of([] { cr::config_builder().merge(json::parse(R"({"in_flight": -3})"), "f.json"); }), "negative"));
    CHECK(contains(config_error_of([] { cr::config_builder().merge(json::parse(R"({"work": 3})"), "f.json"); }),
                   "work: expected an object, got an integer"));
    // Not JSON at all: the line and column.
    const auto bad = write_file(t.path / "bad.json", "{\n  \"in_flight\": 4,\n  // a comment\n}");
    CHECK(contains(config_error_of([&] { cr::config_builder().merge_file(bad.string()); }), "bad.json:3:"));
}

TEST_CASE("--set overrides any field, parsing the value as JSON where it parses")
{
    temp_dir t("set");
    cr::config_builder b;
    b.merge(json::parse(R"({"storage": {"type": "fs", "dirs": ["/nowhere"]}, "in_flight": 4})"), "bench.json");
    b.set("in_flight=32");
    b.set("storage.dirs=" + t.path.string()); // a plain string for a list: a list of one
    b.set("output=123");                       // a number for a string field: the text
    b.set(R"(work={"kind": "decode", "size": 64})");
    b.set("seconds=0.25");
    const auto c = b.finish();
    CHECK(c.in_flight == 32);
    CHECK(c.storage.dirs == std::vector<std::string>{t.path.string()});
    CHECK(c.output == "123");
    CHECK(c.work.kind == "decode");
    CHECK(c.work.size == 64);
    CHECK(c.seconds == doctest::Approx(0.25));
    CHECK(b.given().at("in_flight") == "--set in_flight=32");

    CHECK(contains(config_error_of([&] { b.set("in_fligt=3"); }), "--set in_fligt=3: unknown key \"in_fligt\" (did you mean \"in_flight\"?)"));
    CHECK(contains(config_error_of([&] { b.set("in_flight=x"); }), "--set in_flight=x: in_flight: expected a non-negative integer"));
    CHECK(contains(config_error_of([&] { b.set("in_flight"); }), "expected key.sub=value"));
    // Choosing another storage type drops the fields of the one before.
    b.set("storage.type=synthetic");
    b.set("work.kind=read");
    CHECK(b.finish().storage.type == "synthetic");
    CHECK(b.finish().storage.dirs.empty());
}

TEST_CASE("missing sources and inconsistent fields are configuration errors that say what to do")
{
    CHECK(contains(config_error_of([] { cr::config_builder().finish(); }), "no storage: give --config FILE"));
    CHECK(contains(config_error_of([] {
                       cr::config_builder b;
                       b.merge(json::parse(R"({"storage": {"type": "fs", "dirs": ["/no/such/dir/here"]}})"), "bench.json");
                       b.finish();
                   }),
                   "storage.dirs[0]: \"/no/such/dir/here\": no such directory (set in bench.json)"));
    CHECK(contains(config_error_of([] {
                       cr::config_builder b;
                       b.set("storage.type=s3");
                       b.finish();
                   }),
                   "storage.bucket is empty"));
    CHECK(contains(config_error_of([] {
                       cr::config_builder b;
                       b.merge(json::parse(R"({"storage": {"type": "s3", "bucket": "b", "dirs": ["/x"]}})"), "bench.json");
                       b.finish();
                   }),
                   "bench.json: storage.dirs is for storage.type \"fs\", but storage.type is \"s3\""));
    CHECK(contains(config_error_of([] {
                       cr::config_builder b;
                       b.set("storage.type=synthetic");
                       b.set("access=randm");
                       b.finish();
                   }),
                   "did you mean \"random\""));
    CHECK(contains(config_error_of([] {
                       cr::config_builder b;
                       b.set("storage.type=synthetic");
                       b.set("work.kind=decode");
                       b.finish();
                   }),
                   "needs images"));
    // Dataset files are located by the library's one rule for URLs (scheme without case).
    CHECK(contains(config_error_of([] {
                       cr::config_builder b;
                       b.set("storage.type=synthetic");
                       b.set("dataset.classes=S3://b/classes.json");
                       b.finish();
                   }),
                   "dataset.classes: a classes file must be local (\"S3://b/classes.json\")"));
    CHECK(contains(config_error_of([] {
                       cr::config_builder b;
                       b.set("storage.type=synthetic");
                       b.set("dataset.index=s3:b/index.json");
                       b.finish();
                   }),
                   "dataset.index: "));
    CHECK(contains(config_error_of([] {
                       cr::config_builder b;
                       b.set("storage.type=synthetic");
                       b.set("dataset.index=file:///no/such/index.json");
                       b.finish();
                   }),
                   "dataset.index: \"file:///no/such/index.json\": no such file"));
    // An empty folder: found when listing, before anything runs.
    temp_dir t("empty");
    null_files null;
    CHECK(contains(config_error_of([&] {
                       cr::execute({.sets = {"storage.type=fs", "storage.dirs=" + t.path.string(), "output="}, .quiet = true}, null.out, null.err);
                   }),
                   "no files to read in " + t.path.string()));
}

TEST_CASE("the run subcommand exits with status 2 on a configuration error")
{
    CLI::App app;
    auto run = cr::add_run_subcommands(app);
    const char* argv[] = {"conveyor-bench", "run", "--set", "storage.type=fs", "--set", "storage.dirs=/no/such/dir/here"};
    app.parse(6, const_cast<char**>(argv));
    CHECK(run() == 2);
}

TEST_CASE("the sweep's knee is the smallest value reaching 95% of the best throughput")
{
    CHECK(cr::find_knee({1, 4, 16, 64, 256}, {100, 400, 1530, 1590, 1600}) == 2u);
    CHECK(cr::find_knee({1, 4, 16, 64, 256}, {100, 400, 1500, 1590, 1600}) == 3u); // 1500 < 0.95 * 1600
    CHECK(cr::find_knee({64, 1, 16}, {1000, 10, 990}) == 2u);                        // order of the runs does not matter
    CHECK(cr::find_knee({1, 2}, {0, 0}) == std::nullopt);
    CHECK(cr::find_knee({}, {}) == std::nullopt);
    CHECK(cr::littles_law_bound(16, 0.010) == doctest::Approx(1600));
    CHECK(cr::littles_law_bound(16, 0) == 0);

    const auto s = cr::parse_sweep("in_flight=1,4,16");
    CHECK(s.field == "in_flight");
    CHECK(s.values == std::vector<double>{1, 4, 16});
    CHECK(cr::parse_sweep("storage.latency_ms=0.5,2").values == std::vector<double>{0.5, 2});
    CHECK(contains(config_error_of([] { cr::parse_sweep("in_fligt=1,2"); }), "did you mean \"in_flight\""));
    CHECK(contains(config_error_of([] { cr::parse_sweep("access=1,2"); }), "only numeric fields"));
    CHECK(contains(config_error_of([] { cr::parse_sweep("in_flight=1,2.5"); }), "\"2.5\" is not a non-negative integer"));
}

TEST_CASE("on a source of known latency, throughput follows Little's law")
{
    null_files null;
    const double latency_s = 0.010;
    const auto o = cr::execute({.sets = {"storage.type=synthetic", "storage.latency_ms=10", "storage.items=100000", "storage.size=1024",
                                         "seconds=0.4", "output="},
                                .sweep = "in_flight=1,4,16",
                                .quiet = true},
                               null.out, null.err);
    REQUIRE(o.sweep);
    REQUIRE(o.sweep->points.size() == 3);
    for (const auto& p : o.sweep->points) {
        INFO("in_flight " << p.value << ": " << p.items_per_s << " items/s, mean latency " << p.mean_latency_ms << " ms");
        // Little's law with the latency measured (a loaded machine fires timers late, so
        // the configured 10 ms is only a floor): throughput = in flight / latency.
        CHECK(p.mean_latency_ms >= 0.99 * latency_s * 1e3);
        CHECK(p.items_per_s < 1.2 * p.value / latency_s);
        CHECK(p.items_per_s > 0.8 * p.littles_law_items_per_s);
        CHECK(p.items_per_s < 1.2 * p.littles_law_items_per_s);
    }
    REQUIRE(o.sweep->knee);
    CHECK(o.sweep->points[*o.sweep->knee].value == 16);
    // One JSON line per point's epoch, one per point, one summary.
    CHECK(o.json_lines.size() == 3 + 3 + 1);
    CHECK(contains(o.json_lines.back(), "\"bench\":\"run-sweep\""));
    CHECK(contains(o.json_lines.back(), "\"knee_value\":16"));
}

TEST_CASE("metrics snapshots agree with the items delivered")
{
    null_files null;
    const auto o = cr::execute({.sets = {"storage.type=synthetic", "storage.latency_ms=2", "storage.items=300", "storage.size=512",
                                         "in_flight=16", "stats_interval_ms=10", "epochs=2", "output="},
                                .quiet = true},
                               null.out, null.err);
    REQUIRE(o.runs.size() == 1);
    REQUIRE(o.runs[0].epochs.size() == 2);
    for (const auto& e : o.runs[0].epochs) {
        CHECK(e.items == 300);
        CHECK(e.bytes == 300 * 512);
        REQUIRE(e.final.stages.size() == 1);
        const auto& src = e.final.stages[0];
        CHECK(src.is_source);
        CHECK(src.items == 300);
        CHECK(src.bytes == 300 * 512);
        CHECK(src.latency.count == 300);
        CHECK(e.final.delivered == 300);
        REQUIRE(!e.series.empty());
        std::uint64_t prev = 0;
        for (const auto& s : e.series) {
            REQUIRE(s.stages.size() == 1);
            CHECK(s.stages[0].items >= prev);
            CHECK(s.stages[0].items <= 300);
            CHECK(s.delivered <= s.stages[0].items);
            prev = s.stages[0].items;
        }
    }
    CHECK(o.runs[0].items() == 600);
}

TEST_CASE("a run on an ImageFolder writes results.jsonl and report.html with every figure")
{
    const fs::path& images = image_folder();
    temp_dir out("e2e");
    null_files null;
    const auto o = cr::execute({.sets = {"storage.type=fs", "storage.dirs=" + images.string(), "work.kind=batch", "work.size=32",
                                         "work.batch=8", "in_flight=8", "stats_interval_ms=5", "output=" + out.path.string()},
                                .quiet = true},
                               null.out, null.err);
    REQUIRE(o.runs.size() == 1);
    CHECK(o.runs[0].epochs[0].items == 36);
    const auto& stages = o.runs[0].epochs[0].final.stages;
    REQUIRE(stages.size() == 2);
    CHECK(stages[0].name == "files");
    CHECK(stages[1].name == "decode_batches");

    const std::string results = read_file(out.path / "results.jsonl");
    CHECK(std::count(results.begin(), results.end(), '\n') == static_cast<std::ptrdiff_t>(o.json_lines.size()));
    const auto line = json::parse(o.json_lines.front()).as_object();
    CHECK(line.at("items").as_int64() == 36);
    CHECK(line.contains("latency_p99_ms"));
    CHECK(line.contains("decode_batches_busy"));
    const std::string html = read_file(out.path / "report.html");
    for (const char* id : {"throughput", "latency-cdf", "shares", "summary", "config", "machine"})
        CHECK_MESSAGE(contains(html, std::string("id=\"") + id + "\""), id);
    CHECK_FALSE(contains(html, "id=\"sweep\""));
}

TEST_CASE("the random-reads case sweeps in-flight counts over random reads")
{
    const fs::path& images = image_folder();
    temp_dir out("case");
    null_files null;
    const auto o = cr::execute({.sets = {"storage.type=fs", "storage.dirs=" + images.string(), "samples=40", "output=" + out.path.string()},
                                .case_name = "random-reads",
                                .quiet = true},
                               null.out, null.err);
    REQUIRE(o.sweep);
    CHECK(o.sweep->field == "in_flight");
    REQUIRE(o.sweep->points.size() == 4);
    for (const auto& r : o.runs) {
        CHECK(r.config.access == "random");
        CHECK(r.items() == 40);
        CHECK(r.epochs[0].final.stages[0].name == "get");
    }
    const std::string html = read_file(out.path / "report.html");
    CHECK(contains(html, "id=\"sweep\""));
    CHECK(contains(html, "knee"));
    CHECK(contains(config_error_of([] { cr::execute({.case_name = "random-read"}); }), "did you mean \"random-reads\""));
    CHECK(contains(config_error_of([] { cr::execute({.case_name = "loader"}); }), "no storage"));
}

TEST_CASE("every sample configuration in examples/bench parses")
{
    const fs::path dir = fs::path(CONVEYOR_SOURCE_DIR) / "examples" / "bench";
    REQUIRE(fs::is_directory(dir));
    temp_dir data("samples");
    int n = 0;
    for (const auto& f : fs::directory_iterator(dir)) {
        if (f.path().extension() != ".json") continue;
        INFO(f.path().string());
        cr::invocation inv{.config_file = f.path().string()};
        cr::config_builder probe;
        probe.merge_file(f.path().string());
        if (cr::lookup(probe.json(), "storage.type")->as_string() == "fs") inv.sets.push_back("storage.dirs=" + data.path.string());
        const auto c = cr::configure(inv).finish();
        CHECK(!c.storage.type.empty());
        ++n;
    }
    CHECK(n >= 3);
}
