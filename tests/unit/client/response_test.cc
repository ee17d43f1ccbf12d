#include "client/response.h"

#include <gtest/gtest.h>

#include <string>

namespace fjord::client {
namespace {

TEST(ResponseHead, ParsesStatusHeadersAndFraming) {
    std::string text =
        "HTTP/1.1 200 OK\r\nETag: \"abc-1\"\r\nContent-Length: 42\r\nx-amz-request-id:  r1 \r\n\r\nBODY";
    response_head head;
    auto n = parse_response_head(text, 4096, head);
    ASSERT_TRUE(n);
    EXPECT_EQ(*n, text.size() - 4);
    EXPECT_EQ(head.status, 200);
    EXPECT_EQ(head.content_length, 42u);
    EXPECT_TRUE(head.keep_alive);
    EXPECT_FALSE(head.chunked);
    EXPECT_EQ(head.value_of("etag"), "\"abc-1\"");
    EXPECT_EQ(head.value_of("X-Amz-Request-Id"), "r1");
    EXPECT_EQ(head.value_of("missing"), "");
}

TEST(ResponseHead, NeedsMoreBytesUntilTheBlankLine) {
    response_head head;
    auto n = parse_response_head("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n", 4096, head);
    ASSERT_TRUE(n);
    EXPECT_EQ(*n, 0u);
}

TEST(ResponseHead, ConnectionCloseAndHttp10) {
    response_head head;
    ASSERT_TRUE(
        parse_response_head("HTTP/1.1 404 Not Found\r\nConnection: close\r\n\r\n", 4096, head));
    EXPECT_EQ(head.status, 404);
    EXPECT_FALSE(head.keep_alive);
    EXPECT_FALSE(head.content_length.has_value());
    ASSERT_TRUE(parse_response_head("HTTP/1.0 200 \r\n\r\n", 4096, head));
    EXPECT_FALSE(head.keep_alive);
}

TEST(ResponseHead, RejectsMalformedAndOversizedHeads) {
    response_head head;
    EXPECT_EQ(parse_response_head("HTTP/2 200 OK\r\n\r\n", 4096, head).code(),
              base::errc::bad_request);
    EXPECT_EQ(parse_response_head("HTTP/1.1 2x0 OK\r\n\r\n", 4096, head).code(),
              base::errc::bad_request);
    EXPECT_EQ(parse_response_head("HTTP/1.1 200 OK\r\nno colon\r\n\r\n", 4096, head).code(),
              base::errc::bad_request);
    EXPECT_EQ(parse_response_head(
                  "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 4096, head)
                  .code(),
              base::errc::bad_request);
    EXPECT_EQ(parse_response_head(std::string(100, 'x'), 64, head).code(),
              base::errc::header_too_large);
}

TEST(ResponseError, MapsTheS3CodeToTheErrorTable) {
    std::string xml =
        "<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code><Message>The key does not exist.</Message></Error>";
    base::error e = error_from_response(404, xml);
    EXPECT_EQ(e.code, base::errc::no_such_key);
    EXPECT_NE(e.message.find("NoSuchKey"), std::string::npos);
    EXPECT_NE(e.message.find("The key does not exist."), std::string::npos);
    // Codes shared by several table entries pick the one with the response's status.
    EXPECT_EQ(error_from_response(503, "<Error><Code>SlowDown</Code></Error>").code,
              base::errc::slow_down);
    EXPECT_EQ(error_from_response(404, "").code, base::errc::not_found);
    EXPECT_EQ(error_from_response(500, "not xml").code, base::errc::internal);
}

}  // namespace
}  // namespace fjord::client
