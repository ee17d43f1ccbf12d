#include "kv/dram_cache.h"

#include "base/assert.h"
#include "kv/shard_log.h"

namespace fjord::kv {

namespace {
std::uint64_t charge(const cache_entry* e) {
    return e->value_bytes + store::block_buffer::header_bytes;
}
}  // namespace

void dram_cache::insert(cache_entry* e) {
    FJORD_ASSERT(e->dram && !e->lru);
    _lru.push_front(e);
    e->lru = _lru.begin();
    _used_bytes += charge(e);
    trim();
}

void dram_cache::touch(cache_entry* e) {
    if (e->lru) _lru.splice(_lru.begin(), _lru, *e->lru);
}

void dram_cache::remove(cache_entry* e) {
    FJORD_ASSERT(e->lru.has_value());
    _lru.erase(*e->lru);
    e->lru.reset();
    _used_bytes -= charge(e);
}

void dram_cache::trim() {
    // Blocks not yet on NVMe cannot leave; they are passed over (at most the whole list once).
    auto it = _lru.end();
    while (_used_bytes > _budget_bytes && it != _lru.begin()) {
        --it;
        cache_entry* e = *it;
        if (!e->on_disk) continue;
        it = _lru.erase(it);
        e->lru.reset();
        e->dram.reset();
        _used_bytes -= charge(e);
        ++_evictions;
    }
}

}  // namespace fjord::kv
