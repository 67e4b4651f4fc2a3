// conveyor/s3/impl/provider.ipp — definitions for conveyor/s3/provider.hpp.
#ifndef CONVEYOR_S3_IMPL_PROVIDER_IPP
#define CONVEYOR_S3_IMPL_PROVIDER_IPP

#include <conveyor/core/error.hpp>
#include <conveyor/core/location.hpp>
#include <conveyor/http/client.hpp>
#include <conveyor/http/endpoint.hpp>
#include <conveyor/core/detail/offload.hpp>
#include <conveyor/core/detail/read_file.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/s3/config.hpp> // encode_query: STS's form bodies are percent-encoded as S3's query values
#include <conveyor/s3/error.hpp>
#include <conveyor/s3/provider.hpp>
#include <conveyor/s3/sigv4.hpp>

#include <boost/asio/this_coro.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <boost/property_tree/ptree.hpp>
#include <boost/property_tree/xml_parser.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iterator>
#include <sstream>
#include <utility>
#include <vector>

extern char** environ;

namespace conveyor::s3 {

CONVEYOR_DECL std::optional<std::chrono::system_clock::time_point> parse_iso8601(std::string_view t) noexcept
{
    // YYYY-MM-DDTHH:MM:SS[.fff...](Z|+00:00)
    auto digits = [&](std::size_t at, std::size_t n, int& out) {
        if (at + n > t.size()) return false;
        out = 0;
        for (std::size_t i = at; i < at + n; ++i) {
            if (t[i] < '0' || t[i] > '9') return false;
            out = out * 10 + (t[i] - '0');
        }
        return true;
    };
    int y, mo, d, h, mi, s;
    if (!digits(0, 4, y) || t.size() < 19 || t[4] != '-' || !digits(5, 2, mo) || t[7] != '-' || !digits(8, 2, d) ||
        (t[10] != 'T' && t[10] != 't' && t[10] != ' ') || !digits(11, 2, h) || t[13] != ':' || !digits(14, 2, mi) || t[16] != ':' ||
        !digits(17, 2, s))
        return std::nullopt;
    std::size_t at = 19;
    if (at < t.size() && t[at] == '.') {
        ++at;
        const std::size_t from = at;
        while (at < t.size() && t[at] >= '0' && t[at] <= '9') ++at;
        if (at == from) return std::nullopt;
    }
    const std::string_view zone = t.substr(at);
    if (zone != "Z" && zone != "z" && zone != "+00:00" && zone != "-00:00" && zone != "+0000") return std::nullopt;
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60) return std::nullopt;
    const std::chrono::year_month_day ymd{std::chrono::year{y}, std::chrono::month{static_cast<unsigned>(mo)},
                                          std::chrono::day{static_cast<unsigned>(d)}};
    if (!ymd.ok()) return std::nullopt;
    return std::chrono::sys_days(ymd) + std::chrono::hours(h) + std::chrono::minutes(mi) + std::chrono::seconds(s);
}

