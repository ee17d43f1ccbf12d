#include "io/buffer_pool.h"

#include <liburing.h>
#include <sys/uio.h>

#include <cstring>

#include "base/log.h"
#include "base/units.h"
#include "io/reactor.h"

namespace fjord::io {

buffer& buffer::operator=(buffer&& other) noexcept {
    if (this != &other) {
        reset();
        _pool = std::exchange(other._pool, nullptr);
        _slot = other._slot;
        _data = std::exchange(other._data, nullptr);
        _capacity = std::exchange(other._capacity, 0);
        _registered_index = std::exchange(other._registered_index, -1);
    }
    return *this;
}

void buffer::reset() {
    if (_pool) _pool->release(_slot);
    _pool = nullptr;
    _data = nullptr;
    _capacity = 0;
    _registered_index = -1;
}

buffer_pool::buffer_pool(buffer_pool_options options) : _options(options) {
    FJORD_ASSERT(options.buffer_bytes > 0 &&
                 options.buffer_bytes % base::direct_io_alignment_bytes == 0);
    FJORD_ASSERT(options.buffer_count >= 1 && options.buffer_count <= 16384);
    _memory = io_memory(options.buffer_bytes * options.buffer_count, options.huge_pages);
    for (std::size_t i = options.buffer_count; i-- > 0;)
        _free.push_back(static_cast<std::uint32_t>(i));
}

buffer_pool::~buffer_pool() {
    FJORD_ASSERT(_free.size() == _options.buffer_count,
                 "buffer pool destroyed with buffers in use");
}

bool buffer_pool::register_with(io_uring* ring) {
    std::vector<iovec> iovecs(_options.buffer_count);
    for (std::size_t i = 0; i < iovecs.size(); ++i)
        iovecs[i] = iovec{_memory.data() + i * _options.buffer_bytes, _options.buffer_bytes};
    int rc = io_uring_register_buffers(ring, iovecs.data(), static_cast<unsigned>(iovecs.size()));
    if (rc < 0) {
        LOG_WARN("cannot register I/O buffers with io_uring (%s); using unregistered buffers",
                 strerror(-rc));
        return false;
    }
    _registered = true;
    return true;
}

buffer buffer_pool::make_buffer(std::uint32_t slot) {
    return buffer(this, slot, _memory.data() + slot * _options.buffer_bytes, _options.buffer_bytes,
                  _registered ? static_cast<int>(slot) : -1);
}

std::optional<buffer> buffer_pool::try_acquire() {
    if (_free.empty()) return std::nullopt;
    std::uint32_t slot = _free.back();
    _free.pop_back();
    return make_buffer(slot);
}

task<buffer> buffer_pool::acquire() {
    if (auto b = try_acquire()) co_return std::move(*b);
    struct awaiter {
        buffer_pool* pool;
        waiter w;
        bool await_ready() const noexcept { return false; }
        void await_suspend(std::coroutine_handle<> h) {
            w.handle = h;
            pool->_waiters.push_back(&w);
        }
        std::uint32_t await_resume() const { return *w.slot; }
    };
    std::uint32_t slot = co_await awaiter{this, {}};
    co_return make_buffer(slot);
}

void buffer_pool::release(std::uint32_t slot) {
    if (!_waiters.empty()) {
        waiter* w = _waiters.front();
        _waiters.pop_front();
        w->slot = slot;
        reactor::current().schedule(w->handle);
        return;
    }
    _free.push_back(slot);
}

}  // namespace fjord::io
