// conveyor/shard/impl/index.ipp — the dataset index's JSON form, read and written (see
// index.hpp).
#ifndef CONVEYOR_SHARD_IMPL_INDEX_IPP
#define CONVEYOR_SHARD_IMPL_INDEX_IPP

#include <conveyor/shard/index.hpp>

#include <conveyor/core/detail/read_file.hpp>
#include <conveyor/core/detail/replace_file.hpp>
#include <conveyor/core/error.hpp>

#include <boost/json/stream_parser.hpp>
#include <boost/json/value.hpp>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <system_error>

namespace conveyor::shard {

namespace detail {

inline constexpr std::string_view index_format = "conveyor-shard-index";
inline constexpr std::int64_t index_version = 1;

[[noreturn]] inline void bad_index(const std::string& where, std::string detail)
{
    throw conveyor::error(std::make_error_code(std::errc::invalid_argument),
                          {.stage = "shard index", .key = "", .where = where, .offset = -1, .detail = std::move(detail)});
}

/// Reads one index's values, each check naming the JSON path of the value it refuses.
struct index_parser {
    const std::string& where;

    [[noreturn]] void fail(const std::string& path, std::string_view what) const { bad_index(where, path + ": " + std::string(what)); }

    const boost::json::value& member(const boost::json::object& o, const std::string& path, std::string_view name) const
    {
        const auto* v = o.if_contains(name);
        if (!v) fail(path, "missing member \"" + std::string(name) + "\"");
        return *v;
    }
    std::uint64_t number(const boost::json::value& v, const std::string& path) const
    {
        if (v.is_uint64()) return v.get_uint64();
        if (v.is_int64() && v.get_int64() >= 0) return static_cast<std::uint64_t>(v.get_int64());
        fail(path, "expected a non-negative integer");
    }
    std::uint64_t number(const boost::json::object& o, const std::string& path, std::string_view name) const
    {
        return number(member(o, path, name), path + "." + std::string(name));
    }
    std::string text(const boost::json::object& o, const std::string& path, std::string_view name) const
    {
        const auto& v = member(o, path, name);
        const std::string p = path + "." + std::string(name);
        if (!v.is_string()) fail(p, "expected a string");
        std::string s(v.get_string());
        const auto why = conveyor::detail::index_entry_problem(s, 65536);
        if (!why.empty()) fail(p, "the string " + why);
        return s;
    }
    const boost::json::object& object(const boost::json::value& v, const std::string& path) const
    {
        if (!v.is_object()) fail(path, "expected an object");
        return v.get_object();
    }
    const boost::json::array& array(const boost::json::value& v, const std::string& path) const
    {
        if (!v.is_array()) fail(path, "expected an array");
        return v.get_array();
    }
};

inline void append_json_string(std::string& out, std::string_view s, const char* what)
{
    out += '"';
    for (std::size_t i = 0; i < s.size();) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
            ++i;
        } else if (c < 0x20) {
            char esc[8];
            std::snprintf(esc, sizeof esc, "\\u%04x", c);
            out += esc;
            ++i;
        } else if (c < 0x80) {
            out += static_cast<char>(c);
            ++i;
        } else {
            char32_t cp;
            const std::size_t n = conveyor::detail::utf8_sequence(s.substr(i), cp);
            if (n == 0)
                throw conveyor::error(std::make_error_code(std::errc::illegal_byte_sequence),
                                      {.stage = "shard index", .key = std::string(s), .where = "", .offset = -1,
                                       .detail = std::string(what) + " is not valid UTF-8 (JSON cannot hold it)"});
            out.append(s.substr(i, n));
            i += n;
        }
    }
    out += '"';
}

} // namespace detail

