// Tests of conveyor/file/error.hpp: the file module's error codes and their category.
#include <conveyor/file/error.hpp>

#include <doctest/doctest.h>

#include <string>
#include <system_error>
#include <utility>

namespace cf = conveyor::file;

TEST_CASE("every file error code has its exact message in the conveyor.file category")
{
    CHECK(std::string(cf::file_category().name()) == "conveyor.file");
    const std::pair<cf::errc, const char*> expected[] = {
        {cf::errc::not_a_regular_file, "not a regular file"},
        {cf::errc::path_escapes_root, "path escapes the dataset root"},
        {cf::errc::index_not_array, "index is not a JSON array"},
        {cf::errc::index_entry_not_string, "index entry is not a string"},
        {cf::errc::invalid_json, "invalid JSON"},
        {cf::errc::classes_file_invalid, "classes file is not an object of {\"id\": N, \"name\": \"...\"} entries"},
        {cf::errc::file_shrank, "file shrank while being read"},
        {cf::errc::file_grew, "file grew while being read"},
        {cf::errc::uring_unavailable, "io_uring is unavailable"},
        {cf::errc::read_timed_out, "read timed out"},
    };
    int value = 1;
    for (const auto& [e, msg] : expected) {
        CAPTURE(value);
        const std::error_code ec = e; // implicit: is_error_code_enum
        CHECK(ec.value() == value++);
        CHECK(&ec.category() == &cf::file_category());
        CHECK(ec.message() == msg);
        CHECK(cf::make_error_code(e) == ec);
        CHECK(ec != std::error_code(ec.value(), std::generic_category())); // not confused with errno values
    }
    CHECK(cf::file_category().message(0) == "unknown conveyor.file error");
    CHECK(cf::file_category().message(99) == "unknown conveyor.file error");
}
