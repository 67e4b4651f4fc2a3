// Tests of conveyor/file/index.hpp: directory walks (ImageFolder labels included), index
// files and classes files.
#include "support.hpp"

#include <conveyor/file/error.hpp>
#include <conveyor/file/index.hpp>

#include <boost/json.hpp>

#include <algorithm>
#include <atomic>
#include <limits>
#include <map>
#include <thread>

namespace cv = conveyor;
namespace cf = conveyor::file;
namespace fs = std::filesystem;
using ftest::temp_dir;
using ftest::write_file;

namespace {

std::vector<std::string> paths_of(const cf::listing& l)
{
    std::vector<std::string> v;
    for (const auto& e : l.entries) v.push_back(e.path);
    return v;
}

std::vector<std::int64_t> labels_of(const cf::listing& l)
{
    std::vector<std::int64_t> v;
    for (const auto& e : l.entries) v.push_back(e.label);
    return v;
}

/// Checks that `e` has code `code`, and that what() names every one of `parts`.
void check_error(const std::optional<cv::error>& e, std::error_code code, std::initializer_list<std::string> parts)
{
    REQUIRE(e.has_value());
    CHECK_MESSAGE(ftest::same_code(e->code(), code), "code is " << e->code().category().name() << ":" << e->code().value() << " ("
                                                << e->code().message() << "), what(): " << std::string(e->what()));
    for (const auto& p : parts) CHECK_MESSAGE(std::string(e->what()).find(p) != std::string::npos, "what() = \"" << std::string(e->what()) << "\" does not name \"" << p << "\"");
}

fs::path write_index_text(const temp_dir& d, std::string_view text, const std::string& name = "index.json")
{
    const auto p = d / name;
    write_file(p, text);
    return p;
}

} // namespace

// ==== walk =====================================================================================

TEST_CASE("walk lists every regular file below the root recursively, sorted, with sizes")
{
    temp_dir d;
    temp_dir outside;
    write_file(d / "z.txt", "zz");
    write_file(d / "b/2.txt", "222");
    write_file(d / "a/sub/3.txt", "");
    write_file(d / "a/1.txt", "1");
    write_file(d / "a.txt", "aaaa");
    write_file(d / "a/sub/deeper/4.bin", std::string(5000, 'x'));
    fs::create_directories(d / "empty/dir");
    write_file(outside / "hidden/never.txt", "never");
    fs::create_directory_symlink(outside / "hidden", d / "linked_dir"); // a symlinked directory: not followed

    const auto l = cf::walk(d.path());
    CHECK(l.root == d.path());
    // Byte order: "a.txt" < "a/..." because '.' < '/'.
    const std::vector<std::string> want = {"a.txt", "a/1.txt", "a/sub/3.txt", "a/sub/deeper/4.bin", "b/2.txt", "z.txt"};
    CHECK(paths_of(l) == want);
    const std::vector<std::int64_t> sizes = {4, 1, 0, 5000, 3, 2};
    REQUIRE(l.size() == sizes.size());
    for (std::size_t i = 0; i < l.size(); ++i) {
        CAPTURE(l.entries[i].path);
        CHECK(l.entries[i].size == sizes[i]);
        CHECK(l.entries[i].label == -1);
        CHECK(l.full_path(i) == (d.path() / want[i]).string());
    }
    CHECK(l.classes.empty());

    // Deterministic: the same listing every time.
    for (int run = 0; run < 3; ++run) {
        const auto again = cf::walk(d.path());
        CHECK(paths_of(again) == want);
    }
}

TEST_CASE("walk of a root given with a trailing slash keys files the same way")
{
    temp_dir d;
    write_file(d / "a/x.bin", "x");
    write_file(d / "y.bin", "y");
    const auto l = cf::walk(d.path().string() + "/");
    CHECK(paths_of(l) == std::vector<std::string>{"a/x.bin", "y.bin"});
}

