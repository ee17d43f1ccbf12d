#include "http/request.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

namespace fjord::http {
namespace {

using base::errc;
using namespace std::string_literals;

struct parsed {
    base::result<std::size_t> length;
    request_head head;
};

parsed parse(std::string_view text, const parse_limits& limits = {}) {
    parsed p{std::size_t{0}, {}};
    p.length = parse_request_head(text, limits, p.head);
    return p;
}

errc parse_code(std::string_view text, const parse_limits& limits = {}) {
    return parse(text, limits).length.code();
}

bool points_into(std::string_view view, std::string_view buffer) {
    const char* end = buffer.data() + buffer.size();
    return view.data() >= buffer.data() && view.data() + view.size() <= end;
}

TEST(request_head, simple_get) {
    std::string text =
        "GET /bucket/key HTTP/1.1\r\nHost: example.com\r\nUser-Agent:  curl/8 \r\n\r\n";
    parsed p = parse(text);
    ASSERT_TRUE(p.length) << p.length.err().message;
    EXPECT_EQ(*p.length, text.size());
    EXPECT_EQ(p.head.verb, method::get);
    EXPECT_EQ(p.head.method_text, "GET");
    EXPECT_EQ(p.head.target, "/bucket/key");
    EXPECT_EQ(p.head.path, "/bucket/key");
    EXPECT_EQ(p.head.query, "");
    EXPECT_EQ(p.head.version_minor, 1);
    ASSERT_EQ(p.head.headers.size(), 2u);
    EXPECT_EQ(p.head.headers[0].name, "Host");
    EXPECT_EQ(p.head.headers[0].value, "example.com");
    EXPECT_EQ(p.head.headers[1].value, "curl/8");  // OWS trimmed on both sides
    EXPECT_FALSE(p.head.content_length);
    EXPECT_FALSE(p.head.chunked);
    EXPECT_TRUE(p.head.keep_alive);
    EXPECT_FALSE(p.head.expect_continue);
    // Zero-copy: every view points into the caller's buffer.
    EXPECT_TRUE(points_into(p.head.target, text));
    EXPECT_TRUE(points_into(p.head.headers[1].name, text));
    EXPECT_TRUE(points_into(p.head.headers[1].value, text));
}

TEST(request_head, methods_map_case_sensitively) {
    const std::pair<std::string_view, method> cases[] = {
        {"GET", method::get},     {"HEAD", method::head},      {"PUT", method::put},
        {"POST", method::post},   {"DELETE", method::delete_}, {"OPTIONS", method::options},
        {"PATCH", method::other}, {"get", method::other},
    };
    for (const auto& [name, verb] : cases) {
        std::string text = std::string(name) + " / HTTP/1.1\r\nHost: h\r\n\r\n";
        parsed p = parse(text);
        ASSERT_TRUE(p.length) << name;
        EXPECT_EQ(p.head.verb, verb) << name;
        EXPECT_EQ(p.head.method_text, name);
    }
}

TEST(request_head, put_with_content_length_leaves_body_unconsumed) {
    std::string head = "PUT /b/k HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\n";
    std::string text = head + "hello world";
    parsed p = parse(text);
    ASSERT_TRUE(p.length);
    EXPECT_EQ(*p.length, head.size());
    EXPECT_EQ(p.head.verb, method::put);
    ASSERT_TRUE(p.head.content_length);
    EXPECT_EQ(*p.head.content_length, 11u);
    EXPECT_FALSE(p.head.chunked);
}

TEST(request_head, agreeing_duplicate_content_lengths_are_accepted) {
    parsed p = parse("PUT / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n");
    ASSERT_TRUE(p.length);
    EXPECT_EQ(p.head.content_length, std::optional<std::uint64_t>(5));
}

TEST(request_head, query_is_split_at_first_question_mark) {
    parsed p = parse("GET /bucket?list-type=2&prefix=a%2Fb HTTP/1.1\r\nHost: h\r\n\r\n");
    ASSERT_TRUE(p.length);
    EXPECT_EQ(p.head.target, "/bucket?list-type=2&prefix=a%2Fb");
    EXPECT_EQ(p.head.path, "/bucket");
    EXPECT_EQ(p.head.query, "list-type=2&prefix=a%2Fb");

    p = parse("GET /b?uploads HTTP/1.1\r\nHost: h\r\n\r\n");
    ASSERT_TRUE(p.length);
    EXPECT_EQ(p.head.query, "uploads");

    p = parse("GET /b? HTTP/1.1\r\nHost: h\r\n\r\n");
    ASSERT_TRUE(p.length);
    EXPECT_EQ(p.head.path, "/b");
    EXPECT_EQ(p.head.query, "");

    p = parse("GET /b?x=1?y HTTP/1.1\r\nHost: h\r\n\r\n");
    ASSERT_TRUE(p.length);
    EXPECT_EQ(p.head.query, "x=1?y");
}

TEST(request_head, every_proper_prefix_is_incomplete) {
    std::string text =
        "PUT /bucket/key?partNumber=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n"
        "Expect: 100-continue\r\n\r\n";
    for (std::size_t n = 0; n < text.size(); ++n) {
        parsed p = parse(std::string_view(text).substr(0, n));
        ASSERT_TRUE(p.length) << "prefix " << n << ": " << p.length.err().message;
        EXPECT_EQ(*p.length, 0u) << "prefix " << n;
    }
    parsed p = parse(text);
    ASSERT_TRUE(p.length);
    EXPECT_EQ(*p.length, text.size());
}

TEST(request_head, pipelined_requests_parse_one_at_a_time) {
    std::string first = "GET /a HTTP/1.1\r\nHost: h\r\n\r\n";
    std::string second = "DELETE /b HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n";
    std::string text = first + second;
    parsed p = parse(text);
    ASSERT_TRUE(p.length);
    EXPECT_EQ(*p.length, first.size());
    EXPECT_EQ(p.head.path, "/a");

    parsed q = parse(std::string_view(text).substr(*p.length));
    ASSERT_TRUE(q.length);
    EXPECT_EQ(*q.length, second.size());
    EXPECT_EQ(q.head.verb, method::delete_);
    EXPECT_FALSE(q.head.keep_alive);
}

TEST(request_head, empty_lines_before_request_line_are_skipped) {
    std::string text = "\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n";
    parsed p = parse(text);
    ASSERT_TRUE(p.length);
    EXPECT_EQ(*p.length, text.size());
    EXPECT_EQ(p.head.method_text, "GET");
    EXPECT_EQ(*parse("\r\n\r\n").length, 0u);
}

TEST(request_head, output_is_cleared_between_calls) {
    request_head head;
    std::string first = "PUT / HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nA: 1\r\n\r\n";
    ASSERT_TRUE(parse_request_head(first, {}, head));
    EXPECT_EQ(head.headers.size(), 3u);
    std::string second = "GET /x?q HTTP/1.0\r\n\r\n";
    ASSERT_TRUE(parse_request_head(second, {}, head));
    EXPECT_TRUE(head.headers.empty());
    EXPECT_FALSE(head.content_length);
    EXPECT_EQ(head.version_minor, 0);
    EXPECT_EQ(head.query, "q");
}

TEST(request_head, find_is_case_insensitive_and_returns_first_match) {
    parsed p = parse(
        "GET / HTTP/1.1\r\nHost: h\r\nX-Amz-Date: 20240101T000000Z\r\nx-amz-meta-a: one\r\n"
        "X-AMZ-META-A: two\r\n\r\n");
    ASSERT_TRUE(p.length);
    const header* date = p.head.find("x-amz-date");
    ASSERT_NE(date, nullptr);
    EXPECT_EQ(date->value, "20240101T000000Z");
    EXPECT_EQ(p.head.value_of("X-AMZ-DATE"), "20240101T000000Z");
    EXPECT_EQ(p.head.value_of("X-Amz-Meta-A"), "one");
    EXPECT_EQ(p.head.find("content-type"), nullptr);
    EXPECT_EQ(p.head.value_of("content-type"), "");
}

TEST(request_head, header_count_limit) {
    parse_limits limits;
    limits.max_header_count = 3;
    EXPECT_EQ(parse_code("GET / HTTP/1.1\r\nHost: h\r\nB: 2\r\nC: 3\r\n\r\n", limits), errc::ok);
    EXPECT_EQ(parse_code("GET / HTTP/1.1\r\nHost: h\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n", limits),
              errc::header_too_large);
}

TEST(request_head, head_size_limit) {
    std::string text = "GET / HTTP/1.1\r\nHost: h\r\n\r\n";
    parse_limits limits;
    limits.max_head_bytes = text.size();
    EXPECT_EQ(parse_code(text, limits), errc::ok);  // exactly at the limit is fine
    limits.max_head_bytes = text.size() - 1;
    EXPECT_EQ(parse_code(text, limits), errc::header_too_large);

    // Incomplete input: wait below the limit, fail once the buffer alone reaches it.
    limits.max_head_bytes = 64;
    std::string endless = "GET / HTTP/1.1\r\nX-Pad: " + std::string(30, 'p');
    ASSERT_LT(endless.size(), limits.max_head_bytes);
    EXPECT_EQ(*parse(endless, limits).length, 0u);
    endless += std::string(limits.max_head_bytes, 'p');
    EXPECT_EQ(parse_code(endless, limits), errc::header_too_large);
}

TEST(request_head, default_head_limit_applies_to_huge_header) {
    std::string text = "GET / HTTP/1.1\r\nX-Big: " + std::string(70 * 1024, 'x') + "\r\n\r\n";
    EXPECT_EQ(parse_code(text), errc::header_too_large);
}

TEST(request_head, target_length_limit) {
    parse_limits limits;
    limits.max_target_bytes = 16;
    EXPECT_EQ(parse_code("GET /" + std::string(15, 'k') + " HTTP/1.1\r\nHost: h\r\n\r\n", limits),
              errc::ok);
    EXPECT_EQ(parse_code("GET /" + std::string(16, 'k') + " HTTP/1.1\r\n\r\n", limits),
              errc::invalid_uri);
}

struct malformed_case {
    const char* name;
    std::string text;
    errc expected;
};

TEST(request_head, malformed_requests_fail_with_the_right_code) {
    const malformed_case cases[] = {
        {"space before colon", "GET / HTTP/1.1\r\nHost : h\r\n\r\n", errc::bad_request},
        {"tab before colon", "GET / HTTP/1.1\r\nHost\t: h\r\n\r\n", errc::bad_request},
        {"obs-fold", "GET / HTTP/1.1\r\nX-A: a\r\n b\r\n\r\n", errc::bad_request},
        {"obs-fold tab", "GET / HTTP/1.1\r\nX-A: a\r\n\tb\r\n\r\n", errc::bad_request},
        {"no colon", "GET / HTTP/1.1\r\nHost h\r\n\r\n", errc::bad_request},
        {"empty name", "GET / HTTP/1.1\r\n: h\r\n\r\n", errc::bad_request},
        {"version 2.0", "GET / HTTP/2.0\r\nHost: h\r\n\r\n", errc::http_version_not_supported},
        {"version 0.9", "GET / HTTP/0.9\r\n\r\n", errc::http_version_not_supported},
        {"version without minor", "GET / HTTP/1\r\n\r\n", errc::bad_request},
        {"version with letters", "GET / HTTP/1.x\r\n\r\n", errc::bad_request},
        {"no host in 1.1", "GET / HTTP/1.1\r\n\r\n", errc::bad_request},
        {"host with bad port", "GET / HTTP/1.1\r\nHost: h:abc\r\n\r\n", errc::bad_request},
        {"host port too big", "GET / HTTP/1.1\r\nHost: :99999999\r\n\r\n", errc::bad_request},
        {"host port over 65535", "GET / HTTP/1.1\r\nHost: h:65536\r\n\r\n", errc::bad_request},
        {"host with userinfo", "GET / HTTP/1.1\r\nHost: a@b\r\n\r\n", errc::bad_request},
        {"host with a path", "GET / HTTP/1.1\r\nHost: h/x\r\n\r\n", errc::bad_request},
        {"host with a space", "GET / HTTP/1.1\r\nHost: h x\r\n\r\n", errc::bad_request},
        {"host bad ipv6", "GET / HTTP/1.1\r\nHost: [::1\r\n\r\n", errc::bad_request},
        {"host empty with port", "GET / HTTP/1.1\r\nHost: :80\r\n\r\n", errc::bad_request},
        {"absolute-form bad authority", "GET http://a@b/k HTTP/1.1\r\nHost: b\r\n\r\n",
         errc::bad_request},
        {"absolute-form no authority", "GET http:///k HTTP/1.1\r\nHost: b\r\n\r\n",
         errc::bad_request},
        {"version 1.2", "GET / HTTP/1.2\r\n\r\n", errc::bad_request},
        {"lower-case version", "GET / http/1.1\r\n\r\n", errc::bad_request},
        {"no version", "GET /\r\n\r\n", errc::bad_request},
        {"trailing space", "GET / HTTP/1.1 \r\n\r\n", errc::bad_request},
        {"bad method char", "GE(T / HTTP/1.1\r\n\r\n", errc::bad_request},
        {"empty method", " / HTTP/1.1\r\n\r\n", errc::bad_request},
        {"cl and te", "PUT / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
         errc::bad_request},
        {"te and cl", "PUT / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
         errc::bad_request},
        {"conflicting cls", "PUT / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
         errc::bad_request},
        {"non-numeric cl", "PUT / HTTP/1.1\r\nContent-Length: abc\r\n\r\n", errc::bad_request},
        {"negative cl", "PUT / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", errc::bad_request},
        {"plus cl", "PUT / HTTP/1.1\r\nContent-Length: +5\r\n\r\n", errc::bad_request},
        {"list cl", "PUT / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n", errc::bad_request},
        {"empty cl", "PUT / HTTP/1.1\r\nContent-Length: \r\n\r\n", errc::bad_request},
        {"overflow cl", "PUT / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
         errc::bad_request},
        {"bare lf", "GET / HTTP/1.1\nHost: h\n\n", errc::bad_request},
        {"bare lf incomplete", "GET / HTTP/1.1\n", errc::bad_request},
        {"bare lf last", "GET / HTTP/1.1\r\nHost: h\r\n\n", errc::bad_request},
        {"bare cr in value", "GET / HTTP/1.1\r\nX-A: a\rb\r\n\r\n", errc::bad_request},
        {"nul in value", "GET / HTTP/1.1\r\nX-A: a\0b\r\n\r\n"s, errc::bad_request},
        {"nul in name", "GET / HTTP/1.1\r\nX\0A: a\r\n\r\n"s, errc::bad_request},
        {"duplicate host", "GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n", errc::bad_request},
        {"te in http/1.0", "PUT / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
         errc::bad_request},
        {"te gzip", "PUT / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", errc::not_implemented},
        {"te gzip chunked", "PUT / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
         errc::not_implemented},
        {"te twice",
         "PUT / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
         errc::not_implemented},
        {"relative target", "GET bucket HTTP/1.1\r\n\r\n", errc::invalid_uri},
        {"other scheme", "GET ftp://h/b HTTP/1.1\r\nHost: h\r\n\r\n", errc::invalid_uri},
        {"asterisk for GET", "GET * HTTP/1.1\r\n\r\n", errc::invalid_uri},
        {"space in target", "GET /a b HTTP/1.1\r\n\r\n", errc::invalid_uri},
        {"double space", "GET  / HTTP/1.1\r\n\r\n", errc::invalid_uri},
        {"control char in target", "GET /a\x01 HTTP/1.1\r\n\r\n", errc::invalid_uri},
        {"del in target", "GET /a\x7f HTTP/1.1\r\n\r\n", errc::invalid_uri},
        {"fragment in target", "GET /a#f HTTP/1.1\r\n\r\n", errc::invalid_uri},
    };
    for (const malformed_case& c : cases) {
        SCOPED_TRACE(c.name);
        EXPECT_EQ(parse_code(c.text), c.expected);
    }
}

TEST(request_head, options_accepts_asterisk_form) {
    parsed p = parse("OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n");
    ASSERT_TRUE(p.length);
    EXPECT_EQ(p.head.verb, method::options);
    EXPECT_EQ(p.head.target, "*");
    EXPECT_EQ(p.head.query, "");
}

TEST(request_head, raw_utf8_in_target_is_left_to_the_s3_layer) {
    parsed p = parse("GET /b/caf\xc3\xa9 HTTP/1.1\r\nHost: h\r\n\r\n");
    ASSERT_TRUE(p.length);
    EXPECT_EQ(p.head.path, "/b/caf\xc3\xa9");
}

TEST(request_head, chunked_transfer_encoding_is_recognised) {
    parsed p = parse("PUT /b/k HTTP/1.1\r\nHost: h\r\nTransfer-Encoding:  Chunked \r\n\r\n");
    ASSERT_TRUE(p.length);
    EXPECT_TRUE(p.head.chunked);
    EXPECT_FALSE(p.head.content_length);
}

TEST(request_head, keep_alive_follows_version_and_connection) {
    struct keep_alive_case {
        std::string text;
        bool keep_alive;
    };
    const keep_alive_case cases[] = {
        {"GET / HTTP/1.1\r\nHost: h\r\n\r\n", true},
        {"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", false},
        {"GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade, CLOSE\r\n\r\n", false},
        {"GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\n\r\n", true},
        {"GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n", false},
        {"GET / HTTP/1.0\r\n\r\n", false},
        {"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", true},
        {"GET / HTTP/1.0\r\nConnection: foo ,keep-alive\r\n\r\n", true},
        {"GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n", false},
        {"GET / HTTP/1.0\r\nConnection: keep-alive-ish\r\n\r\n", false},
    };
    for (const keep_alive_case& c : cases) {
        SCOPED_TRACE(c.text);
        parsed p = parse(c.text);
        ASSERT_TRUE(p.length);
        EXPECT_EQ(p.head.keep_alive, c.keep_alive);
    }
}

TEST(request_head, expect_100_continue) {
    parsed p =
        parse("PUT / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nExpect: 100-Continue\r\n\r\n");
    ASSERT_TRUE(p.length);
    EXPECT_TRUE(p.head.expect_continue);

    p = parse("PUT / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\n");
    ASSERT_TRUE(p.length);
    EXPECT_FALSE(p.head.expect_continue);

    p = parse("PUT / HTTP/1.1\r\nHost: h\r\nExpect: something-else\r\n\r\n");
    ASSERT_TRUE(p.length);
    EXPECT_FALSE(p.head.expect_continue);

    // RFC 9110 section 10.1.1: ignored in HTTP/1.0 requests.
    p = parse("PUT / HTTP/1.0\r\nContent-Length: 1\r\nExpect: 100-continue\r\n\r\n");
    ASSERT_TRUE(p.length);
    EXPECT_FALSE(p.head.expect_continue);
}

TEST(request_head, later_http_1_minor_versions_are_served_as_1_1) {
    parsed p = parse("GET / HTTP/1.2\r\nHost: h\r\n\r\n");
    ASSERT_TRUE(p.length) << p.length.err().message;
    EXPECT_EQ(p.head.version_minor, 1);
}

TEST(request_head, valid_host_values_are_accepted) {
    for (const char* host :
         {"h", "example.com", "example.com:9000", "127.0.0.1:1", "[::1]", "[::1]:9000",
          "bucket.localhost:65535", "a-b_c~d.e", "h:", "xn--caf-dma.example"}) {
        SCOPED_TRACE(host);
        EXPECT_TRUE(valid_authority(host));
        EXPECT_EQ(parse_code("GET / HTTP/1.1\r\nHost: "s + host + "\r\n\r\n"), errc::ok);
    }
    // An empty Host is what a client sends for a target without an authority (RFC 9110 7.2).
    EXPECT_EQ(parse_code("GET / HTTP/1.1\r\nHost:\r\n\r\n"), errc::ok);
    // HTTP/1.0 needs no Host.
    EXPECT_EQ(parse_code("GET / HTTP/1.0\r\n\r\n"), errc::ok);
}

TEST(request_head, absolute_form_targets_take_their_host_from_the_authority) {
    std::string text =
        "GET http://bucket.localhost:9000/key?uploads HTTP/1.1\r\nHost: other:1\r\n\r\n";
    parsed p = parse(text);
    ASSERT_TRUE(p.length) << p.length.err().message;
    EXPECT_EQ(p.head.authority, "bucket.localhost:9000");
    EXPECT_EQ(p.head.path, "/key");
    EXPECT_EQ(p.head.query, "uploads");
    // RFC 9112 3.2.2: the received Host is ignored; every reader of Host sees the authority.
    EXPECT_EQ(p.head.value_of("host"), "bucket.localhost:9000");
    EXPECT_EQ(p.head.headers.size(), 1u);

    p = parse("PUT HTTPS://h HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n");
    ASSERT_TRUE(p.length) << p.length.err().message;
    EXPECT_EQ(p.head.path, "/");
    EXPECT_EQ(p.head.query, "");

    p = parse("GET http://h?list-type=2 HTTP/1.1\r\nHost: h\r\n\r\n");
    ASSERT_TRUE(p.length) << p.length.err().message;
    EXPECT_EQ(p.head.path, "/");
    EXPECT_EQ(p.head.query, "list-type=2");

    // HTTP/1.0 may omit Host: the authority stands in for it.
    p = parse("GET http://h:1/b/k HTTP/1.0\r\n\r\n");
    ASSERT_TRUE(p.length) << p.length.err().message;
    EXPECT_EQ(p.head.value_of("Host"), "h:1");
    EXPECT_EQ(p.head.path, "/b/k");
    // A 1.1 client must send Host in absolute-form too (RFC 9112 3.2).
    EXPECT_EQ(parse_code("GET http://h/b HTTP/1.1\r\n\r\n"), errc::bad_request);
}

TEST(request_head, corrupted_bytes_give_an_error_or_a_bounded_length) {
    // Every position, a handful of hostile byte values: the parser must never read outside the
    // buffer (ASan) nor claim a head longer than the input.
    const std::string valid =
        "PUT /b/k?x=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nConnection: close\r\n\r\n";
    const char replacements[] = {'\0', '\r', '\n', ' ', ':', '\t', '\x7f', '\xff', '?'};
    for (std::size_t pos = 0; pos < valid.size(); ++pos) {
        for (char replacement : replacements) {
            std::string text = valid;
            text[pos] = replacement;
            parsed p = parse(text);
            if (p.length) {
                EXPECT_LE(*p.length, text.size()) << "pos " << pos;
            }
        }
    }
}

}  // namespace
}  // namespace fjord::http
