// conveyor/core/checksum.hpp — the checksums object stores keep with an object (S3's
// CRC64NVME, CRC32C, CRC32, SHA-1, SHA-256): computed in pieces, combined across parts,
// and written and read in the base64 form of S3's `x-amz-checksum-*` headers.
#ifndef CONVEYOR_CORE_CHECKSUM_HPP
#define CONVEYOR_CORE_CHECKSUM_HPP

#include <conveyor/detail/config.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

struct evp_md_ctx_st; // OpenSSL's EVP_MD_CTX

namespace conveyor {

/// The checksum algorithms of S3 (and of the AWS SDKs' flexible checksums).
enum class checksum_algorithm : std::uint8_t {
    crc64nvme, ///< CRC-64/NVME (S3's default for new objects)
    crc32c,    ///< CRC-32C (Castagnoli, iSCSI)
    crc32,     ///< CRC-32 (ISO-HDLC, zlib's)
    sha1,
    sha256,
};

/// "CRC64NVME", "CRC32C", "CRC32", "SHA1", "SHA256": S3's names (`x-amz-checksum-algorithm`).
CONVEYOR_DECL std::string_view checksum_name(checksum_algorithm a) noexcept;
/// "crc64nvme", ..., "sha256": the suffix of the `x-amz-checksum-<name>` header.
CONVEYOR_DECL std::string_view checksum_header_suffix(checksum_algorithm a) noexcept;
/// The algorithm of S3's name (case-insensitive), if it is one.
CONVEYOR_DECL std::optional<checksum_algorithm> parse_checksum_name(std::string_view name) noexcept;
/// Bytes of the algorithm's digest: 8, 4, 4, 20, 32.
CONVEYOR_DECL std::size_t checksum_size(checksum_algorithm a) noexcept;
/// True for the CRCs, whose values over consecutive pieces combine (`checksum::combine`).
inline bool checksum_combines(checksum_algorithm a) noexcept { return a <= checksum_algorithm::crc32; }

/** CRC-64/NVME of `data` continuing `crc`, the value of the bytes before it (0 to start):
    `crc64nvme(b, crc64nvme(a)) == crc64nvme(a ++ b)`. Check value: "123456789" gives
    0xae8b14860a799888. Carry-less multiplication where the CPU has it, tables otherwise. */
CONVEYOR_DECL std::uint64_t crc64nvme(std::span<const std::byte> data, std::uint64_t crc = 0) noexcept;
/// CRC-32C (ISA-L's `crc32_iscsi`), continuing `crc` as `crc64nvme` does. "123456789": 0xe3069283.
CONVEYOR_DECL std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t crc = 0) noexcept;
/// CRC-32 (zlib's `crc32`, computed by ISA-L's `crc32_gzip_refl`), continuing `crc` as `crc64nvme` does. "123456789": 0xcbf43926.
CONVEYOR_DECL std::uint32_t crc32(std::span<const std::byte> data, std::uint32_t crc = 0) noexcept;

/** The CRC of `a ++ b` from the CRCs of `a` and `b` and the length of `b` (zlib's
    `crc32_combine`, for any of the three CRCs): parts checked apart, in parallel, make the
    whole object's value. `algorithm` must be a CRC. */
CONVEYOR_DECL std::uint64_t crc_combine(checksum_algorithm algorithm, std::uint64_t crc_a, std::uint64_t crc_b, std::uint64_t length_b) noexcept;

/// Standard base64 (RFC 4648, padded), as S3 writes checksums.
CONVEYOR_DECL std::string base64_encode(std::span<const unsigned char> bytes);
/// The bytes of padded or unpadded standard base64; nothing when `text` is not base64.
CONVEYOR_DECL std::optional<std::string> base64_decode(std::string_view text);

/** A checksum computed over bytes given in order, in any number of pieces.

    @par Thread Safety
    Distinct objects: safe. Shared objects: unsafe.
*/
class checksum {
public:
    CONVEYOR_DECL explicit checksum(checksum_algorithm a);
    CONVEYOR_DECL checksum(checksum&&) noexcept;
    CONVEYOR_DECL checksum& operator=(checksum&&) noexcept;
    CONVEYOR_DECL ~checksum();

    checksum_algorithm algorithm() const noexcept { return algorithm_; }

    /// Adds the next bytes.
    CONVEYOR_DECL void update(std::span<const std::byte> data);
    /// Bytes added so far.
    std::uint64_t size() const noexcept { return size_; }

    /// The CRC so far (CRCs only; 0 for the others).
    std::uint64_t crc() const noexcept { return crc_; }
    /// Appends a CRC computed apart over the `length` bytes that follow these (CRCs only).
    CONVEYOR_DECL void combine(std::uint64_t crc_of_next, std::uint64_t length);

    /// The digest of the bytes so far, big-endian for the CRCs (as S3 sends it). Updating
    /// after it goes on from where it was.
    CONVEYOR_DECL std::string digest() const;
    /// `digest()` in base64: the value of S3's `x-amz-checksum-<name>` header.
    CONVEYOR_DECL std::string base64() const;

private:
    struct md_ctx_deleter {
        CONVEYOR_DECL void operator()(evp_md_ctx_st* ctx) const noexcept;
    };

    checksum_algorithm algorithm_;
    std::uint64_t crc_ = 0;
    std::uint64_t size_ = 0;
    std::unique_ptr<evp_md_ctx_st, md_ctx_deleter> md_;
};

} // namespace conveyor

#if CONVEYOR_HEADER_ONLY
#include <conveyor/core/impl/checksum.ipp>
#endif

#endif
