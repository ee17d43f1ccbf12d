#pragma once

// HTTP/1.1 request-head parser (RFC 9112, strict subset). It parses the request line and the header
// section in place: every string_view in a request_head points into the caller's receive buffer, so
// the buffer must outlive the head and must not move while the head is in use. The parser keeps no
// state between calls; a connection calls it again with a longer buffer after each receive, and it
// answers 0 cheaply until the blank line that ends the head has arrived.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace fjord::http {

enum class method { get, head, put, post, delete_, options, other };

struct header {
    std::string_view name;
    std::string_view value;  // trimmed of optional whitespace (SP / HTAB)
};

// Bounds that keep a hostile client from making the parser hold or scan unbounded input.
struct parse_limits {
    std::size_t max_head_bytes = 64 * 1024;  // request line + headers + final CRLF
    std::size_t max_header_count = 256;
    std::size_t max_target_bytes = 16 * 1024;  // request-target length
};

struct request_head {
    method verb = method::other;
    std::string_view method_text;
    std::string_view target;     // raw request-target as sent
    std::string_view authority;  // of an absolute-form target ("http://host:port/path"), else empty
    std::string_view path;       // raw, before '?' (the path part of an absolute-form target)
    std::string_view query;      // raw, after '?' (without '?'), empty if none
    int version_minor = 1;       // HTTP/1.0 -> 0, HTTP/1.1 -> 1
    std::vector<header> headers;

    // Derived while parsing:
    std::optional<std::uint64_t> content_length;
    bool chunked = false;          // Transfer-Encoding: chunked (final coding)
    bool keep_alive = true;        // from version + Connection header
    bool expect_continue = false;  // Expect: 100-continue (case-insensitive), HTTP/1.1 only

    const header* find(std::string_view name) const;         // case-insensitive, first match
    std::string_view value_of(std::string_view name) const;  // "" if absent
};

// Parses the head at the start of `buffer`. Returns the number of bytes the head occupies
// (including the final CRLFCRLF, and any empty lines before the request line) when complete, 0 when
// more bytes are needed and the limit is not yet exceeded, or an error:
//   bad_request       malformed syntax, bare LF, smuggling-prone framing (CL+TE, conflicting CLs), an
//                     HTTP/1.1 request without Host, a malformed Host or absolute-form authority
//   header_too_large  head longer than max_head_bytes, more than max_header_count fields
//   invalid_uri       request-target in neither origin-form nor absolute-form (or '*' for OPTIONS), bad
//                     bytes, too long
//   not_implemented   a transfer-coding other than exactly "chunked"
//   http_version_not_supported  a well-formed version other than HTTP/1.x
// An absolute-form target's authority replaces the Host field's value (RFC 9112 section 3.2.2), so
// every later reader of Host sees the host the request was addressed to.
// All string_views in `out` point into `buffer`; `out` is cleared first and is unspecified after an
// error.
// Whether `text` is a valid Host field value or absolute-form authority: host [ ":" port ], where host is
// an IP literal in brackets or an RFC 3986 reg-name (no userinfo, no '/'), and port is 0..65535.
bool valid_authority(std::string_view text);

base::result<std::size_t> parse_request_head(std::string_view buffer, const parse_limits& limits,
                                             request_head& out);

}  // namespace fjord::http
