// conveyor/image/impl/npy.ipp — the .npy reader (see npy.hpp): the header's Python literal
// parsed by a small recursive-descent parser of the literals NumPy writes there.
#ifndef CONVEYOR_IMAGE_IMPL_NPY_IPP
#define CONVEYOR_IMAGE_IMPL_NPY_IPP

#include <conveyor/core/error.hpp>
#include <conveyor/image/error.hpp>
#include <conveyor/image/npy.hpp>

#include <cctype>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

namespace conveyor::image {

namespace detail {

/// A Python literal of the kinds a .npy header holds (`ast.literal_eval`'s subset).
struct py_literal {
    enum class kind { none, boolean, integer, string, tuple, list, dict };
    kind k = kind::none;
    bool truth = false;
    std::int64_t number = 0;
    std::string text;               // a string's value
    std::vector<py_literal> items;  // a tuple's or list's elements; a dict's keys and values, alternating
    std::string_view source;        // the literal's text
};

/* Parses one literal from `s`: strings in single or double quotes (with a `u` prefix, and
   Python's simple escapes), integers (a sign, no leading zeros, Python 2's `L` suffix where
   `allow_long`), True, False, None, tuples (a single element needs its comma: `(5)` is 5),
   lists and dicts, with trailing commas; nesting at most `max_depth` deep. */
class py_parser {
public:
    py_parser(std::string_view s, bool allow_long) : s_(s), allow_long_(allow_long) {}

    /// The literal that is the whole of the text (white space around it allowed), or
    /// nullopt with `why()` saying what is wrong.
    std::optional<py_literal> parse_all()
    {
        py_literal v;
        if (!value(v, 0)) return std::nullopt;
        skip_space();
        if (i_ != s_.size()) return fail("text after the literal");
        return v;
    }

    const std::string& why() const noexcept { return why_; }

private:
    static constexpr int max_depth = 32;