TEST_CASE("walk keeps only the wanted extensions, compared without regard to case")
{
    temp_dir d;
    for (const char* name : {"x.jpg", "y.JPG", "z.Jpeg", "sub/q.jPg", "w.png", "noext", "v.jpg.bak", "jpg", "u.jpgx"})
        write_file(d / name, name);
    const auto l = cf::walk(d.path(), {.extensions = {".jpg", ".JPEG"}});
    CHECK(paths_of(l) == std::vector<std::string>{"sub/q.jPg", "x.jpg", "y.JPG", "z.Jpeg"});
    // No filter: everything.
    CHECK(cf::walk(d.path()).size() == 9);
}

TEST_CASE("has_extension takes the file name's last extension, as std::filesystem does, without regard to case")
{
    const std::vector<std::string> jpeg{".jpg", ".JPEG"};
    for (const char* yes : {"x.jpg", "a/b/y.JPG", "z.jpeg", "d.v/q.Jpg", "..jpg", "a/..jpg"}) CHECK_MESSAGE(cf::has_extension(yes, jpeg), yes);
    for (const char* no : {"x.jpg.bak", "jpg", ".jpg", "a/.jpg", "dir.jpg/", "d.jpg/x", "x.jpgx", "", ".", ".."})
        CHECK_MESSAGE(!cf::has_extension(no, jpeg), no);
    // The same answer as std::filesystem::path::extension for every one of them.
    for (const char* p : {"x.jpg", "a/b/y.JPG", "..jpg", "x.jpg.bak", ".jpg", "a/.jpg", "dir.jpg/", "x", ".", "..", "a/b.c.d"}) {
        const std::string ext = std::filesystem::path(p).extension().string();
        CHECK_MESSAGE(cf::has_extension(p, {ext.empty() ? std::string("(none)") : ext}) == !ext.empty(), p);
    }
    CHECK(cf::has_extension("anything", {}));      // no filter: everything
    CHECK(cf::has_extension("noext", {""}));       // "": the names without an extension
    CHECK(!cf::has_extension("x.jpg", {""}));
}

TEST_CASE("walk with labels: the first directory is the class, classes sorted to ids, root files dropped")
{
    temp_dir d;
    write_file(d / "dog/a.jpg", "da");
    write_file(d / "cat/2.jpg", "c2");
    write_file(d / "cat/1.jpg", "c1");
    write_file(d / "ant/sub/x.jpg", "ax"); // deeper: still class "ant"
    write_file(d / "root.jpg", "dropped");
    write_file(d / "readme.txt", "dropped too");

    const auto l = cf::walk(d.path(), {.labels = true});
    CHECK(l.classes == std::vector<std::string>{"ant", "cat", "dog"});
    CHECK(paths_of(l) == std::vector<std::string>{"ant/sub/x.jpg", "cat/1.jpg", "cat/2.jpg", "dog/a.jpg"});
    CHECK(labels_of(l) == std::vector<std::int64_t>{0, 1, 1, 2});
    for (const auto& e : l.entries) CHECK(e.size == 2);
}

TEST_CASE("walk with labels takes class ids from a classes file when given")
{
    temp_dir d;
    write_file(d / "dog/a.jpg", "da");
    write_file(d / "cat/1.jpg", "c1");
    write_file(d / "ant/x.jpg", "ax"); // not in the classes file: left out
    write_file(d / "top.jpg", "t");
    write_file(d / "classes.json", R"({"dog": {"id": 0, "name": "Dog"}, "cat": {"id": 5, "name": "Cat"}})");

    const auto classes = cf::read_classes(d / "classes.json");
    const auto l = cf::walk(d.path(), {.extensions = {".jpg"}, .labels = true, .classes = classes});
    CHECK(paths_of(l) == std::vector<std::string>{"cat/1.jpg", "dog/a.jpg"});
    CHECK(labels_of(l) == std::vector<std::int64_t>{5, 0});
    REQUIRE(l.classes.size() == 6); // ids 0..5; unnamed ids are empty
    CHECK(l.classes[0] == "dog");
    CHECK(l.classes[5] == "cat");
    for (std::size_t i = 1; i < 5; ++i) CHECK(l.classes[i].empty());
}

