// conveyor/core/impl/checksum.ipp — CRC-64/NVME (tables, and carry-less multiplication
// where the CPU has it), CRC-32C and CRC-32 through ISA-L, SHA through OpenSSL,
// CRC combination and base64.
#ifndef CONVEYOR_CORE_IMPL_CHECKSUM_IPP
#define CONVEYOR_CORE_IMPL_CHECKSUM_IPP

#include <conveyor/core/checksum.hpp>

#include <isa-l/crc.h>
#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <bit>
#include <climits>
#include <cstring>
#include <stdexcept>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CONVEYOR_CRC64_CLMUL 1
#else
#define CONVEYOR_CRC64_CLMUL 0
#endif

namespace conveyor {
namespace detail {

// CRC-64/NVME: polynomial 0xad93d23594c93659 (x^64 implied), reflected in and out, initial
// value and final xor all ones. Below, a "register" is the reflected remainder before the
// final xor: bit j holds the coefficient of x^(63-j).
inline constexpr std::uint64_t crc64nvme_poly = 0xad93d23594c93659ULL;
inline constexpr std::uint64_t crc64nvme_poly_reflected = 0x9a6c9329ac4bc9b5ULL;

constexpr std::uint64_t reflect64(std::uint64_t v) noexcept
{
    std::uint64_t r = 0;
    for (int i = 0; i < 64; ++i, v >>= 1) r = (r << 1) | (v & 1);
    return r;
}

/// x^n mod P, reflected (the folding constants).
constexpr std::uint64_t crc64nvme_xpow_reflected(unsigned n) noexcept
{
    std::uint64_t v = 1;
    for (unsigned i = 0; i < n; ++i) v = (v << 1) ^ ((v >> 63) != 0 ? crc64nvme_poly : 0);
    return reflect64(v);
}

struct crc64_tables {
    std::array<std::array<std::uint64_t, 256>, 8> t{};
    constexpr crc64_tables() noexcept
    {
        for (unsigned i = 0; i < 256; ++i) {
            std::uint64_t v = i;
            for (int b = 0; b < 8; ++b) v = (v & 1) != 0 ? (v >> 1) ^ crc64nvme_poly_reflected : v >> 1;
            t[0][i] = v;
        }
        for (unsigned k = 1; k < 8; ++k)
            for (unsigned i = 0; i < 256; ++i) t[k][i] = t[0][t[k - 1][i] & 0xff] ^ (t[k - 1][i] >> 8);
    }
};

inline constexpr crc64_tables crc64nvme_tables{};

inline std::uint64_t load_le64(const unsigned char* p) noexcept
{
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
    return v;
}

/// The register after `n` more bytes, by tables (slicing by 8).
inline std::uint64_t crc64nvme_tables_update(std::uint64_t r, const unsigned char* p, std::size_t n) noexcept
{
    const auto& t = crc64nvme_tables.t;
    for (; n >= 8; n -= 8, p += 8) {
        r ^= load_le64(p);
        r = t[7][r & 0xff] ^ t[6][(r >> 8) & 0xff] ^ t[5][(r >> 16) & 0xff] ^ t[4][(r >> 24) & 0xff] ^ t[3][(r >> 32) & 0xff] ^
            t[2][(r >> 40) & 0xff] ^ t[1][(r >> 48) & 0xff] ^ t[0][r >> 56];
    }
    for (; n > 0; --n, ++p) r = t[0][(r ^ *p) & 0xff] ^ (r >> 8);
    return r;
}

#if CONVEYOR_CRC64_CLMUL
// Folding (Intel's "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ"): a 128-bit
// block A of the message, followed by D more bits, is worth A * x^D mod P; with A = hi*x^64 + lo
// that is hi*(x^(D+64) mod P) + lo*(x^D mod P), two 64x64 carry-less products. On reflected
// operands a product comes out multiplied by x once more, so the constants are taken one
// power lower. Four blocks are folded side by side (D = 512), then into one (D = 128); the
// last 16 bytes and the tail go through the tables. Where AVX-512 has it (VPCLMULQDQ), four
// 128-bit lanes a register: sixteen blocks side by side.
struct crc64_fold_constants {
    std::uint64_t k2047 = crc64nvme_xpow_reflected(2047), k2111 = crc64nvme_xpow_reflected(2111);
    std::uint64_t k511 = crc64nvme_xpow_reflected(511), k575 = crc64nvme_xpow_reflected(575);
    std::uint64_t k127 = crc64nvme_xpow_reflected(127), k191 = crc64nvme_xpow_reflected(191);
};
inline constexpr crc64_fold_constants crc64_fold{};

// GCC's vector types and builtins rather than <immintrin.h>: the intrinsics headers (AVX-512's
// above all) would weigh on every translation unit of a header-only build.
typedef long long crc_v2di __attribute__((vector_size(16)));
typedef long long crc_v8di __attribute__((vector_size(64)));

inline crc_v2di crc_load16(const unsigned char* p) noexcept
{
    crc_v2di v;
    std::memcpy(&v, p, 16);
    return v;
}

/// A block folded by D (k: lane 0 multiplies lane 0 of a, its higher-degree half; lane 1 lane 1).
__attribute__((target("pclmul,sse4.1"))) inline crc_v2di crc64_fold_block(crc_v2di a, crc_v2di k) noexcept
{
    return __builtin_ia32_pclmulqdq128(a, k, 0x00) ^ __builtin_ia32_pclmulqdq128(a, k, 0x11);
}

/// The register after `n` (>= 64) more bytes, folded.
__attribute__((target("pclmul,sse4.1"))) inline std::uint64_t crc64nvme_clmul_update(std::uint64_t r, const unsigned char* p,
                                                                                     std::size_t n) noexcept
{
    const crc_v2di k512 = {static_cast<long long>(crc64_fold.k575), static_cast<long long>(crc64_fold.k511)};
    const crc_v2di k128 = {static_cast<long long>(crc64_fold.k191), static_cast<long long>(crc64_fold.k127)};
    // The register joins the message: xored into its first 8 bytes.
    crc_v2di a0 = crc_load16(p) ^ crc_v2di{static_cast<long long>(r), 0};
    crc_v2di a1 = crc_load16(p + 16), a2 = crc_load16(p + 32), a3 = crc_load16(p + 48);
    p += 64;
    n -= 64;
    for (; n >= 64; n -= 64, p += 64) {
        a0 = crc64_fold_block(a0, k512) ^ crc_load16(p);
        a1 = crc64_fold_block(a1, k512) ^ crc_load16(p + 16);
        a2 = crc64_fold_block(a2, k512) ^ crc_load16(p + 32);
        a3 = crc64_fold_block(a3, k512) ^ crc_load16(p + 48);
    }
    a1 ^= crc64_fold_block(a0, k128);
    a2 ^= crc64_fold_block(a1, k128);
    crc_v2di a = crc64_fold_block(a2, k128) ^ a3;
    for (; n >= 16; n -= 16, p += 16) a = crc64_fold_block(a, k128) ^ crc_load16(p);
    unsigned char last[16];
    std::memcpy(last, &a, 16);
    return crc64nvme_tables_update(crc64nvme_tables_update(0, last, 16), p, n);
}

/// The same with AVX-512's four-lane carry-less multiplication: sixteen blocks side by side
/// (D = 2048, 256 bytes a step), then folded into one in order. n >= 256.
__attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.1"))) inline std::uint64_t
crc64nvme_vpclmul_update(std::uint64_t r, const unsigned char* p, std::size_t n) noexcept
{
    const auto hi = static_cast<long long>(crc64_fold.k2111), lo = static_cast<long long>(crc64_fold.k2047);
    const crc_v8di k2048 = {hi, lo, hi, lo, hi, lo, hi, lo};
    const crc_v2di k128 = {static_cast<long long>(crc64_fold.k191), static_cast<long long>(crc64_fold.k127)};
    crc_v8di z[4];
    std::memcpy(z, p, sizeof z);
    z[0] ^= crc_v8di{static_cast<long long>(r), 0, 0, 0, 0, 0, 0, 0};
    p += 256;
    n -= 256;
    for (; n >= 256; n -= 256, p += 256) {
        crc_v8di next[4];
        std::memcpy(next, p, sizeof next);
        for (int j = 0; j < 4; ++j)
            z[j] = __builtin_ia32_vpclmulqdq_v8di(z[j], k2048, 0x00) ^ __builtin_ia32_vpclmulqdq_v8di(z[j], k2048, 0x11) ^ next[j];
    }
    // The sixteen 128-bit blocks in message order: lane l of z[j] is block 4j + l.
    crc_v2di blocks[16];
    std::memcpy(blocks, z, sizeof z);
    crc_v2di a = blocks[0];
    for (int b = 1; b < 16; ++b) a = crc64_fold_block(a, k128) ^ blocks[b];
    for (; n >= 16; n -= 16, p += 16) a = crc64_fold_block(a, k128) ^ crc_load16(p);
    unsigned char last[16];
    std::memcpy(last, &a, 16);
    return crc64nvme_tables_update(crc64nvme_tables_update(0, last, 16), p, n);
}

inline bool cpu_has_clmul() noexcept
{
    static const bool has = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    return has;
}

inline bool cpu_has_vpclmul() noexcept
{
    static const bool has = __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("avx512f") && cpu_has_clmul();
    return has;
}
#endif

/// The CRC of a + b from the CRCs of a and b (zlib's crc32_combine, for any reflected CRC
/// whose initial value and final xor are equal): crc(a) * x^(8*len(b)) mod P, xor crc(b).
/// Polynomials are reflected in `width` bits: the top bit is x^0.
struct reflected_crc {
    unsigned width;
    std::uint64_t poly_reflected;

