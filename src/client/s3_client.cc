#include "client/s3_client.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <utility>

#include "base/clock.h"
#include "base/checksum.h"
#include "base/digest.h"
#include "base/encoding.h"
#include "base/kv_wire.h"

namespace fjord::client {

namespace {

constexpr int max_informational_responses = 4;  // 1xx heads skipped before the final one

bool is_success(int status) { return status >= 200 && status < 300; }

// "bytes 0-99/1234" -> 1234; nullopt when absent or malformed ("*" totals included).
std::optional<std::uint64_t> parse_content_range_total(std::string_view value) {
    auto slash = value.rfind('/');
    if (value.substr(0, 6) != "bytes " || slash == std::string_view::npos) return std::nullopt;
    return base::parse_u64(value.substr(slash + 1));
}

// The text of the first <name> element in a small XML result (the values we read, upload ids and
// ETags, never need entity decoding beyond &quot;).
std::optional<std::string> xml_element(std::string_view xml, std::string_view name) {
    std::string open = "<" + std::string(name) + ">", close = "</" + std::string(name) + ">";
    auto begin = xml.find(open);
    if (begin == std::string_view::npos) return std::nullopt;
    begin += open.size();
    auto end = xml.find(close, begin);
    if (end == std::string_view::npos) return std::nullopt;
    std::string text(xml.substr(begin, end - begin));
    for (std::size_t at; (at = text.find("&quot;")) != std::string::npos;)
        text.replace(at, 6, "\"");
    return text;
}

// Replaces the five predefined XML entities and numeric character references (&#N; &#xN;) with
// their characters (UTF-8); anything else is kept as it is.
std::string xml_decode(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (std::size_t i = 0; i < text.size(); ++i) {
        std::size_t semicolon = text[i] == '&' ? text.find(';', i) : std::string_view::npos;
        if (semicolon == std::string_view::npos || semicolon - i > 10) {
            out += text[i];
            continue;
        }
        std::string_view entity = text.substr(i + 1, semicolon - i - 1);
        std::uint32_t code = 0;
        if (entity == "amp")
            code = '&';
        else if (entity == "lt")
            code = '<';
        else if (entity == "gt")
            code = '>';
        else if (entity == "quot")
            code = '"';
        else if (entity == "apos")
            code = '\'';
        else if (entity.size() > 1 && entity[0] == '#') {
            bool hex = entity[1] == 'x' || entity[1] == 'X';
            std::string digits(entity.substr(hex ? 2 : 1));
            char* end = nullptr;
            unsigned long v = std::strtoul(digits.c_str(), &end, hex ? 16 : 10);
            if (!digits.empty() && *end == '\0' && v > 0 && v <= 0x10FFFF)
                code = static_cast<std::uint32_t>(v);
        }
        if (code == 0) {
            out += text[i];
            continue;
        }
        if (code < 0x80)
            out += static_cast<char>(code);
        else if (code < 0x800)
            out += static_cast<char>(0xC0 | (code >> 6)),
                out += static_cast<char>(0x80 | (code & 0x3F));
        else if (code < 0x10000)
            out += static_cast<char>(0xE0 | (code >> 12)),
                out += static_cast<char>(0x80 | ((code >> 6) & 0x3F)),
                out += static_cast<char>(0x80 | (code & 0x3F));
        else
            out += static_cast<char>(0xF0 | (code >> 18)),
                out += static_cast<char>(0x80 | ((code >> 12) & 0x3F)),
                out += static_cast<char>(0x80 | ((code >> 6) & 0x3F)),
                out += static_cast<char>(0x80 | (code & 0x3F));
        i = semicolon;
    }
    return out;
}

// The contents of every <name>...</name> element of `xml`, in order (not nested in one another).
std::vector<std::string_view> xml_blocks(std::string_view xml, std::string_view name) {
    std::string open = "<" + std::string(name) + ">", close = "</" + std::string(name) + ">";
    std::vector<std::string_view> out;
    for (std::size_t at = 0;;) {  // bounded: every round moves past one element
        auto begin = xml.find(open, at);
        if (begin == std::string_view::npos) break;
        begin += open.size();
        auto end = xml.find(close, begin);
        if (end == std::string_view::npos) break;
        out.push_back(xml.substr(begin, end - begin));
        at = end + close.size();
    }
    return out;
}

// The decoded text of the first <name> element of `xml`, or "" when absent.
std::string xml_text(std::string_view xml, std::string_view name) {
    auto blocks = xml_blocks(xml, name);
    return blocks.empty() ? std::string() : xml_decode(blocks.front());
}

std::string query_pair(std::string_view name, std::string_view value) {
    return std::string(name) + "=" + base::uri_encode(value, false);
}

std::string unquote(std::string_view etag) {
    if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"')
        etag = etag.substr(1, etag.size() - 2);
    return std::string(etag);
}

}  // namespace

std::string object_path(std::string_view bucket, std::string_view key) {
    std::string path = "/" + base::uri_encode(bucket, false);
    if (!key.empty()) path += "/" + base::uri_encode(key, true);
    return path;
}

s3_client::s3_client(client_options options)
    : _options(std::move(options)),
      _host_header(_options.endpoint.host + ":" + std::to_string(_options.endpoint.port)),
      _connection(connection_options{_options.endpoint, _options.io_timeout_ms,
                                     _options.socket_buffer_bytes, _options.tls}),
      _head_buffer(_options.head_buffer_bytes) {
    FJORD_ASSERT(_options.head_buffer_bytes >= 512, "head buffer too small for any response head");
    if (_host_header.find(':') != _host_header.rfind(':'))  // IPv6 literal
        _host_header = "[" + _options.endpoint.host + "]:" + std::to_string(_options.endpoint.port);
}

std::string s3_client::format_head(const request& req, std::uint64_t content_length) const {
    std::string amz_date =
        base::format_amz_date(static_cast<std::time_t>(base::unix_now_ms() / 1000));
    std::string decoded_length = std::to_string(req.body.size());
    const bool trailer = req.crc32c_trailer || req.crc64nvme_trailer;
    std::vector<auth::header_view> signed_headers = {
        {"host", _host_header},
        {"x-amz-content-sha256",
         trailer ? auth::streaming_unsigned_trailer_value : auth::unsigned_payload_value},
        {"x-amz-date", amz_date},
    };
    if (!req.checksum_crc32c.empty())
        signed_headers.push_back({"x-amz-checksum-crc32c", req.checksum_crc32c});
    for (const auto& [name, value] : req.signed_headers) signed_headers.push_back({name, value});
    if (trailer) {
        signed_headers.push_back({"x-amz-decoded-content-length", decoded_length});
        signed_headers.push_back({"x-amz-trailer", req.crc64nvme_trailer
                                                       ? "x-amz-checksum-crc64nvme"
                                                       : "x-amz-checksum-crc32c"});
    }
    auth::request_view view{req.method, req.raw_path, req.raw_query, signed_headers};
    std::string authorization = auth::sign_authorization(
        view, _options.credentials, _options.region, amz_date, signed_headers[1].value);
    std::string head;
    head.reserve(640);
    head.append(req.method).append(" ").append(req.raw_path);
    if (!req.raw_query.empty()) head.append("?").append(req.raw_query);
    head.append(" HTTP/1.1\r\n");
    for (const auto& h : signed_headers)
        head.append(h.name).append(": ").append(h.value).append("\r\n");
    if (trailer) head.append("Content-Encoding: aws-chunked\r\n");
    if (!req.range.empty()) head.append("Range: ").append(req.range).append("\r\n");
    if (!req.if_none_match.empty())
        head.append("If-None-Match: ").append(req.if_none_match).append("\r\n");
    if (!req.if_match.empty()) head.append("If-Match: \"").append(req.if_match).append("\"\r\n");
    if (!req.content_md5.empty())
        head.append("Content-MD5: ").append(req.content_md5).append("\r\n");
    for (const auto& [name, value] : req.extra_headers)
        head.append(name).append(": ").append(value).append("\r\n");
    if (req.method == "PUT" || req.method == "POST")
        head.append("Content-Length: ").append(std::to_string(content_length)).append("\r\n");
    head.append("Authorization: ").append(authorization).append("\r\n\r\n");
    return head;
}

io::task<base::result<s3_client::response>> s3_client::perform(request req) {
    _last_status = 0;
    for (int round = 0; round < 2; ++round) {
        bool reused = _connection.is_open();
        if (!reused) FJORD_CO_TRY(co_await _connection.connect());
        bool response_started = false;
        auto result = co_await attempt(req, response_started);
        if (result || response_started || !reused) co_return result;
    }
    co_return base::fail(base::errc::closed, "the server closed two connections in a row");
}

io::task<base::result<s3_client::response>> s3_client::attempt(const request& req,
                                                               bool& response_started) {
    // aws-chunked framing: the whole body as one chunk, then the final chunk and the CRC32C trailer.
    // The framing is two small strings around the caller's buffer, so the body is still sent in place.
    std::string chunk_open, chunk_close;
    if (req.crc32c_trailer || req.crc64nvme_trailer) {
        char size_hex[24];
        std::snprintf(size_hex, sizeof size_hex, "%zx", req.body.size());
        chunk_open = req.body.empty() ? "" : std::string(size_hex) + "\r\n";
        std::string crc_bytes;  // big-endian, as S3 encodes checksums
        if (req.crc64nvme_trailer) {
            std::uint64_t crc = base::crc64nvme(req.body);
            for (int shift = 56; shift >= 0; shift -= 8)
                crc_bytes.push_back(static_cast<char>(crc >> shift));
        } else {
            std::uint32_t crc = base::crc32c(req.body);
            for (int shift = 24; shift >= 0; shift -= 8)
                crc_bytes.push_back(static_cast<char>(crc >> shift));
        }
        chunk_close = std::string(req.body.empty() ? "" : "\r\n") + "0\r\nx-amz-checksum-" +
                      (req.crc64nvme_trailer ? "crc64nvme:" : "crc32c:") +
                      base::base64_encode(crc_bytes) + "\r\n\r\n";
    }
    if (!req.body_parts.empty()) {
        std::uint64_t total = 0;
        for (const auto& part : req.body_parts) total += part.iov_len;
        std::string head = format_head(req, total);
        std::vector<iovec> parts;
        parts.reserve(req.body_parts.size() + 1);
        parts.push_back(iovec{head.data(), head.size()});
        for (const auto& part : req.body_parts)
            if (part.iov_len > 0) parts.push_back(part);
        auto sent = co_await _connection.send_all(std::span(parts.data(), parts.size()));
        if (!sent) co_return sent.as_failure();
        co_return co_await read_response(req, response_started);
    }
    std::string head = format_head(req, chunk_open.size() + req.body.size() + chunk_close.size());
    std::array<iovec, 4> parts;
    std::size_t count = 0;
    auto add = [&parts, &count](const void* data, std::size_t size) {
        if (size > 0)
            parts[count++] = iovec{const_cast<void*>(data), size};  // sendmsg only reads them
    };
    add(head.data(), head.size());
    add(chunk_open.data(), chunk_open.size());
    add(req.body.data(), req.body.size());
    add(chunk_close.data(), chunk_close.size());
    auto sent = co_await _connection.send_all(std::span(parts.data(), count));
    if (!sent) co_return sent.as_failure();
    co_return co_await read_response(req, response_started);
}

io::task<base::result<s3_client::response>> s3_client::read_response(const request& req,
                                                                     bool& response_started) {
    _head_bytes = 0;
    for (int informational = 0;;) {
        auto got = co_await _connection.receive_some(
            reinterpret_cast<std::byte*>(_head_buffer.data()) + _head_bytes,
            _head_buffer.size() - _head_bytes);
        if (!got) co_return got.as_failure();
        response_started = true;
        _head_bytes += *got;
        auto parsed = parse_response_head(std::string_view(_head_buffer.data(), _head_bytes),
                                          _head_buffer.size(), _head);
        if (!parsed) {
            _connection.close();
            co_return parsed.as_failure();
        }
        if (*parsed == 0) continue;  // bounded: the buffer fills up and the parser fails
        if (_head.status >= 200) {
            _head_consumed = *parsed;
            break;
        }
        if (++informational > max_informational_responses) {
            _connection.close();
            co_return base::fail(base::errc::bad_request, "too many 1xx responses");
        }
        std::memmove(_head_buffer.data(), _head_buffer.data() + *parsed, _head_bytes - *parsed);
        _head_bytes -= *parsed;
        // What remains may already hold the next head; parse it before receiving more.
        auto again = parse_response_head(std::string_view(_head_buffer.data(), _head_bytes),
                                         _head_buffer.size(), _head);
        if (again && *again > 0 && _head.status >= 200) {
            _head_consumed = *again;
            break;
        }
    }
    response out;
    out.status = _head.status;
    _last_status = _head.status;
    out.etag = unquote(_head.value_of("etag"));
    out.content_length = _head.content_length.value_or(0);
    out.range_total_bytes = parse_content_range_total(_head.value_of("content-range"));
    bool keep_alive = _head.keep_alive;
    FJORD_CO_TRY(co_await read_body(req, _head_bytes - _head_consumed, out));
    if (!keep_alive) _connection.close();
    co_return out;
}

// A close-delimited error document: read until the server closes, within the bound.
io::task<void> s3_client::read_error_until_close(const std::byte* prefix, std::size_t prefix_bytes,
                                                 response& out) {
    out.error_body.assign(reinterpret_cast<const char*>(prefix),
                          std::min(prefix_bytes, _options.max_error_body_bytes));
    while (out.error_body.size() < _options.max_error_body_bytes) {
        std::array<std::byte, 4096> chunk;
        auto got = co_await _connection.receive_some(chunk.data(), chunk.size());
        if (!got) break;
        out.error_body.append(reinterpret_cast<const char*>(chunk.data()), *got);
    }
    _connection.close();
}

io::task<base::result<void>> s3_client::read_body(const request& req, std::size_t prefix_bytes,
                                                  response& out) {
    const std::byte* prefix =
        reinterpret_cast<const std::byte*>(_head_buffer.data()) + _head_consumed;
    bool has_body = req.body_expected && out.status != 204 && out.status != 304;
    if (has_body && _head.chunked) {
        _connection.close();
        co_return base::fail(base::errc::not_implemented,
                             "chunked responses are not supported by this client");
    }
    if (has_body && !_head.content_length) {
        if (is_success(out.status)) {
            _connection.close();
            co_return base::fail(base::errc::missing_content_length,
                                 "success response without Content-Length");
        }
        co_await read_error_until_close(prefix, prefix_bytes, out);
        co_return base::result<void>{};
    }
    std::uint64_t body_bytes = has_body ? out.content_length : 0;
    if (prefix_bytes > body_bytes) {
        _connection.close();
        co_return base::fail(base::errc::bad_request,
                             "bytes after the response (the client never pipelines)");
    }
    if (is_success(out.status) && req.consumer != nullptr) {
        response_stream stream(_connection, prefix, prefix_bytes, body_bytes);
        auto consumed = co_await (*req.consumer)(stream);
        if (!consumed || stream.remaining_bytes() > 0) _connection.close();
        co_return consumed;
    }
    if (is_success(out.status) && !req.destination.empty() && !req.capture_body) {
        if (body_bytes > req.destination.size()) {
            _connection.close();
            co_return base::fail(base::errc::entity_too_large,
                                 "object of " + std::to_string(body_bytes) +
                                     " bytes does not fit the " +
                                     std::to_string(req.destination.size()) + "-byte destination");
        }
        std::memcpy(req.destination.data(), prefix, prefix_bytes);
        co_return co_await _connection.receive_exact(req.destination.data() + prefix_bytes,
                                                     body_bytes - prefix_bytes);
    }
    // A small body we do not keep (success) or keep as the error document, through the head buffer.
    bool keep = !is_success(out.status) || req.capture_body;
    std::uint64_t keep_limit = keep ? std::max(_options.max_error_body_bytes,
                                               req.capture_body ? req.capture_limit_bytes : 0)
                                    : 0;
    if (keep)
        out.error_body.assign(reinterpret_cast<const char*>(prefix),
                              std::min<std::uint64_t>(prefix_bytes, keep_limit));
    std::uint64_t remaining = body_bytes - prefix_bytes;
    if (remaining > std::max<std::uint64_t>(keep_limit, _head_buffer.size() * 16)) {
        _connection.close();  // not worth draining: a new connection is cheaper
        co_return base::result<void>{};
    }
    while (remaining > 0) {
        std::size_t want =
            static_cast<std::size_t>(std::min<std::uint64_t>(remaining, _head_buffer.size()));
        auto* scratch = reinterpret_cast<std::byte*>(_head_buffer.data());
        FJORD_CO_TRY(co_await _connection.receive_exact(scratch, want));
        if (keep && out.error_body.size() < keep_limit)
            out.error_body.append(_head_buffer.data(),
                                  std::min<std::size_t>(want, keep_limit - out.error_body.size()));
        remaining -= want;
    }
    co_return base::result<void>{};
}

io::task<base::result<void>> s3_client::create_bucket(std::string bucket) {
    request req{.method = "PUT", .raw_path = object_path(bucket, "")};
    auto r = co_await perform(std::move(req));
    if (!r) co_return r.as_failure();
    if (is_success(r->status)) co_return base::result<void>{};
    base::error err = error_from_response(r->status, r->error_body);
    if (err.code == base::errc::bucket_already_owned_by_you) co_return base::result<void>{};
    co_return base::fail(std::move(err));
}

io::task<base::result<void>> s3_client::create_kv_bucket(std::string bucket,
                                                         kv_bucket_request options) {
    request req{.method = "PUT", .raw_path = object_path(bucket, "")};
    req.extra_headers = {{"x-fjord-bucket-type", "kv"},
                         {"x-fjord-kv-write-ack", options.ack_from_dram ? "dram" : "nvme"}};
    if (options.capacity_bytes > 0)
        req.extra_headers.emplace_back("x-fjord-kv-capacity-bytes",
                                       std::to_string(options.capacity_bytes));
    if (options.ttl_seconds > 0)
        req.extra_headers.emplace_back("x-fjord-kv-ttl-seconds",
                                       std::to_string(options.ttl_seconds));
    auto r = co_await perform(std::move(req));
    if (!r) co_return r.as_failure();
    if (is_success(r->status)) co_return base::result<void>{};
    co_return base::fail(error_from_response(r->status, r->error_body));
}

io::task<base::result<void>> s3_client::kv_batch(std::string bucket, std::string_view op,
                                                 std::span<const iovec> body,
                                                 const response_consumer& consume) {
    request req{.method = "POST",
                .raw_path = object_path(bucket, ""),
                .raw_query = "fjord-batch=" + std::string(op)};
    req.body_parts = body;
    req.consumer = &consume;
    FJORD_ASSERT(!body.empty() && body[0].iov_len >= base::kv_wire::header_bytes);
    const std::string_view frame_head(static_cast<const char*>(body[0].iov_base), body[0].iov_len);
    req.signed_headers.emplace_back(std::string(base::kv_wire::head_sha256_header),
                                    base::hex_encode(base::sha256(frame_head)));
    auto r = co_await perform(std::move(req));
    if (!r) co_return r.as_failure();
    if (is_success(r->status)) co_return base::result<void>{};
    co_return base::fail(error_from_response(r->status, r->error_body));
}

io::task<base::result<void>> response_stream::read_exact(std::byte* dst, std::size_t len) {
    if (len > _remaining)
        co_return base::fail(base::errc::bad_request,
                             "the response body is shorter than its framing");
    std::size_t from_prefix = std::min(len, _prefix_bytes);
    std::memcpy(dst, _prefix, from_prefix);
    _prefix += from_prefix;
    _prefix_bytes -= from_prefix;
    _remaining -= len;
    if (len > from_prefix)
        co_return co_await _conn.receive_exact(dst + from_prefix, len - from_prefix);
    co_return base::result<void>{};
}

io::task<base::result<void>> response_stream::skip(std::uint64_t len) {
    std::array<std::byte, 16 * 1024> scratch;
    while (len > 0) {
        auto n = static_cast<std::size_t>(std::min<std::uint64_t>(len, scratch.size()));
        FJORD_CO_TRY(co_await read_exact(scratch.data(), n));
        len -= n;
    }
    co_return base::result<void>{};
}

namespace {
// A caller's value for a request header (a condition's ETag, a checksum) must stay inside its header:
// no control byte (CR, LF, NUL, ...) and no quote, which would end or split it.
base::result<void> check_header_value(std::string_view name, std::string_view value) {
    for (unsigned char ch : value)
        if (ch < 0x20 || ch == 0x7f || ch == '"')
            return base::fail(base::errc::invalid_argument,
                              std::string(name) + " holds a control byte or a quote");
    return {};
}
}  // namespace

io::task<base::result<put_result>> s3_client::put_object(std::string bucket, std::string key,
                                                         std::span<const std::byte> body,
                                                         put_options how) {
    FJORD_CO_TRY(check_header_value("If-None-Match", how.if_none_match));
    FJORD_CO_TRY(check_header_value("x-amz-checksum-crc32c", how.checksum_crc32c));
    request req{.method = "PUT",
                .raw_path = object_path(bucket, key),
                .body = body,
                .crc32c_trailer = how.crc32c_trailer,
                .crc64nvme_trailer = how.crc64nvme_trailer,
                .if_none_match = how.if_none_match,
                .checksum_crc32c = how.checksum_crc32c};
    if (!req.checksum_crc32c.empty()) req.crc32c_trailer = req.crc64nvme_trailer = false;
    auto r = co_await perform(std::move(req));
    if (!r) co_return r.as_failure();
    if (!is_success(r->status)) co_return base::fail(error_from_response(r->status, r->error_body));
    co_return put_result{std::move(r->etag)};
}

io::task<base::result<get_result>> s3_client::get_object(std::string bucket, std::string key,
                                                         std::span<std::byte> destination) {
    request req{.method = "GET", .raw_path = object_path(bucket, key), .destination = destination};
    auto r = co_await perform(std::move(req));
    if (!r) co_return r.as_failure();
    if (!is_success(r->status)) co_return base::fail(error_from_response(r->status, r->error_body));
    if (destination.empty() && r->content_length > 0)
        co_return base::fail(base::errc::entity_too_large,
                             "GET into an empty destination of a non-empty object");
    co_return get_result{r->content_length, r->content_length, std::move(r->etag)};
}

io::task<base::result<get_result>> s3_client::get_object_range(std::string bucket, std::string key,
                                                               std::uint64_t offset,
                                                               std::span<std::byte> destination,
                                                               std::string if_match) {
    FJORD_ASSERT(!destination.empty(), "a range GET needs at least one byte of destination");
    FJORD_CO_TRY(check_header_value("If-Match", if_match));
    std::string range =
        "bytes=" + std::to_string(offset) + "-" + std::to_string(offset + destination.size() - 1);
    request req{.method = "GET",
                .raw_path = object_path(bucket, key),
                .destination = destination,
                .range = std::move(range),
                .if_match = std::move(if_match)};
    auto r = co_await perform(std::move(req));
    if (!r) co_return r.as_failure();
    if (!is_success(r->status)) co_return base::fail(error_from_response(r->status, r->error_body));
    if (r->status == 200) {
        // The server ignored the range and sent the whole object; only right if that is what we asked.
        if (offset != 0)
            co_return base::fail(base::errc::invalid_range, "range ignored by the server");
        co_return get_result{r->content_length, r->content_length, std::move(r->etag)};
    }
    if (!r->range_total_bytes)
        co_return base::fail(base::errc::bad_request, "206 response without a Content-Range total");
    co_return get_result{r->content_length, *r->range_total_bytes, std::move(r->etag)};
}

io::task<base::result<std::optional<head_result>>> s3_client::head_object(std::string bucket,
                                                                          std::string key) {
    request req{.method = "HEAD", .raw_path = object_path(bucket, key), .body_expected = false};
    auto r = co_await perform(std::move(req));
    if (!r) co_return r.as_failure();
    if (r->status == 404) co_return std::optional<head_result>{};
    if (!is_success(r->status)) co_return base::fail(error_from_response(r->status, r->error_body));
    co_return std::optional<head_result>{head_result{r->content_length, std::move(r->etag)}};
}

io::task<base::result<void>> s3_client::delete_object(std::string bucket, std::string key) {
    request req{.method = "DELETE", .raw_path = object_path(bucket, key)};
    auto r = co_await perform(std::move(req));
    if (!r) co_return r.as_failure();
    if (!is_success(r->status)) co_return base::fail(error_from_response(r->status, r->error_body));
    co_return base::result<void>{};
}

io::task<base::result<void>> s3_client::delete_bucket(std::string bucket) {
    request req{.method = "DELETE", .raw_path = object_path(bucket, "")};
    auto r = co_await perform(std::move(req));
    if (!r) co_return r.as_failure();
    if (!is_success(r->status)) co_return base::fail(error_from_response(r->status, r->error_body));
    co_return base::result<void>{};
}

io::task<base::result<std::vector<bucket_entry>>> s3_client::list_buckets() {
    request req{.method = "GET",
                .raw_path = "/",
                .capture_body = true,
                .capture_limit_bytes = max_result_document_bytes};
    auto r = co_await perform(std::move(req));
    if (!r) co_return r.as_failure();
    if (!is_success(r->status)) co_return base::fail(error_from_response(r->status, r->error_body));
    if (r->content_length > r->error_body.size())
        co_return base::fail(base::errc::entity_too_large,
                             "ListBuckets result larger than the client accepts");
    std::vector<bucket_entry> out;
    for (std::string_view b : xml_blocks(r->error_body, "Bucket"))
        out.push_back(bucket_entry{xml_text(b, "Name"), xml_text(b, "CreationDate")});
    co_return out;
}

io::task<base::result<void>> s3_client::set_user(std::string access_key,
                                                 std::optional<std::string> secret) {
    request req{.method = secret ? "PUT" : "DELETE",
                .raw_path = "/",
                .raw_query = query_pair("fjord-admin-user", access_key)};
    if (secret) req.body = std::as_bytes(std::span(secret->data(), secret->size()));
    auto r = co_await perform(std::move(req));
    if (!r) co_return r.as_failure();
    if (!is_success(r->status)) co_return base::fail(error_from_response(r->status, r->error_body));
    co_return base::result<void>{};
}

io::task<base::result<std::vector<std::string>>> s3_client::list_users() {
    request req{.method = "GET",
                .raw_path = "/",
                .raw_query = "fjord-admin-users=",
                .capture_body = true,
                .capture_limit_bytes = max_result_document_bytes};
    auto r = co_await perform(std::move(req));
    if (!r) co_return r.as_failure();
    if (!is_success(r->status)) co_return base::fail(error_from_response(r->status, r->error_body));
    std::vector<std::string> out;
    for (std::string_view u : xml_blocks(r->error_body, "User"))
        out.push_back(xml_text(u, "AccessKey"));
    co_return out;
}

io::task<base::result<list_page>> s3_client::list_objects(std::string bucket, list_request what) {
    FJORD_ASSERT(what.max_keys >= 1 && what.max_keys <= 1000);
    // The parameters in the canonical (sorted) order.
    std::string query;
    if (!what.continuation_token.empty())
        query += query_pair("continuation-token", what.continuation_token) + "&";
    if (!what.delimiter.empty()) query += query_pair("delimiter", what.delimiter) + "&";
    query += "list-type=2&max-keys=" + std::to_string(what.max_keys);
    if (!what.prefix.empty()) query += "&" + query_pair("prefix", what.prefix);
    request req{.method = "GET",
                .raw_path = object_path(bucket, ""),
                .raw_query = std::move(query),
                .capture_body = true,
                .capture_limit_bytes = max_result_document_bytes};
    auto r = co_await perform(std::move(req));
    if (!r) co_return r.as_failure();
    if (!is_success(r->status)) co_return base::fail(error_from_response(r->status, r->error_body));
    if (r->content_length > r->error_body.size())
        co_return base::fail(base::errc::entity_too_large,
                             "ListObjectsV2 page larger than the client accepts");
    const std::string& xml = r->error_body;
    list_page page;
    for (std::string_view c : xml_blocks(xml, "Contents")) {
        object_entry e{xml_text(c, "Key"), 0, unquote(xml_text(c, "ETag")),
                       xml_text(c, "LastModified")};
        e.size_bytes = base::parse_u64(xml_text(c, "Size")).value_or(0);
        page.objects.push_back(std::move(e));
    }
    for (std::string_view p : xml_blocks(xml, "CommonPrefixes"))
        page.common_prefixes.push_back(xml_text(p, "Prefix"));
    page.truncated = xml_text(xml, "IsTruncated") == "true";
    page.next_continuation_token = xml_text(xml, "NextContinuationToken");
    if (page.truncated && page.next_continuation_token.empty())
        co_return base::fail(base::errc::malformed_xml,
                             "truncated ListObjectsV2 page without a continuation token");
    co_return page;
}

io::task<base::result<std::vector<delete_failure>>> s3_client::delete_objects(
    std::string bucket, std::vector<std::string> keys) {
    FJORD_ASSERT(!keys.empty() && keys.size() <= 1000, "DeleteObjects takes 1..1000 keys");
    std::string xml = "<Delete><Quiet>true</Quiet>";
    for (const std::string& k : keys)
        xml.append("<Object><Key>").append(base::xml_escaped(k)).append("</Key></Object>");
    xml += "</Delete>";
    request req{.method = "POST",
                .raw_path = object_path(bucket, ""),
                .raw_query = "delete",
                .body = base::as_bytes(xml.data(), xml.size()),
                .capture_body = true,
                .capture_limit_bytes = max_result_document_bytes,
                .content_md5 = base::base64_encode(base::md5(xml))};
    auto r = co_await perform(std::move(req));
    if (!r) co_return r.as_failure();
    if (!is_success(r->status)) co_return base::fail(error_from_response(r->status, r->error_body));
    std::vector<delete_failure> failures;
    for (std::string_view e : xml_blocks(r->error_body, "Error"))
        failures.push_back(
            delete_failure{xml_text(e, "Key"), xml_text(e, "Code"), xml_text(e, "Message")});
    co_return failures;
}

io::task<base::result<std::string>> s3_client::create_multipart_upload(std::string bucket,
                                                                       std::string key) {
    request req{.method = "POST",
                .raw_path = object_path(bucket, key),
                .raw_query = "uploads",
                .capture_body = true};
    auto r = co_await perform(std::move(req));
    if (!r) co_return r.as_failure();
    if (!is_success(r->status)) co_return base::fail(error_from_response(r->status, r->error_body));
    auto id = xml_element(r->error_body, "UploadId");
    if (!id || id->empty())
        co_return base::fail(base::errc::malformed_xml, "no UploadId in the response");
    co_return std::move(*id);
}

io::task<base::result<std::string>> s3_client::upload_part(std::string bucket, std::string key,
                                                           std::string upload_id,
                                                           unsigned part_number,
                                                           std::span<const std::byte> body,
                                                           put_options how) {
    FJORD_ASSERT(part_number >= 1 && part_number <= 10'000);
    request req{.method = "PUT",
                .raw_path = object_path(bucket, key),
                .raw_query = "partNumber=" + std::to_string(part_number) +
                             "&uploadId=" + base::uri_encode(upload_id, false),
                .body = body,
                .crc32c_trailer = how.crc32c_trailer,
                .crc64nvme_trailer = how.crc64nvme_trailer};
    auto r = co_await perform(std::move(req));
    if (!r) co_return r.as_failure();
    if (!is_success(r->status)) co_return base::fail(error_from_response(r->status, r->error_body));
    if (r->etag.empty())
        co_return base::fail(base::errc::bad_request, "UploadPart response without an ETag");
    co_return std::move(r->etag);
}

io::task<base::result<put_result>> s3_client::complete_multipart_upload(
    std::string bucket, std::string key, std::string upload_id, std::vector<completed_part> parts) {
    std::string xml = "<CompleteMultipartUpload>";
    xml.reserve(64 + parts.size() * 96);
    for (const completed_part& p : parts)
        xml.append("<Part><PartNumber>")
            .append(std::to_string(p.part_number))
            .append("</PartNumber><ETag>\"")
            .append(p.etag)
            .append("\"</ETag></Part>");
    xml += "</CompleteMultipartUpload>";
    request req{.method = "POST",
                .raw_path = object_path(bucket, key),
                .raw_query = "uploadId=" + base::uri_encode(upload_id, false),
                .body = base::as_bytes(xml.data(), xml.size()),
                .capture_body = true};
    auto r = co_await perform(std::move(req));
    if (!r) co_return r.as_failure();
    // S3 may answer 200 and put an <Error> in the body (the failure came after the head was sent).
    if (!is_success(r->status) || r->error_body.find("<Error>") != std::string::npos)
        co_return base::fail(
            error_from_response(is_success(r->status) ? 500 : r->status, r->error_body));
    auto etag = xml_element(r->error_body, "ETag");
    co_return put_result{etag ? unquote(*etag) : std::string()};
}

io::task<base::result<void>> s3_client::abort_multipart_upload(std::string bucket, std::string key,
                                                               std::string upload_id) {
    request req{.method = "DELETE",
                .raw_path = object_path(bucket, key),
                .raw_query = "uploadId=" + base::uri_encode(upload_id, false)};
    auto r = co_await perform(std::move(req));
    if (!r) co_return r.as_failure();
    if (!is_success(r->status)) co_return base::fail(error_from_response(r->status, r->error_body));
    co_return base::result<void>{};
}

}  // namespace fjord::client
