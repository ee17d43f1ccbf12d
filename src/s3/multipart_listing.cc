// The listings of multipart uploads: ListParts and ListMultipartUploads, with each upload's owner and
// initiator.

#include "base/clock.h"
#include "base/encoding.h"
#include "s3/service.h"
#include "s3/operations.h"
#include "s3/xml.h"

namespace fjord::s3 {

namespace {

// Who will own an upload's object: the owner its ACL names (the writer, in a bucket with ACLs
// enabled), else the bucket's owner (BucketOwnerEnforced).
std::string upload_owner(const store::upload_record& u, const std::string& bucket_owner) {
    if (u.object.acl.empty()) return bucket_owner;
    auto acl = decode_acl(u.object.acl);
    return acl && !acl->owner.empty() ? acl->owner : bucket_owner;
}

std::string upload_initiator(const store::upload_record& u, const std::string& bucket_owner) {
    for (const auto& [name, value] : u.object.headers)
        if (name == initiator_header) return value;
    return upload_owner(u, bucket_owner);
}

}  // namespace

io::task<void> list_parts(context& c) {
    auto uploads = uploads_in(c);
    if (!uploads) co_return co_await send_error(c, uploads.err());
    auto upload = co_await (*uploads)->get_upload(c.req.bucket, c.req.key,
                                                  std::string(c.req.param("uploadId")));
    if (!upload) co_return co_await send_error(c, upload.err());
    std::uint64_t max_parts = 1000, marker = 0;
    if (c.req.has("max-parts")) {
        auto n = base::parse_u64(c.req.param("max-parts"));
        if (!n)
            co_return co_await send_error(
                c, {base::errc::invalid_argument, "max-parts must be an integer"});
        max_parts = std::min<std::uint64_t>(*n, 1000);
    }
    if (c.req.has("part-number-marker")) {
        auto n = base::parse_u64(c.req.param("part-number-marker"));
        if (!n)
            co_return co_await send_error(
                c, {base::errc::invalid_argument, "part-number-marker must be an integer"});
        marker = *n;
    }
    xml_writer x;
    x.open("ListPartsResult", s3_xmlns);
    x.element("Bucket", c.req.bucket)
        .element("Key", c.req.key)
        .element("UploadId", upload->upload_id);
    x.element("PartNumberMarker", marker);
    const std::string owner = upload_owner(*upload, listing_owner(c));
    const std::string initiator = upload_initiator(*upload, listing_owner(c));
    x.open("Initiator")
        .element("ID", initiator)
        .element("DisplayName", initiator)
        .close("Initiator");
    x.open("Owner").element("ID", owner).element("DisplayName", owner).close("Owner");
    x.element("StorageClass", "STANDARD");
    if (!upload->object.checksum_algorithm.empty()) {
        x.element("ChecksumAlgorithm", upload->object.checksum_algorithm);
        x.element("ChecksumType", upload->checksum_type);
    }
    std::uint64_t listed = 0, last = marker;
    bool truncated = false;
    for (auto it = upload->parts.upper_bound(
             static_cast<std::uint32_t>(std::min<std::uint64_t>(marker, max_part_number)));
         it != upload->parts.end(); ++it) {
        if (listed == max_parts) {
            truncated = true;
            break;
        }
        const store::part_record& p = it->second;
        x.open("Part").element("PartNumber", p.number);
        x.element("LastModified", base::format_iso8601_ms(p.modified_ms));
        x.element("ETag", "\"" + p.etag + "\"").element("Size", p.size_bytes());
        if (auto alg = parse_checksum_algorithm(upload->object.checksum_algorithm))
            x.element("Checksum" + std::string(checksum_name(*alg)), p.checksum_value);
        x.close("Part");
        last = p.number;
        ++listed;
    }
    x.element("NextPartNumberMarker", last)
        .element("MaxParts", max_parts)
        .element_bool("IsTruncated", truncated);
    x.close("ListPartsResult");
    co_await send_xml(c, 200, x.take());
}

namespace {

// One page of ListMultipartUploads, as the request asked for it.
struct uploads_page {
    std::string prefix, delimiter, key_marker, id_marker;
    std::uint64_t max_uploads = 1000;
    bool truncated = false;
    bool url = false;  // keys URL-encoded (asked for, or a key XML 1.0 cannot carry)
};

void upload_xml(xml_writer& x, const std::string& key, const store::upload_record& u,
                const std::string& bucket_owner) {
    const std::string owner = upload_owner(u, bucket_owner);
    const std::string initiator = upload_initiator(u, bucket_owner);
    x.open("Upload").element("Key", key).element("UploadId", u.upload_id);
    x.open("Initiator")
        .element("ID", initiator)
        .element("DisplayName", initiator)
        .close("Initiator");
    x.open("Owner").element("ID", owner).element("DisplayName", owner).close("Owner");
    x.element("StorageClass", "STANDARD")
        .element("Initiated", base::format_iso8601_ms(u.initiated_ms));
    if (!u.object.checksum_algorithm.empty())
        x.element("ChecksumAlgorithm", u.object.checksum_algorithm);
    x.close("Upload");
}

std::string uploads_result_xml(const std::string& bucket, const uploads_page& page,
                               const std::vector<store::upload_record>& uploads,
                               const std::string& bucket_owner) {
    auto enc = [&page](const std::string& s) { return page.url ? base::uri_encode(s, true) : s; };
    xml_writer x;
    x.open("ListMultipartUploadsResult", s3_xmlns);
    x.element("Bucket", bucket).element("KeyMarker", enc(page.key_marker));
    x.element("UploadIdMarker", page.id_marker);
    if (page.truncated && !uploads.empty()) {
        x.element("NextKeyMarker", enc(uploads.back().key))
            .element("NextUploadIdMarker", uploads.back().upload_id);
    }
    x.element("Prefix", enc(page.prefix));
    if (!page.delimiter.empty()) x.element("Delimiter", enc(page.delimiter));
    if (page.url) x.element("EncodingType", "url");
    x.element("MaxUploads", page.max_uploads).element_bool("IsTruncated", page.truncated);
    std::vector<std::string> common;
    for (const auto& u : uploads) {
        if (!page.delimiter.empty()) {
            auto pos = u.key.find(page.delimiter, page.prefix.size());
            if (pos != std::string::npos) {
                std::string cp = u.key.substr(0, pos + page.delimiter.size());
                if (common.empty() || common.back() != cp) common.push_back(cp);
                continue;
            }
        }
        upload_xml(x, enc(u.key), u, bucket_owner);
    }
    for (const auto& cp : common)
        x.open("CommonPrefixes").element("Prefix", enc(cp)).close("CommonPrefixes");
    x.close("ListMultipartUploadsResult");
    return x.take();
}

}  // namespace

io::task<void> list_multipart_uploads(context& c) {
    const s3_request& r = c.req;
    uploads_page page;
    if (r.has("max-uploads")) {
        auto n = base::parse_u64(r.param("max-uploads"));
        if (!n)
            co_return co_await send_error(
                c, {base::errc::invalid_argument, "max-uploads must be an integer"});
        page.max_uploads = std::min<std::uint64_t>(*n, 1000);
    }
    std::string_view encoding = r.param("encoding-type");
    if (!encoding.empty() && encoding != "url")
        co_return co_await send_error(
            c, {base::errc::invalid_argument, "Invalid Encoding Method specified in Request"});
    page.prefix = r.param("prefix");
    page.delimiter = r.param("delimiter");
    page.key_marker = r.param("key-marker");
    page.id_marker = r.param("upload-id-marker");
    // A key marker alone skips every upload of that key.
    std::string after_id = page.id_marker;
    if (after_id.empty() && !page.key_marker.empty()) after_id = std::string(64, '\xff');
    // A bucket whose store keeps no uploads (a KV bucket) has none in progress.
    base::result<std::vector<store::upload_record>> uploads = std::vector<store::upload_record>{};
    if (store::upload_store* store = c.svc.store().uploads_of(r.bucket))
        uploads = co_await store->list_uploads(r.bucket, page.prefix, page.key_marker, after_id,
                                               static_cast<std::uint32_t>(page.max_uploads));
    if (!uploads) co_return co_await send_error(c, uploads.err());
    page.truncated = uploads->size() > page.max_uploads;
    if (page.truncated) uploads->resize(page.max_uploads);
    page.url = encoding == "url";
    // As in ListObjects: a key XML 1.0 cannot carry turns the page into a URL-encoded one.
    if (!page.url) {
        bool representable = xml_representable(page.prefix) && xml_representable(page.delimiter) &&
                             xml_representable(page.key_marker);
        for (const auto& u : *uploads) representable = representable && xml_representable(u.key);
        page.url = !representable;
    }
    co_await send_xml(c, 200, uploads_result_xml(r.bucket, page, *uploads, listing_owner(c)));
}

}  // namespace fjord::s3
