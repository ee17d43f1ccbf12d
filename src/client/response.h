#pragma once

// HTTP/1.1 response-head parsing for the client, and the S3 error document. Like the server's request
// parser, it parses in place: the string_views in a response_head point into the caller's buffer.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "base/result.h"

namespace fjord::client {

struct response_header {
    std::string_view name;
    std::string_view value;  // trimmed of surrounding spaces and tabs
};

struct response_head {
    int status = 0;
    int version_minor = 1;
    std::vector<response_header> headers;
    std::optional<std::uint64_t> content_length;
    bool chunked = false;    // Transfer-Encoding: chunked (the client does not decode it)
    bool keep_alive = true;  // from the version and the Connection header

    std::string_view value_of(std::string_view name) const;  // case-insensitive; "" if absent
};

// Parses the head at the start of `buffer`. Returns the bytes it occupies (through the blank line), 0
// when more bytes are needed, or bad_request (malformed) / header_too_large (no end within
// max_head_bytes). `out` is cleared first.
base::result<std::size_t> parse_response_head(std::string_view buffer, std::size_t max_head_bytes,
                                              response_head& out);

// The <Code> and <Message> of an S3 error document (empty when absent).
struct s3_error_document {
    std::string code;
    std::string message;
    std::string request_id;
};
s3_error_document parse_s3_error(std::string_view xml);

// The error a non-2xx response stands for: the table entry whose S3 code and status match (the S3
// code alone if none does), else a generic code for the status class. The message carries the
// status, the S3 code and the server's message.
base::error error_from_response(int status, std::string_view xml_body);

}  // namespace fjord::client
