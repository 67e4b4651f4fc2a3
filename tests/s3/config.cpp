// Tests of conveyor/s3/config.hpp: the credentials chain and its order, the shared AWS
// files, the JSON credentials file, region and endpoint precedence, addressing, key
// encoding, s3:// URLs, and that no secret ever reaches an error or a log line.
//
// Every test runs in a sandbox: the AWS variables unset, HOME and the shared file
// variables pointing into a fresh temporary directory. The real ~/.aws is never read.
#include <conveyor/core/location.hpp>
#include <conveyor/s3/config.hpp>
#include <conveyor/s3/provider.hpp>
#include <conveyor/s3/source.hpp>

#include "../support/common.hpp"
#include "aws_sandbox.hpp"

#include <doctest/doctest.h>

#include <boost/json/serialize.hpp>
#include <boost/json/string.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <stdlib.h> // setenv, unsetenv, mkdtemp

namespace {

namespace s3 = conveyor::s3;

using s3test::aws_sandbox;
using s3test::env_guard;

/// The `what()` of the `conveyor::error` that `f` throws (the test fails if it throws
/// nothing or something else); `code` receives its code.
std::string error_text(const std::function<void()>& f, std::error_code* code = nullptr)
{
    try {
        f();
    } catch (const conveyor::error& e) {
        if (code) *code = e.code();
        return e.what();
    } catch (const std::exception& e) {
        FAIL_CHECK("threw something other than conveyor::error: " << e.what());
        return e.what();
    }
    FAIL_CHECK("threw nothing");
    return {};
}

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

s3::credentials keys(std::string id, std::string secret, std::string token = "")
{
    s3::credentials c;
    c.access_key_id = std::move(id);
    c.secret_access_key = std::move(secret);
    c.session_token = std::move(token);
    return c;
}

} // namespace

// ---------------------------------------------------------------------------------------
// The credentials chain, step by step and in order.

TEST_CASE("credentials chain uses explicit credentials before everything else")
{
    aws_sandbox sb;
    sb.env.set("AWS_ACCESS_KEY_ID", "AKIAENVIRONMENT0001").set("AWS_SECRET_ACCESS_KEY", "env-secret");
    sb.credentials_file("[default]\naws_access_key_id = AKIAPROFILE00000001\naws_secret_access_key = profile-secret\n");
    const auto json = sb.json_file(R"({"aws_access_key_id": "AKIAJSON0000000001", "aws_secret_access_key": "json-secret"})");

    const auto c = s3::resolve_config({.creds = keys("AKIAEXPLICIT000001", "explicit-secret", "explicit-token"),
                                       .anonymous = true,
                                       .credentials_file = json});
    CHECK(c.creds.access_key_id == "AKIAEXPLICIT000001");
    CHECK(c.creds.secret_access_key == "explicit-secret");
    CHECK(c.creds.session_token == "explicit-token");
    CHECK(c.creds.source == "explicit credentials");

    // A source the caller gave is kept.
    auto named = keys("AKIAEXPLICIT000001", "explicit-secret");
    named.source = "vault";
    CHECK(s3::resolve_config({.creds = named}).creds.source == "vault");
}

TEST_CASE("credentials chain: explicit half a key pair is an error")
{
    aws_sandbox sb;
    CHECK(contains(error_text([] { s3::resolve_config({.creds = keys("AKIAEXPLICIT000001", "")}); }),
                   "access key id but no secret access key"));
    CHECK(contains(error_text([] { s3::resolve_config({.creds = keys("", "explicit-secret")}); }),
                   "secret access key but no access key id"));
    // Explicitly empty credentials are explicit anonymous access.
    const auto c = s3::resolve_config({.creds = s3::credentials{}});
    CHECK(c.creds.anonymous());
    CHECK(c.creds.source == "explicit credentials");
}

TEST_CASE("credentials chain: explicit anonymous beats the JSON file, the environment and profiles")
{
    aws_sandbox sb;
    sb.env.set("AWS_ACCESS_KEY_ID", "AKIAENVIRONMENT0001").set("AWS_SECRET_ACCESS_KEY", "env-secret");
    sb.credentials_file("[default]\naws_access_key_id = AKIAPROFILE00000001\naws_secret_access_key = profile-secret\n");
    const auto json = sb.json_file(
        R"({"aws_access_key_id": "AKIAJSON0000000001", "aws_secret_access_key": "json-secret", "bucket_name": "b1"})");
    const auto c = s3::resolve_config({.anonymous = true, .credentials_file = json});
    CHECK(c.creds.anonymous());
    CHECK(c.creds.secret_access_key.empty());
    CHECK(c.creds.source == "requested");
    CHECK(c.creds.describe() == "anonymous access (requested)");
    // The JSON file named explicitly still gives its bucket.
    CHECK(c.default_bucket == "b1");
}

TEST_CASE("credentials chain reads the JSON credentials file before the environment and profiles")
{
    aws_sandbox sb;
    sb.env.set("AWS_ACCESS_KEY_ID", "AKIAENVIRONMENT0001").set("AWS_SECRET_ACCESS_KEY", "env-secret");
    sb.credentials_file("[default]\naws_access_key_id = AKIAPROFILE00000001\naws_secret_access_key = profile-secret\n");
    const auto json = sb.json_file(R"({"aws_access_key_id": "AKIAJSON0000000001", "aws_secret_access_key": "json-secret"})");
    const auto c = s3::resolve_config({.credentials_file = json});
    CHECK(c.creds.access_key_id == "AKIAJSON0000000001");
    CHECK(c.creds.secret_access_key == "json-secret");
    CHECK(c.creds.session_token.empty());
    CHECK(c.creds.source == "credentials file " + json);
    CHECK(c.default_bucket.empty());
}

TEST_CASE("credentials chain prefers the environment over the shared credentials file")
{
    aws_sandbox sb;
    sb.env.set("AWS_ACCESS_KEY_ID", "AKIAENVIRONMENT0001").set("AWS_SECRET_ACCESS_KEY", "env-secret");
    sb.credentials_file("[default]\naws_access_key_id = AKIAPROFILE00000001\naws_secret_access_key = profile-secret\n");
    sb.config_file("[default]\naws_access_key_id = AKIACONFIG000000001\naws_secret_access_key = config-secret\n");
    const auto c = s3::resolve_config();
    CHECK(c.creds.access_key_id == "AKIAENVIRONMENT0001");
    CHECK(c.creds.secret_access_key == "env-secret");
    CHECK(c.creds.session_token.empty());
    CHECK(c.creds.source == "environment");
    CHECK(c.creds.describe() == "access key AKIA...0001 from environment");
}

TEST_CASE("credentials chain reads AWS_SESSION_TOKEN with the environment keys")
{
    aws_sandbox sb;
    sb.env.set("AWS_ACCESS_KEY_ID", "ASIATEMPORARY000001").set("AWS_SECRET_ACCESS_KEY", "env-secret");
    sb.env.set("AWS_SESSION_TOKEN", "env-token");
    const auto c = s3::resolve_config();
    CHECK(c.creds.session_token == "env-token");
    CHECK(c.creds.source == "environment");
}

TEST_CASE("credentials chain rejects half a key pair in the environment, naming the variables")
{
    aws_sandbox sb;
    {
        env_guard g;
        g.set("AWS_ACCESS_KEY_ID", "AKIAENVIRONMENT0001");
        const auto w = error_text([] { s3::resolve_config(); });
        CHECK(contains(w, "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not"));
    }
    {
        env_guard g;
        g.set("AWS_SECRET_ACCESS_KEY", "env-secret");
        const auto w = error_text([] { s3::resolve_config(); });
        CHECK(contains(w, "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not"));
        CHECK_FALSE(contains(w, "env-secret"));
    }
    // Empty variables count as unset: no error, and the chain goes on.
    sb.env.set("AWS_ACCESS_KEY_ID", "").set("AWS_SECRET_ACCESS_KEY", "");
    CHECK(s3::resolve_config().creds.anonymous());
}

