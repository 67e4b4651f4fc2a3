// run_config.cpp — parsing and checking `conveyor-bench run` configurations (see run_config.hpp).
#include "run_config.hpp"

#include <conveyor/core/error.hpp>
#include <conveyor/core/location.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/stream_parser.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <type_traits>

namespace conveyor::bench::run {

namespace json = boost::json;
namespace fs = std::filesystem;

namespace {

// Which storage type each of storage_config's fields is for; checked against its
// description when the schema is made.
const std::vector<std::pair<std::string_view, std::string_view>> storage_types = {
    {"dirs", "fs"},     {"bucket", "s3"},      {"prefixes", "s3"}, {"endpoint", "s3"},        {"region", "s3"},
    {"anonymous", "s3"}, {"credentials", "s3"}, {"items", "synthetic"}, {"size", "synthetic"}, {"latency_ms", "synthetic"},
};

template <class T>
constexpr field_kind kind_of()
{
    if constexpr (std::is_same_v<T, bool>) return field_kind::boolean;
    else if constexpr (std::is_integral_v<T>) {
        static_assert(std::is_unsigned_v<T>, "the bench's integers are non-negative");
        return field_kind::integer;
    } else if constexpr (std::is_floating_point_v<T>) return field_kind::number;
    else if constexpr (std::is_same_v<T, std::string>) return field_kind::string;
    else {
        static_assert(std::is_same_v<T, std::vector<std::string>>, "a bench field is a string, a number, a boolean or a list of strings");
        return field_kind::string_list;
    }
}

/// The leaves of described struct `x`, below `prefix`, with their kinds and values.
template <class T>
void add_fields(std::vector<field_spec>& out, const T& x, const std::string& prefix, std::string_view storage_type)
{
    using members = boost::describe::describe_members<T, boost::describe::mod_public>;
    boost::mp11::mp_for_each<members>([&](auto m) {
        using M = std::remove_cvref_t<decltype(x.*m.pointer)>;
        const std::string path = prefix.empty() ? std::string(m.name) : prefix + "." + m.name;
        std::string_view type = storage_type;
        if (prefix == "storage")
            for (const auto& [name, t] : storage_types)
                if (name == m.name) type = t;
        if constexpr (conveyor::detail::described_struct<M>) add_fields(out, x.*m.pointer, path, type);
        else {
            json::value v = conveyor::detail::option_to_json(x.*m.pointer);
            // A whole number's default reads as one (10, not 1E1) in reports and --help.
            if (v.is_double() && v.as_double() == std::floor(v.as_double()) && std::abs(v.as_double()) < 1e15)
                v = static_cast<std::int64_t>(v.as_double());
            out.push_back({path, kind_of<M>(), std::move(v), type});
        }
    });
}

const std::vector<field_spec> fields = [] {
    std::vector<field_spec> out;
    add_fields(out, run_config{}, "", "");
    for (const auto& [name, type] : storage_types) {
        const auto names = conveyor::detail::option_names<storage_config>();
        if (std::find(names.begin(), names.end(), name) == names.end())
            throw std::logic_error("run_config.cpp: storage_types names \"" + std::string(name) + "\", no field of storage_config");
    }
    return out;
}();

std::vector<std::string> split_path(std::string_view p)
{
    std::vector<std::string> parts;
    std::size_t start = 0;
    for (;;) {
        const auto dot = p.find('.', start);
        parts.emplace_back(p.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
        if (dot == std::string_view::npos) return parts;
        start = dot + 1;
    }
}

/// Whether `prefix` names an object of the schema (some field lies below it).
bool is_object_path(std::string_view prefix)
{
    return std::any_of(fields.begin(), fields.end(), [&](const field_spec& f) {
        return f.path.size() > prefix.size() && f.path.starts_with(prefix) && f.path[prefix.size()] == '.';
    });
}

/// The keys valid directly below `prefix` ("" : the top level).
std::vector<std::string> keys_below(std::string_view prefix)
{
    std::vector<std::string> out;
    for (const auto& f : fields) {
        std::string_view rest = f.path;
        if (!prefix.empty()) {
            if (!(f.path.size() > prefix.size() && f.path.starts_with(prefix) && f.path[prefix.size()] == '.')) continue;
            rest = std::string_view(f.path).substr(prefix.size() + 1);
        }
        std::string key(rest.substr(0, rest.find('.')));
        if (std::find(out.begin(), out.end(), key) == out.end()) out.push_back(std::move(key));
    }
    return out;
}

std::string join(std::string_view a, std::string_view b)
{
    return a.empty() ? std::string(b) : std::string(a) + "." + std::string(b);
}

std::string show(const json::value& v)
{
    std::string s = json::serialize(v);
    if (s.size() > 60) s = s.substr(0, 57) + "...";
    return s;
}

std::string_view json_kind_name(const json::value& v)
{
    switch (v.kind()) {
    case json::kind::null: return "null";
    case json::kind::bool_: return "a boolean";
    case json::kind::int64:
    case json::kind::uint64: return "an integer";
    case json::kind::double_: return "a number";
    case json::kind::string: return "a string";
    case json::kind::array: return "a list";
    case json::kind::object: return "an object";
    }
    return "a value";
}

json::object* object_at(json::object& root, std::string_view path, bool create)
{
    json::object* o = &root;
    for (const auto& part : split_path(path)) {
        auto it = o->find(part);
        if (it == o->end()) {
            if (!create) return nullptr;
            it = o->emplace(part, json::object()).first;
        }
        if (!it->value().is_object()) return nullptr;
        o = &it->value().as_object();
    }
    return o;
}

void put(json::object& root, std::string_view path, json::value v)
{
    const auto dot = path.rfind('.');
    json::object* parent = dot == std::string_view::npos ? &root : object_at(root, path.substr(0, dot), true);
    (*parent)[dot == std::string_view::npos ? path : path.substr(dot + 1)] = std::move(v);
}

void check_choice(const json::object& doc, const std::map<std::string, std::string>& given, std::string_view path,
                  const std::vector<std::string>& choices)
{
    const std::string value(lookup(doc, path)->as_string());
    if (std::find(choices.begin(), choices.end(), value) != choices.end()) return;
    std::string list;
    for (const auto& c : choices) list += (list.empty() ? "\"" : ", \"") + c + "\"";
    const auto it = given.find(std::string(path));
    std::string msg = (it != given.end() ? it->second + ": " : std::string()) + std::string(path) + ": \"" + value +
                      "\" is not one of " + list;
    if (const auto near = closest(value, choices); !near.empty()) msg += " (did you mean \"" + near + "\"?)";
    throw config_error(msg);
}

std::string where(const std::map<std::string, std::string>& given, const std::string& path)
{
    const auto it = given.find(path);
    return it != given.end() ? " (set in " + it->second + ")" : std::string();
}

double number_of(const json::value& v)
{
    if (v.is_double()) return v.as_double();
    if (v.is_int64()) return static_cast<double>(v.as_int64());
    return static_cast<double>(v.as_uint64());
}

} // namespace

std::string_view storage_type_of(std::string_view field)
{
    for (const auto& [name, type] : storage_types)
        if (name == field) return type;
    return {};
}

const std::vector<field_spec>& schema()
{
    return fields;
}

const field_spec* find_field(std::string_view path)
{
    for (const auto& f : fields)
        if (f.path == path) return &f;
    return nullptr;
}

std::string_view kind_name(field_kind k)
{
    switch (k) {
    case field_kind::string: return "a string";
    case field_kind::integer: return "a non-negative integer";
    case field_kind::number: return "a non-negative number";
    case field_kind::boolean: return "a boolean (true or false)";
    case field_kind::string_list: return "a list of strings";
    }
    return "a value";
}

std::string closest(std::string_view word, const std::vector<std::string>& candidates)
{
    std::string best;
    std::size_t best_d = std::string::npos;
    for (const auto& c : candidates) {
        // Levenshtein distance, one row at a time.
        std::vector<std::size_t> row(c.size() + 1);
        for (std::size_t j = 0; j <= c.size(); ++j) row[j] = j;
        for (std::size_t i = 1; i <= word.size(); ++i) {
            std::size_t diag = row[0];
            row[0] = i;
            for (std::size_t j = 1; j <= c.size(); ++j) {
                const std::size_t up = row[j];
                row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (word[i - 1] == c[j - 1] ? 0 : 1)});
                diag = up;
            }
        }
        if (row[c.size()] < best_d) {
            best_d = row[c.size()];
            best = c;
        }
    }
    const std::size_t limit = std::max<std::size_t>(2, word.size() / 3);
    return best_d <= limit ? best : std::string();
}

