#include "kv/record.h"

#include <cstring>

#include "base/assert.h"
#include "base/checksum.h"
#include "store/codec.h"

namespace fjord::kv {

namespace {

// Fixed fields: magic, header CRC, encoded length, flags, value bytes, value CRC, created.
constexpr std::size_t fixed_bytes = 4 + 4 + 4 + 4 + 8 + 4 + 8;

std::uint32_t header_crc(std::span<const std::byte> covered, std::uint64_t nonce) {
    std::uint32_t crc = base::crc32c(std::as_bytes(std::span(&nonce, 1)));
    return base::crc32c(covered, crc);
}

template <class T>
void put(std::byte* at, T v) {
    std::memcpy(at, &v, sizeof v);
}
template <class T>
T get(const std::byte* at) {
    T v;
    std::memcpy(&v, at, sizeof v);
    return v;
}

}  // namespace

bool header_fits(const std::string& key, const store::object_record& meta) {
    std::string body;
    store::encoder e(body);
    e.str(key);
    store::encode(e, meta);
    return fixed_bytes + body.size() <= record_header_bytes;
}

bool encode_header(std::span<std::byte> area, const record_header& h, std::uint64_t nonce) {
    FJORD_ASSERT(area.size() == record_header_bytes);
    std::string body;
    store::encoder e(body);
    e.str(h.key);
    store::encode(e, h.meta);
    if (fixed_bytes + body.size() > area.size()) return false;
    std::byte* p = area.data();
    put<std::uint32_t>(p, record_magic);
    put<std::uint32_t>(p + 8, static_cast<std::uint32_t>(body.size()));
    put<std::uint32_t>(p + 12, h.flags);
    put<std::uint64_t>(p + 16, h.value_bytes);
    put<std::uint32_t>(p + 24, h.value_crc);
    put<std::int64_t>(p + 28, h.created_ms);
    std::memcpy(p + fixed_bytes, body.data(), body.size());
    std::memset(p + fixed_bytes + body.size(), 0, area.size() - fixed_bytes - body.size());
    put<std::uint32_t>(p + 4, header_crc(area.subspan(8, fixed_bytes - 8 + body.size()), nonce));
    return true;
}

std::optional<record_header> decode_header(std::span<const std::byte> area, std::uint64_t nonce) {
    if (area.size() < record_header_bytes) return std::nullopt;
    const std::byte* p = area.data();
    if (get<std::uint32_t>(p) != record_magic) return std::nullopt;
    auto body_bytes = get<std::uint32_t>(p + 8);
    if (body_bytes > record_header_bytes - fixed_bytes) return std::nullopt;
    if (get<std::uint32_t>(p + 4) !=
        header_crc(area.subspan(8, fixed_bytes - 8 + body_bytes), nonce))
        return std::nullopt;
    record_header h;
    h.flags = get<std::uint32_t>(p + 12);
    h.value_bytes = get<std::uint64_t>(p + 16);
    h.value_crc = get<std::uint32_t>(p + 24);
    h.created_ms = get<std::int64_t>(p + 28);
    store::decoder d(std::string_view(reinterpret_cast<const char*>(p + fixed_bytes), body_bytes));
    h.key = d.str();
    if (!d.ok() || !store::decode(d, h.meta) || !d.ok()) return std::nullopt;
    return h;
}

}  // namespace fjord::kv
