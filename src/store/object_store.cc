#include "store/object_store.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace fjord::store {

std::shared_ptr<block_buffer> block_buffer::allocate(std::size_t value_bytes) {
    const std::size_t record_bytes = header_bytes + (value_bytes + 4095) / 4096 * 4096;
    void* base = std::aligned_alloc(4096, record_bytes);
    if (base == nullptr) throw std::bad_alloc();
    // The padding after the value is written to disk: zeros, never stale memory.
    std::memset(static_cast<std::byte*>(base) + header_bytes + value_bytes, 0,
                record_bytes - header_bytes - value_bytes);
    return std::shared_ptr<block_buffer>(
        new block_buffer(static_cast<std::byte*>(base), value_bytes, record_bytes));
}

block_buffer::~block_buffer() { std::free(_base); }

io::task<base::result<void>> object_store::create_kv_bucket(std::string name, kv_bucket_options) {
    co_return base::fail(base::errc::not_implemented,
                         "this store has no KV tier (bucket " + name + ")");
}

}  // namespace fjord::store