TEST_CASE("walk of a missing root or of a file throws, naming the path")
{
    temp_dir d;
    {
        const auto missing = d / "no/such/dir";
        auto e = ftest::error_from([&] { (void)cf::walk(missing); });
        check_error(e, std::make_error_code(std::errc::no_such_file_or_directory), {missing.string()});
        if (e) CHECK(e->where() == missing.string());
    }
    {
        const auto file = d / "plain.txt";
        write_file(file, "x");
        auto e = ftest::error_from([&] { (void)cf::walk(file); });
        check_error(e, std::make_error_code(std::errc::not_a_directory), {file.string()});
    }
}

// ==== escapes_root ==============================================================================

TEST_CASE("escapes_root tells paths that stay below the root from those that leave it")
{
    for (const char* inside : {"a", "a/b", "./a", "a/..", "a/../b", "a/./b", "a//b", "...", "..a", "a..", "a/b/../../c", "", "."}) {
        INFO("path: " << std::string(inside));
        CHECK_FALSE(cf::escapes_root(inside));
    }
    for (const char* outside : {"..", "../", "../x", "a/../../x", "a/../..", "./../a", "a/./../../b", "/etc/passwd", "/", "//x", "a/b/../../../c"}) {
        INFO("path: " << std::string(outside));
        CHECK(cf::escapes_root(outside));
    }
}

// ==== read_index / write_index =================================================================

TEST_CASE("read_index reads a JSON array of relative paths, in its order")
{
    temp_dir d;
    const auto idx = write_index_text(d, R"(["b/2.jpg", "a/1.JPG", "a/../c/3.png", "x.jpg", "sub/dir/y.jpeg"])");
    const fs::path root = "/data/root";

    const auto l = cf::read_index(idx, root);
    CHECK(l.root == root);
    // Paths are normalised ("a/../c/3.png" is read, and labelled, as "c/3.png").
    CHECK(paths_of(l) == std::vector<std::string>{"b/2.jpg", "a/1.JPG", "c/3.png", "x.jpg", "sub/dir/y.jpeg"});
    for (std::size_t i = 0; i < l.size(); ++i) {
        CHECK(l.entries[i].size == -1); // unknown: stat'ed when read
        CHECK(l.entries[i].label == -1);
    }
    CHECK(l.full_path(0) == "/data/root/b/2.jpg");

    const auto jpg = cf::read_index(idx, root, {.extensions = {".jpg"}});
    CHECK(paths_of(jpg) == std::vector<std::string>{"b/2.jpg", "a/1.JPG", "x.jpg"});

    const auto labelled = cf::read_index(idx, root, {.extensions = {".jpg", ".jpeg"}, .labels = true});
    CHECK(labelled.classes == std::vector<std::string>{"a", "b", "sub"});
    CHECK(paths_of(labelled) == std::vector<std::string>{"b/2.jpg", "a/1.JPG", "sub/dir/y.jpeg"});
    CHECK(labels_of(labelled) == std::vector<std::int64_t>{1, 0, 2});

    CHECK(cf::read_index(write_index_text(d, "[]", "empty.json"), root).size() == 0);
}