    std::uint64_t top() const noexcept { return std::uint64_t{1} << (width - 1); }

    std::uint64_t multiply(std::uint64_t a, std::uint64_t b) const noexcept
    {
        std::uint64_t product = 0;
        for (std::uint64_t m = top(); m != 0; m >>= 1) {
            if ((a & m) != 0) product ^= b;
            b = (b & 1) != 0 ? (b >> 1) ^ poly_reflected : b >> 1;
        }
        return product;
    }

    std::uint64_t combine(std::uint64_t crc_a, std::uint64_t crc_b, std::uint64_t length_b) const noexcept
    {
        std::uint64_t power = top();           // x^0
        std::uint64_t base = top() >> 8;       // x^8: one byte
        for (std::uint64_t n = length_b; n != 0; n >>= 1) {
            if ((n & 1) != 0) power = multiply(power, base);
            base = multiply(base, base);
        }
        return multiply(power, crc_a) ^ crc_b;
    }
};

inline reflected_crc crc_of(checksum_algorithm a) noexcept
{
    switch (a) {
    case checksum_algorithm::crc64nvme: return {64, crc64nvme_poly_reflected};
    case checksum_algorithm::crc32c: return {32, 0x82f63b78};
    default: return {32, 0xedb88320};
    }
}

inline const EVP_MD* digest_md(checksum_algorithm a)
{
    // Fetched once: OpenSSL 3 otherwise looks the algorithm up by name at every use.
    static EVP_MD* const sha1 = EVP_MD_fetch(nullptr, "SHA1", nullptr);
    static EVP_MD* const sha256 = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    EVP_MD* md = a == checksum_algorithm::sha1 ? sha1 : sha256;
    if (md == nullptr) throw std::runtime_error(std::string("OpenSSL has no ") + std::string(checksum_name(a)));
    return md;
}

} // namespace detail

CONVEYOR_DECL std::string_view checksum_name(checksum_algorithm a) noexcept
{
    switch (a) {
    case checksum_algorithm::crc64nvme: return "CRC64NVME";
    case checksum_algorithm::crc32c: return "CRC32C";
    case checksum_algorithm::crc32: return "CRC32";
    case checksum_algorithm::sha1: return "SHA1";
    case checksum_algorithm::sha256: return "SHA256";
    }
    return "?";
}

CONVEYOR_DECL std::string_view checksum_header_suffix(checksum_algorithm a) noexcept
{
    switch (a) {
    case checksum_algorithm::crc64nvme: return "crc64nvme";
    case checksum_algorithm::crc32c: return "crc32c";
    case checksum_algorithm::crc32: return "crc32";
    case checksum_algorithm::sha1: return "sha1";
    case checksum_algorithm::sha256: return "sha256";
    }
    return "?";
}

CONVEYOR_DECL std::optional<checksum_algorithm> parse_checksum_name(std::string_view name) noexcept
{
    for (auto a : {checksum_algorithm::crc64nvme, checksum_algorithm::crc32c, checksum_algorithm::crc32, checksum_algorithm::sha1,
                   checksum_algorithm::sha256}) {
        const std::string_view n = checksum_name(a);
        if (n.size() == name.size() &&
            std::equal(n.begin(), n.end(), name.begin(), [](char x, char y) { return x == (y >= 'a' && y <= 'z' ? y - 32 : y); }))
            return a;
    }
    return std::nullopt;
}

CONVEYOR_DECL std::size_t checksum_size(checksum_algorithm a) noexcept
{
    switch (a) {
    case checksum_algorithm::crc64nvme: return 8;
    case checksum_algorithm::crc32c:
    case checksum_algorithm::crc32: return 4;
    case checksum_algorithm::sha1: return 20;
    case checksum_algorithm::sha256: return 32;
    }
    return 0;
}

CONVEYOR_DECL std::uint64_t crc64nvme(std::span<const std::byte> data, std::uint64_t crc) noexcept
{
    const auto* p = reinterpret_cast<const unsigned char*>(data.data());
    std::uint64_t r = ~crc;
#if CONVEYOR_CRC64_CLMUL
    if (data.size() >= 1024 && detail::cpu_has_vpclmul()) return ~detail::crc64nvme_vpclmul_update(r, p, data.size());
    if (data.size() >= 64 && detail::cpu_has_clmul()) return ~detail::crc64nvme_clmul_update(r, p, data.size());
#endif
    return ~detail::crc64nvme_tables_update(r, p, data.size());
}

CONVEYOR_DECL std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t crc) noexcept
{
    // ISA-L's crc32_iscsi takes and returns the register (no final xor) and an int length.
    auto* p = const_cast<unsigned char*>(reinterpret_cast<const unsigned char*>(data.data()));
    unsigned r = ~crc;
    for (std::size_t left = data.size(); left > 0;) {
        const int n = static_cast<int>(std::min<std::size_t>(left, 1u << 30));
        r = crc32_iscsi(p, n, r);
        p += n;
        left -= static_cast<std::size_t>(n);
    }
    return ~r;
}

