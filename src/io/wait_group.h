#pragma once

// Runs a bounded number of tasks at once on the current core and waits for all of them: the fan-out
// primitive (every fan-out has a concurrency limit). Owned by one coroutine on one core.

#include <coroutine>
#include <cstddef>

#include "base/assert.h"
#include "io/reactor.h"
#include "io/task.h"

namespace fjord::io {

class wait_group {
public:
    explicit wait_group(std::size_t limit) : _limit(limit) { FJORD_ASSERT(limit >= 1); }
    ~wait_group() { FJORD_ASSERT(_running == 0, "wait_group destroyed with tasks running"); }

    // Starts t once fewer than `limit` tasks run; suspends the caller until then. One coroutine owns the
    // group, so a slot freed for it cannot be taken by another spawner.
    task<void> spawn(task<void> t) {
        if (_running >= _limit) co_await waiter{&_slot_waiter};
        ++_running;
        io::spawn(run(std::move(t)));
    }
    // Returns when every spawned task has finished.
    task<void> wait() {
        if (_running > 0) co_await waiter{&_all_waiter};
    }

private:
    // (No loops around co_await here: clang 14 crashes splitting such coroutines in some shapes.)
    struct waiter {
        std::coroutine_handle<>* slot;
        bool await_ready() const noexcept { return false; }
        void await_suspend(std::coroutine_handle<> h) noexcept { *slot = h; }
        void await_resume() const noexcept {}
    };
    static void wake(std::coroutine_handle<>& slot) {
        if (!slot) return;
        auto h = slot;
        slot = nullptr;
        reactor::current().schedule(h);
    }
    task<void> run(task<void> t) {
        co_await std::move(t);
        --_running;
        wake(_slot_waiter);
        if (_running == 0) wake(_all_waiter);
    }
    std::size_t _limit;
    std::size_t _running = 0;
    std::coroutine_handle<> _slot_waiter;
    std::coroutine_handle<> _all_waiter;
};

}  // namespace fjord::io
