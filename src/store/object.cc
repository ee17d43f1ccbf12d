#include "store/object.h"

#include <cstdio>

namespace fjord::store {

std::string object_id::hex() const {
    char buf[33];
    std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(hi),
                  static_cast<unsigned long long>(lo));
    return buf;
}

void encode(encoder& e, const object_record& r) {
    e.u64(r.size_bytes);
    e.i64(r.modified_ms);
    e.str(r.etag);
    e.str(r.content_type);
    e.u32(static_cast<std::uint32_t>(r.headers.size()));
    for (const auto& [name, value] : r.headers) {
        e.str(name);
        e.str(value);
    }
    e.str(r.checksum_algorithm);
    e.str(r.checksum_value);
    e.u32(static_cast<std::uint32_t>(r.segments.size()));
    for (const auto& s : r.segments) {
        e.u32(s.drive);
        e.u64(s.id.hi);
        e.u64(s.id.lo);
        e.u64(s.size_bytes);
        e.u32(s.block_bytes);
        e.u32(s.table_crc);
    }
    e.u32(static_cast<std::uint32_t>(r.tags.size()));
    for (const auto& [key, value] : r.tags) {
        e.str(key);
        e.str(value);
    }
    e.u32(static_cast<std::uint32_t>(r.part_checksums.size()));
    for (const auto& c : r.part_checksums) e.str(c);
    e.str(r.inline_data);
    e.str(r.version_id);
    e.u8(r.delete_marker ? 1 : 0);
    // Most records have neither: they end at the flag. An upload id comes after the ACL, empty or not.
    if (!r.acl.empty() || !r.upload_id.empty()) e.str(r.acl);
    if (!r.upload_id.empty()) e.str(r.upload_id);
}

bool decode(decoder& d, object_record& r) {
    r.size_bytes = d.u64();
    r.modified_ms = d.i64();
    r.etag = d.str();
    r.content_type = d.str();
    std::uint32_t headers = d.u32();
    if (!d.ok() || headers > 4096) return false;
    r.headers.clear();
    for (std::uint32_t i = 0; i < headers && d.ok(); ++i) {
        std::string name = d.str();
        std::string value = d.str();
        r.headers.emplace_back(std::move(name), std::move(value));
    }
    r.checksum_algorithm = d.str();
    r.checksum_value = d.str();
    std::uint32_t segments = d.u32();
    if (!d.ok() || segments > 100000) return false;
    r.segments.clear();
    for (std::uint32_t i = 0; i < segments && d.ok(); ++i) {
        segment s;
        s.drive = d.u32();
        s.id.hi = d.u64();
        s.id.lo = d.u64();
        s.size_bytes = d.u64();
        s.block_bytes = d.u32();
        s.table_crc = d.u32();
        r.segments.push_back(s);
    }
    r.tags.clear();
    if (d.ok() && !d.at_end()) {  // records written before tags existed end here
        std::uint32_t tags = d.u32();
        if (!d.ok() || tags > 64) return false;
        for (std::uint32_t i = 0; i < tags && d.ok(); ++i) {
            std::string key = d.str();
            std::string value = d.str();
            r.tags.emplace_back(std::move(key), std::move(value));
        }
    }
    r.part_checksums.clear();
    if (d.ok() && !d.at_end()) {
        std::uint32_t parts = d.u32();
        if (!d.ok() || parts > 10000) return false;
        for (std::uint32_t i = 0; i < parts && d.ok(); ++i) r.part_checksums.push_back(d.str());
    }
    r.inline_data.clear();
    if (d.ok() && !d.at_end()) r.inline_data = d.str();  // records written before inlining end here
    if (!r.inline_data.empty() && (!r.segments.empty() || r.inline_data.size() != r.size_bytes))
        return false;
    r.version_id.clear();
    r.delete_marker = false;
    if (d.ok() && !d.at_end()) {  // records written before versioning end here
        r.version_id = d.str();
        const std::uint8_t flag = d.u8();
        if (flag > 1) return false;  // one encoding per record
        r.delete_marker = flag == 1;
        if (r.delete_marker && (r.size_bytes != 0 || !r.segments.empty())) return false;
    }
    r.acl.clear();
    r.upload_id.clear();
    if (d.ok() && !d.at_end()) {  // records without an ACL or an upload id end here
        r.acl = d.str();
        if (d.ok() && !d.at_end()) {
            r.upload_id = d.str();
            if (r.upload_id.empty()) return false;  // one encoding per record
        } else if (r.acl.empty()) {
            return false;  // one encoding per record: an empty ACL alone is left out
        }
    }
    return d.ok();
}

}  // namespace fjord::store
