// Versioning: Get/PutBucketVersioning, the versionId a request names, and x-amz-version-id. The store
// keeps the versions (object_store.h, "Versioning"); ListObjectVersions is with the other listings.

#include <pugixml.hpp>

#include <algorithm>

#include "s3/service.h"
#include "s3/operations.h"
#include "s3/xml.h"

namespace fjord::s3 {

namespace {

// Ids the store makes: 32 lower-case hex digits.
bool well_formed_version_id(std::string_view id) {
    return id.size() == 32 && std::all_of(id.begin(), id.end(), [](char ch) {
               return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f');
           });
}

base::failure invalid_version() {
    return base::fail(base::errc::invalid_argument, "Invalid version id specified");
}
}  // namespace

bool has_versioning(const store::object_store& store, const std::string& bucket) {
    return store.bucket_has_attribute(bucket, std::string(store::versioning_attribute));
}

base::result<std::optional<std::string>> parse_version_id(std::string_view text, bool versioned) {
    if (text.empty())
        return base::fail(base::errc::invalid_argument, "Version id cannot be the empty string");
    if (text == "null") return versioned ? std::optional<std::string>("") : std::nullopt;
    if (!versioned || !well_formed_version_id(text)) return invalid_version();
    return std::optional<std::string>(std::string(text));
}

base::result<std::optional<std::string>> requested_version(const store::object_store& store,
                                                           const s3_request& r) {
    // A missing bucket is the operation's to answer (NoSuchBucket), whatever the id
    if (!store.bucket_exists(r.bucket)) return std::optional<std::string>();
    return parse_version_id(r.param("versionId"), has_versioning(store, r.bucket));
}

void add_version_header(http::header_list& h, const store::object_record& r, bool named) {
    if (!r.version_id.empty())
        h.emplace_back("x-amz-version-id", r.version_id);
    else if (named)
        h.emplace_back("x-amz-version-id", "null");
}

void answer_version(http::header_list& h, const store::object_record& r, const context& c) {
    add_version_header(
        h, r, r.version_id.empty() && (c.version || has_versioning(c.svc.store(), c.req.bucket)));
}

// A GET or HEAD that found a delete marker says so: by its id (405), or as the key's current version
// (404; one listing of the key's newest version tells which marker, in a bucket with versioning only).
io::task<http::header_list> delete_marker_headers(const context& c, base::errc code) {
    http::header_list h;
    std::optional<std::string> marker;
    if (code == base::errc::method_not_allowed && c.version) {
        marker = *c.version;
        h.emplace_back("Allow", "DELETE");
    } else if (code == base::errc::no_such_key && !c.version &&
               has_versioning(c.svc.store(), c.req.bucket)) {
        store::list_request newest;
        newest.bucket = c.req.bucket;
        newest.prefix = c.req.key;
        newest.max_keys = 1;
        base::result<store::list_page> page = store::list_page{};
        if (store::version_store* versions = c.svc.store().versions_of(c.req.bucket))
            page = co_await versions->list_versions(newest);
        if (page && !page->entries.empty() && page->entries[0].name == c.req.key &&
            page->entries[0].delete_marker)
            marker = page->entries[0].version_id;
    }
    if (!marker) co_return h;
    h.emplace_back("x-amz-delete-marker", "true");
    h.emplace_back("x-amz-version-id", marker->empty() ? "null" : *marker);
    co_return h;
}

base::error copy_source_error(const base::error& err) {
    if (err.code != base::errc::method_not_allowed) return err;
    return {
        base::errc::invalid_request,
        "The source of a copy request may not specifically refer to a delete marker by version id."};
}

io::task<base::result<store::object_record>> head_named(const context& c) {
    if (c.version) {
        auto versions = offered(c.svc.store().versions_of(c.req.bucket), c.req.bucket, "versions");
        if (!versions) co_return versions.as_failure();
        co_return co_await (*versions)->head_version(c.req.bucket, c.req.key, *c.version);
    }
    co_return co_await c.svc.store().head(c.req.bucket, c.req.key);
}

io::task<base::result<store::object_record>> get_named(const context& c, store::read_planner plan,
                                                       store::byte_sink& sink) {
    if (c.version) {
        auto versions = offered(c.svc.store().versions_of(c.req.bucket), c.req.bucket, "versions");
        if (!versions) co_return versions.as_failure();
        co_return co_await (*versions)->get_version(c.req.bucket, c.req.key, *c.version,
                                                    std::move(plan), sink);
    }
    co_return co_await c.svc.store().get(c.req.bucket, c.req.key, std::move(plan), sink);
}

io::task<base::result<store::object_record>> update_named(const context& c,
                                                          store::record_editor edit) {
    if (c.version) {
        auto versions = offered(c.svc.store().versions_of(c.req.bucket), c.req.bucket, "versions");
        if (!versions) co_return versions.as_failure();
        co_return co_await (*versions)->update_version(c.req.bucket, c.req.key, *c.version,
                                                       std::move(edit));
    }
    auto updates =
        offered(c.svc.store().updates_of(c.req.bucket), c.req.bucket, "changes of a stored object");
    if (!updates) co_return updates.as_failure();
    co_return co_await (*updates)->update(c.req.bucket, c.req.key, std::move(edit), {});
}

// A bucket that never had versioning answers with an empty document, as S3 does.
io::task<void> get_bucket_versioning(context& c) {
    auto info = c.svc.store().find_bucket(c.req.bucket);
    if (!info) co_return co_await send_error(c, {base::errc::no_such_bucket, "no such bucket"});
    xml_writer x;
    x.open("VersioningConfiguration", s3_xmlns);
    if (auto it = info->attributes.find(store::versioning_attribute); it != info->attributes.end())
        x.element("Status", it->second);
    x.close("VersioningConfiguration");
    co_await send_xml(c, 200, x.take());
}

// Enabled or Suspended; once enabled, a bucket never returns to having no versioning (as in S3).
io::task<void> put_bucket_versioning(context& c) {
    auto body = co_await read_verified_body(c, 64 * 1024);
    if (!body) co_return co_await send_error(c, body.err());
    pugi::xml_document doc;
    if (auto parsed = load_request_xml(doc, *body); !parsed)
        co_return co_await send_error(c, parsed.err());
    pugi::xml_node root = doc.child("VersioningConfiguration");
    std::string status = xml_child_text(root, "Status");
    std::string mfa = xml_child_text(root, "MfaDelete");
    if (!root || (status != "Enabled" && status != "Suspended" && !status.empty()) ||
        (mfa != "Enabled" && mfa != "Disabled" && !mfa.empty()))
        co_return co_await send_error(
            c, {base::errc::malformed_xml,
                "The XML you provided was not well-formed or did not validate against our "
                "published schema"});
    if (mfa == "Enabled")
        co_return co_await send_error(
            c, {base::errc::not_implemented, "Fjord does not implement MFA delete"});
    if (c.svc.store().blocks_of(c.req.bucket))
        co_return co_await send_error(
            c, {base::errc::invalid_request, "KV buckets hold immutable blocks without versions"});
    if (!c.svc.store().bucket_exists(c.req.bucket))
        co_return co_await send_error(c, {base::errc::no_such_bucket, "no such bucket"});
    if (!status.empty()) {
        if (!c.svc.store().versions_of(c.req.bucket))
            co_return co_await send_error(
                c, {base::errc::not_implemented,
                    "bucket " + c.req.bucket + " keeps no versions in this store"});
        auto set =
            co_await set_bucket_attribute(c, c.req.bucket, store::versioning_attribute, status);
        if (!set) co_return co_await send_error(c, set.err());
    }
    (void)co_await c.ex.send_all(200, c.common_headers(), "");
}

}  // namespace fjord::s3
