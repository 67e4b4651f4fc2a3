// conveyor/s3/impl/execute.ipp — the S3 request executor: signing, sending, retrying
// with backoff, and the errors of a request given up.
#ifndef CONVEYOR_S3_IMPL_EXECUTE_IPP
#define CONVEYOR_S3_IMPL_EXECUTE_IPP

#include <conveyor/s3/client.hpp>
#include <conveyor/s3/detail/client_state.hpp>
#include <conveyor/s3/detail/xml.hpp>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>

namespace conveyor::s3 {
namespace detail {

CONVEYOR_DECL std::uint64_t jitter_draw(std::uint64_t bound_ms)
{
    thread_local std::minstd_rand gen{std::random_device{}()};
    if (bound_ms == 0) return 0;
    return std::uniform_int_distribution<std::uint64_t>(0, bound_ms)(gen);
}

/// The error codes with which S3 and other AWS services say "slow down".
CONVEYOR_DECL bool is_throttling_code(std::string_view code) noexcept
{
    for (std::string_view c : {"SlowDown", "Throttling", "ThrottlingException", "ThrottledException", "RequestThrottled",
                               "RequestThrottledException", "TooManyRequestsException", "RequestLimitExceeded",
                               "BandwidthLimitExceeded", "ProvisionedThroughputExceededException", "SlowDownRead", "SlowDownWrite"})
        if (code == c) return true;
    return false;
}

/// The error codes with which AWS services refuse a request signed at a time too far from
/// theirs (the AWS SDKs' list of clock skew errors).
CONVEYOR_DECL bool is_clock_skew_code(std::string_view code) noexcept
{
    for (std::string_view c : {"RequestTimeTooSkewed", "RequestExpired", "RequestInTheFuture", "InvalidSignatureException",
                               "SignatureDoesNotMatch", "AuthFailure"})
        if (code == c) return true;
    return false;
}

CONVEYOR_DECL std::optional<std::chrono::system_clock::time_point> parse_http_date(std::string_view v)
{
    // IMF-fixdate (RFC 9110): "Sun, 06 Nov 1994 08:49:37 GMT", the form servers must send.
    static constexpr std::string_view months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    if (v.size() != 29 || v[3] != ',' || v.substr(25) != " GMT") return std::nullopt;
    auto num = [&](std::size_t at, std::size_t n, int& out) {
        out = 0;
        for (std::size_t i = at; i < at + n; ++i) {
            if (v[i] < '0' || v[i] > '9') return false;
            out = out * 10 + (v[i] - '0');
        }
        return true;
    };
    int day, year, hh, mm, ss;
    if (!num(5, 2, day) || !num(12, 4, year) || !num(17, 2, hh) || !num(20, 2, mm) || !num(23, 2, ss)) return std::nullopt;
    if (v[16] != ' ' || v[19] != ':' || v[22] != ':') return std::nullopt;
    unsigned month = 0;
    while (month < 12 && months[month] != v.substr(8, 3)) ++month;
    if (month == 12 || hh > 23 || mm > 59 || ss > 60) return std::nullopt;
    const std::chrono::year_month_day ymd{std::chrono::year(year), std::chrono::month(month + 1), std::chrono::day(static_cast<unsigned>(day))};
    if (!ymd.ok()) return std::nullopt;
    return std::chrono::sys_days(ymd) + std::chrono::hours(hh) + std::chrono::minutes(mm) + std::chrono::seconds(ss);
}

CONVEYOR_DECL std::chrono::system_clock::time_point client_state::now() const noexcept
{
    return std::chrono::system_clock::now() + std::chrono::milliseconds(clock_offset_ms.load(std::memory_order_relaxed));
}

CONVEYOR_DECL bool client_state::correct_clock(std::string_view date) noexcept
{
    const auto server = parse_http_date(date);
    if (!server) return false;
    const auto local = std::chrono::system_clock::now();
    const auto offset = std::chrono::duration_cast<std::chrono::milliseconds>(*server - local).count();
    const auto before = clock_offset_ms.load(std::memory_order_relaxed);
    // A reply's Date has whole seconds, and a refusal for a skew of less than a few minutes
    // is no clock's fault: the SDKs correct only a larger difference.
    if (std::llabs(offset - before) < std::chrono::duration_cast<std::chrono::milliseconds>(clock_skew_threshold).count()) return false;
    clock_offset_ms.store(offset, std::memory_order_relaxed);
    clock_corrections.fetch_add(1, std::memory_order_relaxed);
    return true;
}

CONVEYOR_DECL request_error client_state::error_for(const op& o, std::error_code ec, reply_error reply, unsigned attempts, std::string detail) const
{
    return request_error(ec, {.stage = "s3", .key = std::string(o.key), .where = object_uri(cfg, o.bucket, o.key), .offset = -1,
                              .detail = std::string(o.name) + ": " + detail},
                         std::move(reply), attempts);
}

CONVEYOR_DECL request_error client_state::failure(const op& o, std::error_code ec, reply_error reply, unsigned attempts, std::string detail) const
{
    if (attempts > 1) detail += " (after " + std::to_string(attempts) + " attempts)";
    return error_for(o, ec, std::move(reply), attempts, std::move(detail));
}

CONVEYOR_DECL request_error client_state::given_up(const op& o, const request_target& t, std::error_code ec, reply_error reply, unsigned attempts,
                       const std::string& what, std::chrono::steady_clock::time_point started, std::string_view then) const
{
    char took[32];
    std::snprintf(took, sizeof took, "%.1f s", std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    std::string d = reply.status != 0 ? what : "request to " + t.endpoint.url() + " failed: " + what;
    if (attempts > 1) d += " after " + std::to_string(attempts) + " attempts, " + took + " in all";
    else if (reply.status == 0) d += std::string(" after ") + took;
    d += then;
    return error_for(o, ec, std::move(reply), attempts, std::move(d));
}

/// What one attempt of a request came to, when it did not succeed: whether to try again,
/// and what to say if not.
struct attempt_outcome {
    bool retry = false;
    reply_error reply;
    std::error_code code;
    std::string detail;
};

/// The request of one attempt of `o`, before signing.
inline http::request attempt_request(const op& o, const request_target& t, const std::string& target,
                                     std::chrono::steady_clock::time_point deadline)
{
    http::request req;
    req.method = o.method;
    req.target = target;
    req.headers.set(boost::beast::http::field::host, t.host);
    for (const auto& [f, v] : o.headers) req.headers.set(f, v);
    for (const auto& [name, v] : o.named_headers) req.headers.set(name, v);
    req.body = o.body;
    req.body_into = o.body_into;
    req.max_body = o.max_body;
    if (o.stream) {
        o.stream->before_attempt(req.headers);
        req.body_to = o.stream;
    }
    req.deadline = deadline;
    return req;
}

/// How the send limit should count a reply: throttled (503, 429, a throttling code),
/// healthy (below 500) or another failure.
inline send_limit::outcome limit_outcome(const http::response& resp)
{
    const bool throttling = resp.status == 503 || resp.status == 429 ||
                            (resp.status >= 400 && is_throttling_code(std::string_view(resp.headers["x-amz-error-code"])));
    return throttling ? send_limit::outcome::throttled : resp.status < 500 ? send_limit::outcome::healthy : send_limit::outcome::other;
}

/// An error reply (not 2xx) to an attempt of `o`: parsed, counted, and judged retryable,
/// with the clock corrected for a skew refusal and a resumed body's 416 started over.
inline attempt_outcome judge_reply(client_state& st, const op& o, const http::response& resp, limit_place& held, unsigned& restarts)
{
    attempt_outcome a;
    std::string_view text = o.body_into.empty() ? resp.body.view()
                                                : std::string_view(reinterpret_cast<const char*>(o.body_into.data()),
                                                                   std::min(resp.body_size, o.body_into.size()));
    a.reply = parse_error_reply(resp.status, text, std::string_view(resp.headers["x-amz-request-id"]));
    if (a.reply.code.empty() && resp.status == 404 && o.method == boost::beast::http::verb::head) a.reply.code = "NoSuchKey";
    if (is_throttling_code(a.reply.code)) held.o = send_limit::outcome::throttled;
    if (held.o == send_limit::outcome::throttled) st.throttled.fetch_add(1, std::memory_order_relaxed);
    a.retry = a.reply.retryable();
    a.code = a.reply.to_error_code();
    a.detail = a.reply.describe();
    // Signed at a time the server refuses (this machine's clock is off): the offset from the
    // reply's Date is kept for every later request of this client, and this one is signed
    // again with it, as the AWS SDKs do.
    if (!a.retry && is_clock_skew_code(a.reply.code) &&
        st.correct_clock(std::string_view(resp.headers[boost::beast::http::field::date]))) {
        a.retry = true;
        a.detail += " (the clock was corrected by the reply's Date: " + std::to_string(st.clock_offset_ms.load() / 1000) + " s)";
    }
    // A resumed body answered 416: the reply it resumed announced more bytes than the object
    // has. Started over from its first byte, when the sink can.
    if (!a.retry && resp.status == 416 && o.stream && restarts < 2 && o.stream->restart()) {
        ++restarts;
        a.retry = true;
        a.detail += " (resuming a body whose reply announced more bytes than the object has: read again from its start)";
    }
    st.status_errors.fetch_add(1, std::memory_order_relaxed);
    return a;
}

/// A transport failure of an attempt of `o` (no reply): counted, and judged retryable
/// (a transient error, within the budget of timed-out attempts, before the call's deadline).
inline attempt_outcome judge_failure(client_state& st, const op& o, std::error_code ec, unsigned& timed_out, bool& last_timed_out)
{
    const auto& limits = st.opts.http.timeouts;
    attempt_outcome a;
    a.retry = http::is_transient(ec);
    a.code = ec;
    const std::string timeout = http::timeout_name(ec, limits);
    a.detail = timeout.empty() ? ec.message() : timeout;
    if (ec == http::errc::body_too_large && o.body_into.empty()) {
        a.detail += " (";
        if (o.max_body != std::numeric_limits<std::uint64_t>::max())
            a.detail += "a " + std::string(o.name) + " reply is held up to " + std::to_string(o.max_body) + " bytes, ";
        a.detail += "an error reply up to " + std::to_string(http::detail::max_error_body_bytes) + " bytes)";
    }
    // The call's own deadline passed: no attempt is left. Other timeouts have their own,
    // smaller budget of attempts.
    if (!timeout.empty()) st.timeouts.fetch_add(1, std::memory_order_relaxed);
    else if (ec == http::errc::body_truncated) st.short_bodies.fetch_add(1, std::memory_order_relaxed);
    else st.connection_errors.fetch_add(1, std::memory_order_relaxed);
    if (ec == http::errc::total_timeout) a.retry = false;
    else if (!timeout.empty() && ++timed_out >= st.opts.retry.max_timeouts && st.opts.retry.max_timeouts > 0) a.retry = false;
    last_timed_out = !timeout.empty();
    return a;
}

CONVEYOR_DECL asio::awaitable<http::response> client_state::execute(const op& o)
{
    const request_target t = target_for(cfg, o.bucket, o.key);
    http::client& pool = pool_for(t.endpoint);
    std::string target = t.path;
    if (!o.query.empty()) {
        target += '?';
        target += o.query;
    }
    const std::string_view payload = o.payload_hash.empty() ? unsigned_payload : std::string_view(o.payload_hash);
    const auto& r = opts.retry;
    const auto& limits = opts.http.timeouts;
    const auto started = std::chrono::steady_clock::now();
    // The total timeout bounds the whole request: every attempt and the backoff between
    // them (each send gets the same deadline).
    const auto deadline = limits.total.count() > 0 ? started + limits.total : std::chrono::steady_clock::time_point::max();
    unsigned timed_out = 0;
    unsigned restarts = 0; // bodies started over after a 416 to a resumed attempt (bounded: a server may keep lying)
    unsigned series = 0; // attempts before the current series (a streamed body's progress starts a new one)
    unsigned quota_taken = 0; // what the last retry took from the retry quota
    bool last_timed_out = false;
    const std::shared_ptr<send_limit> limit = limit_for(t.endpoint, o.bucket);
    for (unsigned attempt = 1;; ++attempt) {
        http::request req = attempt_request(o, t, target, deadline);
        // The credentials valid now: each attempt is signed afresh, so a retry after a
        // refresh goes with the new ones.
        const std::shared_ptr<const signer> sign = co_await creds->async_signer();
        sign->sign(o.method, target, req.headers, payload, now());
        requests.fetch_add(1, std::memory_order_relaxed);
        if (attempt > 1) retries.fetch_add(1, std::memory_order_relaxed);
        // A place in flight for this endpoint and bucket, given back with the outcome.
        if (limit) co_await limit->acquire();
        limit_place held{limit.get()};
        auto [ec, resp] = co_await pool.async_send(req);
        if (!ec) held.o = limit_outcome(resp);
        if (ec == std::errc::operation_canceled)
            throw boost::system::system_error(asio::error::operation_aborted);
        if (!ec && resp.status >= 200 && resp.status < 300) {
            quota.on_success(quota_taken);
            bytes_in.fetch_add(resp.body_size, std::memory_order_relaxed);
            bytes_out.fetch_add(o.body.size(), std::memory_order_relaxed);
            co_return std::move(resp);
        }
        attempt_outcome a = ec ? judge_failure(*this, o, ec, timed_out, last_timed_out) : judge_reply(*this, o, resp, held, restarts);
        held.done(); // not held through the backoff
        if (o.stream && o.stream->took_progress()) { // the body got further: a new series of attempts
            series = attempt - 1;
            timed_out = 0;
        }
        if (!a.retry || attempt - series >= r.max_attempts) throw given_up(o, t, a.code, std::move(a.reply), attempt, a.detail, started);
        // The retry quota: spent by an endpoint that keeps failing, refilled by successes.
        quota_taken = quota.take(last_timed_out);
        if (quota_taken == 0) {
            retries_refused.fetch_add(1, std::memory_order_relaxed);
            throw given_up(o, t, a.code, std::move(a.reply), attempt, a.detail, started,
                           "; no retry: the client's retry quota is spent (its requests keep failing)");
        }
        const auto exp = std::min<std::uint64_t>(attempt - series - 1, 30);
        const std::uint64_t bound = std::min<std::uint64_t>(static_cast<std::uint64_t>(r.max_delay.count()),
                                                            static_cast<std::uint64_t>(r.base_delay.count()) << exp);
        const auto pause = std::chrono::milliseconds(jitter_draw(bound));
        if (std::chrono::steady_clock::now() + pause >= deadline) {
            // The next attempt would start past the deadline: say so now, not then.
            const auto total = make_error_code(http::errc::total_timeout);
            throw given_up(o, t, total, std::move(a.reply), attempt, a.detail, started,
                           "; the next attempt would start past the " + http::timeout_name(total, limits));
        }
        asio::steady_timer timer(co_await asio::this_coro::executor, pause);
        co_await timer.async_wait(asio::use_awaitable);
    }
}

} // namespace detail
} // namespace conveyor::s3

#endif
