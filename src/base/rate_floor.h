#pragma once

// A minimum average transfer rate, for request bodies and responses: once a grace period has passed,
// the bytes moved since start() must keep up with bytes_per_second times the time elapsed. Averaging
// from the start forgives a pause a fast start has paid for; the grace period covers TCP slow start, a
// client preparing its body and a few retransmission timeouts. The caller bounds each single I/O by
// wait_limit_ms(), so a transfer that falls below the floor is cut at the moment it does, not at the
// end of some longer timeout. Times are monotonic nanoseconds from the caller; no clock is read here.
// Not thread-safe: one owner (a request on its connection's core).

#include <cstdint>
#include <limits>

namespace fjord::base {

struct rate_floor_options {
    std::uint64_t bytes_per_second = 4096;  // 0: no floor
    std::int64_t grace_ms = 30'000;         // no check before this much time has passed
};

class rate_floor {
public:
    static constexpr std::int64_t never = std::numeric_limits<std::int64_t>::max();
    static constexpr std::uint64_t max_bytes_per_second =
        10'000'000'000ULL;  // keeps the arithmetic in 64 bits

    rate_floor() = default;
    explicit rate_floor(rate_floor_options options) : _options(options) {}

    // Starts the clock (the first call only).
    void start(std::int64_t now_ns);
    bool started() const { return _started; }
    void add(std::uint64_t bytes) { _bytes += bytes; }
    std::uint64_t bytes() const { return _bytes; }

    // The last moment the average is still at the floor if no more bytes move; `never` without a floor.
    std::int64_t deadline_ns() const;
    bool below(std::int64_t now_ns) const { return now_ns > deadline_ns(); }
    // How long the next I/O may wait: milliseconds until the deadline (rounded up, at least 1), at most
    // cap_ms; 0 when the transfer is already below the floor.
    std::int64_t wait_limit_ms(std::int64_t now_ns, std::int64_t cap_ms) const;

private:
    rate_floor_options _options;
    std::int64_t _start_ns = 0;
    std::uint64_t _bytes = 0;
    bool _started = false;
};

}  // namespace fjord::base
