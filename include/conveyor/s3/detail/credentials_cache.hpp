// conveyor/s3/detail/credentials_cache.hpp — the signer a client's requests use now: static
// credentials, or a provider's temporary ones, fetched on first use and again before they
// expire (internal: the S3 client's; definitions in detail/impl/credentials_cache.ipp).
#ifndef CONVEYOR_S3_DETAIL_CREDENTIALS_CACHE_HPP
#define CONVEYOR_S3_DETAIL_CREDENTIALS_CACHE_HPP

#include <conveyor/detail/config.hpp>

#include <conveyor/s3/provider.hpp>
#include <conveyor/s3/sigv4.hpp>

#include <boost/asio/awaitable.hpp>

#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace conveyor::s3::detail {

/** Hands out the signer for the credentials valid now.

    Without a provider it is the static credentials' signer. With one, the first request
    fetches (concurrent ones wait for that fetch); later, inside the advisory window
    (`refresh_windows`), one request starts a refresh in the background and every request
    goes on with the current credentials; inside the mandatory window a request fetches
    before it is signed. A request is never signed with credentials past their expiration:
    if no fetch brings valid ones, it fails with the provider's error. A failed refresh
    leaves the still-valid credentials in use, is logged once, and is tried again after a
    pause (a tenth of the credentials' lifetime, at most 30 s), so a failing service is not
    asked on every request.

    @par Thread Safety
    Safe: `async_signer` may be awaited from any of the runtime's I/O threads at once.
*/
class credentials_cache : public std::enable_shared_from_this<credentials_cache> {
public:
    CONVEYOR_DECL credentials_cache(runtime& rt, credentials static_creds, std::string region,
                                    std::shared_ptr<credentials_provider> provider, refresh_windows w = {});

    /// The signer to sign a request with now; throws the provider's error when no valid
    /// credentials can be had.
    CONVEYOR_DECL asio::awaitable<std::shared_ptr<const signer>> async_signer();

    struct counters {
        std::uint64_t fetches = 0;  ///< successful fetches
        std::uint64_t failures = 0; ///< failed ones
    };
    CONVEYOR_DECL counters stats() const;

private:
    CONVEYOR_DECL asio::awaitable<void> fetch();

    runtime& rt_;
    std::string region_;
    std::shared_ptr<credentials_provider> provider_;
    refresh_windows windows_;
    mutable std::mutex mu_;
    std::shared_ptr<const signer> current_;
    std::optional<std::chrono::system_clock::time_point> expires_;
    std::chrono::seconds advisory_{0}, mandatory_{0};
    bool fetching_ = false;
    std::chrono::steady_clock::time_point retry_after_{};
    std::exception_ptr last_error_;
    counters counts_;
};

} // namespace conveyor::s3::detail

#if CONVEYOR_HEADER_ONLY
#include <conveyor/s3/detail/impl/credentials_cache.ipp>
#endif

#endif
