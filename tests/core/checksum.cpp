// Tests of conveyor/core/checksum.hpp: S3's checksums, against published check values, an
// independent bitwise CRC, and (where Debian's python3-awscrt is installed) AWS's own CRCs.
#include "support.hpp"

#include <conveyor/core/checksum.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace cv = conveyor;

namespace {

std::span<const std::byte> bytes_of(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

std::string hex(std::string_view d)
{
    std::string out;
    char b[3];
    for (unsigned char c : d) {
        std::snprintf(b, sizeof b, "%02x", c);
        out += b;
    }
    return out;
}

/// CRC-64/NVME one bit at a time, straight from the definition (reflected, init and xorout
/// all ones): the reference the folded and table versions are held to.
std::uint64_t crc64nvme_bitwise(std::span<const std::byte> data)
{
    std::uint64_t r = ~std::uint64_t{0};
    for (std::byte b : data) {
        r ^= static_cast<std::uint64_t>(b);
        for (int i = 0; i < 8; ++i) r = (r & 1) != 0 ? (r >> 1) ^ 0x9a6c9329ac4bc9b5ULL : r >> 1;
    }
    return ~r;
}

std::vector<std::byte> random_bytes(std::mt19937_64& gen, std::size_t n)
{
    std::vector<std::byte> v(n);
    for (auto& b : v) b = static_cast<std::byte>(gen() & 0xff);
    return v;
}

} // namespace

TEST_CASE("each CRC gives its published check value and AWS's test vectors")
{
    CHECK(cv::crc64nvme(bytes_of("123456789")) == 0xae8b14860a799888ULL);
    CHECK(cv::crc32c(bytes_of("123456789")) == 0xe3069283u);
    CHECK(cv::crc32(bytes_of("123456789")) == 0xcbf43926u);
    CHECK(cv::crc64nvme(bytes_of("")) == 0);
    // AWS's common runtime tests: 32 zero bytes, bytes 0..31, "aaaaaaaaaa"; "Hello".
    std::vector<std::byte> zeros(32), counting(32);
    for (int i = 0; i < 32; ++i) counting[i] = static_cast<std::byte>(i);
    CHECK(cv::crc64nvme(zeros) == 0xcf3473434d4ecf3bULL);
    CHECK(cv::crc64nvme(counting) == 0xb9d9d4a8492cbd7fULL);
    CHECK(cv::crc64nvme(bytes_of("aaaaaaaaaa")) == 0x0c1a80036d65c555ULL);
    CHECK(cv::crc32(bytes_of("Hello")) == 4157704578u);
    CHECK(cv::crc32c(bytes_of("Hello")) == 2178485787u);
    // The NVM Express command set specification's 4 KiB blocks of zeros and of ones (the
    // folded path: 4096 bytes is 64 blocks of 64).
    std::vector<std::byte> block(4096);
    CHECK(cv::crc64nvme(block) == 0x6482d367eb22b64eULL);
    std::fill(block.begin(), block.end(), std::byte{0xff});
    CHECK(cv::crc64nvme(block) == 0xc0ddba7302eca3acULL);
}

TEST_CASE("CRC-64/NVME matches the bitwise definition at every length and split, folded or not")
{
    std::mt19937_64 gen(7);
    const auto data = random_bytes(gen, 5000);
    // Each path and its edges: tables (< 64 bytes), 128-bit folding (< 1 KiB), 512-bit
    // folding where the CPU has VPCLMULQDQ (256-byte steps, then 16-byte ones, then tables).
    for (std::size_t n : {0, 1, 7, 8, 15, 16, 17, 63, 64, 65, 79, 80, 127, 128, 129, 191, 255, 256, 1000, 1023, 1024, 1025, 1040,
                          1279, 1280, 1297, 2047, 2048, 4095, 4113, 4999, 5000}) {
        const std::span<const std::byte> s(data.data(), n);
        CAPTURE(n);
        CHECK(cv::crc64nvme(s) == crc64nvme_bitwise(s));
        // Continued from a first piece of each size: the register carries over.
        for (std::size_t cut : {std::size_t{0}, n / 3, n / 2, n}) {
            CAPTURE(cut);
            CHECK(cv::crc64nvme(s.subspan(cut), cv::crc64nvme(s.first(cut))) == crc64nvme_bitwise(s));
        }
    }
    // Misaligned starts.
    for (std::size_t off = 1; off < 16; ++off) {
        const std::span<const std::byte> s(data.data() + off, 1500);
        CHECK(cv::crc64nvme(s) == crc64nvme_bitwise(s));
    }
}

TEST_CASE("CRCs of parts combine into the CRC of the whole")
{
    std::mt19937_64 gen(11);
    const auto data = random_bytes(gen, 20000);
    const std::span<const std::byte> all(data);
    for (auto a : {cv::checksum_algorithm::crc64nvme, cv::checksum_algorithm::crc32c, cv::checksum_algorithm::crc32}) {
        CAPTURE(cv::checksum_name(a));
        cv::checksum whole(a);
        whole.update(all);
        for (std::size_t cut : {0, 1, 100, 8191, 10000, 19999, 20000}) {
            cv::checksum first(a), second(a);
            first.update(all.first(cut));
            second.update(all.subspan(cut));
            first.combine(second.crc(), second.size());
            CHECK(first.crc() == whole.crc());
            CHECK(first.size() == all.size());
            CHECK(first.base64() == whole.base64());
        }
        // Three unequal parts, combined left to right (as ranged parts of an object are).
        std::uint64_t crc = 0;
        bool started = false;
        for (auto [from, to] : {std::pair{0, 777}, {777, 15000}, {15000, 20000}}) {
            cv::checksum part(a);
            part.update(all.subspan(from, to - from));
            crc = started ? cv::crc_combine(a, crc, part.crc(), part.size()) : part.crc();
            started = true;
        }
        CHECK(crc == whole.crc());
    }
    cv::checksum sha(cv::checksum_algorithm::sha256);
    CHECK_THROWS_AS(sha.combine(1, 1), std::logic_error);
}

TEST_CASE("digests are big-endian bytes in base64, as S3's x-amz-checksum headers carry them")
{
    cv::checksum c(cv::checksum_algorithm::crc64nvme);
    c.update(bytes_of("Hello, World!\n"));
    CHECK(c.base64() == "SoXXbx67KpE=");
    cv::checksum s1(cv::checksum_algorithm::sha1), s256(cv::checksum_algorithm::sha256);
    s1.update(bytes_of("ab"));
    s1.update(bytes_of("c"));
    s256.update(bytes_of("abc"));
    CHECK(hex(s1.digest()) == "a9993e364706816aba3e25717850c26c9cd0d89d");
    CHECK(hex(s256.digest()) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    s256.update(bytes_of("")); // a digest does not end it
    CHECK(s256.base64() == "ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0=");
    cv::checksum crc32c(cv::checksum_algorithm::crc32c);
    crc32c.update(bytes_of("123456789"));
    CHECK(hex(crc32c.digest()) == "e3069283");
    CHECK(cv::checksum_size(cv::checksum_algorithm::sha1) == 20);
}

TEST_CASE("base64 round-trips every length and refuses what is not base64")
{
    std::mt19937_64 gen(3);
    for (std::size_t n = 0; n < 40; ++n) {
        auto v = random_bytes(gen, n);
        const std::string text = cv::base64_encode({reinterpret_cast<const unsigned char*>(v.data()), v.size()});
        CHECK(text.size() % 4 == 0);
        const auto back = cv::base64_decode(text);
        REQUIRE(back);
        CHECK(*back == std::string(reinterpret_cast<const char*>(v.data()), v.size()));
    }
    CHECK(cv::base64_decode("SoXXbx67KpE") == cv::base64_decode("SoXXbx67KpE="));
    CHECK_FALSE(cv::base64_decode("SoXX bx67"));
    CHECK_FALSE(cv::base64_decode("A"));
    CHECK_FALSE(cv::base64_decode("ab$d"));
}

TEST_CASE("names: S3's, case-insensitive, and the header suffixes")
{
    CHECK(cv::parse_checksum_name("crc64nvme") == cv::checksum_algorithm::crc64nvme);
    CHECK(cv::parse_checksum_name("CRC32C") == cv::checksum_algorithm::crc32c);
    CHECK(cv::parse_checksum_name("Sha256") == cv::checksum_algorithm::sha256);
    CHECK_FALSE(cv::parse_checksum_name("md5"));
    CHECK(cv::checksum_header_suffix(cv::checksum_algorithm::crc32) == "crc32");
}

TEST_CASE("CRC-32, CRC-32C and CRC-64/NVME agree with AWS's common runtime and an independent CRC-64 on random inputs")
{
    // Debian's python3-awscrt (0.16) has crc32 and crc32c; its crc64nvme came later, so the
    // CRC-64 is held to a bitwise one written in Python from the parameters alone.
    if (std::system("/usr/bin/python3 -c 'import awscrt.checksums' >/dev/null 2>&1") != 0) {
        MESSAGE("skipped: /usr/bin/python3 has no awscrt (Debian python3-awscrt; scripts/install-deps.sh installs it)");
        return;
    }
    const auto dir = std::filesystem::temp_directory_path() / ("conveyor-crc-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    std::mt19937_64 gen(2026);
    std::vector<std::vector<std::byte>> inputs;
    for (std::size_t n : {0, 1, 3, 64, 100, 1023, 4096, 65537, 300000}) {
        inputs.push_back(random_bytes(gen, n));
        std::ofstream(dir / std::to_string(inputs.size() - 1), std::ios::binary)
            .write(reinterpret_cast<const char*>(inputs.back().data()), static_cast<std::streamsize>(n));
    }
    const std::string script = R"PY(
import sys, os
from awscrt import checksums
def crc64nvme(data):
    r = 0xffffffffffffffff
    for b in data:
        r ^= b
        for _ in range(8):
            r = (r >> 1) ^ 0x9a6c9329ac4bc9b5 if r & 1 else r >> 1
    return r ^ 0xffffffffffffffff
d = sys.argv[1]
for i in range(int(sys.argv[2])):
    data = open(os.path.join(d, str(i)), 'rb').read()
    print(checksums.crc32(data), checksums.crc32c(data), crc64nvme(data))
)PY";
    std::ofstream(dir / "crc.py") << script;
    const std::string cmd = "/usr/bin/python3 '" + (dir / "crc.py").string() + "' '" + dir.string() + "' " + std::to_string(inputs.size());
    FILE* f = ::popen(cmd.c_str(), "r");
    REQUIRE(f != nullptr);
    std::string out;
    char buf[4096];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, f)) out.append(buf, n);
    CHECK(::pclose(f) == 0);
    std::filesystem::remove_all(dir);
    std::istringstream lines(out);
    for (const auto& in : inputs) {
        std::uint64_t c32 = 0, c32c = 0, c64 = 0;
        lines >> c32 >> c32c >> c64;
        REQUIRE(static_cast<bool>(lines));
        CAPTURE(in.size());
        CHECK(cv::crc32(in) == c32);
        CHECK(cv::crc32c(in) == c32c);
        CHECK(cv::crc64nvme(in) == c64);
    }
}
