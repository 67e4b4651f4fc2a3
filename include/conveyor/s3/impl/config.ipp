// conveyor/s3/impl/config.ipp — definitions for conveyor/s3/config.hpp: the credentials
// chain, the shared AWS files' INI dialect, the JSON credentials file, addressing and
// percent-encoding.
#ifndef CONVEYOR_S3_IMPL_CONFIG_IPP
#define CONVEYOR_S3_IMPL_CONFIG_IPP

#include <conveyor/s3/config.hpp>

#include <conveyor/core/error.hpp>
#include <conveyor/core/detail/ascii.hpp>

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

/** Reads the whole of `path` into `out`. False when it does not exist; throws when it
    exists but cannot be read (a directory, no permission). `what` names it in errors. */
CONVEYOR_DECL bool read_text_file(const std::string& path, std::string& out, const char* what)
{
    namespace fs = std::filesystem;
    std::error_code ec;
    const auto st = fs::status(path, ec);
    if (st.type() == fs::file_type::not_found) return false;
    if (ec) throw_config_error(ec, path, std::string("cannot read the ") + what);
    if (fs::is_directory(st))
        throw_config_error(std::make_error_code(std::errc::is_a_directory), path,
                           std::string("the ") + what + " is a directory");
    errno = 0;
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw_config_error(std::error_code(errno ? errno : EIO, std::system_category()), path,
                           std::string("cannot open the ") + what);
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad())
        throw_config_error(std::error_code(EIO, std::system_category()), path, std::string("cannot read the ") + what);
    out = std::move(text).str();
    return true;
}

// ---------------------------------------------------------------------------------------
// The INI dialect of ~/.aws/credentials and ~/.aws/config (as botocore and the SDKs read
// it): `[section]` headers; `key = value` properties (keys without regard to case);
// whole-line comments starting with '#' or ';', also indented; inline comments where '#'
// or ';' follows whitespace; a property with an empty value opens a sub-section whose
// indented `key = value` lines are stored as "parent.key" (`s3 =` / `  endpoint_url = ...`);
// other indented lines continue the previous value (a value conveyor reads must not have
// any: see profile_source::get). Any other line without '=' is an error naming the line,
// as in botocore. Repeated sections merge and a repeated key keeps its last value.
// Boost.PropertyTree's ini_parser is not used: it flattens sub-sections into their
// profile, and fails on two sub-sections with the same key or a repeated section, all of
// which real files have.

struct ini_entry {
    std::string value;
    int line = 0;
    int continued = 0; ///< the first indented line joined to the value, or 0
};

struct ini_section {
    std::map<std::string, ini_entry, std::less<>> keys;
};

struct ini_file {
    std::string path;
    bool exists = false;
    std::map<std::string, ini_section, std::less<>> sections; ///< by name as written (trimmed)
};

/// `v` (text after '=') without an inline comment, trimmed.
CONVEYOR_DECL std::string_view strip_inline_comment(std::string_view v) noexcept
{
    for (std::size_t i = 1; i < v.size(); ++i)
        if ((v[i] == '#' || v[i] == ';') && (v[i - 1] == ' ' || v[i - 1] == '\t')) {
            v = v.substr(0, i);
            break;
        }
    return trim(v);
}

/// Parses `text` read from `path`. Errors name the file and line, never the line's text
/// (it may hold a secret).
CONVEYOR_DECL ini_file parse_ini(std::string path, std::string_view text)
{
    ini_file f;
    f.path = std::move(path);
    f.exists = true;
    if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3); // a UTF-8 BOM, as Windows editors write
    auto fail = [&](int line, const char* why) { throw_invalid(f.path, "line " + std::to_string(line) + ": " + why); };

    ini_section* section = nullptr;
    std::string property;          // the last top-level key of `section`, "" before one
    bool property_opens_sub = false; // its value was empty: indented lines are sub-properties
    int line_no = 0;
    while (!text.empty()) {
        ++line_no;
        const auto nl = text.find('\n');
        std::string_view line = text.substr(0, nl);
        text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);

        const auto t = trim(line);
        if (t.empty() || t.front() == '#' || t.front() == ';') continue;
        const bool indented = line.front() == ' ' || line.front() == '\t';

        if (indented && section && !property.empty()) {
            if (property_opens_sub) {
                const auto eq = t.find('=');
                if (eq == std::string_view::npos)
                    fail(line_no, "expected 'key = value' in a sub-section (the indented lines after 'name =')");
                const auto key = lower(trim(t.substr(0, eq)));
                if (key.empty()) fail(line_no, "a sub-section property has no name before '='");
                section->keys[property + "." + key] = {std::string(strip_inline_comment(t.substr(eq + 1))), line_no};
            } else {
                // Joined as configparser does; see profile_source::get.
                auto& e = section->keys[property];
                e.value += '\n';
                e.value += strip_inline_comment(t);
                if (!e.continued) e.continued = line_no;
            }
            continue;
        }

        if (t.front() == '[') {
            const auto close = t.find(']');
            if (close == std::string_view::npos) fail(line_no, "a section header has no closing ']'");
            const auto rest = trim(t.substr(close + 1));
            if (!rest.empty() && rest.front() != '#' && rest.front() != ';')
                fail(line_no, "unexpected text after a section header");
            const auto name = trim(t.substr(1, close - 1));
            if (name.empty()) fail(line_no, "a section header has no name");
            section = &f.sections[std::string(name)];
            property.clear();
            continue;
        }

        const auto eq = t.find('=');
        if (eq == std::string_view::npos) fail(line_no, "expected a [section] header, 'key = value' or a comment");
        if (!section) fail(line_no, "a property comes before any [section] header");
        auto key = lower(trim(t.substr(0, eq)));
        if (key.empty()) fail(line_no, "a property has no name before '='");
        auto value = strip_inline_comment(t.substr(eq + 1));
        property = key;
        property_opens_sub = value.empty();
        section->keys[std::move(key)] = {std::string(value), line_no};
    }
    return f;
}

