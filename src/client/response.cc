#include "client/response.h"

#include <array>

#include "base/encoding.h"

namespace fjord::client {

namespace {

constexpr std::string_view head_end = "\r\n\r\n";

// Every code of the error table, in table order (the X-macro keeps this list complete).
constexpr std::array all_codes = {
#define FJORD_CLIENT_ERRC_LIST(name, number, s3, status, retry) base::errc::name,
    FJORD_ERROR_CODES(FJORD_CLIENT_ERRC_LIST)
#undef FJORD_CLIENT_ERRC_LIST
};

bool parse_status_line(std::string_view line, response_head& out) {
    // "HTTP/1.1 200 OK" (the reason phrase may be empty).
    constexpr std::string_view prefix = "HTTP/1.";
    if (line.size() < 12 || line.substr(0, prefix.size()) != prefix) return false;
    char minor = line[7];
    if ((minor != '0' && minor != '1') || line[8] != ' ') return false;
    out.version_minor = minor - '0';
    auto code = base::parse_u64(line.substr(9, 3));
    if (!code || *code < 100 || *code > 999) return false;
    if (line.size() > 12 && line[12] != ' ') return false;
    out.status = static_cast<int>(*code);
    out.keep_alive = out.version_minor == 1;
    return true;
}

bool apply_header(const response_header& h, response_head& out) {
    if (base::iequals(h.name, "content-length")) {
        auto n = base::parse_u64(h.value);
        if (!n || (out.content_length && *out.content_length != *n)) return false;
        out.content_length = *n;
    } else if (base::iequals(h.name, "transfer-encoding")) {
        out.chunked = true;
    } else if (base::iequals(h.name, "connection")) {
        if (base::iequals(h.value, "close"))
            out.keep_alive = false;
        else if (base::iequals(h.value, "keep-alive"))
            out.keep_alive = true;
    }
    return true;
}

std::string_view element_text(std::string_view xml, std::string_view name) {
    std::string open = "<" + std::string(name) + ">";
    std::string close = "</" + std::string(name) + ">";
    auto start = xml.find(open);
    if (start == std::string_view::npos) return {};
    start += open.size();
    auto end = xml.find(close, start);
    if (end == std::string_view::npos) return {};
    return xml.substr(start, end - start);
}

}  // namespace

std::string_view response_head::value_of(std::string_view name) const {
    for (const auto& h : headers)
        if (base::iequals(h.name, name)) return h.value;
    return {};
}

base::result<std::size_t> parse_response_head(std::string_view buffer, std::size_t max_head_bytes,
                                              response_head& out) {
    out = response_head{};
    auto end = buffer.find(head_end);
    if (end == std::string_view::npos) {
        if (buffer.size() >= max_head_bytes)
            return base::fail(base::errc::header_too_large, "response head longer than the limit");
        return std::size_t{0};
    }
    if (end + head_end.size() > max_head_bytes)
        return base::fail(base::errc::header_too_large, "response head longer than the limit");
    std::string_view rest = buffer.substr(0, end + 2);  // every line, each ending in CRLF
    auto line_end = rest.find("\r\n");
    if (!parse_status_line(rest.substr(0, line_end), out))
        return base::fail(base::errc::bad_request, "malformed status line");
    rest.remove_prefix(line_end + 2);
    while (!rest.empty()) {
        line_end = rest.find("\r\n");
        std::string_view line = rest.substr(0, line_end);
        rest.remove_prefix(line_end + 2);
        auto colon = line.find(':');
        if (colon == std::string_view::npos || colon == 0)
            return base::fail(base::errc::bad_request, "malformed response header line");
        response_header h{line.substr(0, colon), base::trim(line.substr(colon + 1))};
        if (!apply_header(h, out)) return base::fail(base::errc::bad_request, "bad Content-Length");
        out.headers.push_back(h);
    }
    return end + head_end.size();
}

s3_error_document parse_s3_error(std::string_view xml) {
    return {std::string(element_text(xml, "Code")), std::string(element_text(xml, "Message")),
            std::string(element_text(xml, "RequestId"))};
}

base::error error_from_response(int status, std::string_view xml_body) {
    s3_error_document doc = parse_s3_error(xml_body);
    base::errc code = status == 404   ? base::errc::not_found
                      : status == 403 ? base::errc::access_denied
                      : status == 503 ? base::errc::service_unavailable
                      : status >= 500 ? base::errc::internal
                                      : base::errc::bad_request;
    bool found = false;
    for (base::errc c : all_codes) {
        if (c == base::errc::ok || doc.code.empty() || base::errc_s3_code(c) != doc.code) continue;
        if (!found || base::errc_http_status(c) == status) code = c;
        if (base::errc_http_status(c) == status) break;
        found = true;
    }
    std::string message = "HTTP " + std::to_string(status);
    if (!doc.code.empty()) message += " " + doc.code;
    if (!doc.message.empty()) message += ": " + doc.message;
    if (!doc.request_id.empty()) message += " (request id " + doc.request_id + ")";
    return base::error{code, std::move(message), status, std::move(doc.code),
                       std::move(doc.request_id)};
}

}  // namespace fjord::client