CONVEYOR_DECL dataset_index parse_index(std::string_view json, std::string base)
{
    boost::json::stream_parser p;
    boost::system::error_code ec;
    const std::size_t used = p.write(json.data(), json.size(), ec);
    if (!ec) p.finish(ec);
    if (ec) {
        std::size_t line = 1, col = 1;
        for (std::size_t i = 0; i < std::min(used, json.size()); ++i) {
            if (json[i] == '\n') {
                ++line;
                col = 1;
            } else {
                ++col;
            }
        }
        detail::bad_index(base, "not JSON at line " + std::to_string(line) + ", column " + std::to_string(col) + " (byte " +
                                    std::to_string(used) + "): " + ec.message());
    }
    const boost::json::value root = p.release();
    const detail::index_parser r{base};
    const auto& top = r.object(root, "$");
    const auto& fmt = r.member(top, "$", "format");
    if (!fmt.is_string() || fmt.get_string() != detail::index_format)
        r.fail("format", "expected \"" + std::string(detail::index_format) + "\" (this is not a conveyor shard index)");
    const auto& ver = r.member(top, "$", "version");
    if (!ver.is_int64() || ver.get_int64() != detail::index_version)
        r.fail("version", "expected 1 (an index written by a later conveyor?)");
    const auto& shards = r.array(r.member(top, "$", "shards"), "shards");
    dataset_index out;
    out.shards.reserve(shards.size());
    for (std::size_t s = 0; s < shards.size(); ++s) {
        const std::string sp = "shards[" + std::to_string(s) + "]";
        const auto& so = r.object(shards[s], sp);
        index_shard sh;
        sh.url = r.text(so, sp, "url");
        sh.samples = r.number(so, sp, "samples");
        sh.bytes = r.number(so, sp, "bytes");
        const auto& entries = r.array(r.member(so, sp, "entries"), sp + ".entries");
        if (entries.size() != sh.samples)
            r.fail(sp + ".samples", "says " + std::to_string(sh.samples) + " but \"entries\" holds " + std::to_string(entries.size()));
        sh.entries.reserve(entries.size());
        std::uint64_t end = 0;
        for (std::size_t e = 0; e < entries.size(); ++e) {
            const std::string ep = sp + ".entries[" + std::to_string(e) + "]";
            const auto& eo = r.object(entries[e], ep);
            index_entry ent;
            ent.key = r.text(eo, ep, "key");
            ent.offset = r.number(eo, ep, "offset");
            ent.size = r.number(eo, ep, "size");
            if (ent.offset % 512 != 0) r.fail(ep + ".offset", std::to_string(ent.offset) + " is not on a 512-byte block boundary");
            if (ent.size < 1024 || ent.size % 512 != 0)
                r.fail(ep + ".size", std::to_string(ent.size) + " is not a whole number of blocks holding a header and data");
            if (ent.offset < end)
                r.fail(ep + ".offset", std::to_string(ent.offset) + " is inside the previous entry (which ends at " + std::to_string(end) + ")");
            if (ent.offset > sh.bytes || ent.size > sh.bytes - ent.offset)
                r.fail(ep + ".size", "the entry [" + std::to_string(ent.offset) + ", " + std::to_string(ent.offset + ent.size) +
                                         ") runs past the shard's " + std::to_string(sh.bytes) + " bytes");
            end = ent.offset + ent.size;
            const auto& fo = r.object(r.member(eo, ep, "fields"), ep + ".fields");
            if (fo.empty()) r.fail(ep + ".fields", "a sample has at least one field");
            std::uint64_t fend = ent.offset;
            for (const auto& kv : fo) {
                const std::string fp = ep + ".fields." + std::string(kv.key());
                const auto& f = r.object(kv.value(), fp);
                member_extent m;
                m.name = std::string(kv.key());
                if (m.name.empty()) r.fail(fp, "a field name is empty");
                m.offset = r.number(f, fp, "offset");
                m.size = r.number(f, fp, "size");
                if (m.offset % 512 != 0 || m.offset < fend + 512)
                    r.fail(fp + ".offset", std::to_string(m.offset) + " is not a block boundary after a header following byte " + std::to_string(fend));
                if (m.size > end - m.offset)
                    r.fail(fp + ".size", "the field [" + std::to_string(m.offset) + ", " + std::to_string(m.offset + m.size) +
                                             ") runs past its entry's end at " + std::to_string(end));
                fend = m.offset + (m.size + 511) / 512 * 512;
                ent.fields.push_back(std::move(m));
            }
            sh.entries.push_back(std::move(ent));
        }
        out.shards.push_back(std::move(sh));
    }
    return out;
}

CONVEYOR_DECL dataset_index read_index(const std::filesystem::path& path, std::uint64_t max_bytes)
{
    const auto f = conveyor::detail::read_whole_file(path, max_bytes, "read_index's max_bytes");
    if (f.ec)
        throw conveyor::error(f.ec, {.stage = "shard index", .key = "", .where = path.string(), .offset = -1,
                                     .detail = "cannot read the index: " + f.why});
    return parse_index(f.text, path.string());
}

CONVEYOR_DECL std::string to_json(const dataset_index& index)
{
    std::string out;
    out += "{\"format\": \"";
    out += detail::index_format;
    out += "\", \"version\": 1,\n \"shards\": [";
    for (std::size_t s = 0; s < index.shards.size(); ++s) {
        const auto& sh = index.shards[s];
        out += s ? ",\n  {\"url\": " : "\n  {\"url\": ";
        detail::append_json_string(out, sh.url, "a shard URL");
        out += ", \"samples\": " + std::to_string(sh.samples) + ", \"bytes\": " + std::to_string(sh.bytes) + ",\n   \"entries\": [";
        for (std::size_t e = 0; e < sh.entries.size(); ++e) {
            const auto& ent = sh.entries[e];
            out += e ? ",\n    {\"key\": " : "\n    {\"key\": ";
            detail::append_json_string(out, ent.key, "a sample key");
            out += ", \"offset\": " + std::to_string(ent.offset) + ", \"size\": " + std::to_string(ent.size) + ", \"fields\": {";
            for (std::size_t f = 0; f < ent.fields.size(); ++f) {
                const auto& m = ent.fields[f];
                if (f) out += ", ";
                detail::append_json_string(out, m.name, "a field name");
                out += ": {\"offset\": " + std::to_string(m.offset) + ", \"size\": " + std::to_string(m.size) + "}";
            }
            out += "}}";
        }
        out += "]}";
    }
    out += "]}\n";
    return out;
}

CONVEYOR_DECL void write_index(const std::filesystem::path& path, const dataset_index& index)
{
    conveyor::detail::replace_file(path, to_json(index), "shard index");
}

} // namespace conveyor::shard

#endif