/// Reads and parses the INI file at `path`; `exists` is false (and nothing parsed) when
/// there is no such file or no path.
CONVEYOR_DECL ini_file load_ini(const std::string& path, const char* what)
{
    std::string text;
    if (path.empty() || !read_text_file(path, text, what)) {
        ini_file f;
        f.path = path;
        return f;
    }
    return parse_ini(path, text);
}

/// A value found in a profile, with where it was found (for messages).
struct profile_value {
    std::string value;
    std::string file;
    int line = 0;
    std::string where() const { return file + " line " + std::to_string(line); }
};

/** One profile of the shared credentials and config files.

    The files are read when the first value is asked for: a user who sets everything
    explicitly never depends on them. Values of the credentials file win over those of
    the config file, key by key (as botocore merges them). */
class profile_source {
public:
    explicit profile_source(const std::string& explicit_name)
    {
        if (!explicit_name.empty()) {
            name_ = explicit_name;
            named_by_ = "named in the options";
        } else if (auto p = env("AWS_PROFILE"); !p.empty()) {
            name_ = std::move(p);
            named_by_ = "named by AWS_PROFILE";
        } else {
            name_ = "default";
        }
    }

    const std::string& name() const noexcept { return name_; }

    /** The value of `key` ("region", "s3.endpoint_url"...) in the profile, if set.

        Every setting conveyor reads takes one line. An indented line after `key = value`
        continues the value (configparser's rule, which botocore follows), so a line meant
        as `key = value` that lost its '=' would silently become part of the value above
        it: a key id, a secret, a region. That is an error naming the file and the line,
        never the text (it may be a secret). */
    std::optional<profile_value> get(std::string_view key)
    {
        load();
        for (const auto& [file, section] : {std::pair{&credentials_, in_credentials_}, std::pair{&config_, in_config_}}) {
            if (!section) continue;
            auto it = section->keys.find(key);
            if (it == section->keys.end() || it->second.value.empty()) continue;
            const ini_entry& e = it->second;
            if (e.continued)
                throw_invalid(file->path, "line " + std::to_string(e.continued) + ": an indented line continues the value of " +
                                              std::string(key) + " from line " + std::to_string(e.line) +
                                              ", which conveyor reads from one line (is an '=' missing, or the line indented "
                                              "by mistake?)");
            return profile_value{e.value, file->path, e.line};
        }
        return std::nullopt;
    }

