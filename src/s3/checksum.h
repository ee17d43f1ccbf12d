#pragma once

// The S3 "flexible checksums" (x-amz-checksum-*): one running checksum over an object's bytes, in the
// algorithm the client chose, with the value encoded as S3 sends it (base64 of the big-endian CRC or of
// the raw digest).

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "base/digest.h"

namespace fjord::s3 {

enum class checksum_algorithm { none, crc32, crc32c, crc64nvme, sha1, sha256 };

// "CRC32" / "crc32" / "x-amz-checksum-crc32" -> crc32; nullopt if unknown.
std::optional<checksum_algorithm> parse_checksum_algorithm(std::string_view text);
std::string_view checksum_name(checksum_algorithm a);    // "CRC32"
std::string checksum_header_name(checksum_algorithm a);  // "x-amz-checksum-crc32"

class running_checksum {
public:
    explicit running_checksum(checksum_algorithm a);
    void update(std::span<const std::byte> data);
    std::string finish_base64();
    checksum_algorithm algorithm() const { return _algorithm; }

private:
    checksum_algorithm _algorithm;
    std::uint64_t _crc = 0;
    std::optional<base::digest> _digest;
};

}  // namespace fjord::s3
