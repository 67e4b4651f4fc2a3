// conveyor/s3/detail/client_state.hpp — what an S3 client shares between its copies: the
// configuration, the signer, the connection pools and the counters, and the request
// executor, transfers and listings built on them. Only impl/*.ipp files include it: it
// brings in the HTTP client (Beast) and the signer. It uses the client's plain values
// (s3/types.hpp), never the client's header: in header-only mode that header includes
// the .ipp files, which include this one.
#ifndef CONVEYOR_S3_DETAIL_CLIENT_STATE_HPP
#define CONVEYOR_S3_DETAIL_CLIENT_STATE_HPP

#include <conveyor/detail/config.hpp>

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/checksum.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/http/client.hpp>
#include <conveyor/http/detail/chunk_stream.hpp>
#include <conveyor/s3/config.hpp>
#include <conveyor/s3/detail/credentials_cache.hpp>
#include <conveyor/s3/detail/throttle.hpp>
#include <conveyor/s3/error.hpp>
#include <conveyor/s3/sigv4.hpp>
#include <conveyor/s3/types.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/verb.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

namespace conveyor::s3::detail {

/// A uniformly random number of milliseconds in [0, bound_ms] (the backoff's full jitter).
CONVEYOR_DECL std::uint64_t jitter_draw(std::uint64_t bound_ms);

/// Whether an error code says "slow down" (SlowDown, Throttling, TooManyRequestsException...).
CONVEYOR_DECL bool is_throttling_code(std::string_view code) noexcept;

/// Whether an error code may mean "signed at a time too far from the server's"
/// (RequestTimeTooSkewed, RequestExpired, SignatureDoesNotMatch...).
CONVEYOR_DECL bool is_clock_skew_code(std::string_view code) noexcept;

/// An HTTP `Date` field (IMF-fixdate), or nullopt when it is not one.
CONVEYOR_DECL std::optional<std::chrono::system_clock::time_point> parse_http_date(std::string_view v);

/// The smallest difference between a server's clock and the client's that a clock skew
/// error corrects (the AWS SDKs': a few minutes; a reply's Date has whole seconds).
inline constexpr std::chrono::seconds clock_skew_threshold{240};

// A whole decimal number, nothing else (no sign, no spaces).
CONVEYOR_DECL bool parse_decimal(std::string_view s, std::uint64_t& out);

// "bytes 0-8388607/1073741824" → (first, last, total); total -1 for "*".
CONVEYOR_DECL bool parse_content_range(std::string_view v, std::uint64_t& first, std::uint64_t& last, std::int64_t& total);

/** The body of a GET streamed into a sink (`op::stream`) rather than held whole. The
    executor asks it for each attempt's extra header fields, so that an attempt after a
    failure mid-body asks only for the rest (`Range: bytes=<next>-`, pinned by `If-Match`),
    and whether the failed attempt delivered bytes: one that did starts a fresh series of
    attempts (`retry_options::max_attempts` bounds failures in a row, not a large object's
    resets over its whole transfer). */
using body_stream = http::detail::resumable_sink;

/// One S3 request, before signing.
struct op {
    boost::beast::http::verb method = boost::beast::http::verb::get;
    const char* name = "GetObject";            // for messages
    std::string_view bucket;
    std::string_view key;
    std::string query;                          // encoded, without '?'
    std::vector<std::pair<boost::beast::http::field, std::string>> headers;
    std::vector<std::pair<std::string, std::string>> named_headers; // those Beast has no field for (x-amz-...)
    std::span<const std::byte> body;
    std::string payload_hash;                   // empty: UNSIGNED-PAYLOAD
    std::span<std::byte> body_into;
    body_stream* stream = nullptr;              // a 2xx body goes here, as it arrives
    std::uint64_t max_body = std::numeric_limits<std::uint64_t>::max(); // http::request::max_body
};

/// The largest reply body of a request that S3 answers with a document (a listing page of
/// up to 1,000 keys of up to 1,024 bytes each, a multipart upload's XML): ten times the
/// largest S3 sends, so that a server that sends without end is refused, not held.
inline constexpr std::uint64_t max_document_bytes = std::uint64_t{16} << 20;

struct client_state;

/// The checksum of an object as a reply's header fields give it (`x-amz-checksum-<name>`).
struct object_checksum {
    checksum_algorithm algorithm = checksum_algorithm::crc64nvme;
    std::string value;      ///< as sent (base64, with "-<parts>" when composite)
    std::string digest;     ///< the decoded bytes; empty when composite
    bool composite = false; ///< a checksum of the parts' checksums of a multipart upload
};

/** The object's checksum in the header fields `h` of a reply, if they carry one (the
    fastest to verify when there are several). `whole_range`: the reply is to a ranged
    request and holds the whole object; its checksum is taken only when
    `x-amz-checksum-type: FULL_OBJECT` says it is the whole object's (S3 sends none with a
    ranged reply; servers that do may send the object's, or a part's). A value that is not
    base64 of the algorithm's size is `errc::bad_reply`'s business: returned as composite
    (not verifiable) with its text kept for the message. */
CONVEYOR_DECL std::optional<object_checksum> checksum_in(const boost::beast::http::fields& h, bool ranged);

/// What checking an object against its checksum found.
enum class check_result { verified, mismatch, skipped, absent };

/** The way through one listing's pages (one bucket and prefix), for every lister: it
    hands each page's continuation token on to the next request, and refuses a server
    that goes round in circles. A token it sent before for this listing (the same one
    again, or an older one: the listing would never end), on a truncated page with or
    without objects, is an error the first time it comes back. */
class listing_cursor {
public:
    listing_cursor(std::string_view bucket, std::string_view prefix) : bucket_(bucket), prefix_(prefix) {}