TEST_CASE("credentials chain reads the default profile from the shared credentials file")
{
    aws_sandbox sb;
    sb.credentials_file("[default]\naws_access_key_id = AKIAPROFILE00000001\naws_secret_access_key = profile-secret\n"
                        "aws_session_token = profile-token\n");
    const auto c = s3::resolve_config();
    CHECK(c.creds.access_key_id == "AKIAPROFILE00000001");
    CHECK(c.creds.secret_access_key == "profile-secret");
    CHECK(c.creds.session_token == "profile-token");
    CHECK(c.creds.source == "profile default in " + sb.credentials_path);
}

TEST_CASE("credentials chain prefers the shared credentials file over the config file for a profile")
{
    aws_sandbox sb;
    sb.credentials_file("[default]\naws_access_key_id = AKIAPROFILE00000001\naws_secret_access_key = profile-secret\n");
    sb.config_file("[default]\naws_access_key_id = AKIACONFIG000000001\naws_secret_access_key = config-secret\n"
                   "region = eu-north-1\n");
    const auto c = s3::resolve_config();
    CHECK(c.creds.access_key_id == "AKIAPROFILE00000001");
    CHECK(c.creds.secret_access_key == "profile-secret");
    CHECK(c.creds.source == "profile default in " + sb.credentials_path);
    // The profile's other settings still come from the config file.
    CHECK(c.region == "eu-north-1");
}

TEST_CASE("credentials chain reads keys from a [profile name] section of the config file")
{
    aws_sandbox sb;
    sb.credentials_file("[other]\naws_access_key_id = AKIAOTHER0000000001\naws_secret_access_key = other-secret\n");
    sb.config_file("[default]\nregion = us-west-1\n\n[profile team]\naws_access_key_id = AKIACONFIG000000001\n"
                   "aws_secret_access_key = config-secret\n");
    const auto c = s3::resolve_config({.profile = "team"});
    CHECK(c.creds.access_key_id == "AKIACONFIG000000001");
    CHECK(c.creds.secret_access_key == "config-secret");
    CHECK(c.creds.source == "profile team in " + sb.config_path);
    // The default profile's region does not leak into a named profile.
    CHECK(c.region == "us-east-1");
}

TEST_CASE("credentials chain: [default] of the config file gives the default profile's keys")
{
    aws_sandbox sb;
    sb.config_file("[default]\naws_access_key_id = AKIACONFIG000000001\naws_secret_access_key = config-secret\n");
    const auto c = s3::resolve_config();
    CHECK(c.creds.access_key_id == "AKIACONFIG000000001");
    CHECK(c.creds.source == "profile default in " + sb.config_path);

    // [profile default] wins over [default], as in the SDKs.
    sb.config_file("[profile default]\naws_access_key_id = AKIACONFIG000000002\naws_secret_access_key = s2\n"
                   "[default]\naws_access_key_id = AKIACONFIG000000001\naws_secret_access_key = s1\n");
    CHECK(s3::resolve_config().creds.access_key_id == "AKIACONFIG000000002");
}

TEST_CASE("credentials chain: an explicit profile beats AWS_PROFILE, which beats the default profile")
{
    aws_sandbox sb;
    sb.credentials_file("[default]\naws_access_key_id = AKIADEFAULT00000001\naws_secret_access_key = s-default\n"
                        "[env]\naws_access_key_id = AKIAENVPROFILE00001\naws_secret_access_key = s-env\n"
                        "[mine]\naws_access_key_id = AKIAMINE00000000001\naws_secret_access_key = s-mine\n");
    CHECK(s3::resolve_config().creds.access_key_id == "AKIADEFAULT00000001");
    sb.env.set("AWS_PROFILE", "env");
    CHECK(s3::resolve_config().creds.access_key_id == "AKIAENVPROFILE00001");
    CHECK(s3::resolve_config().creds.source == "profile env in " + sb.credentials_path);
    CHECK(s3::resolve_config({.profile = "mine"}).creds.access_key_id == "AKIAMINE00000000001");
}

TEST_CASE("credentials chain falls back to anonymous access when nothing is configured, and says so")
{
    aws_sandbox sb;
    const auto c = s3::resolve_config();
    CHECK(c.creds.anonymous());
    CHECK(contains(c.creds.source, "no credentials found"));
    CHECK(contains(c.creds.describe(), "anonymous access (no credentials found"));
    CHECK(c.region == "us-east-1");
    CHECK(c.endpoint.url() == "https://s3.us-east-1.amazonaws.com");

    // A default profile without keys (only settings) is no error either.
    sb.config_file("[default]\nregion = ap-south-1\n");
    const auto d = s3::resolve_config();
    CHECK(d.creds.anonymous());
    CHECK(d.region == "ap-south-1");
}

TEST_CASE("credentials chain: a profile named explicitly or by AWS_PROFILE that exists nowhere is an error naming both files")
{
    aws_sandbox sb;
    sb.credentials_file("[default]\naws_access_key_id = AKIAPROFILE00000001\naws_secret_access_key = profile-secret\n");
    std::error_code code;
    auto w = error_text([] { s3::resolve_config({.profile = "typo"}); }, &code);
    CHECK(code == std::errc::invalid_argument);
    CHECK(contains(w, "profile 'typo'"));
    CHECK(contains(w, "named in the options"));
    CHECK(contains(w, sb.credentials_path));
    CHECK(contains(w, sb.config_path + " (does not exist)"));

    sb.env.set("AWS_PROFILE", "missing");
    w = error_text([] { s3::resolve_config(); });
    CHECK(contains(w, "profile 'missing' (named by AWS_PROFILE)"));
    CHECK(contains(w, sb.credentials_path));
    CHECK(contains(w, sb.config_path));
    CHECK_FALSE(contains(w, "profile-secret"));
}

TEST_CASE("credentials chain reads ~/.aws under HOME when the file variables are unset")
{
    aws_sandbox sb;
    sb.env.unset("AWS_SHARED_CREDENTIALS_FILE").unset("AWS_CONFIG_FILE");
    sb.dir.write(".aws/credentials", "[default]\naws_access_key_id = AKIAHOME00000000001\naws_secret_access_key = home-secret\n");
    sb.dir.write(".aws/config", "[default]\nregion = sa-east-1\n");
    const auto c = s3::resolve_config();
    CHECK(c.creds.access_key_id == "AKIAHOME00000000001");
    CHECK(c.creds.source == "profile default in " + sb.dir.path() + "/.aws/credentials");
    CHECK(c.region == "sa-east-1");

    // "~/" in the variables means HOME too.
    sb.dir.write("elsewhere/creds", "[default]\naws_access_key_id = AKIATILDE0000000001\naws_secret_access_key = s\n");
    sb.env.set("AWS_SHARED_CREDENTIALS_FILE", "~/elsewhere/creds");
    CHECK(s3::resolve_config().creds.access_key_id == "AKIATILDE0000000001");
}

TEST_CASE("credentials chain: a profile with only half a key pair is an error naming the file and line")
{
    aws_sandbox sb;
    sb.credentials_file("[default]\n\naws_access_key_id = AKIAPROFILE00000001\n");
    auto w = error_text([] { s3::resolve_config(); });
    CHECK(contains(w, sb.credentials_path));
    CHECK(contains(w, "line 3"));
    CHECK(contains(w, "has aws_access_key_id but no aws_secret_access_key"));

    sb.credentials_file("[default]\naws_secret_access_key = profile-secret\n");
    w = error_text([] { s3::resolve_config(); });
    CHECK(contains(w, "line 2"));
    CHECK(contains(w, "has aws_secret_access_key but no aws_access_key_id"));
    CHECK_FALSE(contains(w, "profile-secret"));
}