TEST_CASE("read_index rejects bad index files with the right code, naming the file")
{
    temp_dir d;
    const fs::path root = d / "root";

    SUBCASE("not JSON")
    {
        const auto idx = write_index_text(d, R"(["a.jpg", )");
        check_error(ftest::error_from([&] { (void)cf::read_index(idx, root); }), cf::errc::invalid_json, {idx.string()});
    }
    SUBCASE("an empty file")
    {
        const auto idx = write_index_text(d, "");
        check_error(ftest::error_from([&] { (void)cf::read_index(idx, root); }), cf::errc::invalid_json, {idx.string()});
    }
    SUBCASE("an object instead of an array")
    {
        const auto idx = write_index_text(d, R"({"files": ["a.jpg"]})");
        check_error(ftest::error_from([&] { (void)cf::read_index(idx, root); }), cf::errc::index_not_array, {idx.string()});
    }
    SUBCASE("a number in the array")
    {
        const auto idx = write_index_text(d, R"(["a.jpg", "b.jpg", 42, "c.jpg"])");
        auto e = ftest::error_from([&] { (void)cf::read_index(idx, root); });
        check_error(e, cf::errc::index_entry_not_string, {idx.string(), "entry 2", "42"});
    }
    SUBCASE("null in the array")
    {
        const auto idx = write_index_text(d, R"([null])");
        check_error(ftest::error_from([&] { (void)cf::read_index(idx, root); }), cf::errc::index_entry_not_string,
                    {idx.string(), "entry 0", "null"});
    }
    SUBCASE("paths that leave the root")
    {
        int k = 0;
        for (const char* bad : {"../x", "a/../../x", "/etc/passwd"}) {
            INFO("entry: " << std::string(bad));
            boost::json::array arr{"ok/1.jpg", bad};
            const auto idx = write_index_text(d, boost::json::serialize(arr), "escape" + std::to_string(k++) + ".json");
            check_error(ftest::error_from([&] { (void)cf::read_index(idx, root); }), cf::errc::path_escapes_root,
                        {idx.string(), "entry 1", bad});
        }
    }
    SUBCASE("a/../b stays inside and is accepted")
    {
        const auto idx = write_index_text(d, R"(["a/../b"])");
        const auto l = cf::read_index(idx, root);
        CHECK(paths_of(l) == std::vector<std::string>{"b"}); // normalised
    }
    SUBCASE("a missing index file")
    {
        const auto idx = d / "no-such-index.json";
        check_error(ftest::error_from([&] { (void)cf::read_index(idx, root); }),
                    std::make_error_code(std::errc::no_such_file_or_directory), {idx.string()});
    }
}

TEST_CASE("write_index writes a JSON array that read_index reads back identically")
{
    temp_dir d;
    write_file(d / "data/b/2.bin", "2");
    write_file(d / "data/a/1.bin", "1");
    write_file(d / "data/a/with space & \"quote\".bin", "q");
    write_file(d / "data/ünïcode.bin", "u");
    const auto l = cf::walk(d / "data");
    const auto idx = d / "index.json";
    cf::write_index(l, idx);
    for (const auto& e : fs::directory_iterator(d.path())) // written beside, then renamed into place
        CHECK((e.path().filename() == "data" || e.path().filename() == "index.json"));

    const auto text = ftest::read_whole(idx);
    const auto v = boost::json::parse(text);
    REQUIRE(v.is_array());
    CHECK(v.as_array().size() == l.size());

    const auto back = cf::read_index(idx, d / "data");
    CHECK(paths_of(back) == paths_of(l));
    CHECK(back.root == d / "data");

    // Writing again replaces the file.
    cf::listing one;
    one.entries.push_back({"only.bin", 1, -1});
    cf::write_index(one, idx);
    CHECK(paths_of(cf::read_index(idx, d.path())) == std::vector<std::string>{"only.bin"});

    // Where it cannot be written: an error naming the path.
    const auto bad = d / "no/such/dir/index.json";
    auto e = ftest::error_from([&] { cf::write_index(l, bad); });
    REQUIRE(e);
    CHECK(std::string(e->what()).find((d / "no/such/dir").string()) != std::string::npos);
}

