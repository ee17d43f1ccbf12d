#include "s3/http_conditions.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>

namespace fjord::s3 {
namespace {

// Unwraps a satisfiable range; fails the test otherwise.
byte_range satisfiable(std::string_view header, std::uint64_t size) {
    auto range = parse_range(header, size);
    EXPECT_TRUE(range.has_value()) << header;
    EXPECT_TRUE(range && range->has_value()) << header;
    return range && *range ? **range : byte_range{};
}

bool whole_object(std::string_view header, std::uint64_t size) {
    auto range = parse_range(header, size);
    return range && !range->has_value();
}

bool unsatisfiable(std::string_view header, std::uint64_t size) {
    return parse_range(header, size).code() == base::errc::invalid_range;
}

TEST(parse_range, closed_range_is_clamped_to_the_object) {
    byte_range r = satisfiable("bytes=0-1023", 100);
    EXPECT_EQ(r.first, 0u);
    EXPECT_EQ(r.length, 100u);
    r = satisfiable("bytes=10-19", 100);
    EXPECT_EQ(r.first, 10u);
    EXPECT_EQ(r.length, 10u);
}

TEST(parse_range, open_range_runs_to_the_last_byte) {
    byte_range r = satisfiable("bytes=90-", 100);
    EXPECT_EQ(r.first, 90u);
    EXPECT_EQ(r.length, 10u);
}

TEST(parse_range, suffix_range_takes_the_last_bytes) {
    byte_range r = satisfiable("bytes=-30", 100);
    EXPECT_EQ(r.first, 70u);
    EXPECT_EQ(r.length, 30u);
    r = satisfiable("bytes=-500", 100);
    EXPECT_EQ(r.first, 0u);
    EXPECT_EQ(r.length, 100u);
}

TEST(parse_range, whitespace_around_the_value_and_the_numbers_is_ignored) {
    byte_range r = satisfiable(" \tbytes= 5 - 6 \t", 100);
    EXPECT_EQ(r.first, 5u);
    EXPECT_EQ(r.length, 2u);
}

TEST(parse_range, start_at_or_past_the_end_is_unsatisfiable) {
    EXPECT_TRUE(unsatisfiable("bytes=100-", 100));
    EXPECT_TRUE(unsatisfiable("bytes=100-200", 100));
    EXPECT_TRUE(unsatisfiable("bytes=0-0", 0));
    EXPECT_TRUE(unsatisfiable("bytes=-0", 100));
    EXPECT_TRUE(unsatisfiable("bytes=-5", 0));
}

TEST(parse_range, unparseable_ranges_serve_the_whole_object) {
    EXPECT_TRUE(whole_object("", 100));
    EXPECT_TRUE(whole_object("items=0-1", 100));
    EXPECT_TRUE(whole_object("bytes=0-1,5-6", 100));  // multiple ranges are not supported
    EXPECT_TRUE(whole_object("bytes=5", 100));
    EXPECT_TRUE(whole_object("bytes=6-5", 100));
    EXPECT_TRUE(whole_object("bytes=a-5", 100));
    EXPECT_TRUE(whole_object("bytes=-", 100));
    EXPECT_TRUE(whole_object("bytes=0-99999999999999999999999", 100));  // overflows u64
}

TEST(parse_range, range_ending_at_u64_max_stays_inside_a_huge_object) {
    constexpr std::uint64_t size = UINT64_MAX;
    byte_range r = satisfiable("bytes=18446744073709551614-18446744073709551615", size);
    EXPECT_EQ(r.first, size - 1);
    EXPECT_EQ(r.length, 1u);
}

TEST(etag_list_matches, matches_quoted_weak_and_wildcard_items) {
    const std::string etag = "9b2cf535f27731c974343645a3985328";
    EXPECT_TRUE(etag_list_matches("\"9b2cf535f27731c974343645a3985328\"", etag));
    EXPECT_TRUE(etag_list_matches("9b2cf535f27731c974343645a3985328", etag));
    EXPECT_TRUE(etag_list_matches("W/\"9b2cf535f27731c974343645a3985328\"", etag));
    EXPECT_TRUE(etag_list_matches("\"other\", \"9b2cf535f27731c974343645a3985328\"", etag));
    EXPECT_TRUE(etag_list_matches("*", etag));
    EXPECT_TRUE(etag_list_matches("\"other\" , *", etag));
}

TEST(etag_list_matches, misses_other_etags_and_empty_lists) {
    const std::string etag = "abc";
    EXPECT_FALSE(etag_list_matches("", etag));
    EXPECT_FALSE(etag_list_matches("\"abd\"", etag));
    EXPECT_FALSE(etag_list_matches("\"abc-1\", \"ab\"", etag));
    EXPECT_FALSE(etag_list_matches(",,", etag));
}

}  // namespace
}  // namespace fjord::s3
