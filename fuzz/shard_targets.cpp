// fuzz/shard_targets.cpp — the shard module's parsers: tar (plain and gzip), webdataset's
// sample grouping, and the JSON indexes (the dataset index and the file index).
#include "targets.hpp"

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/chunks.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/file/index.hpp>
#include <conveyor/shard/detail/sample_name.hpp>
#include <conveyor/shard/detail/sample_reader.hpp>
#include <conveyor/shard/detail/tar_reader.hpp>
#include <conveyor/shard/index.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdint>
#include <optional>
#include <regex>
#include <string>
#include <system_error>
#include <vector>

namespace conveyor::fuzz {

namespace sd = conveyor::shard::detail;

namespace {

/// What a read produced: members (or samples) in order, then the error that ended it.
struct outcome {
    std::vector<std::string> items; // one line per member or sample: names, offsets, sizes, a hash of the bytes
    std::optional<std::error_code> code;
    std::int64_t offset = -1;

    bool operator==(const outcome&) const = default;
};

/// Checks that `a` and `b` are the same, showing both when they are not.
void check_same(const outcome& a, const outcome& b, std::string_view what)
{
    if (a == b) return;
    for (const auto* o : {&a, &b}) {
        std::fprintf(stderr, "fuzz: %s:\n", o == &a ? "first" : "second");
        for (const auto& i : o->items) std::fprintf(stderr, "  %s\n", i.c_str());
        if (o->code) std::fprintf(stderr, "  error %s at %lld\n", o->code->message().c_str(), static_cast<long long>(o->offset));
    }
    check(false, what);
}

std::string bytes_digest(const slice& s)
{
    return std::to_string(s.size()) + "#" + std::to_string(hash_of({reinterpret_cast<const std::uint8_t*>(s.data()), s.size()}));
}

/// Chunk sizes to cut an input into: around the block size and a few odd ones.
constexpr std::array<std::size_t, 8> chunk_sizes{1, 7, 511, 512, 513, 1000, 4096, 65536};

/// Feeds `whole` to a tar reader in chunks of `chunk_size`, taking members as they come.
outcome read_tar(const slice& whole, std::size_t chunk_size, const shard::tar_options& o, bool total)
{
    outcome out;
    sd::tar_reader r("fuzz://shard.tar", o);
    std::uint64_t end = 0; // (a member may come before its padding: checked once the input has ended)
    if (total) r.set_total_size(whole.size());
    auto take = [&] {
        while (auto m = r.next()) {
            check(m->header_offset <= m->data_offset && m->data_offset + m->data.size() <= m->end_offset,
                  "tar member offsets out of order");
            end = std::max(end, m->end_offset);
            check(m->end_offset % sd::tar_block == 0 && m->header_offset % sd::tar_block == 0,
                  "tar member not on block boundaries");
            check(m->data.view() == whole.view().substr(m->data_offset, m->data.size()),
                  "tar member's bytes are not the input's at its data offset");
            out.items.push_back(m->name + "|" + std::to_string(m->header_offset) + "|" + std::to_string(m->data_offset) + "|" +
                                std::to_string(m->end_offset) + "|" + bytes_digest(m->data));
        }
    };
    try {
        for (std::size_t at = 0; at < whole.size(); at += chunk_size) {
            r.feed(chunk{whole.sub(at, std::min(chunk_size, whole.size() - at)), at});
            // What it holds: chunks not yet consumed, and a member being gathered (pooled, so
            // rounded up to a size class). The gathering buffer is taken for the size a
            // header claims, up to max_member_size; with the archive's length known, a size
            // past its end is refused at the header, so it is bounded by the input.
            const std::uint64_t bound = 2 * whole.size() + 8192 + (total ? 0 : o.max_member_size + o.max_member_size / 4);
            check(r.held_bytes() <= bound,
                  "tar reader holds " + std::to_string(r.held_bytes()) + " bytes for an input of " + std::to_string(whole.size()));
            take();
            if (r.done()) break;
        }
        r.finish();
        take();
        check(r.done(), "tar reader not done after finish and drain");
        check(end <= whole.size(), "a tar member's padding runs past the end of an archive read without error");
    } catch (const conveyor::error& e) {
        check_message(e);
        out.code = e.code();
        out.offset = e.offset();
        check(e.offset() >= -1 && e.offset() <= static_cast<std::int64_t>(whole.size()) + 512,
              "tar error offset far past the input");
        // After an error, `next` throws it again.
        bool again = false;
        try {
            (void)r.next();
        } catch (const conveyor::error& e2) {
            again = e2.code() == e.code();
        }
        check(again, "tar reader did not repeat its error");
    }
    return out;
}

/// Feeds `whole` (tar or gzip) to a sample parser in chunks; keeps each sample's fields' names and digests.
outcome read_shard(const slice& whole, std::size_t chunk_size, std::size_t inflate_chunk, bool lowercase)
{
    outcome out;
    sd::sample_reader_options o;
    o.inflate_chunk_size = inflate_chunk;
    o.tar.lowercase_fields = lowercase;
    o.tar.max_member_size = std::uint64_t{64} << 20;
    sd::sample_parser p("fuzz://shard.tar.gz", o);
    auto take = [&] {
        while (auto s = p.next()) {
            std::string line = s->key + "@" + std::to_string(s->offset) + "-" + std::to_string(s->end);
            check(s->offset <= s->end, "sample ends before it starts");
            check(!s->fields.empty(), "sample without fields");
            for (const auto& f : s->fields) line += "|" + f.name + "=" + bytes_digest(f.data) + "@" + std::to_string(f.offset);
            out.items.push_back(std::move(line));
        }
    };
    try {
        for (std::size_t at = 0; at < whole.size(); at += chunk_size) {
            p.feed(chunk{whole.sub(at, std::min(chunk_size, whole.size() - at)), at});
            take();
            if (p.done()) break;
        }
        p.finish();
        take();
        check(p.done(), "sample parser not done after finish and drain");
    } catch (const conveyor::error& e) {
        check_message(e);
        out.code = e.code();
        out.offset = e.offset();
    }
    return out;
}

} // namespace

void tar(input in)
{
    const std::uint64_t h = hash_of(in);
    shard::tar_options o;
    o.require_end_of_archive = (h & 1) != 0;
    o.max_metadata_size = (h & 2) ? 4096 : o.max_metadata_size;
    const bool total = (h & 4) != 0;
    const slice whole = tail_slice(in);
    const outcome ref = read_tar(whole, SIZE_MAX, o, total);
    const outcome cut = read_tar(whole, chunk_sizes[(h >> 8) % chunk_sizes.size()], o, total);
    // The documented contract (tests/shard/detail/tar_reader.cpp): the same members and the
    // same error at the same offset, however the input is cut.
    check_same(ref, cut, "tar reader: another result when the input is cut into chunks");
}

void tar_gzip(input in)
{
    const std::uint64_t h = hash_of(in);
    const slice whole = tail_slice(in);
    const bool lowercase = (h & 1) != 0;
    const outcome a = read_shard(whole, SIZE_MAX, std::size_t{1} << 20, lowercase);
    const outcome b = read_shard(whole, chunk_sizes[(h >> 8) % chunk_sizes.size()], 4096 + (h >> 16) % 3 * 1000, lowercase);
    // The same samples, or an error in both; where an error is found depends on how far
    // inflating had gone (a corrupt gzip stream may hold a corrupt tar: which is met first
    // depends on the chunk sizes), so the samples before it may be fewer in one of the two.
    if (a.code && b.code) {
        const auto& shorter = a.items.size() <= b.items.size() ? a : b;
        const auto& longer = a.items.size() <= b.items.size() ? b : a;
        if (std::equal(shorter.items.begin(), shorter.items.end(), longer.items.begin())) return;
    }
    check_same(a, b, "sample parser: another result with other compressed and inflated chunk sizes");
}

void samples(input in)
{
    // One member name per line (a tar name cannot be told from a line break here, and
    // needs none to reach every branch); the first byte chooses lower-casing.
    std::string_view text = as_text(in);
    const bool lowercase = !text.empty() && (text.front() & 1);
    // webdataset's base_plus_ext, the rule split_sample_name follows (ECMAScript and
    // Python agree on it for names without line breaks).
    static const std::regex webdataset_rule(R"(^((?:.*/|)[^.]+)[.]([^/]*)$)");
    sd::sample_grouper g("fuzz://shard.tar", 0, lowercase);
    std::uint64_t offset = 0;
    std::uint64_t members = 0;
    std::uint64_t in_samples = 0;
    auto count = [&](const std::optional<shard::sample>& s) {
        if (!s) return;
        in_samples += s->fields.size();
        check(!s->fields.empty(), "a sample without fields");
        for (const auto& f : s->fields) {
            if (lowercase)
                check(std::none_of(f.name.begin(), f.name.end(), [](char c) { return c >= 'A' && c <= 'Z'; }),
                      "lower-cased field holds an upper-case letter");
        }
    };
    try {
        while (!text.empty()) {
            const auto nl = text.find('\n');
            const std::string_view name = text.substr(0, nl);
            text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);

            const auto split = sd::split_sample_name(name);
            if (name.size() <= 512 && name.find('\r') == std::string_view::npos) {
                std::match_results<std::string_view::const_iterator> m;
                const bool matched = std::regex_match(name.begin(), name.end(), m, webdataset_rule);
                check(matched == split.has_value(), "split_sample_name and webdataset's expression disagree on a split");
                if (matched)
                    check(split->key == std::string_view(m[1].first, m[1].second) &&
                              split->field == std::string_view(m[2].first, m[2].second),
                          "split_sample_name and webdataset's expression disagree on key or field");
            }
            if (split) {
                check(split->key.size() + 1 + split->field.size() == name.size() &&
                          name.substr(0, split->key.size()) == split->key && name[split->key.size()] == '.' &&
                          name.substr(split->key.size() + 1) == split->field,
                      "key '.' field is not the name");
            }
            (void)sd::is_meta_member(name);

            sd::tar_member m;
            m.name = std::string(name);
            m.header_offset = offset;
            m.data_offset = offset + 512;
            m.end_offset = offset + 1024;
            offset += 1024;
            ++members;
            count(g.add(std::move(m)));
        }
        count(g.finish());
        const auto& c = g.counts();
        check(in_samples + c.meta + c.unkeyed == members, "grouping lost or invented members");
    } catch (const conveyor::error& e) {
        check_message(e);
        check(e.code() == make_error_code(shard::errc::duplicate_field), "grouping failed with another error than duplicate_field");
    }
}

