#include "base/log.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "base/assert.h"

namespace fjord::base {

namespace {
std::atomic<int> g_level{static_cast<int>(log_level::info)};
thread_local int t_core = -1;
const char* level_name(log_level level) {
    switch (level) {
        case log_level::debug: return "DEBUG";
        case log_level::info: return "INFO";
        case log_level::warn: return "WARN";
        case log_level::error: return "ERROR";
        case log_level::off: return "OFF";
    }
    return "?";
}
}  // namespace

void set_log_core(int core) { t_core = core; }
void set_log_level(log_level level) {
    g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}
log_level current_log_level() {
    return static_cast<log_level>(g_level.load(std::memory_order_relaxed));
}

void log_line(log_level level, const char* format, ...) {
    char line[2048];
    timespec now{};
    clock_gettime(CLOCK_REALTIME, &now);
    tm utc{};
    gmtime_r(&now.tv_sec, &utc);
    char where[16];
    if (t_core >= 0)
        snprintf(where, sizeof where, "core %d", t_core);
    else
        snprintf(where, sizeof where, "main");
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s [%s] ",
                     utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min,
                     utc.tm_sec, now.tv_nsec / 1000000, level_name(level), where);
    char message[2048];
    va_list args;
    va_start(args, format);
    int m = vsnprintf(message, sizeof message, format, args);
    va_end(args);
    size_t message_len = m < 0 ? 0 : std::min(static_cast<size_t>(m), sizeof message - 1);
    // One line per call, whatever the message holds: a control byte (a key's LF or CR, say, which any
    // client can send) is written as \xNN, so nobody can forge log lines through a logged value.
    size_t len = static_cast<size_t>(n);
    for (size_t i = 0; i < message_len && len + 5 < sizeof line; ++i) {
        auto byte = static_cast<unsigned char>(message[i]);
        if (byte < 0x20 || byte == 0x7f) {
            len += static_cast<size_t>(snprintf(line + len, sizeof line - len, "\\x%02x", byte));
        } else {
            line[len++] = static_cast<char>(byte);
        }
    }
    line[len++] = '\n';
    ssize_t ignored = ::write(STDERR_FILENO, line, len);
    (void)ignored;
}

[[noreturn]] void assert_fail(const char* expr, const char* file, int line, const char* message) {
    char text[1024];
    int n = snprintf(text, sizeof text, "assertion failed: %s at %s:%d %s\n", expr, file, line,
                     message);
    ssize_t ignored = ::write(STDERR_FILENO, text, n > 0 ? static_cast<size_t>(n) : 0);
    (void)ignored;
    std::abort();
}

}  // namespace fjord::base
