#pragma once

// A counting semaphore for the coroutines of one core: acquire() waits (FIFO) while no unit is free,
// release() hands a unit to the oldest waiter. Bounds how many requests of a kind run at once. Owned by
// one core; not thread-safe.

#include <coroutine>
#include <cstddef>
#include <deque>

#include "base/assert.h"
#include "io/reactor.h"

namespace fjord::io {

class semaphore {
public:
    explicit semaphore(std::size_t units) : _free(units) { FJORD_ASSERT(units >= 1); }
    ~semaphore() { FJORD_ASSERT(_waiters.empty(), "semaphore destroyed with waiters"); }
    semaphore(const semaphore&) = delete;
    semaphore& operator=(const semaphore&) = delete;

    auto acquire() {
        struct awaiter {
            semaphore* s;
            bool await_ready() const noexcept {
                if (s->_free == 0) return false;
                --s->_free;
                return true;
            }
            void await_suspend(std::coroutine_handle<> h) {
                s->_waiters.push_back(h);
            }  // the unit is handed over
            void await_resume() const noexcept {}
        };
        return awaiter{this};
    }
    void release() {
        if (_waiters.empty()) {
            ++_free;
            return;
        }
        std::coroutine_handle<> next = _waiters.front();
        _waiters.pop_front();
        reactor::current().schedule(next);
    }

    // Holds one unit for its lifetime (after `co_await s.acquire()`).
    class permit {
    public:
        explicit permit(semaphore& s) : _s(&s) {}
        ~permit() { _s->release(); }
        permit(const permit&) = delete;
        permit& operator=(const permit&) = delete;

    private:
        semaphore* _s;
    };

private:
    std::size_t _free;
    std::deque<std::coroutine_handle<>> _waiters;
};

}  // namespace fjord::io
