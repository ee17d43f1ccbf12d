#pragma once

// Which failures a client retries, and how long it waits before the next attempt.
//
// Retried: transport failures before or during a request (connection refused or reset, a peer that
// closed, an operation that timed out: errc io_error / closed / timed_out with no HTTP status), and the
// 5xx answers that mean "try again" (500 InternalError, 502, 503 SlowDown / ServiceUnavailable, 504).
// Never retried: any 4xx, and any other failure (a malformed response, a body that does not fit).
// Every retried request is idempotent as object_client issues it (a PUT resends the whole body from
// the caller's memory; a part is re-uploaded under the same number).

#include <cstdint>

#include "base/error.h"

namespace fjord::client {

struct retry_options {
    unsigned max_attempts = 4;  // attempts per request, first one included (1: no retries)
    std::int64_t initial_backoff_ms = 50;        // the cap of the first wait; it doubles per retry
    std::int64_t max_backoff_ms = 2'000;         // the cap never grows beyond this
    std::int64_t request_deadline_ms = 120'000;  // all attempts and waits of one request together
    std::uint64_t jitter_seed = 0;  // 0: seeded from the clock and the client's address
};

// `http_status` is 0 when no response head arrived.
bool is_retryable(const base::error& err, int http_status);

// The wait before retry number `retry` (1 for the first retry): "equal jitter", half the capped
// exponential step plus a uniformly random part of the other half, so waits grow but never align
// across clients. `rng_state` is a xorshift64 state (non-zero), advanced by the call.
std::int64_t backoff_ms(const retry_options& options, unsigned retry, std::uint64_t& rng_state);

}  // namespace fjord::client
