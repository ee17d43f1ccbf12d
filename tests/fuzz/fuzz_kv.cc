// Fuzzes the KV tier's two decoders of untrusted bytes: the batch API's request table
// (base::kv_wire::decode_table, bytes from any authenticated client) and the NVMe record header
// (kv::decode_header, bytes read back from a segment that may be torn or corrupt).
//
// Input: byte 0 picks the decoder (even: the table, with byte 1 as the op and bytes 2-3 as the entry
// count; odd: a record header, the rest padded with zeros to 4 KiB). Invariants checked:
//   - a table that decodes re-encodes to exactly the bytes decoded, and its keys are 1..1024 bytes;
//   - a header that decodes, encoded again with the same nonce, reproduces the fields and body decoded
//     (so nothing decoded was invented), and a header never decodes under another nonce.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/kv_wire.h"
#include "fuzz_check.h"
#include "kv/record.h"

namespace {

using namespace fjord;
namespace wire = base::kv_wire;

void check_table(const std::uint8_t* data, std::size_t size) {
    if (size < 4) return;
    const auto o = static_cast<wire::op>(1 + data[1] % 3);
    const std::uint32_t count = (data[2] | (data[3] << 8)) % 64;
    std::span<const std::byte> table(reinterpret_cast<const std::byte*>(data + 4), size - 4);
    std::vector<wire::entry> entries;
    if (wire::decode_table(table, count, o, entries)) return;  // refused, with a message
    FUZZ_CHECK(entries.size() == count);
    for (const auto& e : entries) FUZZ_CHECK(!e.key.empty() && e.key.size() <= wire::max_key_bytes);
    auto again = wire::encode_request(o, entries);
    FUZZ_CHECK(again.size() == wire::header_bytes + table.size());
    FUZZ_CHECK(std::memcmp(again.data() + wire::header_bytes, table.data(), table.size()) == 0);
}

void check_header(const std::uint8_t* data, std::size_t size) {
    constexpr std::uint64_t nonce = 0x1234567890abcdefULL;
    std::vector<std::byte> area(kv::record_header_bytes);
    std::memcpy(area.data(), data + 1, std::min(size - 1, area.size()));
    auto h = kv::decode_header(area, nonce);
    if (!h) return;
    FUZZ_CHECK(!kv::decode_header(area, nonce ^ 1));
    std::vector<std::byte> again(kv::record_header_bytes);
    FUZZ_CHECK(kv::encode_header(again, *h, nonce));
    auto back = kv::decode_header(again, nonce);
    FUZZ_CHECK(back && back->key == h->key && back->value_bytes == h->value_bytes &&
               back->value_crc == h->value_crc && back->flags == h->flags &&
               back->created_ms == h->created_ms && back->meta.etag == h->meta.etag);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    if (data[0] % 2 == 0)
        check_table(data, size);
    else
        check_header(data, size);
    return 0;
}