const json::value* lookup(const json::object& o, std::string_view path)
{
    const json::object* cur = &o;
    const auto parts = split_path(path);
    for (std::size_t i = 0; i < parts.size(); ++i) {
        const auto it = cur->find(parts[i]);
        if (it == cur->end()) return nullptr;
        if (i + 1 == parts.size()) return &it->value();
        if (!it->value().is_object()) return nullptr;
        cur = &it->value().as_object();
    }
    return nullptr;
}

config_builder::config_builder()
{
    for (const auto& f : fields) put(doc_, f.path, f.default_value);
}

json::value config_builder::checked(const field_spec& f, const json::value& v, std::string_view origin) const
{
    auto wrong = [&](std::string_view extra = {}) -> config_error {
        return config_error(std::string(origin) + ": " + f.path + ": expected " + std::string(kind_name(f.kind)) +
                            ", got " + std::string(json_kind_name(v)) + " (" + show(v) + ")" + std::string(extra));
    };
    switch (f.kind) {
    case field_kind::string:
        if (!v.is_string()) throw wrong();
        return v;
    case field_kind::boolean:
        if (!v.is_bool()) throw wrong();
        return v;
    case field_kind::integer:
        if (v.is_uint64()) return v;
        if (v.is_int64()) {
            if (v.as_int64() < 0) throw wrong(": it must not be negative");
            return json::value(static_cast<std::uint64_t>(v.as_int64()));
        }
        if (v.is_double()) {
            const double d = v.as_double();
            if (d >= 0 && d == std::floor(d) && d < 1.8e19) return json::value(static_cast<std::uint64_t>(d));
            throw wrong(d < 0 ? ": it must not be negative" : ": it must be a whole number");
        }
        throw wrong();
    case field_kind::number:
        if (!v.is_number()) throw wrong();
        if (number_of(v) < 0) throw wrong(": it must not be negative");
        return v;
    case field_kind::string_list:
        if (!v.is_array()) throw wrong();
        for (std::size_t i = 0; i < v.as_array().size(); ++i)
            if (!v.as_array()[i].is_string())
                throw config_error(std::string(origin) + ": " + f.path + "[" + std::to_string(i) +
                                   "]: expected a string, got " + std::string(json_kind_name(v.as_array()[i])) + " (" +
                                   show(v.as_array()[i]) + ")");
        return v;
    }
    return v;
}

