#pragma once

// A token bucket: `rate_per_second` tokens a second, holding at most `burst`; a full bucket to start.
// Kept as one number, the time at which the bucket would be full again (the "theoretical arrival time"
// of GCRA, the generic cell rate algorithm), so it needs no refill step and no floating point: taking a
// token moves that time one interval later, and a take is refused while it lies more than
// (burst - 1) intervals ahead of now. A refused take changes nothing, so a client that keeps asking
// too fast is not punished beyond the rate. Times are monotonic nanoseconds from the caller.
// Not thread-safe: one owner (a connection, on its core).

#include <cstdint>
#include <limits>

namespace fjord::base {

class token_bucket {
public:
    static constexpr std::uint64_t max_rate_per_second = 1'000'000'000;
    static constexpr std::uint64_t max_burst = 1'000'000'000;

    // rate_per_second 0 means unlimited (every take succeeds). Otherwise 1 <= burst <= max_burst.
    token_bucket(std::uint64_t rate_per_second, std::uint64_t burst);

    // Takes one token if there is one.
    bool try_take(std::int64_t now_ns);
    // Whole tokens available at `now_ns` (burst when unlimited).
    std::uint64_t available(std::int64_t now_ns) const;
    // Nanoseconds from `now_ns` until a take can succeed (0: now).
    std::int64_t wait_ns(std::int64_t now_ns) const;

private:
    std::int64_t _interval_ns = 0;   // one token per interval; 0: unlimited
    std::int64_t _tolerance_ns = 0;  // (burst - 1) intervals
    std::uint64_t _burst = 0;
    std::int64_t _full_at_ns = std::numeric_limits<std::int64_t>::min();
};

}  // namespace fjord::base