    std::nullopt_t fail(std::string what)
    {
        if (why_.empty()) why_ = what + " at byte " + std::to_string(i_);
        return std::nullopt;
    }
    bool fails(std::string what)
    {
        fail(std::move(what));
        return false;
    }
    void skip_space()
    {
        while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\f' || s_[i_] == '\v'))
            ++i_;
    }
    bool at(char c) const noexcept { return i_ < s_.size() && s_[i_] == c; }
    bool word(std::string_view w)
    {
        if (s_.substr(i_, w.size()) != w) return false;
        const std::size_t end = i_ + w.size();
        if (end < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[end])) || s_[end] == '_')) return false;
        i_ = end;
        return true;
    }

    bool value(py_literal& v, int depth)
    {
        if (depth > max_depth) return fails("literal nested deeper than " + std::to_string(max_depth));
        skip_space();
        if (i_ >= s_.size()) return fails("the header ends where a value should be");
        const std::size_t begin = i_;
        bool ok = false;
        const char c = s_[i_];
        if (c == '\'' || c == '"' || ((c == 'u' || c == 'U') && i_ + 1 < s_.size() && (s_[i_ + 1] == '\'' || s_[i_ + 1] == '"'))) {
            ok = string(v);
        } else if (c == '-' || c == '+' || (c >= '0' && c <= '9')) {
            ok = integer(v);
        } else if (c == '(' || c == '[') {
            ok = sequence(v, depth);
        } else if (c == '{') {
            ok = dict(v, depth);
        } else if (word("True")) {
            v.k = py_literal::kind::boolean, v.truth = true, ok = true;
        } else if (word("False")) {
            v.k = py_literal::kind::boolean, v.truth = false, ok = true;
        } else if (word("None")) {
            v.k = py_literal::kind::none, ok = true;
        } else {
            ok = fails("not a literal NumPy writes");
        }
        if (ok) v.source = s_.substr(begin, i_ - begin);
        return ok;
    }

    bool string(py_literal& v)
    {
        if (s_[i_] == 'u' || s_[i_] == 'U') ++i_;
        const char quote = s_[i_++];
        v.k = py_literal::kind::string;
        for (;;) {
            if (i_ >= s_.size() || s_[i_] == '\n') return fails("a string without its closing quote");
            const char c = s_[i_++];
            if (c == quote) return true;
            if (c != '\\') {
                v.text += c;
                continue;
            }
            if (i_ >= s_.size()) return fails("a string without its closing quote");
            const char e = s_[i_++];
            switch (e) {
            case '\\': v.text += '\\'; break;
            case '\'': v.text += '\''; break;
            case '"': v.text += '"'; break;
            case 'n': v.text += '\n'; break;
            case 'r': v.text += '\r'; break;
            case 't': v.text += '\t'; break;
            case '0': v.text += '\0'; break;
            case 'x': {
                if (i_ + 2 > s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[i_])) ||
                    !std::isxdigit(static_cast<unsigned char>(s_[i_ + 1])))
                    return fails("a bad \\x escape");
                v.text += static_cast<char>(std::stoi(std::string(s_.substr(i_, 2)), nullptr, 16));
                i_ += 2;
                break;
            }
            default: // Python keeps an unknown escape as it is
                v.text += '\\';
                v.text += e;
            }
        }
    }

    bool integer(py_literal& v)
    {
        bool negative = false;
        if (s_[i_] == '-' || s_[i_] == '+') negative = s_[i_++] == '-';
        const std::size_t first = i_;
        std::uint64_t n = 0;
        bool overflow = false;
        while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
            const auto d = static_cast<std::uint64_t>(s_[i_++] - '0');
            if (n > (std::numeric_limits<std::uint64_t>::max() - d) / 10) overflow = true;
            else n = n * 10 + d;
        }
        if (i_ == first) return fails("a sign without digits");
        if (i_ - first > 1 && s_[first] == '0') return fails("an integer with a leading zero");
        if (allow_long_ && (at('L') || at('l'))) ++i_;
        if (i_ < s_.size() && (std::isalpha(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.' || s_[i_] == '_'))
            return fails("not an integer");
        const std::uint64_t limit = negative ? std::uint64_t{1} << 63 : std::uint64_t(std::numeric_limits<std::int64_t>::max());
        if (overflow || n > limit) return fails("an integer beyond 64 bits");
        v.k = py_literal::kind::integer;
        v.number = negative ? static_cast<std::int64_t>(0 - n) : static_cast<std::int64_t>(n);
        return true;
    }

    bool sequence(py_literal& v, int depth)
    {
        const bool tuple = s_[i_] == '(';
        const char close = tuple ? ')' : ']';
        ++i_;
        bool comma = false;
        for (;;) {
            skip_space();
            if (at(close)) {
                ++i_;
                break;
            }
            if (!v.items.empty() && !comma) return fails(std::string("expected ',' or '") + close + "'");
            py_literal item;
            if (!value(item, depth + 1)) return false;
            v.items.push_back(std::move(item));
            skip_space();
            comma = at(',');
            if (comma) ++i_;
        }
        if (tuple && v.items.size() == 1 && !comma) { // `(x)` is x, not a tuple
            py_literal inner = std::move(v.items.front());
            v = std::move(inner);
            return true;
        }
        v.k = tuple ? py_literal::kind::tuple : py_literal::kind::list;
        return true;
    }

    bool dict(py_literal& v, int depth)
    {
        ++i_;
        v.k = py_literal::kind::dict;
        bool comma = true;
        for (;;) {
            skip_space();
            if (at('}')) {
                ++i_;
                return true;
            }
            if (!comma) return fails("expected ',' or '}'");
            py_literal key, value_;
            if (!value(key, depth + 1)) return false;
            skip_space();
            if (!at(':')) return fails("expected ':'");
            ++i_;
            if (!value(value_, depth + 1)) return false;
            v.items.push_back(std::move(key));
            v.items.push_back(std::move(value_));
            skip_space();
            comma = at(',');
            if (comma) ++i_;
        }
    }

    std::string_view s_;
    std::size_t i_ = 0;
    bool allow_long_;
    std::string why_;
};

inline bool multiply(std::size_t a, std::size_t b, std::size_t& out) noexcept
{
    if (b != 0 && a > std::numeric_limits<std::size_t>::max() / b) return false;
    out = a * b;
    return true;
}

/// Bytes per element of a plain descriptor string (`<f4`, `|S10`, `<M8[ns]`).
inline std::optional<std::size_t> plain_item_size(std::string_view d)
{
    if (!d.empty() && (d.front() == '<' || d.front() == '>' || d.front() == '|' || d.front() == '=')) d.remove_prefix(1);
    if (d.empty()) return std::nullopt;
    const char kind = d.front();
    d.remove_prefix(1);
    if (kind == 'M' || kind == 'm') { // a unit in brackets may follow: [ns], [10ms]
        if (const auto open = d.find('['); open != std::string_view::npos) {
            if (d.back() != ']' || open + 2 > d.size() - 1) return std::nullopt;
            for (char c : d.substr(open + 1, d.size() - open - 2))
                if (!std::isalnum(static_cast<unsigned char>(c))) return std::nullopt;
            d = d.substr(0, open);
        }
    }
    if (d.empty() || d.size() > 12) return std::nullopt;
    std::size_t n = 0;
    for (char c : d) {
        if (c < '0' || c > '9') return std::nullopt;
        n = n * 10 + static_cast<std::size_t>(c - '0');
    }
    auto one_of = [n](std::initializer_list<std::size_t> sizes) -> std::optional<std::size_t> {
        for (auto s : sizes)
            if (s == n) return n;
        return std::nullopt;
    };
    switch (kind) {
    case 'b': return one_of({1});
    case 'i':
    case 'u': return one_of({1, 2, 4, 8});
    case 'f': return one_of({2, 4, 8, 12, 16});
    case 'c': return one_of({8, 16, 24, 32});
    case 'M':
    case 'm': return one_of({8});
    case 'S':
    case 'V': return n;
    case 'U': return n * 4;
    default: return std::nullopt; // 'O' (pickled objects) among them
    }
}

inline std::optional<std::size_t> literal_item_size(const py_literal& d, int depth);

/// The size of a shape given as an integer or a tuple of them (a structured field's).
inline std::optional<std::size_t> literal_count(const py_literal& s)
{
    if (s.k == py_literal::kind::integer) return s.number < 0 ? std::nullopt : std::optional<std::size_t>(static_cast<std::size_t>(s.number));
    if (s.k != py_literal::kind::tuple) return std::nullopt;
    std::size_t n = 1;
    for (const auto& d : s.items) {
        if (d.k != py_literal::kind::integer || d.number < 0 || !multiply(n, static_cast<std::size_t>(d.number), n)) return std::nullopt;
    }
    return n;
}

inline std::optional<std::size_t> literal_item_size(const py_literal& d, int depth)
{
    if (d.k == py_literal::kind::string) return plain_item_size(d.text);
    if (d.k != py_literal::kind::list || depth > 16) return std::nullopt;
    std::size_t total = 0;
    for (const auto& f : d.items) {
        if (f.k != py_literal::kind::tuple || (f.items.size() != 2 && f.items.size() != 3)) return std::nullopt;
        const py_literal& name = f.items[0];
        const bool titled = name.k == py_literal::kind::tuple && name.items.size() == 2 &&
                            name.items[0].k == py_literal::kind::string && name.items[1].k == py_literal::kind::string;
        if (name.k != py_literal::kind::string && !titled) return std::nullopt;
        std::optional<std::size_t> size = literal_item_size(f.items[1], depth + 1);
        if (!size) return std::nullopt;
        if (f.items.size() == 3) {
            const std::optional<std::size_t> count = literal_count(f.items[2]);
            if (!count || !multiply(*size, *count, *size)) return std::nullopt;
        }
        if (*size > std::numeric_limits<std::size_t>::max() - total) return std::nullopt;
        total += *size;
    }
    return total;
}

inline std::string latin1_to_utf8(std::string_view s)
{
    std::string out;
    out.reserve(s.size());
    for (char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        if (c < 0x80) {
            out += ch;
        } else {
            out += static_cast<char>(0xC0 | (c >> 6));
            out += static_cast<char>(0x80 | (c & 0x3F));
        }
    }
    return out;
}

inline std::string shape_text(const std::vector<std::int64_t>& shape)
{
    std::string s = "(";
    for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + (shape.size() == 1 ? ",)" : ")");
}

CONVEYOR_DECL std::string parse_npy(const slice& bytes, const npy_limits& limits, array_value& out)
{
    static constexpr std::string_view magic("\x93NUMPY", 6);
    const std::string_view b = bytes.view();
    if (b.size() < magic.size() + 2 || b.substr(0, magic.size()) != magic)
        return "not a NumPy .npy file: it does not start with the magic string \\x93NUMPY";
    const unsigned major = static_cast<unsigned char>(b[6]), minor = static_cast<unsigned char>(b[7]);
    if ((major != 1 && major != 2 && major != 3) || minor != 0)
        return "a .npy file of format version " + std::to_string(major) + "." + std::to_string(minor) +
               ", which is none of NumPy's (1.0, 2.0, 3.0)";
    const std::size_t length_bytes = major == 1 ? 2 : 4;
    const std::size_t prefix = magic.size() + 2 + length_bytes;
    if (b.size() < prefix) return "a .npy file cut short in its header length (" + std::to_string(b.size()) + " bytes)";
    std::size_t header_length = 0;
    for (std::size_t i = 0; i < length_bytes; ++i) header_length |= std::size_t{static_cast<unsigned char>(b[8 + i])} << (8 * i);
    if (header_length > limits.max_header_bytes)
        return "the .npy header is " + std::to_string(header_length) + " bytes, more than the limit of " +
               std::to_string(limits.max_header_bytes) + " (npy_limits::max_header_bytes)";
    if (header_length > b.size() - prefix)
        return "the .npy header's length (" + std::to_string(header_length) + " bytes) runs past the end of the data (" +
               std::to_string(b.size()) + " bytes)";
    std::string header(b.substr(prefix, header_length));
    if (major < 3) {
        header = latin1_to_utf8(header);
    } else {
        for (std::size_t i = 0; i < header.size();) {
            char32_t cp = 0;
            const std::size_t n = conveyor::detail::utf8_sequence(std::string_view(header).substr(i), cp);
            if (n == 0) return "the .npy header (version 3.0) is not UTF-8 at byte " + std::to_string(i);
            i += n;
        }
    }
    py_parser parser(header, major < 3);
    const std::optional<py_literal> dict = parser.parse_all();
    if (!dict) return "the .npy header does not parse: " + parser.why() + " of \"" + conveyor::detail::printable(header, 120) + "\"";
    if (dict->k != py_literal::kind::dict) return "the .npy header is not a dictionary: \"" + conveyor::detail::printable(header, 120) + "\"";
    const py_literal *descr = nullptr, *fortran = nullptr, *shape = nullptr;
    for (std::size_t i = 0; i + 1 < dict->items.size(); i += 2) {
        const py_literal& k = dict->items[i];
        const py_literal* v = &dict->items[i + 1];
        if (k.k == py_literal::kind::string && k.text == "descr" && !descr) descr = v;
        else if (k.k == py_literal::kind::string && k.text == "fortran_order" && !fortran) fortran = v;
        else if (k.k == py_literal::kind::string && k.text == "shape" && !shape) shape = v;
        else return "the .npy header has the key " + std::string(k.source) + "; it holds 'descr', 'fortran_order' and 'shape', nothing else";
    }
    if (!descr || !fortran || !shape) return "the .npy header lacks 'descr', 'fortran_order' or 'shape': \"" + conveyor::detail::printable(header, 120) + "\"";
    if (fortran->k != py_literal::kind::boolean) return "the .npy header's fortran_order is " + std::string(fortran->source) + ", not True or False";
    if (shape->k != py_literal::kind::tuple) return "the .npy header's shape is " + std::string(shape->source) + ", not a tuple";
    if (descr->k != py_literal::kind::string && descr->k != py_literal::kind::list)
        return "the .npy header's descr is " + std::string(descr->source) + ", not a dtype descriptor";
    const std::optional<std::size_t> item = literal_item_size(*descr, 0);
    if (!item) {
        const std::string text = descr->k == py_literal::kind::string ? descr->text : std::string(descr->source);
        if (descr->k == py_literal::kind::string && text.find('O') != std::string::npos)
            return "the .npy array holds Python objects (descr '" + text + "'), whose elements are pickles: not read";
        return "the .npy header's descr " + conveyor::detail::printable(text, 120) + " is not a NumPy dtype this reader sizes";
    }
    array_value a;
    a.descr = descr->k == py_literal::kind::string ? descr->text : std::string(descr->source);
    a.fortran_order = fortran->truth;
    std::size_t count = 1;
    bool fits = true;
    for (const auto& d : shape->items) {
        if (d.k != py_literal::kind::integer) return "the .npy header's shape " + std::string(shape->source) + " is not a tuple of integers";
        if (d.number < 0) return "the .npy header's shape " + std::string(shape->source) + " has a negative dimension";
        a.shape.push_back(d.number);
        fits = fits && multiply(count, static_cast<std::size_t>(d.number), count);
    }
    std::size_t need = 0;
    if (!fits || !multiply(count, *item, need))
        return "the .npy header's shape " + shape_text(a.shape) + " of '" + conveyor::detail::printable(a.descr, 60) +
               "' is larger than any memory";
    const std::size_t have = b.size() - prefix - header_length;
    if (have != need)
        return "the .npy data are " + std::to_string(have) + " bytes; shape " + shape_text(a.shape) + " of '" +
               conveyor::detail::printable(a.descr, 60) + "' (" + std::to_string(*item) + " bytes each) needs " + std::to_string(need);
    a.data = bytes.sub(prefix + header_length, need);
    out = std::move(a);
    return {};
}

} // namespace detail

