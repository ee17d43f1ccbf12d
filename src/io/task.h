#pragma once

// task<T>: a lazy coroutine. It starts when awaited and resumes its awaiter by symmetric transfer when it
// finishes, so chains of tasks use no stack and no scheduler round trip. A task runs on the core of the
// coroutine that awaits it; it is never moved between cores (cross-core work goes through messages).
// spawn() starts a task<void> detached: the frame frees itself at the end. Exceptions are not used: an
// exception escaping a task terminates the process.

#include <coroutine>
#include <exception>
#include <optional>
#include <utility>

#include "base/assert.h"

namespace fjord::io {

template <class T>
class task;

namespace detail {
struct final_awaiter {
    bool await_ready() const noexcept { return false; }
    template <class Promise>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> h) noexcept {
        auto next = h.promise().continuation;
        return next ? next : std::noop_coroutine();
    }
    void await_resume() const noexcept {}
};

struct promise_base {
    std::coroutine_handle<> continuation;
    std::suspend_always initial_suspend() const noexcept { return {}; }
    final_awaiter final_suspend() const noexcept { return {}; }
    void unhandled_exception() const noexcept { std::terminate(); }
};
}  // namespace detail

template <class T>
class [[nodiscard]] task {
public:
    struct promise_type : detail::promise_base {
        std::optional<T> value;
        task get_return_object() {
            return task(std::coroutine_handle<promise_type>::from_promise(*this));
        }
        template <class U>
        void return_value(U&& v) {
            value.emplace(std::forward<U>(v));
        }
    };

    task(task&& other) noexcept : _handle(std::exchange(other._handle, nullptr)) {}
    task& operator=(task&& other) noexcept {
        if (this != &other) {
            if (_handle) _handle.destroy();
            _handle = std::exchange(other._handle, nullptr);
        }
        return *this;
    }
    ~task() {
        if (_handle) _handle.destroy();
    }

    bool await_ready() const noexcept { return false; }
    std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiter) noexcept {
        _handle.promise().continuation = awaiter;
        return _handle;
    }
    T await_resume() {
        FJORD_ASSERT(_handle.promise().value.has_value(), "task finished without a value");
        return std::move(*_handle.promise().value);
    }

private:
    explicit task(std::coroutine_handle<promise_type> h) : _handle(h) {}
    std::coroutine_handle<promise_type> _handle;
};

template <>
class [[nodiscard]] task<void> {
public:
    struct promise_type : detail::promise_base {
        task get_return_object() {
            return task(std::coroutine_handle<promise_type>::from_promise(*this));
        }
        void return_void() const noexcept {}
    };

    task(task&& other) noexcept : _handle(std::exchange(other._handle, nullptr)) {}
    task& operator=(task&& other) noexcept {
        if (this != &other) {
            if (_handle) _handle.destroy();
            _handle = std::exchange(other._handle, nullptr);
        }
        return *this;
    }
    ~task() {
        if (_handle) _handle.destroy();
    }

    bool await_ready() const noexcept { return false; }
    std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiter) noexcept {
        _handle.promise().continuation = awaiter;
        return _handle;
    }
    void await_resume() const noexcept {}

private:
    explicit task(std::coroutine_handle<promise_type> h) : _handle(h) {}
    std::coroutine_handle<promise_type> _handle;
};

namespace detail {
struct detached {
    struct promise_type {
        detached get_return_object() const noexcept { return {}; }
        std::suspend_never initial_suspend() const noexcept { return {}; }
        std::suspend_never final_suspend() const noexcept { return {}; }
        void return_void() const noexcept {}
        void unhandled_exception() const noexcept { std::terminate(); }
    };
};
inline detached run_detached(task<void> t) { co_await std::move(t); }
}  // namespace detail

// Starts `t` now on the current core; it runs until its first suspension before spawn() returns.
inline void spawn(task<void> t) { detail::run_detached(std::move(t)); }

}  // namespace fjord::io
