#pragma once

// Per-core pool of fixed-size, 4 KiB-aligned I/O buffers, registered with the core's io_uring so disk I/O
// can use READ_FIXED / WRITE_FIXED (no per-I/O page pinning). The pool is the bound on in-flight bulk bytes
// per core: when it is empty, acquire() waits (FIFO), which back-pressures receivers instead of growing
// memory. Owned by one core; not thread-safe.
//
// The memory is io_memory: 2 MiB-aligned and on transparent huge pages when the kernel gives them, so a
// buffer whose size divides 2 MiB is one physically contiguous segment to the device (io/io_memory.h says
// why that matters).
//
// memory_kind leaves room for pinned host memory and GPU memory (GPUDirect Storage via cuFile) later: a
// consumer asks a buffer what it is instead of assuming host memory.

#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

#include "io/io_memory.h"
#include "io/task.h"

struct io_uring;

namespace fjord::io {

enum class memory_kind : std::uint8_t { host, host_pinned, gpu };

class buffer_pool;

// Move-only handle to one pool buffer; returns it to the pool when destroyed.
class buffer {
public:
    buffer() = default;
    buffer(buffer&& other) noexcept { *this = std::move(other); }
    buffer& operator=(buffer&& other) noexcept;
    ~buffer() { reset(); }

    std::byte* data() const { return _data; }
    std::size_t capacity() const { return _capacity; }
    // Index in the ring's registered buffer table, or -1 when the pool could not register.
    int registered_index() const { return _registered_index; }
    memory_kind kind() const { return memory_kind::host; }
    explicit operator bool() const { return _data != nullptr; }
    void reset();

private:
    friend class buffer_pool;
    buffer(buffer_pool* pool, std::uint32_t slot, std::byte* data, std::size_t capacity,
           int registered_index)
        : _pool(pool),
          _slot(slot),
          _data(data),
          _capacity(capacity),
          _registered_index(registered_index) {}
    buffer_pool* _pool = nullptr;
    std::uint32_t _slot = 0;
    std::byte* _data = nullptr;
    std::size_t _capacity = 0;
    int _registered_index = -1;
};

struct buffer_pool_options {
    std::size_t buffer_bytes = 1024 * 1024;  // one disk I/O unit
    std::size_t buffer_count = 64;           // per core
    bool huge_pages = true;                  // advise transparent huge pages (best effort)
};

class buffer_pool {
public:
    // Allocates the memory; register_with() ties it to a ring (done on the owning reactor thread).
    explicit buffer_pool(buffer_pool_options options);
    ~buffer_pool();
    buffer_pool(const buffer_pool&) = delete;
    buffer_pool& operator=(const buffer_pool&) = delete;

    // Registers the buffers with the ring; on failure (e.g. RLIMIT_MEMLOCK) buffers stay usable unregistered.
    bool register_with(io_uring* ring);

    std::optional<buffer> try_acquire();
    task<buffer> acquire();
    std::size_t available() const { return _free.size(); }
    std::size_t buffer_bytes() const { return _options.buffer_bytes; }
    std::size_t buffer_count() const { return _options.buffer_count; }
    // Bytes of the pool on huge pages (reads /proc/self/smaps: a diagnostic, not for the data path).
    std::size_t huge_page_bytes() const { return _memory.huge_page_bytes(); }

private:
    friend class buffer;
    struct waiter {
        std::coroutine_handle<> handle;
        std::optional<std::uint32_t> slot;
    };
    void release(std::uint32_t slot);
    buffer make_buffer(std::uint32_t slot);

    buffer_pool_options _options;
    io_memory _memory;
    bool _registered = false;
    std::vector<std::uint32_t> _free;
    std::deque<waiter*> _waiters;
};

}  // namespace fjord::io
