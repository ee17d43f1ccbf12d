#pragma once

// The one assertion the fuzz harnesses use: a failed invariant prints what was expected and aborts,
// which libFuzzer reports as a crash and saves the input as a reproducer.

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond); \
            std::abort();                                                                          \
        }                                                                                          \
    } while (0)
