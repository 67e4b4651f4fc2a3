// Temporary credentials: the chain's choice of provider from the environment and the
// profiles, ISO 8601 times, and, against the fake metadata service, container endpoint and
// STS of tests/s3/server/fake_aws.py (started by with_fake_aws.sh; skipped without it):
// the credentials each provider fetches, the same as botocore resolves for the same
// environment; bad replies named by provider, never with a secret; and refreshes before
// expiry, the token file read again each time.
#include <conveyor/core/runtime.hpp>
#include <conveyor/http/client.hpp>
#include <conveyor/s3/client.hpp>
#include <conveyor/s3/config.hpp>
#include <conveyor/s3/detail/credentials_cache.hpp>
#include <conveyor/s3/error.hpp>
#include <conveyor/s3/provider.hpp>

#include "aws_sandbox.hpp"

#include <doctest/doctest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <atomic>
#include <openssl/ssl.h>
#include <openssl/sha.h>
#include <optional>
#include <string>
#include <thread>
#include <vector>


namespace {

namespace cv = conveyor;
namespace s3 = conveyor::s3;
namespace asio = boost::asio;

/// The clean AWS environment; `dir` is its directory's path.
struct sandbox : s3test::aws_sandbox {
    const std::string& dir = aws_sandbox::dir.path();
};

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

std::string error_text(const std::function<void()>& f)
{
    try {
        f();
    } catch (const std::exception& e) {
        return e.what();
    }
    FAIL_CHECK("threw nothing");
    return {};
}

cv::runtime& rt()
{
    // OpenSSL first: its exit handler (registered at its initialisation) then runs after the
    // runtime's threads are joined, and frees their per-thread state; initialised first on a
    // lane, it would run before and leave that state to LeakSanitizer.
    static const bool openssl = OPENSSL_init_ssl(0, nullptr) == 1;
    static cv::runtime r({.io_threads = 2, .compute_threads = 2});
    (void)openssl;
    return r;
}

template <class T>
T run(asio::awaitable<T> a)
{
    return asio::co_spawn(rt().io_executor(0), std::move(a), asio::use_future).get();
}

std::optional<s3::timed_credentials> fetch(const std::shared_ptr<s3::credentials_provider>& p)
{
    return run([p]() -> asio::awaitable<std::optional<s3::timed_credentials>> { co_return co_await p->async_fetch(rt()); }());
}

std::string sha256_hex(const std::string& s)
{
    unsigned char d[SHA256_DIGEST_LENGTH];
    SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), d);
    static const char* hex = "0123456789abcdef";
    std::string out;
    for (unsigned char c : d) {
        out += hex[c >> 4];
        out += hex[c & 15];
    }
    return out;
}

std::string iso(std::chrono::system_clock::time_point t)
{
    const std::time_t tt = std::chrono::system_clock::to_time_t(t);
    std::tm tm{};
    gmtime_r(&tt, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

// ---- the fake services (tests/s3/server/fake_aws.py), when with_fake_aws.sh runs us

std::string fake_url()
{
    const char* v = std::getenv("CONVEYOR_TEST_FAKE_AWS");
    return v ? v : "";
}

/// Whether the fake runs (with_fake_aws.sh started it); says the test is skipped if not.
bool have_fake()
{
    if (!fake_url().empty()) return true;
    MESSAGE("skipped: run through tests/s3/server/with_fake_aws.sh");
    return false;
}

/// A request to an admin API (the fake's, by default); the reply's body.
std::string fake_admin(const std::string& path, const std::string& json_body = {}, std::string base = {})
{
    const cv::http::endpoint ep = cv::http::parse_endpoint(base.empty() ? fake_url() : base);
    return run([&]() -> asio::awaitable<std::string> {
        cv::http::client c(rt(), ep);
        cv::http::request r;
        r.method = json_body.empty() ? boost::beast::http::verb::get : boost::beast::http::verb::post;
        r.target = ep.base_path + path;
        r.headers.set(boost::beast::http::field::host, ep.host_header());
        r.headers.set(boost::beast::http::field::content_type, "application/json");
        r.body = std::as_bytes(std::span(json_body.data(), json_body.size()));
        auto [ec, resp] = co_await c.async_send(r);
        REQUIRE_FALSE(ec);
        REQUIRE(resp.status == 200);
        co_return std::string(resp.body.view());
    }());
}

/// What botocore resolves in the current environment (botocore_credentials.py's line).
boost::json::object botocore_resolves()
{
    const char* py = std::getenv("CONVEYOR_TEST_PYTHON");
    const char* script = std::getenv("CONVEYOR_TEST_BOTOCORE_CREDENTIALS");
    REQUIRE(py);
    REQUIRE(script);
    const std::string cmd = std::string(py) + " " + script;
    FILE* f = ::popen(cmd.c_str(), "r");
    REQUIRE(f);
    std::string out;
    char buf[4096];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, f)) out.append(buf, n);
    ::pclose(f);
    const auto v = boost::json::parse(out);
    REQUIRE(v.is_object());
    return v.as_object();
}

