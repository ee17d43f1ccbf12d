#pragma once

// Cross-core calls. invoke_on(core, fn) runs fn() (which returns a task<R>) on `core` and resumes the caller
// on its own core with the result. Only small metadata travels this way: bulk bytes stay on the core that
// received them (design principle 2). fn must not be a capturing coroutine lambda: make it a plain lambda
// that copies what it needs and calls a coroutine function taking its parameters by value.
// The request and the reply live in the caller's coroutine frame: a call allocates only the coroutine
// frames it runs (fn's and the remote side's runner), tests/unit/allocations_test.cc counts them.

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
    explicit resume_message(std::coroutine_handle<> h, bool owned = true)
        : message(owned), handle(h) {}
    void run() override { handle.resume(); }
    std::coroutine_handle<> handle;
};

template <class R>
struct call_state {
    std::optional<R> value;
    unsigned origin = 0;
    // The reply, kept here (in the caller's frame) so that sending it allocates nothing. Resuming the
    // caller may end that frame, so the reply is not touched after it ran.
    resume_message reply{nullptr, false};
};

template <class F, class R>
task<void> run_remote(F fn, call_state<R>* state) {
    state->value.emplace(co_await fn());
    // The last use of state: once posted, the caller may resume (on its core) and end it.
    reactor::current().post(state->origin, &state->reply);
}

// The request, also kept in the caller's frame (the caller stays suspended until the reply).
template <class F, class R>
struct call_message final : message {
    call_message(F f, call_state<R>* s) : message(false), fn(std::move(f)), state(s) {}
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
        detail::call_message<F, R>* request;
        detail::call_state<R>* state;
        bool await_ready() const noexcept { return false; }
        void await_suspend(std::coroutine_handle<> h) {
            state->reply.handle = h;
            here->post(core, request);
        }
        void await_resume() const noexcept {}
    };
    detail::call_message<F, R> request(std::move(fn), &state);
    co_await awaiter{&here, core, &request, &state};
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
