// conveyor/s3/impl/sigv4.ipp — definitions for conveyor/s3/sigv4.hpp: signing keys, canonical
// requests, signatures, presigned URLs and the signer. The hashing is in
// detail/impl/sigv4_crypto.ipp, the canonical text's encoding in detail/impl/sigv4_canonical.ipp.
#ifndef CONVEYOR_S3_IMPL_SIGV4_IPP
#define CONVEYOR_S3_IMPL_SIGV4_IPP

#include <conveyor/s3/sigv4.hpp>

#include <conveyor/s3/detail/impl/sigv4_canonical.ipp>
#include <conveyor/s3/detail/impl/sigv4_crypto.ipp>

#include <conveyor/core/error.hpp>
#include <conveyor/core/detail/ascii.hpp>

#include <boost/beast/http/field.hpp>
#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/verb.hpp>
#include <boost/container/small_vector.hpp>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>

namespace conveyor::s3 {

CONVEYOR_DECL std::string sha256_hex(std::span<const std::byte> data)
{
    unsigned char digest[32];
    detail::sha256(data.data(), data.size(), digest);
    std::string hex(64, '\0');
    detail::to_hex(digest, 32, hex.data());
    return hex;
}

CONVEYOR_DECL std::string sha256_hex(std::string_view data) { return sha256_hex(std::as_bytes(std::span(data.data(), data.size()))); }

namespace sigv4 {

CONVEYOR_DECL timestamp::timestamp(std::chrono::system_clock::time_point t) noexcept
{
    using namespace std::chrono;
    const auto secs = floor<seconds>(t);
    day_ = floor<days>(secs);
    const year_month_day ymd{day_};
    const hh_mm_ss hms{secs - day_};
    auto put = [this](std::size_t at, unsigned v, std::size_t width) {
        for (std::size_t i = width; i-- > 0; v /= 10) text_[at + i] = static_cast<char>('0' + v % 10);
    };
    put(0, static_cast<unsigned>(static_cast<int>(ymd.year())) % 10000, 4);
    put(4, static_cast<unsigned>(ymd.month()), 2);
    put(6, static_cast<unsigned>(ymd.day()), 2);
    text_[8] = 'T';
    put(9, static_cast<unsigned>(hms.hours().count()), 2);
    put(11, static_cast<unsigned>(hms.minutes().count()), 2);
    put(13, static_cast<unsigned>(hms.seconds().count()), 2);
    text_[15] = 'Z';
}

CONVEYOR_DECL std::string credential_scope(std::string_view date, std::string_view region, std::string_view service)
{
    std::string s;
    s.reserve(date.size() + region.size() + service.size() + 16);
    s += date;
    s += '/';
    s += region;
    s += '/';
    s += service;
    s += "/aws4_request";
    return s;
}

CONVEYOR_DECL signing_key::signing_key(std::string_view secret_access_key, std::string_view date, std::string_view region,
                                std::string_view service)
    : scope_(credential_scope(date, region, service))
{
    std::string k0;
    k0.reserve(4 + secret_access_key.size());
    k0 += "AWS4";
    k0 += secret_access_key;
    unsigned char k_date[32], k_region[32], k_service[32];
    struct wipe {
        std::string& k0;
        unsigned char* a;
        unsigned char* b;
        unsigned char* c;
        ~wipe()
        {
            OPENSSL_cleanse(k0.data(), k0.size());
            OPENSSL_cleanse(a, 32);
            OPENSSL_cleanse(b, 32);
            OPENSSL_cleanse(c, 32);
        }
    } wiped_on_exit{k0, k_date, k_region, k_service};
    detail::hmac_sha256(k0.data(), k0.size(), date, k_date);
    detail::hmac_sha256(k_date, 32, region, k_region);
    detail::hmac_sha256(k_region, 32, service, k_service);
    detail::hmac_sha256(k_service, 32, "aws4_request", key_.data());
    keyed_ = detail::make_hmac(key_.data(), key_.size());
}

CONVEYOR_DECL signing_key::~signing_key() { OPENSSL_cleanse(key_.data(), key_.size()); }

CONVEYOR_DECL void signing_key::sign(std::string_view string_to_sign, std::span<char, 64> out) const
{
    // A copy of the keyed context: the shared one is only read, so threads may sign at once.
    detail::mac_ctx_ptr ctx(EVP_MAC_CTX_dup(keyed_.get()));
    if (!ctx) detail::throw_openssl_error("copying an HMAC context");
    unsigned char mac[32];
    detail::finish_hmac(ctx.get(), string_to_sign, mac);
    detail::to_hex(mac, 32, out.data());
}

CONVEYOR_DECL std::string signing_key::sign(std::string_view string_to_sign) const
{
    std::string hex(64, '\0');
    sign(string_to_sign, std::span<char, 64>(hex.data(), 64));
    return hex;
}

CONVEYOR_DECL std::string signed_header_names(std::span<const header> headers)
{
    std::string out;
    std::string_view last;
    for (const header* h : detail::sorted_headers(headers)) {
        if (!last.empty() && detail::iequals(last, h->name)) continue;
        if (!out.empty()) out += ';';
        detail::append_lower(out, h->name);
        last = h->name;
    }
    return out;
}

CONVEYOR_DECL void write_canonical_request(const request& r, std::string& text, std::string& signed_headers)
{
    std::string scratch;
    text += r.method;
    text += '\n';
    detail::append_canonical_uri(text, r.path, r.normalize_path);
    text += '\n';
    detail::append_canonical_query(text, r.query, scratch);
    text += '\n';
    const auto sorted = detail::sorted_headers(r.headers);
    const std::size_t first_signed = signed_headers.size();
    for (std::size_t i = 0; i < sorted.size();) {
        const std::string_view name = sorted[i]->name;
        detail::append_lower(text, name);
        text += ':';
        if (signed_headers.size() != first_signed) signed_headers += ';';
        detail::append_lower(signed_headers, name);
        detail::append_canonical_value(text, sorted[i]->value);
        for (++i; i < sorted.size() && detail::iequals(sorted[i]->name, name); ++i) {
            text += ',';
            detail::append_canonical_value(text, sorted[i]->value);
        }
        text += '\n';
    }
    text += '\n';
    text += std::string_view(signed_headers).substr(first_signed);
    text += '\n';
    text += r.payload_hash;
}

CONVEYOR_DECL canonical_request make_canonical_request(const request& r)
{
    canonical_request c;
    c.text.reserve(256 + r.path.size() + r.query.size() + 64 * r.headers.size());
    write_canonical_request(r, c.text, c.signed_headers);
    return c;
}

CONVEYOR_DECL std::string canonical_uri(std::string_view path, bool normalize_path)
{
    std::string out;
    detail::append_canonical_uri(out, path, normalize_path);
    return out;
}

CONVEYOR_DECL std::string canonical_query(std::string_view query)
{
    std::string out, scratch;
    detail::append_canonical_query(out, query, scratch);
    return out;
}

CONVEYOR_DECL std::string string_to_sign(std::string_view amz_date, std::string_view scope, std::string_view canonical_request)
{
    unsigned char digest[32];
    detail::sha256(canonical_request.data(), canonical_request.size(), digest);
    std::string s;
    s.reserve(algorithm.size() + amz_date.size() + scope.size() + 3 + 64);
    s += algorithm;
    s += '\n';
    s += amz_date;
    s += '\n';
    s += scope;
    s += '\n';
    const std::size_t at = s.size();
    s.resize(at + 64);
    detail::to_hex(digest, 32, s.data() + at);
    return s;
}

CONVEYOR_DECL std::string authorization(std::string_view access_key_id, std::string_view scope, std::string_view signed_headers,
                                 std::string_view signature)
{
    std::string a;
    a.reserve(algorithm.size() + access_key_id.size() + scope.size() + signed_headers.size() + signature.size() + 48);
    a += algorithm;
    a += " Credential=";
    a += access_key_id;
    a += '/';
    a += scope;
    a += ", SignedHeaders=";
    a += signed_headers;
    a += ", Signature=";
    a += signature;
    return a;
}

CONVEYOR_DECL std::string presign_parameters(std::string_view access_key_id, std::string_view scope, std::string_view amz_date,
                                      std::chrono::seconds expires, std::string_view signed_headers,
                                      std::string_view session_token)
{
    std::string q;
    q.reserve(160 + access_key_id.size() + scope.size() + 3 * session_token.size() + signed_headers.size());
    q += "X-Amz-Algorithm=";
    q += algorithm;
    q += "&X-Amz-Credential=";
    detail::append_encoded(q, access_key_id);
    q += "%2F";
    detail::append_encoded(q, scope);
    q += "&X-Amz-Date=";
    detail::append_encoded(q, amz_date);
    q += "&X-Amz-Expires=";
    q += std::to_string(expires.count());
    if (!session_token.empty()) {
        q += "&X-Amz-Security-Token=";
        detail::append_encoded(q, session_token);
    }
    q += "&X-Amz-SignedHeaders=";
    detail::append_encoded(q, signed_headers);
    return q;
}

} // namespace sigv4

struct signer::key_cache {
    std::mutex mu;
    // The keys of the two latest days seen (see the class's description).
    std::array<std::shared_ptr<const sigv4::signing_key>, 2> keys;
};

CONVEYOR_DECL signer::signer(credentials c, std::string region, std::string service)
    : creds_(std::move(c)), region_(std::move(region)), service_(std::move(service)),
      normalize_path_(!std::string_view(service_).starts_with("s3")), cache_(std::make_shared<key_cache>())
{
    // Both go into the credential scope, where '/' or white space would change its meaning.
    auto check = [](std::string_view what, std::string_view v) {
        if (v.empty()) detail::throw_signer_error(std::errc::invalid_argument, std::string(what) + " is empty");
        for (char c : v)
            if (c == '/' || static_cast<unsigned char>(c) <= ' ' || c == '\x7f')
                detail::throw_signer_error(std::errc::invalid_argument,
                                           std::string(what) + " '" + std::string(v) + "' is not a valid name");
    };
    check("region", region_);
    check("service", service_);
}

CONVEYOR_DECL std::shared_ptr<const sigv4::signing_key> signer::key_for_day(const sigv4::timestamp& ts) const
{
    const std::string_view date = ts.date();
    {
        std::lock_guard lk(cache_->mu);
        for (const auto& k : cache_->keys)
            if (k && k->date() == date) return k;
    }
    // Derived outside the lock: four HMACs, which other threads need not wait for.
    auto fresh = std::make_shared<const sigv4::signing_key>(creds_.secret_access_key, date, region_, service_);
    std::lock_guard lk(cache_->mu);
    auto& keys = cache_->keys;
    for (const auto& k : keys)
        if (k && k->date() == date) return k; // another thread got there first: one key per day
    auto& oldest = !keys[0] ? keys[0] : !keys[1] ? keys[1] : keys[0]->date() < keys[1]->date() ? keys[0] : keys[1];
    if (!oldest || oldest->date() < date) oldest = fresh;
    return fresh;
}

CONVEYOR_DECL std::shared_ptr<const sigv4::signing_key> signer::key_for(std::chrono::system_clock::time_point t) const
{
    return key_for_day(sigv4::timestamp(t));
}

CONVEYOR_DECL void signer::sign(boost::beast::http::verb method, std::string_view target, boost::beast::http::fields& headers,
                         std::string_view payload_hash, std::chrono::system_clock::time_point now) const
{
    namespace http = boost::beast::http;
    if (creds_.anonymous()) return;
    if (headers.find(http::field::host) == headers.end())
        detail::throw_signer_error(std::errc::invalid_argument,
                                   "the request to '" + std::string(target) + "' has no Host header; set it before signing");

    const sigv4::timestamp ts(now);
    const auto key = key_for_day(ts);

    headers.erase(http::field::authorization);
    headers.set("X-Amz-Date", ts.amz_date());
    headers.set("X-Amz-Content-Sha256", payload_hash);
    if (!creds_.session_token.empty()) headers.set("X-Amz-Security-Token", creds_.session_token);
    else headers.erase("X-Amz-Security-Token");

    boost::container::small_vector<sigv4::header, 12> signed_fields;
    for (const auto& f : headers) {
        const std::string_view name = f.name_string();
        if (detail::s3_signs(name)) signed_fields.push_back({name, f.value()});
    }

    const auto q = target.find('?');
    const sigv4::request r{
        .method = http::to_string(method),
        .path = target.substr(0, q),
        .query = q == std::string_view::npos ? std::string_view() : target.substr(q + 1),
        .headers = signed_fields,
        .payload_hash = payload_hash,
        .normalize_path = normalize_path_,
    };
    std::string text, names;
    text.reserve(320 + target.size() + creds_.session_token.size());
    names.reserve(96);
    sigv4::write_canonical_request(r, text, names);

    char signature[64];
    key->sign(sigv4::string_to_sign(ts.amz_date(), key->scope(), text), signature);
    headers.set(http::field::authorization,
                sigv4::authorization(creds_.access_key_id, key->scope(), names, std::string_view(signature, 64)));
}

CONVEYOR_DECL std::string signer::presign(boost::beast::http::verb method, std::string_view target, std::string_view host,
                                   std::chrono::seconds expires, std::chrono::system_clock::time_point now) const
{
    if (expires < std::chrono::seconds(1) || expires > sigv4::max_presign_expiry)
        detail::throw_signer_error(std::errc::invalid_argument,
                                   "a presigned URL must expire after 1 second to 7 days, not " +
                                       std::to_string(expires.count()) + " seconds");
    if (creds_.anonymous()) return std::string(target);

    const sigv4::timestamp ts(now);
    const auto key = key_for_day(ts);

    const auto q = target.find('?');
    const std::string_view path = target.substr(0, q);
    std::string query;
    if (q != std::string_view::npos && q + 1 < target.size()) {
        query = target.substr(q + 1);
        query += '&';
    }
    query += sigv4::presign_parameters(creds_.access_key_id, key->scope(), ts.amz_date(), expires, "host",
                                       creds_.session_token);

    const sigv4::header host_header{"host", host};
    const sigv4::request r{
        .method = boost::beast::http::to_string(method),
        .path = path,
        .query = query,
        .headers = std::span(&host_header, 1),
        .payload_hash = unsigned_payload,
        .normalize_path = normalize_path_,
    };
    std::string text, names;
    text.reserve(320 + 2 * query.size() + path.size());
    sigv4::write_canonical_request(r, text, names);

    char signature[64];
    key->sign(sigv4::string_to_sign(ts.amz_date(), key->scope(), text), signature);

    std::string out;
    out.reserve(path.size() + query.size() + 18 + 64 + 1);
    out += path;
    out += '?';
    out += query;
    out += "&X-Amz-Signature=";
    out += std::string_view(signature, 64);
    return out;
}

} // namespace conveyor::s3

#endif
