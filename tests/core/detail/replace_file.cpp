// Tests for conveyor/core/detail/replace_file.hpp: a file replaced whole or not at all, on
// a full disk, in a read-only folder, and with two writers of one path.
#include <conveyor/core/detail/replace_file.hpp>

#include <conveyor/core/error.hpp>

#include <doctest/doctest.h>

#include "../support.hpp"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
namespace cd = conveyor::detail;

namespace {

std::string read_all(const fs::path& p)
{
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

/// A fresh folder, removed with the object.
struct folder {
    fs::path path;
    folder()
    {
        std::string t = (fs::temp_directory_path() / "conveyor-replace-XXXXXX").string();
        REQUIRE(::mkdtemp(t.data()) != nullptr);
        path = t;
    }
    ~folder()
    {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    std::vector<std::string> names() const
    {
        std::vector<std::string> out;
        for (const auto& e : fs::directory_iterator(path)) out.push_back(e.path().filename().string());
        std::sort(out.begin(), out.end());
        return out;
    }
};

} // namespace

TEST_CASE("replace_file writes a new file, replaces an old one, and leaves no temporary file")
{
    folder d;
    const auto f = d.path / "index.json";
    cd::replace_file(f, "first", "test");
    CHECK(read_all(f) == "first");
    cd::replace_file(f, std::string(100'000, 'x'), "test");
    CHECK(read_all(f) == std::string(100'000, 'x'));
    cd::replace_file(f, "", "test");
    CHECK(read_all(f).empty());
    CHECK(d.names() == std::vector<std::string>{"index.json"});
}

TEST_CASE("replace_file into a missing folder: an error naming the file and the step, nothing written")
{
    folder d;
    const auto f = d.path / "no" / "such" / "index.json";
    try {
        cd::replace_file(f, "x", "shard index");
        FAIL("written into a missing folder");
    } catch (const conveyor::error& e) {
        CHECK(e.code() == std::errc::no_such_file_or_directory);
        CHECK(e.where() == f.string());
        CHECK(std::string(e.what()).find("shard index") != std::string::npos);
        CHECK(std::string(e.what()).find("cannot create") != std::string::npos);
    }
    CHECK(d.names().empty());
}

TEST_CASE("two writers of one file, 200 times each: every read sees one writer's whole file, no temporary left")
{
    // With one fixed temporary name (what the index writers used), the writers truncate
    // and fill the same temporary file: a rename then publishes a mix of both, or fails.
    folder d;
    const auto f = d.path / "index.json";
    const std::string a(64 * 1024, 'a'), b(96 * 1024, 'b');
    cd::replace_file(f, a, "test");
    std::atomic<bool> stop{false};
    std::atomic<int> errors{0}, torn{0};
    std::thread reader([&] {
        while (!stop) {
            const auto text = read_all(f);
            if (text != a && text != b) ++torn;
        }
    });
    auto writer = [&](const std::string& text) {
        for (int i = 0; i < 200; ++i) {
            try {
                cd::replace_file(f, text, "test");
            } catch (const std::exception&) {
                ++errors;
            }
        }
    };
    std::thread wa(writer, std::cref(a)), wb(writer, std::cref(b));
    wa.join();
    wb.join();
    stop = true;
    reader.join();
    CHECK(errors == 0);
    CHECK(torn == 0);
    const auto last = read_all(f);
    CHECK((last == a || last == b));
    CHECK(d.names() == std::vector<std::string>{"index.json"});
}

TEST_CASE("replace_file on a full disk: ENOSPC named, the old file whole, no temporary left")
{
    conveyor_test::small_disk disk(256 * 1024);
    if (!disk.ok()) {
        MESSAGE("skipped: " << disk.why());
        return;
    }
    const auto f = disk.path() / "index.json";
    cd::replace_file(f, "old and whole", "file listing");
    try {
        cd::replace_file(f, std::string(1 << 20, 'z'), "file listing");
        FAIL("1 MiB written to a 256 KiB disk");
    } catch (const conveyor::error& e) {
        CHECK(e.code() == std::errc::no_space_on_device);
        CHECK(e.where() == f.string());
        CHECK(std::string(e.what()).find("cannot write") != std::string::npos);
    }
    CHECK(read_all(f) == "old and whole");
    CHECK(disk.names() == std::vector<std::string>{"index.json"});
}

TEST_CASE("replace_file in a read-only folder: an error naming the file, the old file untouched")
{
    conveyor_test::small_disk disk(64 * 1024);
    if (!disk.ok()) {
        MESSAGE("skipped: " << disk.why());
        return;
    }
    const auto f = disk.path() / "index.json";
    cd::replace_file(f, "old", "shard index");
    REQUIRE(disk.set_read_only(true));
    try {
        cd::replace_file(f, "new", "shard index");
        FAIL("written on a read-only file system");
    } catch (const conveyor::error& e) {
        CHECK(e.code() == std::errc::read_only_file_system);
        CHECK(e.where() == f.string());
    }
    CHECK(read_all(f) == "old");
    REQUIRE(disk.set_read_only(false));
    CHECK(disk.names() == std::vector<std::string>{"index.json"});
}

TEST_CASE("replacing_file: appended bytes and a header written last replace the target on commit, with the mode asked")
{
    folder d;
    const fs::path target = d.path / "obj";
    {
        std::ofstream(target) << "old";
    }
    cd::replacing_file f;
    REQUIRE_FALSE(f.open(target.string(), 0600));
    CHECK(f.is_open());
    CHECK(fs::exists(f.temporary()));
    const std::string body = "body", head = "HEAD", blank(4, ' ');
    REQUIRE_FALSE(f.write_at(0, std::as_bytes(std::span(blank))));
    const auto b = std::as_bytes(std::span(body));
    CHECK_FALSE(f.append(b)); // appends after the bytes appended so far (none): at 0
    CHECK(f.size() == 4);
    REQUIRE_FALSE(f.write_at(4, b)); // the body at 4
    REQUIRE_FALSE(f.write_at(0, std::as_bytes(std::span(head))));
    CHECK(read_all(target) == "old"); // nothing seen before the rename
    REQUIRE_FALSE(f.commit(true, true));
    CHECK(read_all(target) == "HEADbody");
    CHECK((fs::status(target).permissions() & fs::perms::all) == (fs::perms::owner_read | fs::perms::owner_write));
    CHECK(d.names() == std::vector<std::string>{"obj"});
    f.abandon(); // after a commit: nothing to remove, the target stays
    CHECK(read_all(target) == "HEADbody");
}

TEST_CASE("replacing_file: destroyed before commit, the target is untouched and the temporary gone")
{
    folder d;
    const fs::path target = d.path / "obj";
    {
        std::ofstream(target) << "old";
    }
    {
        cd::replacing_file f;
        REQUIRE_FALSE(f.open(target.string()));
        const std::string body = "new";
        REQUIRE_FALSE(f.append(std::as_bytes(std::span(body))));
        cd::replacing_file moved = std::move(f); // the temporary goes with the move
        CHECK_FALSE(f.is_open());
    }
    CHECK(read_all(target) == "old");
    CHECK(d.names() == std::vector<std::string>{"obj"});
}

TEST_CASE("replacing_file: a temporary name that exists is refused and left alone (never someone else's file)")
{
    folder d;
    const fs::path target = d.path / "obj", taken = d.path / "obj.tmp.1";
    {
        std::ofstream(taken) << "someone's";
    }
    cd::replacing_file f;
    const std::error_code ec = f.open(target.string(), 0644, taken.string());
    CHECK(ec == std::errc::file_exists);
    CHECK(std::string(f.failed_step()) == "cannot create");
    CHECK_FALSE(f.is_open());
    f.abandon();
    CHECK(read_all(taken) == "someone's");
    CHECK_FALSE(fs::exists(target));
}