namespace detail {

[[noreturn]] inline void throw_credentials(const std::string& provider, const std::string& what,
                                           std::error_code ec = make_error_code(errc::credentials_failed))
{
    throw conveyor::error(ec, {.stage = "credentials", .where = provider, .detail = what});
}

/// One request to a credentials service: `attempts` tries, each within `timeout`, again
/// after transport failures and 5xx. The last reply or transport error is returned.
inline asio::awaitable<std::pair<std::error_code, http::response>> credentials_request(runtime& rt, const http::endpoint& ep,
                                                                                       http::request req,
                                                                                       std::chrono::milliseconds timeout,
                                                                                       unsigned attempts)
{
    http::client_options co;
    co.max_connections = 1;
    co.timeouts.connect = timeout;
    co.timeouts.first_byte = timeout;
    co.timeouts.idle = timeout;
    co.timeouts.attempt = timeout;
    co.user_agent = "conveyor";
    http::client c(rt, ep, co);
    // Credentials, a token, a role name or STS's XML: a few kilobytes.
    req.max_body = std::uint64_t{1} << 20;
    std::pair<std::error_code, http::response> last;
    for (unsigned a = 1; a <= std::max(1u, attempts); ++a) {
        last = co_await c.async_send(req);
        if (!last.first && last.second.status < 500) break;
        if (last.first && !http::is_transient(last.first)) break;
    }
    co_return last;
}

inline std::string body_text(const http::response& r)
{
    return std::string(r.body.view());
}

/// A string member of a JSON object, or "".
inline std::string json_string(const boost::json::object& o, std::string_view key)
{
    const auto* v = o.if_contains(key);
    return v && v->is_string() ? std::string(v->as_string()) : std::string();
}

/// Credentials from the JSON of the metadata service or the container endpoint.
inline timed_credentials credentials_from_json(const std::string& provider, std::string_view body, std::string source)
{
    boost::system::error_code ec;
    const boost::json::value v = boost::json::parse(body, ec);
    if (ec || !v.is_object())
        throw_credentials(provider, "the reply is not a JSON object (" + std::to_string(body.size()) + " bytes" +
                                        (ec ? ": " + ec.message() : std::string()) + ")",
                          make_error_code(errc::bad_reply));
    const auto& o = v.as_object();
    if (const std::string code = json_string(o, "Code"); !code.empty() && code != "Success")
        throw_credentials(provider, "the service says " + code + ": " + json_string(o, "Message"));
    timed_credentials t;
    t.creds.access_key_id = json_string(o, "AccessKeyId");
    t.creds.secret_access_key = json_string(o, "SecretAccessKey");
    t.creds.session_token = json_string(o, "Token");
    t.creds.source = std::move(source);
    if (t.creds.access_key_id.empty() || t.creds.secret_access_key.empty())
        throw_credentials(provider, "the reply has no AccessKeyId and SecretAccessKey", make_error_code(errc::bad_reply));
    if (const std::string e = json_string(o, "Expiration"); !e.empty()) {
        t.expiration = parse_iso8601(e);
        if (!t.expiration) throw_credentials(provider, "its Expiration '" + e + "' is not an ISO 8601 time", make_error_code(errc::bad_reply));
    }
    return t;
}

/// "Not found" and "no such service" differ from "it failed": a reply's status, for messages.
inline std::string status_text(const http::response& r)
{
    std::string body = body_text(r);
    // A short, printable excerpt only: services answer errors in JSON or XML, proxies in HTML.
    if (body.size() > 200) body = body.substr(0, 200) + "...";
    for (char& ch : body)
        if (static_cast<unsigned char>(ch) < 0x20 || static_cast<unsigned char>(ch) >= 0x7f) ch = ' ';
    return "HTTP " + std::to_string(r.status) + (body.empty() ? std::string() : ": " + body);
}

inline std::string read_token_file(const std::string& provider, const std::string& path, const char* what)
{
    // A token is a few kilobytes (a JWT, an authorization header's value).
    auto f = conveyor::detail::read_whole_file(path, std::uint64_t{1} << 20, "conveyor's limit for token files");
    if (f.ec) throw_credentials(provider, std::string(what) + " " + path + " cannot be read: " + f.why, f.ec);
    std::string s = std::move(f.text);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.erase(s.begin());
    if (s.empty()) throw_credentials(provider, std::string(what) + " " + path + " is empty");
    return s;
}

class imds_provider final : public credentials_provider {
public:
    explicit imds_provider(instance_metadata_options o) : o_(std::move(o)) {}

    std::string name() const override { return "EC2 instance metadata at " + o_.endpoint.url(); }

