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

io::task<base::result<std::optional<bucket_info>>> object_store::find_bucket_now(std::string name) {
    co_return find_bucket(name);
}

bool object_store::bucket_has_attribute(const std::string& bucket, const std::string& name) const {
    auto info = find_bucket(bucket);
    return info && info->attributes.count(name);
}

io::task<base::result<void>> object_store::set_bucket_attribute(std::string bucket, std::string,
                                                                std::optional<std::string>) {
    co_return base::fail(base::errc::not_implemented,
                         "bucket " + bucket + " keeps no configuration in this store");
}

namespace {
base::failure no_versions(const std::string& bucket) {
    return base::fail(base::errc::not_implemented,
                      "bucket " + bucket + " keeps no versions in this store");
}
}  // namespace

io::task<base::result<object_record>> object_store::head_version(std::string bucket, std::string,
                                                                 std::string) {
    co_return no_versions(bucket);
}

io::task<base::result<object_record>> object_store::get_version(std::string bucket, std::string,
                                                                std::string, read_planner,
                                                                byte_sink&) {
    co_return no_versions(bucket);
}

io::task<base::result<object_record>> object_store::update_version(std::string bucket, std::string,
                                                                   std::string, record_editor) {
    co_return no_versions(bucket);
}

io::task<base::result<std::optional<object_record>>> object_store::remove_version(
    std::string bucket, std::string, std::string) {
    co_return no_versions(bucket);
}

io::task<base::result<list_page>> object_store::list_versions(list_request request) {
    co_return no_versions(request.bucket);
}

io::task<base::result<void>> object_store::create_kv_bucket(std::string name, kv_bucket_options) {
    co_return base::fail(base::errc::not_implemented,
                         "this store has no KV tier (bucket " + name + ")");
}

}  // namespace fjord::store
