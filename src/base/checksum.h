#pragma once

// Checksums used on the data path and in the S3 API.
// CRC32C and CRC32 come from ISA-L (hardware-accelerated folding). ISA-L 2.30, the version Debian 12 ships,
// has no CRC64/NVME (ISA-L calls it "rocksoft"), so crc64nvme is our own: PCLMULQDQ folding where the CPU
// has it, a slicing-by-8 table otherwise; see README.md. All functions take and return the "finished" CRC value, so a CRC can be continued:
//   crc = crc32c(part2, crc32c(part1));

#include <cstddef>
#include <cstdint>
#include <span>

namespace fjord::base {

std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t crc = 0);
std::uint32_t crc32(std::span<const std::byte> data, std::uint32_t crc = 0);
std::uint64_t crc64nvme(std::span<const std::byte> data, std::uint64_t crc = 0);
// Bit-at-a-time CRC64/NVME, the definition itself: for tests of the fast paths.
std::uint64_t crc64nvme_reference(std::span<const std::byte> data, std::uint64_t crc = 0);

// The CRC of A followed by B, from crc(A), crc(B) and len(B): how a multipart object's full-object CRC is
// built from its parts' CRCs without reading the data again.
std::uint32_t crc32_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t length_b);
std::uint32_t crc32c_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t length_b);
std::uint64_t crc64nvme_combine(std::uint64_t crc_a, std::uint64_t crc_b, std::uint64_t length_b);

inline std::span<const std::byte> as_bytes(const void* data, std::size_t size) {
    return {static_cast<const std::byte*>(data), size};
}

}  // namespace fjord::base