    /** After `page`, the answer to `lo`: puts its continuation token into `lo` and returns
        true when there is a next page to ask for, false when `page` was the last.
        @throws request_error (`errc::bad_reply`) naming the bucket, the prefix and the
        token when the token is one that was sent before. */
    CONVEYOR_DECL bool next(const client_state& s, list_page& page, list_options& lo);

private:
    std::string bucket_, prefix_;
    std::unordered_set<std::string> sent_;
    std::size_t pages_ = 0;
};

/** The running totals of one listing's pages (all its listers together), told to
    `report` after each page: the progress of a long listing. Used from the one I/O
    thread the listing runs on. */
struct listing_tally {
    const std::function<void(std::size_t, std::uint64_t)>* report = nullptr;
    std::size_t objects = 0;
    std::uint64_t bytes = 0;

    void add(const list_page& page)
    {
        objects += page.objects.size();
        for (const auto& o : page.objects)
            if (o.size > 0) bytes += static_cast<std::uint64_t>(o.size);
        if (report && *report) (*report)(objects, bytes);
    }
};

struct client_state : std::enable_shared_from_this<client_state> {
    CONVEYOR_DECL client_state(runtime& r, config c, client_options o);

    runtime& rt;
    config cfg;
    client_options opts;
    std::shared_ptr<credentials_cache> creds; // the signer for now (temporary credentials refreshed)
    std::mutex mu;
    std::map<std::string, std::shared_ptr<http::client>, std::less<>> pools;  // by endpoint URL
    std::atomic<std::uint64_t> requests{0}, retries{0}, bytes_in{0}, bytes_out{0}, retries_refused{0}, throttled{0};
    std::atomic<std::uint64_t> checksums_verified{0}, checksum_failures{0}, checksums_skipped{0}, checksums_absent{0};
    // Failed attempts by what failed them (see client_stats).
    std::atomic<std::uint64_t> status_errors{0}, connection_errors{0}, timeouts{0}, short_bodies{0};
    /// The server's clock less this machine's, as the last clock skew error's Date said
    /// (0 until one); every request is signed at now() = the system clock plus this.
    std::atomic<std::int64_t> clock_offset_ms{0};
    std::atomic<std::uint64_t> clock_corrections{0};
    retry_quota quota;
    std::map<std::string, std::shared_ptr<send_limit>, std::less<>> limits; // by endpoint URL and bucket (under mu)

    CONVEYOR_DECL http::client& pool_for(const http::endpoint& ep);

    /// The time requests are signed with: the system clock, corrected by `clock_offset_ms`.
    CONVEYOR_DECL std::chrono::system_clock::time_point now() const noexcept;
    /** After a clock skew error: sets the offset from the reply's `date` when it differs
        from the corrected clock by `clock_skew_threshold` or more. Returns whether it did
        (the request is then worth signing again). */
    CONVEYOR_DECL bool correct_clock(std::string_view date) noexcept;
    /// The in-flight limit of an endpoint and bucket; null when throttling is not adaptive.
    CONVEYOR_DECL std::shared_ptr<send_limit> limit_for(const http::endpoint& ep, std::string_view bucket);

    bool on_lane() const { return rt.current_io_lane().has_value(); }

    // The error for `o`, its detail "<operation>: <detail>".
    CONVEYOR_DECL request_error error_for(const op& o, std::error_code ec, reply_error reply, unsigned attempts, std::string detail) const;

    CONVEYOR_DECL request_error failure(const op& o, std::error_code ec, reply_error reply, unsigned attempts, std::string detail) const;

    // A request given up: what its last attempt met (an error reply as S3 described it, or
    // a transport failure: the endpoint, and the timeout that struck, named with its value),
    // the attempts and the time they took, and `then`, why no other attempt follows if that
    // is not plain from the rest.
    CONVEYOR_DECL request_error given_up(const op& o, const request_target& t, std::error_code ec, reply_error reply, unsigned attempts,
                                         const std::string& what, std::chrono::steady_clock::time_point started,
                                         std::string_view then = {}) const;

