// Tests of conveyor/core/error.hpp: what conveyor::error's message shows of its context.
#include "support.hpp"

#include <conveyor/core/error.hpp>

#include <cstring>
#include <string>

namespace cv = conveyor;
using test::has_control_byte;

// Issue 9: a key, path or detail that holds a NUL was cut at the NUL when what() was read as
// a C string, control characters reached terminals and logs raw, and a 50 MB key made a
// 50 MB message.
TEST_CASE("conveyor::error escapes control characters and shortens long parts in what()")
{
    using namespace std::string_literals;
    SUBCASE("control characters are escaped, valid UTF-8 is kept, invalid bytes are escaped")
    {
        const cv::error e(cv::errc::invalid_argument, {.stage = "files",
                                                       .key = "a\0b\nc\td\x1b[2J\x7F"s,
                                                       .where = "/data/caf\xC3\xA9/\xE6\x97\xA5\xE6\x9C\xAC/x\xFF.jpg",
                                                       .detail = "entry 1 \"b\0/../etc/passwd\" is bad\r\n"s});
        const std::string w = e.what();
        CHECK(std::strlen(e.what()) == w.size()); // no NUL cuts it short
        CHECK_FALSE(has_control_byte(w));
        CHECK(w == "conveyor: stage 'files': /data/caf\xC3\xA9/\xE6\x97\xA5\xE6\x9C\xAC/x\\xFF.jpg: item 'a\\x00b\\nc\\td\\x1B[2J\\x7F': "
                   "entry 1 \"b\\x00/../etc/passwd\" is bad\\r\\n (invalid argument)");
        // The context itself keeps what it was given, for programs.
        CHECK(e.key() == "a\0b\nc\td\x1b[2J\x7F"s);
    }
    SUBCASE("C1 controls and bidirectional overrides are escaped")
    {
        const cv::error e(cv::errc::invalid_argument, {.key = "x\xC2\x9B" "1m\xE2\x80\xAEgpj.exe"});
        CHECK(std::string(e.what()) == "conveyor: item 'x\\u009B1m\\u202Egpj.exe': invalid argument");
    }
    SUBCASE("a long key, path or detail keeps its start and end and says how long it was")
    {
        const std::string key = "K" + std::string(50'000'000, 'k') + "END-OF-KEY";
        const std::string where = "/W" + std::string(100'000, 'w') + "/end-of-path.jpg";
        const std::string detail = "D" + std::string(1'000'000, 'd') + " end of detail";
        const cv::error e(cv::errc::invalid_argument, {.stage = "s", .key = key, .where = where, .detail = detail});
        const std::string w = e.what();
        const std::string start_of_what = w.substr(0, 400); // what() may be huge: show its start
        CAPTURE(start_of_what);
        CHECK(w.size() < 2000);
        CHECK(w.find("item 'Kkkk") != std::string::npos);
        CHECK(w.find("kkEND-OF-KEY (50000011 bytes)'") != std::string::npos);
        CHECK(w.find(" /Wwww") != std::string::npos);
        CHECK(w.find("ww/end-of-path.jpg (100018 bytes):") != std::string::npos);
        CHECK(w.find(" Dddd") != std::string::npos);
        CHECK(w.find("dd end of detail (1000015 bytes)") != std::string::npos);
        // Shortened parts are marked where they were cut.
        CHECK(w.find("k\xE2\x80\xA6k") != std::string::npos);
    }
    SUBCASE("a short message is unchanged")
    {
        const cv::error e(cv::errc::invalid_argument, {.stage = "files", .where = "/data/x.jpg", .detail = "too short"});
        CHECK(std::string(e.what()) == "conveyor: stage 'files': /data/x.jpg: too short (invalid argument)");
    }
}
