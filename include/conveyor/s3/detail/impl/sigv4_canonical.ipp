// conveyor/s3/detail/impl/sigv4_canonical.ipp — the text SigV4 signs: percent-encoding the
// SigV4 way, the canonical URI, query and header values, and which headers S3 signs. Part of
// the definitions of conveyor/s3/sigv4.hpp (included by impl/sigv4.ipp).
#ifndef CONVEYOR_S3_DETAIL_IMPL_SIGV4_CANONICAL_IPP
#define CONVEYOR_S3_DETAIL_IMPL_SIGV4_CANONICAL_IPP

#include <conveyor/s3/sigv4.hpp>

#include <conveyor/core/detail/ascii.hpp>

#include <boost/container/small_vector.hpp>
#include <boost/url/encode.hpp>
#include <boost/url/grammar/hexdig_chars.hpp>
#include <boost/url/grammar/string_token.hpp>
#include <boost/url/pct_string_view.hpp>
#include <boost/url/rfc/pchars.hpp>
#include <boost/url/rfc/unreserved_chars.hpp>

#include <algorithm>
#include <span>
#include <string>
#include <string_view>

namespace conveyor::s3::detail {

// The ASCII case helpers are core's (conveyor::detail); the s3 code names them as its own.
using conveyor::detail::ascii_lower;
using conveyor::detail::iequals;
using conveyor::detail::iless;

CONVEYOR_DECL bool ascii_space(char c) noexcept { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

CONVEYOR_DECL void append_lower(std::string& out, std::string_view s)
{
    const std::size_t at = out.size();
    out.resize(at + s.size());
    std::transform(s.begin(), s.end(), out.begin() + static_cast<std::ptrdiff_t>(at), ascii_lower);
}

/// Appends `s` percent-encoded: every byte outside `keep` (which must not hold '%') as
/// %XX, upper-case hex.
CONVEYOR_DECL void append_encoded(std::string& out, std::string_view s, const boost::urls::grammar::lut_chars& keep)
{
    const std::size_t n = boost::urls::encoded_size(s, keep);
    const std::size_t at = out.size();
    out.resize(at + n);
    boost::urls::encode(out.data() + at, n, s, keep);
}

/// Appends `s` percent-encoded the SigV4 way: all but RFC 3986's unreserved characters
/// (A-Z a-z 0-9 - . _ ~).
CONVEYOR_DECL void append_encoded(std::string& out, std::string_view s) { append_encoded(out, s, boost::urls::unreserved_chars); }

/// Whether `s[i]` starts a valid escape ("%" and two hex digits).
CONVEYOR_DECL bool escape_at(std::string_view s, std::size_t i) noexcept
{
    const auto& hex = boost::urls::grammar::hexdig_chars;
    return i + 2 < s.size() && s[i] == '%' && hex(s[i + 1]) && hex(s[i + 2]);
}

/// Appends an S3 path as sent: escapes and every character a path may hold (RFC 3986's
/// pchar and '/') stay exactly as they are; only bytes no path may hold (space, controls,
/// non-ASCII, '"', '<', '>', '\\', '^', '`', '{', '|', '}', a '%' that starts no escape) are
/// encoded, as any client must encode them to send them at all.
CONVEYOR_DECL void append_path_as_sent(std::string& out, std::string_view path)
{
    static constexpr boost::urls::grammar::lut_chars sendable = boost::urls::pchars + '/';
    std::size_t from = 0;
    for (std::size_t i = path.find('%'); i != std::string_view::npos; i = path.find('%', i + 1)) {
        if (!escape_at(path, i)) continue; // encoded as part of the run it is in
        append_encoded(out, path.substr(from, i - from), sendable);
        out.append(path.substr(i, 3));
        from = i + 3;
        i += 2;
    }
    append_encoded(out, path.substr(from), sendable);
}

/// Appends `s`, whose escapes are all valid, decoded and encoded again the SigV4 way.
CONVEYOR_DECL void append_reencoded_valid(std::string& out, std::string_view s, std::string& scratch)
{
    if (s.find('%') == std::string_view::npos) return append_encoded(out, s);
    const auto pct = boost::urls::make_pct_string_view(s);
    if (!pct) return append_encoded(out, s); // not reached: the caller split at bad escapes
    scratch.clear();
    pct->decode({}, boost::urls::string_token::assign_to(scratch));
    append_encoded(out, scratch);
}

/// Appends the canonical form of one query component: its escapes decoded, then encoded
/// the SigV4 way. A '%' that does not start an escape is a literal '%'.
CONVEYOR_DECL void append_reencoded(std::string& out, std::string_view s, std::string& scratch)
{
    std::size_t from = 0;
    for (std::size_t i = s.find('%'); i != std::string_view::npos; i = s.find('%', i + 1)) {
        if (escape_at(s, i)) continue;
        append_reencoded_valid(out, s.substr(from, i - from), scratch);
        out += "%25";
        from = i + 1;
    }
    append_reencoded_valid(out, s.substr(from), scratch);
}

/// Appends the canonical URI of `path`.
CONVEYOR_DECL void append_canonical_uri(std::string& out, std::string_view path, bool normalize)
{
    if (path.empty()) {
        out += '/';
        return;
    }
    if (!normalize) return append_path_as_sent(out, path);
    // RFC 3986's remove_dot_segments, with empty segments dropped too (AWS's rule, as
    // botocore and aws-c-auth apply it); then every segment is encoded once more.
    boost::container::small_vector<std::string_view, 16> kept;
    for (std::size_t from = 0; from <= path.size();) {
        std::size_t slash = path.find('/', from);
        if (slash == std::string_view::npos) slash = path.size();
        const auto seg = path.substr(from, slash - from);
        if (seg == "..") {
            if (!kept.empty()) kept.pop_back();
        } else if (!seg.empty() && seg != ".") {
            kept.push_back(seg);
        }
        from = slash + 1;
    }
    const std::size_t start = out.size();
    if (path.front() == '/') out += '/';
    for (std::size_t i = 0; i < kept.size(); ++i) {
        if (i != 0) out += '/';
        append_encoded(out, kept[i]);
    }
    if (path.back() == '/' && !kept.empty()) out += '/';
    if (out.size() == start) out += '/';
}

/// Appends the canonical query of `query`.
CONVEYOR_DECL void append_canonical_query(std::string& out, std::string_view query, std::string& scratch)
{
    if (query.empty()) return;
    // Each parameter is canonicalised into `encoded` ("name" then "value", back to back);
    // the parameters are then sorted by (name, value) and written out.
    struct param {
        std::size_t at, name_size, value_size;
    };
    boost::container::small_vector<param, 16> params;
    std::string encoded;
    encoded.reserve(query.size() + query.size() / 2);
    for (std::size_t from = 0; from <= query.size();) {
        std::size_t amp = query.find('&', from);
        if (amp == std::string_view::npos) amp = query.size();
        const auto piece = query.substr(from, amp - from);
        from = amp + 1;
        if (piece.empty()) continue;
        const std::size_t eq = piece.find('=');
        param p{encoded.size(), 0, 0};
        append_reencoded(encoded, piece.substr(0, eq), scratch);
        p.name_size = encoded.size() - p.at;
        if (eq != std::string_view::npos) append_reencoded(encoded, piece.substr(eq + 1), scratch);
        p.value_size = encoded.size() - p.at - p.name_size;
        params.push_back(p);
    }
    const std::string_view all = encoded;
    auto name = [&](const param& p) { return all.substr(p.at, p.name_size); };
    auto value = [&](const param& p) { return all.substr(p.at + p.name_size, p.value_size); };
    std::sort(params.begin(), params.end(), [&](const param& a, const param& b) {
        const int c = name(a).compare(name(b));
        return c != 0 ? c < 0 : value(a) < value(b);
    });
    for (std::size_t i = 0; i < params.size(); ++i) {
        if (i != 0) out += '&';
        out += name(params[i]);
        out += '=';
        out += value(params[i]);
    }
}

/// `headers`' addresses, sorted by lower-case name, then by position (so that values of a
/// repeated name keep their order).
CONVEYOR_DECL auto sorted_headers(std::span<const sigv4::header> headers)
{
    boost::container::small_vector<const sigv4::header*, 16> sorted;
    sorted.reserve(headers.size());
    for (const auto& h : headers) sorted.push_back(&h);
    std::sort(sorted.begin(), sorted.end(), [](const sigv4::header* a, const sigv4::header* b) {
        if (iless(a->name, b->name)) return true;
        if (iless(b->name, a->name)) return false;
        return a < b;
    });
    return sorted;
}

/// Appends a header value trimmed, with each inner run of white space made one space.
CONVEYOR_DECL void append_canonical_value(std::string& out, std::string_view v)
{
    // Word by word: most values are one word, appended at once.
    bool first = true;
    for (std::size_t i = 0; i < v.size();) {
        while (i < v.size() && ascii_space(v[i])) ++i;
        const std::size_t word = i;
        while (i < v.size() && !ascii_space(v[i])) ++i;
        if (i == word) break;
        if (!first) out += ' ';
        out.append(v.data() + word, i - word);
        first = false;
    }
}

/// Whether `s3::signer` signs a header of this name.
CONVEYOR_DECL bool s3_signs(std::string_view name) noexcept
{
    return iequals(name, "host") || iequals(name, "range") || iequals(name, "content-type") ||
           iequals(name, "content-md5") || (name.size() > 6 && iequals(name.substr(0, 6), "x-amz-"));
}

} // namespace conveyor::s3::detail

#endif
