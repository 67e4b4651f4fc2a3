// conveyor/file/impl/index.ipp — directory walks, index and classes files (see index.hpp).
#ifndef CONVEYOR_FILE_IMPL_INDEX_IPP
#define CONVEYOR_FILE_IMPL_INDEX_IPP

#include <conveyor/file/index.hpp>

#include <conveyor/core/detail/ascii.hpp>
#include <conveyor/core/detail/read_file.hpp>
#include <conveyor/core/detail/replace_file.hpp>

#include <conveyor/core/error.hpp>
#include <conveyor/file/error.hpp>

#include <boost/json.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <fstream>
#include <sstream>

namespace conveyor::file {

CONVEYOR_DECL std::string listing::full_path(std::size_t i) const
{
    const auto& p = entries.at(i).path;
    if (root.empty() || p.empty() || p.front() == '/') return p;
    // Plain concatenation: std::filesystem's operator/ costs allocations per call, and
    // this runs once per file read.
    const std::string& r = root.native();
    std::string out;
    out.reserve(r.size() + 1 + p.size());
    out += r;
    if (!r.empty() && r.back() != '/') out += '/';
    out += p;
    return out;
}

namespace detail {

[[noreturn]] CONVEYOR_DECL void throw_file_error(std::error_code ec, const std::string& where, std::string detail = {})
{
    throw conveyor::error(ec, {.stage = "file listing", .key = "", .where = where, .offset = -1, .detail = std::move(detail)});
}

/// The longest path a system call takes (PATH_MAX, less its NUL): no entry can be longer.
inline constexpr std::size_t max_path_bytes = 4095;

/// Throws `std::errc::invalid_argument` when `path`, entry `i` of a list read from `where`
/// ("" for one given in memory), cannot name a file: see `conveyor::detail::index_entry_problem`.
CONVEYOR_DECL void check_entry(std::size_t i, std::string_view path, const std::string& where)
{
    const auto why = conveyor::detail::index_entry_problem(path, max_path_bytes);
    if (!why.empty())
        throw_file_error(std::make_error_code(std::errc::invalid_argument), where,
                         conveyor::detail::index_entry_name(i, path) + " " + why);
}

/// Class ids above this are refused (no dataset has 16 million classes; a typo might).
inline constexpr std::int64_t max_class_id = std::int64_t{1} << 24;

/// Assigns labels from the first path component; drops entries with no class.
CONVEYOR_DECL void apply_labels(listing& l, const walk_options& o)
{
    std::map<std::string, std::int64_t, std::less<>> ids;
    if (!o.classes.empty()) {
        std::int64_t max_id = -1;
        for (const auto& c : o.classes) {
            // Ids index a vector of names: bound them (a classes file is input, not trusted).
            if (c.id < 0 || c.id >= max_class_id)
                throw_file_error(make_error_code(errc::classes_file_invalid), c.dir,
                                 "class id " + std::to_string(c.id) + " is outside [0, " + std::to_string(max_class_id) + ")");
            ids.emplace(c.dir, c.id);
            max_id = std::max(max_id, c.id);
        }
        l.classes.assign(static_cast<std::size_t>(max_id + 1), std::string());
        for (const auto& c : o.classes) l.classes[static_cast<std::size_t>(c.id)] = c.dir;
    } else {
        for (const auto& e : l.entries) {
            const auto slash = e.path.find('/');
            if (slash != std::string::npos) ids.emplace(e.path.substr(0, slash), 0);
        }
        std::int64_t next = 0;
        for (auto& [dir, id] : ids) {
            id = next++;
            l.classes.push_back(dir);
        }
    }
    std::erase_if(l.entries, [&](entry& e) {
        const auto slash = e.path.find('/');
        if (slash == std::string::npos) return true;
        auto it = ids.find(std::string_view(e.path).substr(0, slash));
        if (it == ids.end()) return true;
        e.label = it->second;
        return false;
    });
}

} // namespace detail

CONVEYOR_DECL bool has_extension(std::string_view path, const std::vector<std::string>& extensions)
{
    if (extensions.empty()) return true;
    // The file name's extension, as std::filesystem::path::extension() takes it in the
    // generic format, without making a path of every key listed.
    std::string_view name = path.substr(path.rfind('/') + 1); // npos + 1 == 0: the whole path
    std::string_view ext;
    if (name != "." && name != "..")
        if (const auto dot = name.rfind('.'); dot != std::string_view::npos && dot != 0) ext = name.substr(dot);
    return std::any_of(extensions.begin(), extensions.end(),
                       [&](const std::string& want) { return conveyor::detail::iequals(want, ext); });
}

CONVEYOR_DECL bool escapes_root(std::string_view rel)
{
    const std::filesystem::path p(rel);
    if (p.is_absolute() || p.has_root_name()) return true;
    int depth = 0;
    for (const auto& part : p.lexically_normal()) {
        if (part == "..") {
            if (--depth < 0) return true;
        } else if (part != "." && !part.empty()) {
            ++depth;
        }
    }
    return false;
}

CONVEYOR_DECL listing walk(const std::filesystem::path& root, const walk_options& o)
{
    namespace fs = std::filesystem;
    listing l;
    l.root = root;
    std::error_code ec;
    if (!fs::is_directory(root, ec))
        detail::throw_file_error(ec ? ec : std::make_error_code(std::errc::not_a_directory), root.string(),
                                 "cannot walk: not a directory");
    fs::recursive_directory_iterator it(root, fs::directory_options::none, ec), end;
    if (ec) detail::throw_file_error(ec, root.string(), "cannot open directory");
    for (; it != end; it.increment(ec)) {
        if (ec) detail::throw_file_error(ec, it->path().string(), "cannot read directory");
        const fs::directory_entry& d = *it;
        if (!d.is_regular_file(ec) || !has_extension(d.path().native(), o.extensions)) continue;
        const auto size = d.file_size(ec);
        if (ec) detail::throw_file_error(ec, d.path().string(), "cannot stat");
        std::string rel = d.path().lexically_relative(root).generic_string();
        if (const auto why = conveyor::detail::index_entry_problem(rel, detail::max_path_bytes); !why.empty())
            detail::throw_file_error(std::make_error_code(std::errc::invalid_argument), d.path().string(),
                                     "cannot list: the path " + why);
        l.entries.push_back({std::move(rel), static_cast<std::int64_t>(size), -1});
    }
    if (ec) detail::throw_file_error(ec, root.string(), "cannot read directory");
    std::sort(l.entries.begin(), l.entries.end(), [](const entry& a, const entry& b) { return a.path < b.path; });
    if (o.labels) detail::apply_labels(l, o);
    return l;
}

CONVEYOR_DECL listing from_paths(const std::vector<std::string>& paths)
{
    listing l;
    l.entries.reserve(paths.size());
    for (std::size_t i = 0; i < paths.size(); ++i) {
        detail::check_entry(i, paths[i], "");
        l.entries.push_back({paths[i], -1, -1});
    }
    return l;
}

namespace detail {
CONVEYOR_DECL boost::json::value parse_json_file(const std::filesystem::path& file, const char* what, std::uint64_t limit,
                                                std::string_view limit_name)
{
    const auto f = conveyor::detail::read_whole_file(file, limit, limit_name);
    if (f.ec == std::errc::is_a_directory)
        throw_file_error(make_error_code(errc::not_a_regular_file), file.string(), std::string(what) + " is a directory");
    if (f.ec) throw_file_error(f.ec, file.string(), std::string("cannot read the ") + what + ": " + f.why);
    boost::system::error_code jec;
    boost::json::value v = boost::json::parse(f.text, jec);
    if (jec) throw_file_error(make_error_code(errc::invalid_json), file.string(), std::string(what) + ": " + jec.message());
    return v;
}

CONVEYOR_DECL void write_text_file(const std::filesystem::path& file, const std::string& text)
{
    conveyor::detail::replace_file(file, text, "file listing");
}
} // namespace detail

CONVEYOR_DECL listing read_index(const std::filesystem::path& index_file, const std::filesystem::path& root,
                                 const walk_options& o)
{
    const boost::json::value v = detail::parse_json_file(index_file, "index", o.max_index_bytes, "walk_options::max_index_bytes");
    if (!v.is_array()) detail::throw_file_error(make_error_code(errc::index_not_array), index_file.string());
    const auto& arr = v.get_array();
    listing l;
    l.root = root;
    l.entries.reserve(arr.size());
    for (std::size_t i = 0; i < arr.size(); ++i) {
        if (!arr[i].is_string())
            detail::throw_file_error(make_error_code(errc::index_entry_not_string), index_file.string(),
                                     "entry " + std::to_string(i) + " is " +
                                         conveyor::detail::printable(boost::json::serialize(arr[i])));
        const std::string_view given = arr[i].get_string();
        detail::check_entry(i, given, index_file.string());
        // Normalised ("./a/b", "x/../a/b" → "a/b"), so that labels come from the directory
        // that is really read.
        std::string p = std::filesystem::path(given).lexically_normal().generic_string();
        if (escapes_root(p))
            detail::throw_file_error(make_error_code(errc::path_escapes_root), index_file.string(),
                                     conveyor::detail::index_entry_name(i, given) + " leaves the root " + root.string());
        if (!has_extension(p, o.extensions)) continue;
        l.entries.push_back({std::move(p), -1, -1});
    }
    if (o.labels) detail::apply_labels(l, o);
    return l;
}

CONVEYOR_DECL std::string detail::index_text(const std::vector<std::string_view>& paths)
{
    boost::json::array arr;
    arr.reserve(paths.size());
    for (const auto p : paths) arr.emplace_back(p);
    return boost::json::serialize(arr) + "\n";
}

CONVEYOR_DECL void write_index(const listing& l, const std::filesystem::path& index_file)
{
    std::vector<std::string_view> paths;
    paths.reserve(l.entries.size());
    for (const auto& e : l.entries) paths.emplace_back(e.path);
    detail::write_text_file(index_file, detail::index_text(paths));
}

CONVEYOR_DECL std::vector<class_info> read_classes(const std::filesystem::path& classes_file)
{
    const boost::json::value v = detail::parse_json_file(classes_file, "classes file", conveyor::detail::default_max_index_bytes, "detail::default_max_index_bytes");
    if (!v.is_object()) detail::throw_file_error(make_error_code(errc::classes_file_invalid), classes_file.string(), "not a JSON object");
    std::vector<class_info> out;
    for (const auto& [key, val] : v.get_object()) {
        const auto* obj = val.if_object();
        const auto* id = obj ? obj->if_contains("id") : nullptr;
        if (!id || !id->is_int64() || id->get_int64() < 0)
            detail::throw_file_error(make_error_code(errc::classes_file_invalid), classes_file.string(),
                                     "class \"" + conveyor::detail::printable(key) + "\" has no non-negative integer \"id\"");
        if (id->get_int64() >= detail::max_class_id)
            detail::throw_file_error(make_error_code(errc::classes_file_invalid), classes_file.string(),
                                     "class \"" + conveyor::detail::printable(key) + "\" has id " + std::to_string(id->get_int64()) +
                                         ", above the limit of " + std::to_string(detail::max_class_id));
        const auto* name = obj->if_contains("name");
        out.push_back({std::string(key), id->get_int64(), name && name->is_string() ? std::string(name->get_string()) : std::string(key)});
    }
    std::sort(out.begin(), out.end(), [](const class_info& a, const class_info& b) { return a.id < b.id; });
    return out;
}

CONVEYOR_DECL std::string detail::classes_text(const std::vector<std::string>& classes, const std::map<std::string, std::string>& names)
{
    boost::json::object obj;
    for (std::size_t i = 0; i < classes.size(); ++i) {
        const auto& dir = classes[i];
        if (dir.empty()) continue;
        auto it = names.find(dir);
        obj[dir] = boost::json::object{{"id", static_cast<std::int64_t>(i)}, {"name", it != names.end() ? it->second : dir}};
    }
    return boost::json::serialize(obj) + "\n";
}

CONVEYOR_DECL void write_classes(const listing& l, const std::filesystem::path& classes_file,
                                 const std::map<std::string, std::string>& names)
{
    detail::write_text_file(classes_file, detail::classes_text(l.classes, names));
}

} // namespace conveyor::file

#endif
