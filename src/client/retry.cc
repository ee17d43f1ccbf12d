#include "client/retry.h"

#include <algorithm>

#include "base/assert.h"

namespace fjord::client {

bool is_retryable(const base::error& err, int http_status) {
    // 409 ConditionalRequestConflict: a conditional write crossed another and did not happen; S3
    // says to send it again.
    if (http_status == 409) return err.code == base::errc::conditional_request_conflict;
    if (http_status != 0)
        return http_status == 500 || http_status == 502 || http_status == 503 || http_status == 504;
    return err.code == base::errc::io_error || err.code == base::errc::closed ||
           err.code == base::errc::timed_out;
}

std::int64_t backoff_ms(const retry_options& options, unsigned retry, std::uint64_t& rng_state) {
    FJORD_ASSERT(retry >= 1 && rng_state != 0);
    std::int64_t cap = options.initial_backoff_ms;
    for (unsigned i = 1; i < retry && cap < options.max_backoff_ms; ++i) cap *= 2;
    cap = std::clamp<std::int64_t>(cap, 0, options.max_backoff_ms);
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    std::int64_t half = cap / 2;
    return half + static_cast<std::int64_t>(rng_state % static_cast<std::uint64_t>(cap - half + 1));
}

}  // namespace fjord::client
