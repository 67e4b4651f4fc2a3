// conveyor/s3/impl/config.ipp — definitions for conveyor/s3/config.hpp: the credentials
// chain, addressing and percent-encoding. The files the chain reads (the shared AWS files'
// INI dialect, the JSON credentials file) are read by s3/detail/impl/config_files.ipp.
#ifndef CONVEYOR_S3_IMPL_CONFIG_IPP
#define CONVEYOR_S3_IMPL_CONFIG_IPP

#include <conveyor/s3/config.hpp>
#include <conveyor/s3/provider.hpp>

#include <conveyor/core/error.hpp>
#include <conveyor/core/detail/ascii.hpp>
#include <conveyor/core/detail/read_file.hpp>

#include <boost/json/kind.hpp>
#include <boost/json/stream_parser.hpp>
#include <boost/json/value.hpp>
#include <boost/url/encode.hpp>
#include <boost/url/grammar/lut_chars.hpp>
#include <boost/url/rfc/unreserved_chars.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

namespace conveyor::s3::detail {
// The ASCII case helpers are core's (conveyor::detail); the s3 code names them as its own.
using conveyor::detail::ascii_lower;
using conveyor::detail::iequals;
using conveyor::detail::iless;
} // namespace conveyor::s3::detail

namespace conveyor::s3 {
namespace detail {

// ---------------------------------------------------------------------------------------
// Errors. Messages name files, lines, variables and keys, never values read from a file
// or a variable that could hold a secret.

[[noreturn]] CONVEYOR_DECL void throw_config_error(std::error_code ec, std::string where, std::string detail)
{
    throw conveyor::error(ec, {.stage = "s3", .key = "", .where = std::move(where), .offset = -1, .detail = std::move(detail)});
}

[[noreturn]] CONVEYOR_DECL void throw_invalid(std::string where, std::string detail)
{
    throw_config_error(std::make_error_code(std::errc::invalid_argument), std::move(where), std::move(detail));
}

// ---------------------------------------------------------------------------------------
// Small text helpers.

CONVEYOR_DECL bool is_space(char c) noexcept { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

CONVEYOR_DECL std::string_view trim(std::string_view s) noexcept
{
    while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
    return s;
}

CONVEYOR_DECL std::string lower(std::string_view s)
{
    std::string out(s);
    for (auto& c : out) c = ascii_lower(c);
    return out;
}

/// The environment variable `name`; "" when unset (empty counts as unset, as in the SDKs).
CONVEYOR_DECL std::string env(const char* name)
{
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
}

/// "~/x" → "$HOME/x", as the SDKs do for the file variables.
CONVEYOR_DECL std::string expand_home(std::string p)
{
    if (p == "~" || p.starts_with("~/")) {
        const auto home = env("HOME");
        if (!home.empty()) p = home + p.substr(1);
    }
    return p;
}

/// The largest AWS configuration or credentials file read (they hold a few profiles).
inline constexpr std::uint64_t max_config_file_bytes = std::uint64_t{16} << 20;

/** Reads the whole of `path` into `out`. False when it does not exist; throws when it
    exists but cannot be read (a directory, no permission, more than
    `max_config_file_bytes`). `what` names it in errors. */
CONVEYOR_DECL bool read_text_file(const std::string& path, std::string& out, const char* what)
{
    auto f = conveyor::detail::read_whole_file(path, max_config_file_bytes, "conveyor's limit for AWS configuration files");
    if (f.ec == std::errc::no_such_file_or_directory || f.ec == std::errc::not_a_directory) return false;
    if (f.ec == std::errc::is_a_directory)
        throw_config_error(f.ec, path, std::string("the ") + what + " is a directory");
    if (f.ec) throw_config_error(f.ec, path, std::string("cannot read the ") + what + ": " + f.why);
    out = std::move(f.text);
    return true;
}

#include <conveyor/s3/detail/impl/config_files.ipp> // the shared files' INI dialect, the JSON credentials file

// ---------------------------------------------------------------------------------------
// The chain's other steps.

/// Explicit credentials must be a whole pair, or nothing (anonymous).
CONVEYOR_DECL credentials checked_explicit(credentials c)
{
    if (c.access_key_id.empty() != c.secret_access_key.empty())
        throw_invalid("", c.access_key_id.empty() ? "explicit credentials have a secret access key but no access key id"
                                                  : "explicit credentials have an access key id but no secret access key");
    if (c.source.empty()) c.source = "explicit credentials";
    return c;
}

CONVEYOR_DECL std::optional<credentials> environment_credentials()
{
    credentials c;
    c.access_key_id = env("AWS_ACCESS_KEY_ID");
    c.secret_access_key = env("AWS_SECRET_ACCESS_KEY");
    if (c.access_key_id.empty() && c.secret_access_key.empty()) return std::nullopt;
    if (c.access_key_id.empty()) throw_invalid("environment", "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not");
    if (c.secret_access_key.empty()) throw_invalid("environment", "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not");
    c.session_token = env("AWS_SESSION_TOKEN");
    c.source = "environment";
    return c;
}

CONVEYOR_DECL credentials profile_credentials(profile_source& p)
{
    auto id = p.get("aws_access_key_id");
    auto secret = p.get("aws_secret_access_key");
    if (id && secret) {
        credentials c;
        c.access_key_id = std::move(id->value);
        c.secret_access_key = std::move(secret->value);
        if (auto token = p.get("aws_session_token")) c.session_token = std::move(token->value);
        else if (auto legacy = p.get("aws_security_token")) c.session_token = std::move(legacy->value);
        c.source = "profile " + p.name() + " in " + id->file;
        return c;
    }
    if (id) throw_invalid(id->file, "line " + std::to_string(id->line) + ": profile '" + p.name() +
                                        "' has aws_access_key_id but no aws_secret_access_key");
    if (secret) throw_invalid(secret->file, "line " + std::to_string(secret->line) + ": profile '" + p.name() +
                                                "' has aws_secret_access_key but no aws_access_key_id");
    // Profiles that get credentials some other way would silently turn into anonymous
    // requests (and 403s) if skipped: say so instead.
    for (const char* key : {"sso_session", "sso_start_url", "sso_account_id"})
        if (auto v = p.get(key))
            throw_config_error(std::make_error_code(std::errc::operation_not_supported), v->file,
                               "line " + std::to_string(v->line) + ": profile '" + p.name() + "' gets credentials from " + key +
                                   ", which conveyor does not support; give static keys (e.g. from `aws configure "
                                   "export-credentials --profile " + p.name() + " --format env`)");
    credentials c;
    c.source = "no credentials found in the options, the environment or profile " + p.name();
    return c;
}

CONVEYOR_DECL void check_region(const std::string& region, const std::string& where)
{
    // The region goes into host names and the signature's scope.
    const bool ok = !region.empty() && region.size() <= 64 && region.find_first_not_of(
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == std::string::npos;
    if (!ok) throw_invalid(where, "region '" + region + "' is not a region name (letters, digits, '-', '_' and '.')");
}

/// Parses an endpoint URL; an error names where it came from, and the URL as
/// `http::parse_endpoint` shows it (without anything that could be user-info).
CONVEYOR_DECL http::endpoint checked_endpoint(const std::string& url, const std::string& where, const std::string& prefix)
{
    try {
        return http::parse_endpoint(url);
    } catch (const conveyor::error& e) {
        throw conveyor::error(e.code(), {.stage = "s3", .key = "", .where = where, .offset = -1,
                                         .detail = prefix + "endpoint_url '" + e.where() + "': " + e.ctx().detail});
    }
}

CONVEYOR_DECL bool is_aws_host(std::string_view host)
{
    const auto h = lower(host);
    for (std::string_view suffix : {"amazonaws.com", "amazonaws.com.cn"})
        if (h == suffix || (h.size() > suffix.size() && h.ends_with(suffix) && h[h.size() - suffix.size() - 1] == '.'))
            return true;
    return false;
}

CONVEYOR_DECL bool is_ip_literal(std::string_view host) noexcept
{
    return host.find(':') != std::string_view::npos || host.find_first_not_of("0123456789.") == std::string_view::npos;
}

CONVEYOR_DECL bool is_bucket_name(std::string_view bucket) noexcept
{
    // S3's rules, relaxed as Ceph and old us-east-1 buckets allow (uppercase, '_', 255).
    return !bucket.empty() && bucket.size() <= 255 &&
           bucket.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") ==
               std::string_view::npos;
}

/// A name that can be the first labels of a host name (a DNS name S3 maps back to it).
CONVEYOR_DECL bool is_host_labels(std::string_view s) noexcept
{
    if (s.empty() || s.size() > 63 * 4) return false;
    std::size_t start = 0;
    while (true) {
        const auto dot = s.find('.', start);
        const auto label = s.substr(start, dot == std::string_view::npos ? s.npos : dot - start);
        if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-' ||
            label.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") != std::string_view::npos)
            return false;
        if (dot == std::string_view::npos) return true;
        start = dot + 1;
    }
}

// S3 encodes every byte but the unreserved ones (and '/' in paths), %XX in uppercase.
inline constexpr boost::urls::grammar::lut_chars path_chars = boost::urls::unreserved_chars + boost::urls::grammar::lut_chars('/');

/// "true", any case: the SDKs' spelling of a boolean setting.
inline bool env_true(const char* name)
{
    std::string v = env(name);
    for (char& ch : v) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return v == "true";
}

/// Where STS requests go: the SDKs' endpoint settings, else AWS's regional endpoint.
CONVEYOR_DECL http::endpoint sts_endpoint(profile_source& p, const std::string& region)
{
    if (auto v = env("AWS_ENDPOINT_URL_STS"); !v.empty()) return checked_endpoint(v, "AWS_ENDPOINT_URL_STS", "");
    if (auto v = env("AWS_ENDPOINT_URL"); !v.empty()) return checked_endpoint(v, "AWS_ENDPOINT_URL", "");
    if (auto q = p.get("sts.endpoint_url")) return checked_endpoint(q->value, q->file, "line " + std::to_string(q->line) + ": ");
    if (auto q = p.get("endpoint_url")) return checked_endpoint(q->value, q->file, "line " + std::to_string(q->line) + ": ");
    std::string mode = env("AWS_STS_REGIONAL_ENDPOINTS");
    if (mode.empty())
        if (auto q = p.get("sts_regional_endpoints")) mode = q->value;
    if (mode == "legacy") return {.tls = true, .host = "sts.amazonaws.com", .port = 443, .base_path = ""};
    const char* domain = region.starts_with("cn-") ? ".amazonaws.com.cn" : ".amazonaws.com";
    return {.tls = true, .host = "sts." + region + domain, .port = 443, .base_path = ""};
}

/// Step 5: a web identity, from the environment or the profile.
CONVEYOR_DECL std::shared_ptr<credentials_provider> web_identity_from(profile_source& p, const std::string& region)
{
    web_identity_options w;
    w.token_file = env("AWS_WEB_IDENTITY_TOKEN_FILE");
    w.role_arn = env("AWS_ROLE_ARN");
    w.session_name = env("AWS_ROLE_SESSION_NAME");
    if (w.token_file.empty() != w.role_arn.empty())
        throw_invalid("environment", w.token_file.empty() ? "AWS_ROLE_ARN is set but AWS_WEB_IDENTITY_TOKEN_FILE is not"
                                                          : "AWS_WEB_IDENTITY_TOKEN_FILE is set but AWS_ROLE_ARN is not");
    if (w.token_file.empty()) {
        auto file = p.get("web_identity_token_file");
        if (!file) return nullptr;
        auto role = p.get("role_arn");
        if (!role)
            throw_invalid(file->file, "line " + std::to_string(file->line) + ": profile '" + p.name() +
                                          "' has web_identity_token_file but no role_arn");
        w.token_file = file->value;
        w.role_arn = role->value;
        if (auto n = p.get("role_session_name")) w.session_name = n->value;
    }
    w.sts = sts_endpoint(p, region);
    return web_identity_provider(std::move(w));
}

/// A profile's `credential_process`, if it has one.
CONVEYOR_DECL std::shared_ptr<credentials_provider> process_from(profile_source& p)
{
    auto cmd = p.get("credential_process");
    if (!cmd) return nullptr;
    return process_provider({.command = cmd->value, .profile = p.name()});
}

CONVEYOR_DECL std::shared_ptr<credentials_provider> container_from_environment();
CONVEYOR_DECL std::shared_ptr<credentials_provider> instance_metadata_from_environment();

/** A profile's role (`role_arn` with `source_profile` or `credential_source`): STS
    `AssumeRole` signed with the source's credentials. A source profile may have a role
    itself (a chain of roles), a web identity, a credential process or static keys; a
    profile that is its own source uses its static keys. `visited` catches loops. */
CONVEYOR_DECL std::shared_ptr<credentials_provider> assume_role_from(profile_source& p, const std::string& region,
                                                                     std::vector<std::string> visited = {})
{
    auto role = p.get("role_arn");
    if (!role || p.get("web_identity_token_file")) return nullptr;
    const std::string at = "line " + std::to_string(role->line) + ": profile '" + p.name() + "'";
    auto source_profile = p.get("source_profile");
    auto credential_source = p.get("credential_source");
    if (!source_profile && !credential_source)
        throw_invalid(role->file, at + " has role_arn but neither source_profile nor credential_source");
    if (source_profile && credential_source)
        throw_invalid(role->file, at + " has both source_profile and credential_source; give one");
    if (auto mfa = p.get("mfa_serial"))
        throw_config_error(std::make_error_code(std::errc::operation_not_supported), mfa->file,
                           "line " + std::to_string(mfa->line) + ": profile '" + p.name() +
                               "' needs an MFA code (mfa_serial), which conveyor cannot ask for");
    assume_role_options o;
    o.role_arn = role->value;
    if (auto n = p.get("role_session_name")) o.session_name = n->value;
    if (auto x = p.get("external_id")) o.external_id = x->value;
    if (auto d = p.get("duration_seconds")) {
        char* end = nullptr;
        const unsigned long n = std::strtoul(d->value.c_str(), &end, 10);
        if (end == d->value.c_str() || *end || n < 900 || n > 43200)
            throw_invalid(d->file, "line " + std::to_string(d->line) + ": duration_seconds '" + d->value + "' is not 900 to 43200");
        o.duration = std::chrono::seconds(n);
    }
    std::string scope_region = region;
    if (auto r = p.get("region")) scope_region = r->value;
    o.region = scope_region;
    o.sts = sts_endpoint(p, scope_region);

    if (credential_source) {
        const std::string& what = credential_source->value;
        std::shared_ptr<credentials_provider> src;
        if (what == "Environment") {
            auto e = environment_credentials();
            if (!e) throw_invalid(credential_source->file, at + " has credential_source = Environment, but AWS_ACCESS_KEY_ID is not set");
            return assume_role_provider(std::move(o), std::move(*e));
        }
        if (what == "Ec2InstanceMetadata") src = instance_metadata_from_environment();
        else if (what == "EcsContainer") src = container_from_environment();
        else
            throw_invalid(credential_source->file, at + " has credential_source '" + what +
                                                       "', not Environment, Ec2InstanceMetadata or EcsContainer");
        if (!src)
            throw_invalid(credential_source->file, at + " has credential_source = " + what + ", but " +
                                                       (what == "EcsContainer" ? "no AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or _FULL_URI is set"
                                                                               : "AWS_EC2_METADATA_DISABLED is true"));
        return assume_role_provider(std::move(o), {}, std::move(src));
    }

    const std::string& source_name = source_profile->value;
    visited.push_back(p.name());
    if (source_name == p.name()) {
        // Its own source: its static keys sign the request.
        credentials c = profile_credentials(p);
        if (c.anonymous()) throw_invalid(source_profile->file, at + " is its own source_profile but has no static keys");
        return assume_role_provider(std::move(o), std::move(c));
    }
    if (std::find(visited.begin(), visited.end(), source_name) != visited.end()) {
        std::string chain;
        for (const auto& v : visited) chain += v + " -> ";
        throw_invalid(source_profile->file, at + ": its source profiles make a loop (" + chain + source_name + ")");
    }
    profile_source src(source_name, "named by source_profile in profile '" + p.name() + "'");
    if (auto chained = assume_role_from(src, scope_region, visited)) return assume_role_provider(std::move(o), {}, std::move(chained));
    if (auto w = web_identity_from(src, scope_region)) return assume_role_provider(std::move(o), {}, std::move(w));
    if (credentials c = profile_credentials(src); !c.anonymous()) return assume_role_provider(std::move(o), std::move(c));
    if (auto proc = process_from(src)) return assume_role_provider(std::move(o), {}, std::move(proc));
    throw_invalid(source_profile->file, at + ": its source profile '" + source_name + "' has no credentials");
}

/// Step 7: the container credentials endpoint, when the environment names one.
CONVEYOR_DECL std::shared_ptr<credentials_provider> container_from_environment()
{
    container_options c;
    if (auto rel = env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"); !rel.empty()) {
        if (rel.front() != '/') rel.insert(rel.begin(), '/');
        c.url = "http://169.254.170.2" + rel;
    } else if (auto full = env("AWS_CONTAINER_CREDENTIALS_FULL_URI"); !full.empty()) {
        c.url = std::move(full);
    } else {
        return nullptr;
    }
    c.token_file = env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
    c.token = env("AWS_CONTAINER_AUTHORIZATION_TOKEN");
    return container_provider(std::move(c));
}

/// Step 8: the instance metadata service, unless it is disabled.
CONVEYOR_DECL std::shared_ptr<credentials_provider> instance_metadata_from_environment()
{
    if (env_true("AWS_EC2_METADATA_DISABLED")) return nullptr;
    instance_metadata_options m;
    if (auto e = env("AWS_EC2_METADATA_SERVICE_ENDPOINT"); !e.empty()) m.endpoint = checked_endpoint(e, "AWS_EC2_METADATA_SERVICE_ENDPOINT", "");
    else if (env("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE") == "IPv6") m.endpoint = {.tls = false, .host = "fd00:ec2::254", .port = 80, .base_path = ""};
    if (auto t = env("AWS_METADATA_SERVICE_TIMEOUT"); !t.empty()) {
        char* end = nullptr;
        const double sec = std::strtod(t.c_str(), &end);
        if (end == t.c_str() || *end || !(sec > 0) || sec > 3600) throw_invalid("AWS_METADATA_SERVICE_TIMEOUT", "'" + t + "' is not a number of seconds");
        m.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(sec * 1000));
    }
    if (auto a = env("AWS_METADATA_SERVICE_NUM_ATTEMPTS"); !a.empty()) {
        char* end = nullptr;
        const unsigned long n = std::strtoul(a.c_str(), &end, 10);
        if (end == a.c_str() || *end || n == 0 || n > 10) throw_invalid("AWS_METADATA_SERVICE_NUM_ATTEMPTS", "'" + a + "' is not a count from 1 to 10");
        m.attempts = static_cast<unsigned>(n);
    }
    m.allow_v1 = !env_true("AWS_EC2_METADATA_V1_DISABLED");
    return instance_metadata_provider(std::move(m));
}

} // namespace detail

CONVEYOR_DECL std::string_view to_string(addressing a) noexcept
{
    switch (a) {
    case addressing::automatic: return "automatic";
    case addressing::path: return "path";
    case addressing::virtual_hosted: return "virtual-hosted";
    }
    return "unknown";
}

CONVEYOR_DECL std::string config::describe() const
{
    std::string s = "S3 endpoint " + endpoint.url() + (aws_endpoint ? " (AWS)" : " (custom)") + ", region " + region + ", ";
    switch (style) {
    case addressing::automatic:
        s += aws_endpoint ? "virtual-hosted addressing where the bucket name allows" : "path-style addressing";
        break;
    case addressing::path: s += "path-style addressing"; break;
    case addressing::virtual_hosted: s += "virtual-hosted addressing"; break;
    }
    if (!default_bucket.empty()) s += ", default bucket " + default_bucket;
    return s + ", " + (provider ? "credentials from the " + provider->name() : creds.describe());
}

CONVEYOR_DECL config resolve_config(const config_options& o)
{
    config c;
    detail::profile_source profile(o.profile);

    std::optional<detail::json_credentials> json;
    if (!o.credentials_file.empty()) json = detail::read_json_credentials(o.credentials_file);
    if (json) c.default_bucket = json->bucket;

    // Region.
    if (!o.region.empty()) {
        c.region = o.region;
        detail::check_region(c.region, "options");
    } else if (auto r = detail::env("AWS_REGION"); !r.empty()) {
        c.region = std::move(r);
        detail::check_region(c.region, "AWS_REGION");
    } else if (auto d = detail::env("AWS_DEFAULT_REGION"); !d.empty()) {
        c.region = std::move(d);
        detail::check_region(c.region, "AWS_DEFAULT_REGION");
    } else if (auto p = profile.get("region")) {
        c.region = std::move(p->value);
        detail::check_region(c.region, p->where());
    } else {
        c.region = "us-east-1";
    }

    // Credentials: static ones first, then the providers of temporary ones.
    if (o.creds) c.creds = detail::checked_explicit(*o.creds);
    else if (o.anonymous) c.creds.source = "requested";
    else if (json) c.creds = json->creds;
    else if (auto e = detail::environment_credentials()) c.creds = std::move(*e);
    else if (auto a = detail::assume_role_from(profile, c.region)) c.provider = std::move(a);
    else if (auto w = detail::web_identity_from(profile, c.region)) c.provider = std::move(w);
    else if (c.creds = detail::profile_credentials(profile); !c.creds.anonymous()) {
    } else if (auto proc = detail::process_from(profile)) c.provider = std::move(proc);
    else if (auto k = detail::container_from_environment()) c.provider = std::move(k);
    else if (auto m = detail::instance_metadata_from_environment()) c.provider = std::move(m);
    if (c.provider) c.creds = credentials{.access_key_id = {}, .secret_access_key = {}, .session_token = {},
                                          .source = "the " + c.provider->name() + ", fetched on first use"};

    // Endpoint.
    bool custom = true;
    if (!o.endpoint_url.empty()) {
        c.endpoint = detail::checked_endpoint(o.endpoint_url, "options", "");
    } else if (json && !json->endpoint_url.empty()) {
        c.endpoint = detail::checked_endpoint(json->endpoint_url, o.credentials_file, "");
    } else if (auto s3 = detail::env("AWS_ENDPOINT_URL_S3"); !s3.empty()) {
        c.endpoint = detail::checked_endpoint(s3, "AWS_ENDPOINT_URL_S3", "");
    } else if (auto all = detail::env("AWS_ENDPOINT_URL"); !all.empty()) {
        c.endpoint = detail::checked_endpoint(all, "AWS_ENDPOINT_URL", "");
    } else if (auto p = profile.get("s3.endpoint_url")) {
        c.endpoint = detail::checked_endpoint(p->value, p->file, "line " + std::to_string(p->line) + ": ");
    } else if (auto q = profile.get("endpoint_url")) {
        c.endpoint = detail::checked_endpoint(q->value, q->file, "line " + std::to_string(q->line) + ": ");
    } else {
        // AWS's China partition has its own domain.
        const char* domain = c.region.starts_with("cn-") ? ".amazonaws.com.cn" : ".amazonaws.com";
        c.endpoint = {.tls = true, .host = "s3." + c.region + domain, .port = 443, .base_path = ""};
        custom = false;
    }
    c.aws_endpoint = !custom || detail::is_aws_host(c.endpoint.host);

    // Addressing.
    c.style = o.style;
    if (c.style == addressing::automatic) {
        if (auto p = profile.get("s3.addressing_style")) {
            if (p->value == "path") c.style = addressing::path;
            else if (p->value == "virtual") c.style = addressing::virtual_hosted;
            else if (p->value != "auto")
                detail::throw_invalid(p->file, "line " + std::to_string(p->line) + ": addressing_style '" + p->value +
                                                    "' is not auto, path or virtual");
        }
    }
    return c;
}

CONVEYOR_DECL bool virtual_hostable(std::string_view bucket, bool tls) noexcept
{
    if (bucket.size() < 3 || bucket.size() > 63) return false;
    if (tls && bucket.find('.') != std::string_view::npos) return false;
    if (!detail::is_host_labels(bucket)) return false;
    // "192.168.5.4" is an address, not a name.
    return bucket.find_first_not_of("0123456789.") != std::string_view::npos;
}

CONVEYOR_DECL std::string encode_key(std::string_view key)
{
    return boost::urls::encode(key, detail::path_chars);
}

CONVEYOR_DECL std::string encode_query(std::string_view value)
{
    return boost::urls::encode(value, boost::urls::unreserved_chars);
}

CONVEYOR_DECL request_target target_for(const config& c, std::string_view bucket, std::string_view key)
{
    request_target t;
    t.endpoint = c.endpoint;
    if (bucket.empty()) {
        if (!key.empty()) detail::throw_invalid("s3:///" + std::string(key), "an object key needs a bucket");
        t.host = t.endpoint.host_header();
        t.path = c.endpoint.base_path + "/";
        return t;
    }
    if (!detail::is_bucket_name(bucket))
        detail::throw_invalid(conveyor::detail::redact_userinfo(object_uri(c, bucket, key)),
                              "not a bucket name (letters, digits, '.', '-' and '_')");
    const bool virtual_hosted =
        c.style == addressing::virtual_hosted ||
        (c.style == addressing::automatic && c.aws_endpoint && virtual_hostable(bucket, c.endpoint.tls));
    if (virtual_hosted) {
        if (!detail::is_host_labels(bucket))
            detail::throw_invalid(object_uri(c, bucket, key),
                                  "virtual-hosted addressing needs a bucket name that is a host name (lowercase letters, "
                                  "digits, '-' and '.'); use path-style addressing");
        if (detail::is_ip_literal(c.endpoint.host))
            detail::throw_invalid(c.endpoint.url(), "virtual-hosted addressing needs an endpoint with a host name, not an "
                                                    "IP address; use path-style addressing");
        t.endpoint.host = std::string(bucket) + "." + c.endpoint.host;
        t.path = c.endpoint.base_path + "/" + encode_key(key);
    } else {
        t.path = c.endpoint.base_path + "/" + encode_key(bucket);
        if (!key.empty()) t.path += "/" + encode_key(key);
    }
    t.host = t.endpoint.host_header();
    return t;
}

CONVEYOR_DECL std::string object_uri(const config& /*c*/, std::string_view bucket, std::string_view key)
{
    return "s3://" + std::string(bucket) + "/" + std::string(key);
}

} // namespace conveyor::s3

#endif