TEST_CASE("credentials chain: SSO, an MFA role or a role without a usable source is an error, not silent anonymity")
{
    aws_sandbox sb;
    sb.config_file("[profile sso]\nsso_session = corp\nsso_account_id = 1\n"
                   "[profile proc]\ncredential_process = /usr/bin/get-creds\n"
                   "[profile role]\nrole_arn = arn:aws:iam::1:role/x\nsource_profile = default\n"
                   "[profile mfa]\nrole_arn = arn:aws:iam::1:role/x\nsource_profile = proc\nmfa_serial = arn:aws:iam::1:mfa/u\n"
                   "[profile loop-a]\nrole_arn = arn:aws:iam::1:role/a\nsource_profile = loop-b\n"
                   "[profile loop-b]\nrole_arn = arn:aws:iam::1:role/b\nsource_profile = loop-a\n"
                   "[profile nosource]\nrole_arn = arn:aws:iam::1:role/x\n");
    std::error_code code;
    auto w = error_text([] { s3::resolve_config({.profile = "sso"}); }, &code);
    CHECK(code == std::errc::operation_not_supported);
    CHECK(contains(w, sb.config_path));
    CHECK(contains(w, "line 2"));
    CHECK(contains(w, "sso_session"));
    CHECK(contains(error_text([] { s3::resolve_config({.profile = "role"}); }), "profile 'default' (named by source_profile in profile 'role') is not in"));
    CHECK(contains(error_text([] { s3::resolve_config({.profile = "mfa"}); }), "needs an MFA code"));
    CHECK(contains(error_text([] { s3::resolve_config({.profile = "loop-a"}); }), "loop (loop-a -> loop-b -> loop-a)"));
    CHECK(contains(error_text([] { s3::resolve_config({.profile = "nosource"}); }), "neither source_profile nor credential_source"));
    // A credential process is a provider now.
    const auto c = s3::resolve_config({.profile = "proc"});
    REQUIRE(c.provider);
    CHECK(c.provider->name() == "credential_process of profile proc (/usr/bin/get-creds)");
}

// ---------------------------------------------------------------------------------------
// The shared files' INI dialect.

TEST_CASE("profile files: comments, names with spaces, inline comments and the indented s3 sub-section")
{
    aws_sandbox sb;
    sb.config_file("# AWS CLI configuration\n"
                   "; another comment\n"
                   "[default]\n"
                   "region = us-west-2   # inline comment\n"
                   "output = json\n"
                   "\n"
                   "[profile my dev]   ; comment after a header\n"
                   "REGION=eu-central-1\n"
                   "s3 =\n"
                   "  endpoint_url = http://minio.local:9000 ; comment\n"
                   "  # an indented comment\n"
                   "\n"
                   "  addressing_style = path\n"
                   "dynamodb =\n"
                   "  endpoint_url = http://localhost:8000\n"
                   "endpoint_url = https://everything-else.example.com\n"
                   "\n"
                   "[sso-session corp]\n"
                   "sso_start_url = https://corp.awsapps.com/start#/\n");
    sb.credentials_file("[my dev]\r\naws_access_key_id=AKIADEV000000000001\r\naws_secret_access_key = dev/secret+key#1\r\n");

    const auto d = s3::resolve_config();
    CHECK(d.region == "us-west-2");
    CHECK(d.endpoint.url() == "https://s3.us-west-2.amazonaws.com");

    const auto c = s3::resolve_config({.profile = "my dev"});
    CHECK(c.creds.access_key_id == "AKIADEV000000000001");
    // '#' is a comment only after whitespace: a secret may hold one.
    CHECK(c.creds.secret_access_key == "dev/secret+key#1");
    CHECK(c.region == "eu-central-1");
    CHECK(c.endpoint.url() == "http://minio.local:9000");
    CHECK_FALSE(c.aws_endpoint);
    CHECK(c.style == s3::addressing::path);

    // Without the s3 sub-section's endpoint, the top-level one applies; the dynamodb one never does.
    sb.config_file("[profile my dev]\ns3 =\n  addressing_style = virtual\ndynamodb =\n  endpoint_url = http://localhost:8000\n"
                   "endpoint_url = https://everything-else.example.com\n");
    const auto e = s3::resolve_config({.profile = "my dev"});
    CHECK(e.endpoint.url() == "https://everything-else.example.com");
    CHECK(e.style == s3::addressing::virtual_hosted);
}

TEST_CASE("profile files: a UTF-8 BOM, repeated sections and keys, and continuation lines")
{
    aws_sandbox sb;
    sb.config_file("\xEF\xBB\xBF[default]\nregion = us-west-1\n[profile x]\nfoo = a\n  more text\n[default]\nregion = eu-west-3\n");
    CHECK(s3::resolve_config().region == "eu-west-3");
}

TEST_CASE("profile file parse errors name the file and line, never the line's text")
{
    aws_sandbox sb;
    struct bad {
        const char* text;
        int line;
        const char* says;
    };
    for (const bad& b : {
             bad{"[default]\naws_secret_access_key wJalrXUtnFEMI-NO-EQUALS\n", 2, "expected a [section] header"},
             bad{"aws_secret_access_key = wJalrXUtnFEMI-BEFORE-SECTION\n[default]\n", 1, "before any [section]"},
             bad{"[default]\ns3 =\n  wJalrXUtnFEMI-IN-SUBSECTION\n", 3, "sub-section"},
             bad{"[default]\ns3 =\n  = wJalrXUtnFEMI-NO-NAME\n", 3, "no name"},
             bad{"[default]\n= wJalrXUtnFEMI-NO-KEY\n", 2, "no name"},
             bad{"[default\nregion = x\n", 1, "no closing ']'"},
             bad{"[default] wJalrXUtnFEMI-AFTER-HEADER\n", 1, "after a section header"},
             bad{"[ ]\n", 1, "no name"},
         }) {
        CAPTURE(b.text);
        sb.credentials_file(b.text);
        std::error_code code;
        const auto w = error_text([] { s3::resolve_config(); }, &code);
        CHECK(code == std::errc::invalid_argument);
        CHECK(contains(w, sb.credentials_path));
        CHECK(contains(w, "line " + std::to_string(b.line) + ":"));
        CHECK(contains(w, b.says));
        CHECK_FALSE(contains(w, "wJalrXUtnFEMI"));
    }
}

// What botocore (configparser) does with each kind of line, and what conveyor does:
// - a line that is not indented and has no '=' (inside or outside a section): botocore
//   raises ConfigParseError naming the file; so does conveyor, with the line number;
// - a property before any section, a section header without ']': the same;
// - whole-line comments ('#' or ';', indented or not) and blank lines: skipped by both;
// - an indented line after a property: configparser joins it to the property's value
//   ("x\nfoo"), so a line meant as `key = value` that lost its '=' vanishes into the
//   value above it. botocore signs with such a value, or fails later without saying why.
//   conveyor keeps the joined value for keys it never reads, but a value that it reads
//   (keys, token, region, endpoint, addressing style) takes one line: the continuation
//   is an error naming the file and the continuation's line, never the text.
TEST_CASE("profile files: lines without '=' are errors or continuations as in botocore, never silently lost")
{
    aws_sandbox sb;
    struct line_case {
        const char* text;
        int line; // 0: parses
    };
    for (const line_case& c : {
             line_case{"[default]\nfoo\n", 2},
             line_case{"foo\n[default]\n", 1},
             line_case{"  foo\n[default]\n", 1},
             line_case{"[default]\n  foo\nregion = us-west-2\n", 2},
             line_case{"[default]\ns3 =\n  a = b\nfoo\n", 4},
             line_case{"[default]\r\nfoo\r\n", 2},
             line_case{"[default]\nregion = us-west-2\n \nfoo\n", 4},
             line_case{"[default]\n  # indented comment\n; comment\n\n   \nregion = us-west-2\n  # comment\n", 0},
             line_case{"[profile other]\nnote = first line\n  second line without equals\n[default]\nregion = us-west-2\n", 0},
         }) {
        CAPTURE(c.text);
        sb.credentials_file(c.text);
        if (c.line == 0) {
            CHECK(s3::resolve_config().region == "us-west-2");
            continue;
        }
        const auto w = error_text([] { s3::resolve_config(); });
        CHECK(contains(w, sb.credentials_path + ": line " + std::to_string(c.line) + ":"));
    }
}

