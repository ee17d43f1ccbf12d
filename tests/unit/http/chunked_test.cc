#include "http/chunked.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fjord::http {
namespace {

using base::errc;
using format = chunked_decoder::format;

constexpr std::string_view signature_1 =
    "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648";
constexpr std::string_view signature_2 =
    "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497";
constexpr std::string_view signature_3 =
    "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9";

std::span<const std::byte> as_bytes(std::string_view text) {
    return std::as_bytes(std::span<const char>(text.data(), text.size()));
}

// What a decoder made of a wire body: the payload, the events in order, and how it ended.
struct outcome {
    std::string payload;
    std::vector<std::string> events;
    std::size_t consumed = 0;
    errc code = errc::ok;
};

std::string chunk_event(const chunked_decoder& decoder) {
    return "chunk " + std::to_string(decoder.chunk_size()) + " " +
           std::string(decoder.chunk_signature());
}

// Feeds `wire` to the decoder as a connection would: `feed_bytes` more bytes become available only
// when the decoder can make no progress with what it has. Stops at the end of the body or an error.
outcome run(chunked_decoder& decoder, std::string_view wire, std::size_t feed_bytes,
            std::size_t out_capacity = 1 << 20) {
    outcome result;
    std::vector<std::byte> out(out_capacity);
    std::size_t available = std::min(feed_bytes, wire.size());
    for (std::size_t pass = 0; pass < 4 * wire.size() + 16 && !decoder.finished(); ++pass) {
        std::string_view in = wire.substr(result.consumed, available - result.consumed);
        base::result<decode_step> step = decoder.decode(as_bytes(in), out.data(), out.size());
        if (!step) {
            result.code = step.code();
            return result;
        }
        EXPECT_FALSE(step->chunk_finished && step->body_finished);
        EXPECT_LE(step->consumed, in.size());
        result.payload.append(reinterpret_cast<const char*>(out.data()), step->produced);
        result.consumed += step->consumed;
        if (step->chunk_finished) result.events.push_back(chunk_event(decoder));
        if (step->body_finished) result.events.push_back("end");
        bool progressed = step->consumed > 0 || step->chunk_finished || step->body_finished;
        if (!progressed) {
            if (available == wire.size()) break;
            available = std::min(available + feed_bytes, wire.size());
        }
    }
    return result;
}

std::string http_chunk(std::string_view data) {
    char size[32];
    std::snprintf(size, sizeof size, "%zx", data.size());
    return std::string(size) + "\r\n" + std::string(data) + "\r\n";
}

std::string pattern(std::size_t size_bytes, std::uint32_t seed) {
    std::string data(size_bytes, '\0');
    std::uint32_t state = seed;
    for (char& c : data) {
        state = state * 1664525u + 1013904223u;
        c = static_cast<char>(state >> 24);
    }
    return data;
}

std::string sample_http_body() {
    return http_chunk(pattern(300, 1)) + http_chunk("\r\n0\r\n") + http_chunk(pattern(4097, 2)) +
           "0\r\n\r\n";
}

std::string sample_http_payload() { return pattern(300, 1) + "\r\n0\r\n" + pattern(4097, 2); }

std::string aws_signed_body() {
    return "10000;chunk-signature=" + std::string(signature_1) + "\r\n" + std::string(65536, 'a') +
           "\r\n" + "400;chunk-signature=" + std::string(signature_2) + "\r\n" +
           std::string(1024, 'a') + "\r\n" + "0;chunk-signature=" + std::string(signature_3) +
           "\r\n\r\n";
}

errc decode_code(format f, std::string_view wire, chunk_limits limits = {}) {
    chunked_decoder decoder(f, limits);
    return run(decoder, wire, wire.size()).code;
}

TEST(chunked_decoder, http_body_in_one_buffer) {
    std::string wire = sample_http_body();
    chunked_decoder decoder(format::http);
    outcome result = run(decoder, wire, wire.size());
    ASSERT_EQ(result.code, errc::ok);
    EXPECT_EQ(result.payload, sample_http_payload());
    EXPECT_EQ(result.consumed, wire.size());
    std::vector<std::string> expected = {"chunk 300 ", "chunk 5 ", "chunk 4097 ", "chunk 0 ",
                                         "end"};
    EXPECT_EQ(result.events, expected);
    EXPECT_TRUE(decoder.finished());
    EXPECT_TRUE(decoder.end_of_input());
    EXPECT_TRUE(decoder.trailers().empty());
}

TEST(chunked_decoder, one_byte_at_a_time_matches_one_buffer) {
    std::string wire = sample_http_body();
    chunked_decoder whole(format::http);
    outcome expected = run(whole, wire, wire.size());
    chunked_decoder bytewise(format::http);
    outcome result = run(bytewise, wire, 1);
    ASSERT_EQ(result.code, errc::ok);
    EXPECT_EQ(result.payload, expected.payload);
    EXPECT_EQ(result.events, expected.events);
    EXPECT_EQ(result.consumed, wire.size());
    EXPECT_TRUE(bytewise.finished());
}

TEST(chunked_decoder, small_output_buffer_gives_same_payload) {
    std::string wire = sample_http_body();
    chunked_decoder decoder(format::http);
    outcome result = run(decoder, wire, wire.size(), 7);
    ASSERT_EQ(result.code, errc::ok);
    EXPECT_EQ(result.payload, sample_http_payload());
    EXPECT_TRUE(decoder.finished());
}

TEST(chunked_decoder, body_end_is_a_separate_step_after_final_chunk) {
    std::string wire = "3\r\nabc\r\n0\r\n\r\n";
    chunked_decoder decoder(format::http);
    std::vector<std::byte> out(64);
    std::span<const std::byte> in = as_bytes(wire);
    auto step = decoder.decode(in, out.data(), out.size());
    ASSERT_TRUE(step);
    EXPECT_TRUE(step->chunk_finished);
    EXPECT_EQ(step->produced, 3u);
    in = in.subspan(step->consumed);
    step = decoder.decode(in, out.data(), out.size());
    ASSERT_TRUE(step);
    EXPECT_TRUE(step->chunk_finished);  // the 0-size chunk, reported before its trailers
    EXPECT_FALSE(step->body_finished);
    EXPECT_EQ(decoder.chunk_size(), 0u);
    EXPECT_FALSE(decoder.finished());
    in = in.subspan(step->consumed);
    step = decoder.decode(in, out.data(), out.size());
    ASSERT_TRUE(step);
    EXPECT_TRUE(step->body_finished);
    EXPECT_EQ(step->consumed, 2u);
    EXPECT_TRUE(decoder.finished());
}

TEST(chunked_decoder, bytes_after_the_body_are_not_consumed) {
    std::string body = "5\r\nhello\r\n0\r\n\r\n";
    std::string wire = body + "GET /next HTTP/1.1\r\n\r\n";
    chunked_decoder decoder(format::http);
    outcome result = run(decoder, wire, wire.size());
    ASSERT_EQ(result.code, errc::ok);
    EXPECT_EQ(result.consumed, body.size());
    EXPECT_EQ(result.payload, "hello");
}

TEST(chunked_decoder, in_place_decoding_with_out_equal_to_in) {
    std::string wire = sample_http_body();
    std::vector<std::byte> buffer(wire.size());
    std::memcpy(buffer.data(), wire.data(), wire.size());
    chunked_decoder decoder(format::http);
    std::string payload;
    std::size_t read_pos = 0;
    for (std::size_t pass = 0; pass < wire.size() && !decoder.finished(); ++pass) {
        std::span<const std::byte> in(buffer.data() + read_pos, buffer.size() - read_pos);
        std::byte* out = buffer.data() + read_pos;
        auto step = decoder.decode(in, out, in.size());
        ASSERT_TRUE(step) << step.err().message;
        payload.append(reinterpret_cast<const char*>(out), step->produced);
        read_pos += step->consumed;
    }
    EXPECT_TRUE(decoder.finished());
    EXPECT_EQ(payload, sample_http_payload());
}

TEST(chunked_decoder, in_place_decoding_compacts_payload_to_buffer_start) {
    // A connection decoding in place keeps a write position behind its read position: the payload
    // ends up contiguous at the start of the receive buffer.
    std::string wire = sample_http_body();
    std::vector<std::byte> buffer(wire.size());
    std::memcpy(buffer.data(), wire.data(), wire.size());
    chunked_decoder decoder(format::http);
    std::size_t read_pos = 0, write_pos = 0;
    for (std::size_t pass = 0; pass < wire.size() && !decoder.finished(); ++pass) {
        std::span<const std::byte> in(buffer.data() + read_pos, buffer.size() - read_pos);
        auto step = decoder.decode(in, buffer.data() + write_pos, buffer.size() - write_pos);
        ASSERT_TRUE(step) << step.err().message;
        read_pos += step->consumed;
        write_pos += step->produced;
        ASSERT_LE(write_pos, read_pos);
    }
    EXPECT_TRUE(decoder.finished());
    std::string payload(reinterpret_cast<const char*>(buffer.data()), write_pos);
    EXPECT_EQ(payload, sample_http_payload());
}

TEST(chunked_decoder, aws_signed_chunks_report_each_signature) {
    std::string wire = aws_signed_body();
    for (std::size_t feed_bytes : {wire.size(), std::size_t{1}, std::size_t{1000}}) {
        SCOPED_TRACE(feed_bytes);
        chunked_decoder decoder(format::aws);
        outcome result = run(decoder, wire, feed_bytes);
        ASSERT_EQ(result.code, errc::ok);
        EXPECT_EQ(result.payload, std::string(65536 + 1024, 'a'));
        std::vector<std::string> expected = {
            "chunk 65536 " + std::string(signature_1),
            "chunk 1024 " + std::string(signature_2),
            "chunk 0 " + std::string(signature_3),
            "end",
        };
        EXPECT_EQ(result.events, expected);
        EXPECT_EQ(decoder.chunk_signature(), signature_3);
        EXPECT_TRUE(decoder.trailers().empty());
    }
}

TEST(chunked_decoder, aws_unsigned_trailer_form) {
    std::string wire = "400\r\n" + std::string(1024, 'z') + "\r\n0\r\n" +
                       "X-Amz-Checksum-Crc32:  AAAAAA== \r\n\r\n";
    for (std::size_t feed_bytes : {wire.size(), std::size_t{1}}) {
        SCOPED_TRACE(feed_bytes);
        chunked_decoder decoder(format::aws);
        outcome result = run(decoder, wire, feed_bytes);
        ASSERT_EQ(result.code, errc::ok);
        EXPECT_EQ(result.payload, std::string(1024, 'z'));
        std::vector<std::string> expected = {"chunk 1024 ", "chunk 0 ", "end"};
        EXPECT_EQ(result.events, expected);
        ASSERT_EQ(decoder.trailers().size(), 1u);
        EXPECT_EQ(decoder.trailers()[0].first, "x-amz-checksum-crc32");
        EXPECT_EQ(decoder.trailers()[0].second, "AAAAAA==");
    }
}

TEST(chunked_decoder, aws_signed_trailer_form) {
    std::string trailer_signature(64, 'f');
    std::string wire = "3;chunk-signature=" + std::string(signature_1) + "\r\nabc\r\n" +
                       "0;chunk-signature=" + std::string(signature_2) + "\r\n" +
                       "x-amz-checksum-crc32c:sOO8/Q==\r\n" +
                       "x-amz-trailer-signature:" + trailer_signature + "\r\n\r\n";
    chunked_decoder decoder(format::aws);
    outcome result = run(decoder, wire, wire.size());
    ASSERT_EQ(result.code, errc::ok);
    std::vector<std::string> expected = {"chunk 3 " + std::string(signature_1),
                                         "chunk 0 " + std::string(signature_2), "end"};
    EXPECT_EQ(result.events, expected);
    ASSERT_EQ(decoder.trailers().size(), 2u);
    EXPECT_EQ(decoder.trailers()[0].second, "sOO8/Q==");
    EXPECT_EQ(decoder.trailers()[1].first, "x-amz-trailer-signature");
    EXPECT_EQ(decoder.trailers()[1].second, trailer_signature);
}

TEST(chunked_decoder, http_extensions_are_ignored) {
    std::string wire = "5 ; name=value;flag ;q=\"a;b\\\"c\"\r\nhello\r\n0;last\r\nA: 1\r\n\r\n";
    chunked_decoder decoder(format::http);
    outcome result = run(decoder, wire, 1);
    ASSERT_EQ(result.code, errc::ok);
    EXPECT_EQ(result.payload, "hello");
    EXPECT_EQ(decoder.chunk_signature(), "");
    ASSERT_EQ(decoder.trailers().size(), 1u);
    EXPECT_EQ(decoder.trailers()[0].first, "a");
}

TEST(chunked_decoder, leading_zeros_and_size_bound) {
    EXPECT_EQ(decode_code(format::http, "00000000000000000005\r\nhello\r\n0\r\n\r\n"), errc::ok);
    EXPECT_EQ(decode_code(format::http, "00A\r\n0123456789\r\n0000\r\n\r\n"), errc::ok);
    // 2^40 itself is allowed (the body is merely truncated); one more is refused at once.
    chunked_decoder at_bound(format::http);
    EXPECT_EQ(run(at_bound, "10000000000\r\n", 64).code, errc::ok);
    EXPECT_EQ(at_bound.chunk_size(), std::uint64_t{1} << 40);
    EXPECT_EQ(decode_code(format::http, "10000000001\r\n"), errc::bad_request);
    EXPECT_EQ(decode_code(format::http, "ffffffffffffffffff\r\n"), errc::bad_request);
}

TEST(chunked_decoder, size_line_limit) {
    chunk_limits limits;
    limits.max_chunk_line_bytes = 16;
    std::string at_limit = "5;" + std::string(14, 'e');  // 16 bytes before the CRLF
    EXPECT_EQ(decode_code(format::http, at_limit + "\r\nhello\r\n0\r\n\r\n", limits), errc::ok);
    std::string over = "5;" + std::string(15, 'e') + "\r\nhello\r\n0\r\n\r\n";
    EXPECT_EQ(decode_code(format::http, over, limits), errc::header_too_large);
    chunked_decoder bytewise(format::http, limits);
    EXPECT_EQ(run(bytewise, over, 1).code, errc::header_too_large);
    // A line that never ends fails as soon as it passes the limit, without waiting for an LF.
    chunked_decoder endless(format::http, limits);
    EXPECT_EQ(run(endless, "5;" + std::string(1000, 'e'), 1).code, errc::header_too_large);
}

TEST(chunked_decoder, trailer_limits) {
    chunk_limits limits;
    limits.max_trailer_count = 2;
    std::string two = "0\r\nA: 1\r\nB: 2\r\n\r\n";
    EXPECT_EQ(decode_code(format::http, two, limits), errc::ok);
    std::string three = "0\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n";
    EXPECT_EQ(decode_code(format::http, three, limits), errc::header_too_large);

    limits = {};
    limits.max_trailer_bytes = 16;
    // "A: 123456789" CRLF CRLF is exactly 16 bytes.
    EXPECT_EQ(decode_code(format::http, "0\r\nA: 123456789\r\n\r\n", limits), errc::ok);
    EXPECT_EQ(decode_code(format::http, "0\r\nA: 1234567890\r\n\r\n", limits),
              errc::header_too_large);
}

TEST(chunked_decoder, malformed_bodies_fail) {
    struct malformed_case {
        const char* name;
        format f;
        std::string wire;
        errc expected;
    };
    const malformed_case cases[] = {
        {"non-hex size", format::http, "zz\r\n", errc::bad_request},
        {"signed size", format::http, "-5\r\nhello\r\n", errc::bad_request},
        {"empty size line", format::http, "\r\n", errc::bad_request},
        {"hex prefix", format::http, "0x5\r\nhello\r\n", errc::bad_request},
        {"space after size", format::http, "5 \r\nhello\r\n", errc::bad_request},
        {"junk after size", format::http, "5x\r\nhello\r\n", errc::bad_request},
        {"missing crlf after data", format::http, "3\r\nabcX\r\n0\r\n\r\n", errc::bad_request},
        {"cr without lf after data", format::http, "3\r\nabc\rX\n0\r\n\r\n", errc::bad_request},
        {"data longer than size", format::http, "3\r\nabcd\r\n0\r\n\r\n", errc::bad_request},
        {"bare lf size line", format::http, "5\nhello\r\n0\r\n\r\n", errc::bad_request},
        {"bare lf trailer", format::http, "0\r\nA: 1\n\r\n", errc::bad_request},
        {"bare lf end", format::http, "0\r\n\n", errc::bad_request},
        {"unterminated quoted ext", format::http, "5;a=\"b\r\nhello\r\n", errc::bad_request},
        {"ext without name", format::http, "5;=b\r\nhello\r\n", errc::bad_request},
        {"trailer obs-fold", format::http, "0\r\nA: 1\r\n 2\r\n\r\n", errc::bad_request},
        {"trailer no colon", format::http, "0\r\nA 1\r\n\r\n", errc::bad_request},
        {"trailer space before colon", format::http, "0\r\nA : 1\r\n\r\n", errc::bad_request},
        {"short signature", format::aws, "3;chunk-signature=abc\r\nabc\r\n", errc::bad_request},
        {"non-hex signature", format::aws,
         "3;chunk-signature=" + std::string(64, 'g') + "\r\nabc\r\n", errc::bad_request},
        {"unknown aws extension", format::aws, "3;foo=bar\r\nabc\r\n", errc::bad_request},
        {"two signatures", format::aws,
         "3;chunk-signature=" + std::string(signature_1) +
             ";chunk-signature=" + std::string(signature_1) + "\r\nabc\r\n",
         errc::bad_request},
    };
    for (const malformed_case& c : cases) {
        SCOPED_TRACE(c.name);
        EXPECT_EQ(decode_code(c.f, c.wire), c.expected);
        chunked_decoder bytewise(c.f);
        EXPECT_EQ(run(bytewise, c.wire, 1).code, c.expected);
    }
}

TEST(chunked_decoder, truncated_body_is_incomplete) {
    const std::string truncated[] = {
        "",
        "5",
        "5\r\nhel",
        "5\r\nhello",
        "5\r\nhello\r\n",
        "5\r\nhello\r\n0\r\n",
        "5\r\nhello\r\n0\r\nA: 1\r\n",
    };
    for (const std::string& wire : truncated) {
        SCOPED_TRACE(wire);
        chunked_decoder decoder(format::http);
        outcome result = run(decoder, wire, 1);
        EXPECT_EQ(result.code, errc::ok);
        EXPECT_FALSE(decoder.finished());
        EXPECT_EQ(decoder.end_of_input().code(), errc::incomplete_body);
    }
}

TEST(chunked_decoder, failure_is_sticky) {
    chunked_decoder decoder(format::http);
    std::vector<std::byte> out(16);
    EXPECT_EQ(decoder.decode(as_bytes("zz\r\n"), out.data(), out.size()).code(), errc::bad_request);
    auto again = decoder.decode(as_bytes("0\r\n\r\n"), out.data(), out.size());
    EXPECT_EQ(again.code(), errc::bad_request);
    EXPECT_FALSE(decoder.finished());
}

TEST(chunked_decoder, corrupted_bytes_give_an_error_or_bounded_progress) {
    // Every position of an aws body with a trailer, a handful of hostile byte values, fed a byte
    // at a time: the decoder must stay inside its buffers (ASan) and never produce more than it
    // consumed.
    const std::string valid = "3;chunk-signature=" + std::string(signature_1) + "\r\nabc\r\n" +
                              "0;chunk-signature=" + std::string(signature_2) + "\r\n" +
                              "x-amz-checksum-crc32:AAAAAA==\r\n\r\n";
    const char replacements[] = {'\0', '\r', '\n', ' ', ';', '=', '"', '\xff', '0'};
    for (std::size_t pos = 0; pos < valid.size(); ++pos) {
        for (char replacement : replacements) {
            std::string wire = valid;
            wire[pos] = replacement;
            chunked_decoder decoder(format::aws);
            outcome result = run(decoder, wire, 1);
            EXPECT_LE(result.consumed, wire.size());
            EXPECT_LE(result.payload.size(), result.consumed);
        }
    }
}

}  // namespace
}  // namespace fjord::http
