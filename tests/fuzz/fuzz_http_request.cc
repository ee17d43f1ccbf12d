// Fuzzes http::parse_request_head, the first parser every byte from a client reaches.
//
// Input: the raw bytes a client sent. Invariants checked:
//   - a complete head's length is at most the input size, and reparsing exactly that prefix gives
//     the same length and the same parsed head, while the prefix one byte shorter is incomplete;
//   - every view in the head lies inside the buffer;
//   - framing is never ambiguous (Content-Length and chunked together, chunked in HTTP/1.0);
//   - tighter limits never accept what the defaults refuse, and never change the answer.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_check.h"
#include "http/request.h"

namespace {

using fjord::base::errc;
using fjord::http::parse_limits;
using fjord::http::parse_request_head;
using fjord::http::request_head;

bool inside(std::string_view part, std::string_view buffer) {
    if (part.empty()) return true;  // an empty view may point anywhere, including nowhere
    return part.data() >= buffer.data() &&
           part.data() + part.size() <= buffer.data() + buffer.size();
}

void check_views(const request_head& head, std::string_view buffer) {
    FUZZ_CHECK(inside(head.method_text, buffer));
    FUZZ_CHECK(inside(head.target, buffer));
    FUZZ_CHECK(inside(head.path, buffer));
    FUZZ_CHECK(inside(head.query, buffer));
    FUZZ_CHECK(!head.method_text.empty());
    FUZZ_CHECK(!head.target.empty());
    for (const auto& field : head.headers) {
        FUZZ_CHECK(inside(field.name, buffer));
        FUZZ_CHECK(inside(field.value, buffer));
        FUZZ_CHECK(!field.name.empty());
    }
}

void check_same_head(const request_head& a, const request_head& b) {
    FUZZ_CHECK(a.verb == b.verb);
    FUZZ_CHECK(a.method_text == b.method_text);
    FUZZ_CHECK(a.target == b.target);
    FUZZ_CHECK(a.path == b.path);
    FUZZ_CHECK(a.query == b.query);
    FUZZ_CHECK(a.version_minor == b.version_minor);
    FUZZ_CHECK(a.headers.size() == b.headers.size());
    for (std::size_t i = 0; i < a.headers.size(); ++i) {
        FUZZ_CHECK(a.headers[i].name == b.headers[i].name);
        FUZZ_CHECK(a.headers[i].value == b.headers[i].value);
    }
    FUZZ_CHECK(a.content_length == b.content_length);
    FUZZ_CHECK(a.chunked == b.chunked);
    FUZZ_CHECK(a.keep_alive == b.keep_alive);
    FUZZ_CHECK(a.expect_continue == b.expect_continue);
}

void check_complete(std::string_view buffer, std::size_t length, const request_head& head,
                    const parse_limits& limits) {
    FUZZ_CHECK(length <= buffer.size());
    FUZZ_CHECK(length <= limits.max_head_bytes);
    FUZZ_CHECK(length >= 4);
    std::string_view prefix = buffer.substr(0, length);
    FUZZ_CHECK(prefix.ends_with("\r\n\r\n"));
    check_views(head, prefix);
    FUZZ_CHECK(head.headers.size() <= limits.max_header_count);
    FUZZ_CHECK(head.target.size() <= limits.max_target_bytes);
    FUZZ_CHECK(!(head.chunked && head.content_length));
    FUZZ_CHECK(!(head.chunked && head.version_minor == 0));
    FUZZ_CHECK(!(head.expect_continue && head.version_minor == 0));

    request_head again;
    auto reparsed = parse_request_head(prefix, limits, again);
    FUZZ_CHECK(reparsed && *reparsed == length);
    check_same_head(head, again);

    auto shorter = parse_request_head(prefix.substr(0, length - 1), limits, again);
    FUZZ_CHECK((shorter && *shorter == 0) || shorter.code() == errc::header_too_large);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view buffer(reinterpret_cast<const char*>(data), size);

    const parse_limits defaults;
    request_head head;
    auto parsed = parse_request_head(buffer, defaults, head);
    if (parsed && *parsed > 0) check_complete(buffer, *parsed, head, defaults);

    parse_limits tight;
    tight.max_head_bytes = 512;
    tight.max_header_count = 4;
    tight.max_target_bytes = 64;
    request_head tight_head;
    auto tight_parsed = parse_request_head(buffer, tight, tight_head);
    if (tight_parsed && *tight_parsed > 0) {
        check_complete(buffer, *tight_parsed, tight_head, tight);
        FUZZ_CHECK(parsed && *parsed == *tight_parsed);
        check_same_head(head, tight_head);
    }
    return 0;
}
