#include "base/token_bucket.h"

#include <algorithm>

#include "base/assert.h"

namespace fjord::base {

token_bucket::token_bucket(std::uint64_t rate_per_second, std::uint64_t burst) {
    FJORD_ASSERT(rate_per_second <= max_rate_per_second);
    if (rate_per_second == 0) return;
    FJORD_ASSERT(burst >= 1 && burst <= max_burst);
    _interval_ns = static_cast<std::int64_t>(1'000'000'000 / rate_per_second);
    _tolerance_ns = static_cast<std::int64_t>(burst - 1) * _interval_ns;
    _burst = burst;
}

bool token_bucket::try_take(std::int64_t now_ns) {
    if (_interval_ns == 0) return true;
    std::int64_t full_at = std::max(_full_at_ns, now_ns);
    if (full_at - now_ns > _tolerance_ns) return false;
    _full_at_ns = full_at + _interval_ns;
    return true;
}

std::int64_t token_bucket::wait_ns(std::int64_t now_ns) const {
    if (_interval_ns == 0) return 0;
    std::int64_t ahead = std::max(_full_at_ns, now_ns) - now_ns;
    return std::max<std::int64_t>(0, ahead - _tolerance_ns);
}

std::uint64_t token_bucket::available(std::int64_t now_ns) const {
    if (_interval_ns == 0) return _burst;
    std::int64_t ahead = std::max<std::int64_t>(_full_at_ns, now_ns) - now_ns;
    // Tokens owed: ahead / interval rounded up; what remains of the burst is available.
    auto owed = static_cast<std::uint64_t>((ahead + _interval_ns - 1) / _interval_ns);
    return owed >= _burst ? 0 : _burst - owed;
}

}  // namespace fjord::base
