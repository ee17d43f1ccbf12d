#include "base/kv_wire.h"

namespace fjord::base::kv_wire {

std::optional<op> op_named(std::string_view name) {
    if (name == "exists") return op::exists;
    if (name == "get") return op::get;
    if (name == "put") return op::put;
    return std::nullopt;
}

std::string_view op_name(op o) {
    switch (o) {
        case op::exists: return "exists";
        case op::get: return "get";
        case op::put: return "put";
    }
    return "?";
}

void encode_header(std::byte* out, const frame_header& h) {
    put32(out, h.magic);
    put16(out + 4, h.version);
    put16(out + 6, h.op);
    put32(out + 8, h.count);
    put32(out + 12, h.fourth);
}

frame_header decode_header(const std::byte* in) {
    return {get32(in), get16(in + 4), get16(in + 6), get32(in + 8), get32(in + 12)};
}

std::vector<std::byte> encode_request(op o, const std::vector<entry>& entries) {
    std::size_t table = 0;
    for (const auto& e : entries) table += entry_fixed_bytes + e.key.size();
    std::vector<std::byte> out(header_bytes + table);
    encode_header(out.data(),
                  {request_magic, version, static_cast<std::uint16_t>(o),
                   static_cast<std::uint32_t>(entries.size()), static_cast<std::uint32_t>(table)});
    std::byte* p = out.data() + header_bytes;
    for (const auto& e : entries) {
        put16(p, static_cast<std::uint16_t>(e.key.size()));
        put16(p + 2, 0);
        put32(p + 4, e.value_crc);
        put64(p + 8, e.value_bytes);
        std::memcpy(p + entry_fixed_bytes, e.key.data(), e.key.size());
        p += entry_fixed_bytes + e.key.size();
    }
    return out;
}

std::optional<std::string> decode_table(std::span<const std::byte> table, std::uint32_t count, op o,
                                        std::vector<entry>& out) {
    out.clear();
    out.reserve(count);
    std::size_t at = 0;
    for (std::uint32_t i = 0; i < count; ++i) {
        if (table.size() - at < entry_fixed_bytes)
            return "entry " + std::to_string(i) + " is cut short";
        const std::byte* p = table.data() + at;
        std::size_t key_bytes = get16(p);
        if (key_bytes == 0 || key_bytes > max_key_bytes)
            return "entry " + std::to_string(i) + " has a key of " + std::to_string(key_bytes) +
                   " bytes (1 to " + std::to_string(max_key_bytes) + " allowed)";
        if (table.size() - at - entry_fixed_bytes < key_bytes)
            return "entry " + std::to_string(i) + " is cut short";
        if (get16(p + 2) != 0)  // reserved: zero now, so that a later version may give it a meaning
            return "entry " + std::to_string(i) + " has its reserved field set";
        entry e;
        e.value_crc = get32(p + 4);
        e.value_bytes = get64(p + 8);
        if (o != op::put && (e.value_bytes != 0 || e.value_crc != 0))
            return "entry " + std::to_string(i) + " gives a value size in a batch " +
                   std::string(op_name(o));
        e.key.assign(reinterpret_cast<const char*>(p + entry_fixed_bytes), key_bytes);
        out.push_back(std::move(e));
        at += entry_fixed_bytes + key_bytes;
    }
    if (at != table.size()) return "the table has bytes after its last entry";
    return std::nullopt;
}

}  // namespace fjord::base::kv_wire