void config_builder::reset_other_storage(std::string_view type)
{
    for (const auto& f : fields) {
        if (f.storage_type.empty() || f.storage_type == type) continue;
        put(doc_, f.path, f.default_value);
        given_.erase(std::string(f.path));
    }
}

void config_builder::set_value(std::string_view path, json::value v, std::string_view origin)
{
    if (const field_spec* f = find_field(path)) {
        json::value good = checked(*f, v, origin);
        if (f->path == "storage.type") reset_other_storage(good.as_string());
        put(doc_, path, std::move(good));
        given_[std::string(path)] = std::string(origin);
        return;
    }
    if (is_object_path(path)) {
        if (!v.is_object())
            throw config_error(std::string(origin) + ": " + std::string(path) + ": expected an object, got " +
                               std::string(json_kind_name(v)) + " (" + show(v) + ")");
        merge_object(v.as_object(), std::string(path), origin);
        return;
    }
    // Unknown: suggest the closest key at the deepest level that exists.
    const auto dot = path.rfind('.');
    const std::string parent(dot == std::string_view::npos ? std::string_view() : path.substr(0, dot));
    const std::string_view key = dot == std::string_view::npos ? path : path.substr(dot + 1);
    std::string msg = std::string(origin) + ": unknown key \"" + std::string(path) + "\"";
    if (parent.empty() || is_object_path(parent)) {
        const auto near = closest(key, keys_below(parent));
        if (!near.empty()) msg += " (did you mean \"" + join(parent, near) + "\"?)";
        else {
            std::string list;
            for (const auto& k : keys_below(parent)) list += (list.empty() ? "" : ", ") + k;
            msg += "; valid keys" + (parent.empty() ? std::string(" at the top level") : " of \"" + parent + "\"") + ": " + list;
        }
    } else {
        std::vector<std::string> all;
        for (const auto& f : fields) all.emplace_back(f.path);
        if (const auto near = closest(path, all); !near.empty()) msg += " (did you mean \"" + near + "\"?)";
    }
    throw config_error(msg);
}

void config_builder::merge_object(const json::object& o, const std::string& prefix, std::string_view origin)
{
    // The storage type first: choosing it resets the other types' fields, which must not
    // undo fields given beside it.
    if (prefix == "storage")
        if (const auto it = o.find("type"); it != o.end()) set_value("storage.type", it->value(), origin);
    for (const auto& kv : o) {
        if (prefix == "storage" && kv.key() == "type") continue;
        set_value(join(prefix, kv.key()), kv.value(), origin);
    }
}