CONVEYOR_DECL std::uint32_t crc32(std::span<const std::byte> data, std::uint32_t crc) noexcept
{
    // ISA-L's crc32_gzip_refl is zlib's crc32 (the same value and continuation), folded with
    // carry-less multiplication: several times zlib's speed.
    const auto* p = reinterpret_cast<const unsigned char*>(data.data());
    std::uint32_t r = crc;
    for (std::size_t left = data.size(); left > 0;) {
        const auto n = std::min<std::size_t>(left, std::size_t{1} << 30);
        r = crc32_gzip_refl(r, const_cast<unsigned char*>(p), n);
        p += n;
        left -= n;
    }
    return r;
}

CONVEYOR_DECL std::uint64_t crc_combine(checksum_algorithm algorithm, std::uint64_t crc_a, std::uint64_t crc_b, std::uint64_t length_b) noexcept
{
    return detail::crc_of(algorithm).combine(crc_a, crc_b, length_b);
}

CONVEYOR_DECL std::string base64_encode(std::span<const unsigned char> bytes)
{
    static constexpr char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve((bytes.size() + 2) / 3 * 4);
    std::size_t i = 0;
    for (; i + 3 <= bytes.size(); i += 3) {
        const unsigned v = (bytes[i] << 16) | (bytes[i + 1] << 8) | bytes[i + 2];
        out += digits[v >> 18];
        out += digits[(v >> 12) & 63];
        out += digits[(v >> 6) & 63];
        out += digits[v & 63];
    }
    if (const std::size_t rest = bytes.size() - i; rest > 0) {
        const unsigned v = (bytes[i] << 16) | (rest == 2 ? bytes[i + 1] << 8 : 0);
        out += digits[v >> 18];
        out += digits[(v >> 12) & 63];
        out += rest == 2 ? digits[(v >> 6) & 63] : '=';
        out += '=';
    }
    return out;
}

