#include "base/checksum.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/digest.h"
#include "base/encoding.h"

namespace fjord::base {
namespace {

std::span<const std::byte> bytes_of(const std::string& s) { return as_bytes(s.data(), s.size()); }

TEST(checksum, crc32c_check_value) { EXPECT_EQ(crc32c(bytes_of("123456789")), 0xE3069283u); }
TEST(checksum, crc32_check_value) { EXPECT_EQ(crc32(bytes_of("123456789")), 0xCBF43926u); }
TEST(checksum, crc64nvme_check_value) {
    EXPECT_EQ(crc64nvme(bytes_of("123456789")), 0xAE8B14860A799888ull);
}

TEST(checksum, crc64nvme_fast_paths_match_the_definition) {
    // Every length around the folding thresholds (256 bytes, 128-byte steps, 16-byte tail), several inits.
    std::string data(5000, '\0');
    std::uint64_t x = 0x9E3779B97F4A7C15ull;
    for (char& c : data) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c = static_cast<char>(x);
    }
    for (size_t len = 0; len <= 1200; ++len) {
        auto piece = as_bytes(data.data() + (len % 7), len);
        for (std::uint64_t init : {0ull, 0x0123456789ABCDEFull})
            ASSERT_EQ(crc64nvme(piece, init), crc64nvme_reference(piece, init)) << "length " << len;
    }
    auto whole = as_bytes(data.data(), data.size());
    EXPECT_EQ(crc64nvme(whole), crc64nvme_reference(whole));
}

TEST(checksum, crcs_continue_across_pieces) {
    std::string data(100000, '\0');
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + 3);
    auto whole = bytes_of(data);
    for (size_t cut : {0ul, 1ul, 7ul, 4096ul, 65537ul, data.size()}) {
        auto a = whole.subspan(0, cut), b = whole.subspan(cut);
        EXPECT_EQ(crc32c(b, crc32c(a)), crc32c(whole)) << cut;
        EXPECT_EQ(crc32(b, crc32(a)), crc32(whole)) << cut;
        EXPECT_EQ(crc64nvme(b, crc64nvme(a)), crc64nvme(whole)) << cut;
    }
}

TEST(checksum, combine_matches_crc_of_concatenation) {
    std::string data(300000, '\0');
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 13 + 5);
    auto whole = bytes_of(data);
    for (size_t cut : {0ul, 1ul, 4095ul, 150000ul, data.size() - 1}) {
        auto a = whole.subspan(0, cut), b = whole.subspan(cut);
        EXPECT_EQ(crc32_combine(crc32(a), crc32(b), b.size()), crc32(whole)) << cut;
        EXPECT_EQ(crc32c_combine(crc32c(a), crc32c(b), b.size()), crc32c(whole)) << cut;
        EXPECT_EQ(crc64nvme_combine(crc64nvme(a), crc64nvme(b), b.size()), crc64nvme(whole)) << cut;
    }
}

TEST(checksum, crc_detects_single_bit_flip) {
    std::string data(65536, 'x');
    std::uint32_t before = crc32c(bytes_of(data));
    data[12345] ^= 0x10;
    EXPECT_NE(crc32c(bytes_of(data)), before);
}

TEST(digest, known_values) {
    EXPECT_EQ(hex_encode(sha256("")),
              "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(hex_encode(md5("")), "d41d8cd98f00b204e9800998ecf8427e");
    digest d(digest_kind::sha1);
    d.update(std::string_view("abc"));
    EXPECT_EQ(hex_encode(d.finish()), "a9993e364706816aba3e25717850c26c9cd0d89d");
}

TEST(digest, constant_time_equal) {
    EXPECT_TRUE(constant_time_equal("abc", "abc"));
    EXPECT_FALSE(constant_time_equal("abc", "abd"));
    EXPECT_FALSE(constant_time_equal("abc", "abcd"));
}

}  // namespace
}  // namespace fjord::base
