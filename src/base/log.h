#pragma once

// Line-oriented logging to stderr. Each call writes one whole line with a single write(2), so lines from
// different cores never interleave. Logging is for operators, not for the data path: keep it off hot loops.

#include <cstdarg>

namespace fjord::base {

// `off` silences everything (the simulation, which fails on purpose thousands of times).
enum class log_level { debug = 0, info = 1, warn = 2, error = 3, off = 4 };

void set_log_level(log_level level);
// Tags this thread's log lines with its core number.
void set_log_core(int core);
log_level current_log_level();
void log_line(log_level level, const char* format, ...) __attribute__((format(printf, 2, 3)));

}  // namespace fjord::base

#define FJORD_LOG(level, ...)                                                                      \
    do {                                                                                           \
        if (::fjord::base::log_level::level >= ::fjord::base::current_log_level())                 \
            ::fjord::base::log_line(::fjord::base::log_level::level, __VA_ARGS__);                 \
    } while (0)
#define LOG_DEBUG(...) FJORD_LOG(debug, __VA_ARGS__)
#define LOG_INFO(...) FJORD_LOG(info, __VA_ARGS__)
#define LOG_WARN(...) FJORD_LOG(warn, __VA_ARGS__)
#define LOG_ERROR(...) FJORD_LOG(error, __VA_ARGS__)