TEST_CASE("two writers of one index at once: each write whole, no error, no temporary file left")
{
    // Both once wrote through the same temporary name (`index.json.tmp`): one truncated the
    // other's file, and the second rename found nothing to rename.
    temp_dir d;
    cf::listing a, b;
    for (int i = 0; i < 2000; ++i) a.entries.push_back({"a/" + std::to_string(i) + ".bin", 1, -1});
    for (int i = 0; i < 3000; ++i) b.entries.push_back({"b/" + std::to_string(i) + ".bin", 1, -1});
    const auto idx = d / "index.json";
    std::atomic<int> errors{0};
    auto writer = [&](const cf::listing& l) {
        for (int i = 0; i < 50; ++i) {
            try {
                cf::write_index(l, idx);
            } catch (const std::exception& e) {
                MESSAGE(std::string(e.what()));
                ++errors;
            }
        }
    };
    std::thread ta(writer, std::cref(a)), tb(writer, std::cref(b));
    ta.join();
    tb.join();
    CHECK(errors == 0);
    const auto back = paths_of(cf::read_index(idx, d.path()));
    CHECK((back == paths_of(a) || back == paths_of(b)));
    CHECK(std::distance(fs::directory_iterator(d.path()), {}) == 1);
}

// ==== classes files ============================================================================

TEST_CASE("read_classes reads the seeds' classes format, sorted by id")
{
    temp_dir d;
    const auto f = d / "classes.json";
    write_file(f, R"({"n01443537": {"id": 1, "name": "goldfish"},
                      "n01440764": {"id": 0, "name": "tench"},
                      "n01484850": {"id": 2}})");
    const auto c = cf::read_classes(f);
    REQUIRE(c.size() == 3);
    CHECK(c[0].dir == "n01440764");
    CHECK(c[0].id == 0);
    CHECK(c[0].name == "tench");
    CHECK(c[1].dir == "n01443537");
    CHECK(c[1].id == 1);
    CHECK(c[1].name == "goldfish");
    CHECK(c[2].dir == "n01484850");
    CHECK(c[2].id == 2);
    CHECK(c[2].name == "n01484850"); // no name: the directory's
}

TEST_CASE("write_classes and read_classes round-trip, in the seeds' format")
{
    temp_dir d;
    write_file(d / "data/n01440764/a.JPEG", "a");
    write_file(d / "data/n01443537/b.JPEG", "b");
    write_file(d / "data/n01484850/c.JPEG", "c");
    const auto l = cf::walk(d / "data", {.labels = true});
    REQUIRE(l.classes.size() == 3);
    const auto f = d / "classes.json";
    cf::write_classes(l, f, {{"n01440764", "tench"}, {"n01443537", "goldfish"}});
    CHECK_FALSE(fs::exists(f.string() + ".tmp"));

    // Exactly the seeds' shape.
    const auto v = boost::json::parse(ftest::read_whole(f));
    const auto want = boost::json::parse(R"({"n01440764": {"id": 0, "name": "tench"},
                                             "n01443537": {"id": 1, "name": "goldfish"},
                                             "n01484850": {"id": 2, "name": "n01484850"}})");
    CHECK(v == want);

    const auto c = cf::read_classes(f);
    REQUIRE(c.size() == 3);
    for (std::size_t i = 0; i < 3; ++i) {
        CHECK(c[i].id == static_cast<std::int64_t>(i));
        CHECK(c[i].dir == l.classes[i]);
    }
    CHECK(c[0].name == "tench");
    CHECK(c[1].name == "goldfish");
    CHECK(c[2].name == "n01484850");

    // And the ids drive a walk to the same labels.
    const auto again = cf::walk(d / "data", {.labels = true, .classes = c});
    CHECK(labels_of(again) == labels_of(l));
    CHECK(again.classes == l.classes);
}