void config_builder::merge(const json::value& v, std::string_view origin)
{
    if (!v.is_object())
        throw config_error(std::string(origin) + ": a configuration is a JSON object, got " + std::string(json_kind_name(v)));
    merge_object(v.as_object(), "", origin);
}

void config_builder::merge_file(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in) throw config_error(path + ": cannot open the configuration file (" + std::string(std::strerror(errno)) + ")");
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    boost::system::error_code ec;
    json::value v = json::parse(text, ec);
    if (ec) {
        // Line and column of the error: Boost.JSON's parser stops where it failed.
        json::stream_parser p;
        std::size_t used = p.write_some(text.data(), text.size(), ec);
        std::size_t line = 1, col = 1;
        for (std::size_t i = 0; i < used && i < text.size(); ++i) {
            if (text[i] == '\n') ++line, col = 1;
            else ++col;
        }
        throw config_error(path + ":" + std::to_string(line) + ":" + std::to_string(col) + ": not valid JSON (" + ec.message() +
                           "; comments are not JSON: see bench/README.md)");
    }
    merge(v, path);
}

void config_builder::set(std::string_view assignment)
{
    const auto eq = assignment.find('=');
    if (eq == std::string_view::npos || eq == 0)
        throw config_error("--set " + std::string(assignment) + ": expected key.sub=value");
    const std::string path(assignment.substr(0, eq));
    const std::string text(assignment.substr(eq + 1));
    const std::string origin = "--set " + std::string(assignment);
    boost::system::error_code ec;
    json::value v = json::parse(text, ec);
    if (ec) v = json::string(text); // not JSON: the text itself
    if (const field_spec* f = find_field(path)) {
        if (f->kind == field_kind::string && !v.is_string()) v = json::string(text); // --set storage.bucket=123
        if (f->kind == field_kind::string_list && v.is_string()) v = json::array{v}; // --set storage.dirs=/data
    }
    set_value(path, std::move(v), origin);
}

