// PutObject, GetObject / HeadObject and DeleteObject.

#include <algorithm>

#include "base/checksum.h"
#include "base/clock.h"
#include "base/digest.h"
#include "base/encoding.h"
#include "base/log.h"
#include "s3/checksum.h"
#include "s3/http_conditions.h"
#include "s3/payload.h"
#include "http/field_syntax.h"
#include "s3/service.h"
#include "s3/service_internal.h"

namespace fjord::s3 {

namespace {

// Headers stored with an object and returned on GET/HEAD, besides x-amz-meta-*.
constexpr std::string_view stored_headers[] = {"content-encoding", "content-disposition", "content-language",
                                               "cache-control", "expires"};

std::string strip_aws_chunked(std::string_view content_encoding) {
    std::string out;
    std::string_view rest = content_encoding;
    while (!rest.empty()) {
        auto comma = rest.find(',');
        std::string_view token = base::trim(rest.substr(0, comma));
        rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
        if (token.empty() || base::iequals(token, "aws-chunked")) continue;
        if (!out.empty()) out += ",";
        out += token;
    }
    return out;
}

}  // namespace

base::result<void> collect_metadata(const http::request_head& head, std::size_t max_meta_bytes,
                                    store::object_record& record) {
    std::size_t meta_bytes = 0;
    for (const auto& h : head.headers) {
        std::string name = base::to_lower(h.name);
        if (name.starts_with("x-amz-meta-")) {
            meta_bytes += name.size() - 11 + h.value.size();
            record.headers.emplace_back(std::move(name), std::string(h.value));
        } else if (name == "content-encoding") {
            std::string kept = strip_aws_chunked(h.value);
            if (!kept.empty()) record.headers.emplace_back(name, kept);
        } else if (std::find(std::begin(stored_headers), std::end(stored_headers), name) != std::end(stored_headers)) {
            record.headers.emplace_back(std::move(name), std::string(h.value));
        }
    }
    if (meta_bytes > max_meta_bytes)
        return base::fail(base::errc::metadata_too_large, "Your metadata headers exceed the maximum allowed metadata size.");
    record.content_type = std::string(head.value_of("content-type"));
    if (const http::header* tagging = head.find("x-amz-tagging")) {
        auto tags = parse_tagging_header(tagging->value);
        if (!tags) return tags.as_failure();
        record.tags = std::move(*tags);
    }
    return {};
}

// The ETag of an object written without MD5: derived from its size and block CRCs (so it changes when the
// content does), with a "-1" suffix that tells every S3 tool it is not an MD5 of the content.
std::string derived_etag(std::uint64_t size, const std::vector<std::uint32_t>& crcs) {
    base::digest d(base::digest_kind::sha256);
    d.update(base::as_bytes(&size, sizeof size));
    d.update(base::as_bytes(crcs.data(), crcs.size() * sizeof(std::uint32_t)));
    return base::hex_encode(d.finish().substr(0, 16)) + "-1";
}

// Reads the checksum headers of a PUT into payload options.
base::result<void> checksum_options(const http::request_head& head, payload_options& o) {
    int given = 0;
    for (const auto& h : head.headers) {
        if (!base::to_lower(h.name).starts_with("x-amz-checksum-") || base::iequals(h.name, "x-amz-checksum-type") ||
            base::iequals(h.name, "x-amz-checksum-algorithm"))
            continue;
        auto alg = parse_checksum_algorithm(h.name);
        if (!alg) return base::fail(base::errc::invalid_request, "unknown checksum header " + std::string(h.name));
        o.checksum = *alg;
        o.checksum_expected = std::string(base::trim(h.value));
        ++given;
    }
    std::string_view trailer = head.value_of("x-amz-trailer");
    if (!trailer.empty()) {
        auto alg = parse_checksum_algorithm(base::trim(trailer));
        if (!alg) return base::fail(base::errc::invalid_request, "unsupported x-amz-trailer " + std::string(trailer));
        o.checksum = *alg;
        o.checksum_from_trailer = true;
        ++given;
    }
    if (given > 1) return base::fail(base::errc::invalid_request, "Expecting a single x-amz-checksum- header");
    std::string_view sdk = head.value_of("x-amz-sdk-checksum-algorithm");
    if (!sdk.empty()) {
        auto alg = parse_checksum_algorithm(sdk);
        if (!alg) return base::fail(base::errc::invalid_request, "unsupported x-amz-sdk-checksum-algorithm");
        if (given == 0) o.checksum = *alg;
        else if (*alg != o.checksum)
            return base::fail(base::errc::invalid_request, "x-amz-sdk-checksum-algorithm does not match the checksum sent");
    }
    return {};
}

std::optional<std::string> unquote_etag(std::string_view v) {
    v = base::trim(v);
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
    if (v.starts_with("W/\"")) v = v.substr(3, v.size() > 4 ? v.size() - 4 : 0);
    return std::string(v);
}

base::result<store::write_conditions> write_conditions_of(const http::request_head& head) {
    store::write_conditions conditions;
    std::string_view none_match = base::trim(head.value_of("if-none-match"));
    if (none_match == "*") conditions.if_none_match_any = true;
    else if (!none_match.empty())
        return base::fail(base::errc::not_implemented, "If-None-Match on writes supports only '*'");
    if (!head.value_of("if-match").empty()) conditions.if_match_etag = unquote_etag(head.value_of("if-match"));
    return conditions;
}

namespace {

// RFC 9110 section 13.2.2 order: If-Match, If-Unmodified-Since, If-None-Match, If-Modified-Since.
base::result<void> check_read_conditions(const http::request_head& head, const store::object_record& r) {
    std::int64_t modified_s = r.modified_ms / 1000;
    std::string_view if_match = head.value_of("if-match");
    std::string_view if_none_match = head.value_of("if-none-match");
    if (!if_match.empty()) {
        if (!etag_list_matches(if_match, r.etag))
            return base::fail(base::errc::precondition_failed, "At least one of the pre-conditions you specified did not hold");
    } else if (auto since = base::parse_http_date(head.value_of("if-unmodified-since")); since && modified_s > *since) {
        return base::fail(base::errc::precondition_failed, "At least one of the pre-conditions you specified did not hold");
    }
    if (!if_none_match.empty()) {
        if (etag_list_matches(if_none_match, r.etag)) return base::fail(base::errc::not_modified, "Not Modified");
    } else if (auto since = base::parse_http_date(head.value_of("if-modified-since")); since && modified_s <= *since) {
        return base::fail(base::errc::not_modified, "Not Modified");
    }
    return {};
}

// Sends the response head lazily with the first verified bytes, so a read that fails before any byte
// left the server can still be answered with a proper error.
class response_sink final : public store::byte_sink {
public:
    response_sink(http::exchange& ex, int status, http::header_list headers, std::uint64_t length)
        : _ex(ex), _status(status), _headers(std::move(headers)), _length(length) {}
    io::task<base::result<void>> write(std::span<const std::byte> data) override {
        if (!_ex.head_sent()) FJORD_CO_TRY(co_await _ex.send_head(_status, _headers, _length));
        co_return co_await _ex.send_body(data);
    }
    io::task<base::result<void>> finish() {
        if (!_ex.head_sent()) co_return co_await _ex.send_head(_status, _headers, _length);
        co_return base::result<void>{};
    }

private:
    http::exchange& _ex;
    int _status;
    http::header_list _headers;
    std::uint64_t _length;
};

// The response-* query parameters of a GET or HEAD become response headers as given: a value holding CR, LF,
// NUL or another control byte would end the header line early and let the URL's author write headers
// (or a whole second response) of their own, so such a request is refused.
base::result<void> check_response_overrides(const s3_request& req) {
    for (std::string_view param : {"response-content-type", "response-content-encoding", "response-content-disposition",
                                   "response-content-language", "response-cache-control", "response-expires"}) {
        if (req.has(param) && !http::syntax::is_field_value(req.param(param)))
            return base::fail(base::errc::invalid_argument,
                              "The value of " + std::string(param) + " holds a character a response header cannot carry");
    }
    return {};
}

void add_object_headers(http::header_list& h, const store::object_record& r, const s3_request& req, bool checksum_mode) {
    h.emplace_back("ETag", "\"" + r.etag + "\"");
    h.emplace_back("Last-Modified", base::format_http_date(static_cast<std::time_t>(r.modified_ms / 1000)));
    h.emplace_back("Accept-Ranges", "bytes");
    std::string content_type = r.content_type.empty() ? "binary/octet-stream" : r.content_type;
    if (req.has("response-content-type")) content_type = std::string(req.param("response-content-type"));
    h.emplace_back("Content-Type", content_type);
    static constexpr std::pair<std::string_view, std::string_view> overrides[] = {
        {"content-encoding", "response-content-encoding"}, {"content-disposition", "response-content-disposition"},
        {"content-language", "response-content-language"}, {"cache-control", "response-cache-control"},
        {"expires", "response-expires"}};
    for (const auto& stored : r.headers) {
        bool overridden = std::any_of(std::begin(overrides), std::end(overrides),
                                      [&](const auto& o) { return o.first == stored.first && req.has(o.second); });
        if (!overridden) h.emplace_back(stored.first, stored.second);
    }
    for (const auto& [name, param] : overrides)
        if (req.has(param)) h.emplace_back(std::string(name), std::string(req.param(param)));
    if (checksum_mode && !r.checksum_algorithm.empty()) {
        if (auto alg = parse_checksum_algorithm(r.checksum_algorithm)) {
            h.emplace_back(checksum_header_name(*alg), r.checksum_value);
            h.emplace_back("x-amz-checksum-type",
                           r.checksum_value.find('-') == std::string::npos ? "FULL_OBJECT" : "COMPOSITE");
        }
    }
}

}  // namespace

io::task<base::result<received_body>> service::receive_body(context& c, std::uint64_t max_bytes,
                                                            checksum_algorithm expected_algorithm) {
    const http::request_head& head = c.ex.head();
    const bool streaming = c.auth.mode == auth::payload_mode::streaming_signed ||
                           c.auth.mode == auth::payload_mode::streaming_signed_trailer ||
                           c.auth.mode == auth::payload_mode::streaming_unsigned_trailer;
    payload_options po;
    po.aws_chunked = streaming;
    std::optional<std::uint64_t> size;
    if (streaming) {
        auto decoded = base::parse_u64(head.value_of("x-amz-decoded-content-length"));
        if (!decoded)
            co_return base::fail(base::errc::missing_content_length, "You must provide the x-amz-decoded-content-length header.");
        size = *decoded;
        po.decoded_length = decoded;
    } else if (head.content_length) {
        size = head.content_length;
    } else if (!head.chunked) {
        co_return base::fail(base::errc::missing_content_length, "You must provide the Content-Length HTTP header.");
    }
    if (size && *size > max_bytes)
        co_return base::fail(base::errc::entity_too_large, "Your proposed upload exceeds the maximum allowed object size.");
    FJORD_CO_TRY(checksum_options(head, po));
    if (po.checksum == checksum_algorithm::none) po.checksum = expected_algorithm;
    std::string_view content_md5 = head.value_of("content-md5");
    if (!content_md5.empty()) {
        auto raw = base::base64_decode(content_md5);
        if (!raw || raw->size() != 16) co_return base::fail(base::errc::invalid_digest, "The Content-MD5 you specified is not valid.");
        po.content_md5 = *raw;
    }
    po.compute_md5 = _options.etag_md5 || (size && *size <= _options.etag_md5_max_bytes);

    payload_source source(c.ex.body(), c.auth, po);
    store::object_writer writer(_engine.drives(), _engine.pool(), _engine.new_object_id(), _engine.data_file_settings(),
                                 &_engine.writes(), &_engine.spares());
    base::result<store::segment> sealed = base::fail(base::errc::internal);
    if (auto opened = co_await writer.open(size); !opened) {
        sealed = opened.as_failure();
    } else if (auto written = co_await writer.write_from(source, size.value_or(max_bytes)); !written) {
        sealed = written.as_failure();
    } else if (size && *written != *size) {
        sealed = base::fail(base::errc::incomplete_body, "You did not provide the number of bytes specified by the Content-Length HTTP header.");
    } else if (auto verified = source.verify(); !verified) {
        sealed = verified.as_failure();
    } else {
        sealed = co_await writer.seal();
    }
    if (!sealed) {
        co_await writer.discard();
        co_return sealed.as_failure();
    }
    received_body body;
    body.data = *sealed;
    body.etag = source.md5_raw().empty() ? derived_etag(writer.size_bytes(), writer.block_crcs())
                                         : base::hex_encode(source.md5_raw());
    body.checksum = source.checksum();
    if (body.checksum != checksum_algorithm::none) body.checksum_value = source.checksum_base64();
    co_return body;
}

io::task<void> service::put_object(context& c) {
    const http::request_head& head = c.ex.head();
    if (!_engine.bucket_exists(c.req.bucket))
        co_return co_await send_error(c, {base::errc::no_such_bucket, "The specified bucket does not exist"});
    store::object_record record;
    if (auto m = collect_metadata(head, _options.max_metadata_bytes, record); !m) co_return co_await send_error(c, m.err());
    store::write_conditions conditions;
    if (auto w = write_conditions_of(head); !w) co_return co_await send_error(c, w.err());
    else conditions = *w;
    auto body = co_await receive_body(c, _options.max_object_bytes, checksum_algorithm::none);
    if (!body) co_return co_await send_error(c, body.err());
    record.size_bytes = body->data.size_bytes;
    record.modified_ms = base::unix_now_ms();
    record.etag = body->etag;
    if (body->checksum != checksum_algorithm::none) {
        record.checksum_algorithm = std::string(checksum_name(body->checksum));
        record.checksum_value = body->checksum_value;
    }
    record.segments.push_back(body->data);
    auto committed = co_await _engine.commit_put(c.req.bucket, c.req.key, record, conditions);
    if (!committed) {
        if (store::commit_surely_failed(committed.err())) co_await _engine.reclaim(std::move(record));
        co_return co_await send_error(c, committed.err());
    }
    if (*committed) co_await _engine.reclaim(std::move(**committed));
    auto headers = c.common_headers();
    headers.emplace_back("ETag", "\"" + body->etag + "\"");
    if (body->checksum != checksum_algorithm::none)
        headers.emplace_back(checksum_header_name(body->checksum), body->checksum_value);
    (void)co_await c.ex.send_all(200, headers, "");
}

io::task<void> service::get_object(context& c, bool head_only) {
    const http::request_head& head = c.ex.head();
    if (auto ok = check_response_overrides(c.req); !ok) co_return co_await send_error(c, ok.err());
    // A data file can vanish between lookup and open when the key is overwritten meanwhile: look again.
    for (int attempt = 0; attempt < 3; ++attempt) {
        auto found = co_await _engine.lookup(c.req.bucket, c.req.key);
        if (!found) co_return co_await send_error(c, found.err());
        const store::object_record& r = *found;
        if (auto ok = check_read_conditions(head, r); !ok) {
            if (ok.code() == base::errc::not_modified) {
                auto headers = c.common_headers();
                headers.emplace_back("ETag", "\"" + r.etag + "\"");
                headers.emplace_back("Last-Modified", base::format_http_date(static_cast<std::time_t>(r.modified_ms / 1000)));
                (void)co_await c.ex.send_all(304, headers, "");
                co_return;
            }
            co_return co_await send_error(c, ok.err());
        }
        auto range = parse_range(head.value_of("range"), r.size_bytes);
        std::optional<std::uint64_t> part_number;
        if (c.req.has("partNumber")) {
            auto n = base::parse_u64(c.req.param("partNumber"));
            if (!n || *n < 1 || *n > 10000)
                co_return co_await send_error(c, {base::errc::invalid_argument, "Part number must be an integer between 1 and 10000, inclusive"});
            if (!head.value_of("range").empty())
                co_return co_await send_error(c, {base::errc::invalid_request, "Cannot specify both Range header and partNumber query parameter"});
            if (*n > r.segments.size() && !(r.segments.empty() && *n == 1))
                co_return co_await send_error(c, {base::errc::invalid_part_number, "The requested partnumber is not satisfiable"});
            std::uint64_t start = 0;
            for (std::uint64_t i = 0; i + 1 < *n; ++i) start += r.segments[i].size_bytes;
            std::uint64_t len = r.segments.empty() ? 0 : r.segments[*n - 1].size_bytes;
            range = len == 0 ? std::optional<byte_range>{} : std::optional<byte_range>{byte_range{start, len}};
            part_number = n;
        }
        if (!range) {
            auto headers = c.common_headers();
            headers.emplace_back("Content-Range", "bytes */" + std::to_string(r.size_bytes));
            headers.emplace_back("Content-Type", "application/xml");
            // The AWS CRT (s3torchconnector, mountpoint-s3) recognises an empty object by ActualObjectSize
            // in this error and then repeats its first ranged GET without the range.
            std::vector<std::pair<std::string, std::string>> details{
                {"RangeRequested", std::string(head.value_of("range"))}, {"ActualObjectSize", std::to_string(r.size_bytes)}};
            (void)co_await c.ex.send_all(416, headers, error_xml(range.err(), c.req.resource, c.request_id, details));
            co_return;
        }
        auto headers = c.common_headers();
        bool checksum_mode = base::iequals(head.value_of("x-amz-checksum-mode"), "ENABLED") && !*range;
        add_object_headers(headers, r, c.req, checksum_mode);
        if (!r.tags.empty()) headers.emplace_back("x-amz-tagging-count", std::to_string(r.tags.size()));
        if (part_number) headers.emplace_back("x-amz-mp-parts-count", std::to_string(std::max<std::size_t>(r.segments.size(), 1)));
        std::uint64_t first = 0, length = r.size_bytes;
        int status = 200;
        if (*range) {
            first = (*range)->first;
            length = (*range)->length;
            status = 206;
            headers.emplace_back("Content-Range", "bytes " + std::to_string(first) + "-" +
                                                      std::to_string(first + length - 1) + "/" +
                                                      std::to_string(r.size_bytes));
        }
        response_sink sink(c.ex, status, std::move(headers), length);
        if (head_only || length == 0) {
            (void)co_await sink.finish();
            co_return;
        }
        auto sent = co_await store::read_object(_engine.drives(), _engine.pool(), r, first, length, sink,
                                                _engine.data_file_settings());
        if (sent) co_return;
        if (c.ex.head_sent()) {
            // Bytes already left: the only honest signal left is to cut the connection short. (A data
            // file gone by now belongs to a part the read reached late, after an overwrite: no damage.)
            if (sent.code() == base::errc::data_corrupted) (void)read_failure(c, c.req.bucket, c.req.key, sent.err());
            c.ex.close_after();
            co_return;
        }
        if (sent.code() == base::errc::not_found && attempt < 2) continue;
        co_return co_await send_error(c, read_failure(c, c.req.bucket, c.req.key, sent.err()));
    }
}

io::task<void> service::delete_object(context& c) {
    store::write_conditions conditions;
    std::string_view if_match = c.ex.head().value_of("if-match");
    if (!if_match.empty()) conditions.if_match_etag = unquote_etag(if_match);
    auto removed = co_await _engine.remove(c.req.bucket, c.req.key, conditions);
    if (!removed) co_return co_await send_error(c, removed.err());
    if (*removed) co_await _engine.reclaim(std::move(**removed));
    (void)co_await c.ex.send_all(204, c.common_headers(), "");
}

}  // namespace fjord::s3