// Issue 9: an indented line without '=' continued the value above it: `aws_secret_access_key`
// silently became "abc\nSECRET-CONTINUED", and a continued region or endpoint was repeated
// in its error message, continuation and all.
TEST_CASE("profile files: a continuation line in a value conveyor reads is an error naming the file and line, not the text")
{
    aws_sandbox sb;
    const std::string keys_lines = "aws_access_key_id = AKIAPROFILE00000001\naws_secret_access_key = abc\n";
    struct continued {
        std::string text;
        int line;
        const char* key;
    };
    for (const continued& c : {
             continued{"[default]\n" + keys_lines + "  SECRET-CONTINUED\n", 4, "aws_secret_access_key"},
             continued{"[default]\naws_access_key_id = AKIAPROFILE00000001\n\taws_secret_access_key SECRET-CONTINUED\n"
                       "aws_secret_access_key = abc\n",
                       3, "aws_access_key_id"},
             continued{"[default]\n" + keys_lines + "aws_session_token = t\n\n  SECRET-CONTINUED\n", 6, "aws_session_token"},
             continued{"[default]\n" + keys_lines + "region = us-east-1\n  SECRET-CONTINUED\n", 5, "region"},
             continued{"[default]\n" + keys_lines + "endpoint_url = http://minio:9000\n  SECRET-CONTINUED\n", 5, "endpoint_url"},
         }) {
        CAPTURE(c.text);
        sb.credentials_file(c.text);
        std::error_code code;
        const auto w = error_text([] { s3::resolve_config(); }, &code);
        CHECK(code == std::errc::invalid_argument);
        CHECK(contains(w, sb.credentials_path + ": line " + std::to_string(c.line) + ":"));
        CHECK(contains(w, c.key));
        CHECK_FALSE(contains(w, "SECRET"));
        CHECK_FALSE(contains(w, "abc"));
    }
    // The same in the config file, for a key read from it.
    sb.credentials_file("");
    sb.config_file("[default]\nregion = us-east-1\n  SECRET-CONTINUED\n");
    const auto w = error_text([] { s3::resolve_config(); });
    CHECK(contains(w, sb.config_path + ": line 3:"));
    CHECK_FALSE(contains(w, "SECRET"));
}

TEST_CASE("profile file that cannot be read is an error naming it")
{
    aws_sandbox sb;
    std::filesystem::create_directory(sb.config_path);
    std::error_code code;
    const auto w = error_text([] { s3::resolve_config(); }, &code);
    CHECK(code == std::errc::is_a_directory);
    CHECK(contains(w, sb.config_path));
    CHECK(contains(w, "config file"));
}

TEST_CASE("profile files are not read when the options and environment give everything")
{
    aws_sandbox sb;
    sb.config_file("this line is not INI\n");
    sb.env.set("AWS_PROFILE", "nowhere");
    const auto c = s3::resolve_config({.creds = keys("AKIAEXPLICIT000001", "s"),
                                       .region = "eu-west-1",
                                       .endpoint_url = "http://127.0.0.1:9000",
                                       .style = s3::addressing::path});
    CHECK(c.region == "eu-west-1");
    // Anything left to the chain reads them.
    CHECK(contains(error_text([] { s3::resolve_config({.region = "eu-west-1"}); }), "line 1"));
}

// ---------------------------------------------------------------------------------------
// The seeds' JSON credentials file.

TEST_CASE("JSON credentials file gives keys, a session token, bucket_name and endpoint_url")
{
    aws_sandbox sb;
    const auto json = sb.json_file(R"({
        "aws_access_key_id": "AKIAJSON0000000001",
        "aws_secret_access_key": "json-secret",
        "aws_session_token": "json-token",
        "bucket_name": "training-data",
        "endpoint_url": "http://10.0.0.5:9000/s3",
        "unknown_key": 42
    })");
    const auto c = s3::resolve_config({.credentials_file = json});
    CHECK(c.creds.access_key_id == "AKIAJSON0000000001");
    CHECK(c.creds.secret_access_key == "json-secret");
    CHECK(c.creds.session_token == "json-token");
    CHECK(c.default_bucket == "training-data");
    CHECK(c.endpoint == conveyor::http::endpoint{.tls = false, .host = "10.0.0.5", .port = 9000, .base_path = "/s3"});
    CHECK_FALSE(c.aws_endpoint);

    // Optional keys may be null.
    const auto minimal = sb.json_file(
        R"({"aws_access_key_id": "AKIAJSON0000000001", "aws_secret_access_key": "json-secret", "bucket_name": null})", "m.json");
    const auto m = s3::resolve_config({.credentials_file = minimal});
    CHECK(m.default_bucket.empty());
    CHECK(m.aws_endpoint);
}

TEST_CASE("JSON credentials file: each malformed kind is an error naming the file and what is wrong")
{
    aws_sandbox sb;
    struct bad {
        const char* text;
        const char* says;
    };
    const char* secret = "json-SECRET-value";
    for (const bad& b : {
             bad{R"({"aws_access_key_id": "AKIAJSON0000000001", "aws_secret_access_key": "json-SECRET-value" "x": 1})",
                 "not valid JSON at byte"},
             bad{R"({"aws_access_key_id": "AKIAJSON0000000001", "aws_secret_access_key": "json-SECRET-value")",
                 "not valid JSON"},
             bad{"", "not valid JSON"},
             bad{R"(["json-SECRET-value"])", "holds an array, not a JSON object"},
             bad{R"({"aws_secret_access_key": "json-SECRET-value"})", "has no \"aws_access_key_id\""},
             bad{R"({"aws_access_key_id": "AKIAJSON0000000001"})", "has no \"aws_secret_access_key\""},
             bad{R"({"aws_access_key_id": 12345, "aws_secret_access_key": "json-SECRET-value"})",
                 "\"aws_access_key_id\" is a number, not a string"},
             bad{R"({"aws_access_key_id": "AKIAJSON0000000001", "aws_secret_access_key": ["json-SECRET-value"]})",
                 "\"aws_secret_access_key\" is an array, not a string"},
             bad{R"({"aws_access_key_id": "AKIAJSON0000000001", "aws_secret_access_key": ""})",
                 "\"aws_secret_access_key\" is empty"},
             bad{R"({"aws_access_key_id": "A", "aws_secret_access_key": "json-SECRET-value", "bucket_name": 7})",
                 "\"bucket_name\" is a number, not a string"},
             bad{R"({"aws_access_key_id": "A", "aws_secret_access_key": "json-SECRET-value", "endpoint_url": true})",
                 "\"endpoint_url\" is a boolean, not a string"},
             bad{R"({"aws_access_key_id": "A", "aws_secret_access_key": "json-SECRET-value", "endpoint_url": "ftp://x"})",
                 "scheme 'ftp' is not http or https"},
             bad{R"({"aws_access_key_id": "A", "aws_secret_access_key": "json-SECRET-value", "endpoint_url": "minio:9000"})",
                 "endpoint_url 'minio:9000'"},
         }) {
        CAPTURE(b.text);
        const auto path = sb.json_file(b.text, "bad.json");
        std::error_code code;
        const auto w = error_text([&] { s3::resolve_config({.credentials_file = path}); }, &code);
        CHECK(code == std::errc::invalid_argument);
        CHECK(contains(w, path));
        CHECK(contains(w, b.says));
        CHECK_FALSE(contains(w, secret));
    }
}

TEST_CASE("JSON credentials file that is missing or a directory is an error naming it")
{
    aws_sandbox sb;
    const auto missing = sb.dir.path() + "/nope.json";
    std::error_code code;
    auto w = error_text([&] { s3::resolve_config({.credentials_file = missing}); }, &code);
    CHECK(code == std::errc::no_such_file_or_directory);
    CHECK(contains(w, missing));

    std::filesystem::create_directory(sb.dir.path() + "/dir.json");
    w = error_text([&] { s3::resolve_config({.credentials_file = sb.dir.path() + "/dir.json"}); }, &code);
    CHECK(code == std::errc::is_a_directory);
    CHECK(contains(w, "dir.json"));
}

// ---------------------------------------------------------------------------------------
// Region and endpoint.

TEST_CASE("region precedence: explicit, AWS_REGION, AWS_DEFAULT_REGION, the profile's, us-east-1")
{
    aws_sandbox sb;
    CHECK(s3::resolve_config().region == "us-east-1");
    sb.config_file("[default]\nregion = ap-northeast-1\n");
    CHECK(s3::resolve_config().region == "ap-northeast-1");
    sb.env.set("AWS_DEFAULT_REGION", "eu-south-1");
    CHECK(s3::resolve_config().region == "eu-south-1");
    sb.env.set("AWS_REGION", "ca-central-1");
    CHECK(s3::resolve_config().region == "ca-central-1");
    CHECK(s3::resolve_config({.region = "me-south-1"}).region == "me-south-1");
    // A region in the credentials file counts as the profile's too.
    sb.env.unset("AWS_REGION").unset("AWS_DEFAULT_REGION");
    sb.credentials_file("[default]\nregion = af-south-1\n");
    CHECK(s3::resolve_config().region == "af-south-1");
}

