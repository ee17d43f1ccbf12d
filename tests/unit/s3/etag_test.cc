#include <gtest/gtest.h>

#include <string>

#include "s3/service_internal.h"
#include "s3/xml.h"

namespace fjord::s3 {
namespace {

TEST(unquote_etag, strips_quotes_and_a_weak_prefix_only_when_the_tag_has_them) {
    EXPECT_EQ(*unquote_etag("\"abc\""), "abc");
    EXPECT_EQ(*unquote_etag("  \"abc\"\t"), "abc");
    EXPECT_EQ(*unquote_etag("abc"), "abc");
    EXPECT_EQ(*unquote_etag("W/\"abc\""), "abc");
    EXPECT_EQ(*unquote_etag("W/\"\""), "");
    EXPECT_EQ(*unquote_etag("W/\""), "W/\"");
    EXPECT_EQ(*unquote_etag("W/\"abc"), "W/\"abc");
}

// A weak-looking tag without its closing quote once lost its last byte, splitting the UTF-8 sequence
// there: CompleteMultipartUpload must hand on only what the client sent, whole.
TEST(parse_complete_body, an_unclosed_weak_etag_keeps_its_last_character_whole) {
    std::string body =
        "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>W/\"\xc3\xa9</ETag></Part>"
        "</CompleteMultipartUpload>";
    auto parts = parse_complete_body(body);
    ASSERT_TRUE(parts.has_value());
    ASSERT_EQ(parts->size(), 1u);
    EXPECT_EQ((*parts)[0].etag, "W/\"\xc3\xa9");
    EXPECT_TRUE(xml_representable((*parts)[0].etag));
}

}  // namespace
}  // namespace fjord::s3
