// Helpers for the tar reader and untar tests: outside archivers (GNU tar, bsdtar, Python's
// tarfile, gzip) run in a temporary folder, hand-made archives, and chunked reading.
#ifndef CONVEYOR_TESTS_SHARD_TAR_SUPPORT_HPP
#define CONVEYOR_TESTS_SHARD_TAR_SUPPORT_HPP

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/chunks.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/core/slice.hpp>
#include <conveyor/shard/detail/tar_reader.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace tar_test {

namespace fs = std::filesystem;
namespace sd = conveyor::shard::detail;

inline std::string slurp(const fs::path& p)
{
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

inline void spill(const fs::path& p, const std::string& bytes)
{
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << bytes;
}

/// The bytes of one of Go's test archives, or empty (with a message) when it is missing.
inline std::string go_archive(const std::string& name)
{
    const fs::path p = fs::path(CONVEYOR_GO_TAR_TESTDATA) / name;
    if (!fs::exists(p)) {
        MESSAGE("skipped: " << p.string() << " is missing (Debian package golang-1.19-src)");
        return {};
    }
    return slurp(p);
}

/// Runs a shell command; its exit status, its standard output in `out`.
inline int sh(const std::string& cmd, std::string* out = nullptr)
{
    FILE* f = ::popen(cmd.c_str(), "r");
    if (!f) return -1;
    std::string s;
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) s.append(buf, n);
    const int rc = ::pclose(f);
    if (out) *out = std::move(s);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

inline bool have(const char* tool)
{
    return sh(std::string("command -v ") + tool + " >/dev/null 2>&1") == 0;
}

/// A fresh temporary folder, removed with the object.
struct temp_dir {
    fs::path path;
    temp_dir()
    {
        std::string t = (fs::temp_directory_path() / "conveyor-tar-XXXXXX").string();
        REQUIRE(::mkdtemp(t.data()) != nullptr);
        path = t;
    }
    ~temp_dir()
    {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    std::string str() const { return path.string(); }
};

/// What the `conveyor::error` that `f()` throws says, or "(no error)".
inline std::string message_of(auto&& f)
{
    try {
        f();
    } catch (const conveyor::error& e) {
        return e.what();
    }
    return "(no error)";
}

inline conveyor::slice to_slice(const std::string& s)
{
    return conveyor::slice(conveyor::buffer::copy_of(s));
}

/// A ustar header block for `name` (at most 100 bytes) of `size` bytes and type `type`,
/// with a right checksum.
inline std::string ustar_header(const std::string& name, std::uint64_t size, char type = '0')
{
    std::array<char, 512> b{};
    std::memcpy(b.data(), name.data(), std::min<std::size_t>(name.size(), 100));
    std::snprintf(b.data() + 100, 8, "%07o", 0644);
    std::snprintf(b.data() + 108, 8, "%07o", 1000);
    std::snprintf(b.data() + 116, 8, "%07o", 1000);
    std::snprintf(b.data() + 124, 12, "%011llo", static_cast<unsigned long long>(size));
    std::snprintf(b.data() + 136, 12, "%011o", 1700000000);
    b[156] = type;
    std::memcpy(b.data() + 257, "ustar\0" "00", 8);
    std::memset(b.data() + 148, ' ', 8);
    unsigned sum = 0;
    for (char c : b) sum += static_cast<unsigned char>(c);
    std::snprintf(b.data() + 148, 8, "%06o", sum);
    b[155] = ' ';
    return std::string(b.data(), 512);
}

/// Recomputes the checksum of the header at `at` (after a test changed its bytes).
inline void fix_checksum(std::string& tar, std::size_t at)
{
    std::memset(tar.data() + at + 148, ' ', 8);
    unsigned sum = 0;
    for (std::size_t i = 0; i < 512; ++i) sum += static_cast<unsigned char>(tar[at + i]);
    char f[8];
    std::snprintf(f, sizeof f, "%06o", sum);
    std::memcpy(tar.data() + at + 148, f, 7);
    tar[at + 155] = ' ';
}

inline std::string padded(std::string data)
{
    data.resize((data.size() + 511) / 512 * 512, '\0');
    return data;
}

/// A member: its header and padded data.
inline std::string tar_entry(const std::string& name, const std::string& data, char type = '0')
{
    return ustar_header(name, data.size(), type) + padded(data);
}

/// A pax extended header ('x' or 'g') holding `records` ("key=value" each).
inline std::string pax_entry(const std::vector<std::string>& records, char type = 'x')
{
    std::string data;
    for (const auto& r : records) {
        // "<len> <r>\n" where len counts itself.
        std::size_t len = r.size() + 3;
        while (std::to_string(len).size() + r.size() + 2 != len) ++len;
        data += std::to_string(len) + " " + r + "\n";
    }
    return tar_entry("PaxHeaders/x", data, type);
}

inline const std::string end_of_archive(1024, '\0');

/// Feeds `bytes` to a tar reader in chunks of `chunk_size` (views of one buffer), taking
/// members as soon as they are ready; finishes and drains. Throws what the reader throws.
inline std::vector<sd::tar_member> read_chunked(const conveyor::slice& whole, std::size_t chunk_size,
                                                conveyor::shard::tar_options o = {}, std::size_t* max_held = nullptr)
{
    sd::tar_reader r("test://shard.tar", o);
    std::vector<sd::tar_member> out;
    for (std::size_t at = 0; at < whole.size(); at += chunk_size) {
        r.feed(conveyor::chunk{whole.sub(at, std::min(chunk_size, whole.size() - at)), at});
        if (max_held) *max_held = std::max(*max_held, r.held_bytes());
        while (auto m = r.next()) out.push_back(std::move(*m));
        if (r.done()) break;
    }
    r.finish();
    while (auto m = r.next()) out.push_back(std::move(*m));
    CHECK(r.done());
    return out;
}

} // namespace tar_test

#endif
