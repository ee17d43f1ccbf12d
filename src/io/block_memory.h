#pragma once

// Memory for blocks that live long and cross cores (the KV tier's block_buffer): sizes rounded up to
// 64 KiB and kept for reuse per thread and in a shared pool, and, from 2 MiB, mappings of their own on
// transparent huge pages (block_memory.cc says why and what bounds them). Any thread.

#include <cstddef>

namespace fjord::io {

// One allocation: `mapped` says whether it is a mapping of its own (unmapped) or from the heap (freed).
struct block_memory {
    std::byte* data = nullptr;
    bool mapped = false;
};

// The size an allocation of `bytes` takes (rounded up to 64 KiB); take and give that size.
std::size_t block_allocation_bytes(std::size_t bytes);
// Aligned to 4 KiB at least; std::bad_alloc when memory is exhausted.
block_memory take_block_memory(std::size_t allocation_bytes);
void give_block_memory(block_memory m, std::size_t allocation_bytes);

}  // namespace fjord::io
