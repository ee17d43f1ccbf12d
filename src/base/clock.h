#pragma once

// Wall-clock helpers and the date formats HTTP and S3 use.

#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>

namespace fjord::base {

// The time the calling thread sees: the real clocks, unless the deterministic simulation has installed
// its own clock for its thread (set_thread_clock). Nothing but the simulation installs one.
std::int64_t unix_now_ms();
std::int64_t monotonic_now_ns();

class clock_source {
public:
    virtual ~clock_source() = default;
    virtual std::int64_t unix_ms() = 0;
    virtual std::int64_t monotonic_ns() = 0;
};
// Makes the calling thread's clock `c` (which must outlive its use); nullptr: the real clocks again.
void set_thread_clock(clock_source* c);
// Whether the calling thread runs on a simulated clock: a wait for a time must then watch that clock,
// not the kernel's timers.
bool thread_clock_simulated();

std::string format_http_date(std::time_t seconds);           // "Sun, 06 Nov 1994 08:49:37 GMT"
std::string format_http_date_uncached(std::time_t seconds);  // the same, never cached
// RFC 1123 (and ISO 8601 as sent by some clients).
std::optional<std::time_t> parse_http_date(std::string_view text);
std::string format_iso8601_ms(std::int64_t unix_ms);  // "2026-11-29T16:20:47.123Z"
std::string format_amz_date(std::time_t seconds);     // "20261129T162047Z"
std::optional<std::time_t> parse_amz_date(std::string_view text);

}  // namespace fjord::base
