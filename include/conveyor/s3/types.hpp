// conveyor/s3/types.hpp — the plain values an S3 client takes and gives: its settings
// (client_options and its parts), a listing's options and pages, an object's description,
// what a PUT made, and the client's counters. The client is in client.hpp; these are apart
// so that what the client's definitions share (detail/client_state.hpp) can use them
// without the client's header, whose header-only tail includes those definitions.
#ifndef CONVEYOR_S3_TYPES_HPP
#define CONVEYOR_S3_TYPES_HPP

#include <conveyor/core/checksum.hpp>
#include <conveyor/http/options.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace conveyor::s3 {

/** How failed requests are tried again: exponential backoff with full jitter.

    Attempt k (k = 1, 2, ...) that fails with a transient error waits a uniformly random
    time in [0, min(max_delay, base_delay * 2^(k-1))] before attempt k+1 (AWS's "full
    jitter"). Transient: 500, 502, 503 SlowDown, 504, 429, RequestTimeout, connection
    refused or reset, timeouts, truncated bodies. Everything else fails at once.

    `http.timeouts.total` (in `client_options`), when set, bounds each request with all
    its attempts and the backoff between them: a request whose next attempt would start
    past it fails then, with `http::errc::total_timeout`.
*/
struct retry_options {
    /// Attempts of one request, the first included.
    unsigned max_attempts = 10;
    /// Of those, how many may end in a timeout (connect, first byte, idle, attempt): an
    /// endpoint that accepts and never answers is reported after this many first-byte
    /// timeouts, not `max_attempts` of them and their backoff. 0: no limit of its own.
    unsigned max_timeouts = 3;
    std::chrono::milliseconds base_delay{50};
    std::chrono::milliseconds max_delay{20'000};
};

/// How the client backs off when a store throttles (503 SlowDown, 429, the throttling
/// error codes) or fails.
struct throttle_options {
    /// Per endpoint and bucket, requests in flight start at `ceiling`, and the first
    /// throttling reply cuts them to 0.7 times as many (never under `floor`); they grow back
    /// by half a request per window of healthy replies. That reply also sets a limit on
    /// requests sent per second: 0.8 times the rate they were going at, cut so again by a
    /// throttle at most once per round trip, growing back along CUBIC's curve (back where
    /// the store throttled after a second, faster past it), sends spaced evenly; dropped
    /// once it has grown to 4 times the rate where the store throttled. false: no limit
    /// but the connections'.
    bool adaptive = true;
    unsigned floor = 1;
    unsigned ceiling = 0; ///< 0: `http.max_connections`
    /// The retry quota (the AWS SDKs' standard mode): retries take 5 tokens (10 after a
    /// timeout), successes give 1 back (a retried success its cost); with none left, a
    /// request fails at its first error rather than retry. Shared by the client's requests.
    unsigned retry_tokens = 500;
};

/** How objects are checked against the checksums S3 keeps with them (S3's "additional
    checksums": CRC64NVME, S3's default for new objects, CRC32C, CRC32, SHA-1, SHA-256).

    GETs send `x-amz-checksum-mode: ENABLED` and verify the object against the checksum the
    reply carries. S3 sends none with a ranged reply, so with verification on, an object not
    known to fit in one part starts with a plain GET: its header gives the size, the ETag and
    the checksum, and when the object is larger than `part_size` only its first part is read
    from it (the connection is then closed) and the rest comes in ranged parts, pinned to the
    ETag, whose CRCs are computed as they arrive and combined. A mismatch is fetched once more
    (it may be a transfer error), and a second one fails with `errc::checksum_mismatch`,
    naming the object, the algorithm and both values. A streamed object (`read_chunks`) is
    checked as it streams, and a mismatch fails the stream at its end (its chunks have gone
    out).

    Not verified, and counted in `client_stats::checksums_skipped`: composite checksums of
    multipart uploads (`<base64>-<parts>`: a checksum of the parts' checksums, which only reads
    split at the upload's own part boundaries could check; conveyor's parts are its own).
    Objects stored without a checksum are counted in `checksums_absent`. Reads of part of an
    object (`async_get_range`, a stream from an offset) get no checksum and are not checked.
*/
struct checksum_options {
    /// Ask for and verify checksums on GETs.
    bool verify = true;
    /// The checksum sent with PutObject and with each part of a multipart upload, whose
    /// completion then carries the whole object's (a full-object checksum); S3 refuses an
    /// upload whose bytes do not match (400 BadDigest, retried). A CRC (they combine across
    /// parts); nothing: no checksum sent.
    std::optional<checksum_algorithm> upload = checksum_algorithm::crc64nvme;
};

/// Settings of an S3 client.
struct client_options {
    /// Connections (per endpoint, over all I/O threads), timeouts, TLS. `timeouts.total`
    /// bounds one S3 request (a GetObject, one ranged part of a large object, one page of
    /// a listing, one part of an upload) with all its attempts and backoff, as AWS SDKs'
    /// API call timeout does; `timeouts.attempt` bounds each attempt alone.
    http::client_options http;
    retry_options retry;
    throttle_options throttle;
    checksum_options checksums;
    /// GETs of objects larger than this are split into ranged parts of this size, fetched
    /// in parallel and reassembled in place. 0: never split.
    std::uint64_t part_size = 8u << 20;
    /// Ranged parts of one object in flight at once.
    unsigned parts_in_flight = 8;
    /// PUTs larger than this become multipart uploads.
    std::uint64_t multipart_threshold = 64u << 20;
    /// Part size of multipart uploads (S3's minimum is 5 MiB; raised when an object would
    /// need more than 10,000 parts).
    std::uint64_t upload_part_size = 16u << 20;
    /// Parts of one upload in flight at once.
    unsigned upload_parts_in_flight = 8;
};

/// What a PUT (single or multipart) made.
struct put_result {
    std::string key;
    std::string etag;
    std::uint64_t bytes = 0;
    unsigned parts = 0;   ///< 0 for a single PUT
};

/// Options of one ListObjectsV2 request.
struct list_options {
    std::string prefix;
    std::string delimiter;
    std::string continuation_token;
    std::string start_after;
    unsigned max_keys = 1000;
};

/// Counters of a client, over its lifetime.
struct client_stats {
    std::uint64_t requests = 0;   ///< HTTP requests sent (attempts)
    std::uint64_t retries = 0;    ///< attempts that were retries
    std::uint64_t bytes_in = 0;   ///< body bytes received in 2xx replies
    std::uint64_t bytes_out = 0;  ///< body bytes sent
    std::uint64_t throttled = 0;  ///< throttling replies (503 SlowDown, 429, throttling codes)
    std::uint64_t retries_refused = 0; ///< retries the retry quota did not allow
    double limit = 0;             ///< requests in flight allowed now (the lowest over endpoints and buckets; 0: none yet)
    double lowest_limit = 0;      ///< the lowest the limit has been
    std::uint64_t checksums_verified = 0; ///< objects whose bytes matched their checksum
    std::uint64_t checksum_failures = 0;  ///< mismatches seen (each retried once, see `checksum_options`)
    std::uint64_t checksums_skipped = 0;  ///< checksums that could not be verified (composite; part of an object)
    std::uint64_t checksums_absent = 0;   ///< whole objects read whose store sent no checksum
    double rate = 0;              ///< requests per second allowed now (the lowest over endpoints and buckets; 0: no limit)
    double lowest_rate = 0;       ///< the lowest that rate has been (0: never limited)
    // Failed attempts by what failed them, whether retried or not (a checksum mismatch is
    // `checksum_failures`; a request the HTTP client sent again on a fresh connection after
    // a kept-alive one turned out closed is no failed attempt).
    std::uint64_t status_errors = 0;     ///< answered with an error status (5xx, 429, 4xx)
    std::uint64_t connection_errors = 0; ///< connection refused, reset or closed, and any other failure that is neither a timeout nor a short body
    std::uint64_t timeouts = 0;          ///< ended by one of the timeouts (`http.timeouts`)
    std::uint64_t short_bodies = 0;      ///< the body ended before its Content-Length (`http::errc::body_truncated`)
    /// Times the clock used for signing was corrected by a clock skew error's `Date`
    /// (RequestTimeTooSkewed and the like; see `client`), and the correction now: the
    /// server's clock less this machine's, in milliseconds.
    std::uint64_t clock_corrections = 0;
    std::int64_t clock_offset_ms = 0;
};

/// One object of a listing.
struct object_info {
    std::string key;
    std::int64_t size = -1;   ///< bytes, or -1 when unknown
    std::string etag;         ///< as S3 sent it, quotes included
    std::string last_modified;
};

/// One page of ListObjectsV2.
struct list_page {
    std::vector<object_info> objects;
    std::vector<std::string> common_prefixes;  ///< with a delimiter: the "directories"
    bool truncated = false;
    std::string next_continuation_token;
};

} // namespace conveyor::s3

#endif
