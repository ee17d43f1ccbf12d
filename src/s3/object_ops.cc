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
#include "s3/operations.h"

namespace fjord::s3 {

namespace {

// Headers stored with an object and returned on GET/HEAD, besides x-amz-meta-*.
constexpr std::string_view stored_headers[] = {"content-encoding", "content-disposition",
                                               "content-language", "cache-control", "expires"};

// Content-Encoding as the client sent it, less the aws-chunked coding (which describes the upload's
// framing, not the stored bytes): the other codings keep their text, spacing included, so a value
// without aws-chunked is stored verbatim ("gzip, br" stays "gzip, br").
std::string strip_aws_chunked(std::string_view content_encoding) {
    std::string out;
    bool first = true;
    for (std::string_view rest = content_encoding;;) {
        auto comma = rest.find(',');
        std::string_view piece = rest.substr(0, comma);
        if (!base::iequals(base::trim(piece), "aws-chunked")) {
            if (!first) out += ',';
            out += piece;
            first = false;
        }
        if (comma == std::string_view::npos) break;
        rest = rest.substr(comma + 1);
    }
    return std::string(base::trim(out));
}

// A user metadata value as S3 stores it: MIME encoded words (RFC 2047) decoded, raw bytes kept when
// they are UTF-8 and read as ISO-8859-1 (HTTP's historical header charset) when they are not, so that
// every stored value is UTF-8 and add_object_headers can encode it back.
std::string user_metadata_value(std::string_view sent) {
    if (sent.starts_with("=?"))
        if (auto decoded = base::mime_decode(sent)) return std::move(*decoded);
    if (base::is_valid_utf8(sent)) return std::string(sent);
    return base::latin1_to_utf8(sent);
}
}  // namespace

base::result<void> collect_metadata(const http::request_head& head, std::size_t max_meta_bytes,
                                    store::object_record& record) {
    std::size_t meta_bytes = 0;
    for (const auto& h : head.headers) {
        std::string name = base::to_lower(h.name);
        if (name.starts_with("x-amz-meta-")) {
            std::string value = user_metadata_value(h.value);
            meta_bytes += name.size() - 11 + value.size();
            record.headers.emplace_back(std::move(name), std::move(value));
        } else if (name == "content-encoding") {
            std::string kept = strip_aws_chunked(h.value);
            if (!kept.empty()) record.headers.emplace_back(name, kept);
        } else if (std::find(std::begin(stored_headers), std::end(stored_headers), name) !=
                   std::end(stored_headers)) {
            record.headers.emplace_back(std::move(name), std::string(h.value));
        }
    }
    if (meta_bytes > max_meta_bytes)
        return base::fail(base::errc::metadata_too_large,
                          "Your metadata headers exceed the maximum allowed metadata size.");
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
std::string derived_etag(const store::written_data& written) {
    base::digest d(base::digest_kind::sha256);
    d.update(base::as_bytes(&written.size_bytes, sizeof written.size_bytes));
    d.update(base::as_bytes(written.block_crcs.data(),
                            written.block_crcs.size() * sizeof(std::uint32_t)));
    return base::hex_encode(d.finish().substr(0, 16)) + "-1";
}

std::string body_etag(const payload_source& source, const store::written_data& written) {
    return source.md5_raw().empty() ? derived_etag(written) : base::hex_encode(source.md5_raw());
}

// Reads the checksum headers of a PUT into payload options.
base::result<void> checksum_options(const http::request_head& head, payload_options& o) {
    int given = 0;
    for (const auto& h : head.headers) {
        if (!base::to_lower(h.name).starts_with("x-amz-checksum-") ||
            base::iequals(h.name, "x-amz-checksum-type") ||
            base::iequals(h.name, "x-amz-checksum-algorithm"))
            continue;
        auto alg = parse_checksum_algorithm(h.name);
        if (!alg)
            return base::fail(base::errc::invalid_request,
                              "unknown checksum header " + std::string(h.name));
        o.checksum = *alg;
        o.checksum_expected = std::string(base::trim(h.value));
        ++given;
    }
    std::string_view trailer = head.value_of("x-amz-trailer");
    if (!trailer.empty()) {
        auto alg = parse_checksum_algorithm(base::trim(trailer));
        if (!alg)
            return base::fail(base::errc::invalid_request,
                              "unsupported x-amz-trailer " + std::string(trailer));
        o.checksum = *alg;
        o.checksum_from_trailer = true;
        ++given;
    }
    if (given > 1)
        return base::fail(base::errc::invalid_request, "Expecting a single x-amz-checksum- header");
    std::string_view sdk = head.value_of("x-amz-sdk-checksum-algorithm");
    if (!sdk.empty()) {
        auto alg = parse_checksum_algorithm(sdk);
        if (!alg)
            return base::fail(base::errc::invalid_request,
                              "unsupported x-amz-sdk-checksum-algorithm");
        if (given == 0)
            o.checksum = *alg;
        else if (*alg != o.checksum)
            return base::fail(base::errc::invalid_request,
                              "x-amz-sdk-checksum-algorithm does not match the checksum sent");
    }
    return {};
}

std::optional<std::string> unquote_etag(std::string_view v) {
    v = base::trim(v);
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
    // A weak tag loses its W/ and quotes only when it has both; cutting a last byte that is not the
    // closing quote could split a UTF-8 sequence and hand an invalid tag on to an XML answer.
    if (v.size() >= 4 && v.starts_with("W/\"") && v.back() == '"') v = v.substr(3, v.size() - 4);
    return std::string(v);
}

base::result<store::write_conditions> write_conditions_of(const http::request_head& head) {
    store::write_conditions conditions;
    std::string_view none_match = base::trim(head.value_of("if-none-match"));
    if (none_match == "*")
        conditions.if_none_match_any = true;
    else if (!none_match.empty())
        return base::fail(base::errc::not_implemented, "If-None-Match on writes supports only '*'");
    if (!head.value_of("if-match").empty())
        conditions.if_match_etag = unquote_etag(head.value_of("if-match"));
    return conditions;
}

namespace {

// RFC 9110 section 13.2.2 order: If-Match, If-Unmodified-Since, If-None-Match, If-Modified-Since.
base::result<void> check_read_conditions(const http::request_head& head,
                                         const store::object_record& r) {
    std::int64_t modified_s = r.modified_ms / 1000;
    std::string_view if_match = head.value_of("if-match");
    std::string_view if_none_match = head.value_of("if-none-match");
    if (!if_match.empty()) {
        if (!etag_list_matches(if_match, r.etag))
            return base::fail(base::errc::precondition_failed,
                              "At least one of the pre-conditions you specified did not hold");
    } else if (auto since = base::parse_http_date(head.value_of("if-unmodified-since"));
               since && modified_s > *since) {
        return base::fail(base::errc::precondition_failed,
                          "At least one of the pre-conditions you specified did not hold");
    }
    if (!if_none_match.empty()) {
        if (etag_list_matches(if_none_match, r.etag))
            return base::fail(base::errc::not_modified, "Not Modified");
    } else if (auto since = base::parse_http_date(head.value_of("if-modified-since"));
               since && modified_s <= *since) {
        return base::fail(base::errc::not_modified, "Not Modified");
    }
    return {};
}

// Sends the response head lazily with the first verified bytes, so a read that fails before any byte
// left the server can still be answered with a proper error. The head is chosen (prepare) once the
// store has found the record; it may be chosen again when the store looks the key up again.
class response_sink final : public store::byte_sink {
public:
    explicit response_sink(http::exchange& ex) : _ex(ex) {}
    void prepare(int status, http::header_list headers, std::uint64_t length) {
        _status = status;
        _headers = std::move(headers);
        _length = length;
    }
    io::task<base::result<void>> write(std::span<const std::byte> data) override {
        if (!_ex.head_sent())
            co_return co_await _ex.send_head_with(_status, _headers, _length, data);
        co_return co_await _ex.send_body(data);
    }
    io::task<base::result<void>> finish() {
        if (!_ex.head_sent()) co_return co_await _ex.send_head(_status, _headers, _length);
        co_return base::result<void>{};
    }

private:
    http::exchange& _ex;
    int _status = 200;
    http::header_list _headers;
    std::uint64_t _length = 0;
};

// The response-* query parameters of a GET or HEAD become response headers as given: a value holding CR, LF,
// NUL or another control byte would end the header line early and let the URL's author write headers
// (or a whole second response) of their own, so such a request is refused.
base::result<void> check_response_overrides(const s3_request& req) {
    for (std::string_view param :
         {"response-content-type", "response-content-encoding", "response-content-disposition",
          "response-content-language", "response-cache-control", "response-expires"}) {
        if (req.has(param) && !http::syntax::is_field_value(req.param(param)))
            return base::fail(base::errc::invalid_argument,
                              "The value of " + std::string(param) +
                                  " holds a character a response header cannot carry");
    }
    return {};
}

void add_object_headers(http::header_list& h, const store::object_record& r, const s3_request& req,
                        bool checksum_mode) {
    h.emplace_back("ETag", "\"" + r.etag + "\"");
    h.emplace_back("Last-Modified",
                   base::format_http_date(static_cast<std::time_t>(r.modified_ms / 1000)));
    h.emplace_back("Accept-Ranges", "bytes");
    std::string content_type = r.content_type.empty() ? "binary/octet-stream" : r.content_type;
    if (req.has("response-content-type"))
        content_type = std::string(req.param("response-content-type"));
    h.emplace_back("Content-Type", content_type);
    static constexpr std::pair<std::string_view, std::string_view> overrides[] = {
        {"content-encoding", "response-content-encoding"},
        {"content-disposition", "response-content-disposition"},
        {"content-language", "response-content-language"},
        {"cache-control", "response-cache-control"},
        {"expires", "response-expires"}};
    for (const auto& stored : r.headers) {
        // The server's own (an upload's initiator, kept out of objects: multipart_ops.cc), in case
        // an object got one (completed by a node of an older version): never a client's to see.
        if (stored.first.starts_with("fjord-")) continue;
        bool overridden = std::any_of(
            std::begin(overrides), std::end(overrides),
            [&](const auto& o) { return o.first == stored.first && req.has(o.second); });
        if (overridden) continue;
        if (stored.first.starts_with("x-amz-meta-"))  // non-ASCII values as RFC 2047 words, as S3
            h.emplace_back(stored.first, base::mime_encode(stored.second));
        else
            h.emplace_back(stored.first, stored.second);
    }
    for (const auto& [name, param] : overrides)
        if (req.has(param)) h.emplace_back(std::string(name), std::string(req.param(param)));
    if (checksum_mode && !r.checksum_algorithm.empty()) {
        if (auto alg = parse_checksum_algorithm(r.checksum_algorithm)) {
            h.emplace_back(checksum_header_name(*alg), r.checksum_value);
            h.emplace_back("x-amz-checksum-type", r.checksum_value.find('-') == std::string::npos
                                                      ? "FULL_OBJECT"
                                                      : "COMPOSITE");
        }
    }
}

}  // namespace

base::result<body_plan> plan_body(const context& c, checksum_algorithm expected_algorithm) {
    const http::request_head& head = c.ex.head();
    const bool streaming = c.auth.mode == auth::payload_mode::streaming_signed ||
                           c.auth.mode == auth::payload_mode::streaming_signed_trailer ||
                           c.auth.mode == auth::payload_mode::streaming_unsigned_trailer;
    body_plan plan;
    plan.options.aws_chunked = streaming;
    if (streaming) {
        auto decoded = base::parse_u64(head.value_of("x-amz-decoded-content-length"));
        if (!decoded)
            return base::fail(base::errc::missing_content_length,
                              "You must provide the x-amz-decoded-content-length header.");
        plan.size_bytes = *decoded;
        plan.options.decoded_length = decoded;
    } else if (head.content_length) {
        plan.size_bytes = head.content_length;
    } else if (!head.chunked) {
        return base::fail(base::errc::missing_content_length,
                          "You must provide the Content-Length HTTP header.");
    }
    FJORD_TRY(checksum_options(head, plan.options));
    if (plan.options.checksum == checksum_algorithm::none)
        plan.options.checksum = expected_algorithm;
    std::string_view content_md5 = head.value_of("content-md5");
    if (!content_md5.empty()) {
        auto raw = base::base64_decode(content_md5);
        if (!raw || raw->size() != 16)
            return base::fail(base::errc::invalid_digest,
                              "The Content-MD5 you specified is not valid.");
        plan.options.content_md5 = *raw;
    }
    plan.options.compute_md5 =
        c.svc.options().etag_md5 ||
        (plan.size_bytes && *plan.size_bytes <= c.svc.options().etag_md5_max_bytes);
    return plan;
}

io::task<void> put_object(context& c) {
    const http::request_head& head = c.ex.head();
    store::object_record metadata;
    metadata.acl = c.write_acl;
    if (auto m = collect_metadata(head, c.svc.options().max_metadata_bytes, metadata); !m)
        co_return co_await send_error(c, m.err());
    auto conditions = write_conditions_of(head);
    if (!conditions) co_return co_await send_error(c, conditions.err());
    auto plan = plan_body(c, checksum_algorithm::none);
    if (!plan) co_return co_await send_error(c, plan.err());
    payload_source source(c.ex.body(), c.auth, plan->options);
    // Runs once the body is stored, before it is made durable: every digest it carries must hold.
    store::record_finisher finish =
        [&](const store::written_data& written) -> base::result<store::object_record> {
        FJORD_TRY(source.verify());
        store::object_record record = metadata;
        record.modified_ms = base::unix_now_ms();
        record.etag = body_etag(source, written);
        if (source.checksum() != checksum_algorithm::none) {
            record.checksum_algorithm = std::string(checksum_name(source.checksum()));
            record.checksum_value = source.checksum_base64();
        }
        return record;
    };
    store::put_request request{c.req.bucket, c.req.key, plan->size_bytes,
                               c.svc.options().max_object_bytes, *conditions};
    auto stored = co_await c.svc.store().put(request, source, finish);
    if (!stored) co_return co_await send_error(c, stored.err());
    auto headers = c.common_headers();
    headers.emplace_back("ETag", "\"" + stored->etag + "\"");
    add_version_header(headers, *stored, false);
    if (auto alg = parse_checksum_algorithm(stored->checksum_algorithm))
        headers.emplace_back(checksum_header_name(*alg), stored->checksum_value);
    (void)co_await c.ex.send_all(200, headers, "");
}

namespace {

// What an error answer to a GET describes of the record it saw (304, 416): not the whole record, which
// a GET would otherwise copy once more.
struct seen_record {
    std::string etag;
    std::int64_t modified_ms = 0;
    std::uint64_t size_bytes = 0;
};

// The range a GET of partNumber=n covers (part n of a multipart object; part 1 is all of any other).
base::result<std::optional<byte_range>> part_range(const store::object_record& r, std::uint64_t n) {
    if (n > r.part_count() && !(r.part_count() == 0 && n == 1))
        return base::fail(base::errc::invalid_part_number,
                          "The requested partnumber is not satisfiable");
    std::uint64_t start = 0;
    for (std::uint64_t i = 0; i + 1 < n; ++i) start += r.part_size_bytes(i);
    std::uint64_t len = r.part_count() == 0 ? r.size_bytes : r.part_size_bytes(n - 1);
    return len == 0 ? std::optional<byte_range>{}
                    : std::optional<byte_range>{byte_range{start, len}};
}

base::result<std::optional<std::uint64_t>> part_number_of(const s3_request& req,
                                                          const http::request_head& head) {
    if (!req.has("partNumber")) return std::optional<std::uint64_t>{};
    auto n = base::parse_u64(req.param("partNumber"));
    if (!n || *n < 1 || *n > 10000)
        return base::fail(base::errc::invalid_argument,
                          "Part number must be an integer between 1 and 10000, inclusive");
    if (!head.value_of("range").empty())
        return base::fail(base::errc::invalid_request,
                          "Cannot specify both Range header and partNumber query parameter");
    return std::optional<std::uint64_t>{*n};
}

std::string content_range(store::byte_range read, std::uint64_t total_bytes) {
    return "bytes " + std::to_string(read.first) + "-" +
           std::to_string(read.first + read.length - 1) + "/" + std::to_string(total_bytes);
}

}  // namespace

// 416: the AWS CRT (s3torchconnector, mountpoint-s3) recognises an empty object by ActualObjectSize in
// this error and then repeats its first ranged GET without the range.
io::task<void> send_invalid_range(context& c, const base::error& err, std::uint64_t size_bytes) {
    auto headers = c.common_headers();
    headers.emplace_back("Content-Range", "bytes */" + std::to_string(size_bytes));
    headers.emplace_back("Content-Type", "application/xml");
    (void)co_await c.ex.send_all(
        416, headers,
        error_xml(err, c.req.resource, c.request_id,
                  {{"RangeRequested", std::string(c.ex.head().value_of("range"))},
                   {"ActualObjectSize", std::to_string(size_bytes)}}));
}

io::task<void> get_object(context& c, bool head_only) {
    const http::request_head& head = c.ex.head();
    if (auto ok = check_response_overrides(c.req); !ok) co_return co_await send_error(c, ok.err());
    auto part_number = part_number_of(c.req, head);
    if (!part_number) co_return co_await send_error(c, part_number.err());
    response_sink sink(c.ex);
    const object_check allowed = c.check_of_object();
    std::optional<seen_record> seen;  // what a 304 or 416 answer describes
    // Chooses the answer once the store has the record: conditions, range, and the response head.
    store::read_planner plan =
        [&](const store::object_record& r) -> base::result<std::optional<store::byte_range>> {
        FJORD_TRY(allowed(r));
        seen = seen_record{r.etag, r.modified_ms, r.size_bytes};
        FJORD_TRY(check_read_conditions(head, r));
        auto range = *part_number ? part_range(r, **part_number)
                                  : parse_range(head.value_of("range"), r.size_bytes);
        if (!range) return range.as_failure();
        auto headers = c.common_headers();
        bool checksum_mode =
            base::iequals(head.value_of("x-amz-checksum-mode"), "ENABLED") && !*range;
        add_object_headers(headers, r, c.req, checksum_mode);
        answer_version(headers, r, c);
        if (!r.tags.empty())
            headers.emplace_back("x-amz-tagging-count", std::to_string(r.tags.size()));
        if (*part_number)
            headers.emplace_back("x-amz-mp-parts-count",
                                 std::to_string(std::max<std::size_t>(r.part_count(), 1)));
        store::byte_range read{0, r.size_bytes};
        int status = 200;
        if (*range) {
            read = {(*range)->first, (*range)->length};
            status = 206;
            headers.emplace_back("Content-Range", content_range(read, r.size_bytes));
        }
        sink.prepare(status, std::move(headers), read.length);
        if (head_only || read.length == 0) return std::optional<store::byte_range>{};
        return std::optional<store::byte_range>{read};
    };
    auto got = co_await get_named(c, plan, sink);
    if (got) {
        (void)co_await sink.finish();
        co_return;
    }
    if (c.ex.head_sent()) {
        // Bytes already left: the only honest signal left is to cut the connection short.
        if (got.code() == base::errc::data_corrupted)
            (void)read_failure(c, c.req.bucket, c.req.key, got.err());
        c.ex.close_after();
        co_return;
    }
    if (got.code() == base::errc::not_modified && seen) {
        auto headers = c.common_headers();
        headers.emplace_back("ETag", "\"" + seen->etag + "\"");
        headers.emplace_back(
            "Last-Modified",
            base::format_http_date(static_cast<std::time_t>(seen->modified_ms / 1000)));
        co_return (void) co_await c.ex.send_all(304, headers, "");
    }
    if (got.code() == base::errc::invalid_range && seen)
        co_return co_await send_invalid_range(c, got.err(), seen->size_bytes);
    base::error err = visible_error(c, read_failure(c, c.req.bucket, c.req.key, got.err()));
    co_await send_error(c, err, co_await delete_marker_headers(c, err.code));
}

io::task<void> delete_object(context& c) {
    store::write_conditions conditions;
    std::string_view if_match = c.ex.head().value_of("if-match");
    if (!if_match.empty()) conditions.if_match_etag = unquote_etag(if_match);
    base::result<std::optional<store::object_record>> removed = base::fail(base::errc::internal);
    if (c.version) {
        auto versions = offered(c.svc.store().versions_of(c.req.bucket), c.req.bucket, "versions");
        if (!versions) co_return co_await send_error(c, versions.err());
        removed = co_await (*versions)->remove_version(c.req.bucket, c.req.key, *c.version);
    } else
        removed = co_await c.svc.store().remove(c.req.bucket, c.req.key, conditions);
    if (!removed) co_return co_await send_error(c, removed.err());
    auto headers = c.common_headers();
    // The delete marker made (or removed, by its version id), and the version the answer is about
    const bool marker = *removed && (*removed)->delete_marker;
    if (marker) headers.emplace_back("x-amz-delete-marker", "true");
    if (c.version)
        headers.emplace_back("x-amz-version-id", c.version->empty() ? "null" : *c.version);
    else if (marker)
        add_version_header(headers, **removed, true);
    (void)co_await c.ex.send_all(204, headers, "");
}

}  // namespace fjord::s3
