// conveyor/s3/detail/impl/credentials_cache.ipp — definitions for
// conveyor/s3/detail/credentials_cache.hpp.
#ifndef CONVEYOR_S3_DETAIL_IMPL_CREDENTIALS_CACHE_IPP
#define CONVEYOR_S3_DETAIL_IMPL_CREDENTIALS_CACHE_IPP

#include <conveyor/core/error.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/s3/detail/credentials_cache.hpp>
#include <conveyor/s3/error.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>

namespace conveyor::s3::detail {

CONVEYOR_DECL credentials_cache::credentials_cache(runtime& rt, credentials static_creds, std::string region,
                                                   std::shared_ptr<credentials_provider> provider, refresh_windows w)
    : rt_(rt), region_(std::move(region)), provider_(std::move(provider)), windows_(w)
{
    if (!provider_) current_ = std::make_shared<const signer>(std::move(static_creds), region_);
}

CONVEYOR_DECL asio::awaitable<std::shared_ptr<const signer>> credentials_cache::async_signer()
{
    // Credentials this close to their expiration count as expired: the request may take
    // that long to reach the server.
    constexpr auto margin = std::chrono::seconds(1);
    const auto ex = co_await asio::this_coro::executor;
    for (;;) {
        bool fetch_here = false;
        {
            std::unique_lock lk(mu_);
            if (!provider_ || (current_ && !expires_)) co_return current_; // static, or they do not expire
            const auto now = std::chrono::system_clock::now();
            const auto steady = std::chrono::steady_clock::now();
            const bool valid = current_ && now + margin < *expires_;
            const auto left = valid ? *expires_ - now : std::chrono::system_clock::duration::zero();
            if (valid && left > advisory_) co_return current_;
            if (valid && left > mandatory_) {
                // The advisory window: one refresh in the background, the current ones meanwhile.
                if (!fetching_ && steady >= retry_after_) {
                    fetching_ = true;
                    asio::co_spawn(ex, [self = shared_from_this()]() { return self->fetch(); }, asio::detached);
                }
                co_return current_;
            }
            if (!fetching_) {
                if (steady < retry_after_) {
                    // A fetch failed a moment ago: the still-valid ones go on until the next
                    // try; with none, the failure is this request's too.
                    if (valid) co_return current_;
                    std::rethrow_exception(last_error_);
                }
                fetching_ = true;
                fetch_here = true;
            } else if (valid) {
                co_return current_; // another request is fetching; these are still good
            }
        }
        if (fetch_here) {
            co_await fetch();
            continue;
        }
        // Another request is fetching and nothing valid is at hand: wait for it.
        asio::steady_timer t(ex, std::chrono::milliseconds(5));
        co_await t.async_wait(asio::use_awaitable);
    }
}

CONVEYOR_DECL asio::awaitable<void> credentials_cache::fetch()
{
    const std::string name = provider_->name();
    try {
        std::optional<timed_credentials> got = co_await provider_->async_fetch(rt_);
        const auto now = std::chrono::system_clock::now();
        if (got && got->expiration && *got->expiration <= now + std::chrono::seconds(1))
            throw conveyor::error(make_error_code(errc::credentials_failed),
                                  {.stage = "credentials", .where = name, .detail = "the credentials it gave have already expired"});
        std::shared_ptr<const signer> s;
        if (got) {
            s = std::make_shared<const signer>(std::move(got->creds), region_);
        } else {
            credentials none;
            none.source = "no credentials found in the options, the environment, the profiles or the " + name;
            s = std::make_shared<const signer>(std::move(none), region_);
        }
        std::lock_guard lk(mu_);
        current_ = std::move(s);
        expires_ = got ? got->expiration : std::nullopt;
        if (expires_) {
            // The SDKs' windows, or shares of the lifetime for credentials that live shorter.
            const auto life = std::chrono::duration_cast<std::chrono::seconds>(*expires_ - now);
            if (life < 4 * windows_.advisory) {
                advisory_ = life / 2;
                mandatory_ = life / 4;
            } else {
                advisory_ = windows_.advisory;
                mandatory_ = windows_.mandatory;
            }
        }
        fetching_ = false;
        last_error_ = nullptr;
        retry_after_ = {};
        ++counts_.fetches;
    } catch (...) {
        std::string what = "unknown error";
        try {
            throw;
        } catch (const std::exception& e) {
            what = e.what();
        } catch (...) {
        }
        std::lock_guard lk(mu_);
        fetching_ = false;
        last_error_ = std::current_exception();
        auto pause = std::chrono::seconds(30);
        if (expires_ && current_) {
            const auto life = std::chrono::duration_cast<std::chrono::seconds>(advisory_ * 2);
            pause = std::clamp<std::chrono::seconds>(life / 10, std::chrono::seconds(1), std::chrono::seconds(30));
        }
        retry_after_ = std::chrono::steady_clock::now() + pause;
        ++counts_.failures;
        const bool still_valid = current_ && expires_ && std::chrono::system_clock::now() < *expires_;
        rt_.log_once("s3-credentials:" + name, "s3: fetching credentials failed: " + what +
                                                   (still_valid ? "; the current ones stay in use until they expire" : ""));
    }
}

CONVEYOR_DECL credentials_cache::counters credentials_cache::stats() const
{
    std::lock_guard lk(mu_);
    return counts_;
}

} // namespace conveyor::s3::detail

#endif