/// conveyor's fetched credentials and botocore's agree: key, secret, token, expiry.
void same_as_botocore(const s3::timed_credentials& t)
{
    const auto b = botocore_resolves();
    INFO("botocore: " << boost::json::serialize(b));
    REQUIRE_FALSE(b.contains("error"));
    CHECK(std::string(b.at("access_key").as_string()) == t.creds.access_key_id);
    CHECK(std::string(b.at("secret_sha256").as_string()) == sha256_hex(t.creds.secret_access_key));
    CHECK(std::string(b.at("token_sha256").as_string()) == sha256_hex(t.creds.session_token));
    REQUIRE(t.expiration);
    CHECK(std::string(b.at("expiration").as_string()) == iso(*t.expiration));
}

/// The fetched credentials' provider tag (the fake's key ids end with it) and expiry.
std::string tag_of(const s3::timed_credentials& t) { return t.creds.access_key_id.substr(t.creds.access_key_id.size() - 2); }

} // namespace

TEST_CASE("parse_iso8601 reads the services' times and nothing else")
{
    using namespace std::chrono;
    const auto t = s3::parse_iso8601("2026-11-28T07:00:05Z");
    REQUIRE(t);
    CHECK(*t == sys_days(year{2026} / 11 / 28) + hours(7) + seconds(5));
    CHECK(s3::parse_iso8601("2026-11-28T07:00:05.123Z") == t);
    CHECK(s3::parse_iso8601("2026-11-28T07:00:05+00:00") == t);
    for (const char* bad : {"", "2026-11-28", "2026-11-28T07:00:05", "2026-13-28T07:00:05Z", "2026-02-30T07:00:05Z",
                            "2026-11-28T07:00:05+02:00", "tomorrow", "2026-11-28T07:00:05Zjunk", "2026-11-28T07:00:05.Z"})
        CHECK_MESSAGE(!s3::parse_iso8601(bad), bad);
}

