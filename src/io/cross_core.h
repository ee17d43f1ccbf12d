#pragma once

// Cross-core calls. invoke_on(core, fn) runs fn() (which returns a task<R>) on `core` and resumes the caller
// on its own core with the result. Only small metadata travels this way: bulk bytes stay on the core that
// received them (design principle 2). fn must not be a capturing coroutine lambda: make it a plain lambda
// that copies what it needs and calls a coroutine function taking its parameters by value.

#include <coroutine>
#include <optional>
#include <type_traits>
#include <utility>

#include "io/reactor.h"
#include "io/task.h"

namespace fjord::io {

namespace detail {
template <class T>
struct task_value;
template <class T>
struct task_value<task<T>> {
    using type = T;
};

struct resume_message final : message {
    explicit resume_message(std::coroutine_handle<> h) : handle(h) {}
    void run() override { handle.resume(); }
    std::coroutine_handle<> handle;
};

template <class R>
struct call_state {
    std::optional<R> value;
    std::coroutine_handle<> waiter;
    unsigned origin = 0;
};

template <class F, class R>
task<void> run_remote(F fn, call_state<R>* state) {
    state->value.emplace(co_await fn());
    reactor::current().post(state->origin, new resume_message(state->waiter));
}

template <class F, class R>
struct call_message final : message {
    call_message(F f, call_state<R>* s) : fn(std::move(f)), state(s) {}
    void run() override { spawn(run_remote<F, R>(std::move(fn), state)); }
    F fn;
    call_state<R>* state;
};
}  // namespace detail

template <class F>
auto invoke_on(unsigned core, F fn)
    -> task<typename detail::task_value<std::invoke_result_t<F&>>::type> {
    using R = typename detail::task_value<std::invoke_result_t<F&>>::type;
    reactor& here = reactor::current();
    if (core == here.core()) co_return co_await fn();
    detail::call_state<R> state;
    state.origin = here.core();
    struct awaiter {
        reactor* here;
        unsigned core;
        F* fn;
        detail::call_state<R>* state;
        bool await_ready() const noexcept { return false; }
        void await_suspend(std::coroutine_handle<> h) {
            state->waiter = h;
            here->post(core, new detail::call_message<F, R>(std::move(*fn), state));
        }
        void await_resume() const noexcept {}
    };
    co_await awaiter{&here, core, &fn, &state};
    co_return std::move(*state.value);
}

// Runs fn() on `core` without waiting for it (fire and forget). fn returns task<void>.
template <class F>
void post_to(unsigned core, F fn) {
    struct run_message final : message {
        explicit run_message(F f) : fn(std::move(f)) {}
        void run() override { spawn(fn()); }
        F fn;
    };
    reactor::current().post(core, new run_message(std::move(fn)));
}

}  // namespace fjord::io
