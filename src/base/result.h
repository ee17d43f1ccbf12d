#pragma once

// result<T>: a value or a base::error. A small subset of C++23 std::expected (GCC 12 has no <expected> in
// C++20 mode). Expected failures travel as results; exceptions are not used on the data path.

#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "base/assert.h"
#include "base/error.h"

namespace fjord::base {

// Wraps an error so that `return fail(...)` converts to any result<T>.
struct failure {
    error err;
};

inline failure fail(errc code, std::string message = {}) {
    return failure{error{code, std::move(message)}};
}
inline failure fail(error err) { return failure{std::move(err)}; }

template <class T>
class [[nodiscard]] result {
public:
    using value_type = T;

    result()
        requires std::is_default_constructible_v<T>
        : _state(std::in_place_index<0>) {}
    result(T value)
        : _state(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
    template <class U>
        requires(std::is_constructible_v<T, U&&> && !std::is_same_v<std::decay_t<U>, result> &&
                 !std::is_same_v<std::decay_t<U>, failure> && !std::is_same_v<std::decay_t<U>, T>)
    result(U&& value) : _state(std::in_place_index<0>, T(std::forward<U>(value))) {}  // NOLINT
    result(failure f) : _state(std::in_place_index<1>, std::move(f.err)) {}           // NOLINT

    bool has_value() const { return _state.index() == 0; }
    explicit operator bool() const { return has_value(); }

    T& value() & {
        FJORD_ASSERT(has_value(), "result::value() on an error");
        return std::get<0>(_state);
    }
    const T& value() const& {
        FJORD_ASSERT(has_value(), "result::value() on an error");
        return std::get<0>(_state);
    }
    T&& value() && {
        FJORD_ASSERT(has_value(), "result::value() on an error");
        return std::get<0>(std::move(_state));
    }
    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }
    T&& operator*() && { return std::move(*this).value(); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }

    const error& err() const& {
        FJORD_ASSERT(!has_value(), "result::err() on a value");
        return std::get<1>(_state);
    }
    error&& err() && {
        FJORD_ASSERT(!has_value(), "result::err() on a value");
        return std::get<1>(std::move(_state));
    }
    errc code() const { return has_value() ? errc::ok : std::get<1>(_state).code; }
    // Passes the error on unchanged: `if (!r) return r.failure();`
    failure as_failure() const { return failure{err()}; }

private:
    std::variant<T, error> _state;
};

template <>
class [[nodiscard]] result<void> {
public:
    result() = default;
    result(failure f) : _error(std::move(f.err)), _failed(true) {}  // NOLINT
    bool has_value() const { return !_failed; }
    explicit operator bool() const { return !_failed; }
    void value() const { FJORD_ASSERT(!_failed, "result<void>::value() on an error"); }
    const error& err() const {
        FJORD_ASSERT(_failed, "result::err() on a value");
        return _error;
    }
    errc code() const { return _failed ? _error.code : errc::ok; }
    failure as_failure() const { return failure{err()}; }

private:
    error _error;
    bool _failed = false;
};

// An error passed up with what the caller was doing put before its message ("shard 3: journal-00000002:
// undecodable record"), so that the log line it ends in says where it came from; the code is kept.
// For errors bound for logs and operators: a client's message is worded by its front end.
inline failure with_context(const error& err, std::string_view doing) {
    error out = err;
    out.message = std::string(doing) + ": " + err.message;
    return failure{std::move(out)};
}

}  // namespace fjord::base

// Evaluates a result expression; on error returns the failure from the enclosing function (or coroutine,
// with FJORD_CO_TRY). The _CONTEXT forms put `doing` (a string) before the error's message on its way up.
#define FJORD_TRY(expr)                                                                            \
    do {                                                                                           \
        auto&& fjord_try_result_ = (expr);                                                         \
        if (!fjord_try_result_) return fjord_try_result_.as_failure();                             \
    } while (0)
#define FJORD_CO_TRY(expr)                                                                         \
    do {                                                                                           \
        auto&& fjord_try_result_ = (expr);                                                         \
        if (!fjord_try_result_) co_return fjord_try_result_.as_failure();                          \
    } while (0)
#define FJORD_TRY_CONTEXT(expr, doing)                                                             \
    do {                                                                                           \
        auto&& fjord_try_result_ = (expr);                                                         \
        if (!fjord_try_result_)                                                                    \
            return ::fjord::base::with_context(fjord_try_result_.err(), (doing));                  \
    } while (0)
#define FJORD_CO_TRY_CONTEXT(expr, doing)                                                          \
    do {                                                                                           \
        auto&& fjord_try_result_ = (expr);                                                         \
        if (!fjord_try_result_)                                                                    \
            co_return ::fjord::base::with_context(fjord_try_result_.err(), (doing));               \
    } while (0)