TEST_CASE("region that is not a region name is an error naming where it came from")
{
    aws_sandbox sb;
    CHECK(contains(error_text([] { s3::resolve_config({.region = "us east/1"}); }), "region 'us east/1' is not a region name"));
    sb.env.set("AWS_REGION", "bad region");
    CHECK(contains(error_text([] { s3::resolve_config(); }), "AWS_REGION"));
    sb.env.unset("AWS_REGION");
    sb.config_file("[default]\n\nregion = a:b\n");
    const auto w = error_text([] { s3::resolve_config(); });
    CHECK(contains(w, sb.config_path + " line 3"));
}

TEST_CASE("endpoint precedence: explicit, JSON file, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, profile, AWS default")
{
    aws_sandbox sb;
    CHECK(s3::resolve_config().endpoint.url() == "https://s3.us-east-1.amazonaws.com");
    sb.config_file("[default]\nendpoint_url = http://profile-top:1\n");
    CHECK(s3::resolve_config().endpoint.url() == "http://profile-top:1");
    sb.config_file("[default]\nendpoint_url = http://profile-top:1\ns3 =\n  endpoint_url = http://profile-s3:2\n");
    CHECK(s3::resolve_config().endpoint.url() == "http://profile-s3:2");
    sb.env.set("AWS_ENDPOINT_URL", "http://env-all:3");
    CHECK(s3::resolve_config().endpoint.url() == "http://env-all:3");
    sb.env.set("AWS_ENDPOINT_URL_S3", "http://env-s3:4");
    CHECK(s3::resolve_config().endpoint.url() == "http://env-s3:4");
    const auto json = sb.json_file(R"({"aws_access_key_id": "A", "aws_secret_access_key": "s", "endpoint_url": "http://json:5"})");
    CHECK(s3::resolve_config({.credentials_file = json}).endpoint.url() == "http://json:5");
    CHECK(s3::resolve_config({.credentials_file = json, .endpoint_url = "https://explicit.example.com"}).endpoint.url() ==
          "https://explicit.example.com");
}

TEST_CASE("endpoint: the AWS default follows the region, and AWS hosts are recognised as AWS")
{
    aws_sandbox sb;
    auto c = s3::resolve_config({.region = "eu-west-1"});
    CHECK(c.endpoint == conveyor::http::endpoint{.tls = true, .host = "s3.eu-west-1.amazonaws.com", .port = 443, .base_path = ""});
    CHECK(c.aws_endpoint);
    CHECK(s3::resolve_config({.region = "cn-north-1"}).endpoint.host == "s3.cn-north-1.amazonaws.com.cn");

    CHECK(s3::resolve_config({.endpoint_url = "https://s3.dualstack.us-east-2.amazonaws.com"}).aws_endpoint);
    CHECK(s3::resolve_config({.endpoint_url = "https://S3.US-EAST-2.AMAZONAWS.COM"}).aws_endpoint);
    CHECK_FALSE(s3::resolve_config({.endpoint_url = "https://notamazonaws.com"}).aws_endpoint);
    CHECK_FALSE(s3::resolve_config({.endpoint_url = "https://amazonaws.com.evil.example"}).aws_endpoint);
    CHECK_FALSE(s3::resolve_config({.endpoint_url = "http://127.0.0.1:9000"}).aws_endpoint);
}

TEST_CASE("endpoint that is not an http(s) URL is an error naming where it came from")
{
    aws_sandbox sb;
    std::error_code code;
    auto w = error_text([] { s3::resolve_config({.endpoint_url = "ftp://files.example.com"}); }, &code);
    CHECK(code == std::errc::invalid_argument);
    CHECK(contains(w, "options"));
    CHECK(contains(w, "scheme 'ftp' is not http or https"));

    sb.env.set("AWS_ENDPOINT_URL", "127.0.0.1:9000");
    w = error_text([] { s3::resolve_config(); });
    CHECK(contains(w, "AWS_ENDPOINT_URL:"));
    CHECK(contains(w, "'127.0.0.1:9000'"));
    sb.env.set("AWS_ENDPOINT_URL_S3", "s3://bucket");
    CHECK(contains(error_text([] { s3::resolve_config(); }), "AWS_ENDPOINT_URL_S3:"));
    sb.env.unset("AWS_ENDPOINT_URL").unset("AWS_ENDPOINT_URL_S3");

    sb.config_file("[default]\ns3 =\n  endpoint_url = minio\n");
    w = error_text([] { s3::resolve_config(); });
    CHECK(contains(w, sb.config_path));
    CHECK(contains(w, "line 3: endpoint_url 'minio'"));
}

// ---------------------------------------------------------------------------------------
// Addressing.

TEST_CASE("addressing: an AWS endpoint and a DNS-compatible bucket go virtual-hosted")
{
    aws_sandbox sb;
    const auto c = s3::resolve_config({.region = "us-west-2"});
    const auto t = s3::target_for(c, "my-bucket", "a/b.jpg");
    CHECK(t.endpoint.host == "my-bucket.s3.us-west-2.amazonaws.com");
    CHECK(t.endpoint.tls);
    CHECK(t.endpoint.port == 443);
    CHECK(t.host == "my-bucket.s3.us-west-2.amazonaws.com");
    CHECK(t.path == "/a/b.jpg");
    // The bucket itself.
    CHECK(s3::target_for(c, "my-bucket", "").path == "/");
}

TEST_CASE("addressing: a bucket with dots goes path-style over https, virtual-hosted over http")
{
    aws_sandbox sb;
    const auto tls = s3::resolve_config({.region = "us-west-2"});
    auto t = s3::target_for(tls, "logs.example.com", "x");
    CHECK(t.host == "s3.us-west-2.amazonaws.com");
    CHECK(t.path == "/logs.example.com/x");

    const auto plain = s3::resolve_config({.endpoint_url = "http://s3.us-west-2.amazonaws.com"});
    t = s3::target_for(plain, "logs.example.com", "x");
    CHECK(t.host == "logs.example.com.s3.us-west-2.amazonaws.com");
    CHECK(t.path == "/x");
}

TEST_CASE("addressing: bucket names that are not DNS labels go path-style on AWS")
{
    aws_sandbox sb;
    const auto c = s3::resolve_config();
    for (const char* bucket : {"MyBucket", "my_bucket", "ab", "-bucket", "bucket-", "a..b", "192.168.1.10"}) {
        CAPTURE(bucket);
        const auto t = s3::target_for(c, bucket, "k");
        CHECK(t.host == "s3.us-east-1.amazonaws.com");
        CHECK(t.path == "/" + std::string(bucket) + "/k");
    }
    CHECK(s3::target_for(c, std::string(64, 'a'), "k").path.starts_with("/aaaa"));
    CHECK(s3::target_for(c, std::string(63, 'a'), "k").path == "/k");

    CHECK(s3::virtual_hostable("abc", true));
    CHECK(s3::virtual_hostable("a-b.c", false));
    CHECK_FALSE(s3::virtual_hostable("a-b.c", true));
    CHECK_FALSE(s3::virtual_hostable("a.-b", false));
    CHECK_FALSE(s3::virtual_hostable("10.0.0.1", false));
}

TEST_CASE("addressing: a custom endpoint goes path-style below its base path")
{
    aws_sandbox sb;
    const auto c = s3::resolve_config({.endpoint_url = "http://127.0.0.1:9000"});
    CHECK_FALSE(c.aws_endpoint);
    auto t = s3::target_for(c, "bucket", "dir/file.tar");
    CHECK(t.endpoint == c.endpoint);
    CHECK(t.host == "127.0.0.1:9000");
    CHECK(t.path == "/bucket/dir/file.tar");
    CHECK(s3::target_for(c, "bucket", "").path == "/bucket");

    const auto ceph = s3::resolve_config({.endpoint_url = "https://ceph.example.com/rgw/"});
    t = s3::target_for(ceph, "bucket", "k");
    CHECK(t.host == "ceph.example.com");
    CHECK(t.path == "/rgw/bucket/k");
    CHECK(s3::target_for(ceph, "bucket", "").path == "/rgw/bucket");
    // The service itself (listing buckets).
    CHECK(s3::target_for(ceph, "", "").path == "/rgw/");

    const auto v6 = s3::resolve_config({.endpoint_url = "http://[::1]:9000"});
    CHECK(s3::target_for(v6, "bucket", "k").host == "[::1]:9000");
}

TEST_CASE("addressing: explicit path and virtual_hosted override the automatic choice")
{
    aws_sandbox sb;
    const auto aws_path = s3::resolve_config({.style = s3::addressing::path});
    auto t = s3::target_for(aws_path, "my-bucket", "k");
    CHECK(t.host == "s3.us-east-1.amazonaws.com");
    CHECK(t.path == "/my-bucket/k");

    const auto custom_virtual =
        s3::resolve_config({.endpoint_url = "https://minio.example.com:9443", .style = s3::addressing::virtual_hosted});
    t = s3::target_for(custom_virtual, "my.bucket", "k");
    CHECK(t.endpoint.host == "my.bucket.minio.example.com");
    CHECK(t.endpoint.port == 9443);
    CHECK(t.host == "my.bucket.minio.example.com:9443");
    CHECK(t.path == "/k");
    // An explicit style also beats the profile's addressing_style.
    sb.config_file("[default]\ns3 =\n  addressing_style = virtual\n");
    CHECK(s3::resolve_config({.style = s3::addressing::path}).style == s3::addressing::path);
    CHECK(s3::resolve_config().style == s3::addressing::virtual_hosted);
    sb.config_file("[default]\ns3 =\n  addressing_style = auto\n");
    CHECK(s3::resolve_config().style == s3::addressing::automatic);
    sb.config_file("[default]\ns3 =\n  addressing_style = sideways\n");
    CHECK(contains(error_text([] { s3::resolve_config(); }), "line 3: addressing_style 'sideways' is not auto, path or virtual"));
}

TEST_CASE("addressing: forced virtual-hosted with a bucket or endpoint that cannot take it is an error")
{
    aws_sandbox sb;
    const auto c = s3::resolve_config({.style = s3::addressing::virtual_hosted});
    std::error_code code;
    auto w = error_text([&] { s3::target_for(c, "My_Bucket", "k"); }, &code);
    CHECK(code == std::errc::invalid_argument);
    CHECK(contains(w, "s3://My_Bucket/k"));
    CHECK(contains(w, "path-style"));

    const auto ip = s3::resolve_config({.endpoint_url = "http://10.1.2.3:9000", .style = s3::addressing::virtual_hosted});
    w = error_text([&] { s3::target_for(ip, "bucket", "k"); });
    CHECK(contains(w, "IP address"));

    const auto any = s3::resolve_config();
    CHECK(contains(error_text([&] { s3::target_for(any, "bad/bucket", "k"); }), "not a bucket name"));
    CHECK(contains(error_text([&] { s3::target_for(any, "", "k"); }), "needs a bucket"));
}

// ---------------------------------------------------------------------------------------
// Encoding.

TEST_CASE("key encoding keeps unreserved characters and slashes")
{
    CHECK(s3::encode_key("") == "");
    CHECK(s3::encode_key("train/shard-000001.tar") == "train/shard-000001.tar");
    CHECK(s3::encode_key("AZaz09-._~/") == "AZaz09-._~/");
    CHECK(s3::encode_key("/leading//double/") == "/leading//double/");
}

TEST_CASE("key encoding: spaces, +, =, %, ~ and reserved characters")
{
    CHECK(s3::encode_key("my file.jpg") == "my%20file.jpg");
    CHECK(s3::encode_key("a+b=c") == "a%2Bb%3Dc");
    CHECK(s3::encode_key("100%.txt") == "100%25.txt");
    CHECK(s3::encode_key("~user/x") == "~user/x");
    CHECK(s3::encode_key("a?b#c&d;e:f@g,h$i!j*k'l(m)n[o]p") ==
          "a%3Fb%23c%26d%3Be%3Af%40g%2Ch%24i%21j%2Ak%27l%28m%29n%5Bo%5Dp");
    CHECK(s3::encode_key(std::string("nul\0tab\t", 8)) == "nul%00tab%09");
}

TEST_CASE("key encoding: UTF-8 bytes are encoded one by one in uppercase hex")
{
    CHECK(s3::encode_key("données/été.jpg") == "donn%C3%A9es/%C3%A9t%C3%A9.jpg");
    CHECK(s3::encode_key("日本") == "%E6%97%A5%E6%9C%AC");
    CHECK(s3::encode_key("\xff") == "%FF");
}

TEST_CASE("query encoding encodes slashes too")
{
    CHECK(s3::encode_query("photos/2024/") == "photos%2F2024%2F");
    CHECK(s3::encode_query("a b+c=d&e") == "a%20b%2Bc%3Dd%26e");
    CHECK(s3::encode_query("été~-._") == "%C3%A9t%C3%A9~-._");
}

TEST_CASE("request target paths are encoded keys, virtual-hosted and path-style")
{
    aws_sandbox sb;
    const auto aws = s3::resolve_config();
    CHECK(s3::target_for(aws, "bucket", "données/été 1+1.jpg").path == "/donn%C3%A9es/%C3%A9t%C3%A9%201%2B1.jpg");
    const auto minio = s3::resolve_config({.endpoint_url = "http://minio:9000"});
    CHECK(s3::target_for(minio, "bucket", "a b/%.jpg").path == "/bucket/a%20b/%25.jpg");
}

// ---------------------------------------------------------------------------------------
// s3:// URLs.

// s3:// URLs are parsed by conveyor::location (tests/core/location.cpp).

TEST_CASE("s3: object_uri names an object for messages")
{
    aws_sandbox sb;
    const auto c = s3::resolve_config();
    CHECK(s3::object_uri(c, "bucket", "a/b c.jpg") == "s3://bucket/a/b c.jpg");
    CHECK(s3::object_uri(c, "bucket", "") == "s3://bucket/");
    const conveyor::location back(s3::object_uri(c, "bucket", "données/x"), conveyor::location_kind::s3);
    CHECK(back.bucket() == "bucket");
    CHECK(back.key() == "données/x");
}

// ---------------------------------------------------------------------------------------
// Secrets and descriptions.

TEST_CASE("config describe says endpoint, region, addressing and credentials")
{
    aws_sandbox sb;
    sb.env.set("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE").set("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY");
    auto c = s3::resolve_config({.region = "eu-west-1"});
    CHECK(c.describe() == "S3 endpoint https://s3.eu-west-1.amazonaws.com (AWS), region eu-west-1, virtual-hosted "
                          "addressing where the bucket name allows, access key AKIA...MPLE from environment");
    const auto json = sb.json_file(R"({"aws_access_key_id": "minioadmin", "aws_secret_access_key": "minio-secret",
                                       "bucket_name": "data", "endpoint_url": "http://127.0.0.1:9000"})");
    c = s3::resolve_config({.credentials_file = json});
    CHECK(c.describe() == "S3 endpoint http://127.0.0.1:9000 (custom), region us-east-1, path-style addressing, default "
                          "bucket data, access key mini...dmin from credentials file " + json);
    CHECK(to_string(s3::addressing::virtual_hosted) == "virtual-hosted");
}

