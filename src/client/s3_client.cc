#include "client/s3_client.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "base/clock.h"
#include "base/encoding.h"

namespace fjord::client {

namespace {

constexpr int max_informational_responses = 4;  // 1xx heads skipped before the final one

bool is_success(int status) { return status >= 200 && status < 300; }

std::string unquote(std::string_view etag) {
    if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') etag = etag.substr(1, etag.size() - 2);
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
      _connection(connection_options{_options.endpoint, _options.io_timeout_ms, _options.socket_buffer_bytes}),
      _head_buffer(_options.head_buffer_bytes) {
    FJORD_ASSERT(_options.head_buffer_bytes >= 512, "head buffer too small for any response head");
    if (_host_header.find(':') != _host_header.rfind(':'))  // IPv6 literal
        _host_header = "[" + _options.endpoint.host + "]:" + std::to_string(_options.endpoint.port);
}

std::string s3_client::format_head(std::string_view method, std::string_view raw_path,
                                   std::uint64_t body_bytes) const {
    std::string amz_date = base::format_amz_date(static_cast<std::time_t>(base::unix_now_ms() / 1000));
    const std::array<s3::header_view, 3> signed_headers = {{
        {"host", _host_header},
        {"x-amz-content-sha256", s3::unsigned_payload_value},
        {"x-amz-date", amz_date},
    }};
    s3::request_view view{method, raw_path, "", signed_headers};
    std::string authorization =
        s3::sign_authorization(view, _options.credentials, _options.region, amz_date, s3::unsigned_payload_value);
    std::string head;
    head.reserve(512);
    head.append(method).append(" ").append(raw_path).append(" HTTP/1.1\r\n");
    for (const auto& h : signed_headers) head.append(h.name).append(": ").append(h.value).append("\r\n");
    if (method == "PUT") head.append("Content-Length: ").append(std::to_string(body_bytes)).append("\r\n");
    head.append("Authorization: ").append(authorization).append("\r\n\r\n");
    return head;
}

io::task<base::result<s3_client::response>> s3_client::perform(request req) {
    for (int round = 0; round < 2; ++round) {
        bool reused = _connection.is_open();
        if (!reused) FJORD_CO_TRY(co_await _connection.connect());
        bool response_started = false;
        auto result = co_await attempt(req, response_started);
        if (result || response_started || !reused) co_return result;
    }
    co_return base::fail(base::errc::closed, "the server closed two connections in a row");
}

io::task<base::result<s3_client::response>> s3_client::attempt(const request& req, bool& response_started) {
    std::string head = format_head(req.method, req.raw_path, req.body.size());
    std::array<iovec, 2> parts = {{
        {head.data(), head.size()},
        {const_cast<std::byte*>(req.body.data()), req.body.size()},  // sendmsg only reads it
    }};
    auto sent = co_await _connection.send_all(std::span(parts.data(), req.body.empty() ? 1 : 2));
    if (!sent) co_return sent.as_failure();
    co_return co_await read_response(req, response_started);
}

io::task<base::result<s3_client::response>> s3_client::read_response(const request& req, bool& response_started) {
    _head_bytes = 0;
    for (int informational = 0;;) {
        auto got = co_await _connection.receive_some(reinterpret_cast<std::byte*>(_head_buffer.data()) + _head_bytes,
                                                     _head_buffer.size() - _head_bytes);
        if (!got) co_return got.as_failure();
        response_started = true;
        _head_bytes += *got;
        auto parsed = parse_response_head(std::string_view(_head_buffer.data(), _head_bytes), _head_buffer.size(), _head);
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
        auto again = parse_response_head(std::string_view(_head_buffer.data(), _head_bytes), _head_buffer.size(), _head);
        if (again && *again > 0 && _head.status >= 200) {
            _head_consumed = *again;
            break;
        }
    }
    response out;
    out.status = _head.status;
    out.etag = unquote(_head.value_of("etag"));
    out.content_length = _head.content_length.value_or(0);
    bool keep_alive = _head.keep_alive;
    FJORD_CO_TRY(co_await read_body(req, _head_bytes - _head_consumed, out));
    if (!keep_alive) _connection.close();
    co_return out;
}

io::task<base::result<void>> s3_client::read_body(const request& req, std::size_t prefix_bytes, response& out) {
    const std::byte* prefix = reinterpret_cast<const std::byte*>(_head_buffer.data()) + _head_consumed;
    bool has_body = req.body_expected && out.status != 204 && out.status != 304;
    if (has_body && _head.chunked) {
        _connection.close();
        co_return base::fail(base::errc::not_implemented, "chunked responses are not supported by this client");
    }
    if (has_body && !_head.content_length) {
        if (is_success(out.status)) {
            _connection.close();
            co_return base::fail(base::errc::missing_content_length, "success response without Content-Length");
        }
        // A close-delimited error document: read until the server closes, within the bound.
        out.error_body.assign(reinterpret_cast<const char*>(prefix), std::min(prefix_bytes, _options.max_error_body_bytes));
        while (out.error_body.size() < _options.max_error_body_bytes) {
            std::array<std::byte, 4096> chunk;
            auto got = co_await _connection.receive_some(chunk.data(), chunk.size());
            if (!got) break;
            out.error_body.append(reinterpret_cast<const char*>(chunk.data()), *got);
        }
        _connection.close();
        co_return base::result<void>{};
    }
    std::uint64_t body_bytes = has_body ? out.content_length : 0;
    if (prefix_bytes > body_bytes) {
        _connection.close();
        co_return base::fail(base::errc::bad_request, "bytes after the response (the client never pipelines)");
    }
    if (is_success(out.status) && !req.destination.empty()) {
        if (body_bytes > req.destination.size()) {
            _connection.close();
            co_return base::fail(base::errc::entity_too_large,
                                 "object of " + std::to_string(body_bytes) + " bytes does not fit the " +
                                     std::to_string(req.destination.size()) + "-byte destination");
        }
        std::memcpy(req.destination.data(), prefix, prefix_bytes);
        co_return co_await _connection.receive_exact(req.destination.data() + prefix_bytes, body_bytes - prefix_bytes);
    }
    // A small body we do not keep (success) or keep as the error document, through the head buffer.
    bool keep = !is_success(out.status);
    std::uint64_t keep_limit = keep ? _options.max_error_body_bytes : 0;
    if (keep) out.error_body.assign(reinterpret_cast<const char*>(prefix), std::min<std::uint64_t>(prefix_bytes, keep_limit));
    std::uint64_t remaining = body_bytes - prefix_bytes;
    if (remaining > std::max<std::uint64_t>(keep_limit, _head_buffer.size() * 16)) {
        _connection.close();  // not worth draining: a new connection is cheaper
        co_return base::result<void>{};
    }
    while (remaining > 0) {
        std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(remaining, _head_buffer.size()));
        auto* scratch = reinterpret_cast<std::byte*>(_head_buffer.data());
        FJORD_CO_TRY(co_await _connection.receive_exact(scratch, want));
        if (keep && out.error_body.size() < keep_limit)
            out.error_body.append(_head_buffer.data(), std::min<std::size_t>(want, keep_limit - out.error_body.size()));
        remaining -= want;
    }
    co_return base::result<void>{};
}

io::task<base::result<void>> s3_client::create_bucket(std::string bucket) {
    auto r = co_await perform(request{"PUT", object_path(bucket, ""), {}, {}, true});
    if (!r) co_return r.as_failure();
    if (is_success(r->status)) co_return base::result<void>{};
    base::error err = error_from_response(r->status, r->error_body);
    if (err.code == base::errc::bucket_already_owned_by_you) co_return base::result<void>{};
    co_return base::fail(std::move(err));
}

io::task<base::result<put_result>> s3_client::put_object(std::string bucket, std::string key,
                                                          std::span<const std::byte> body) {
    auto r = co_await perform(request{"PUT", object_path(bucket, key), body, {}, true});
    if (!r) co_return r.as_failure();
    if (!is_success(r->status)) co_return base::fail(error_from_response(r->status, r->error_body));
    co_return put_result{std::move(r->etag)};
}

io::task<base::result<get_result>> s3_client::get_object(std::string bucket, std::string key,
                                                          std::span<std::byte> destination) {
    auto r = co_await perform(request{"GET", object_path(bucket, key), {}, destination, true});
    if (!r) co_return r.as_failure();
    if (!is_success(r->status)) co_return base::fail(error_from_response(r->status, r->error_body));
    if (destination.empty() && r->content_length > 0)
        co_return base::fail(base::errc::entity_too_large, "GET into an empty destination of a non-empty object");
    co_return get_result{r->content_length, std::move(r->etag)};
}

io::task<base::result<std::optional<head_result>>> s3_client::head_object(std::string bucket, std::string key) {
    auto r = co_await perform(request{"HEAD", object_path(bucket, key), {}, {}, false});
    if (!r) co_return r.as_failure();
    if (r->status == 404) co_return std::optional<head_result>{};
    if (!is_success(r->status)) co_return base::fail(error_from_response(r->status, r->error_body));
    co_return std::optional<head_result>{head_result{r->content_length, std::move(r->etag)}};
}

}  // namespace fjord::client