    /** Sends `o`, signing each attempt afresh, and retries what is transient. Returns the
        2xx response; throws `request_error` otherwise (or operation_aborted if cancelled).
        Must run on an I/O thread. */
    CONVEYOR_DECL asio::awaitable<http::response> execute(const op& o);

    CONVEYOR_DECL asio::awaitable<http::response> get_range(std::string_view bucket, std::string_view key, std::uint64_t first,
                                                            std::uint64_t last, std::span<std::byte> into, std::string_view if_match);

    CONVEYOR_DECL request_error bad(std::string_view bucket, std::string_view key, std::string detail) const;

    /** Counts what checking an object found, and for a mismatch returns why (the algorithm,
        the value the store sent, the value of the bytes), for `checksum_failed`. `computed`:
        the checksum of the bytes received. */
    CONVEYOR_DECL check_result tally(const std::optional<object_checksum>& expected, const checksum* computed, std::string* why);

    /// `tally` of `bytes`, the whole object, against `expected`.
    CONVEYOR_DECL check_result check(std::span<const std::byte> bytes, const std::optional<object_checksum>& expected, std::string* why);

    /// The error of an object that failed its checksum twice (`why` from `tally`).
    CONVEYOR_DECL request_error checksum_failed(std::string_view bucket, std::string_view key, std::string why) const;

    /// `x-amz-checksum-mode: ENABLED` on `o` when checksums are verified.
    CONVEYOR_DECL void ask_checksum(op& o) const;


    /// The CRC (`a`) of `data`: on the compute pool when it is large.
    inline asio::awaitable<std::uint64_t> crc_of(checksum_algorithm a, std::span<const std::byte> data);

    /// The object and what checking it found (`why`: a mismatch's explanation).
    struct fetched {
        buffer body;
        check_result result = check_result::absent;
        std::string why;
    };
    /// One fetch of the whole object, checked (see `get_object`).
    inline asio::awaitable<fetched> fetch_object(std::string_view bucket, std::string_view key, std::int64_t size_hint);
    /// `fetch_object` of an object that may be larger than a part, checksums verified.
    inline asio::awaitable<fetched> fetch_checked(std::string_view bucket, std::string_view key);

    // get_rest, payload_hash and put_multipart are inline in both forms of the library:
    // only impl/transfer.ipp calls them, and they hand lambdas to coroutines (the transfer
    // workers, the hash job), which have linkage only in an inline function (compiled
    // once and not inline, GCC warns of coroutine frames whose members have no linkage).

    // Fetches parts [1, n) of an object of `total` bytes into `whole` (part 0 is there);
    // with `crcs` (one per part), each part's CRC-64/NVME as it arrives.
    inline asio::awaitable<void> get_rest(std::string_view bucket, std::string_view key, std::span<std::byte> whole,
                                                 std::string_view etag, std::vector<std::uint64_t>* crcs);

    /// The whole object: one GET, or ranged parts in parallel when it is large.
    CONVEYOR_DECL asio::awaitable<buffer> get_object(std::string_view bucket, std::string_view key, std::int64_t size_hint);

    CONVEYOR_DECL asio::awaitable<object_info> head(std::string_view bucket, std::string_view key);

    CONVEYOR_DECL asio::awaitable<list_page> list(std::string_view bucket, const list_options& lo);

    /// Every object under `prefix`, page after page (each added to `tally`, when given).
    CONVEYOR_DECL asio::awaitable<std::vector<object_info>> list_all(std::string_view bucket, std::string_view prefix,
                                                                     listing_tally* tally = nullptr);

    // SHA-256 of a payload: on the compute pool when it is large, so that hashing an
    // upload's parts never holds up the I/O thread's other requests.
    inline asio::awaitable<std::string> payload_hash(std::span<const std::byte> data);

    /// PutObject, or UploadPart with `query`; `crc` (of `upload`'s algorithm, computed here when
    /// not given) goes with it when checksums are sent.
    CONVEYOR_DECL asio::awaitable<std::string> put_one(std::string_view bucket, std::string_view key, std::span<const std::byte> data,
                                                       std::string_view content_type, std::string_view query = {},
                                                       const char* name = "PutObject", std::optional<std::uint64_t> crc = {});

    /// The `x-amz-checksum-<name>` field of `crc` (of `opts.checksums.upload`) on `o`.
    CONVEYOR_DECL void send_checksum(op& o, std::uint64_t crc) const;

    CONVEYOR_DECL asio::awaitable<void> abort_upload(std::string_view bucket, std::string_view key, std::string_view upload_id);

    inline asio::awaitable<put_result> put_multipart(std::string_view bucket, std::string_view key, std::span<const std::byte> data,
                                                            std::string_view content_type);

    CONVEYOR_DECL asio::awaitable<put_result> put(std::string_view bucket, std::string_view key, std::span<const std::byte> data,
                                                  std::string_view content_type);
};

} // namespace conveyor::s3::detail

#endif