TEST_CASE("the chain picks web identity, then the profile, then the container endpoint, then instance metadata")
{
    sandbox sb;
    // Nothing, metadata disabled: anonymous, and it says so.
    auto c = s3::resolve_config();
    CHECK_FALSE(c.provider);
    CHECK(contains(c.creds.source, "no credentials found"));

    // Instance metadata once enabled, at the endpoint the environment names.
    sb.env.set("AWS_EC2_METADATA_DISABLED", "false").set("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:9");
    c = s3::resolve_config();
    REQUIRE(c.provider);
    CHECK(contains(c.provider->name(), "instance metadata at http://127.0.0.1:9"));
    CHECK(contains(c.describe(), "credentials from the EC2 instance metadata"));

    // The container endpoint comes before it.
    sb.env.set("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:9/creds");
    c = s3::resolve_config();
    REQUIRE(c.provider);
    CHECK(contains(c.provider->name(), "container credentials at http://127.0.0.1:9/creds"));
    sb.env.unset("AWS_CONTAINER_CREDENTIALS_FULL_URI").set("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/abc");
    CHECK(contains(s3::resolve_config().provider->name(), "http://169.254.170.2/v2/credentials/abc"));

    // Static keys in the profile come before both.
    sb.write("credentials", "[default]\naws_access_key_id = AKIAPROFILE000000001\naws_secret_access_key = s\n");
    c = s3::resolve_config();
    CHECK_FALSE(c.provider);
    CHECK(c.creds.access_key_id == "AKIAPROFILE000000001");

    // Web identity comes before the profile; its STS endpoint follows the region.
    const std::string token = sb.write("token", "a-token");
    sb.env.set("AWS_WEB_IDENTITY_TOKEN_FILE", token).set("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/r").set("AWS_REGION", "eu-west-1");
    c = s3::resolve_config();
    REQUIRE(c.provider);
    CHECK(c.provider->name() == "web identity (role arn:aws:iam::123456789012:role/r, STS at https://sts.eu-west-1.amazonaws.com)");
    sb.env.set("AWS_STS_REGIONAL_ENDPOINTS", "legacy");
    CHECK(contains(s3::resolve_config().provider->name(), "STS at https://sts.amazonaws.com"));
    sb.env.set("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:8/");
    CHECK(contains(s3::resolve_config().provider->name(), "STS at http://127.0.0.1:8"));

    // Environment keys come first of all.
    sb.env.set("AWS_ACCESS_KEY_ID", "AKIAENV0000000000001").set("AWS_SECRET_ACCESS_KEY", "e");
    c = s3::resolve_config();
    CHECK_FALSE(c.provider);
    CHECK(c.creds.source == "environment");
}

TEST_CASE("a web identity in the profile, and settings that cannot work, are named")
{
    sandbox sb;
    const std::string token = sb.write("token", "t");
    sb.write("config", "[default]\nweb_identity_token_file = " + token + "\nrole_arn = arn:aws:iam::1:role/p\nrole_session_name = s1\n");
    auto c = s3::resolve_config();
    REQUIRE(c.provider);
    CHECK(contains(c.provider->name(), "role arn:aws:iam::1:role/p"));

    sb.write("config", "[default]\nweb_identity_token_file = " + token + "\n");
    CHECK(contains(error_text([] { s3::resolve_config(); }), "has web_identity_token_file but no role_arn"));
    sb.write("config", "");
    sb.env.set("AWS_ROLE_ARN", "arn:aws:iam::1:role/x");
    CHECK(contains(error_text([] { s3::resolve_config(); }), "AWS_ROLE_ARN is set but AWS_WEB_IDENTITY_TOKEN_FILE is not"));
    sb.env.unset("AWS_ROLE_ARN");

    // Plain HTTP to a host that is not a container agent could hand the token to anyone.
    sb.env.set("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://example.com/creds");
    CHECK(contains(error_text([] { s3::resolve_config(); }), "must name a loopback address"));
    sb.env.unset("AWS_CONTAINER_CREDENTIALS_FULL_URI");

    sb.env.set("AWS_EC2_METADATA_DISABLED", "false").set("AWS_METADATA_SERVICE_TIMEOUT", "soon");
    CHECK(contains(error_text([] { s3::resolve_config(); }), "AWS_METADATA_SERVICE_TIMEOUT"));
}

TEST_CASE("no instance metadata service on this machine: anonymous access, quickly")
{
    sandbox sb;
    // Nothing listens on port 9 (discard) on loopback: refused at once.
    auto p = s3::instance_metadata_provider({.endpoint = cv::http::parse_endpoint("http://127.0.0.1:9"),
                                             .timeout = std::chrono::milliseconds(500)});
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_FALSE(fetch(p));
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
}

