#include "base/rate_floor.h"

#include <algorithm>

#include "base/assert.h"

namespace fjord::base {

namespace {
constexpr std::int64_t ns_per_s = 1'000'000'000;
constexpr std::int64_t ns_per_ms = 1'000'000;
}  // namespace

void rate_floor::start(std::int64_t now_ns) {
    if (_started) return;
    _started = true;
    _start_ns = now_ns;
}

std::int64_t rate_floor::deadline_ns() const {
    const std::uint64_t rate = _options.bytes_per_second;
    if (rate == 0) return never;
    FJORD_ASSERT(_started && _options.grace_ms >= 0 && rate <= max_bytes_per_second);
    // The time the bytes so far are worth at the floor rate, split so that it cannot overflow.
    const std::uint64_t whole_s = _bytes / rate;
    if (whole_s >= static_cast<std::uint64_t>((never - _start_ns) / ns_per_s) - 1) return never;
    const std::int64_t earned_ns = static_cast<std::int64_t>(whole_s) * ns_per_s +
                                   static_cast<std::int64_t>((_bytes % rate) * ns_per_s / rate);
    return _start_ns + std::max(earned_ns, _options.grace_ms * ns_per_ms);
}

std::int64_t rate_floor::wait_limit_ms(std::int64_t now_ns, std::int64_t cap_ms) const {
    const std::int64_t deadline = deadline_ns();
    if (deadline == never) return cap_ms;
    if (now_ns > deadline) return 0;
    const std::int64_t left_ms =
        std::max<std::int64_t>(1, (deadline - now_ns + ns_per_ms - 1) / ns_per_ms);
    return std::min(left_ms, cap_ms);
}

}  // namespace fjord::base
