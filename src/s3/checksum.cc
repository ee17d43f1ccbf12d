#include "s3/checksum.h"

#include "base/checksum.h"
#include "base/encoding.h"

namespace fjord::s3 {

std::optional<checksum_algorithm> parse_checksum_algorithm(std::string_view text) {
    std::string name = base::to_lower(text);
    if (name.starts_with("x-amz-checksum-")) name = name.substr(15);
    if (name == "crc32") return checksum_algorithm::crc32;
    if (name == "crc32c") return checksum_algorithm::crc32c;
    if (name == "crc64nvme") return checksum_algorithm::crc64nvme;
    if (name == "sha1") return checksum_algorithm::sha1;
    if (name == "sha256") return checksum_algorithm::sha256;
    return std::nullopt;
}

std::string_view checksum_name(checksum_algorithm a) {
    switch (a) {
        case checksum_algorithm::crc32: return "CRC32";
        case checksum_algorithm::crc32c: return "CRC32C";
        case checksum_algorithm::crc64nvme: return "CRC64NVME";
        case checksum_algorithm::sha1: return "SHA1";
        case checksum_algorithm::sha256: return "SHA256";
        case checksum_algorithm::none: break;
    }
    return "";
}

std::string checksum_header_name(checksum_algorithm a) {
    return "x-amz-checksum-" + base::to_lower(checksum_name(a));
}

running_checksum::running_checksum(checksum_algorithm a) : _algorithm(a) {
    if (a == checksum_algorithm::sha1) _digest.emplace(base::digest_kind::sha1);
    if (a == checksum_algorithm::sha256) _digest.emplace(base::digest_kind::sha256);
}

void running_checksum::update(std::span<const std::byte> data) {
    switch (_algorithm) {
        case checksum_algorithm::crc32:
            _crc = base::crc32(data, static_cast<std::uint32_t>(_crc));
            break;
        case checksum_algorithm::crc32c:
            _crc = base::crc32c(data, static_cast<std::uint32_t>(_crc));
            break;
        case checksum_algorithm::crc64nvme: _crc = base::crc64nvme(data, _crc); break;
        case checksum_algorithm::sha1:
        case checksum_algorithm::sha256: _digest->update(data); break;
        case checksum_algorithm::none: break;
    }
}

std::string running_checksum::finish_base64() {
    std::string raw;
    if (_algorithm == checksum_algorithm::crc32 || _algorithm == checksum_algorithm::crc32c) {
        for (int shift = 24; shift >= 0; shift -= 8)
            raw.push_back(static_cast<char>((_crc >> shift) & 0xff));
    } else if (_algorithm == checksum_algorithm::crc64nvme) {
        for (int shift = 56; shift >= 0; shift -= 8)
            raw.push_back(static_cast<char>((_crc >> shift) & 0xff));
    } else if (_digest) {
        raw = _digest->finish();
    }
    return base::base64_encode(raw);
}

}  // namespace fjord::s3