TEST_SUITE("fake AWS")
{
    TEST_CASE("instance metadata (IMDSv2): the same credentials as botocore, and IMDSv1 only where allowed")
    {
        if (!have_fake()) return;
        sandbox sb;
        fake_admin("/__fake/reset", "{}");
        sb.env.set("AWS_EC2_METADATA_DISABLED", "false").set("AWS_EC2_METADATA_SERVICE_ENDPOINT", fake_url());
        const auto c = s3::resolve_config();
        REQUIRE(c.provider);
        const auto t = fetch(c.provider);
        REQUIRE(t);
        CHECK(tag_of(*t) == "IM");
        CHECK(contains(t->creds.source, "instance profile fake-role"));
        same_as_botocore(*t);
        const auto stats = boost::json::parse(fake_admin("/__fake/stats")).as_object();
        CHECK(stats.at("imds_token").as_int64() >= 1);

        // An IMDSv1-only service: served without a token, unless v1 is disabled.
        fake_admin("/__fake/mode", R"({"endpoint":"imds","mode":"v1"})");
        auto v1 = s3::instance_metadata_provider({.endpoint = cv::http::parse_endpoint(fake_url())});
        CHECK(fetch(v1));
        auto v2only = s3::instance_metadata_provider({.endpoint = cv::http::parse_endpoint(fake_url()), .allow_v1 = false});
        CHECK(contains(error_text([&] { fetch(v2only); }), "IMDSv1 is disabled"));
        fake_admin("/__fake/mode", R"({"endpoint":"imds","mode":"no-role"})");
        CHECK_FALSE(fetch(s3::instance_metadata_provider({.endpoint = cv::http::parse_endpoint(fake_url())})));
        fake_admin("/__fake/reset", "{}");
    }

    TEST_CASE("container credentials with a token file read at each fetch: the same credentials as botocore")
    {
        if (!have_fake()) return;
        sandbox sb;
        fake_admin("/__fake/reset", "{}");
        fake_admin("/__fake/container-token", R"({"token":"Bearer first"})");
        const std::string file = sb.write("container-token", "Bearer first\n");
        // botocore 1.29 knows the token, not the file (which conveyor reads first).
        sb.env.set("AWS_CONTAINER_CREDENTIALS_FULL_URI", fake_url() + "/container/pod")
            .set("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", file)
            .set("AWS_CONTAINER_AUTHORIZATION_TOKEN", "Bearer first");
        const auto c = s3::resolve_config();
        REQUIRE(c.provider);
        const auto t = fetch(c.provider);
        REQUIRE(t);
        CHECK(tag_of(*t) == "CO");
        same_as_botocore(*t);
        // The agent rotates the token: the next fetch reads the file again.
        fake_admin("/__fake/container-token", R"({"token":"Bearer second"})");
        sb.write("container-token", "Bearer second");
        CHECK(fetch(c.provider));
        const auto stats = boost::json::parse(fake_admin("/__fake/stats")).as_object();
        const auto& seen = stats.at("container_auth").as_array();
        REQUIRE_FALSE(seen.empty());
        CHECK(seen.back().as_string() == "Bearer second");
        // A wrong token: the endpoint's refusal, named.
        sb.write("container-token", "Bearer wrong");
        const std::string e = error_text([&] { fetch(c.provider); });
        CHECK(contains(e, "container credentials at"));
        CHECK(contains(e, "HTTP 401"));
        CHECK_FALSE(contains(e, "Bearer wrong"));
    }

    TEST_CASE("web identity through STS: the same credentials as botocore; STS's refusals named, never the token")
    {
        if (!have_fake()) return;
        sandbox sb;
        fake_admin("/__fake/reset", "{}");
        const std::string token = sb.write("token", "token-one");
        sb.env.set("AWS_WEB_IDENTITY_TOKEN_FILE", token)
            .set("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/trainer")
            .set("AWS_ROLE_SESSION_NAME", "conveyor-test")
            .set("AWS_REGION", "us-east-1")
            .set("AWS_ENDPOINT_URL_STS", fake_url());
        const auto c = s3::resolve_config();
        REQUIRE(c.provider);
        const auto t = fetch(c.provider);
        REQUIRE(t);
        CHECK(tag_of(*t) == "WI");
        same_as_botocore(*t);
        auto stats = boost::json::parse(fake_admin("/__fake/stats")).as_object();
        CHECK(stats.at("web_identity_tokens").as_array().front().as_string() == "token-one");
        CHECK(stats.at("session_names").as_array().front().as_string() == "conveyor-test");

        sb.write("token", "invalid");
        std::string e = error_text([&] { fetch(c.provider); });
        CHECK(contains(e, "web identity (role arn:aws:iam::123456789012:role/trainer"));
        CHECK(contains(e, "InvalidIdentityToken"));
        sb.write("token", "");
        CHECK(contains(error_text([&] { fetch(c.provider); }), "is empty"));
    }

    TEST_CASE("garbage, HTML, truncated replies, errors and past expirations: the provider named, no secret")
    {
        if (!have_fake()) return;
        sandbox sb;
        const std::string token = sb.write("token", "token-one");
        struct target {
            const char* endpoint;
            std::shared_ptr<s3::credentials_provider> p;
            const char* name;
        };
        const std::vector<target> targets{
            {"imds", s3::instance_metadata_provider({.endpoint = cv::http::parse_endpoint(fake_url())}), "EC2 instance metadata"},
            {"container", s3::container_provider({.url = fake_url() + "/container/x"}), "container credentials"},
            {"sts", s3::web_identity_provider({.token_file = token, .role_arn = "arn:aws:iam::1:role/r", .session_name = "conveyor-test",
                                               .sts = cv::http::parse_endpoint(fake_url())}),
             "web identity"},
        };
        for (const auto& t : targets) {
            for (const char* mode : {"html", "truncated", "error", "garbage"}) {
                fake_admin("/__fake/reset", "{}");
                fake_admin("/__fake/mode", std::string(R"({"endpoint":")") + t.endpoint + R"(","mode":")" + mode + R"("})");
                const std::string e = error_text([&] { fetch(t.p); });
                INFO(t.endpoint << " " << mode << ": " << e);
                CHECK(contains(e, t.name));
                CHECK_FALSE(contains(e, "FAKETOKEN"));
            }
            // A document whose credentials expired already: refused by the cache, never used.
            fake_admin("/__fake/reset", "{}");
            fake_admin("/__fake/mode", std::string(R"({"endpoint":")") + t.endpoint + R"(","mode":"past"})");
            auto cache = std::make_shared<s3::detail::credentials_cache>(rt(), s3::credentials{}, "us-east-1", t.p);
            const std::string e = error_text([&] { run(cache->async_signer()); });
            INFO(t.endpoint << " past: " << e);
            CHECK(contains(e, "already expired"));
            CHECK(cache->stats().failures == 1);
        }
        fake_admin("/__fake/reset", "{}");
    }

    TEST_CASE("short-lived credentials are refreshed before they expire, the token file read again; no expired one is handed out")
    {
        if (!have_fake()) return;
        sandbox sb;
        fake_admin("/__fake/reset", "{}");
        fake_admin("/__fake/lifetime", R"({"seconds":8})");
        const std::string token = sb.write("token", "token-0");
        auto p = s3::web_identity_provider({.token_file = token, .role_arn = "arn:aws:iam::1:role/r", .session_name = "conveyor-test",
                                            .sts = cv::http::parse_endpoint(fake_url())});
        auto cache = std::make_shared<s3::detail::credentials_cache>(rt(), s3::credentials{}, "us-east-1", p);
        std::vector<std::string> keys;
        unsigned expired = 0, failed = 0;
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        for (int i = 0; std::chrono::steady_clock::now() < end; ++i) {
            if (i % 50 == 0) sb.write("token", "token-" + std::to_string(i / 50)); // Kubernetes rotates it
            try {
                const auto s = run(cache->async_signer());
                const std::string& id = s->creds().access_key_id;
                // The fake's key ids hold their expiry: ASIAFAKE<epoch seconds><tag>.
                const long long expiry = std::stoll(id.substr(8, id.size() - 10));
                const long long now = std::chrono::duration_cast<std::chrono::seconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count();
                if (expiry <= now) ++expired;
                if (keys.empty() || keys.back() != id) keys.push_back(id);
            } catch (const std::exception& e) {
                ++failed;
                FAIL_CHECK(std::string(e.what()));
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        MESSAGE(keys.size() << " credentials over 30 s of 8-second ones; fetches " << cache->stats().fetches);
        CHECK(expired == 0);
        CHECK(failed == 0);
        CHECK(keys.size() >= 3);
        const auto stats = boost::json::parse(fake_admin("/__fake/stats")).as_object();
        const auto& tokens = stats.at("web_identity_tokens").as_array();
        CHECK(tokens.size() >= 3);
        CHECK(tokens.back().as_string() != tokens.front().as_string()); // the rotated file was read
        fake_admin("/__fake/reset", "{}");
        fake_admin("/__fake/lifetime", R"({"seconds":3600})");
    }
}

TEST_CASE("credential_process: its JSON read, its failures named with its exit status and stderr, a hung one stopped")
{
    sandbox sb;
    auto script = [&](const std::string& name, const std::string& body) {
        const std::string p = sb.write(name, "#!/bin/sh\n" + body);
        std::filesystem::permissions(p, std::filesystem::perms::owner_all);
        return p;
    };
    const std::string good = script("good.sh", R"(printf '{"Version": 1, "AccessKeyId": "AKIAPROCESS000000001", "SecretAccessKey": "proc-secret", "SessionToken": "proc-token", "Expiration": "2099-01-01T00:00:00Z"}')");
    auto t = fetch(s3::process_provider({.command = good + " --arg 'two words'", .profile = "p"}));
    REQUIRE(t);
    CHECK(t->creds.access_key_id == "AKIAPROCESS000000001");
    CHECK(t->creds.secret_access_key == "proc-secret");
    CHECK(t->creds.session_token == "proc-token");
    REQUIRE(t->expiration);
    CHECK(iso(*t->expiration) == "2099-01-01T00:00:00Z");
    CHECK(contains(t->creds.source, "credential_process of profile p (" + good + ")"));
    // Without an Expiration: credentials that do not expire.
    const std::string forever = script("forever.sh", R"(echo '{"Version": 1, "AccessKeyId": "AKIAPROCESS000000002", "SecretAccessKey": "s"}')");
    t = fetch(s3::process_provider({.command = forever, .profile = "p"}));
    REQUIRE(t);
    CHECK_FALSE(t->expiration);

    const std::string fails = script("fails.sh", "echo 'no session: run login first' >&2\nexit 3\n");
    std::string e = error_text([&] { fetch(s3::process_provider({.command = fails, .profile = "p"})); });
    CHECK(contains(e, "exited with status 3: no session: run login first"));
    const std::string v2 = script("v2.sh", R"(echo '{"Version": 2, "AccessKeyId": "A", "SecretAccessKey": "SECRET-v2"}')");
    e = error_text([&] { fetch(s3::process_provider({.command = v2, .profile = "p"})); });
    CHECK(contains(e, "\"Version\": 1"));
    CHECK_FALSE(contains(e, "SECRET-v2"));
    const std::string text = script("text.sh", "echo hello\n");
    CHECK(contains(error_text([&] { fetch(s3::process_provider({.command = text, .profile = "p"})); }), "did not print a JSON object"));
    CHECK(contains(error_text([&] { fetch(s3::process_provider({.command = sb.dir + "/missing", .profile = "p"})); }),
                   "could not be started"));
    CHECK(contains(error_text([&] { fetch(s3::process_provider({.command = "'unterminated", .profile = "p"})); }), "unterminated quote"));
    const std::string hangs = script("hangs.sh", "sleep 30\n");
    const auto t0 = std::chrono::steady_clock::now();
    e = error_text([&] { fetch(s3::process_provider({.command = hangs, .profile = "p", .timeout = std::chrono::milliseconds(300)})); });
    CHECK(contains(e, "stopped after"));
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));

    // In the chain: after the profile's static keys, before the container endpoint.
    sb.write("config", "[default]\ncredential_process = " + good + "\n");
    const auto c = s3::resolve_config();
    REQUIRE(c.provider);
    CHECK(contains(c.provider->name(), "credential_process of profile default"));
}

TEST_SUITE("fake AWS")
{
    TEST_CASE("assume role: a profile's role signed with its source profile's keys, a chain of roles, a container source; as botocore")
    {
        if (!have_fake()) return;
        sandbox sb;
        fake_admin("/__fake/reset", "{}");
        const char* key = std::getenv("CONVEYOR_TEST_FAKE_AWS_STS_KEY");
        const char* secret = std::getenv("CONVEYOR_TEST_FAKE_AWS_STS_SECRET");
        REQUIRE(key);
        REQUIRE(secret);
        sb.write("credentials", std::string("[base]\naws_access_key_id = ") + key + "\naws_secret_access_key = " + secret +
                                    "\n[wrong]\naws_access_key_id = " + key + "\naws_secret_access_key = not-the-secret\n");
        sb.write("config", "[profile trainer]\nrole_arn = arn:aws:iam::123456789012:role/trainer\nsource_profile = base\n"
                           "role_session_name = conveyor-test\nregion = us-east-1\n"
                           "[profile chained]\nrole_arn = arn:aws:iam::123456789012:role/second\nsource_profile = trainer\n"
                           "role_session_name = conveyor-second\nregion = us-east-1\n"
                           "[profile ecs]\nrole_arn = arn:aws:iam::123456789012:role/from-ecs\ncredential_source = EcsContainer\n"
                           "role_session_name = conveyor-ecs\nregion = us-east-1\n"
                           "[profile bad]\nrole_arn = arn:aws:iam::123456789012:role/trainer\nsource_profile = wrong\nregion = us-east-1\n");
        sb.env.set("AWS_ENDPOINT_URL_STS", fake_url()).set("AWS_DEFAULT_REGION", "us-east-1");

        sb.env.set("AWS_PROFILE", "trainer");
        auto c = s3::resolve_config();
        REQUIRE(c.provider);
        auto t = fetch(c.provider);
        REQUIRE(t);
        CHECK(tag_of(*t) == "AR");
        same_as_botocore(*t);

        sb.env.set("AWS_PROFILE", "chained");
        c = s3::resolve_config();
        REQUIRE(c.provider);
        CHECK(contains(c.provider->name(), "with credentials from the assume role (role arn:aws:iam::123456789012:role/trainer"));
        t = fetch(c.provider);
        REQUIRE(t);
        same_as_botocore(*t);

        sb.env.set("AWS_PROFILE", "ecs").set("AWS_CONTAINER_CREDENTIALS_FULL_URI", fake_url() + "/container/ecs");
        c = s3::resolve_config();
        REQUIRE(c.provider);
        t = fetch(c.provider);
        REQUIRE(t);
        CHECK(tag_of(*t) == "AR");
        same_as_botocore(*t);

        auto stats = boost::json::parse(fake_admin("/__fake/stats")).as_object();
        CHECK(stats.at("sts_assume_role").as_int64() >= 4);
        bool second = false;
        for (const auto& n : stats.at("session_names").as_array()) second |= n.as_string() == "conveyor-second";
        CHECK(second);

        sb.env.set("AWS_PROFILE", "bad");
        const std::string e = error_text([] { fetch(s3::resolve_config().provider); });
        CHECK(contains(e, "SignatureDoesNotMatch"));
        CHECK_FALSE(contains(e, "not-the-secret"));
        fake_admin("/__fake/reset", "{}");
    }

    TEST_CASE("credential_process: the same credentials as botocore")
    {
        if (!have_fake()) return;
        sandbox sb;
        const std::string p = sb.write("creds.sh", "#!/bin/sh\nprintf '{\"Version\": 1, \"AccessKeyId\": \"AKIAPROCESS000000001\", "
                                                   "\"SecretAccessKey\": \"proc-secret\", \"SessionToken\": \"proc-token\", "
                                                   "\"Expiration\": \"2099-01-01T00:00:00Z\"}'\n");
        std::filesystem::permissions(p, std::filesystem::perms::owner_all);
        sb.write("config", "[default]\ncredential_process = " + p + "\n");
        const auto c = s3::resolve_config();
        REQUIRE(c.provider);
        const auto t = fetch(c.provider);
        REQUIRE(t);
        same_as_botocore(*t);
    }
}

TEST_SUITE("fake AWS and S3")
{
    TEST_CASE("reading S3 through several expiries of 20-second credentials: no failed request, none signed with expired ones")
    {
        const char* endpoint = std::getenv("CONVEYOR_TEST_S3_ENDPOINT");
        if (fake_url().empty() || !endpoint) {
            MESSAGE("skipped: run through with_fake_aws.sh and with_s3_server.sh");
            return;
        }
        sandbox sb;
        const std::string bucket = std::getenv("CONVEYOR_TEST_S3_BUCKET");
        const std::string key = "providers/through-expiries.bin";
        std::string data(64 * 1024, '\0');
        for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + 7);
        {
            s3::credentials keys;
            keys.access_key_id = std::getenv("CONVEYOR_TEST_S3_ACCESS_KEY");
            keys.secret_access_key = std::getenv("CONVEYOR_TEST_S3_SECRET_KEY");
            s3::client writer(rt(), s3::resolve_config({.creds = keys, .region = "us-east-1", .endpoint_url = endpoint}));
            (void)writer.run(writer.async_put(bucket, key, std::as_bytes(std::span(data.data(), data.size()))));
        }
        fake_admin("/__fake/reset", "{}");
        fake_admin("/__fake/lifetime", R"({"seconds":20})");
        const std::string token = sb.write("token", "token-0");
        sb.env.set("AWS_WEB_IDENTITY_TOKEN_FILE", token)
            .set("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/reader")
            .set("AWS_ROLE_SESSION_NAME", "conveyor-reader")
            .set("AWS_ENDPOINT_URL_STS", fake_url());
        const auto cfg = s3::resolve_config({.region = "us-east-1", .endpoint_url = endpoint});
        REQUIRE(cfg.provider);
        s3::client reader(rt(), cfg);
        const std::string admin = std::string(endpoint) + "/__conveyor";
        const auto before = boost::json::parse(fake_admin("/stats", {}, admin)).as_object();

        // Four readers for a minute: three lifetimes of the credentials.
        std::atomic<unsigned> reads{0}, failures{0}, wrong{0};
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(62);
        std::vector<std::jthread> readers;
        for (int r = 0; r < 4; ++r)
            readers.emplace_back([&] {
                while (std::chrono::steady_clock::now() < end) {
                    try {
                        const cv::buffer b = reader.run(reader.async_get(bucket, key));
                        if (b.view() != data) ++wrong;
                        ++reads;
                    } catch (const std::exception& e) {
                        if (++failures <= 3) MESSAGE("failed read: " << e.what());
                    }
                    std::this_thread::sleep_for(std::chrono::milliseconds(20));
                }
            });
        for (int i = 1; std::chrono::steady_clock::now() < end; ++i) {
            std::this_thread::sleep_for(std::chrono::seconds(5));
            sb.write("token", "token-" + std::to_string(i)); // Kubernetes rotates the token
        }
        readers.clear();
        const auto after = boost::json::parse(fake_admin("/stats", {}, admin)).as_object();
        const auto fake = boost::json::parse(fake_admin("/__fake/stats")).as_object();
        MESSAGE(reads.load() << " reads over 62 s of 20-second credentials; " << fake.at("sts_web_identity").as_int64()
                             << " AssumeRoleWithWebIdentity calls; proxy refusals for expiry: "
                             << after.at("expired_token").as_int64() - before.at("expired_token").as_int64());
        CHECK(failures == 0);
        CHECK(wrong == 0);
        CHECK(reads > 500);
        CHECK(after.at("expired_token").as_int64() == before.at("expired_token").as_int64());
        CHECK(after.at("rejected").as_int64() == before.at("rejected").as_int64());
        CHECK(fake.at("sts_web_identity").as_int64() >= 4);
        const auto& tokens = fake.at("web_identity_tokens").as_array();
        CHECK(tokens.back().as_string() != "token-0");
        fake_admin("/__fake/reset", "{}");
    }
}
