#include "base/token_bucket.h"

#include <gtest/gtest.h>

namespace fjord::base {
namespace {

constexpr std::int64_t ms = 1'000'000;
constexpr std::int64_t start_ns = 1'000'000'000'000;  // an arbitrary monotonic reading

TEST(token_bucket, starts_full_and_refuses_past_the_burst) {
    token_bucket b(10, 5);
    EXPECT_EQ(b.available(start_ns), 5u);
    for (int i = 0; i < 5; ++i) EXPECT_TRUE(b.try_take(start_ns)) << i;
    EXPECT_EQ(b.available(start_ns), 0u);
    EXPECT_FALSE(b.try_take(start_ns));
    EXPECT_FALSE(b.try_take(start_ns + 99 * ms));
}

TEST(token_bucket, refills_one_token_per_interval) {
    token_bucket b(10, 5);  // one token every 100 ms
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(b.try_take(start_ns));
    EXPECT_FALSE(b.try_take(start_ns + 99 * ms));
    EXPECT_TRUE(b.try_take(start_ns + 100 * ms));
    EXPECT_FALSE(b.try_take(start_ns + 100 * ms));
    EXPECT_EQ(b.available(start_ns + 350 * ms), 2u);
    // After a long pause the bucket is full again, not fuller.
    EXPECT_EQ(b.available(start_ns + 3600 * 1000 * ms), 5u);
}

TEST(token_bucket, wait_says_when_the_next_take_succeeds) {
    token_bucket b(10, 2);
    EXPECT_EQ(b.wait_ns(start_ns), 0);
    ASSERT_TRUE(b.try_take(start_ns));
    EXPECT_EQ(b.wait_ns(start_ns), 0);
    ASSERT_TRUE(b.try_take(start_ns + 10 * ms));
    std::int64_t wait = b.wait_ns(start_ns + 10 * ms);
    EXPECT_EQ(wait, 90 * ms);
    EXPECT_FALSE(b.try_take(start_ns + 10 * ms + wait - 1));
    EXPECT_TRUE(b.try_take(start_ns + 10 * ms + wait));
    EXPECT_EQ(token_bucket(0, 0).wait_ns(start_ns), 0);
}

TEST(token_bucket, refused_takes_cost_nothing) {
    token_bucket b(10, 1);
    ASSERT_TRUE(b.try_take(start_ns));
    for (int i = 1; i < 100; ++i) EXPECT_FALSE(b.try_take(start_ns + i * ms));
    EXPECT_TRUE(b.try_take(start_ns + 100 * ms));
}

TEST(token_bucket, a_steady_client_at_the_rate_is_never_refused) {
    token_bucket b(1000, 1);  // no burst at all: exactly one per millisecond
    for (int i = 0; i < 10'000; ++i) ASSERT_TRUE(b.try_take(start_ns + i * ms)) << i;
    EXPECT_FALSE(b.try_take(start_ns + 9'999 * ms + ms / 2));
}

TEST(token_bucket, long_run_admits_rate_times_time_plus_burst) {
    token_bucket b(100, 20);
    int admitted = 0;
    // A client asking every 100 us for 10 s: 100,000 attempts.
    for (std::int64_t t = 0; t < 10'000 * ms; t += ms / 10)
        admitted += b.try_take(start_ns + t) ? 1 : 0;
    EXPECT_GE(admitted, 100 * 10 + 20 - 1);
    EXPECT_LE(admitted, 100 * 10 + 20);
}

TEST(token_bucket, rate_zero_is_unlimited) {
    token_bucket b(0, 0);
    for (int i = 0; i < 1'000'000; ++i) ASSERT_TRUE(b.try_take(start_ns));
}

}  // namespace
}  // namespace fjord::base
