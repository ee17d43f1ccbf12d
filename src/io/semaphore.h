#pragma once

// A counting semaphore for the coroutines of one core: acquire(n) waits (FIFO) while fewer than n units
// are free, release(n) hands units to the oldest waiters in turn. Bounds how many requests of a kind run
// at once, or how many bytes they hold (n = bytes; a request wanting more than the whole capacity takes
// all of it, so it runs alone instead of never). Strict FIFO: a small request does not pass a large one
// that waits, so the large one is never starved. Owned by one core; not thread-safe.

#include <coroutine>
#include <cstddef>
#include <deque>

#include "base/assert.h"
#include "io/reactor.h"

namespace fjord::io {

class semaphore {
public:
    explicit semaphore(std::size_t units) : _capacity(units), _free(units) {
        FJORD_ASSERT(units >= 1);
    }
    ~semaphore() { FJORD_ASSERT(_waiters.empty(), "semaphore destroyed with waiters"); }
    semaphore(const semaphore&) = delete;
    semaphore& operator=(const semaphore&) = delete;

    // The units acquire(n) takes: n, at most the capacity.
    std::size_t units_for(std::size_t n) const { return n < _capacity ? n : _capacity; }

    auto acquire(std::size_t n = 1) {
        struct awaiter {
            semaphore* s;
            std::size_t units;
            bool await_ready() const noexcept {
                if (!s->_waiters.empty() || s->_free < units) return false;
                s->_free -= units;
                return true;
            }
            void await_suspend(std::coroutine_handle<> h) {
                s->_waiters.push_back({h, units});
            }  // the units are handed over
            void await_resume() const noexcept {}
        };
        return awaiter{this, units_for(n)};
    }
    void release(std::size_t n = 1) {
        _free += units_for(n);
        while (!_waiters.empty() && _waiters.front().units <= _free) {
            _free -= _waiters.front().units;
            std::coroutine_handle<> next = _waiters.front().handle;
            _waiters.pop_front();
            reactor::current().schedule(next);
        }
    }
    std::size_t available() const { return _free; }

    // Holds n units for its lifetime (after `co_await s.acquire(n)`).
    class permit {
    public:
        explicit permit(semaphore& s, std::size_t n = 1) : _s(&s), _n(n) {}
        ~permit() { _s->release(_n); }
        permit(const permit&) = delete;
        permit& operator=(const permit&) = delete;

    private:
        semaphore* _s;
        std::size_t _n;
    };

private:
    struct waiter {
        std::coroutine_handle<> handle;
        std::size_t units;
    };
    std::size_t _capacity;
    std::size_t _free;
    std::deque<waiter> _waiters;
};

}  // namespace fjord::io