    /// "~/.aws/credentials and ~/.aws/config" as paths, saying which do not exist.
    std::string files_searched() const
    {
        auto one = [](const ini_file& f, const char* what) {
            if (f.path.empty()) return std::string("no ") + what + " (HOME is not set)";
            return f.path + (f.exists ? "" : " (does not exist)");
        };
        return one(credentials_, "shared credentials file") + " or " + one(config_, "config file");
    }

private:
    void load()
    {
        if (loaded_) return;
        loaded_ = true;
        const auto home = env("HOME");
        auto path_of = [&](const char* var, const char* fallback) {
            auto p = env(var);
            if (!p.empty()) return expand_home(std::move(p));
            return home.empty() ? std::string() : home + fallback;
        };
        credentials_ = load_ini(path_of("AWS_SHARED_CREDENTIALS_FILE", "/.aws/credentials"), "shared credentials file");
        config_ = load_ini(path_of("AWS_CONFIG_FILE", "/.aws/config"), "config file");

        if (auto it = credentials_.sections.find(name_); it != credentials_.sections.end()) in_credentials_ = &it->second;
        // The config file names profiles "[profile name]"; the default is "[default]", or
        // "[profile default]", which wins when both are there (as in the SDKs).
        for (const auto& [section_name, section] : config_.sections) {
            std::string_view n = section_name;
            if (n.starts_with("profile") && n.size() > 7 && (n[7] == ' ' || n[7] == '\t')) {
                if (trim(n.substr(7)) == name_) in_config_ = &section;
            } else if (n == "default" && name_ == "default" && !in_config_) {
                in_config_ = &section;
            }
        }
        if (!in_credentials_ && !in_config_ && !named_by_.empty())
            throw_invalid("", "profile '" + name_ + "' (" + named_by_ + ") is not in " + files_searched());
    }

    std::string name_;
    std::string named_by_; // "" for the implicit "default"
    bool loaded_ = false;
    ini_file credentials_, config_;
    const ini_section* in_credentials_ = nullptr;
    const ini_section* in_config_ = nullptr;
};

// ---------------------------------------------------------------------------------------
// The seeds' JSON credentials file.

struct json_credentials {
    credentials creds;
    std::string bucket;
    std::string endpoint_url;
};

/// "a number", "an array"...: what a JSON value is, in words (never the value itself).
CONVEYOR_DECL std::string_view json_kind_name(boost::json::kind k) noexcept
{
    switch (k) {
    case boost::json::kind::null: return "null";
    case boost::json::kind::bool_: return "a boolean";
    case boost::json::kind::int64:
    case boost::json::kind::uint64:
    case boost::json::kind::double_: return "a number";
    case boost::json::kind::string: return "a string";
    case boost::json::kind::array: return "an array";
    case boost::json::kind::object: return "an object";
    }
    return "a JSON value";
}

CONVEYOR_DECL json_credentials read_json_credentials(const std::string& path)
{
    std::string text;
    if (!read_text_file(path, text, "credentials file"))
        throw_config_error(std::make_error_code(std::errc::no_such_file_or_directory), path,
                           "the credentials file does not exist");
    boost::json::stream_parser p;
    boost::system::error_code jec;
    const std::size_t used = p.write(text.data(), text.size(), jec);
    if (!jec) p.finish(jec);
    // The parser's message and the byte offset only: never the text around it.
    if (jec) throw_invalid(path, "not valid JSON at byte " + std::to_string(used) + ": " + jec.message());
    const boost::json::value v = p.release();
    const auto* obj = v.if_object();
    if (!obj) throw_invalid(path, "the credentials file holds " + std::string(json_kind_name(v.kind())) + ", not a JSON object");

    auto string_at = [&](std::string_view key, bool required) -> std::string {
        const auto* x = obj->if_contains(key);
        if (!x || (!required && x->is_null())) {
            if (required) throw_invalid(path, "the credentials file has no \"" + std::string(key) + "\"");
            return {};
        }
        if (!x->is_string())
            throw_invalid(path, "\"" + std::string(key) + "\" is " + std::string(json_kind_name(x->kind())) + ", not a string");
        if (required && x->get_string().empty()) throw_invalid(path, "\"" + std::string(key) + "\" is empty");
        return std::string(x->get_string());
    };
    json_credentials j;
    j.creds.access_key_id = string_at("aws_access_key_id", true);
    j.creds.secret_access_key = string_at("aws_secret_access_key", true);
    j.creds.session_token = string_at("aws_session_token", false);
    j.creds.source = "credentials file " + path;
    j.bucket = string_at("bucket_name", false);
    j.endpoint_url = string_at("endpoint_url", false);
    return j;
}

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
    for (const char* key : {"credential_process", "role_arn", "sso_session", "sso_start_url", "web_identity_token_file"})
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
    return s + ", " + creds.describe();
}

CONVEYOR_DECL config resolve_config(const config_options& o)
{
    config c;
    detail::profile_source profile(o.profile);

    std::optional<detail::json_credentials> json;
    if (!o.credentials_file.empty()) json = detail::read_json_credentials(o.credentials_file);
    if (json) c.default_bucket = json->bucket;

    // Credentials.
    if (o.creds) c.creds = detail::checked_explicit(*o.creds);
    else if (o.anonymous) c.creds.source = "requested";
    else if (json) c.creds = json->creds;
    else if (auto e = detail::environment_credentials()) c.creds = std::move(*e);
    else c.creds = detail::profile_credentials(profile);

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