TEST_CASE("malformed classes files are classes_file_invalid (or invalid_json), naming the file")
{
    temp_dir d;
    const std::pair<const char*, std::error_code> cases[] = {
        {R"(["n01440764"])", cf::errc::classes_file_invalid},
        {R"("tench")", cf::errc::classes_file_invalid},
        {R"({"a": 3})", cf::errc::classes_file_invalid},
        {R"({"a": {"name": "x"}})", cf::errc::classes_file_invalid},
        {R"({"a": {"id": -1, "name": "x"}})", cf::errc::classes_file_invalid},
        {R"({"a": {"id": 1.5, "name": "x"}})", cf::errc::classes_file_invalid},
        {R"({"a": {"id": "0", "name": "x"}})", cf::errc::classes_file_invalid},
        {R"({"a": {"id": 0}, "b": null})", cf::errc::classes_file_invalid},
        {R"({"a": {"id": 0},)", cf::errc::invalid_json},
        {"", cf::errc::invalid_json},
    };
    int k = 0;
    for (const auto& [text, code] : cases) {
        INFO("classes file: " << std::string(text));
        const auto f = d / ("classes" + std::to_string(k++) + ".json");
        write_file(f, text);
        check_error(ftest::error_from([&] { (void)cf::read_classes(f); }), code, {f.string()});
    }
    // The message names the class that is wrong.
    const auto f = d / "named.json";
    write_file(f, R"({"good": {"id": 0}, "n0bad": {"name": "no id"}})");
    check_error(ftest::error_from([&] { (void)cf::read_classes(f); }), cf::errc::classes_file_invalid, {f.string(), "n0bad"});
    // A missing classes file.
    const auto missing = d / "missing.json";
    check_error(ftest::error_from([&] { (void)cf::read_classes(missing); }),
                std::make_error_code(std::errc::no_such_file_or_directory), {missing.string()});
}

// Regression test, fixed bug: read_classes accepts any non-negative int64 id, and apply_labels then sizes
// listing::classes as max_id + 1 strings. A classes file with one absurd id (a typo, or a
// hostile file) makes walk()/read_index() throw std::length_error (here) or try to allocate
// terabytes (an id like 4e9: 128 GB of std::string), instead of a conveyor::error
// `classes_file_invalid` naming the file. With id == INT64_MAX, `max_id + 1` is signed
// overflow (undefined behaviour) before that.
TEST_CASE("an absurd class id in a classes file is a classes_file_invalid error, not std::length_error")
{
    temp_dir d;
    write_file(d / "data/a/x.jpg", "x");
    const auto f = d / "classes.json";
    write_file(f, R"({"a": {"id": 9223372036854775806, "name": "huge"}})");
    std::exception_ptr caught;
    try {
        const auto c = cf::read_classes(f);
        (void)cf::walk(d / "data", {.labels = true, .classes = c});
    } catch (...) {
        caught = std::current_exception();
    }
    REQUIRE_MESSAGE(caught, "an id of 2^63-2 was accepted");
    try {
        std::rethrow_exception(caught);
    } catch (const cv::error& e) {
        CHECK(e.code() == cf::errc::classes_file_invalid);
        CHECK(std::string(e.what()).find(f.string()) != std::string::npos);
    } catch (const std::exception& e) {
        FAIL_CHECK("threw " << std::string(e.what()) << " instead of a conveyor::error naming " << f);
    }
}

// Regression test, fixed bug: ImageFolder labels are taken from the first component of the path exactly as written
// in the index, so "./cat/1.jpg" is put in a class named "." and "dog/../cat/2.jpg" (which
// read_index accepts: it stays inside the root, and the file read is cat/2.jpg) is labelled
// "dog". Both name files of class "cat"; labels should come from the normalised path.
TEST_CASE("read_index with labels takes the class from the normalised path")
{
    temp_dir d;
    const auto idx = write_index_text(d, R"(["cat/0.jpg", "./cat/1.jpg", "dog/../cat/2.jpg", "dog/3.jpg"])");
    const auto l = cf::read_index(idx, d / "root", {.labels = true});
    CHECK(l.classes == std::vector<std::string>{"cat", "dog"});
    CHECK(labels_of(l) == std::vector<std::int64_t>{0, 0, 0, 1});
}