run_config config_builder::finish() const
{
    run_config c;
    const auto& d = doc_;
    auto str = [&](std::string_view p) { return std::string(lookup(d, p)->as_string()); };
    std::string origins;
    for (const auto& [p, o] : given_)
        if (origins.find(o) == std::string::npos && !o.starts_with("--set")) origins += (origins.empty() ? "" : ", ") + o;
    c.origin = origins.empty() ? "defaults and --set" : origins;

    if (str("storage.type").empty())
        throw config_error("no storage: give --config FILE, or for example --set storage.type=fs --set 'storage.dirs=[\"/data/train\"]' "
                           "(or storage.type=s3 with storage.bucket, or storage.type=synthetic)");
    check_choice(d, given_, "storage.type", {"fs", "s3", "synthetic"});
    for (const auto& [p, o] : given_)
        if (const field_spec* f = find_field(p); f && !f->storage_type.empty() && f->storage_type != str("storage.type"))
            throw config_error(o + ": " + p + " is for storage.type \"" + std::string(f->storage_type) + "\", but storage.type is \"" +
                               str("storage.type") + "\"");
    check_choice(d, given_, "access", {"sequential", "random", "shards"});
    check_choice(d, given_, "work.kind", {"read", "decode", "batch"});
    check_choice(d, given_, "work.crop", {"none", "center", "random_resized"});

    // The checked document into the typed configuration: its keys are run_config's fields.
    try {
        conveyor::detail::read_options(json::value(d), c);
    } catch (const conveyor::detail::option_error& e) {
        const auto it = given_.find(e.path());
        throw config_error((it != given_.end() ? it->second + ": " : std::string()) + e.what());
    }
    for (auto& e : c.dataset.extensions)
        if (!e.empty() && e.front() != '.') e.insert(e.begin(), '.');
    c.listing_workers = std::max<std::size_t>(1, c.listing_workers);

    auto at_least_one = [&](std::string_view p, std::uint64_t v) {
        if (v == 0) throw config_error(std::string(p) + ": must be at least 1" + where(given_, std::string(p)));
    };
    at_least_one("in_flight", c.in_flight);
    at_least_one("epochs", c.epochs);
    at_least_one("work.batch", c.work.batch);
    at_least_one("work.size", c.work.size);
    at_least_one("stats_interval_ms", c.stats_interval_ms);

    // Sources that are not there.
    if (c.storage.type == "fs") {
        if (c.storage.dirs.empty() && c.dataset.shards.empty())
            throw config_error("storage.dirs is empty: give the data directories, e.g. --set 'storage.dirs=[\"/data/train\"]'");
        for (std::size_t i = 0; i < c.storage.dirs.size(); ++i) {
            std::error_code ec;
            if (!fs::is_directory(c.storage.dirs[i], ec))
                throw config_error("storage.dirs[" + std::to_string(i) + "]: \"" + c.storage.dirs[i] + "\": " +
                                   (fs::exists(c.storage.dirs[i], ec) ? "not a directory" : "no such directory") +
                                   where(given_, "storage.dirs"));
        }
    } else if (c.storage.type == "s3") {
        if (c.storage.bucket.empty() && c.dataset.shards.empty())
            throw config_error("storage.bucket is empty: storage.type \"s3\" needs a bucket" + where(given_, "storage.type"));
    } else {
        at_least_one("storage.items", c.storage.items);
        if (c.access == "shards") throw config_error("access \"shards\" needs shards on storage \"fs\" or \"s3\"; storage \"synthetic\" has none");
        if (c.work.kind != "read")
            throw config_error("work.kind \"" + c.work.kind + "\" needs images; storage \"synthetic\" gives random bytes: use work.kind \"read\"");
    }
    for (const char* p : {"dataset.classes", "dataset.index"}) {
        const std::string v = str(p);
        if (v.empty()) continue;
        // Where the file lives, by the library's one rule for URLs.
        std::optional<conveyor::location> at;
        try {
            at.emplace(v);
        } catch (const conveyor::error& e) {
            throw config_error(std::string(p) + ": " + e.ctx().detail + where(given_, p));
        }
        if (!at->is_local()) {
            if (std::string_view(p) == "dataset.classes")
                throw config_error("dataset.classes: a classes file must be local (\"" + v + "\")" + where(given_, p));
            continue;
        }
        std::error_code ec;
        if (!fs::is_regular_file(at->path(), ec)) throw config_error(std::string(p) + ": \"" + v + "\": no such file" + where(given_, p));
    }

    // The effective configuration: every field, less other storage types' fields.
    c.effective = d;
    json::object& storage = c.effective["storage"].as_object();
    for (const auto& f : fields) {
        if (f.storage_type.empty() || f.storage_type == c.storage.type) continue;
        const auto rest = f.path.substr(std::string_view("storage.").size());
        storage.erase(rest.substr(0, rest.find('.')));
    }
    if (storage.contains("credentials")) {
        // Never show a secret in reports.
        auto& cr = storage["credentials"].as_object();
        for (const char* k : {"secret_access_key", "session_token"})
            if (!cr[k].as_string().empty()) cr[k] = "(given)";
    }
    return c;
}

sweep_spec parse_sweep(std::string_view text)
{
    const auto eq = text.find('=');
    if (eq == std::string_view::npos || eq == 0 || eq + 1 == text.size())
        throw config_error("--sweep " + std::string(text) + ": expected field=v1,v2,... e.g. in_flight=1,4,16,64");
    sweep_spec s;
    s.field = std::string(text.substr(0, eq));
    const field_spec* f = find_field(s.field);
    if (!f) {
        std::vector<std::string> numeric;
        for (const auto& g : fields)
            if (g.kind == field_kind::integer || g.kind == field_kind::number) numeric.emplace_back(g.path);
        std::string msg = "--sweep: unknown field \"" + s.field + "\"";
        if (const auto near = closest(s.field, numeric); !near.empty()) msg += " (did you mean \"" + near + "\"?)";
        throw config_error(msg);
    }
    if (f->kind != field_kind::integer && f->kind != field_kind::number)
        throw config_error("--sweep: " + s.field + " is " + std::string(kind_name(f->kind)) + "; only numeric fields can be swept");
    std::string_view rest = text.substr(eq + 1);
    while (!rest.empty()) {
        const auto comma = rest.find(',');
        const std::string item(rest.substr(0, comma));
        double v = 0;
        const auto r = std::from_chars(item.data(), item.data() + item.size(), v);
        if (item.empty() || r.ec != std::errc() || r.ptr != item.data() + item.size() || v < 0 ||
            (f->kind == field_kind::integer && v != std::floor(v)))
            throw config_error("--sweep " + s.field + ": \"" + item + "\" is not " + std::string(kind_name(f->kind)));
        s.values.push_back(v);
        if (comma == std::string_view::npos) break;
        rest = rest.substr(comma + 1);
    }
    if (s.values.empty()) throw config_error("--sweep " + s.field + ": no values");
    return s;
}

} // namespace conveyor::bench::run