CONVEYOR_DECL std::size_t array_value::item_size() const noexcept
{
    try {
        return npy_item_size(descr).value_or(0);
    } catch (...) {
        return 0;
    }
}

CONVEYOR_DECL std::size_t array_value::elements() const noexcept
{
    std::size_t n = 1;
    for (auto d : shape) n *= static_cast<std::size_t>(d);
    return n;
}

CONVEYOR_DECL std::optional<std::size_t> npy_item_size(std::string_view descr)
{
    if (descr.empty()) return std::nullopt;
    if (descr.front() != '[') return detail::plain_item_size(descr);
    detail::py_parser parser(descr, false);
    const std::optional<detail::py_literal> d = parser.parse_all();
    if (!d) return std::nullopt;
    return detail::literal_item_size(*d, 0);
}

CONVEYOR_DECL array_value read_npy(const slice& bytes, const npy_limits& limits)
{
    array_value out;
    std::string why = detail::parse_npy(bytes, limits, out);
    if (!why.empty()) throw conveyor::error(make_error_code(errc::bad_field), {.detail = std::move(why)});
    return out;
}

CONVEYOR_DECL array_value read_npy(const slice& bytes, std::error_code& ec, const npy_limits& limits)
{
    array_value out;
    ec = detail::parse_npy(bytes, limits, out).empty() ? std::error_code() : make_error_code(errc::bad_field);
    return out;
}

} // namespace conveyor::image

#endif
