// tests/s3/sigv4.cpp — Signature Version 4: AWS's own test suite, AWS's published S3
// examples, and the S3 signer's rules (key cache, session tokens, payload hashes, keys that
// need encoding, anonymous access).
#include <conveyor/s3/sigv4.hpp>

#include <doctest/doctest.h>

#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/verb.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <boost/url/encode.hpp>
#include <boost/url/rfc/unreserved_chars.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace {

namespace fs = std::filesystem;
namespace s3 = conveyor::s3;
namespace sigv4 = conveyor::s3::sigv4;
namespace http = boost::beast::http;
using namespace std::chrono_literals;
using std::chrono::system_clock;

// ---------------------------------------------------------------------------------------
// AWS's test suite (awslabs/aws-c-auth, tests/aws-signing-test-suite/v4), read at test time.

// How many cases the suite at ../shared/testdata/aws-sigv4-suite holds: the test fails if
// it finds another number, so it cannot pass by finding none.
constexpr std::size_t suite_cases = 38;

fs::path suite_dir()
{
    if (const char* env = std::getenv("CONVEYOR_SIGV4_SUITE"); env != nullptr && *env != '\0') return env;
    return CONVEYOR_SIGV4_SUITE_DIR;
}

std::string slurp(const fs::path& p)
{
    std::ifstream in(p, std::ios::binary);
    REQUIRE_MESSAGE(in.good(), "cannot read " << p.string());
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// request.txt: "METHOD target HTTP/1.1", "Name:value" lines (a line starting with white space
// continues the previous value), a blank line, the body. The target may hold raw spaces.
struct suite_request {
    std::string method, path, query;
    std::vector<std::pair<std::string, std::string>> headers;
    std::string body;

    std::vector<sigv4::header> header_views() const
    {
        std::vector<sigv4::header> v;
        for (const auto& [n, val] : headers) v.push_back({n, val});
        return v;
    }
};

suite_request parse_request(std::string_view text)
{
    suite_request r;
    std::vector<std::string_view> lines;
    std::size_t from = 0;
    for (;;) {
        const auto nl = text.find('\n', from);
        auto line = text.substr(from, nl - from);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        lines.push_back(line);
        if (nl == std::string_view::npos) break;
        from = nl + 1;
    }
    REQUIRE(!lines.empty());
    const auto first = lines[0];
    const auto sp1 = first.find(' ');
    const auto sp2 = first.rfind(' ');
    REQUIRE(sp1 != std::string_view::npos);
    REQUIRE(sp2 > sp1);
    r.method = first.substr(0, sp1);
    const auto target = first.substr(sp1 + 1, sp2 - sp1 - 1);
    const auto q = target.find('?');
    r.path = target.substr(0, q);
    if (q != std::string_view::npos) r.query = target.substr(q + 1);
    std::size_t i = 1;
    for (; i < lines.size() && !lines[i].empty(); ++i) {
        const auto line = lines[i];
        if ((line.front() == ' ' || line.front() == '\t') && !r.headers.empty()) {
            r.headers.back().second += '\n';
            r.headers.back().second += line;
            continue;
        }
        const auto colon = line.find(':');
        REQUIRE_MESSAGE(colon != std::string_view::npos, "bad header line: " << line);
        r.headers.emplace_back(line.substr(0, colon), line.substr(colon + 1));
    }
    for (std::size_t j = i + 1; j < lines.size(); ++j) {
        if (j != i + 1) r.body += '\n';
        r.body += lines[j];
    }
    return r;
}

system_clock::time_point parse_iso8601(std::string_view s)
{
    int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0;
    REQUIRE(std::sscanf(std::string(s).c_str(), "%d-%d-%dT%d:%d:%dZ", &y, &mo, &d, &h, &mi, &sec) == 6);
    const std::chrono::sys_days day = std::chrono::year{y} / mo / d;
    return day + std::chrono::hours{h} + std::chrono::minutes{mi} + std::chrono::seconds{sec};
}

struct suite_context {
    std::string access_key_id, secret_access_key, token, region, service;
    system_clock::time_point when;
    std::chrono::seconds expires{};
    bool normalize = true, sign_body = false, omit_session_token = false;
};

suite_context parse_context(std::string_view text)
{
    const auto root = boost::json::parse(text).as_object();
    const auto& creds = root.at("credentials").as_object();
    suite_context c;
    c.access_key_id = creds.at("access_key_id").as_string();
    c.secret_access_key = creds.at("secret_access_key").as_string();
    if (const auto* t = creds.if_contains("token")) c.token = t->as_string();
    c.region = root.at("region").as_string();
    c.service = root.at("service").as_string();
    c.when = parse_iso8601(root.at("timestamp").as_string());
    c.expires = std::chrono::seconds(root.at("expiration_in_seconds").to_number<long long>());
    c.normalize = root.at("normalize").as_bool();
    c.sign_body = root.at("sign_body").as_bool();
    if (const auto* o = root.if_contains("omit_session_token")) c.omit_session_token = o->as_bool();
    return c;
}

// The value of the first line of `text` that starts with `prefix`, or "".
std::string line_after(std::string_view text, std::string_view prefix)
{
    for (std::size_t from = 0; from < text.size();) {
        const auto nl = text.find('\n', from);
        const auto line = text.substr(from, nl - from);
        if (line.starts_with(prefix)) return std::string(line.substr(prefix.size()));
        if (nl == std::string_view::npos) break;
        from = nl + 1;
    }
    return {};
}

TEST_CASE("sigv4 signs every case of AWS's test suite, with headers and with a presigned query")
{
    const fs::path dir = suite_dir();
    REQUIRE_MESSAGE(fs::is_directory(dir), "AWS's SigV4 test suite is not at '"
                                               << dir.string()
                                               << "' (expected beside the checkout as ../shared/testdata/aws-sigv4-suite;"
                                                  " set CONVEYOR_SIGV4_SUITE to its folder)");
    std::set<std::string> names; // sorted: a stable order for the report
    for (const auto& e : fs::directory_iterator(dir))
        if (e.is_directory() && fs::exists(e.path() / "context.json")) names.insert(e.path().filename().string());
    CHECK_MESSAGE(names.size() == suite_cases, "the suite at '" << dir.string() << "' has " << names.size()
                                                                << " cases; this test knows " << suite_cases);

    std::size_t header_passed = 0, query_passed = 0;
    for (const auto& name : names) {
        CAPTURE(name);
        const fs::path c = dir / name;
        const auto ctx = parse_context(slurp(c / "context.json"));
        const auto req = parse_request(slurp(c / "request.txt"));
        const sigv4::timestamp ts(ctx.when);
        const sigv4::signing_key key(ctx.secret_access_key, ts.date(), ctx.region, ctx.service);
        const std::string payload_hash = s3::sha256_hex(req.body);

        // With the Authorization header: X-Amz-Date (and the token, and the payload's hash
        // when the body is signed) join the request's headers.
        {
            auto headers = req.header_views();
            headers.push_back({"X-Amz-Date", ts.amz_date()});
            if (!ctx.token.empty() && !ctx.omit_session_token) headers.push_back({"X-Amz-Security-Token", ctx.token});
            if (ctx.sign_body) headers.push_back({"x-amz-content-sha256", payload_hash});
            const auto cr = sigv4::make_canonical_request({.method = req.method,
                                                           .path = req.path,
                                                           .query = req.query,
                                                           .headers = headers,
                                                           .payload_hash = payload_hash,
                                                           .normalize_path = ctx.normalize});
            const auto sts = sigv4::string_to_sign(ts.amz_date(), key.scope(), cr.text);
            const auto sig = key.sign(sts);
            const auto auth = sigv4::authorization(ctx.access_key_id, key.scope(), cr.signed_headers, sig);
            const bool ok_cr = cr.text == slurp(c / "header-canonical-request.txt");
            const bool ok_sts = sts == slurp(c / "header-string-to-sign.txt");
            const bool ok_sig = sig == slurp(c / "header-signature.txt");
            const bool ok_auth = auth == line_after(slurp(c / "header-signed-request.txt"), "Authorization:");
            CHECK(cr.text == slurp(c / "header-canonical-request.txt"));
            CHECK(sts == slurp(c / "header-string-to-sign.txt"));
            CHECK(sig == slurp(c / "header-signature.txt"));
            CHECK(auth == line_after(slurp(c / "header-signed-request.txt"), "Authorization:"));
            header_passed += ok_cr && ok_sts && ok_sig && ok_auth;
        }

        // Presigned: the X-Amz-* parameters join the query; every header of the request is
        // signed, and none is added.
        {
            const auto headers = req.header_views();
            const auto signed_headers = sigv4::signed_header_names(headers);
            std::string query = req.query;
            if (!query.empty()) query += '&';
            query += sigv4::presign_parameters(ctx.access_key_id, key.scope(), ts.amz_date(), ctx.expires,
                                               signed_headers, ctx.omit_session_token ? "" : ctx.token);
            const auto cr = sigv4::make_canonical_request({.method = req.method,
                                                           .path = req.path,
                                                           .query = query,
                                                           .headers = headers,
                                                           .payload_hash = payload_hash,
                                                           .normalize_path = ctx.normalize});
            const auto sts = sigv4::string_to_sign(ts.amz_date(), key.scope(), cr.text);
            const auto sig = key.sign(sts);
            const auto signed_request = slurp(c / "query-signed-request.txt");
            const bool ok_cr = cr.text == slurp(c / "query-canonical-request.txt");
            const bool ok_sts = sts == slurp(c / "query-string-to-sign.txt");
            const bool ok_sig = sig == slurp(c / "query-signature.txt");
            const bool ok_url = signed_request.find("X-Amz-Signature=" + sig + " ") != std::string::npos;
            CHECK(cr.text == slurp(c / "query-canonical-request.txt"));
            CHECK(sts == slurp(c / "query-string-to-sign.txt"));
            CHECK(sig == slurp(c / "query-signature.txt"));
            CHECK_MESSAGE(ok_url, "X-Amz-Signature=" << sig << " not in " << signed_request);
            CHECK(cr.signed_headers == signed_headers);
            query_passed += ok_cr && ok_sts && ok_sig && ok_url;
        }
    }
    MESSAGE("AWS SigV4 suite: " << header_passed << "/" << names.size() << " cases signed with headers, "
                                << query_passed << "/" << names.size() << " presigned");
    CHECK(header_passed == suite_cases);
    CHECK(query_passed == suite_cases);
}

// ---------------------------------------------------------------------------------------
// Published values (AWS's documentation) and the generic layer's rules.

system_clock::time_point at(int y, unsigned m, unsigned d, int hh = 0, int mm = 0, int ss = 0)
{
    return std::chrono::sys_days(std::chrono::year{y} / m / d) + std::chrono::hours{hh} + std::chrono::minutes{mm} +
           std::chrono::seconds{ss};
}

std::string hex(std::span<const unsigned char> bytes)
{
    std::string s;
    char buf[3];
    for (unsigned char b : bytes) {
        std::snprintf(buf, sizeof buf, "%02x", b);
        s += buf;
    }
    return s;
}

// The credentials of AWS's S3 signing examples (docs: "Signature Calculations for the
// Authorization Header" and "Authenticating Requests: Using Query Parameters").
s3::credentials example_creds(std::string token = {})
{
    return {.access_key_id = "AKIAIOSFODNN7EXAMPLE",
            .secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            .session_token = std::move(token),
            .source = "test"};
}

// "AWS4-HMAC-SHA256 Credential=..., SignedHeaders=a;b, Signature=hex" -> the part after `key=`.
std::string auth_part(std::string_view auth, std::string_view key)
{
    const auto at = auth.find(key);
    if (at == std::string_view::npos) return {};
    auto rest = auth.substr(at + key.size());
    return std::string(rest.substr(0, rest.find(',')));
}

std::string field(const http::fields& f, std::string_view name)
{
    const auto it = f.find(name);
    return it == f.end() ? std::string() : std::string(it->value());
}

TEST_CASE("sigv4 sha256_hex hashes bytes and strings to lowercase hex")
{
    CHECK(s3::sha256_hex(std::string_view()) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK(s3::sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const std::string text = "Welcome to Amazon S3.";
    CHECK(s3::sha256_hex(std::as_bytes(std::span(text.data(), text.size()))) == s3::sha256_hex(text));
    CHECK(s3::sha256_hex(text) == "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
}

TEST_CASE("sigv4 derives the signing key that AWS's documentation derives")
{
    const sigv4::signing_key key("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20120215", "us-east-1", "iam");
    CHECK(hex(key.bytes()) == "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d");
    CHECK(key.scope() == "20120215/us-east-1/iam/aws4_request");
    CHECK(key.date() == "20120215");
}

TEST_CASE("sigv4 timestamps are UTC, to the second")
{
    const sigv4::timestamp ts(at(2015, 8, 30, 12, 36, 0) + 999ms);
    CHECK(ts.amz_date() == "20150830T123600Z");
    CHECK(ts.date() == "20150830");
    CHECK(ts.day() == std::chrono::sys_days(std::chrono::year{2015} / 8 / 30));
    CHECK(sigv4::timestamp(at(1999, 12, 31, 23, 59, 59)).amz_date() == "19991231T235959Z");
}

TEST_CASE("sigv4 canonical query sorts parameters by encoded name, then value, and encodes them once")
{
    CHECK(sigv4::canonical_query("") == "");
    CHECK(sigv4::canonical_query("b=2&a=1&a=0&c&d=x+y&e=%7e&f=%2f%2F") == "a=0&a=1&b=2&c=&d=x%2By&e=~&f=%2F%2F");
    // Encoded or not, a parameter canonicalises the same way; '%' that starts no escape is literal.
    CHECK(sigv4::canonical_query("prefix=a b/ü&list-type=2") == "list-type=2&prefix=a%20b%2F%C3%BC");
    CHECK(sigv4::canonical_query("prefix=a%20b%2F%C3%BC&list-type=2") == "list-type=2&prefix=a%20b%2F%C3%BC");
    CHECK(sigv4::canonical_query("x=100%&y=%zz%41") == "x=100%25&y=%25zzA");
    // Empty parameters ("&&") are not parameters.
    CHECK(sigv4::canonical_query("&a=1&&") == "a=1");
}

TEST_CASE("sigv4 canonical headers: lower-case sorted names, trimmed values, repeated names joined")
{
    const std::vector<sigv4::header> headers = {
        {"Host", "example.com"},
        {"X-Amz-Meta-B", "  two   words\t here  "},
        {"x-amz-meta-a", "first"},
        {"X-AMZ-META-A", "second"},
        {"Content-Type", "text/plain"},
    };
    const auto cr = sigv4::make_canonical_request(
        {.method = "GET", .path = "/", .query = "", .headers = headers, .payload_hash = s3::unsigned_payload});
    CHECK(cr.text ==
          "GET\n/\n\ncontent-type:text/plain\nhost:example.com\nx-amz-meta-a:first,second\n"
          "x-amz-meta-b:two words here\n\ncontent-type;host;x-amz-meta-a;x-amz-meta-b\nUNSIGNED-PAYLOAD");
    CHECK(cr.signed_headers == "content-type;host;x-amz-meta-a;x-amz-meta-b");
    CHECK(sigv4::signed_header_names(headers) == cr.signed_headers);
}

TEST_CASE("sigv4 reproduces AWS's published S3 PUT example")
{
    // docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html, "PUT Object".
    const std::string body = "Welcome to Amazon S3.";
    const auto hash = s3::sha256_hex(body);
    const std::vector<sigv4::header> headers = {
        {"Host", "examplebucket.s3.amazonaws.com"},
        {"Date", "Fri, 24 May 2013 00:00:00 GMT"},
        {"x-amz-date", "20130524T000000Z"},
        {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
        {"x-amz-content-sha256", hash},
    };
    const auto cr = sigv4::make_canonical_request(
        {.method = "PUT", .path = "/test%24file.text", .headers = headers, .payload_hash = hash});
    const sigv4::signing_key key(example_creds().secret_access_key, "20130524", "us-east-1", "s3");
    CHECK(key.sign(sigv4::string_to_sign("20130524T000000Z", key.scope(), cr.text)) ==
          "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
}

// ---------------------------------------------------------------------------------------
// The S3 signer.

TEST_CASE("signer signs AWS's published S3 GET example with a Range header")
{
    // docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html, "GET Object".
    const s3::signer signer(example_creds(), "us-east-1");
    http::fields f;
    f.set(http::field::host, "examplebucket.s3.amazonaws.com");
    f.set(http::field::range, "bytes=0-9");
    f.set(http::field::user_agent, "conveyor-test"); // not signed
    signer.sign(http::verb::get, "/test.txt", f, s3::sha256_hex(""), at(2013, 5, 24));
    CHECK(field(f, "X-Amz-Date") == "20130524T000000Z");
    CHECK(field(f, "x-amz-content-sha256") == s3::sha256_hex(""));
    CHECK(f.count("X-Amz-Security-Token") == 0);
    CHECK(field(f, "Authorization") ==
          "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
          "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
          "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST_CASE("signer presigns AWS's published S3 GET example")
{
    // docs.aws.amazon.com/AmazonS3/latest/API/sigv4-query-string-auth.html.
    const s3::signer signer(example_creds(), "us-east-1");
    CHECK(signer.presign(http::verb::get, "/test.txt", "examplebucket.s3.amazonaws.com", 86400s, at(2013, 5, 24)) ==
          "/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256"
          "&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request"
          "&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host"
          "&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404");
    CHECK_THROWS_AS(signer.presign(http::verb::get, "/t", "h", 0s), conveyor::error);
    CHECK_THROWS_AS(signer.presign(http::verb::get, "/t", "h", sigv4::max_presign_expiry + 1s), conveyor::error);
}

TEST_CASE("signer caches one signing key per day and derives a new one for a new day")
{
    const s3::signer signer(example_creds(), "us-east-1");
    const auto k1 = signer.key_for(at(2024, 3, 1, 0, 0, 1));
    const auto k1_again = signer.key_for(at(2024, 3, 1, 23, 59, 59));
    CHECK(k1.get() == k1_again.get());
    CHECK(k1->date() == "20240301");

    const auto k2 = signer.key_for(at(2024, 3, 2, 0, 0, 0));
    CHECK(k2.get() != k1.get());
    CHECK(k2->date() == "20240302");
    CHECK(hex(k2->bytes()) != hex(k1->bytes()));
    // The same bytes as a key derived afresh.
    const sigv4::signing_key fresh(example_creds().secret_access_key, "20240302", "us-east-1", "s3");
    CHECK(hex(k2->bytes()) == hex(fresh.bytes()));
    // The day before stays cached (requests around midnight), and copies share the cache.
    CHECK(signer.key_for(at(2024, 3, 1, 12)).get() == k1.get());
    const s3::signer copy = signer;
    CHECK(copy.key_for(at(2024, 3, 2, 12)).get() == k2.get());
    // A third day evicts the oldest.
    const auto k3 = signer.key_for(at(2024, 3, 3));
    CHECK(signer.key_for(at(2024, 3, 3, 1)).get() == k3.get());
    CHECK(signer.key_for(at(2024, 3, 2, 1)).get() == k2.get());
    CHECK(signer.key_for(at(2024, 3, 1, 1)).get() != k1.get());

    // Signing the same request on the same day gives the same signature, whichever key object.
    http::fields a, b;
    a.set(http::field::host, "h");
    b.set(http::field::host, "h");
    signer.sign(http::verb::get, "/k", a, s3::unsigned_payload, at(2024, 3, 3, 5));
    s3::signer(example_creds(), "us-east-1").sign(http::verb::get, "/k", b, s3::unsigned_payload, at(2024, 3, 3, 5));
    CHECK(field(a, "Authorization") == field(b, "Authorization"));
}

TEST_CASE("signer hands every thread the same key for a new day")
{
    const s3::signer signer(example_creds(), "us-east-1");
    std::vector<const sigv4::signing_key*> seen(8);
    std::vector<std::shared_ptr<const sigv4::signing_key>> held(8);
    {
        std::vector<std::jthread> threads;
        for (std::size_t i = 0; i < seen.size(); ++i)
            threads.emplace_back([&, i] {
                held[i] = signer.key_for(at(2030, 1, 1, 6));
                seen[i] = held[i].get();
            });
    }
    for (auto* k : seen) CHECK(k == seen[0]);
}

TEST_CASE("signer signs from several threads at once, each request as if alone")
{
    const s3::signer signer(example_creds("token"), "us-east-1");
    auto sign_at = [&](int second) {
        http::fields f;
        f.set(http::field::host, "bucket.s3.amazonaws.com");
        f.set(http::field::range, "bytes=0-" + std::to_string(second));
        signer.sign(http::verb::get, "/k/" + std::to_string(second), f, s3::unsigned_payload,
                    at(2031, 1, 1, 23, 59, 50) + std::chrono::seconds(second)); // across midnight
        return field(f, "Authorization");
    };
    // Each request signed alone, by a signer of its own.
    std::vector<std::string> expected(20);
    for (int i = 0; i < 20; ++i) {
        http::fields f;
        f.set(http::field::host, "bucket.s3.amazonaws.com");
        f.set(http::field::range, "bytes=0-" + std::to_string(i));
        s3::signer(example_creds("token"), "us-east-1")
            .sign(http::verb::get, "/k/" + std::to_string(i), f, s3::unsigned_payload,
                  at(2031, 1, 1, 23, 59, 50) + std::chrono::seconds(i));
        expected[i] = field(f, "Authorization");
    }
    std::vector<int> wrong(4, 0);
    {
        std::vector<std::jthread> threads;
        for (int t = 0; t < 4; ++t)
            threads.emplace_back([&, t] {
                for (int round = 0; round < 50; ++round)
                    for (int i = 0; i < 20; ++i) wrong[t] += sign_at((i + t) % 20) != expected[(i + t) % 20];
            });
    }
    for (int w : wrong) CHECK(w == 0);
}

TEST_CASE("signer sends and signs the session token of temporary credentials")
{
    const std::string token = "FQoGZXIvYXdzE//////////wEaDA+token=";
    const s3::signer signer(example_creds(token), "us-east-1");
    http::fields f;
    f.set(http::field::host, "examplebucket.s3.amazonaws.com");
    signer.sign(http::verb::get, "/test.txt", f, s3::unsigned_payload, at(2013, 5, 24));
    CHECK(field(f, "X-Amz-Security-Token") == token);
    const auto auth = field(f, "Authorization");
    CHECK(auth_part(auth, "SignedHeaders=") == "host;x-amz-content-sha256;x-amz-date;x-amz-security-token");

    // The same signature from the generic layer, token signed.
    const std::vector<sigv4::header> headers = {{"host", "examplebucket.s3.amazonaws.com"},
                                                {"x-amz-content-sha256", s3::unsigned_payload},
                                                {"x-amz-date", "20130524T000000Z"},
                                                {"x-amz-security-token", token}};
    const auto cr = sigv4::make_canonical_request(
        {.method = "GET", .path = "/test.txt", .headers = headers, .payload_hash = s3::unsigned_payload});
    const sigv4::signing_key key(example_creds().secret_access_key, "20130524", "us-east-1", "s3");
    CHECK(auth_part(auth, "Signature=") == key.sign(sigv4::string_to_sign("20130524T000000Z", key.scope(), cr.text)));

    // Signed again by credentials without a token (refreshed), the stale token goes.
    s3::signer(example_creds(), "us-east-1").sign(http::verb::get, "/test.txt", f);
    CHECK(f.count("X-Amz-Security-Token") == 0);
    CHECK(auth_part(field(f, "Authorization"), "SignedHeaders=") == "host;x-amz-content-sha256;x-amz-date");

    // Presigned: X-Amz-Security-Token is in the (signed) query, encoded.
    const auto url = signer.presign(http::verb::get, "/test.txt", "examplebucket.s3.amazonaws.com", 3600s);
    CHECK(url.find("&X-Amz-Security-Token=FQoGZXIvYXdzE%2F%2F%2F%2F%2F%2F%2F%2F%2F%2FwEaDA%2Btoken%3D&") !=
          std::string::npos);
}

TEST_CASE("signer signs a PUT with its payload's SHA-256 and the x-amz-* headers present")
{
    const s3::signer signer(example_creds(), "us-east-1");
    const std::string body = "Welcome to Amazon S3.";
    const auto hash = s3::sha256_hex(body);
    http::fields f;
    f.set(http::field::host, "examplebucket.s3.amazonaws.com");
    f.set(http::field::content_type, "application/octet-stream");
    f.set(http::field::content_length, std::to_string(body.size())); // not signed
    f.set("x-amz-storage-class", "REDUCED_REDUNDANCY");
    signer.sign(http::verb::put, "/test%24file.text", f, hash, at(2013, 5, 24));
    CHECK(field(f, "X-Amz-Content-Sha256") == hash);
    const auto auth = field(f, "Authorization");
    CHECK(auth_part(auth, "SignedHeaders=") ==
          "content-type;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class");

    const std::vector<sigv4::header> headers = {{"host", "examplebucket.s3.amazonaws.com"},
                                                {"content-type", "application/octet-stream"},
                                                {"x-amz-content-sha256", hash},
                                                {"x-amz-date", "20130524T000000Z"},
                                                {"x-amz-storage-class", "REDUCED_REDUNDANCY"}};
    const auto cr =
        sigv4::make_canonical_request({.method = "PUT", .path = "/test%24file.text", .headers = headers, .payload_hash = hash});
    CHECK(cr.text.ends_with("\n" + hash));
    const sigv4::signing_key key(example_creds().secret_access_key, "20130524", "us-east-1", "s3");
    CHECK(auth_part(auth, "Signature=") == key.sign(sigv4::string_to_sign("20130524T000000Z", key.scope(), cr.text)));
}

TEST_CASE("signer signs keys with spaces, unicode, +, = and % as encoded once, never normalized")
{
    // The caller encodes the key once (RFC 3986 unreserved characters and '/' stay).
    const std::string key = "train/a b+c=d%e ü/./../x~y.jpg";
    const auto path_chars = boost::urls::unreserved_chars + '/';
    const std::string path = "/bucket/" + boost::urls::encode(key, path_chars);
    REQUIRE(path == "/bucket/train/a%20b%2Bc%3Dd%25e%20%C3%BC/./../x~y.jpg");
    CHECK(sigv4::canonical_uri(path) == path);

    // The same path as a non-S3 service signs it: normalized, then encoded once more.
    CHECK(sigv4::canonical_uri(path, true) == "/bucket/train/x~y.jpg");
    CHECK(sigv4::canonical_uri("/a%20b//./c/", true) == "/a%2520b/c/");
    // Whatever legal encoding the caller chose is signed as sent (S3 accepts "+" and "="
    // bare, and lower-case escapes); only what cannot be sent at all is encoded.
    CHECK(sigv4::canonical_uri("/bucket/a+b=c:d@e$f!g*h'(i),j;k&l/%c3%bc%7E") ==
          "/bucket/a+b=c:d@e$f!g*h'(i),j;k&l/%c3%bc%7E");
    CHECK(sigv4::canonical_uri("/bucket/a b\"ü%zz%4") == "/bucket/a%20b%22%C3%BC%25zz%254");
    CHECK(sigv4::canonical_uri("") == "/");

    const s3::signer signer(example_creds(), "us-east-1");
    http::fields f;
    f.set(http::field::host, "s3.example.com:9000");
    const std::string target = path + "?versionId=3%2B4&x-id=GetObject";
    signer.sign(http::verb::get, target, f, s3::unsigned_payload, at(2024, 1, 2, 3, 4, 5));
    const std::string expected =
        "GET\n"
        "/bucket/train/a%20b%2Bc%3Dd%25e%20%C3%BC/./../x~y.jpg\n"
        "versionId=3%2B4&x-id=GetObject\n"
        "host:s3.example.com:9000\n"
        "x-amz-content-sha256:UNSIGNED-PAYLOAD\n"
        "x-amz-date:20240102T030405Z\n"
        "\n"
        "host;x-amz-content-sha256;x-amz-date\n"
        "UNSIGNED-PAYLOAD";
    const sigv4::signing_key k(example_creds().secret_access_key, "20240102", "us-east-1", "s3");
    CHECK(auth_part(field(f, "Authorization"), "Signature=") ==
          k.sign(sigv4::string_to_sign("20240102T030405Z", k.scope(), expected)));

    // A presigned URL keeps the caller's path byte for byte.
    const auto url = signer.presign(http::verb::get, path, "s3.example.com:9000", 60s);
    CHECK(url.starts_with(path + "?X-Amz-Algorithm="));
}

TEST_CASE("signer leaves requests alone for anonymous credentials")
{
    const s3::signer signer(s3::credentials{.source = "none"}, "us-east-1");
    http::fields f;
    f.set(http::field::host, "public.example.com");
    signer.sign(http::verb::get, "/bucket/key", f);
    CHECK(std::distance(f.begin(), f.end()) == 1);
    CHECK(f.count(http::field::authorization) == 0);
    CHECK(f.count("X-Amz-Date") == 0);
    CHECK(signer.presign(http::verb::get, "/bucket/key?x=1", "public.example.com", 60s) == "/bucket/key?x=1");
}

TEST_CASE("signer signs a request again for a retry, replacing the earlier signature")
{
    const s3::signer signer(example_creds(), "us-east-1");
    http::fields f;
    f.set(http::field::host, "h");
    signer.sign(http::verb::get, "/k", f, s3::unsigned_payload, at(2024, 1, 1));
    const auto first = field(f, "Authorization");
    signer.sign(http::verb::get, "/k", f, s3::unsigned_payload, at(2024, 1, 1, 0, 0, 1));
    CHECK(f.count(http::field::authorization) == 1);
    CHECK(f.count("X-Amz-Date") == 1);
    CHECK(f.count("X-Amz-Content-Sha256") == 1);
    CHECK(field(f, "X-Amz-Date") == "20240101T000001Z");
    CHECK(field(f, "Authorization") != first);
}

TEST_CASE("signer errors name what is wrong and never the secret")
{
    const auto creds = example_creds("session-token-value");
    const s3::signer signer(creds, "us-east-1");
    http::fields f;
    try {
        signer.sign(http::verb::get, "/bucket/key", f);
        FAIL("a request without Host was signed");
    } catch (const conveyor::error& e) {
        const std::string what = e.what();
        CHECK(e.code() == std::errc::invalid_argument);
        CHECK(what.find("Host") != std::string::npos);
        CHECK(what.find(creds.secret_access_key) == std::string::npos);
        CHECK(what.find(creds.session_token) == std::string::npos);
    }
    CHECK_THROWS_AS(s3::signer(creds, ""), conveyor::error);
    CHECK_THROWS_AS(s3::signer(creds, "us/east"), conveyor::error);
    try {
        s3::signer(creds, "us east");
    } catch (const conveyor::error& e) {
        CHECK(std::string(e.what()).find(creds.secret_access_key) == std::string::npos);
    }
}

} // namespace
