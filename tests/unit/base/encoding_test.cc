#include "base/encoding.h"

#include <gtest/gtest.h>

#include "base/clock.h"

namespace fjord::base {
namespace {

TEST(encoding, hex_round_trip) {
    EXPECT_EQ(hex_encode("\x01\xab"), "01ab");
    EXPECT_EQ(*hex_decode("01AB"), "\x01\xab");
    EXPECT_FALSE(hex_decode("0g").has_value());
    EXPECT_FALSE(hex_decode("abc").has_value());
}

TEST(encoding, base64_round_trip) {
    for (std::string s : {"", "a", "ab", "abc", "abcd", "\xff\x00\x10"})
        EXPECT_EQ(*base64_decode(base64_encode(s)), s);
    EXPECT_EQ(base64_encode("abc"), "YWJj");
    EXPECT_FALSE(base64_decode("YWJ").has_value());
    EXPECT_FALSE(base64_decode("Y!Jj").has_value());
}

TEST(encoding, mime_words_as_s3_carries_non_ascii_metadata) {
    EXPECT_EQ(mime_encode("plain =?text?="), "plain =?text?=");
    EXPECT_EQ(mime_encode("caf\xc3\xa9"), "=?UTF-8?B?Y2Fmw6k=?=");
    EXPECT_EQ(*mime_decode(mime_encode("caf\xc3\xa9")), "caf\xc3\xa9");
    EXPECT_EQ(*mime_decode("=?utf-8?q?caf=C3=A9_au_lait?="), "caf\xc3\xa9 au lait");
    EXPECT_EQ(*mime_decode("=?ISO-8859-1?Q?caf=E9?="), "caf\xc3\xa9");
    EXPECT_EQ(*mime_decode("=?UTF-8?B?Y2Fm?= =?UTF-8?B?w6k=?="), "caf\xc3\xa9");  // space dropped
    EXPECT_EQ(*mime_decode("=?US-ASCII?Q?ab?="), "ab");
    for (const char* kept :
         {"", "plain", "=?UTF-8?B?Y2Fmw6k=?= tail", "=?UTF-8?X?abc?=", "=?UTF-8?B?!!?=",
          "=?KOI8-R?B?Y2Fm?=", "=?UTF-8?B?/w==?=", "=?UTF-8?Q?=F?=", "=?UTF-8?Q?a?b?=",
          "=?US-ASCII?Q?=C3=A9?=", "=??B?YQ==?=", "=?UTF-8?B?"})
        EXPECT_FALSE(mime_decode(kept).has_value()) << kept;
    EXPECT_EQ(latin1_to_utf8("a\xe9\xff"), "a\xc3\xa9\xc3\xbf");
    // A decoded word may hold CR, LF or NUL: answered encoded, never raw in a header
    const std::string hostile = *mime_decode("=?UTF-8?B?" + base64_encode("a\r\nX-Evil: 1") + "?=");
    EXPECT_EQ(hostile, "a\r\nX-Evil: 1");
    EXPECT_EQ(mime_encode(hostile), "=?UTF-8?B?" + base64_encode("a\r\nX-Evil: 1") + "?=");
    EXPECT_TRUE(mime_encode(std::string("a\0b", 3)).starts_with("=?UTF-8?B?"));
    EXPECT_EQ(mime_encode("tab\tkept"), "tab\tkept");
}

TEST(encoding, uri_encode_follows_sigv4_rules) {
    EXPECT_EQ(uri_encode("a b/c~d+e", true), "a%20b/c~d%2Be");
    EXPECT_EQ(uri_encode("a/b", false), "a%2Fb");
    EXPECT_EQ(*uri_decode("a%20b+c", true), "a b c");
    EXPECT_EQ(*uri_decode("a%20b+c", false), "a b+c");
    EXPECT_FALSE(uri_decode("%2", false).has_value());
    EXPECT_FALSE(uri_decode("%zz", false).has_value());
}

TEST(encoding, parse_u64_is_strict) {
    EXPECT_EQ(*parse_u64("0"), 0u);
    EXPECT_EQ(*parse_u64("18446744073709551615"), UINT64_MAX);
    EXPECT_FALSE(parse_u64("18446744073709551616").has_value());
    EXPECT_FALSE(parse_u64("").has_value());
    EXPECT_FALSE(parse_u64("12a").has_value());
    EXPECT_FALSE(parse_u64("-1").has_value());
}

TEST(encoding, utf8_validation) {
    EXPECT_TRUE(is_valid_utf8("plain"));
    EXPECT_TRUE(is_valid_utf8("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"));
    EXPECT_FALSE(is_valid_utf8("\xc0\xaf"));      // overlong '/'
    EXPECT_FALSE(is_valid_utf8("\xed\xa0\x80"));  // surrogate
    EXPECT_FALSE(is_valid_utf8("\xe2\x82"));      // truncated
}

TEST(clock, http_date_round_trip) {
    EXPECT_EQ(format_http_date(784111777), "Sun, 06 Nov 1994 08:49:37 GMT");
    EXPECT_EQ(*parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"), 784111777);
    EXPECT_EQ(*parse_amz_date("19941106T084937Z"), 784111777);
    EXPECT_EQ(format_amz_date(784111777), "19941106T084937Z");
    EXPECT_EQ(format_iso8601_ms(784111777123), "1994-11-06T08:49:37.123Z");
    EXPECT_FALSE(parse_http_date("yesterday").has_value());
}

}  // namespace
}  // namespace fjord::base
