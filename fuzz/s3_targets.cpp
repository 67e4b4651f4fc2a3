// fuzz/s3_targets.cpp — the S3 module's parsers: SigV4's canonical request, the XML replies
// (listing, errors, multipart), and the shared config/credentials files.
#include "targets.hpp"

#include <conveyor/core/error.hpp>
#include <conveyor/s3/client.hpp>
#include <conveyor/s3/config.hpp>
#include <conveyor/s3/detail/xml.hpp>
#include <conveyor/s3/sigv4.hpp>

#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/verb.hpp>
#include <boost/property_tree/ptree.hpp>

#include <chrono>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor::fuzz {

namespace {

bool is_hex(char c) noexcept
{
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f');
}

bool is_unreserved(char c) noexcept
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
           c == '~';
}

/// True when every byte of `s` is printable ASCII and every '%' starts an escape.
bool wire_safe(std::string_view s) noexcept
{
    for (std::size_t i = 0; i < s.size(); ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c <= 0x20 || c >= 0x7f) return false;
        if (c == '%' && (i + 2 >= s.size() || !is_hex(s[i + 1]) || !is_hex(s[i + 2]))) return false;
    }
    return true;
}

std::vector<std::string_view> lines_of(std::string_view text)
{
    std::vector<std::string_view> out;
    while (!text.empty()) {
        const auto nl = text.find('\n');
        out.push_back(text.substr(0, nl));
        text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    }
    return out;
}

} // namespace

void sigv4(input in)
{
    // Line 1: the method; 2: the path; 3: the query; then one header per line, "name:value".
    const auto lines = lines_of(as_text(in));
    const std::uint64_t h = hash_of(in);
    auto line = [&](std::size_t i) { return i < lines.size() ? lines[i] : std::string_view{}; };
    std::vector<s3::sigv4::header> headers;
    for (std::size_t i = 3; i < lines.size(); ++i) {
        const auto colon = lines[i].find(':');
        headers.push_back({lines[i].substr(0, colon), colon == std::string_view::npos ? std::string_view{} : lines[i].substr(colon + 1)});
    }
    s3::sigv4::request r;
    r.method = line(0);
    r.path = line(1);
    r.query = line(2);
    r.headers = headers;
    r.payload_hash = s3::unsigned_payload;
    r.normalize_path = (h & 1) != 0;

    // Documented to throw std::bad_alloc only: any conveyor::error escapes as a finding.
    const auto c = s3::sigv4::make_canonical_request(r);
    check(c.signed_headers == s3::sigv4::signed_header_names(headers), "signed headers differ from signed_header_names");
    const std::string uri = s3::sigv4::canonical_uri(r.path, r.normalize_path);
    const std::string query = s3::sigv4::canonical_query(r.query);
    check(wire_safe(uri), "canonical URI holds a byte no request line can carry");
    if (r.path.starts_with('/')) check(uri.front() == '/', "canonical URI does not start with '/'");
    for (char ch : query)
        check(is_unreserved(ch) || ch == '%' || ch == '=' || ch == '&', "canonical query holds a byte left unencoded");
    check(wire_safe(query), "canonical query has a bad escape");
    check(s3::sigv4::canonical_query(query) == query, "canonical query is not canonical again");
    check(c.text.starts_with(std::string(r.method) + "\n" + uri + "\n" + query + "\n"),
          "canonical request does not start with method, URI and query");

    // The signer's way (Beast fields, as the client signs), and presigning.
    const s3::signer sg({.access_key_id = "AKIDEXAMPLE", .secret_access_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                         .session_token = (h & 2) ? "token" : ""},
                        "us-east-1", (h & 4) ? "s3" : "iam");
    const auto now = std::chrono::system_clock::time_point(std::chrono::seconds(1440938160));
    std::string target(r.path);
    if (!r.query.empty()) target += "?" + std::string(r.query);
    boost::beast::http::fields f;
    try {
        // Names as strings, not views into the input: Boost 1.81's beast::iequals reads one
        // byte past its arguments when they differ in case only in their last character
        // (harmless inside the fields' own storage, where a name is followed by its value).
        for (const auto& hd : headers) {
            const std::string name(hd.name), value(hd.value);
            f.insert(name, value);
        }
    } catch (const std::exception&) {
        return; // Beast refuses some names and values (a test of Beast's, not ours)
    }
    try {
        sg.sign(boost::beast::http::verb::get, target, f, s3::unsigned_payload, now);
        check(f.count(boost::beast::http::field::authorization) == 1, "a signed request without one Authorization");
    } catch (const conveyor::error& e) {
        check_message(e);
        check(e.code() == std::errc::invalid_argument, "sign failed with another error than invalid_argument");
    }
    try {
        const auto url = sg.presign(boost::beast::http::verb::get, target, line(3), std::chrono::seconds(3600), now);
        check(url.find("X-Amz-Signature=") != std::string::npos, "a presigned target without its signature");
    } catch (const conveyor::error& e) {
        check_message(e);
    }
}

