// CopyObject and UploadPartCopy: server-side copies that never stream through the client.

#include "base/clock.h"
#include "base/encoding.h"
#include "base/log.h"
#include "s3/http_conditions.h"
#include "s3/service.h"
#include "s3/service_internal.h"
#include "s3/xml.h"

namespace fjord::s3 {

namespace {
constexpr std::string_view s3_xmlns = "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"";

struct copy_source {
    std::string bucket;
    std::string key;
};

base::result<copy_source> parse_copy_source(std::string_view header) {
    auto question = header.find('?');
    std::string_view path = header.substr(0, question);
    if (question != std::string_view::npos) {
        std::string_view query = header.substr(question + 1);
        if (query.starts_with("versionId=") && query.substr(10) != "null")
            return base::fail(base::errc::not_implemented, "Fjord does not keep object versions");
    }
    auto decoded = base::uri_decode(path, false);
    if (!decoded) return base::fail(base::errc::invalid_argument, "Invalid copy source encoding");
    std::string_view text = *decoded;
    if (text.starts_with('/')) text.remove_prefix(1);
    auto slash = text.find('/');
    if (slash == std::string_view::npos || slash == 0 || slash + 1 == text.size())
        return base::fail(base::errc::invalid_argument, "Copy Source must mention the source bucket and key: sourcebucket/sourcekey");
    return copy_source{std::string(text.substr(0, slash)), std::string(text.substr(slash + 1))};
}

// x-amz-copy-source-if-* : every failure is 412 for a copy.
base::result<void> check_copy_conditions(const http::request_head& head, const store::object_record& r) {
    auto failed = base::fail(base::errc::precondition_failed, "At least one of the pre-conditions you specified did not hold");
    std::int64_t modified_s = r.modified_ms / 1000;
    std::string_view if_match = head.value_of("x-amz-copy-source-if-match");
    std::string_view if_none_match = head.value_of("x-amz-copy-source-if-none-match");
    if (!if_match.empty()) {
        if (!etag_list_matches(if_match, r.etag)) return failed;
    } else if (auto since = base::parse_http_date(head.value_of("x-amz-copy-source-if-unmodified-since"));
               since && modified_s > *since) {
        return failed;
    }
    if (!if_none_match.empty()) {
        if (etag_list_matches(if_none_match, r.etag)) return failed;
    } else if (auto since = base::parse_http_date(head.value_of("x-amz-copy-source-if-modified-since"));
               since && modified_s <= *since) {
        return failed;
    }
    return {};
}

// Feeds verified source bytes into a new data file (and the part checksum, for UploadPartCopy).
class copy_sink final : public store::byte_sink {
public:
    copy_sink(store::object_writer& writer, checksum_algorithm alg) : _writer(writer) {
        if (alg != checksum_algorithm::none) _checksum.emplace(alg);
    }
    io::task<base::result<void>> write(std::span<const std::byte> data) override {
        if (_checksum) _checksum->update(data);
        co_return co_await _writer.append(data);
    }
    std::string checksum_base64() { return _checksum ? _checksum->finish_base64() : std::string{}; }

private:
    store::object_writer& _writer;
    std::optional<running_checksum> _checksum;
};

bool is_plain_md5(const std::string& etag) { return etag.size() == 32 && etag.find('-') == std::string::npos; }
}  // namespace

io::task<base::result<received_body>> service::copy_data(const store::object_record& source, std::uint64_t first,
                                                         std::uint64_t length, checksum_algorithm alg) {
    co_await _engine.copy_admission().acquire();
    io::semaphore::permit admitted(_engine.copy_admission());
    store::object_writer writer(_engine.drives(), _engine.pool(), _engine.new_object_id(), _engine.data_file_settings(),
                                 &_engine.writes(), &_engine.spares());
    base::result<store::segment> sealed = base::fail(base::errc::internal);
    copy_sink sink(writer, alg);
    if (auto opened = co_await writer.open(length); !opened) {
        sealed = opened.as_failure();
    } else if (auto read = co_await store::read_object(_engine.drives(), _engine.pool(), source, first, length, sink,
                                                       _engine.data_file_settings());
               !read) {
        (void)co_await writer.finish_appends();
        sealed = read.as_failure();
    } else if (auto finished = co_await writer.finish_appends(); !finished) {
        sealed = finished.as_failure();
    } else {
        sealed = co_await writer.seal();
    }
    if (!sealed) {
        co_await writer.discard();
        co_return sealed.as_failure();
    }
    received_body body;
    body.data = *sealed;
    bool whole = first == 0 && length == source.size_bytes;
    body.etag = whole && is_plain_md5(source.etag) ? source.etag : derived_etag(writer.size_bytes(), writer.block_crcs());
    body.checksum = alg;
    body.checksum_value = sink.checksum_base64();
    co_return body;
}

io::task<void> service::copy_object(context& c) {
    const http::request_head& head = c.ex.head();
    auto src = parse_copy_source(head.value_of("x-amz-copy-source"));
    if (!src) co_return co_await send_error(c, src.err());
    std::string directive = base::to_lower(head.value_of("x-amz-metadata-directive"));
    if (!directive.empty() && directive != "copy" && directive != "replace")
        co_return co_await send_error(c, {base::errc::invalid_argument, "Unknown metadata directive."});
    bool replace = directive == "replace";
    std::string tagging_directive = base::to_lower(head.value_of("x-amz-tagging-directive"));
    bool same = src->bucket == c.req.bucket && src->key == c.req.key;
    auto conditions = write_conditions_of(head);
    if (!conditions) co_return co_await send_error(c, conditions.err());
    for (int attempt = 0; attempt < 3; ++attempt) {
        auto found = co_await _engine.lookup(src->bucket, src->key);
        if (!found) co_return co_await send_error(c, found.err());
        if (auto ok = check_copy_conditions(head, *found); !ok) co_return co_await send_error(c, ok.err());
        store::object_record record;
        if (replace) {
            if (auto m = collect_metadata(head, _options.max_metadata_bytes, record); !m)
                co_return co_await send_error(c, m.err());
        } else {
            record.content_type = found->content_type;
            record.headers = found->headers;
        }
        record.tags = found->tags;
        if (tagging_directive == "replace") {
            auto tags = parse_tagging_header(head.value_of("x-amz-tagging"));
            if (!tags) co_return co_await send_error(c, tags.err());
            record.tags = std::move(*tags);
        }
        if (same && !replace && tagging_directive != "replace")
            co_return co_await send_error(c, {base::errc::invalid_request,
                "This copy request is illegal because it is trying to copy an object to itself without changing "
                "the object's metadata, storage class, website redirect location or encryption attributes."});
        store::object_record result;
        if (same) {
            // Only the metadata changes: rewrite the record, keep the data where it is.
            std::string expected_etag = found->etag;
            store::write_conditions only_if_unchanged = *conditions;
            only_if_unchanged.if_match_etag = expected_etag;
            auto edit = [record](store::object_record& r) -> base::result<void> {
                r.content_type = record.content_type;
                r.headers = record.headers;
                r.tags = record.tags;
                r.modified_ms = base::unix_now_ms();
                return {};
            };
            auto updated = co_await _engine.update(c.req.bucket, c.req.key, edit, only_if_unchanged);
            if (!updated) co_return co_await send_error(c, updated.err());
            result = std::move(*updated);
        } else {
            // The copy shares the source's data files (hard links) where it can: a checkpoint "rename"
            // (copy + delete) then moves no data. A multipart source with a checksum is rewritten instead,
            // because its copy needs a whole-object checksum that only the bytes give.
            auto shared = base::result<std::vector<store::segment>>(base::fail(base::errc::not_implemented));
            if (found->size_bytes > 0 && (found->segments.size() == 1 || found->checksum_algorithm.empty()))
                shared = co_await _engine.share_segments(found->segments);
            if (!shared && shared.code() == base::errc::not_found && attempt < 2) continue;  // source replaced
            if (shared) {
                record.size_bytes = found->size_bytes;
                record.etag = found->etag;
                record.checksum_algorithm = found->checksum_algorithm;
                record.checksum_value = found->checksum_value;
                record.part_checksums = found->part_checksums;
                record.segments = std::move(*shared);
            } else {
                // Not shareable, or the file system cannot link: copy the bytes.
                auto alg = parse_checksum_algorithm(found->checksum_algorithm).value_or(checksum_algorithm::none);
                auto body = co_await copy_data(*found, 0, found->size_bytes, alg);
                if (!body) {
                    if (body.code() == base::errc::not_found && attempt < 2) continue;  // source replaced meanwhile
                    std::string role = "the copy source of s3://" + c.req.bucket + "/" + c.req.key;
                    co_return co_await send_error(c, read_failure(c, src->bucket, src->key, body.err(), role));
                }
                record.size_bytes = body->data.size_bytes;
                record.etag = body->etag;
                if (alg != checksum_algorithm::none) {
                    record.checksum_algorithm = std::string(checksum_name(alg));
                    record.checksum_value = body->checksum_value;
                }
                record.segments.push_back(body->data);
            }
            record.modified_ms = base::unix_now_ms();
            auto committed = co_await _engine.commit_put(c.req.bucket, c.req.key, record, *conditions);
            if (!committed) {
                if (store::commit_surely_failed(committed.err())) co_await _engine.reclaim(std::move(record));
                co_return co_await send_error(c, committed.err());
            }
            if (*committed) co_await _engine.reclaim(std::move(**committed));
            result = std::move(record);
        }
        xml_writer x;
        x.open("CopyObjectResult", s3_xmlns);
        x.element("LastModified", base::format_iso8601_ms(result.modified_ms));
        x.element("ETag", "\"" + result.etag + "\"");
        if (auto alg = parse_checksum_algorithm(result.checksum_algorithm))
            x.element("Checksum" + std::string(checksum_name(*alg)), result.checksum_value);
        x.close("CopyObjectResult");
        co_return co_await send_xml(c, 200, x.take());
    }
}

io::task<void> service::upload_part_copy(context& c) {
    const http::request_head& head = c.ex.head();
    auto number = base::parse_u64(c.req.param("partNumber"));
    if (!number || *number < 1 || *number > 10000)
        co_return co_await send_error(c, {base::errc::invalid_argument, "Part number must be an integer between 1 and 10000, inclusive"});
    auto src = parse_copy_source(head.value_of("x-amz-copy-source"));
    if (!src) co_return co_await send_error(c, src.err());
    std::string upload_id(c.req.param("uploadId"));
    auto upload = co_await _engine.get_upload(c.req.bucket, c.req.key, upload_id);
    if (!upload) co_return co_await send_error(c, upload.err());
    auto alg = parse_checksum_algorithm(upload->object.checksum_algorithm).value_or(checksum_algorithm::none);
    for (int attempt = 0; attempt < 3; ++attempt) {
        auto found = co_await _engine.lookup(src->bucket, src->key);
        if (!found) co_return co_await send_error(c, found.err());
        if (auto ok = check_copy_conditions(head, *found); !ok) co_return co_await send_error(c, ok.err());
        std::uint64_t first = 0, length = found->size_bytes;
        std::string_view range = base::trim(head.value_of("x-amz-copy-source-range"));
        if (!range.empty()) {
            auto dash = range.find('-');
            std::optional<std::uint64_t> a, b;
            if (range.starts_with("bytes=") && dash != std::string_view::npos) {
                a = base::parse_u64(range.substr(6, dash - 6));
                b = base::parse_u64(range.substr(dash + 1));
            }
            if (!a || !b || *b < *a)
                co_return co_await send_error(c, {base::errc::invalid_argument, "The x-amz-copy-source-range value must be of the form bytes=first-last where first and last are the zero-based offsets of the first and last bytes to copy"});
            if (*b >= found->size_bytes)
                co_return co_await send_error(c, {base::errc::invalid_range, "The requested range is not satisfiable"});
            first = *a;
            length = *b - *a + 1;
        }
        if (length > 5ULL * 1024 * 1024 * 1024)
            co_return co_await send_error(c, {base::errc::entity_too_large, "A copied part may be at most 5 GiB"});
        auto body = co_await copy_data(*found, first, length, alg);
        if (!body) {
            if (body.code() == base::errc::not_found && attempt < 2) continue;
            std::string role = "the copy source of part " + std::to_string(*number) + " of upload " + upload_id +
                               " for s3://" + c.req.bucket + "/" + c.req.key;
            co_return co_await send_error(c, read_failure(c, src->bucket, src->key, body.err(), role));
        }
        auto committed = co_await commit_received_part(c, upload_id, static_cast<std::uint32_t>(*number), *body);
        if (!committed) co_return co_await send_error(c, committed.err());
        const store::part_record& part = *committed;
        xml_writer x;
        x.open("CopyPartResult", s3_xmlns);
        x.element("LastModified", base::format_iso8601_ms(part.modified_ms));
        x.element("ETag", "\"" + part.etag + "\"");
        if (alg != checksum_algorithm::none) x.element("Checksum" + std::string(checksum_name(alg)), part.checksum_value);
        x.close("CopyPartResult");
        co_return co_await send_xml(c, 200, x.take());
    }
}

}  // namespace fjord::s3
