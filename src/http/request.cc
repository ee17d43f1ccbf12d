#include "http/request.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "base/encoding.h"
#include "http/field_syntax.h"

namespace fjord::http {

namespace {

using base::errc;
using base::fail;

// Where the head lies in the buffer: `start` skips empty lines sent before the request line, `end`
// is just past the blank line that closes the head. end == 0 means the head is not complete yet.
struct head_bounds {
    std::size_t start = 0;
    std::size_t end = 0;
};

// Framing facts collected across header lines and judged once the whole section is known, so that
// the answer does not depend on the order in which a client sent the fields.
struct field_facts {
    std::string_view transfer_encoding;
    std::size_t transfer_encoding_count = 0;
    bool connection_close = false;
    bool connection_keep_alive = false;
    bool expect_continue = false;
    std::optional<std::size_t> host_index;  // into request_head::headers
};

// Finds the end of the head. Every LF is checked for its CR here, so a bare-LF client fails at once
// instead of holding the connection until the head limit. Only the first max_head_bytes are ever
// scanned.
base::result<head_bounds> find_head_end(std::string_view buffer, const parse_limits& limits) {
    std::string_view window = buffer.substr(0, limits.max_head_bytes);
    head_bounds bounds;
    std::size_t line_start = 0;
    bool in_head = false;
    // Each pass moves `pos` past one LF, so there are at most window.size() passes.
    for (std::size_t pos = 0; pos < window.size();) {
        const void* hit = std::memchr(window.data() + pos, '\n', window.size() - pos);
        if (hit == nullptr) break;
        auto lf = static_cast<std::size_t>(static_cast<const char*>(hit) - window.data());
        if (lf == line_start || window[lf - 1] != '\r')
            return fail(errc::bad_request, "bare LF in the request head; CRLF is required");
        bool empty_line = lf - 1 == line_start;
        pos = line_start = lf + 1;
        if (!empty_line) {
            in_head = true;
        } else if (in_head) {
            bounds.end = lf + 1;
            return bounds;
        } else {
            // RFC 9112 section 2.2: empty lines before the request line are ignored.
            bounds.start = lf + 1;
        }
    }
    if (buffer.size() >= limits.max_head_bytes)
        return fail(errc::header_too_large, "request head exceeds max_head_bytes");
    return head_bounds{};
}

// Removes and returns the first line of `rest`. The caller guarantees that every line ends in CRLF
// (find_head_end checked it), so the byte before each LF is the CR.
std::string_view take_line(std::string_view& rest) {
    std::size_t lf = rest.find('\n');
    FJORD_ASSERT(lf != std::string_view::npos && lf > 0 && rest[lf - 1] == '\r');
    std::string_view line = rest.substr(0, lf - 1);
    rest.remove_prefix(lf + 1);
    return line;
}

method method_from_text(std::string_view text) {
    // Methods are case-sensitive (RFC 9110 section 9.1): "get" is not GET.
    if (text == "GET") return method::get;
    if (text == "HEAD") return method::head;
    if (text == "PUT") return method::put;
    if (text == "POST") return method::post;
    if (text == "DELETE") return method::delete_;
    if (text == "OPTIONS") return method::options;
    return method::other;
}

// Any byte a URI may carry, plus obs-text so that a client sending raw UTF-8 keys is judged by the
// S3 layer (which decodes and validates the key) rather than here. '#' is refused: a fragment has
// no meaning to a server, and silently keeping it in the key would surprise whoever sent it.
bool is_target_byte(char c) {
    auto byte = static_cast<unsigned char>(c);
    return byte > 0x20 && byte != 0x7f && byte != '#';
}

bool is_reg_name_byte(char c) {
    // RFC 3986 unreserved and sub-delims ('%' is checked by the caller as part of pct-encoded).
    auto byte = static_cast<unsigned char>(c);
    if ((byte >= 'a' && byte <= 'z') || (byte >= 'A' && byte <= 'Z') ||
        (byte >= '0' && byte <= '9'))
        return true;
    return std::string_view("-._~!$&'()*+,;=").find(c) != std::string_view::npos;
}

bool is_hex_digit(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

bool valid_reg_name(std::string_view host) {
    for (std::size_t i = 0; i < host.size(); ++i) {
        if (host[i] == '%') {
            if (i + 2 >= host.size() || !is_hex_digit(host[i + 1]) || !is_hex_digit(host[i + 2]))
                return false;
            i += 2;
        } else if (!is_reg_name_byte(host[i])) {
            return false;
        }
    }
    return true;
}

bool valid_port(std::string_view port) {
    if (port.size() > 5) return false;
    std::uint32_t value = 0;
    for (char c : port) {
        if (c < '0' || c > '9') return false;
        value = value * 10 + static_cast<std::uint32_t>(c - '0');
    }
    return value <= 65535;
}

}  // namespace

bool valid_authority(std::string_view text) {
    std::string_view host = text, port;
    bool has_port = false;
    if (!text.empty() && text.front() == '[') {
        std::size_t close = text.find(']');
        if (close == std::string_view::npos || close == 1) return false;
        host = text.substr(1, close - 1);
        for (char c : host)
            if (!is_hex_digit(c) && c != ':' && c != '.') return false;
        std::string_view rest = text.substr(close + 1);
        if (!rest.empty()) {
            if (rest.front() != ':') return false;
            port = rest.substr(1);
            has_port = true;
        }
    } else {
        std::size_t colon = text.find(':');
        if (colon != std::string_view::npos) {
            host = text.substr(0, colon);
            port = text.substr(colon + 1);
            has_port = true;
            if (host.empty()) return false;
        }
        if (!valid_reg_name(host)) return false;
    }
    return !has_port || valid_port(port);
}

namespace {

// The bytes before '?' and '/' in an absolute-form target start with a scheme we serve.
std::size_t scheme_prefix_bytes(std::string_view target) {
    for (std::string_view scheme : {std::string_view("http://"), std::string_view("https://")})
        if (target.size() >= scheme.size() &&
            base::iequals(target.substr(0, scheme.size()), scheme))
            return scheme.size();
    return 0;
}

base::result<void> parse_absolute_form(std::string_view target, std::size_t scheme_bytes,
                                       request_head& out) {
    std::string_view rest = target.substr(scheme_bytes);
    std::size_t end = rest.find_first_of("/?");
    out.authority = rest.substr(0, end);
    if (out.authority.empty() || !valid_authority(out.authority))
        return fail(errc::bad_request,
                    "the absolute-form request-target has a malformed authority");
    std::string_view path_and_query =
        end == std::string_view::npos ? std::string_view{} : rest.substr(end);
    std::size_t question = path_and_query.find('?');
    out.path = path_and_query.substr(0, question);
    // "http://host" and "http://host?q" address the root, as "/" does in origin-form (RFC 9112 3.2.1).
    if (out.path.empty()) out.path = "/";
    if (question != std::string_view::npos) out.query = path_and_query.substr(question + 1);
    return {};
}

base::result<void> parse_target(const parse_limits& limits, request_head& out) {
    std::string_view target = out.target;
    if (target.size() > limits.max_target_bytes)
        return fail(errc::invalid_uri, "request-target exceeds max_target_bytes");
    if (target.empty()) return fail(errc::invalid_uri, "empty request-target");
    for (char c : target)
        if (!is_target_byte(c))
            return fail(errc::invalid_uri, "invalid byte in the request-target");
    if (target == "*") {
        if (out.verb != method::options)
            return fail(errc::invalid_uri, "asterisk-form is only valid for OPTIONS");
        out.path = target;
        return {};
    }
    if (std::size_t scheme = scheme_prefix_bytes(target); scheme > 0)
        return parse_absolute_form(target, scheme, out);
    if (target.front() != '/')
        return fail(errc::invalid_uri,
                    "request-target is neither in origin-form nor in absolute-form");
    std::size_t question = target.find('?');
    out.path = target.substr(0, question);
    if (question != std::string_view::npos) out.query = target.substr(question + 1);
    return {};
}

base::result<void> parse_request_line(std::string_view line, const parse_limits& limits,
                                      request_head& out) {
    // Exactly one SP between the three parts; anything looser is ambiguous between implementations.
    std::size_t first_space = line.find(' ');
    std::size_t last_space = line.rfind(' ');
    if (first_space == std::string_view::npos || first_space == last_space)
        return fail(errc::bad_request, "request line is not METHOD SP target SP version");
    out.method_text = line.substr(0, first_space);
    if (!syntax::is_token(out.method_text)) return fail(errc::bad_request, "method is not a token");
    out.verb = method_from_text(out.method_text);
    std::string_view version = line.substr(last_space + 1);
    // HTTP-version = "HTTP/" DIGIT "." DIGIT (RFC 9112 section 2.3).
    auto digit = [](char c) { return c >= '0' && c <= '9'; };
    if (version.size() != 8 || !version.starts_with("HTTP/") || !digit(version[5]) ||
        version[6] != '.' || !digit(version[7]))
        return fail(errc::bad_request, "malformed HTTP version");
    if (version[5] != '1')
        return fail(errc::http_version_not_supported, "only HTTP/1.0 and HTTP/1.1 are served here");
    // A later 1.x minor version is answered as 1.1, the highest this server speaks (RFC 9110 2.5).
    out.version_minor = version[7] == '0' ? 0 : 1;
    out.target = line.substr(first_space + 1, last_space - first_space - 1);
    return parse_target(limits, out);
}

base::result<void> apply_content_length(std::string_view value, request_head& out) {
    // parse_u64 accepts digits only: no sign, no list form ("5, 5"), no hex.
    std::optional<std::uint64_t> length = base::parse_u64(value);
    if (!length) return fail(errc::bad_request, "Content-Length is not a decimal number");
    if (out.content_length && *out.content_length != *length)
        return fail(errc::bad_request, "conflicting Content-Length values");
    out.content_length = length;
    return {};
}

void apply_connection(std::string_view value, field_facts& facts) {
    // Each pass consumes one comma-separated option, so `start` strictly grows.
    for (std::size_t start = 0; start <= value.size();) {
        std::size_t comma = std::min(value.find(',', start), value.size());
        std::string_view option = base::trim(value.substr(start, comma - start));
        if (base::iequals(option, "close")) facts.connection_close = true;
        if (base::iequals(option, "keep-alive")) facts.connection_keep_alive = true;
        start = comma + 1;
    }
}

base::result<void> apply_field(const header& field, request_head& out, field_facts& facts) {
    if (base::iequals(field.name, "content-length")) return apply_content_length(field.value, out);
    if (base::iequals(field.name, "transfer-encoding")) {
        facts.transfer_encoding = field.value;
        ++facts.transfer_encoding_count;
    } else if (base::iequals(field.name, "connection")) {
        apply_connection(field.value, facts);
    } else if (base::iequals(field.name, "expect")) {
        if (base::iequals(field.value, "100-continue")) facts.expect_continue = true;
    } else if (base::iequals(field.name, "host")) {
        // Virtual-hosted bucket names come from Host; two of them would let a proxy and this server
        // disagree about which bucket a request addresses (RFC 9112 section 3.2 demands a 400).
        if (facts.host_index) return fail(errc::bad_request, "more than one Host field");
        if (!field.value.empty() && !valid_authority(field.value))
            return fail(errc::bad_request, "malformed Host field");
        facts.host_index = out.headers.size() - 1;
    }
    return {};
}

// RFC 9112 section 3.2: an HTTP/1.1 request without Host is refused; with an absolute-form target the
// target's authority is the host, and the Host field is replaced by it, so that the bucket a request is
// routed to and the host its signature covers are always the same.
base::result<void> settle_host(const field_facts& facts, request_head& out) {
    if (!facts.host_index && out.version_minor == 1)
        return fail(errc::bad_request, "an HTTP/1.1 request needs a Host field");
    if (out.authority.empty()) return {};
    if (facts.host_index)
        out.headers[*facts.host_index].value = out.authority;
    else
        out.headers.push_back(header{"Host", out.authority});
    return {};
}

// Decides body framing and connection persistence once every field has been seen.
base::result<void> finish_fields(const field_facts& facts, request_head& out) {
    if (facts.transfer_encoding_count > 0) {
        if (out.content_length)
            return fail(errc::bad_request, "both Content-Length and Transfer-Encoding");
        if (out.version_minor == 0)
            return fail(errc::bad_request, "Transfer-Encoding in an HTTP/1.0 request");
        if (facts.transfer_encoding_count > 1 || !base::iequals(facts.transfer_encoding, "chunked"))
            return fail(errc::not_implemented, "only Transfer-Encoding: chunked is supported");
        out.chunked = true;
    }
    if (facts.connection_close) {
        out.keep_alive = false;
    } else {
        out.keep_alive = out.version_minor == 1 || facts.connection_keep_alive;
    }
    // RFC 9110 section 10.1.1: a 100-continue expectation in an HTTP/1.0 request must be ignored.
    out.expect_continue = facts.expect_continue && out.version_minor == 1;
    return {};
}

// Clears `out` but keeps the header vector's storage, since a connection reuses one head per
// request.
void reset_head(request_head& out) {
    std::vector<header> headers = std::move(out.headers);
    headers.clear();
    out = request_head{};
    out.headers = std::move(headers);
}

}  // namespace

const header* request_head::find(std::string_view name) const {
    for (const header& field : headers)
        if (base::iequals(field.name, name)) return &field;
    return nullptr;
}

std::string_view request_head::value_of(std::string_view name) const {
    const header* field = find(name);
    return field == nullptr ? std::string_view{} : field->value;
}

base::result<std::size_t> parse_request_head(std::string_view buffer, const parse_limits& limits,
                                             request_head& out) {
    reset_head(out);
    base::result<head_bounds> bounds = find_head_end(buffer, limits);
    if (!bounds) return bounds.as_failure();
    if (bounds->end == 0) return std::size_t{0};

    // Every line of `rest` ends in CRLF; the blank line that closes the head is not part of it.
    std::string_view rest = buffer.substr(bounds->start, bounds->end - 2 - bounds->start);
    FJORD_TRY(parse_request_line(take_line(rest), limits, out));
    field_facts facts;
    // Each pass removes one line from `rest`, and the count limit bounds the passes as well.
    while (!rest.empty()) {
        if (out.headers.size() >= limits.max_header_count)
            return fail(errc::header_too_large, "more than max_header_count header fields");
        base::result<syntax::field_line> field = syntax::parse_field_line(take_line(rest));
        if (!field) return field.as_failure();
        out.headers.push_back(header{field->name, field->value});
        FJORD_TRY(apply_field(out.headers.back(), out, facts));
    }
    FJORD_TRY(finish_fields(facts, out));
    FJORD_TRY(settle_host(facts, out));
    return bounds->end;
}

}  // namespace fjord::http