void index_json(input in)
{
    const std::string_view text = as_text(in);
    // The dataset index: parsed, written back and parsed again, the same.
    try {
        const auto index = shard::parse_index(text, "fuzz://index.json");
        const std::string once = shard::to_json(index);
        std::string twice;
        try {
            twice = shard::to_json(shard::parse_index(once, "fuzz://again.json"));
        } catch (const conveyor::error& e) {
            check(false, std::string("to_json wrote an index parse_index refuses: ") + e.what());
        }
        check(once == twice, "dataset index: parse(to_json(parse(x))) differs from parse(x)");
    } catch (const conveyor::error& e) {
        check_message(e);
    }
    // The file index (a JSON array of paths), read from a file as users give it.
    const std::string path = memory_file(0, in);
    for (bool labels : {false, true}) {
        try {
            const auto l = file::read_index(path, "/data", {.labels = labels});
            for (std::size_t i = 0; i < l.size(); ++i) {
                check(!file::escapes_root(l.entries[i].path), "read_index kept a path that leaves the root");
                check(l.entries[i].label < static_cast<std::int64_t>(l.classes.size()), "read_index gave a label with no class");
                (void)l.full_path(i);
            }
        } catch (const conveyor::error& e) {
            check_message(e);
        }
    }
}

} // namespace conveyor::fuzz
