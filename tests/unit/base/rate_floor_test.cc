#include "base/rate_floor.h"

#include <gtest/gtest.h>

namespace fjord::base {
namespace {

constexpr std::int64_t ms = 1'000'000;
constexpr std::int64_t s = 1000 * ms;
constexpr std::int64_t t0 = 5'000 * s;  // an arbitrary monotonic reading

TEST(rate_floor, nothing_is_below_the_floor_during_the_grace_period) {
    rate_floor f({.bytes_per_second = 4096, .grace_ms = 30'000});
    f.start(t0);
    EXPECT_EQ(f.deadline_ns(), t0 + 30 * s);
    EXPECT_FALSE(f.below(t0 + 30 * s));
    EXPECT_TRUE(f.below(t0 + 30 * s + 1));
    EXPECT_EQ(f.wait_limit_ms(t0, 60'000), 30'000);
    EXPECT_EQ(f.wait_limit_ms(t0 + 29 * s, 60'000), 1000);
    EXPECT_EQ(f.wait_limit_ms(t0 + 30 * s, 60'000), 1);
    EXPECT_EQ(f.wait_limit_ms(t0 + 30 * s + 1, 60'000), 0);
}

TEST(rate_floor, bytes_moved_buy_time_at_the_floor_rate) {
    rate_floor f({.bytes_per_second = 4096, .grace_ms = 30'000});
    f.start(t0);
    f.add(4096 * 100);  // 100 s worth
    EXPECT_EQ(f.deadline_ns(), t0 + 100 * s);
    f.add(2048);  // half a second more
    EXPECT_EQ(f.deadline_ns(), t0 + 100 * s + 500 * ms);
    // The per-I/O cap still applies when the floor is far away.
    EXPECT_EQ(f.wait_limit_ms(t0 + 10 * s, 60'000), 60'000);
    EXPECT_EQ(f.wait_limit_ms(t0 + 90 * s, 60'000), 10'500);
}

TEST(rate_floor, a_steady_sender_at_the_floor_is_never_below_it) {
    rate_floor f({.bytes_per_second = 1000, .grace_ms = 1000});
    f.start(t0);
    // 100 bytes every 100 ms, checked just before each send, for ten minutes.
    for (std::int64_t t = 0; t < 600 * s; t += 100 * ms) {
        ASSERT_FALSE(f.below(t0 + t)) << t;
        f.add(100);
    }
}

TEST(rate_floor, a_trickle_is_cut_at_the_end_of_the_grace_period) {
    rate_floor f({.bytes_per_second = 4096, .grace_ms = 30'000});
    f.start(t0);
    f.add(1);  // one byte, then silence: 1 byte every 50 s would otherwise hold the connection
    EXPECT_EQ(f.deadline_ns(), t0 + 30 * s);
    EXPECT_EQ(f.wait_limit_ms(t0 + 10 * s, 60'000), 20'000);
}

TEST(rate_floor, start_counts_once_and_no_floor_never_expires) {
    rate_floor f({.bytes_per_second = 100, .grace_ms = 1000});
    f.start(t0);
    f.start(t0 + 50 * s);
    EXPECT_EQ(f.deadline_ns(), t0 + s);
    rate_floor off({.bytes_per_second = 0, .grace_ms = 0});
    EXPECT_EQ(off.wait_limit_ms(t0, 60'000), 60'000);
    EXPECT_FALSE(off.below(rate_floor::never - 1));
}

TEST(rate_floor, huge_transfers_do_not_overflow) {
    rate_floor f({.bytes_per_second = 1, .grace_ms = 1000});
    f.start(t0);
    f.add(UINT64_MAX / 2);
    EXPECT_EQ(f.deadline_ns(), rate_floor::never);
    rate_floor fast({.bytes_per_second = 10'000'000'000ULL, .grace_ms = 1000});
    fast.start(t0);
    fast.add(50ULL << 40);  // 50 TiB at 10 GB/s: about 5,630 s
    EXPECT_EQ(fast.deadline_ns(), t0 + (50LL << 40) / 10);
}

}  // namespace
}  // namespace fjord::base