    asio::awaitable<std::optional<timed_credentials>> async_fetch(runtime& rt) override
    {
        const std::string me = name();
        // The session token, kept for its life (renewed a minute early).
        const auto now = std::chrono::steady_clock::now();
        if (token_.empty() || now + std::chrono::minutes(1) >= token_until_) {
            token_.clear();
            http::request put;
            put.method = boost::beast::http::verb::put;
            put.target = o_.endpoint.base_path + "/latest/api/token";
            put.headers.set("X-aws-ec2-metadata-token-ttl-seconds", "21600");
            auto [ec, r] = co_await credentials_request(rt, o_.endpoint, put, o_.timeout, o_.attempts);
            if (ec) co_return std::nullopt; // nothing answers: not an EC2 instance (or no route to it)
            if (r.status == 200) {
                token_ = body_text(r);
                token_until_ = now + std::chrono::hours(6);
            } else if ((r.status == 403 || r.status == 404 || r.status == 405) && o_.allow_v1) {
                // An IMDSv1-only service: requests go without a token.
            } else {
                throw_credentials(me, "the session token request was answered " + status_text(r) +
                                          (o_.allow_v1 ? std::string() : " (IMDSv1 is disabled by AWS_EC2_METADATA_V1_DISABLED)"));
            }
        }
        auto get = [&](std::string path) -> asio::awaitable<http::response> {
            http::request g;
            g.method = boost::beast::http::verb::get;
            g.target = o_.endpoint.base_path + path;
            if (!token_.empty()) g.headers.set("X-aws-ec2-metadata-token", token_);
            auto [ec, r] = co_await credentials_request(rt, o_.endpoint, g, o_.timeout, o_.attempts);
            if (ec) throw_credentials(me, "GET " + path + ": " + ec.message(), ec);
            if (r.status == 401) token_.clear(); // the token is no longer good: a new one next time
            co_return std::move(r);
        };
        const std::string base = "/latest/meta-data/iam/security-credentials/";
        http::response roles = co_await get(base);
        if (roles.status == 404) co_return std::nullopt; // an instance without a role: no credentials here
        if (roles.status != 200) throw_credentials(me, "the role name request was answered " + status_text(roles));
        std::string role = body_text(roles);
        if (const auto nl = role.find_first_of("\r\n"); nl != std::string::npos) role.resize(nl);
        if (role.empty() || role.find_first_of("/?# ") != std::string::npos)
            throw_credentials(me, "the role name it gave is not one", make_error_code(errc::bad_reply));
        http::response creds = co_await get(base + role);
        if (creds.status != 200) throw_credentials(me, "the credentials request for role " + role + " was answered " + status_text(creds));
        co_return credentials_from_json(me, creds.body.view(), "instance profile " + role + " (" + me + ")");
    }

private:
    instance_metadata_options o_;
    std::string token_;
    std::chrono::steady_clock::time_point token_until_{};
};

/// Hosts a container credentials URL may name over plain HTTP.
inline bool container_host_allowed(const std::string& host)
{
    if (host == "169.254.170.2" || host == "169.254.170.23" || host == "fd00:ec2::23" || host == "[fd00:ec2::23]") return true;
    if (host == "localhost" || host == "::1" || host == "[::1]") return true;
    return host.starts_with("127.") && host.find_first_not_of("0123456789.") == std::string::npos;
}

class container_provider_impl final : public credentials_provider {
public:
    explicit container_provider_impl(container_options o) : o_(std::move(o))
    {
        // The endpoint and the path: the URL's path (and query) is the request target.
        const location where(o_.url, location_kind::http);
        ep_ = http::endpoint_of(where);
        target_ = where.target();
        if (!ep_.tls && !container_host_allowed(ep_.host))
            throw conveyor::error(std::make_error_code(std::errc::invalid_argument),
                                  {.stage = "credentials",
                                   .where = ep_.url(),
                                   .detail = "AWS_CONTAINER_CREDENTIALS_FULL_URI over http must name a loopback address or "
                                             "169.254.170.2, 169.254.170.23 or fd00:ec2::23 (use https for other hosts)"});
    }

    std::string name() const override { return "container credentials at " + ep_.url() + target_; }

