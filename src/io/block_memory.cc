#include "io/block_memory.h"

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <vector>

#include "io/io_memory.h"

namespace fjord::io {

namespace {

// Block memory is kept for reuse: a fresh allocation of megabytes is fresh pages, and faulting them in
// (and zeroing them, and charging them to the cgroup) cost a 2 MiB read from NVMe more CPU than the
// read's CRC32C (perf). Sizes are rounded up to 64 KiB, so one workload's blocks share a size.
// Each thread keeps up to thread_limit_bytes without a lock; past that, freed memory goes to a shared
// pool (shared_limit_bytes, under a mutex) that any thread takes from when its own is empty. Blocks
// cross cores (read on the core that owns the key, let go on the connection's), so without the shared
// pool one core would keep freeing into a full cache while the other kept allocating fresh pages.
//
// Allocations of 2 MiB and more are mappings of their own, 2 MiB-aligned and on transparent huge pages
// (io/io_memory.h): a 2 MiB block's record (4 KiB header, then the value) is then 2 physically
// contiguous segments to the block layer instead of up to 513. The virtual disk of the benchmark machine
// holds about 254 segments at a time, so on 4 KiB pages few such reads were at the drive at once: KV
// reads from NVMe went from 0.40-0.43 to 0.54-0.58 of the raw disk read in alternating runs
// (docs/benchmarks.md, "KV reads from NVMe: huge pages and a read queue"). Each mapping is a kernel
// VMA, and a process may have vm.max_map_count of them (65,530 by default), so at most mapped_limit
// are made; past that, or when a mapping fails, blocks are ordinary allocations again. Mappings are made
// only when the caches are empty (the working set grows); with the kernel's THP defrag at "madvise", the
// first touch of one may compact memory on the reactor thread.
constexpr std::size_t size_step_bytes = 64 * 1024;
constexpr std::size_t thread_limit_bytes = 32 * 1024 * 1024;
constexpr std::size_t shared_limit_bytes = 128 * 1024 * 1024;
constexpr std::size_t mapped_from_bytes = io_memory::huge_page_bytes_per_page;
constexpr std::size_t mapped_limit = 16384;
std::atomic<std::size_t> mapped_count{0};

void release(block_memory m, std::size_t bytes) {
    if (!m.mapped) {
        std::free(m.data);
        return;
    }
    unmap_io_pages(m.data, bytes);
    mapped_count.fetch_sub(1, std::memory_order_relaxed);
}

struct block_memory_cache {
    std::map<std::size_t, std::vector<block_memory>> free_by_size;
    std::size_t cached_bytes = 0;
    std::optional<block_memory> take(std::size_t bytes) {
        auto it = free_by_size.find(bytes);
        if (it == free_by_size.end() || it->second.empty()) return std::nullopt;
        block_memory m = it->second.back();
        it->second.pop_back();
        cached_bytes -= bytes;
        return m;
    }
    bool keep(block_memory m, std::size_t bytes, std::size_t limit) {
        if (cached_bytes + bytes > limit) return false;
        free_by_size[bytes].push_back(m);
        cached_bytes += bytes;
        return true;
    }
    ~block_memory_cache() {
        for (auto& [size, list] : free_by_size)
            for (block_memory m : list) release(m, size);
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

std::byte* map_block_memory(std::size_t bytes) {
    if (bytes < mapped_from_bytes) return nullptr;
    if (mapped_count.fetch_add(1, std::memory_order_relaxed) >= mapped_limit) {
        mapped_count.fetch_sub(1, std::memory_order_relaxed);
        return nullptr;
    }
    std::byte* p = map_io_pages(bytes, true);
    if (p == nullptr) mapped_count.fetch_sub(1, std::memory_order_relaxed);
    return p;
}

}  // namespace

std::size_t block_allocation_bytes(std::size_t bytes) {
    return (bytes + size_step_bytes - 1) / size_step_bytes * size_step_bytes;
}

block_memory take_block_memory(std::size_t bytes) {
    if (auto m = thread_cache().take(bytes)) return *m;
    {
        auto& shared = shared_cache();
        std::lock_guard guard(shared.lock);
        if (auto m = shared.cache.take(bytes)) return *m;
    }
    if (std::byte* p = map_block_memory(bytes)) return {p, true};
    void* p = std::aligned_alloc(4096, bytes);
    if (p == nullptr) throw std::bad_alloc();
    return {static_cast<std::byte*>(p), false};
}

void give_block_memory(block_memory m, std::size_t bytes) {
    if (thread_cache().keep(m, bytes, thread_limit_bytes)) return;
    {
        auto& shared = shared_cache();
        std::lock_guard guard(shared.lock);
        if (shared.cache.keep(m, bytes, shared_limit_bytes)) return;
    }
    release(m, bytes);
}

}  // namespace fjord::io
