#pragma once

// The DRAM tier of one core: a byte budget and an LRU list over the blocks of every KV bucket whose
// keys this core owns. Blocks are inserted when written (write-through) and when read from NVMe
// (promotion); the least recently used one leaves when the budget is exceeded, unless it is not yet on
// NVMe (a bucket that acknowledges from DRAM), which is kept until its write-back ends. Owned by one core.

#include <cstdint>
#include <list>

namespace fjord::kv {

struct cache_entry;

class dram_cache {
public:
    using position = std::list<cache_entry*>::iterator;
    explicit dram_cache(std::uint64_t budget_bytes) : _budget_bytes(budget_bytes) {}
    std::uint64_t budget_bytes() const { return _budget_bytes; }
    std::uint64_t used_bytes() const { return _used_bytes; }
    // Puts e (whose block is set) at the front; evicts from the back while over budget.
    void insert(cache_entry* e);
    void touch(cache_entry* e);
    // Takes e out (its block is dropped by the caller).
    void remove(cache_entry* e);
    // Evicts from the back while over budget (after a write-back made blocks evictable).
    void trim();
    std::uint64_t evictions() const { return _evictions; }

private:
    std::uint64_t _budget_bytes;
    std::uint64_t _used_bytes = 0;
    std::uint64_t _evictions = 0;
    std::list<cache_entry*> _lru;  // front: most recently used
};

}  // namespace fjord::kv
