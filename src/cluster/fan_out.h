#pragma once
// Waiting for some of a coroutine's parallel requests, with a deadline: the quorum read waits for the
// nodes that answer in time and goes on without the ones that do not (a node that is down, partitioned
// or slow). Each request runs as its own spawned task that holds the shared state (so a request the
// waiter gave up on finishes on its own, into memory that is still there) and calls finish_one().
//
// Threading: everything on one core; the state is shared only by that core's tasks. Under the
// deterministic simulation's clock (base::thread_clock_simulated) a deadline watches that clock.
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "base/clock.h"
#include "io/ops.h"
#include "io/reactor.h"
#include "io/task.h"

namespace fjord::cluster {

class fan_out : public std::enable_shared_from_this<fan_out> {
public:
    virtual ~fan_out() = default;
    std::size_t finished() const { return _finished; }

    // A request's task calls this once when it is done.
    void finish_one() {
        ++_finished;
        if (_waiter && _finished >= _target) wake();
    }

    // Returns when `count` requests have finished or `deadline_ms` passed; true in the first case.
    io::task<bool> wait_for(std::size_t count, std::int64_t deadline_ms) {
        if (_finished >= count) co_return true;
        _target = count;
        const std::uint64_t id = ++_wait_id;
        io::spawn(timer(shared_from_this(), id, deadline_ms));
        co_await waiter{this};
        co_return _finished >= count;
    }

private:
    struct waiter {
        fan_out* self;
        bool await_ready() const noexcept { return false; }
        void await_suspend(std::coroutine_handle<> h) noexcept { self->_waiter = h; }
        void await_resume() const noexcept {}
    };
    // A timeout whose completion record the fan-out knows, so that a wait that ends early removes it
    // (a long deadline would otherwise hold the reactor's shutdown).
    struct timeout_op {
        fan_out* self;
        __kernel_timespec ts{};
        io::completion done;
        bool await_ready() const noexcept { return false; }
        void await_suspend(std::coroutine_handle<> h) {
            done.waiter = h;
            io_uring_sqe* sqe = io::reactor::current().get_sqe();
            io_uring_prep_timeout(sqe, &ts, 0, 0);
            io_uring_sqe_set_data(sqe, &done);
            self->_timer = &done;
        }
        void await_resume() const noexcept {}
    };
    void wake() {
        auto h = _waiter;
        _waiter = nullptr;
        ++_wait_id;  // a timer still running for this wait does nothing
        if (_timer) {
            io_uring_sqe* sqe = io::reactor::current().get_sqe();
            io_uring_prep_timeout_remove(sqe, reinterpret_cast<std::uint64_t>(_timer), 0);
            io_uring_sqe_set_data64(sqe, io::reactor::ignored_user_data);
            _timer = nullptr;
        }
        io::reactor::current().schedule(h);
    }
    static io::task<void> timer(std::shared_ptr<fan_out> self, std::uint64_t id,
                                std::int64_t deadline_ms) {
        if (base::thread_clock_simulated()) {
            // The simulation's clock moves only as it steps: watch it, yielding in between. (The
            // waiter suspends only after this task first yields: the wait id alone says it is current.)
            const std::int64_t until = base::monotonic_now_ns() + deadline_ms * 1'000'000;
            while (self->_wait_id == id && base::monotonic_now_ns() < until)
                co_await io::yield_now{};
            if (self->_waiter && self->_wait_id == id) self->wake();
            co_return;
        }
        timeout_op op{self.get()};
        op.ts.tv_sec = deadline_ms / 1000;
        op.ts.tv_nsec = (deadline_ms % 1000) * 1'000'000;
        co_await op;
        if (self->_timer == &op.done) self->_timer = nullptr;
        if (self->_waiter && self->_wait_id == id) self->wake();
    }

    std::size_t _finished = 0;
    std::size_t _target = 0;
    std::uint64_t _wait_id = 0;
    std::coroutine_handle<> _waiter;
    io::completion* _timer = nullptr;  // the pending timeout of the current wait
};

}  // namespace fjord::cluster
