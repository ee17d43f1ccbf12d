#pragma once

// The NVMe tier's on-disk record: a 4 KiB header, then the block's bytes padded with zeros to a multiple
// of 4 KiB, written with one O_DIRECT write from the block's own buffer (store::block_buffer keeps the
// header area in front of the value for this). docs/kv.md has the layout.
//
// The header's CRC32C covers the segment's random nonce (in its file name), so bytes that look like a
// record inside a stored value (a block that is itself a segment file) never pass as one in another
// segment; the value's CRC32C is checked on every read.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "store/object.h"

namespace fjord::kv {

constexpr std::uint32_t record_magic = 0x31564b46;  // "FKV1"
constexpr std::size_t record_header_bytes = 4096;
constexpr std::uint32_t record_flag_tombstone = 1;  // a delete: the key is absent from here on

struct record_header {
    std::uint64_t value_bytes = 0;
    std::uint32_t value_crc = 0;
    std::uint32_t flags = 0;
    std::int64_t created_ms = 0;
    std::string key;
    store::object_record meta;  // what S3 returns for the block (ETag, content type, headers)
};

// The bytes a record with this many value bytes occupies on disk.
constexpr std::uint64_t record_bytes(std::uint64_t value_bytes) {
    return record_header_bytes + (value_bytes + 4095) / 4096 * 4096;
}

// Whether a record's header can hold this key and metadata.
bool header_fits(const std::string& key, const store::object_record& meta);
// Writes the header into `area` (record_header_bytes long). False when the key and metadata do not fit.
bool encode_header(std::span<std::byte> area, const record_header& h, std::uint64_t nonce);
// The header at `area`, or nullopt when it is not a whole, valid header of a segment with this nonce.
std::optional<record_header> decode_header(std::span<const std::byte> area, std::uint64_t nonce);

}  // namespace fjord::kv
