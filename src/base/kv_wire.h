#pragma once

// The KV batch API's wire format (docs/kv.md, "Batch API"), shared by the server (s3/kv_batch.cc) and
// the client (client/kv_client.cc). A batch is one HTTP request: POST /<bucket>?fjord-batch=<op>, SigV4
// signed like any S3 request, with a binary body; all integers little-endian.
//
// Request:  header {u32 magic "FJKQ", u16 version 1, u16 op, u32 count, u32 table_bytes}
//           count entries {u16 key_bytes, u16 reserved, u32 value_crc32c, u64 value_bytes, key}
//           (table_bytes in all), then for put the values, in order, back to back.
// Response: header {u32 magic "FJKR", u16 version 1, u16 op, u32 count, u32 leading_hits}, then
//   exists: count × {u8 status, 7 reserved, u64 size}
//   get:    count × ({u8 status, 3 reserved, u32 value_crc32c, u64 size}, then size bytes)
//   put:    count × {u8 status, 3 reserved, u32 error code (base/error.h numbers, 0 when stored)}
// leading_hits is the number of keys from the first that are present (prefix lookup).
//
// The request carries the signed header x-fjord-batch-sha256: the lower-case hex SHA-256 of its header
// and table, which the server checks before it acts, so a captured request cannot be replayed with
// another key list. A put's values are sent unsigned (UNSIGNED-PAYLOAD: a SHA-256 of a gigabyte of
// blocks would cost more than the transfer), each checked against its CRC32C in the signed table.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fjord::base::kv_wire {

constexpr std::uint32_t request_magic = 0x514b4a46;   // "FJKQ"
constexpr std::uint32_t response_magic = 0x524b4a46;  // "FJKR"
constexpr std::uint16_t version = 1;
constexpr std::size_t header_bytes = 16;
constexpr std::size_t entry_fixed_bytes = 16;
constexpr std::size_t exists_result_bytes = 16;
constexpr std::size_t get_result_bytes = 16;
constexpr std::size_t put_result_bytes = 8;
constexpr std::uint32_t max_keys = 10'000;
constexpr std::size_t max_key_bytes = 1024;
constexpr std::uint32_t max_table_bytes = 4 * 1024 * 1024;
constexpr std::string_view head_sha256_header = "x-fjord-batch-sha256";

enum class op : std::uint16_t { exists = 1, get = 2, put = 3 };
std::optional<op> op_named(std::string_view name);  // "exists", "get", "put"
std::string_view op_name(op o);

// Per-key status: for exists/get, present / absent / lost (present when counted, gone before it was
// read: its bytes are zeros); for put, stored / kept (it existed) / failed.
enum class status : std::uint8_t { ok = 0, absent = 1, failed = 2 };

struct entry {
    std::string key;
    std::uint32_t value_crc = 0;
    std::uint64_t value_bytes = 0;
};

struct frame_header {
    std::uint32_t magic = 0;
    std::uint16_t version = 0;
    std::uint16_t op = 0;
    std::uint32_t count = 0;
    std::uint32_t fourth = 0;  // table_bytes (request) or leading_hits (response)
};

inline void put16(std::byte* p, std::uint16_t v) { std::memcpy(p, &v, 2); }
inline void put32(std::byte* p, std::uint32_t v) { std::memcpy(p, &v, 4); }
inline void put64(std::byte* p, std::uint64_t v) { std::memcpy(p, &v, 8); }
inline std::uint16_t get16(const std::byte* p) {
    std::uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}
inline std::uint32_t get32(const std::byte* p) {
    std::uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}
inline std::uint64_t get64(const std::byte* p) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
}

void encode_header(std::byte* out, const frame_header& h);
frame_header decode_header(const std::byte* in);

// The request header and table for these entries (values not included).
std::vector<std::byte> encode_request(op o, const std::vector<entry>& entries);
// Parses a request table of `count` entries; an error message when it is malformed (key length 0 or
// over max_key_bytes, a reserved field not zero, bytes left over or missing, a value size given for
// exists/get).
std::optional<std::string> decode_table(std::span<const std::byte> table, std::uint32_t count, op o,
                                        std::vector<entry>& out);

}  // namespace fjord::base::kv_wire
