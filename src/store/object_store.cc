#include "store/object_store.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <vector>

#include "io/block_memory.h"

namespace fjord::store {

std::shared_ptr<block_buffer> block_buffer::allocate(std::size_t value_bytes) {
    const std::size_t record_bytes = record_bytes_for(value_bytes);
    const io::block_memory m = io::take_block_memory(io::block_allocation_bytes(record_bytes));
    // The padding after the value is written to disk: zeros, never stale memory.
    std::memset(m.data + header_bytes + value_bytes, 0, record_bytes - header_bytes - value_bytes);
    return std::shared_ptr<block_buffer>(
        new block_buffer(m.data, m.mapped, value_bytes, record_bytes));
}

block_buffer::~block_buffer() {
    io::give_block_memory({_base, _mapped}, io::block_allocation_bytes(_record_bytes));
}

std::optional<bucket_info> object_store::find_bucket(const std::string& name) const {
    for (auto& info : list_buckets())
        if (info.name == name) return info;
    return std::nullopt;
}

base::result<object_record> assemble_upload(const upload_record& upload, upload_completion chosen) {
    object_record object = std::move(chosen.record);
    object.segments.clear();
    object.part_checksums.clear();
    object.size_bytes = 0;
    for (const std::uint32_t number : chosen.parts) {
        auto part = upload.parts.find(number);
        if (part == upload.parts.end())
            return base::fail(
                base::errc::invalid_part,
                "upload " + upload.upload_id + " has no part " + std::to_string(number));
        object.segments.push_back(part->second.data);
        object.part_checksums.push_back(part->second.checksum_value);
        object.size_bytes += part->second.size_bytes();
    }
    return object;
}

bool object_store::bucket_has_attribute(const std::string& bucket, const std::string& name) const {
    auto info = find_bucket(bucket);
    return info && info->attributes.count(name);
}

}  // namespace fjord::store
