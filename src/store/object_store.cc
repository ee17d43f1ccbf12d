#include "store/object_store.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <vector>

namespace fjord::store {

namespace {

// Block memory is kept for reuse by the thread that frees it, up to cache_limit_bytes a thread: a
// fresh allocation of megabytes is fresh pages, and faulting them in (and zeroing them, and charging
// them to the cgroup) cost a 2 MiB read from NVMe more CPU than the read's CRC32C (perf). Sizes are
// rounded up to 64 KiB, so one workload's blocks share a size.
constexpr std::size_t size_step_bytes = 64 * 1024;
constexpr std::size_t cache_limit_bytes = 64 * 1024 * 1024;

struct block_memory_cache {
    std::map<std::size_t, std::vector<void*>> free_by_size;
    std::size_t cached_bytes = 0;
    ~block_memory_cache() {
        for (auto& [size, list] : free_by_size)
            for (void* p : list) std::free(p);
    }
};

block_memory_cache& memory_cache() {
    thread_local block_memory_cache cache;
    return cache;
}

std::size_t allocation_bytes(std::size_t record_bytes) {
    return (record_bytes + size_step_bytes - 1) / size_step_bytes * size_step_bytes;
}

void* take_memory(std::size_t bytes) {
    auto& cache = memory_cache();
    if (auto it = cache.free_by_size.find(bytes);
        it != cache.free_by_size.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cache.cached_bytes -= bytes;
        return p;
    }
    void* p = std::aligned_alloc(4096, bytes);
    if (p == nullptr) throw std::bad_alloc();
    return p;
}

void give_memory(void* p, std::size_t bytes) {
    auto& cache = memory_cache();
    if (cache.cached_bytes + bytes > cache_limit_bytes) {
        std::free(p);
        return;
    }
    cache.free_by_size[bytes].push_back(p);
    cache.cached_bytes += bytes;
}

}  // namespace

std::shared_ptr<block_buffer> block_buffer::allocate(std::size_t value_bytes) {
    const std::size_t record_bytes = header_bytes + (value_bytes + 4095) / 4096 * 4096;
    void* base = take_memory(allocation_bytes(record_bytes));
    // The padding after the value is written to disk: zeros, never stale memory.
    std::memset(static_cast<std::byte*>(base) + header_bytes + value_bytes, 0,
                record_bytes - header_bytes - value_bytes);
    return std::shared_ptr<block_buffer>(
        new block_buffer(static_cast<std::byte*>(base), value_bytes, record_bytes));
}

block_buffer::~block_buffer() { give_memory(_base, allocation_bytes(_record_bytes)); }

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
