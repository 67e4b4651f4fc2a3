// conveyor/s3/detail/impl/sigv4_crypto.ipp — the hashing under SigV4: SHA-256 and HMAC-SHA256
// through OpenSSL 3 (algorithms fetched once), hex digests, and the signer's errors. Part of
// the definitions of conveyor/s3/sigv4.hpp (included by impl/sigv4.ipp).
#ifndef CONVEYOR_S3_DETAIL_IMPL_SIGV4_CRYPTO_IPP
#define CONVEYOR_S3_DETAIL_IMPL_SIGV4_CRYPTO_IPP

#include <conveyor/s3/sigv4.hpp>

#include <conveyor/core/error.hpp>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

namespace conveyor::s3::detail {

/// Throws the signer's `conveyor::error`. `why` must never hold a secret.
[[noreturn]] CONVEYOR_DECL void throw_signer_error(std::errc code, std::string why)
{
    throw conveyor::error(std::make_error_code(code), {.stage = "s3 signer", .detail = std::move(why)});
}

/// Throws for a failed OpenSSL call, with OpenSSL's reason (which holds no key material).
[[noreturn]] CONVEYOR_DECL void throw_openssl_error(const char* what)
{
    char reason[256] = "no reason given";
    if (const unsigned long e = ERR_peek_last_error(); e != 0) ERR_error_string_n(e, reason, sizeof reason);
    ERR_clear_error();
    throw_signer_error(std::errc::operation_not_supported, std::string(what) + " failed in OpenSSL (" + reason + ")");
}

// OpenSSL 3 looks algorithms up by name on every implicit use (EVP_sha256(), HMAC()); that
// lookup costs more than hashing a canonical request. Both are fetched once and held for
// the life of the process.
CONVEYOR_DECL const EVP_MD* sha256_md()
{
    static EVP_MD* const md = [] {
        EVP_MD* m = EVP_MD_fetch(nullptr, "SHA256", nullptr);
        if (m == nullptr) throw_openssl_error("fetching SHA-256");
        return m;
    }();
    return md;
}

CONVEYOR_DECL EVP_MAC* hmac_mac()
{
    static EVP_MAC* const mac = [] {
        EVP_MAC* m = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
        if (m == nullptr) throw_openssl_error("fetching HMAC");
        return m;
    }();
    return mac;
}

CONVEYOR_DECL void mac_ctx_deleter::operator()(evp_mac_ctx_st* ctx) const noexcept { EVP_MAC_CTX_free(ctx); }

using mac_ctx_ptr = std::unique_ptr<EVP_MAC_CTX, mac_ctx_deleter>;

/// A new HMAC-SHA256 context keyed with `key`.
CONVEYOR_DECL mac_ctx_ptr make_hmac(const void* key, std::size_t size)
{
    mac_ctx_ptr ctx(EVP_MAC_CTX_new(hmac_mac()));
    if (!ctx) throw_openssl_error("creating an HMAC context");
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, const_cast<char*>("SHA256"), 0),
        OSSL_PARAM_construct_end(),
    };
    if (EVP_MAC_init(ctx.get(), static_cast<const unsigned char*>(key), size, params) != 1)
        throw_openssl_error("keying HMAC-SHA256");
    return ctx;
}

/// Feeds `data` to `ctx` and writes the 32-byte MAC to `out`.
CONVEYOR_DECL void finish_hmac(EVP_MAC_CTX* ctx, std::string_view data, unsigned char* out)
{
    std::size_t n = 0;
    if (EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(data.data()), data.size()) != 1 ||
        EVP_MAC_final(ctx, out, &n, 32) != 1 || n != 32)
        throw_openssl_error("computing HMAC-SHA256");
}

/// out = HMAC-SHA256(key, data).
CONVEYOR_DECL void hmac_sha256(const void* key, std::size_t key_size, std::string_view data, unsigned char* out)
{
    auto ctx = make_hmac(key, key_size);
    finish_hmac(ctx.get(), data, out);
}

/// out = SHA-256(data).
CONVEYOR_DECL void sha256(const void* data, std::size_t size, unsigned char* out)
{
    unsigned int n = 0;
    if (EVP_Digest(data, size, out, &n, sha256_md(), nullptr) != 1 || n != 32) throw_openssl_error("computing SHA-256");
}

/// Writes `size` bytes as 2 * `size` lowercase hex digits.
CONVEYOR_DECL void to_hex(const unsigned char* in, std::size_t size, char* out) noexcept
{
    constexpr char digits[] = "0123456789abcdef";
    for (std::size_t i = 0; i < size; ++i) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 0xf];
    }
}

} // namespace conveyor::s3::detail

#endif
