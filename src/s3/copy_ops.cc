// CopyObject and UploadPartCopy: server-side copies that never stream through the client.

#include <memory>
#include <optional>

#include "base/clock.h"
#include "base/encoding.h"
#include "base/log.h"
#include "s3/http_conditions.h"
#include "s3/service.h"
#include "s3/operations.h"
#include "s3/xml.h"

namespace fjord::s3 {

namespace {

struct copy_source {
    std::string bucket;
    std::string key;
    std::optional<std::string>
        version;  // the source's version ("": null); nullopt: the current one
};

// bucket/key[?versionId=id], the version checked against the source bucket's versioning.
base::result<copy_source> parse_copy_source(const store::object_store& store,
                                            std::string_view header) {
    auto question = header.find('?');
    std::string_view path = header.substr(0, question);
    std::optional<std::string_view> version_text;
    if (question != std::string_view::npos) {
        std::string_view query = header.substr(question + 1);
        if (query.starts_with("versionId=")) version_text = query.substr(10);
    }
    auto decoded = base::uri_decode(path, false);
    if (!decoded) return base::fail(base::errc::invalid_argument, "Invalid copy source encoding");
    std::string_view text = *decoded;
    if (text.starts_with('/')) text.remove_prefix(1);
    auto slash = text.find('/');
    if (slash == std::string_view::npos || slash == 0 || slash + 1 == text.size())
        return base::fail(
            base::errc::invalid_argument,
            "Copy Source must mention the source bucket and key: sourcebucket/sourcekey");
    copy_source src{std::string(text.substr(0, slash)), std::string(text.substr(slash + 1)), {}};
    if (version_text) {
        auto version = parse_version_id(*version_text, has_versioning(store, src.bucket));
        if (!version) return version.as_failure();
        src.version = std::move(*version);
    }
    return src;
}

// x-amz-copy-source-if-* : every failure is 412 for a copy.
base::result<void> check_copy_conditions(const http::request_head& head,
                                         const store::object_record& r) {
    auto failed = base::fail(base::errc::precondition_failed,
                             "At least one of the pre-conditions you specified did not hold");
    std::int64_t modified_s = r.modified_ms / 1000;
    std::string_view if_match = head.value_of("x-amz-copy-source-if-match");
    std::string_view if_none_match = head.value_of("x-amz-copy-source-if-none-match");
    if (!if_match.empty()) {
        if (!etag_list_matches(if_match, r.etag)) return failed;
    } else if (auto since =
                   base::parse_http_date(head.value_of("x-amz-copy-source-if-unmodified-since"));
               since && modified_s > *since) {
        return failed;
    }
    if (!if_none_match.empty()) {
        if (etag_list_matches(if_none_match, r.etag)) return failed;
    } else if (auto since =
                   base::parse_http_date(head.value_of("x-amz-copy-source-if-modified-since"));
               since && modified_s <= *since) {
        return failed;
    }
    return {};
}

bool is_plain_md5(const std::string& etag) {
    return etag.size() == 32 && etag.find('-') == std::string::npos;
}
}  // namespace

namespace {

// The copy's metadata: the request's (REPLACE) or the source's (COPY), and its tags.
base::result<store::object_record> copy_metadata(const http::request_head& head,
                                                 const store::object_record& found, bool replace,
                                                 bool replace_tags, std::size_t max_meta_bytes) {
    store::object_record record;
    if (replace) {
        FJORD_TRY(collect_metadata(head, max_meta_bytes, record));
    } else {
        record.content_type = found.content_type;
        record.headers = found.headers;
    }
    record.tags = found.tags;
    if (replace_tags) {
        auto tags = parse_tagging_header(head.value_of("x-amz-tagging"));
        if (!tags) return tags.as_failure();
        record.tags = std::move(*tags);
    }
    return record;
}

// How the store copies an object: sharing its data files where it can, with the source's ETag and
// checksum; where it cannot (or a multipart source with a checksum, whose copy needs a whole-object
// checksum only the bytes give), reading and rewriting the bytes, with a checksum computed on the way.
store::copy_plan plan_copy(store::object_record record, const store::object_record& found) {
    store::copy_plan plan;
    record.modified_ms = base::unix_now_ms();
    record.etag = found.etag;
    record.checksum_algorithm = found.checksum_algorithm;
    record.checksum_value = found.checksum_value;
    record.part_checksums = found.part_checksums;
    plan.may_share = found.part_count() == 1 || found.checksum_algorithm.empty();
    auto alg =
        parse_checksum_algorithm(found.checksum_algorithm).value_or(checksum_algorithm::none);
    auto checksum = std::make_shared<std::optional<running_checksum>>();
    if (alg != checksum_algorithm::none) checksum->emplace(alg);
    plan.observe = [checksum](std::span<const std::byte> data) {
        if (*checksum) (*checksum)->update(data);
    };
    std::string source_etag = found.etag;
    plan.finish = [record, checksum, source_etag](
                      const store::written_data& written) -> base::result<store::object_record> {
        store::object_record rewritten = record;
        rewritten.etag = is_plain_md5(source_etag) ? source_etag : derived_etag(written);
        rewritten.part_checksums.clear();
        if (*checksum) rewritten.checksum_value = (*checksum)->finish_base64();
        return rewritten;
    };
    plan.record = std::move(record);
    return plan;
}

base::failure copy_onto_itself_unchanged() {
    return base::fail(
        base::errc::invalid_request,
        "This copy request is illegal because it is trying to copy an object to itself without changing "
        "the object's metadata, storage class, website redirect location or encryption attributes.");
}

// The ACLs of a copy: what the source's must grant the caller (nullopt: nothing of it), and the one the
// copy gets (c.write_acl: a copy never keeps its source's).
struct copy_acls {
    const object_check& source_check;
    const std::string& caller;
    const std::string& acl;
};

// A copy onto itself in a bucket without versioning: only the metadata changes, so the record is
// rewritten and the data stays where it is.
io::task<base::result<store::object_record>> copy_onto_itself(
    store::object_store& store, const http::request_head& head, const s3_request& req, bool replace,
    bool replace_tags, store::write_conditions conditions, std::size_t max_metadata_bytes,
    copy_acls acls) {
    auto found = co_await store.head(req.bucket, req.key);
    if (!found) co_return found.as_failure();
    FJORD_CO_TRY(acls.source_check(*found));
    FJORD_CO_TRY(check_copy_conditions(head, *found));
    if (!replace && !replace_tags) co_return copy_onto_itself_unchanged();
    auto record = copy_metadata(head, *found, replace, replace_tags, max_metadata_bytes);
    if (!record) co_return record.as_failure();
    store::write_conditions only_if_unchanged = conditions;
    only_if_unchanged.if_match_etag = found->etag;
    store::object_record changes = *record;
    changes.acl = acls.acl;
    store::record_editor edit = [changes](store::object_record& r) -> base::result<void> {
        r.content_type = changes.content_type;
        r.headers = changes.headers;
        r.tags = changes.tags;
        r.acl = changes.acl;
        r.modified_ms = base::unix_now_ms();
        return {};
    };
    auto updates = offered(store.updates_of(req.bucket), req.bucket, "changes of a stored object");
    if (!updates) co_return updates.as_failure();
    co_return co_await (*updates)->update(req.bucket, req.key, edit, only_if_unchanged);
}

std::string copy_result_xml(const store::object_record& r) {
    xml_writer x;
    x.open("CopyObjectResult", s3_xmlns);
    x.element("LastModified", base::format_iso8601_ms(r.modified_ms));
    x.element("ETag", "\"" + r.etag + "\"");
    if (auto alg = parse_checksum_algorithm(r.checksum_algorithm))
        x.element("Checksum" + std::string(checksum_name(*alg)), r.checksum_value);
    x.close("CopyObjectResult");
    return x.take();
}

}  // namespace

io::task<void> copy_object(context& c) {
    const http::request_head& head = c.ex.head();
    auto src = parse_copy_source(c.svc.store(), head.value_of("x-amz-copy-source"));
    if (!src) co_return co_await send_error(c, src.err());
    std::string directive = base::to_lower(head.value_of("x-amz-metadata-directive"));
    if (!directive.empty() && directive != "copy" && directive != "replace")
        co_return co_await send_error(
            c, {base::errc::invalid_argument, "Unknown metadata directive."});
    const bool replace = directive == "replace";
    const bool replace_tags = base::to_lower(head.value_of("x-amz-tagging-directive")) == "replace";
    // Onto itself, in a bucket without versioning: only the record changes (otherwise a new version)
    const bool onto_itself = src->bucket == c.req.bucket && src->key == c.req.key && !src->version;
    const bool same = onto_itself && !has_versioning(c.svc.store(), c.req.bucket);
    auto conditions = write_conditions_of(head);
    if (!conditions) co_return co_await send_error(c, conditions.err());
    base::result<store::object_record> result = base::fail(base::errc::internal);
    const object_check source_check = c.check_of_source();
    if (same) {
        result = co_await copy_onto_itself(c.svc.store(), head, c.req, replace, replace_tags,
                                           *conditions, c.svc.options().max_metadata_bytes,
                                           {source_check, c.auth.access_key, c.write_acl});
    } else {
        store::copy_planner plan =
            [&](const store::object_record& found) -> base::result<store::copy_plan> {
            FJORD_TRY(source_check(found));
            FJORD_TRY(check_copy_conditions(head, found));
            if (onto_itself && !replace && !replace_tags) return copy_onto_itself_unchanged();
            auto record = copy_metadata(head, found, replace, replace_tags,
                                        c.svc.options().max_metadata_bytes);
            if (!record) return record.as_failure();
            record->acl = c.write_acl;
            return plan_copy(std::move(*record), found);
        };
        store::copy_request request{src->bucket, src->key,    c.req.bucket,
                                    c.req.key,   *conditions, src->version};
        auto copier = offered(c.svc.store().copier_of(c.req.bucket), c.req.bucket, "copies");
        if (!copier) co_return co_await send_error(c, copier.err());
        result = co_await (*copier)->copy(request, plan);
    }
    if (!result) {
        // Damage found while reading the source is logged as the source's.
        if (result.code() == base::errc::data_corrupted || result.code() == base::errc::not_found)
            co_return co_await send_error(
                c, read_failure(c, src->bucket, src->key, result.err(),
                                "the copy source of s3://" + c.req.bucket + "/" + c.req.key));
        co_return co_await send_error(c, copy_source_error(result.err()));
    }
    auto headers = c.common_headers();
    headers.emplace_back("Content-Type", "application/xml");
    add_version_header(headers, *result, false);
    if (src->version)
        headers.emplace_back("x-amz-copy-source-version-id",
                             src->version->empty() ? "null" : *src->version);
    (void)co_await c.ex.send_all(200, headers, copy_result_xml(*result));
}

namespace {

// x-amz-copy-source-range "bytes=first-last" against the source's size (the whole source without it).
base::result<store::byte_range> copy_source_range(std::string_view range, std::uint64_t size) {
    range = base::trim(range);
    if (range.empty()) return store::byte_range{0, size};
    auto dash = range.find('-');
    std::optional<std::uint64_t> a, b;
    if (range.starts_with("bytes=") && dash != std::string_view::npos) {
        a = base::parse_u64(range.substr(6, dash - 6));
        b = base::parse_u64(range.substr(dash + 1));
    }
    if (!a || !b || *b < *a)
        return base::fail(
            base::errc::invalid_argument,
            "The x-amz-copy-source-range value must be of the form bytes=first-last where first and last are the zero-based offsets of the first and last bytes to copy");
    if (*b >= size)
        return base::fail(base::errc::invalid_range, "The requested range is not satisfiable");
    return store::byte_range{*a, *b - *a + 1};
}

}  // namespace

io::task<void> upload_part_copy(context& c) {
    const http::request_head& head = c.ex.head();
    auto number = base::parse_u64(c.req.param("partNumber"));
    if (!number || *number < 1 || *number > 10000)
        co_return co_await send_error(
            c, {base::errc::invalid_argument,
                "Part number must be an integer between 1 and 10000, inclusive"});
    auto src = parse_copy_source(c.svc.store(), head.value_of("x-amz-copy-source"));
    if (!src) co_return co_await send_error(c, src.err());
    std::string upload_id(c.req.param("uploadId"));
    auto uploads = uploads_in(c);
    if (!uploads) co_return co_await send_error(c, uploads.err());
    auto upload = co_await (*uploads)->get_upload(c.req.bucket, c.req.key, upload_id);
    if (!upload) co_return co_await send_error(c, upload.err());
    const auto alg = parse_checksum_algorithm(upload->object.checksum_algorithm)
                         .value_or(checksum_algorithm::none);
    const object_check source_check = c.check_of_source();
    store::part_copy_planner plan =
        [&](const store::object_record& found) -> base::result<store::part_copy_plan> {
        FJORD_TRY(source_check(found));
        FJORD_TRY(check_copy_conditions(head, found));
        auto range = copy_source_range(head.value_of("x-amz-copy-source-range"), found.size_bytes);
        if (!range) return range.as_failure();
        if (range->length > 5ULL * 1024 * 1024 * 1024)
            return base::fail(base::errc::entity_too_large, "A copied part may be at most 5 GiB");
        store::part_copy_plan planned;
        planned.range = *range;
        auto checksum = std::make_shared<std::optional<running_checksum>>();
        if (alg != checksum_algorithm::none) checksum->emplace(alg);
        planned.observe = [checksum](std::span<const std::byte> data) {
            if (*checksum) (*checksum)->update(data);
        };
        bool whole = range->first == 0 && range->length == found.size_bytes;
        std::string source_etag = whole && is_plain_md5(found.etag) ? found.etag : std::string{};
        planned.finish =
            [checksum,
             source_etag](const store::written_data& written) -> base::result<store::part_record> {
            store::part_record part;
            part.etag = source_etag.empty() ? derived_etag(written) : source_etag;
            if (*checksum) part.checksum_value = (*checksum)->finish_base64();
            part.modified_ms = base::unix_now_ms();
            return part;
        };
        return planned;
    };
    store::part_copy_request request{src->bucket, src->key,  c.req.bucket,
                                     c.req.key,   upload_id, static_cast<std::uint32_t>(*number),
                                     src->version};
    auto part = co_await (*uploads)->copy_part(request, plan);
    if (!part) {
        if (part.code() == base::errc::data_corrupted || part.code() == base::errc::not_found) {
            std::string role = "the copy source of part " + std::to_string(*number) +
                               " of upload " + upload_id + " for s3://" + c.req.bucket + "/" +
                               c.req.key;
            co_return co_await send_error(c,
                                          read_failure(c, src->bucket, src->key, part.err(), role));
        }
        co_return co_await send_error(c, copy_source_error(part.err()));
    }
    xml_writer x;
    x.open("CopyPartResult", s3_xmlns);
    x.element("LastModified", base::format_iso8601_ms(part->modified_ms));
    x.element("ETag", "\"" + part->etag + "\"");
    if (alg != checksum_algorithm::none)
        x.element("Checksum" + std::string(checksum_name(alg)), part->checksum_value);
    x.close("CopyPartResult");
    co_await send_xml(c, 200, x.take());
}

}  // namespace fjord::s3
