// Multipart upload operations: Create, UploadPart, Complete, Abort (the listings: multipart_listing.cc).

#include <pugixml.hpp>

#include <algorithm>

#include "base/checksum.h"
#include "base/clock.h"
#include "base/digest.h"
#include "base/encoding.h"
#include "base/log.h"
#include "s3/service.h"
#include "s3/operations.h"
#include "s3/xml.h"

namespace fjord::s3 {

namespace {
constexpr std::uint64_t max_part_bytes = 5ULL * 1024 * 1024 * 1024;
constexpr std::size_t max_complete_body_bytes = 4 * 1024 * 1024;

base::failure invalid_part(std::string message) {
    return base::fail(base::errc::invalid_part, std::move(message));
}

// The 16 raw bytes an ETag stands for (MD5 or our derived tag, which has the same 32 hex digits first).
std::string etag_raw(const std::string& etag) {
    auto raw = base::hex_decode(std::string_view(etag).substr(0, 32));
    return raw ? *raw : std::string(16, '\0');
}

}  // namespace

base::result<std::vector<requested_part>> parse_complete_body(const std::string& body) {
    pugi::xml_document doc;
    FJORD_TRY(load_request_xml(doc, body));
    pugi::xml_node root = doc.child("CompleteMultipartUpload");
    if (!root)
        return base::fail(base::errc::malformed_xml, "expected a CompleteMultipartUpload document");
    std::vector<requested_part> parts;
    for (pugi::xml_node p : root.children("Part")) {
        requested_part r;
        auto number = base::parse_u64(base::trim(xml_child_text(p, "PartNumber")));
        if (!number || *number < 1 || *number > max_part_number)
            return base::fail(base::errc::malformed_xml,
                              "PartNumber must be an integer from 1 to 10000");
        r.number = static_cast<std::uint32_t>(*number);
        r.etag = *unquote_etag(xml_child_text(p, "ETag"));
        for (const char* name : {"ChecksumCRC32", "ChecksumCRC32C", "ChecksumCRC64NVME",
                                 "ChecksumSHA1", "ChecksumSHA256"})
            if (p.child(name)) r.checksum = std::string(base::trim(xml_child_text(p, name)));
        parts.push_back(std::move(r));
        if (parts.size() > max_part_number)
            return base::fail(base::errc::malformed_xml, "too many parts");
    }
    if (parts.empty())
        return base::fail(base::errc::malformed_xml, "You must specify at least one part");
    return parts;
}

namespace {

// The final object's checksum from its parts' checksums: COMPOSITE is a checksum of the concatenated part
// checksums with a "-N" suffix; FULL_OBJECT (CRCs only) combines the part CRCs into the CRC of the whole.
base::result<std::string> combine_part_checksums(
    const store::upload_record& u, const std::vector<const store::part_record*>& parts) {
    auto alg = parse_checksum_algorithm(u.object.checksum_algorithm);
    if (!alg) return std::string{};
    if (u.checksum_type == "FULL_OBJECT") {
        std::uint64_t crc = 0;
        for (std::size_t i = 0; i < parts.size(); ++i) {
            auto raw = base::base64_decode(parts[i]->checksum_value);
            if (!raw) return base::fail(base::errc::internal, "stored part checksum unreadable");
            std::uint64_t part_crc = 0;
            for (unsigned char ch : *raw) part_crc = part_crc << 8 | ch;
            std::uint64_t len = parts[i]->size_bytes();
            if (i == 0)
                crc = part_crc;
            else if (*alg == checksum_algorithm::crc32)
                crc = base::crc32_combine(static_cast<std::uint32_t>(crc),
                                          static_cast<std::uint32_t>(part_crc), len);
            else if (*alg == checksum_algorithm::crc32c)
                crc = base::crc32c_combine(static_cast<std::uint32_t>(crc),
                                           static_cast<std::uint32_t>(part_crc), len);
            else
                crc = base::crc64nvme_combine(crc, part_crc, len);
        }
        std::string raw;
        int bytes = *alg == checksum_algorithm::crc64nvme ? 8 : 4;
        for (int shift = (bytes - 1) * 8; shift >= 0; shift -= 8)
            raw.push_back(static_cast<char>((crc >> shift) & 0xff));
        return base::base64_encode(raw);
    }
    running_checksum composite(*alg);
    for (const auto* p : parts) {
        auto raw = base::base64_decode(p->checksum_value);
        if (!raw) return base::fail(base::errc::internal, "stored part checksum unreadable");
        composite.update(base::as_bytes(raw->data(), raw->size()));
    }
    return composite.finish_base64() + "-" + std::to_string(parts.size());
}

// Who started an upload: kept with its metadata under a header of the server's own (never one a
// client's request stores, never copied into the object: build_object drops it); uploads from before
// it was kept, and anonymous ones, name the owner (upload_initiator).

void drop_initiator(store::object_record& r) {
    std::erase_if(r.headers, [](const auto& h) { return h.first == initiator_header; });
}

// Validates the client's part list against the upload and chooses the object's parts and record
// (runs on the owner core); the store assembles the object from them.
base::result<store::upload_completion> build_object(const store::upload_record& u,
                                                    const std::vector<requested_part>& wanted,
                                                    std::uint64_t min_part_bytes) {
    std::vector<const store::part_record*> parts;
    std::uint32_t previous = 0;
    for (const auto& w : wanted) {
        if (w.number <= previous)
            return base::fail(
                base::errc::invalid_part_order,
                "The list of parts was not in ascending order. Parts must be ordered by part number.");
        previous = w.number;
        auto it = u.parts.find(w.number);
        if (it == u.parts.end() || it->second.etag != w.etag)
            return invalid_part(
                "One or more of the specified parts could not be found. The part may not have been uploaded, or the specified entity tag may not match the part's entity tag.");
        if (!w.checksum.empty() && w.checksum != it->second.checksum_value)
            return invalid_part("The checksum of part " + std::to_string(w.number) +
                                " does not match the uploaded part");
        parts.push_back(&it->second);
    }
    store::upload_completion chosen{u.object, {}};
    store::object_record& r = chosen.record;
    drop_initiator(r);
    base::digest etag_md5(base::digest_kind::md5);
    for (std::size_t i = 0; i < parts.size(); ++i) {
        if (i + 1 < parts.size() && parts[i]->size_bytes() < min_part_bytes)
            return base::fail(
                base::errc::entity_too_small,
                "Your proposed upload is smaller than the minimum allowed object size.");
        etag_md5.update(etag_raw(parts[i]->etag));
        chosen.parts.push_back(wanted[i].number);
    }
    r.etag = base::hex_encode(etag_md5.finish()) + "-" + std::to_string(parts.size());
    r.upload_id = u.upload_id;
    r.modified_ms = base::unix_now_ms();
    auto checksum = combine_part_checksums(u, parts);
    if (!checksum) return checksum.as_failure();
    r.checksum_value = *checksum;
    if (r.checksum_value.empty()) r.checksum_algorithm.clear();
    return chosen;
}

// The object's checksum a CompleteMultipartUpload names (x-amz-checksum-<algorithm>), against the one the
// parts make: S3's own form ("<base64>-<parts>" for a COMPOSITE checksum) or the value without its part
// count; a checksum in another algorithm than the upload's is refused.
base::result<void> check_named_checksum(const payload_options& named,
                                        const store::object_record& r) {
    // Only a value names a checksum (x-amz-sdk-checksum-algorithm or a trailer alone name none)
    if (named.checksum == checksum_algorithm::none || !named.checksum_expected) return {};
    auto alg = parse_checksum_algorithm(r.checksum_algorithm);
    if (!alg || *alg != named.checksum)
        return base::fail(base::errc::invalid_request,
                          "The upload was not created with the " +
                              std::string(checksum_name(named.checksum)) + " checksum algorithm");
    const std::string expected = named.checksum_expected.value_or("");
    const std::string& made = r.checksum_value;
    const auto dash = made.rfind('-');
    if (expected == made || (dash != std::string::npos && expected == made.substr(0, dash)))
        return {};
    return base::fail(base::errc::bad_digest,
                      "The " + std::string(checksum_name(named.checksum)) +
                          " you specified did not match the calculated checksum.");
}

// A CompleteMultipartUpload of an upload that is gone: a retry of one that succeeded (its answer lost)
// is answered as it was, from the object it made, while that is the key's current version and the
// retry names the same parts (the same multipart ETag); naming other parts is InvalidPart; anything
// else stays NoSuchUpload.
base::result<store::object_record> completed_before(const store::object_record& current,
                                                    const std::string& upload_id,
                                                    const std::vector<requested_part>& parts,
                                                    const base::error& gone) {
    if (current.upload_id.empty() || current.upload_id != upload_id) return base::failure{gone};
    base::digest etag_md5(base::digest_kind::md5);
    for (const auto& p : parts) etag_md5.update(etag_raw(p.etag));
    if (current.etag != base::hex_encode(etag_md5.finish()) + "-" + std::to_string(parts.size()))
        return invalid_part(
            "One or more of the specified parts could not be found. The part may not have been uploaded, or the specified entity tag may not match the part's entity tag.");
    return current;
}

base::result<std::uint32_t> part_number_of(const s3_request& r) {
    auto n = base::parse_u64(r.param("partNumber"));
    if (!n || *n < 1 || *n > max_part_number)
        return base::fail(base::errc::invalid_argument,
                          "Part number must be an integer between 1 and 10000, inclusive");
    return static_cast<std::uint32_t>(*n);
}
}  // namespace

io::task<void> create_multipart_upload(context& c) {
    const http::request_head& head = c.ex.head();
    store::object_record metadata;
    metadata.acl = c.write_acl;
    if (auto m = collect_metadata(head, c.svc.options().max_metadata_bytes, metadata); !m)
        co_return co_await send_error(c, m.err());
    if (!c.auth.access_key.empty())
        metadata.headers.emplace_back(initiator_header, c.svc.users().is_root(c.auth.access_key)
                                                            ? c.svc.users().root_id()
                                                            : c.auth.access_key);
    std::string checksum_type =
        base::to_lower(head.value_of("x-amz-checksum-type")) == "full_object" ? "FULL_OBJECT" : "";
    std::string_view alg_text = head.value_of("x-amz-checksum-algorithm");
    if (!alg_text.empty()) {
        auto alg = parse_checksum_algorithm(alg_text);
        if (!alg)
            co_return co_await send_error(
                c, {base::errc::invalid_request, "unsupported x-amz-checksum-algorithm"});
        metadata.checksum_algorithm = std::string(checksum_name(*alg));
        bool is_crc = *alg == checksum_algorithm::crc32 || *alg == checksum_algorithm::crc32c ||
                      *alg == checksum_algorithm::crc64nvme;
        if (checksum_type.empty())
            checksum_type = *alg == checksum_algorithm::crc64nvme ? "FULL_OBJECT" : "COMPOSITE";
        if (checksum_type == "FULL_OBJECT" && !is_crc)
            co_return co_await send_error(c,
                                          {base::errc::invalid_request,
                                           "The FULL_OBJECT checksum type needs a CRC algorithm"});
        if (checksum_type == "COMPOSITE" && *alg == checksum_algorithm::crc64nvme)
            co_return co_await send_error(
                c, {base::errc::invalid_request,
                    "CRC64NVME supports only the FULL_OBJECT checksum type"});
    } else if (!checksum_type.empty()) {
        co_return co_await send_error(
            c, {base::errc::invalid_request, "x-amz-checksum-type needs x-amz-checksum-algorithm"});
    }
    auto uploads =
        offered(c.svc.store().uploads_of(c.req.bucket), c.req.bucket, "multipart uploads");
    if (!uploads) co_return co_await send_error(c, uploads.err());
    auto id = co_await (*uploads)->create_upload(c.req.bucket, c.req.key, metadata, checksum_type);
    if (!id) co_return co_await send_error(c, id.err());
    xml_writer x;
    x.open("InitiateMultipartUploadResult", s3_xmlns);
    x.element("Bucket", c.req.bucket).element("Key", c.req.key).element("UploadId", *id);
    x.close("InitiateMultipartUploadResult");
    auto headers = c.common_headers();
    headers.emplace_back("Content-Type", "application/xml");
    if (!metadata.checksum_algorithm.empty()) {
        headers.emplace_back("x-amz-checksum-algorithm", metadata.checksum_algorithm);
        headers.emplace_back("x-amz-checksum-type", checksum_type);
    }
    (void)co_await c.ex.send_all(200, headers, x.take());
}

base::result<store::upload_store*> uploads_in(const context& c) {
    if (store::upload_store* uploads = c.svc.store().uploads_of(c.req.bucket)) return uploads;
    return base::fail(base::errc::no_such_upload,
                      "bucket " + c.req.bucket + " keeps no multipart uploads");
}

io::task<void> upload_part(context& c) {
    auto number = part_number_of(c.req);
    if (!number) co_return co_await send_error(c, number.err());
    std::string upload_id(c.req.param("uploadId"));
    auto uploads = uploads_in(c);
    if (!uploads) co_return co_await send_error(c, uploads.err());
    auto upload = co_await (*uploads)->get_upload(c.req.bucket, c.req.key, upload_id);
    if (!upload) co_return co_await send_error(c, upload.err());
    auto expected = parse_checksum_algorithm(upload->object.checksum_algorithm)
                        .value_or(checksum_algorithm::none);
    auto plan = plan_body(c, expected);
    if (!plan) co_return co_await send_error(c, plan.err());
    payload_source source(c.ex.body(), c.auth, plan->options);
    store::part_finisher finish =
        [&](const store::written_data& written) -> base::result<store::part_record> {
        FJORD_TRY(source.verify());
        if (expected != checksum_algorithm::none && source.checksum() != expected)
            return base::fail(base::errc::invalid_request,
                              "The part's checksum algorithm differs from the upload's");
        store::part_record part;
        part.etag = body_etag(source, written);
        if (source.checksum() != checksum_algorithm::none)
            part.checksum_value = source.checksum_base64();
        part.modified_ms = base::unix_now_ms();
        return part;
    };
    store::part_request request{c.req.bucket, c.req.key,        upload_id,
                                *number,      plan->size_bytes, max_part_bytes};
    auto part = co_await (*uploads)->upload_part(request, source, finish);
    if (!part) co_return co_await send_error(c, part.err());
    auto headers = c.common_headers();
    headers.emplace_back("ETag", "\"" + part->etag + "\"");
    if (source.checksum() != checksum_algorithm::none)
        headers.emplace_back(checksum_header_name(source.checksum()), part->checksum_value);
    (void)co_await c.ex.send_all(200, headers, "");
}

io::task<void> complete_multipart_upload(context& c) {
    std::string upload_id(c.req.param("uploadId"));
    auto conditions = write_conditions_of(c.ex.head());
    if (!conditions) co_return co_await send_error(c, conditions.err());
    // Its x-amz-checksum-* header names the object's checksum, not its body's
    payload_options named;
    if (auto given = checksum_options(c.ex.head(), named); !given)
        co_return co_await send_error(c, given.err());
    auto body = co_await read_verified_body(c, max_complete_body_bytes, false);
    if (!body) co_return co_await send_error(c, body.err());
    auto wanted = parse_complete_body(*body);
    if (!wanted) co_return co_await send_error(c, wanted.err());
    std::vector<requested_part> parts = std::move(*wanted);
    store::upload_finalizer finalize =
        [parts, named, min = c.svc.options().min_part_bytes](
            const store::upload_record& u) -> base::result<store::upload_completion> {
        auto built = build_object(u, parts, min);
        if (built) FJORD_TRY(check_named_checksum(named, built->record));
        return built;
    };
    auto uploads = uploads_in(c);
    if (!uploads) co_return co_await send_error(c, uploads.err());
    auto done = co_await (*uploads)->complete_upload(c.req.bucket, c.req.key, upload_id, finalize,
                                                     *conditions);
    if (!done && done.code() == base::errc::no_such_upload) {
        // SDKs retry a completion whose answer was lost: it may have succeeded
        auto current = co_await c.svc.store().head(c.req.bucket, c.req.key);
        if (current)
            done = completed_before(*current, upload_id, parts, done.err());
        else if (current.code() != base::errc::no_such_key)
            done = current.as_failure();  // the key cannot be read now (a cluster's 503): unknown
    }
    if (!done) co_return co_await send_error(c, done.err());
    const store::object_record& r = *done;
    xml_writer x;
    x.open("CompleteMultipartUploadResult", s3_xmlns);
    std::string host(c.ex.head().value_of("host"));
    x.element("Location", (c.ex.secure() ? "https://" : "http://") + host + "/" + c.req.bucket +
                              "/" + base::uri_encode(c.req.key, true));
    x.element("Bucket", c.req.bucket)
        .element("Key", c.req.key)
        .element("ETag", "\"" + r.etag + "\"");
    if (auto alg = parse_checksum_algorithm(r.checksum_algorithm)) {
        x.element("Checksum" + std::string(checksum_name(*alg)), r.checksum_value);
        x.element("ChecksumType",
                  r.checksum_value.find('-') == std::string::npos ? "FULL_OBJECT" : "COMPOSITE");
    }
    x.close("CompleteMultipartUploadResult");
    auto headers = c.common_headers();
    headers.emplace_back("Content-Type", "application/xml");
    add_version_header(headers, r, false);
    (void)co_await c.ex.send_all(200, headers, x.take());
}

io::task<void> abort_multipart_upload(context& c) {
    auto uploads = uploads_in(c);
    if (!uploads) co_return co_await send_error(c, uploads.err());
    auto aborted = co_await (*uploads)->abort_upload(c.req.bucket, c.req.key,
                                                     std::string(c.req.param("uploadId")));
    if (!aborted) co_return co_await send_error(c, aborted.err());
    (void)co_await c.ex.send_all(204, c.common_headers(), "");
}

}  // namespace fjord::s3
