#pragma once

// Assertions that stay on in every build. A failed assertion means the process state can no longer be
// trusted, so it logs where and why and aborts; it is never used for errors a client or a disk can cause.

namespace fjord::base {
[[noreturn]] void assert_fail(const char* expr, const char* file, int line, const char* message);
}

#define FJORD_ASSERT(cond, ...)                                                                    \
    do {                                                                                           \
        if (__builtin_expect(!(cond), 0))                                                          \
            ::fjord::base::assert_fail(#cond, __FILE__, __LINE__, "" __VA_ARGS__);                 \
    } while (0)

#define FJORD_UNREACHABLE(message)                                                                 \
    ::fjord::base::assert_fail("unreachable", __FILE__, __LINE__, message)