    asio::awaitable<std::optional<timed_credentials>> async_fetch(runtime& rt) override
    {
        const std::string me = name();
        http::request g;
        g.method = boost::beast::http::verb::get;
        g.target = target_;
        std::string token = !o_.token_file.empty() ? read_token_file(me, o_.token_file, "the authorization token file") : o_.token;
        if (token.find_first_of("\r\n") != std::string::npos) throw_credentials(me, "the authorization token holds a line break");
        if (!token.empty()) g.headers.set(boost::beast::http::field::authorization, token);
        auto [ec, r] = co_await credentials_request(rt, ep_, g, o_.timeout, o_.attempts);
        if (ec) throw_credentials(me, ec.message(), ec);
        if (r.status != 200) throw_credentials(me, "answered " + status_text(r));
        co_return credentials_from_json(me, r.body.view(), me);
    }

private:
    container_options o_;
    http::endpoint ep_;
    std::string target_;
};

/// An XML document of STS's; throws `errc::bad_reply` naming the provider when it is not one.
inline boost::property_tree::ptree sts_xml(const std::string& provider, std::string_view body)
{
    boost::property_tree::ptree doc;
    try {
        std::istringstream in{std::string(body)};
        boost::property_tree::read_xml(in, doc, boost::property_tree::xml_parser::trim_whitespace);
    } catch (const std::exception&) {
        throw_credentials(provider, "STS's reply is not well-formed XML (" + std::to_string(body.size()) + " bytes)",
                          make_error_code(errc::bad_reply));
    }
    return doc;
}

/// The credentials of an STS reply to `action` (AssumeRole, AssumeRoleWithWebIdentity), or
/// STS's refusal as an error naming the provider.
inline timed_credentials sts_credentials(const std::string& me, const http::response& r, const std::string& action)
{
    const std::string_view text = r.body.view();
    if (r.status != 200) {
        std::string why = status_text(r);
        try {
            const auto doc = sts_xml(me, text);
            if (auto code = doc.get_optional<std::string>("ErrorResponse.Error.Code"))
                why = "STS refused: " + *code + ": " + doc.get<std::string>("ErrorResponse.Error.Message", "");
        } catch (const std::exception&) {
            // Not STS's XML (a proxy's page): the status and an excerpt say enough.
        }
        throw_credentials(me, why);
    }
    const boost::property_tree::ptree doc = sts_xml(me, text);
    const auto* c = doc.get_child_optional(action + "Response." + action + "Result.Credentials").get_ptr();
    if (!c) throw_credentials(me, "STS's reply has no Credentials", make_error_code(errc::bad_reply));
    timed_credentials t;
    t.creds.access_key_id = c->get<std::string>("AccessKeyId", "");
    t.creds.secret_access_key = c->get<std::string>("SecretAccessKey", "");
    t.creds.session_token = c->get<std::string>("SessionToken", "");
    t.creds.source = me;
    if (t.creds.access_key_id.empty() || t.creds.secret_access_key.empty())
        throw_credentials(me, "STS's Credentials have no AccessKeyId and SecretAccessKey", make_error_code(errc::bad_reply));
    const std::string e = c->get<std::string>("Expiration", "");
    t.expiration = parse_iso8601(e);
    if (!t.expiration) throw_credentials(me, "STS's Expiration '" + e + "' is not an ISO 8601 time", make_error_code(errc::bad_reply));
    return t;
}

/// "conveyor-" and the time in milliseconds: a session name when none is set.
inline std::string default_session_name()
{
    return "conveyor-" +
           std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

class web_identity_provider_impl final : public credentials_provider {
public:
    explicit web_identity_provider_impl(web_identity_options o) : o_(std::move(o))
    {
        if (o_.session_name.empty()) o_.session_name = default_session_name();
    }

    std::string name() const override { return "web identity (role " + o_.role_arn + ", STS at " + o_.sts.url() + ")"; }

    asio::awaitable<std::optional<timed_credentials>> async_fetch(runtime& rt) override
    {
        const std::string me = name();
        const std::string token = read_token_file(me, o_.token_file, "the web identity token file");
        std::string body = "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=" + encode_query(o_.role_arn) +
                           "&RoleSessionName=" + encode_query(o_.session_name) + "&WebIdentityToken=" + encode_query(token);
        http::request p;
        p.method = boost::beast::http::verb::post;
        p.target = o_.sts.base_path.empty() ? "/" : o_.sts.base_path + "/";
        p.headers.set(boost::beast::http::field::content_type, "application/x-www-form-urlencoded; charset=utf-8");
        p.headers.set(boost::beast::http::field::accept, "application/xml");
        p.body = std::as_bytes(std::span(body.data(), body.size()));
        auto [ec, r] = co_await credentials_request(rt, o_.sts, p, o_.timeout, o_.attempts);
        if (ec) throw_credentials(me, ec.message(), ec);
        co_return sts_credentials(me, r, "AssumeRoleWithWebIdentity");
    }

private:
    web_identity_options o_;
};

class assume_role_provider_impl final : public credentials_provider {
public:
    assume_role_provider_impl(assume_role_options o, credentials source_creds, std::shared_ptr<credentials_provider> source)
        : o_(std::move(o)), static_(std::move(source_creds)), source_(std::move(source))
    {
        if (o_.session_name.empty()) o_.session_name = default_session_name();
    }

    std::string name() const override
    {
        return "assume role (role " + o_.role_arn + ", STS at " + o_.sts.url() + ", with " +
               (source_ ? "credentials from the " + source_->name() : static_.describe()) + ")";
    }

    asio::awaitable<std::optional<timed_credentials>> async_fetch(runtime& rt) override
    {
        const std::string me = name();
        credentials from = static_;
        if (source_) {
            std::optional<timed_credentials> s = co_await source_->async_fetch(rt);
            if (!s) throw_credentials(me, "its source, the " + source_->name() + ", has no credentials");
            from = std::move(s->creds);
        }
        if (from.anonymous()) throw_credentials(me, "it has no source credentials to sign the AssumeRole request with");
        std::string body = "Action=AssumeRole&Version=2011-06-15&RoleArn=" + encode_query(o_.role_arn) +
                           "&RoleSessionName=" + encode_query(o_.session_name);
        if (!o_.external_id.empty()) body += "&ExternalId=" + encode_query(o_.external_id);
        if (o_.duration.count() > 0) body += "&DurationSeconds=" + std::to_string(o_.duration.count());
        http::request p;
        p.method = boost::beast::http::verb::post;
        p.target = o_.sts.base_path.empty() ? "/" : o_.sts.base_path + "/";
        p.headers.set(boost::beast::http::field::host, o_.sts.host_header());
        p.headers.set(boost::beast::http::field::content_type, "application/x-www-form-urlencoded; charset=utf-8");
        p.body = std::as_bytes(std::span(body.data(), body.size()));
        const signer sign(std::move(from), o_.region, "sts");
        sign.sign(p.method, p.target, p.headers, sha256_hex(std::string_view(body)));
        auto [ec, r] = co_await credentials_request(rt, o_.sts, p, o_.timeout, o_.attempts);
        if (ec) throw_credentials(me, ec.message(), ec);
        co_return sts_credentials(me, r, "AssumeRole");
    }

private:
    assume_role_options o_;
    credentials static_;
    std::shared_ptr<credentials_provider> source_;
};

/** A command line split as a POSIX shell splits words: blanks separate them; '...' keeps
    everything; "..." keeps everything but \", \\, \$ and \` escapes; \ outside quotes
    escapes the next character. nullopt for an unterminated quote. */
inline std::optional<std::vector<std::string>> split_command(std::string_view cmd)
{
    std::vector<std::string> words;
    std::string w;
    bool in_word = false;
    for (std::size_t i = 0; i < cmd.size(); ++i) {
        const char ch = cmd[i];
        if (ch == ' ' || ch == '\t' || ch == '\n') {
            if (in_word) words.push_back(std::exchange(w, {}));
            in_word = false;
        } else if (ch == '\'') {
            const auto end = cmd.find('\'', i + 1);
            if (end == std::string_view::npos) return std::nullopt;
            w.append(cmd.substr(i + 1, end - i - 1));
            i = end;
            in_word = true;
        } else if (ch == '"') {
            std::size_t j = i + 1;
            for (; j < cmd.size() && cmd[j] != '"'; ++j) {
                if (cmd[j] == '\\' && j + 1 < cmd.size() && std::string_view("\"\\$`").find(cmd[j + 1]) != std::string_view::npos) ++j;
                w += cmd[j];
            }
            if (j >= cmd.size()) return std::nullopt;
            i = j;
            in_word = true;
        } else if (ch == '\\' && i + 1 < cmd.size()) {
            w += cmd[++i];
            in_word = true;
        } else {
            w += ch;
            in_word = true;
        }
    }
    if (in_word) words.push_back(std::move(w));
    return words;
}

/// What a finished process left: its exit status (-1: killed or not started) and output.
struct process_result {
    int status = -1;
    std::string out, err;
    std::string failure; ///< why it could not run, or was stopped
};

/// Runs `argv` (looked up in PATH) without a shell, stdin from /dev/null; stops it after `timeout`.
CONVEYOR_DECL process_result run_process(const std::vector<std::string>& argv, std::chrono::milliseconds timeout);

class process_provider_impl final : public credentials_provider {
public:
    explicit process_provider_impl(process_options o) : o_(std::move(o)) {}

    std::string name() const override
    {
        const auto words = split_command(o_.command);
        const std::string program = words && !words->empty() ? words->front() : std::string("?");
        return "credential_process of profile " + o_.profile + " (" + program + ")";
    }

    asio::awaitable<std::optional<timed_credentials>> async_fetch(runtime& rt) override
    {
        const std::string me = name();
        const auto argv = split_command(o_.command);
        if (!argv || argv->empty()) throw_credentials(me, "the command has an unterminated quote, or is empty");
        const process_result r = co_await conveyor::detail::offload(rt.blocking_executor(), [&] { return run_process(*argv, o_.timeout); });
        auto first_line = [](std::string t) {
            if (const auto nl = t.find('\n'); nl != std::string::npos) t.resize(nl);
            if (t.size() > 200) t = t.substr(0, 200) + "...";
            return t;
        };
        if (!r.failure.empty()) throw_credentials(me, r.failure);
        if (r.status != 0)
            throw_credentials(me, "it exited with status " + std::to_string(r.status) +
                                      (r.err.empty() ? std::string() : ": " + first_line(r.err)));
        boost::system::error_code ec;
        const boost::json::value v = boost::json::parse(r.out, ec);
        if (ec || !v.is_object()) throw_credentials(me, "it did not print a JSON object", make_error_code(errc::bad_reply));
        const auto& o = v.as_object();
        const auto* version = o.if_contains("Version");
        if (!version || !version->is_int64() || version->as_int64() != 1)
            throw_credentials(me, "its JSON has no \"Version\": 1", make_error_code(errc::bad_reply));
        timed_credentials t;
        t.creds.access_key_id = json_string(o, "AccessKeyId");
        t.creds.secret_access_key = json_string(o, "SecretAccessKey");
        t.creds.session_token = json_string(o, "SessionToken");
        t.creds.source = me;
        if (t.creds.access_key_id.empty() || t.creds.secret_access_key.empty())
            throw_credentials(me, "its JSON has no AccessKeyId and SecretAccessKey", make_error_code(errc::bad_reply));
        if (const std::string e = json_string(o, "Expiration"); !e.empty()) {
            t.expiration = parse_iso8601(e);
            if (!t.expiration) throw_credentials(me, "its Expiration '" + e + "' is not an ISO 8601 time", make_error_code(errc::bad_reply));
        }
        co_return t;
    }

private:
    process_options o_;
};

CONVEYOR_DECL process_result run_process(const std::vector<std::string>& argv, std::chrono::milliseconds timeout)
{
    process_result res;
    int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
    if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
        res.failure = std::string("pipe: ") + std::strerror(errno);
        for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]})
            if (fd >= 0) ::close(fd);
        return res;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t pid = -1;
    const int rc = ::posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    if (rc != 0) {
        res.failure = "it could not be started: " + std::string(std::strerror(rc));
        ::close(out_pipe[0]);
        ::close(err_pipe[0]);
        return res;
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
    int open_fds = 2;
    bool killed = false;
    char buf[4096];
    while (open_fds > 0) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
        if (left <= 0) {
            ::kill(pid, SIGKILL);
            killed = true;
            break;
        }
        const int n = ::poll(fds, 2, static_cast<int>(std::min<long long>(left, 1000)));
        if (n < 0 && errno != EINTR) break;
        for (int k = 0; k < 2; ++k) {
            if (fds[k].fd < 0 || !(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            const ssize_t got = ::read(fds[k].fd, buf, sizeof buf);
            if (got > 0) {
                std::string& into = k == 0 ? res.out : res.err;
                if (into.size() < (1u << 20)) into.append(buf, static_cast<std::size_t>(got));
            } else if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) {
                ::close(fds[k].fd);
                fds[k].fd = -1;
                --open_fds;
            }
        }
    }
    for (auto& f : fds)
        if (f.fd >= 0) ::close(f.fd);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (killed) res.failure = "it was stopped after " + std::to_string(timeout.count() / 1000) + " s without finishing";
    else if (WIFEXITED(status)) res.status = WEXITSTATUS(status);
    else res.failure = "it ended by signal " + std::to_string(WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return res;
}

} // namespace detail

CONVEYOR_DECL std::shared_ptr<credentials_provider> instance_metadata_provider(instance_metadata_options o)
{
    return std::make_shared<detail::imds_provider>(std::move(o));
}

CONVEYOR_DECL std::shared_ptr<credentials_provider> container_provider(container_options o)
{
    return std::make_shared<detail::container_provider_impl>(std::move(o));
}

CONVEYOR_DECL std::shared_ptr<credentials_provider> web_identity_provider(web_identity_options o)
{
    return std::make_shared<detail::web_identity_provider_impl>(std::move(o));
}

CONVEYOR_DECL std::shared_ptr<credentials_provider> assume_role_provider(assume_role_options o, credentials source_creds,
                                                                         std::shared_ptr<credentials_provider> source)
{
    return std::make_shared<detail::assume_role_provider_impl>(std::move(o), std::move(source_creds), std::move(source));
}

CONVEYOR_DECL std::shared_ptr<credentials_provider> process_provider(process_options o)
{
    return std::make_shared<detail::process_provider_impl>(std::move(o));
}

} // namespace conveyor::s3

#endif