CONVEYOR_DECL std::optional<std::string> base64_decode(std::string_view text)
{
    while (!text.empty() && text.back() == '=') text.remove_suffix(1);
    if (text.size() % 4 == 1) return std::nullopt;
    std::string out;
    out.reserve(text.size() * 3 / 4);
    unsigned acc = 0, bits = 0;
    for (char c : text) {
        unsigned v;
        if (c >= 'A' && c <= 'Z') v = static_cast<unsigned>(c - 'A');
        else if (c >= 'a' && c <= 'z') v = static_cast<unsigned>(c - 'a') + 26;
        else if (c >= '0' && c <= '9') v = static_cast<unsigned>(c - '0') + 52;
        else if (c == '+') v = 62;
        else if (c == '/') v = 63;
        else return std::nullopt;
        acc = (acc << 6) | v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out += static_cast<char>((acc >> bits) & 0xff);
        }
    }
    return out;
}

CONVEYOR_DECL void checksum::md_ctx_deleter::operator()(evp_md_ctx_st* ctx) const noexcept { EVP_MD_CTX_free(ctx); }

CONVEYOR_DECL checksum::checksum(checksum_algorithm a) : algorithm_(a)
{
    if (!checksum_combines(a)) {
        md_.reset(EVP_MD_CTX_new());
        if (!md_ || EVP_DigestInit_ex(md_.get(), detail::digest_md(a), nullptr) != 1)
            throw std::runtime_error("OpenSSL could not start a " + std::string(checksum_name(a)) + " digest");
    }
}

