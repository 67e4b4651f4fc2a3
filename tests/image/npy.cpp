// Tests of conveyor/image/npy.hpp: every kind of array NumPy writes (np.save and
// np.lib.format.write_array, run by tests/image/npy_cases.py) reads back as NumPy wrote it,
// and files that lie about themselves are errors, never allocations sized by the header.
#include "support.hpp"

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/slice.hpp>
#include <conveyor/image/error.hpp>
#include <conveyor/image/npy.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

namespace image = conveyor::image;
using namespace conveyor_test_image;

namespace {

std::string file_text(const std::filesystem::path& p)
{
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string hex_of(std::string_view b)
{
    static constexpr char digits[] = "0123456789abcdef";
    std::string out;
    for (char c : b) {
        out += digits[static_cast<unsigned char>(c) >> 4];
        out += digits[static_cast<unsigned char>(c) & 15];
    }
    return out;
}

/// What reading `bytes` fails with ("" if it does not fail).
std::string failure(const std::string& bytes)
{
    std::error_code ec;
    const auto a = image::read_npy(slice_of(bytes), ec);
    if (!ec) return {};
    CHECK(ec == image::errc::bad_field);
    CHECK(a.data.empty());
    try {
        image::read_npy(slice_of(bytes));
    } catch (const conveyor::error& e) {
        CHECK(e.code() == image::errc::bad_field);
        return e.what();
    }
    FAIL("the throwing overload did not throw");
    return {};
}

} // namespace

TEST_CASE("every array NumPy saves reads back with its descr, shape, order and bytes, the data not copied")
{
#if defined(CONVEYOR_PYTHON) && defined(CONVEYOR_NPY_CASES)
    const auto dir = std::filesystem::temp_directory_path() / ("conveyor-npy-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    const std::string cmd = std::string(CONVEYOR_PYTHON) + " " + CONVEYOR_NPY_CASES + " " + dir.string() + " > /dev/null";
    const int rc = std::system(cmd.c_str());
    if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) {
        MESSAGE("skipped: NumPy is missing for " CONVEYOR_PYTHON " (Debian: python3-numpy)");
        return;
    }
    REQUIRE(rc == 0);
    const auto manifest = boost::json::parse(file_text(dir / "manifest.json")).as_array();
    CHECK(manifest.size() >= 36);
    for (const auto& entry : manifest) {
        const auto& c = entry.as_object();
        const std::string name(c.at("file").as_string());
        CAPTURE(name);
        const conveyor::slice bytes = slice_of(file_text(dir / name));
        const image::array_value a = image::read_npy(bytes);
        CHECK(a.descr == std::string(c.at("descr").as_string()));
        std::vector<std::int64_t> shape;
        for (const auto& d : c.at("shape").as_array()) shape.push_back(d.as_int64());
        CHECK(a.shape == shape);
        CHECK(a.fortran_order == c.at("fortran_order").as_bool());
        CHECK(a.item_size() == std::size_t(c.at("item_size").as_int64()));
        CHECK(image::npy_item_size(a.descr) == std::size_t(c.at("item_size").as_int64()));
        CHECK(a.data.size() == a.item_size() * a.elements());
        CHECK(hex_of(a.data.view()) == std::string(c.at("data").as_string()));
        if (!a.data.empty()) { // a view into the file's bytes, to their end
            CHECK(share_storage(a.data, bytes));
            CHECK(a.data.data() + a.data.size() == bytes.data() + bytes.size());
        }
        // The byte that says the version: 1, 2 or 3 as NumPy chose.
        CHECK(int(static_cast<unsigned char>(bytes.view()[6])) == c.at("version").as_array()[0].as_int64());
    }
    const std::string what = failure(file_text(dir / "object.npy"));
    CHECK(what.find("Python objects") != std::string::npos);
    std::filesystem::remove_all(dir);
#else
    MESSAGE("skipped: no Python interpreter was found when the tests were configured");
#endif
}

TEST_CASE("npy headers NumPy would write read as it reads them: versions, 0-d, empty, Python 2 longs, both quotes")
{
    const auto a = image::read_npy(slice_of(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", "abcd")));
    CHECK(a.shape.empty());
    CHECK(a.elements() == 1);
    CHECK(a.data.view() == "abcd");
    const auto e = image::read_npy(slice_of(npy_file("{'descr': '<i8', 'fortran_order': False, 'shape': (4, 0)}", "")));
    CHECK(e.shape == std::vector<std::int64_t>{4, 0});
    CHECK(e.elements() == 0);
    CHECK(e.data.empty());
    // Python 2's NumPy wrote `3L`; versions 1.0 and 2.0 read it, 3.0 does not.
    const auto l = image::read_npy(slice_of(npy_file("{\"descr\": \"|u1\", \"fortran_order\": True, \"shape\": (3L,)}", "xyz", 2)));
    CHECK(l.shape == std::vector<std::int64_t>{3});
    CHECK(l.fortran_order);
    CHECK(failure(npy_file("{'descr': '|u1', 'fortran_order': False, 'shape': (3L,)}", "xyz", 3)).find("not an integer") !=
          std::string::npos);
    // The keys in any order; a native-order descr is read as it says.
    const auto n = image::read_npy(slice_of(npy_file("{'shape': (2,), 'fortran_order': False, 'descr': '=u2'}", "abcd")));
    CHECK(n.descr == "=u2");
    CHECK(n.item_size() == 2);
}

TEST_CASE("npy_item_size sizes every dtype descriptor NumPy writes and none it does not")
{
    CHECK(image::npy_item_size("|b1") == 1u);
    CHECK(image::npy_item_size("<i8") == 8u);
    CHECK(image::npy_item_size(">u2") == 2u);
    CHECK(image::npy_item_size("<f2") == 2u);
    CHECK(image::npy_item_size("<f16") == 16u);
    CHECK(image::npy_item_size("<c32") == 32u);
    CHECK(image::npy_item_size("|S7") == 7u);
    CHECK(image::npy_item_size("<U3") == 12u);
    CHECK(image::npy_item_size("|V16") == 16u);
    CHECK(image::npy_item_size("<M8[ns]") == 8u);
    CHECK(image::npy_item_size("<m8[10ms]") == 8u);
    CHECK(image::npy_item_size("<M8") == 8u);
    CHECK(image::npy_item_size("[('x', '<f4'), ('y', '<i4', (2,))]") == 12u);
    CHECK(image::npy_item_size("[(('title', 'x'), '<f8'), ('n', [('a', '|u1'), ('b', '<i2')], (2, 3))]") == 8u + 3u * 6u);
    CHECK_FALSE(image::npy_item_size("|O"));
    CHECK_FALSE(image::npy_item_size("<i3"));
    CHECK_FALSE(image::npy_item_size("<f5"));
    CHECK_FALSE(image::npy_item_size("|b2"));
    CHECK_FALSE(image::npy_item_size("<M4"));
    CHECK_FALSE(image::npy_item_size("<M8[n s]"));
    CHECK_FALSE(image::npy_item_size("float32"));
    CHECK_FALSE(image::npy_item_size(""));
    CHECK_FALSE(image::npy_item_size("[('x', '<f4'), ('y')]"));
    CHECK_FALSE(image::npy_item_size("[('x', '<f4', -1)]"));
}

TEST_CASE("a .npy file that lies about itself is an error saying how, never an allocation sized by its header")
{
    const std::string good = npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", std::string(48, 'x'));
    CHECK(failure(good).empty());
    CHECK(failure("").find("magic") != std::string::npos);
    CHECK(failure("\x93NUMP").find("magic") != std::string::npos);
    std::string magic = good;
    magic[1] = 'M';
    CHECK(failure(magic).find("magic") != std::string::npos);
    std::string version = good;
    version[6] = 4;
    CHECK(failure(version).find("version 4.0") != std::string::npos);
    version[6] = 1;
    version[7] = 1;
    CHECK(failure(version).find("version 1.1") != std::string::npos);
    CHECK(failure(good.substr(0, 9)).find("header length") != std::string::npos);
    std::string past = good;
    past[8] = '\x00';
    past[9] = '\x20'; // 8192 bytes, within the limit
    CHECK(failure(past).find("runs past the end") != std::string::npos);
    CHECK(failure(good.substr(0, 40)).find("runs past the end") != std::string::npos);
    // Data shorter or longer than the shape and the type make.
    CHECK(failure(good.substr(0, good.size() - 1)).find("the .npy data are 47 bytes") != std::string::npos);
    CHECK(failure(good + "y").find("the .npy data are 49 bytes") != std::string::npos);
    // Shapes past any memory: the product overflows, or the bytes do.
    CHECK(failure(npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904, 4611686018427387904)}", ""))
              .find("larger than any memory") != std::string::npos);
    CHECK(failure(npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904,)}", ""))
              .find("larger than any memory") != std::string::npos);
    CHECK(failure(npy_file("{'descr': '|u1', 'fortran_order': False, 'shape': (1000000000000000000,)}", "abc"))
              .find("needs 1000000000000000000") != std::string::npos);
    CHECK(failure(npy_file("{'descr': '|u1', 'fortran_order': False, 'shape': (99999999999999999999,)}", ""))
              .find("beyond 64 bits") != std::string::npos);
    CHECK(failure(npy_file("{'descr': '|u1', 'fortran_order': False, 'shape': (2, -1)}", "")).find("negative") != std::string::npos);
    // Headers that are not the dictionary of the three keys.
    CHECK(failure(npy_file("{'descr': '|u1', 'shape': (1,)}", "a")).find("lacks") != std::string::npos);
    CHECK(failure(npy_file("{'descr': '|u1', 'fortran_order': False, 'shape': (1,), 'extra': 1}", "a")).find("'extra'") !=
          std::string::npos);
    CHECK(failure(npy_file("['descr', '|u1']", "a")).find("not a dictionary") != std::string::npos);
    CHECK(failure(npy_file("{'descr': '|u1', 'fortran_order': 0, 'shape': (1,)}", "a")).find("fortran_order") != std::string::npos);
    CHECK(failure(npy_file("{'descr': '|u1', 'fortran_order': False, 'shape': [1]}", "a")).find("not a tuple") != std::string::npos);
    CHECK(failure(npy_file("{'descr': '|u1', 'fortran_order': False, 'shape': (1)}", "a")).find("not a tuple") != std::string::npos);
    CHECK(failure(npy_file("{'descr': '|u1', 'fortran_order': False, 'shape': ('1',)}", "a")).find("not a tuple of integers") !=
          std::string::npos);
    CHECK(failure(npy_file("{'descr': '|O', 'fortran_order': False, 'shape': (1,)}", "a")).find("Python objects") != std::string::npos);
    CHECK(failure(npy_file("{'descr': '<i3', 'fortran_order': False, 'shape': (1,)}", "abc")).find("descr") != std::string::npos);
    CHECK(failure(npy_file("{'descr': '|u1', 'fortran_order': False, 'shape': (1,)} junk", "a")).find("text after") !=
          std::string::npos);
    CHECK(failure(npy_file("{'descr': '|u1, 'fortran_order': False}", "a")).find("does not parse") != std::string::npos);
    CHECK(failure(npy_file("{'descr': os.system('x'), 'fortran_order': False, 'shape': (1,)}", "a")).find("does not parse") !=
          std::string::npos);
    std::string deep = "{'descr': ";
    for (int i = 0; i < 100; ++i) deep += "[";
    CHECK(failure(npy_file(deep, "a")).find("nested deeper") != std::string::npos);
    // NumPy's own bound on header sizes, and a limit of one's own.
    const std::string long_header = npy_file("{'descr': '|u1', 'fortran_order': False, 'shape': (1,)" + std::string(12000, ' ') + "}", "a", 2);
    CHECK(failure(long_header).find("more than the limit of 10000") != std::string::npos);
    std::error_code ec;
    image::read_npy(slice_of(good), ec, {.max_header_bytes = 16});
    CHECK(ec == image::errc::bad_field);
    // Version 3.0 headers are UTF-8.
    CHECK(failure(npy_file("{'descr': [('\xE9', '|u1')], 'fortran_order': False, 'shape': (1,)}", "a", 3)).find("not UTF-8") !=
          std::string::npos);
    const auto latin1 = image::read_npy(slice_of(npy_file("{'descr': [('\xE9', '|u1')], 'fortran_order': False, 'shape': (1,)}", "a", 2)));
    CHECK(latin1.descr == "[('\xC3\xA9', '|u1')]");
}
