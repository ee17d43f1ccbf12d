#include "client/retry.h"

#include <gtest/gtest.h>

namespace fjord::client {
namespace {

TEST(retry, retries_transport_failures_and_server_busy_answers_only) {
    EXPECT_TRUE(is_retryable({base::errc::io_error, "connect: Connection refused"}, 0));
    EXPECT_TRUE(is_retryable({base::errc::io_error, "receive: Connection reset by peer"}, 0));
    EXPECT_TRUE(is_retryable({base::errc::closed, "closed"}, 0));
    EXPECT_TRUE(is_retryable({base::errc::timed_out, "timed out"}, 0));
    EXPECT_TRUE(is_retryable({base::errc::slow_down, "SlowDown"}, 503));
    EXPECT_TRUE(is_retryable({base::errc::service_unavailable, ""}, 503));
    EXPECT_TRUE(is_retryable({base::errc::internal, "InternalError"}, 500));
    EXPECT_TRUE(is_retryable({base::errc::internal, ""}, 504));
    // A 4xx only for a conditional write that crossed another and did not happen (S3 says: send it
    // again); not for codes the error table calls retryable otherwise (RequestTimeout is a 400).
    EXPECT_TRUE(is_retryable({base::errc::conditional_request_conflict, ""}, 409));
    EXPECT_FALSE(is_retryable({base::errc::bucket_not_empty, ""}, 409));
    EXPECT_FALSE(is_retryable({base::errc::request_timeout, "RequestTimeout"}, 400));
    EXPECT_FALSE(is_retryable({base::errc::access_denied, ""}, 403));
    EXPECT_FALSE(is_retryable({base::errc::no_such_key, ""}, 404));
    EXPECT_FALSE(is_retryable({base::errc::not_implemented, ""}, 501));
    // Local failures that a retry cannot fix.
    EXPECT_FALSE(is_retryable({base::errc::entity_too_large, ""}, 0));
    EXPECT_FALSE(is_retryable({base::errc::bad_request, "malformed response"}, 0));
}

TEST(retry, backoff_grows_with_jitter_and_stays_capped) {
    retry_options o;
    o.initial_backoff_ms = 100;
    o.max_backoff_ms = 1000;
    std::uint64_t rng = 12345;
    bool varied = false;
    std::int64_t previous_first = -1;
    for (int round = 0; round < 200; ++round) {
        for (unsigned retry = 1; retry <= 8; ++retry) {
            std::int64_t cap = std::min<std::int64_t>(1000, 100LL << (retry - 1));
            std::int64_t wait = backoff_ms(o, retry, rng);
            EXPECT_GE(wait, cap / 2);
            EXPECT_LE(wait, cap);
            if (retry == 1) {
                varied = varied || (previous_first >= 0 && wait != previous_first);
                previous_first = wait;
            }
        }
    }
    EXPECT_TRUE(varied);  // jitter: not the same wait every time
    std::uint64_t a = 1, b = 1;
    EXPECT_EQ(backoff_ms(o, 3, a), backoff_ms(o, 3, b));  // deterministic for a seed
}

}  // namespace
}  // namespace fjord::client