CONVEYOR_DECL checksum::checksum(checksum&&) noexcept = default;
CONVEYOR_DECL checksum& checksum::operator=(checksum&&) noexcept = default;
CONVEYOR_DECL checksum::~checksum() = default;

CONVEYOR_DECL void checksum::update(std::span<const std::byte> data)
{
    size_ += data.size();
    switch (algorithm_) {
    case checksum_algorithm::crc64nvme: crc_ = crc64nvme(data, crc_); return;
    case checksum_algorithm::crc32c: crc_ = crc32c(data, static_cast<std::uint32_t>(crc_)); return;
    case checksum_algorithm::crc32: crc_ = crc32(data, static_cast<std::uint32_t>(crc_)); return;
    default:
        if (EVP_DigestUpdate(md_.get(), data.data(), data.size()) != 1)
            throw std::runtime_error("OpenSSL failed updating a " + std::string(checksum_name(algorithm_)) + " digest");
    }
}

CONVEYOR_DECL void checksum::combine(std::uint64_t crc_of_next, std::uint64_t length)
{
    if (!checksum_combines(algorithm_))
        throw std::logic_error(std::string(checksum_name(algorithm_)) + " values do not combine: only the CRCs do");
    crc_ = crc_combine(algorithm_, crc_, crc_of_next, length);
    size_ += length;
}

CONVEYOR_DECL std::string checksum::digest() const
{
    if (checksum_combines(algorithm_)) {
        const std::size_t n = checksum_size(algorithm_);
        std::string out(n, '\0');
        for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<char>((crc_ >> (8 * (n - 1 - i))) & 0xff);
        return out;
    }
    std::unique_ptr<evp_md_ctx_st, md_ctx_deleter> copy(EVP_MD_CTX_new());
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    if (!copy || EVP_MD_CTX_copy_ex(copy.get(), md_.get()) != 1 || EVP_DigestFinal_ex(copy.get(), out, &n) != 1)
        throw std::runtime_error("OpenSSL failed finishing a " + std::string(checksum_name(algorithm_)) + " digest");
    return std::string(reinterpret_cast<const char*>(out), n);
}

CONVEYOR_DECL std::string checksum::base64() const
{
    const std::string d = digest();
    return base64_encode({reinterpret_cast<const unsigned char*>(d.data()), d.size()});
}

} // namespace conveyor

#endif