// Regression test, fixed bug (minor): parse_json_file opens the index or classes file with std::ifstream, which
// "opens" a directory; reading it then fails and the empty text is reported as
// errc::invalid_json ("index: incomplete JSON (invalid JSON)"), which sends the user looking
// for a syntax error in a file that is a directory. Expected: EISDIR (or not_a_regular_file).
TEST_CASE("an index or classes file that is a directory is not reported as invalid JSON")
{
    temp_dir d;
    fs::create_directory(d / "index.json");
    for (const bool classes : {false, true}) {
        CAPTURE(classes);
        auto e = ftest::error_from([&] {
            if (classes) (void)cf::read_classes(d / "index.json");
            else (void)cf::read_index(d / "index.json", d.path());
        });
        REQUIRE(e);
        CHECK(std::string(e->what()).find((d / "index.json").string()) != std::string::npos);
        CHECK_MESSAGE((e->code() == std::errc::is_a_directory || e->code() == cf::errc::not_a_regular_file),
                      "code: " << e->code().message() << "; what(): " << std::string(e->what()));
    }
}

// ==== entries that cannot be paths =============================================================

namespace {

/// Checks that `e` is an invalid_argument error whose what() holds every one of `parts`, is
/// read whole as a C string, and holds no control character.
void check_entry_error(const std::optional<cv::error>& e, std::initializer_list<std::string> parts)
{
    check_error(e, std::make_error_code(std::errc::invalid_argument), parts);
    if (!e) return;
    const std::string w = e->what();
    CHECK_MESSAGE(std::strlen(e->what()) == w.size(), "what() is cut at a NUL: " << w);
    CHECK_MESSAGE(!conveyor_test::has_control_byte(w), "what() holds a control character: " << w);
}

} // namespace