TEST_CASE("secrets never appear in any error text of the config chain")
{
    aws_sandbox sb;
    const std::vector<std::string> secrets = {"SECRET-explicit", "TOKEN-explicit", "SECRET-env",    "TOKEN-env",
                                              "SECRET-json",     "TOKEN-json",     "SECRET-profile", "TOKEN-profile",
                                              "SECRET-config",   "SECRET-url"};
    auto check_clean = [&](const std::string& what) {
        CAPTURE(what);
        CHECK_FALSE(what.empty());
        for (const auto& s : secrets) CHECK_FALSE(contains(what, s));
    };
    auto env_with_secrets = [&](env_guard& g) {
        g.set("AWS_ACCESS_KEY_ID", "AKIAENVIRONMENT0001").set("AWS_SECRET_ACCESS_KEY", "SECRET-env");
        g.set("AWS_SESSION_TOKEN", "TOKEN-env");
    };
    const std::string good_profile = "[default]\naws_access_key_id = AKIAPROFILE00000001\naws_secret_access_key = SECRET-profile\n"
                                     "aws_session_token = TOKEN-profile\n";
    const auto explicit_creds = keys("AKIAEXPLICIT000001", "SECRET-explicit", "TOKEN-explicit");

    // Every error path, each with secrets in reach.
    std::vector<std::pair<const char*, std::function<void()>>> cases;
    cases.emplace_back("explicit id without secret", [&] {
        s3::resolve_config({.creds = keys("AKIAEXPLICIT000001", "", "TOKEN-explicit")});
    });
    cases.emplace_back("explicit secret without id", [&] { s3::resolve_config({.creds = keys("", "SECRET-explicit")}); });
    cases.emplace_back("environment secret without id", [&] {
        env_guard g;
        g.set("AWS_SECRET_ACCESS_KEY", "SECRET-env").set("AWS_SESSION_TOKEN", "TOKEN-env");
        s3::resolve_config();
    });
    cases.emplace_back("environment id without secret", [&] {
        env_guard g;
        g.set("AWS_ACCESS_KEY_ID", "AKIAENVIRONMENT0001").set("AWS_SESSION_TOKEN", "TOKEN-env");
        s3::resolve_config();
    });
    for (const char* text :
         {R"({"aws_access_key_id": "AKIAJSON0000000001", "aws_secret_access_key": "SECRET-json" "aws_session_token": "TOKEN-json"})",
          R"({"aws_access_key_id": "AKIAJSON0000000001", "aws_secret_access_key": "SECRET-json)",
          R"(["SECRET-json", "TOKEN-json"])",
          R"("SECRET-json")",
          R"({"aws_secret_access_key": "SECRET-json", "aws_session_token": "TOKEN-json"})",
          R"({"aws_access_key_id": ["AKIAJSON0000000001"], "aws_secret_access_key": "SECRET-json"})",
          R"({"aws_access_key_id": "AKIAJSON0000000001", "aws_secret_access_key": {"v": "SECRET-json"}})",
          R"({"aws_access_key_id": "A", "aws_secret_access_key": "SECRET-json", "aws_session_token": 5})",
          R"({"aws_access_key_id": "A", "aws_secret_access_key": "SECRET-json", "endpoint_url": "gopher://h"})",
          R"({"aws_access_key_id": "A", "aws_secret_access_key": "SECRET-json", "endpoint_url": "http://A:SECRET-url@h"})"}) {
        cases.emplace_back("JSON file", [&, text] {
            const auto p = sb.json_file(text, "secrets.json");
            env_guard g;
            env_with_secrets(g);
            s3::resolve_config({.credentials_file = p});
        });
    }
    cases.emplace_back("JSON file missing", [&] { s3::resolve_config({.credentials_file = sb.dir.path() + "/missing.json"}); });
    for (const char* text : {"[default]\naws_secret_access_key SECRET-profile\n",
                             "aws_secret_access_key = SECRET-profile\n",
                             "[default] SECRET-profile\n",
                             "[default]\ns3 =\n  SECRET-profile\n",
                             "[default]\n= SECRET-profile\n",
                             "[SECRET-profile\n",
                             "[default]\naws_secret_access_key = SECRET-profile\naws_session_token = TOKEN-profile\n",
                             "[default]\naws_secret_access_key = SECRET-profile\ncredential_process = SECRET-profile\n"}) {
        cases.emplace_back("shared credentials file", [&, text] {
            sb.credentials_file(text);
            s3::resolve_config();
        });
    }
    cases.emplace_back("config file with secrets, bad region", [&] {
        sb.credentials_file(good_profile);
        sb.config_file("[default]\naws_secret_access_key = SECRET-config\nregion = not a region\n");
        s3::resolve_config();
    });
    cases.emplace_back("config file with secrets, bad endpoint", [&] {
        sb.credentials_file(good_profile);
        sb.config_file("[default]\naws_secret_access_key = SECRET-config\nendpoint_url = http://x:SECRET-url@\n");
        s3::resolve_config();
    });
    cases.emplace_back("config file with secrets, bad addressing style", [&] {
        sb.credentials_file(good_profile);
        sb.config_file("[default]\naws_secret_access_key = SECRET-config\ns3 =\n  addressing_style = nope\n");
        s3::resolve_config();
    });
    cases.emplace_back("profile not found", [&] {
        sb.credentials_file(good_profile);
        env_guard g;
        g.set("AWS_PROFILE", "absent");
        s3::resolve_config({.creds = explicit_creds});
    });
    for (const char* url : {"http://AKIA:SECRET-url@minio:9000", "ftp://AKIA:SECRET-url@minio", "http://AKIA:SECRET-url with space@h",
                            "AKIA:SECRET-url@minio:9000", "http://AKIA:SECRET-url@[::1:9000"}) {
        cases.emplace_back("endpoint with user-info, from the environment", [&, url] {
            sb.credentials_file(good_profile);
            env_guard g;
            env_with_secrets(g);
            g.set("AWS_ENDPOINT_URL", url);
            s3::resolve_config();
        });
        cases.emplace_back("endpoint with user-info, from the options", [&, url] {
            s3::resolve_config({.creds = explicit_creds, .endpoint_url = url});
        });
    }
    cases.emplace_back("bad region with explicit credentials", [&] {
        s3::resolve_config({.creds = explicit_creds, .region = "bad region"});
    });
    cases.emplace_back("s3 URL with user-info", [&] { conveyor::location("s3://AKIA:SECRET-url@bucket/key"); });
    cases.emplace_back("targets", [&] {
        const auto c = s3::resolve_config({.creds = explicit_creds, .style = s3::addressing::virtual_hosted});
        s3::target_for(c, "Not_DNS", "k");
    });

    for (const auto& [name, f] : cases) {
        const std::string what_case = name; // CAPTURE cannot take a structured binding (clang)
        CAPTURE(what_case);
        // Each case writes the files it needs; none sees the last one's.
        sb.credentials_file("");
        sb.config_file("");
        check_clean(error_text(f));
    }
}