void s3_xml(input in)
{
    // The first byte chooses the reply; the rest is its body.
    if (in.empty()) return;
    const std::uint8_t which = in[0];
    const std::string_view body = as_text(in.subspan(1));
    try {
        switch (which % 5) {
        case 0: {
            const auto page = s3::detail::parse_list_page(body);
            for (const auto& o : page.objects) check(o.size >= -1, "a listed object with a negative size");
            break;
        }
        case 1: {
            const auto e = s3::detail::parse_error_reply(400 + which % 200, body, "REQID");
            check(e.status == 400u + which % 200, "error reply lost its status");
            (void)e.describe();
            (void)e.to_error_code();
            break;
        }
        case 2: (void)s3::detail::parse_upload_id(body); break;
        case 3: {
            const auto e = s3::detail::complete_reply_error(body);
            if (e) (void)e->describe();
            break;
        }
        case 4: {
            // What the client writes from a server's ETags must be XML it can read back.
            // (The checksums are the client's own, base64.)
            std::vector<std::string> etags;
            for (auto l : lines_of(body)) {
                // ETags come from response headers, which Beast's parser takes only without
                // control characters (but HTAB).
                std::string etag;
                for (char ch : l)
                    if (static_cast<unsigned char>(ch) >= 0x20 && ch != 0x7f) etag += ch;
                etags.push_back(std::move(etag));
            }
            const std::vector<std::string> checksums(etags.size(), "AAAAAA==");
            const std::string doc = s3::detail::complete_multipart_body(etags, "CRC32", checksums);
            try {
                (void)s3::detail::parse_xml(doc, "CompleteMultipartUpload");
            } catch (const conveyor::error& e) {
                check(false, std::string("complete_multipart_body wrote XML that parse_xml refuses: ") + e.what());
            }
            (void)s3::detail::url_decoded(body, true);
            break;
        }
        }
    } catch (const conveyor::error& e) {
        check_message(e);
    }
}

void aws_config(input in)
{
    // The input is the config file, then (after a line "\x1f") the credentials file; the
    // hash chooses the profile and whether the input is the JSON credentials file instead.
    static const bool env_set = [] {
        for (const char* v : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_REGION",
                              "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL_STS",
                              "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME", "AWS_WEB_IDENTITY_TOKEN_FILE",
                              "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                              "AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
                              "AWS_EC2_METADATA_SERVICE_ENDPOINT", "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE",
                              "AWS_STS_REGIONAL_ENDPOINTS"})
            ::unsetenv(v);
        ::setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
        ::setenv("HOME", "/nonexistent-conveyor-fuzz-home", 1);
        return true;
    }();
    (void)env_set;
    const std::uint64_t h = hash_of(in);
    const std::string_view text = as_text(in);
    s3::config_options o;
    static constexpr std::string_view profiles[] = {"", "default", "dev", "a"};
    o.profile = std::string(profiles[(h >> 1) % 4]);
    if (h & 1) {
        o.credentials_file = memory_file(0, in);
    } else {
        const auto sep = text.find("\n\x1f\n");
        const std::string_view config = text.substr(0, sep);
        const std::string_view creds = sep == std::string_view::npos ? std::string_view{} : text.substr(sep + 3);
        ::setenv("AWS_CONFIG_FILE", memory_file(0, {reinterpret_cast<const std::uint8_t*>(config.data()), config.size()}).c_str(), 1);
        ::setenv("AWS_SHARED_CREDENTIALS_FILE",
                 memory_file(1, {reinterpret_cast<const std::uint8_t*>(creds.data()), creds.size()}).c_str(), 1);
    }
    try {
        const s3::config c = s3::resolve_config(o);
        check(!c.region.empty(), "a resolved config without a region");
        (void)c.describe();
        (void)s3::target_for(c, "bucket", "a/key");
    } catch (const conveyor::error& e) {
        check_message(e);
    }
}

} // namespace conveyor::fuzz