// Issue 9: "b\u0000/../../../etc/passwd.jpg" was refused (it leaves the root) but the message
// was cut at the NUL (`entry 1 "b`); other control characters and "" were accepted.
TEST_CASE("read_index refuses empty entries and entries with a NUL or a control character, showing them escaped")
{
    temp_dir d;
    const fs::path root = d / "root";
    const auto nul = write_index_text(d, R"(["a.jpg", "b\u0000/../../../etc/passwd.jpg"])", "nul.json");
    auto e = ftest::error_from([&] { (void)cf::read_index(nul, root); });
    check_entry_error(e, {nul.string(), "entry 1 \"b\\x00/../../../etc/passwd.jpg\"", "NUL"});
    if (e) CHECK(e->where() == nul.string());

    const std::pair<const char*, const char*> controls[] = {
        {R"("x\ny.jpg")", "\"x\\ny.jpg\""},       {R"("x\ty.jpg")", "\"x\\ty.jpg\""},
        {R"("x\u001b[2Jy.jpg")", "\"x\\x1B[2Jy.jpg\""}, {R"("x\u007fy.jpg")", "\"x\\x7Fy.jpg\""},
        {R"("x\u0085y.jpg")", "\"x\\u0085y.jpg\""}, {R"("x\ry.jpg")", "\"x\\ry.jpg\""},
    };
    int k = 0;
    for (const auto& [json, shown] : controls) {
        const std::string entry_json = json; // CAPTURE cannot take a structured binding (clang)
        CAPTURE(entry_json);
        const auto idx = write_index_text(d, std::string("[\"ok.jpg\", ") + json + "]", "control" + std::to_string(k++) + ".json");
        check_entry_error(ftest::error_from([&] { (void)cf::read_index(idx, root); }),
                          {idx.string(), std::string("entry 1 ") + shown, "control character"});
    }

    const auto empty = write_index_text(d, R"(["a.jpg", "b.jpg", ""])", "empty.json");
    check_entry_error(ftest::error_from([&] { (void)cf::read_index(empty, root); }), {empty.string(), "entry 2 is empty"});

    // Characters that are not control characters are fine, UTF-8 included.
    const auto fine = write_index_text(d, R"(["caf\u00e9/\u65e5\u672c.jpg", "a b/#1 (copy) [x].jpg", "~/x.jpg"])", "fine.json");
    CHECK(paths_of(cf::read_index(fine, root)) ==
          std::vector<std::string>{"caf\xC3\xA9/\xE6\x97\xA5\xE6\x9C\xAC.jpg", "a b/#1 (copy) [x].jpg", "~/x.jpg"});
}

// Issue 9: an entry of 50 MB was copied whole into the message (what() was 50,000,126
// bytes); one that stayed inside the root was accepted, though no file can have that path.
TEST_CASE("read_index refuses an entry longer than a path can be, with a message of bounded size")
{
    temp_dir d;
    const fs::path root = d / "root";
    for (const std::string& start : {std::string("a"), std::string("/"), std::string("../")}) {
        CAPTURE(start);
        const std::string huge = start + std::string(50'000'000 - start.size(), 'x');
        const auto idx = write_index_text(d, boost::json::serialize(boost::json::array{"ok.jpg", huge.c_str()}), "huge.json");
        auto e = ftest::error_from([&] { (void)cf::read_index(idx, root); });
        REQUIRE(e);
        const std::string w = e->what();
        const std::string start_of_what = w.substr(0, 400); // what() may be huge: show its start
        CAPTURE(start_of_what);
        CHECK(w.size() < 1000);
        CHECK(w.find("entry 1 \"" + start + "xxx") != std::string::npos);
        CHECK(w.find("(50000000 bytes)") != std::string::npos);
        CHECK(w.find("longer than") != std::string::npos);
    }
    // The longest path a system call takes is still accepted.
    const std::string longest = std::string(4095, 'y');
    CHECK(cf::read_index(write_index_text(d, boost::json::serialize(boost::json::array{longest.c_str()}), "longest.json"), root)
              .size() == 1);

    // Something that is not a string is shown shortened too.
    boost::json::array numbers;
    for (int i = 0; i < 1'000'000; ++i) numbers.emplace_back(i);
    const auto idx = write_index_text(d, boost::json::serialize(boost::json::array{"ok.jpg", numbers}), "numbers.json");
    auto e = ftest::error_from([&] { (void)cf::read_index(idx, root); });
    check_error(e, cf::errc::index_entry_not_string, {idx.string(), "entry 1 is [0,1,2,"});
    if (e) CHECK(std::string(e->what()).size() < 1000);
}

TEST_CASE("from_paths and walk refuse paths with a NUL or a control character, and from_paths empty ones")
{
    using namespace std::string_literals;
    const std::pair<std::vector<std::string>, std::string> bad[] = {
        {{"a.jpg", "b\0c.jpg"s}, "entry 1 \"b\\x00c.jpg\""},
        {{"a.jpg", "b.jpg", "x\ny.jpg"}, "entry 2 \"x\\ny.jpg\""},
        {{"", "a.jpg"}, "entry 0 is empty"},
    };
    for (const auto& [paths, shown] : bad) {
        CAPTURE(shown);
        check_entry_error(ftest::error_from([&] { (void)cf::from_paths(paths); }), {shown});
    }
    CHECK(cf::from_paths({"/abs/a.jpg", "rel/b.jpg"}).size() == 2);

    temp_dir d;
    write_file(d / "data/a/1.jpg", "1");
    write_file(d / "data/a/bad\x1b[2Jname.jpg", "2");
    check_entry_error(ftest::error_from([&] { (void)cf::walk(d / "data"); }),
                      {(d / "data/a/bad\\x1B[2Jname.jpg").string(), "control character"});
}