namespace {

/// True when `text` shows any `n` consecutive characters of `secret` (all of it if shorter).
bool shows_part_of(std::string_view text, std::string_view secret, std::size_t n)
{
    if (secret.size() < n) return text.find(secret) != std::string_view::npos;
    for (std::size_t i = 0; i + n <= secret.size(); ++i)
        if (text.find(secret.substr(i, n)) != std::string_view::npos) return true;
    return false;
}

/// The printable ASCII characters, in an order fixed by `seed` (Fisher-Yates over a plain
/// LCG: std::shuffle's order differs between standard libraries).
std::string printable_ascii_shuffled(std::uint64_t seed)
{
    std::string s;
    for (char c = 0x20; c < 0x7F; ++c) s += c;
    for (std::size_t i = s.size() - 1; i > 0; --i) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        std::swap(s[i], s[(seed >> 33) % (i + 1)]);
    }
    return s;
}

} // namespace

// Issue 9: resolve_config({.endpoint_url = url}) showed the secret of "user:secret@" in 12
// of 36 cases: secrets holding '#', '/', '?' or '@', and URLs with a wrong or missing
// scheme; the outer message repeated the URL verbatim. A URL's user-info can hold any
// character, so nothing between the start (after "scheme://") and the last '@' is shown.
TEST_CASE("no part of a URL's user-info reaches a message, whatever the secret holds and however the URL is malformed")
{
    aws_sandbox sb;
    conveyor_test::log_capture log;
    conveyor::runtime rt(conveyor::runtime_options{.io_threads = 1, .compute_threads = 1, .log = log.sink()});

    // Each secret with one printable character in it (twice, between markers that no
    // message holds), and all of them at once in a scrambled order; numeric ones make URLs
    // that parse ("http://AKIA:78/78@host" is host AKIA, port 78, path "/78@host").
    struct secret {
        std::string text;
        std::size_t run; // shows_part_of's n: no run this long may show
    };
    std::vector<secret> secrets;
    for (char c = 0x20; c < 0x7F; ++c) {
        secrets.push_back({std::string("Zq") + c + "Xw" + c + "Jv", 3});
        secrets.push_back({std::string("78") + c + "78", 3});
    }
    secrets.push_back({printable_ascii_shuffled(9), 4});

    const char* schemes[] = {"http://", "https://", "HTTP://", "ftp://", "s3://", "", "htp:/", "http:/", "http:",
                             "://",     "//",       "http:///", "http:\\\\", " http://", "http ://"};
    const char* hosts[] = {"@minio:9000", "@minio:9000/base", "@[::1]:9000", "@", "@minio:9000/a@b"};

    std::size_t checked = 0;
    // The sandbox's own path (a random mkdtemp name, named by messages about its files) is
    // taken out first: "conveyor-s3-config-8ZqptV" once matched the "Zqp" of a secret.
    auto check = [&](const std::string& url, const secret& s, const std::string& text) {
        ++checked;
        std::string t = text;
        for (std::size_t at; (at = t.find(sb.dir.path())) != std::string::npos;) t.erase(at, sb.dir.path().size());
        if (shows_part_of(t, s.text, s.run)) FAIL_CHECK("'" << url << "' shows part of its secret in: " << text);
    };
    for (const auto& s : secrets) {
        for (const char* scheme : schemes) {
            for (const char* host : hosts) {
                for (const std::string& userinfo : {"AKIAUSER:" + s.text, s.text}) {
                    const std::string url = scheme + userinfo + host;
                    // Each way in: the HTTP endpoint parser, the options, the environment, an
                    // s3:// URL, and a client (whose runtime would log what it says).
                    try {
                        (void)conveyor::http::parse_endpoint(url);
                        FAIL_CHECK("'" << url << "' was accepted as an endpoint");
                    } catch (const conveyor::error& e) {
                        check(url, s, e.what());
                    }
                    try {
                        check(url, s, s3::resolve_config({.endpoint_url = url}).describe());
                    } catch (const conveyor::error& e) {
                        check(url, s, e.what());
                    }
                    {
                        env_guard g;
                        g.set("AWS_ENDPOINT_URL", url);
                        try {
                            check(url, s, s3::resolve_config().describe());
                        } catch (const conveyor::error& e) {
                            check(url, s, e.what());
                        }
                    }
                    try {
                        (void)conveyor::location("s3://" + userinfo + host + "/key");
                    } catch (const conveyor::error& e) {
                        check(url, s, e.what());
                    }
                    try {
                        s3::client c(rt, {.endpoint_url = url});
                        check(url, s, c.cfg().describe());
                    } catch (const conveyor::error& e) {
                        check(url, s, e.what());
                    }
                }
            }
        }
        // From the shared config file and the JSON credentials file (fewer shapes: files are slow).
        for (const char* scheme : {"http://", ""}) {
            const std::string url = scheme + ("AKIAUSER:" + s.text) + "@minio:9000";
            sb.config_file("[default]\nendpoint_url = " + url + "\n");
            try {
                check(url, s, s3::resolve_config().describe());
            } catch (const conveyor::error& e) {
                check(url, s, e.what());
            }
            sb.config_file("");
            const auto json = sb.json_file(R"({"aws_access_key_id": "A", "aws_secret_access_key": "B", "endpoint_url": )" +
                                           boost::json::serialize(boost::json::string(url)) + "}");
            try {
                check(url, s, s3::resolve_config({.credentials_file = json}).describe());
            } catch (const conveyor::error& e) {
                check(url, s, e.what());
            }
        }
    }
    for (const auto& line : log.lines())
        for (const auto& s : secrets)
            if (shows_part_of(line, s.text, s.run)) FAIL_CHECK("a logged line shows part of a secret: " << line);
    CHECK(checked > 10'000);
}

// Without '@' there is no user-info, and the URL is shown whole, with what is wrong in it.
TEST_CASE("an endpoint error without user-info shows the URL and the part at fault")
{
    aws_sandbox sb;
    auto w = error_text([] { s3::resolve_config({.endpoint_url = "htp://minio:9000"}); });
    CHECK(contains(w, "options: endpoint_url 'htp://minio:9000': scheme 'htp' is not http or https"));
    w = error_text([] { s3::resolve_config({.endpoint_url = "http://minio:99999"}); });
    CHECK(contains(w, "endpoint_url 'http://minio:99999':"));
    // With one, the parts are not quoted: they could be pieces of a secret.
    w = error_text([] { s3::resolve_config({.endpoint_url = "http://AKIA:99999/x@minio:9000"}); });
    CHECK(contains(w, "endpoint_url 'http://***@minio:9000':"));
    CHECK_FALSE(contains(w, "99999"));
    w = error_text([] { conveyor::http::parse_endpoint("AKIA:secret@minio"); });
    CHECK(contains(w, "***@minio"));
    CHECK_FALSE(contains(w, "AKIA"));
}

TEST_CASE("secrets never appear in describe() of any credentials source")
{
    aws_sandbox sb;
    auto check_clean = [](const s3::config& c) {
        const auto d = c.describe();
        CAPTURE(d);
        CHECK_FALSE(contains(d, "SECRET"));
        CHECK_FALSE(contains(d, "TOKEN"));
    };
    check_clean(s3::resolve_config({.creds = keys("AKIAEXPLICIT000001", "SECRET-explicit", "TOKEN-explicit")}));
    const auto json = sb.json_file(
        R"({"aws_access_key_id": "AKIAJSON0000000001", "aws_secret_access_key": "SECRET-json", "aws_session_token": "TOKEN-json"})");
    check_clean(s3::resolve_config({.credentials_file = json}));
    sb.credentials_file("[default]\naws_access_key_id = AKIAPROFILE00000001\naws_secret_access_key = SECRET-profile\n"
                        "aws_session_token = TOKEN-profile\n");
    check_clean(s3::resolve_config());
    sb.env.set("AWS_ACCESS_KEY_ID", "AKIAENVIRONMENT0001").set("AWS_SECRET_ACCESS_KEY", "SECRET-env");
    sb.env.set("AWS_SESSION_TOKEN", "TOKEN-env");
    check_clean(s3::resolve_config());
    check_clean(s3::resolve_config({.anonymous = true}));
}

// ---------------------------------------------------------------------------------------
// Index files of object keys (s3::read_index, in s3/source.hpp, shares its entry rule with
// the file module's read_index).

// Issue 9: keys holding a NUL or a control character were accepted, and would have been
// repeated raw in every later message about them.
TEST_CASE("s3 read_index refuses keys with a NUL or a control character, empty keys and keys longer than S3 allows")
{
    aws_sandbox sb;
    struct bad {
        std::string json;
        std::string shows;
    };
    const std::string long_key = "K" + std::string(1024, 'k');
    for (const bad& b : {
             bad{R"(["a.jpg", "b\u0000/../../../etc/passwd.jpg"])", "entry 1 \"b\\x00/../../../etc/passwd.jpg\" holds a NUL"},
             bad{R"(["a.jpg", "b.jpg", "x\ny\u001b[2J.jpg"])", "entry 2 \"x\\ny\\x1B[2J.jpg\" holds a control character"},
             bad{R"(["a.jpg", ""])", "entry 1 is empty"},
             bad{"[\"a.jpg\", \"" + long_key + "\"]", "entry 1 \"Kkkk"},
         }) {
        CAPTURE(b.json);
        const auto path = sb.json_file(b.json, "index.json");
        std::error_code code;
        const auto w = error_text([&] { (void)s3::read_index("bucket", path); }, &code);
        CHECK(code == std::errc::invalid_argument);
        CHECK(contains(w, path));
        CHECK(contains(w, b.shows));
        CHECK(std::strlen(w.c_str()) == w.size());
        CHECK(w.size() < 1000);
    }
    // What S3 allows, spaces, '..', '\\' and UTF-8 included, is kept as written.
    const std::string longest = std::string(1024, 'k');
    const auto path = sb.json_file("[\"a b/../c\\\\d #?.jpg\", \"caf\\u00e9\", \"/lead\", \"" + longest + "\"]", "index.json");
    const auto l = s3::read_index("bucket", path, "pre/");
    REQUIRE(l.size() == 4);
    CHECK(l.objects[0].key == "pre/a b/../c\\d #?.jpg");
    CHECK(l.objects[1].key == "pre/caf\xC3\xA9");
    CHECK(l.objects[2].key == "pre//lead");
}
