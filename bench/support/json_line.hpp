// bench/support/json_line.hpp — one flat JSON object per line, for benchmark results.
#ifndef CONVEYOR_BENCH_SUPPORT_JSON_LINE_HPP
#define CONVEYOR_BENCH_SUPPORT_JSON_LINE_HPP

#include <charconv>
#include <concepts>
#include <cstdio>
#include <string>
#include <string_view>

namespace conveyor::bench {

/** Builds one flat JSON object, keys in the order they were added, and prints it as one
    line (the "JSON lines" format that `jq`, pandas and spreadsheets read).

    Only flat objects of strings, booleans, integers and numbers are needed for results,
    so this writes them directly rather than building a document tree: the output is
    exactly the fields, in order, with strings escaped per RFC 8259. Numbers that are not
    finite are written as `null`.

    @code
    json_line().add("bench", "files").add("files", 20000).add("seconds", 1.234).print();
    // {"bench":"files","files":20000,"seconds":1.234}
    @endcode

    @par Thread Safety
    Distinct objects: safe. Shared objects: unsafe. `print` writes the line with one
    call, so lines from several threads do not interleave.
*/
class json_line {
public:
    /// Significant digits for floating-point values unless `add` is told otherwise.
    static constexpr int default_precision = 6;

    /// Adds a string field.
    json_line& add(std::string_view key, std::string_view value);
    json_line& add(std::string_view key, const char* value);
    json_line& add(std::string_view key, const std::string& value);

    /// Adds a boolean field.
    json_line& add(std::string_view key, bool value);

    /// Adds an integer field.
    template <std::integral I>
        requires(!std::same_as<I, bool>)
    json_line& add(std::string_view key, I value)
    {
        field(key);
        char buf[32];
        auto r = std::to_chars(buf, buf + sizeof buf, value);
        s_.append(buf, r.ptr);
        return *this;
    }

    /// Adds a number with `precision` significant digits (`null` if not finite).
    json_line& add(std::string_view key, double value, int precision = default_precision);
    json_line& add(std::string_view key, float value, int precision = default_precision);

    /// The object as text, without a newline.
    std::string str() const;

    /// Writes the object and a newline to `out` (standard output by default) and flushes.
    void print(std::FILE* out = stdout) const;

private:
    void field(std::string_view key);

    void quote(std::string_view v);

    std::string s_;
};

} // namespace conveyor::bench

#endif
