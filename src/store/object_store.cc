#include "store/object_store.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <vector>

namespace fjord::store {

namespace {

// Block memory is kept for reuse: a fresh allocation of megabytes is fresh pages, and faulting them in
// (and zeroing them, and charging them to the cgroup) cost a 2 MiB read from NVMe more CPU than the
// read's CRC32C (perf). Sizes are rounded up to 64 KiB, so one workload's blocks share a size.
// Each thread keeps up to thread_limit_bytes without a lock; past that, freed memory goes to a shared
// pool (shared_limit_bytes, under a mutex) that any thread takes from when its own is empty. Blocks
// cross cores (read on the core that owns the key, let go on the connection's), so without the shared
// pool one core would keep freeing into a full cache while the other kept allocating fresh pages.
constexpr std::size_t size_step_bytes = 64 * 1024;
constexpr std::size_t thread_limit_bytes = 32 * 1024 * 1024;
constexpr std::size_t shared_limit_bytes = 128 * 1024 * 1024;

struct block_memory_cache {
    std::map<std::size_t, std::vector<void*>> free_by_size;
    std::size_t cached_bytes = 0;
    void* take(std::size_t bytes) {
        auto it = free_by_size.find(bytes);
        if (it == free_by_size.end() || it->second.empty()) return nullptr;
        void* p = it->second.back();
        it->second.pop_back();
        cached_bytes -= bytes;
        return p;
    }
    bool keep(void* p, std::size_t bytes, std::size_t limit) {
        if (cached_bytes + bytes > limit) return false;
        free_by_size[bytes].push_back(p);
        cached_bytes += bytes;
        return true;
    }
    ~block_memory_cache() {
        for (auto& [size, list] : free_by_size)
            for (void* p : list) std::free(p);
    }
};

block_memory_cache& thread_cache() {
    thread_local block_memory_cache cache;
    return cache;
}

struct shared_block_memory {
    std::mutex lock;
    block_memory_cache cache;
};

shared_block_memory& shared_cache() {
    static shared_block_memory* shared = new shared_block_memory;  // outlives every thread's frees
    return *shared;
}

std::size_t allocation_bytes(std::size_t record_bytes) {
    return (record_bytes + size_step_bytes - 1) / size_step_bytes * size_step_bytes;
}

void* take_memory(std::size_t bytes) {
    if (void* p = thread_cache().take(bytes)) return p;
    {
        auto& shared = shared_cache();
        std::lock_guard guard(shared.lock);
        if (void* p = shared.cache.take(bytes)) return p;
    }
    void* p = std::aligned_alloc(4096, bytes);
    if (p == nullptr) throw std::bad_alloc();
    return p;
}

void give_memory(void* p, std::size_t bytes) {
    if (thread_cache().keep(p, bytes, thread_limit_bytes)) return;
    {
        auto& shared = shared_cache();
        std::lock_guard guard(shared.lock);
        if (shared.cache.keep(p, bytes, shared_limit_bytes)) return;
    }
    std::free(p);
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
