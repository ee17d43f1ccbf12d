// Listings: ListObjects (v1 and v2) and ListObjectVersions, page by page from the store.
#include "s3/service.h"
#include "s3/operations.h"

#include "base/clock.h"
#include "base/encoding.h"
#include "s3/xml.h"

namespace fjord::s3 {

namespace {

// What every listing request shares: bucket, prefix, delimiter, max-keys and encoding-type.
base::result<store::list_request> parse_listing_common(const s3_request& r) {
    store::list_request lr;
    lr.bucket = r.bucket;
    lr.prefix = std::string(r.param("prefix"));
    lr.delimiter = std::string(r.param("delimiter"));
    lr.max_keys = 1000;
    if (r.has("max-keys")) {
        auto n = base::parse_u64(r.param("max-keys"));
        if (!n)
            return base::fail(base::errc::invalid_argument,
                              "max-keys must be a non-negative integer");
        lr.max_keys = static_cast<std::uint32_t>(std::min<std::uint64_t>(*n, 1000));
    }
    std::string_view encoding = r.param("encoding-type");
    if (!encoding.empty() && encoding != "url")
        return base::fail(base::errc::invalid_argument,
                          "Invalid Encoding Method specified in Request");
    return lr;
}

// The listing a ListObjects (v1) or ListObjectsV2 request asks for, or why it is malformed.
base::result<store::list_request> parse_list_request(const s3_request& r, bool v2) {
    auto common = parse_listing_common(r);
    if (!common) return common.as_failure();
    store::list_request lr = std::move(*common);
    if (!v2) {
        lr.start_after = std::string(r.param("marker"));
    } else if (!r.param("continuation-token").empty()) {
        // An empty token is no token (S3 lists from the start and echoes it back).
        auto decoded = base::base64_decode(r.param("continuation-token"));
        if (!decoded || decoded->empty())
            return base::fail(base::errc::invalid_argument,
                              "The continuation token provided is incorrect");
        lr.start_after = *decoded;
    } else {
        lr.start_after = std::string(r.param("start-after"));
    }
    return lr;
}

// Whether the page must be sent URL-encoded: when asked for, and also when a key XML 1.0 cannot carry (a
// C0 control character) would make the page unreadable or lose the key; such a page says it is encoded,
// as if encoding-type=url had been asked for.
bool list_url_encoded(const s3_request& r, const store::list_request& lr,
                      const store::list_page& page) {
    if (r.param("encoding-type") == "url") return true;
    bool representable = xml_representable(lr.prefix) && xml_representable(lr.delimiter) &&
                         xml_representable(lr.start_after) &&
                         xml_representable(r.param("start-after"));
    for (const auto& e : page.entries) representable = representable && xml_representable(e.name);
    return !representable;
}

// The ListBucketResult document for a page; `owner` names the requester, shown as each object's owner.
std::string list_result_xml(const s3_request& r, bool v2, const store::list_request& lr,
                            const store::list_page& page, std::string_view owner) {
    const bool url = list_url_encoded(r, lr, page);
    auto enc = [url](const std::string& s) { return url ? base::uri_encode(s, true) : s; };
    xml_writer x;
    x.open("ListBucketResult", s3_xmlns);
    x.element("Name", r.bucket).element("Prefix", enc(lr.prefix));
    if (v2) {
        if (r.has("continuation-token"))
            x.element("ContinuationToken", r.param("continuation-token"));
        if (r.has("start-after")) x.element("StartAfter", enc(std::string(r.param("start-after"))));
    } else {
        x.element("Marker", enc(lr.start_after));
    }
    if (!lr.delimiter.empty()) x.element("Delimiter", enc(lr.delimiter));
    if (url) x.element("EncodingType", "url");
    x.element("MaxKeys", lr.max_keys);
    if (v2) x.element("KeyCount", page.entries.size());
    x.element_bool("IsTruncated", page.truncated);
    if (page.truncated && !page.entries.empty()) {
        const std::string& last = page.entries.back().name;
        if (v2)
            x.element("NextContinuationToken", base::base64_encode(last));
        else
            x.element("NextMarker", enc(last));
    }
    for (const auto& e : page.entries) {
        if (e.is_prefix) continue;
        x.open("Contents");
        x.element("Key", enc(e.name));
        x.element("LastModified", base::format_iso8601_ms(e.modified_ms));
        x.element("ETag", "\"" + e.etag + "\"");
        x.element("Size", e.size_bytes);
        if (!v2 || r.param("fetch-owner") == "true")
            x.open("Owner").element("ID", owner).element("DisplayName", owner).close("Owner");
        x.element("StorageClass", "STANDARD");
        x.close("Contents");
    }
    for (const auto& e : page.entries)
        if (e.is_prefix)
            x.open("CommonPrefixes").element("Prefix", enc(e.name)).close("CommonPrefixes");
    x.close("ListBucketResult");
    return x.take();
}

// The listing a ListObjectVersions request asks for: key-marker, and version-id-marker within it.
base::result<store::list_request> parse_versions_request(const s3_request& r, bool versioned) {
    auto common = parse_listing_common(r);
    if (!common) return common.as_failure();
    store::list_request lr = std::move(*common);
    lr.start_after = std::string(r.param("key-marker"));
    if (r.param("version-id-marker").empty()) return lr;  // absent or empty: none
    std::string_view version_marker = r.param("version-id-marker");
    if (lr.start_after.empty())
        return base::fail(base::errc::invalid_argument,
                          "A version-id marker cannot be specified without a key marker.");
    auto marker = parse_version_id(version_marker, versioned);
    if (!marker) return marker.as_failure();
    // In a bucket without versioning every key has one version: a marker there resumes after the key
    if (versioned) lr.version_id_marker = marker->value_or("");
    return lr;
}

// One <Version> or <DeleteMarker> of a ListVersionsResult.
void version_entry_xml(xml_writer& x, const store::list_entry& e, const std::string& name,
                       std::string_view owner) {
    const char* element = e.delete_marker ? "DeleteMarker" : "Version";
    x.open(element);
    x.element("Key", name).element("VersionId", e.version_id.empty() ? "null" : e.version_id);
    x.element_bool("IsLatest", e.is_latest);
    x.element("LastModified", base::format_iso8601_ms(e.modified_ms));
    if (!e.delete_marker) x.element("ETag", "\"" + e.etag + "\"").element("Size", e.size_bytes);
    x.open("Owner").element("ID", owner).element("DisplayName", owner).close("Owner");
    if (!e.delete_marker) x.element("StorageClass", "STANDARD");
    x.close(element);
}

// The ListVersionsResult document for a page.
std::string versions_result_xml(const s3_request& r, const store::list_request& lr,
                                const store::list_page& page, std::string_view owner) {
    const bool url = list_url_encoded(r, lr, page);
    auto enc = [url](const std::string& s) { return url ? base::uri_encode(s, true) : s; };
    xml_writer x;
    x.open("ListVersionsResult", s3_xmlns);
    x.element("Name", r.bucket).element("Prefix", enc(lr.prefix));
    x.element("KeyMarker", enc(lr.start_after));
    x.element("VersionIdMarker", r.param("version-id-marker"));
    if (page.truncated && !page.entries.empty()) {
        const store::list_entry& last = page.entries.back();
        x.element("NextKeyMarker", enc(last.name));
        if (!last.is_prefix)
            x.element("NextVersionIdMarker", last.version_id.empty() ? "null" : last.version_id);
    }
    x.element("MaxKeys", lr.max_keys);
    if (!lr.delimiter.empty()) x.element("Delimiter", enc(lr.delimiter));
    if (url) x.element("EncodingType", "url");
    x.element_bool("IsTruncated", page.truncated);
    for (const auto& e : page.entries)
        if (!e.is_prefix) version_entry_xml(x, e, enc(e.name), owner);
    for (const auto& e : page.entries)
        if (e.is_prefix)
            x.open("CommonPrefixes").element("Prefix", enc(e.name)).close("CommonPrefixes");
    x.close("ListVersionsResult");
    return x.take();
}

}  // namespace

// One page of a listing, or an empty one (max-keys=0) for a bucket that exists.
io::task<base::result<store::list_page>> list_page_of(const context& c,
                                                      const store::list_request& lr) {
    if (lr.max_keys > 0) co_return co_await c.svc.store().list(lr);
    if (!c.svc.store().bucket_exists(lr.bucket))
        co_return base::fail(base::errc::no_such_bucket, "no such bucket");
    co_return store::list_page{};
}

io::task<void> list_object_versions(context& c) {
    const bool versioned = has_versioning(c.svc.store(), c.req.bucket);
    auto lr = parse_versions_request(c.req, versioned);
    if (!lr) co_return co_await send_error(c, lr.err());
    // A bucket that never had versioning: each object is its own latest, null version
    base::result<store::list_page> page = base::fail(base::errc::internal);
    if (versioned && lr->max_keys > 0) {
        auto versions = offered(c.svc.store().versions_of(c.req.bucket), c.req.bucket, "versions");
        if (!versions) co_return co_await send_error(c, versions.err());
        page = co_await (*versions)->list_versions(*lr);
    } else
        page = co_await list_page_of(c, *lr);
    if (!page) co_return co_await send_error(c, page.err());
    co_await send_xml(c, 200, versions_result_xml(c.req, *lr, *page, listing_owner(c)));
}

io::task<void> list_objects(context& c, bool v2) {
    auto lr = parse_list_request(c.req, v2);
    if (!lr) co_return co_await send_error(c, lr.err());
    auto page = co_await list_page_of(c, *lr);
    if (!page) co_return co_await send_error(c, page.err());
    co_await send_xml(c, 200, list_result_xml(c.req, v2, *lr, *page, listing_owner(c)));
}

// Listings name the bucket's owner as the objects' owner (who owns every object of a
// BucketOwnerEnforced bucket), not the caller, who may be another user or anonymous.
std::string listing_owner(const context& c) {
    auto bucket = c.svc.store().find_bucket(c.req.bucket);
    return bucket ? owner_id(c, *bucket) : c.svc.users().root_id();
}

}  // namespace fjord::s3
