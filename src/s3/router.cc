#include "s3/router.h"

#include <algorithm>

#include "base/encoding.h"
#include "s3/service_internal.h"

namespace fjord::s3 {

namespace {
std::string_view host_without_port(std::string_view host) {
    if (!host.empty() && host.front() == '[') {
        auto close = host.find(']');
        return close == std::string_view::npos ? host : host.substr(0, close + 1);
    }
    auto colon = host.rfind(':');
    return colon == std::string_view::npos ? host : host.substr(0, colon);
}

}  // namespace

base::result<s3_request> route(const http::request_head& head,
                               const std::vector<std::string>& domains) {
    s3_request r;
    std::string_view path = head.path;
    std::string_view host = host_without_port(head.value_of("host"));
    std::string host_bucket;
    for (const auto& domain : domains) {
        if (host.size() > domain.size() + 1 &&
            base::iequals(host.substr(host.size() - domain.size()), domain) &&
            host[host.size() - domain.size() - 1] == '.') {
            host_bucket = base::to_lower(host.substr(0, host.size() - domain.size() - 1));
            break;
        }
    }
    if (path.empty() || path.front() != '/')
        return base::fail(base::errc::invalid_uri, "bad request path");
    std::string_view rest = path.substr(1);
    if (host_bucket.empty()) {
        auto slash = rest.find('/');
        auto bucket = base::uri_decode(rest.substr(0, slash), false);
        if (!bucket)
            return base::fail(base::errc::invalid_uri, "bad percent-encoding in the bucket name");
        r.bucket = std::move(*bucket);
        rest = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);
    } else {
        r.bucket = std::move(host_bucket);
    }
    auto key = base::uri_decode(rest, false);
    if (!key) return base::fail(base::errc::invalid_uri, "bad percent-encoding in the key");
    r.key = std::move(*key);
    // Keys and bucket names are UTF-8, as S3's are: bytes that are not (%ff, the overlong %c0%ae, the
    // surrogate %ed%a0%80) could be stored but never listed in a well-formed document.
    if (!base::is_valid_utf8(r.key) || !base::is_valid_utf8(r.bucket))
        return base::fail(base::errc::invalid_uri,
                          "Couldn't parse the specified URI: the key is not UTF-8.");
    if (r.key.size() > 1024) return base::fail(base::errc::key_too_long, "Your key is too long");
    std::string_view query = head.query;
    while (!query.empty()) {
        auto amp = query.find('&');
        std::string_view part = query.substr(0, amp);
        query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
        if (part.empty()) continue;
        auto eq = part.find('=');
        auto name = base::uri_decode(part.substr(0, eq), true);
        auto value = base::uri_decode(
            eq == std::string_view::npos ? std::string_view{} : part.substr(eq + 1), true);
        if (!name || !value)
            return base::fail(base::errc::invalid_uri, "bad percent-encoding in the query");
        // Parameters come back in listings (prefix, markers, delimiter): UTF-8 only, as keys. The
        // response-* overrides become header values instead, which may hold other bytes.
        if (!base::is_valid_utf8(*name) ||
            (!name->starts_with("response-") && !base::is_valid_utf8(*value)))
            return base::fail(base::errc::invalid_uri,
                              "Couldn't parse the specified URI: a query parameter is not UTF-8.");
        r.query.emplace_back(std::move(*name), std::move(*value));
    }
    r.resource = "/" + r.bucket + (r.key.empty() ? "" : "/" + r.key);
    return r;
}

bool is_health_check(const http::request_head& head) {
    return (head.verb == http::method::get || head.verb == http::method::head) &&
           (head.path == "/health/live" || head.path == "/health/ready");
}

// GET /metrics, path-style and without a query. It shadows only a bare ListObjects (v1, no parameters)
// of a bucket named "metrics": SDKs list with parameters (list-type=2, encoding-type=url), and a
// virtual-hosted request for the key "metrics" routes to its own bucket and key.
bool is_metrics_request(const http::request_head& head, const s3_request& r) {
    return head.verb == http::method::get && head.path == "/metrics" && head.query.empty() &&
           r.bucket == "metrics" && r.key.empty();
}

bool s3_request::has(std::string_view name) const {
    return std::any_of(query.begin(), query.end(), [&](const auto& p) { return p.first == name; });
}

std::string_view s3_request::param(std::string_view name) const {
    for (const auto& [k, v] : query)
        if (k == name) return v;
    return {};
}

namespace {

using http::method;
using op_class = base::operation_class;
using context = service::context;

bool copies(const http::request_head& head, const s3_request&) {
    return !head.value_of("x-amz-copy-source").empty();
}
bool lists_v2(const http::request_head&, const s3_request& r) {
    return r.param("list-type") == "2";
}
bool names_location(const http::request_head&, const s3_request& r) { return r.has("location"); }
bool without_query(const http::request_head&, const s3_request& r) { return r.query.empty(); }

// Subresources S3 has and Fjord does not answer (for the methods no row names): NotImplemented.
constexpr std::string_view bucket_unsupported[] = {"uploads",
                                                   "delete",
                                                   "versioning",
                                                   "acl",
                                                   "policy",
                                                   "lifecycle",
                                                   "cors",
                                                   "tagging",
                                                   "encryption",
                                                   "object-lock",
                                                   "replication",
                                                   "website",
                                                   "logging",
                                                   "notification",
                                                   "versions",
                                                   "accelerate",
                                                   "requestPayment",
                                                   "ownershipControls",
                                                   "publicAccessBlock",
                                                   "analytics",
                                                   "inventory",
                                                   "metrics",
                                                   "intelligent-tiering",
                                                   "policyStatus",
                                                   "session",
                                                   "metadataTable"};
constexpr std::string_view object_unsupported[] = {
    "uploads",    "uploadId", "tagging", "acl",    "retention",   "legal-hold",
    "attributes", "restore",  "torrent", "select", "renameObject"};

}  // namespace

// The operations, tried in this order (see operation::subresource). Classes follow
// base::operation_class's comments: reads of a bucket's configuration count as list, its changes as
// bucket.
const operation operation_table::all[] = {
    // The service
    {.on = target::service,
     .verb = method::get,
     .subresource = "fjord-admin-users",
     .name = "FjordAdminUsers",
     .counted_as = op_class::list,
     .access = access_kind::admin,
     .run = [](service& s, context& c) { return s.admin_users(c); }},
    {.on = target::service,
     .verb = method::get,
     .subresource = "fjord-admin-user",
     .name = "FjordAdminUsers",
     .counted_as = op_class::list,
     .access = access_kind::admin,
     .run = [](service& s, context& c) { return s.admin_users(c); }},
    {.on = target::service,
     .subresource = "fjord-admin-users",
     .name = "FjordAdminUsers",
     .access = access_kind::admin,
     .run = [](service& s, context& c) { return s.admin_users(c); }},
    {.on = target::service,
     .subresource = "fjord-admin-user",
     .name = "FjordAdminUsers",
     .access = access_kind::admin,
     .run = [](service& s, context& c) { return s.admin_users(c); }},
    {.on = target::service,
     .verb = method::get,
     .name = "ListBuckets",
     .counted_as = op_class::list,
     .run = [](service& s, context& c) { return s.list_buckets(c); }},
    // Buckets: subresources
    {.on = target::bucket,
     .verb = method::get,
     .subresource = "uploads",
     .name = "ListMultipartUploads",
     .counted_as = op_class::list,
     .run = [](service& s, context& c) { return s.list_multipart_uploads(c); }},
    {.on = target::bucket,
     .verb = method::post,
     .subresource = "delete",
     .name = "DeleteObjects",
     .counted_as = op_class::remove,
     .run = [](service& s, context& c) { return s.delete_objects(c); }},
    {.on = target::bucket,
     .verb = method::post,
     .subresource = "fjord-batch",
     .name = "FjordKvBatch",
     .run = [](service& s, context& c) { return s.kv_batch(c); }},
    {.on = target::bucket,
     .verb = method::get,
     .subresource = "versions",
     .name = "ListObjectVersions",
     .counted_as = op_class::list,
     .run = [](service& s, context& c) { return s.list_object_versions(c); }},
    {.on = target::bucket,
     .verb = method::get,
     .subresource = "versioning",
     .name = "GetBucketVersioning",
     .counted_as = op_class::list,
     .run = [](service& s, context& c) { return s.get_bucket_versioning(c); }},
    {.on = target::bucket,
     .verb = method::put,
     .subresource = "versioning",
     .name = "PutBucketVersioning",
     .counted_as = op_class::bucket,
     .run = [](service& s, context& c) { return s.put_bucket_versioning(c); }},
    {.on = target::bucket,
     .verb = method::put,
     .subresource = "lifecycle",
     .name = "PutBucketLifecycleConfiguration",
     .counted_as = op_class::bucket,
     .run = [](service& s, context& c) { return s.put_bucket_lifecycle(c); }},
    {.on = target::bucket,
     .verb = method::get,
     .subresource = "lifecycle",
     .name = "GetBucketLifecycleConfiguration",
     .counted_as = op_class::list,
     .run = [](service& s, context& c) { return s.get_bucket_lifecycle(c); }},
    {.on = target::bucket,
     .verb = method::delete_,
     .subresource = "lifecycle",
     .name = "DeleteBucketLifecycle",
     .counted_as = op_class::bucket,
     .run = [](service& s, context& c) { return s.delete_bucket_lifecycle(c); }},
    {.on = target::bucket,
     .verb = method::put,
     .subresource = "policy",
     .name = "PutBucketPolicy",
     .counted_as = op_class::bucket,
     .run = [](service& s, context& c) { return s.put_bucket_policy(c); }},
    {.on = target::bucket,
     .verb = method::get,
     .subresource = "policy",
     .name = "GetBucketPolicy",
     .counted_as = op_class::list,
     .run = [](service& s, context& c) { return s.get_bucket_policy(c); }},
    {.on = target::bucket,
     .verb = method::delete_,
     .subresource = "policy",
     .name = "DeleteBucketPolicy",
     .counted_as = op_class::bucket,
     .run = [](service& s, context& c) { return s.delete_bucket_policy(c); }},
    {.on = target::bucket,
     .verb = method::get,
     .subresource = "acl",
     .name = "GetBucketAcl",
     .counted_as = op_class::list,
     .run = [](service& s, context& c) { return s.get_acl(c, false); }},
    {.on = target::bucket,
     .verb = method::put,
     .subresource = "acl",
     .name = "PutBucketAcl",
     .counted_as = op_class::bucket,
     .run = [](service& s, context& c) { return s.put_acl(c, false); }},
    {.on = target::bucket,
     .verb = method::get,
     .subresource = "ownershipControls",
     .name = "GetBucketOwnershipControls",
     .counted_as = op_class::list,
     .run = [](service& s, context& c) { return s.get_ownership_controls(c); }},
    {.on = target::bucket,
     .verb = method::put,
     .subresource = "ownershipControls",
     .name = "PutBucketOwnershipControls",
     .counted_as = op_class::bucket,
     .run = [](service& s, context& c) { return s.put_ownership_controls(c); }},
    {.on = target::bucket,
     .verb = method::delete_,
     .subresource = "ownershipControls",
     .name = "DeleteBucketOwnershipControls",
     .counted_as = op_class::bucket,
     .run = [](service& s, context& c) { return s.delete_ownership_controls(c); }},
    {.on = target::bucket,
     .verb = method::put,
     .subresource = "tagging",
     .name = "PutBucketTagging",
     .counted_as = op_class::bucket,
     .run = [](service& s, context& c) { return s.put_bucket_tagging(c); }},
    {.on = target::bucket,
     .verb = method::get,
     .subresource = "tagging",
     .name = "GetBucketTagging",
     .counted_as = op_class::list,
     .run = [](service& s, context& c) { return s.get_bucket_tagging(c); }},
    {.on = target::bucket,
     .verb = method::delete_,
     .subresource = "tagging",
     .name = "DeleteBucketTagging",
     .counted_as = op_class::bucket,
     .run = [](service& s, context& c) { return s.delete_bucket_tagging(c); }},
    // Buckets
    {.on = target::bucket,
     .verb = method::put,
     .name = "CreateBucket",
     .counted_as = op_class::bucket,
     .access = access_kind::create_bucket,
     .acl = names_acl::bucket,
     .run = [](service& s, context& c) { return s.create_bucket(c); }},
    {.on = target::bucket,
     .verb = method::delete_,
     .name = "DeleteBucket",
     .counted_as = op_class::bucket,
     .run = [](service& s, context& c) { return s.delete_bucket(c); }},
    {.on = target::bucket,
     .verb = method::head,
     .name = "HeadBucket",
     .counted_as = op_class::bucket,
     .run = [](service& s, context& c) { return s.head_bucket(c); }},
    {.on = target::bucket,
     .verb = method::get,
     .when = names_location,
     .name = "GetBucketLocation",
     .counted_as = op_class::bucket,
     .run = [](service& s, context& c) { return s.bucket_location(c); }},
    {.on = target::bucket,
     .verb = method::get,
     .when = lists_v2,
     .name = "ListObjectsV2",
     .counted_as = op_class::list,
     .run = [](service& s, context& c) { return s.list_objects(c, true); }},
    {.on = target::bucket,
     .verb = method::get,
     .name = "ListObjects",
     .counted_as = op_class::list,
     .run = [](service& s, context& c) { return s.list_objects(c, false); }},
    // POST Object checks access itself once it has read the form's fields (post_object.cc).
    {.on = target::bucket,
     .verb = method::post,
     .when = without_query,
     .name = "PostObject",
     .counted_as = op_class::write,
     .access = access_kind::form,
     .run = [](service& s, context& c) { return s.post_object(c); }},
    {.on = target::bucket,
     .verb = method::post,
     .name = "PostObject",
     .access = access_kind::form,
     .run = [](service& s, context& c) { return s.post_object(c); }},
    // Objects: subresources
    {.on = target::object,
     .verb = method::post,
     .subresource = "uploads",
     .name = "CreateMultipartUpload",
     .counted_as = op_class::multipart,
     .acl = names_acl::object,
     .run = [](service& s, context& c) { return s.create_multipart_upload(c); }},
    {.on = target::object, .subresource = "uploads"},  // any other method: MethodNotAllowed
    {.on = target::object,
     .verb = method::put,
     .subresource = "uploadId",
     .when = copies,
     .name = "UploadPartCopy",
     .counted_as = op_class::write,
     .access = access_kind::copy,
     .run = [](service& s, context& c) { return s.upload_part_copy(c); }},
    {.on = target::object,
     .verb = method::put,
     .subresource = "uploadId",
     .name = "UploadPart",
     .counted_as = op_class::write,
     .run = [](service& s, context& c) { return s.upload_part(c); }},
    {.on = target::object,
     .verb = method::post,
     .subresource = "uploadId",
     .name = "CompleteMultipartUpload",
     .counted_as = op_class::multipart,
     .run = [](service& s, context& c) { return s.complete_multipart_upload(c); }},
    {.on = target::object,
     .verb = method::delete_,
     .subresource = "uploadId",
     .name = "AbortMultipartUpload",
     .counted_as = op_class::multipart,
     .run = [](service& s, context& c) { return s.abort_multipart_upload(c); }},
    {.on = target::object,
     .verb = method::get,
     .subresource = "uploadId",
     .name = "ListParts",
     .counted_as = op_class::list,
     .run = [](service& s, context& c) { return s.list_parts(c); }},
    {.on = target::object,
     .verb = method::put,
     .subresource = "tagging",
     .name = "PutObjectTagging",
     .counted_as = op_class::write,
     .run = [](service& s, context& c) { return s.put_object_tagging(c); }},
    {.on = target::object,
     .verb = method::get,
     .subresource = "tagging",
     .name = "GetObjectTagging",
     .counted_as = op_class::read,
     .run = [](service& s, context& c) { return s.get_object_tagging(c); }},
    {.on = target::object,
     .verb = method::delete_,
     .subresource = "tagging",
     .name = "DeleteObjectTagging",
     .counted_as = op_class::remove,
     .run = [](service& s, context& c) { return s.delete_object_tagging(c); }},
    {.on = target::object,
     .verb = method::get,
     .subresource = "attributes",
     .name = "GetObjectAttributes",
     .counted_as = op_class::read,
     .run = [](service& s, context& c) { return s.get_object_attributes(c); }},
    {.on = target::object,
     .verb = method::get,
     .subresource = "acl",
     .name = "GetObjectAcl",
     .counted_as = op_class::read,
     .run = [](service& s, context& c) { return s.get_acl(c, true); }},
    {.on = target::object,
     .verb = method::put,
     .subresource = "acl",
     .name = "PutObjectAcl",
     .counted_as = op_class::write,
     .run = [](service& s, context& c) { return s.put_acl(c, true); }},
    // Objects
    {.on = target::object,
     .verb = method::put,
     .when = copies,
     .name = "CopyObject",
     .counted_as = op_class::write,
     .access = access_kind::copy,
     .acl = names_acl::object,
     .run = [](service& s, context& c) { return s.copy_object(c); }},
    {.on = target::object,
     .verb = method::put,
     .name = "PutObject",
     .counted_as = op_class::write,
     .acl = names_acl::object,
     .run = [](service& s, context& c) { return s.put_object(c); }},
    {.on = target::object,
     .verb = method::get,
     .name = "GetObject",
     .counted_as = op_class::read,
     .run = [](service& s, context& c) { return s.get_object(c, false); }},
    {.on = target::object,
     .verb = method::head,
     .name = "HeadObject",
     .counted_as = op_class::read,
     .run = [](service& s, context& c) { return s.get_object(c, true); }},
    {.on = target::object,
     .verb = method::delete_,
     .name = "DeleteObject",
     .counted_as = op_class::remove,
     .run = [](service& s, context& c) { return s.delete_object(c); }},
};

std::span<const operation> operation_table::rows() { return all; }

namespace {

base::error method_not_allowed() {
    return {base::errc::method_not_allowed,
            "The specified method is not allowed against this resource."};
}

bool matches(const operation& o, const http::request_head& head, const s3_request& r) {
    return (!o.verb || *o.verb == head.verb) && (!o.when || o.when(head, r));
}

chosen_operation chosen(const operation& o) {
    if (!o.run) return {nullptr, method_not_allowed()};
    return {&o, {}};
}

}  // namespace

chosen_operation choose_operation(const http::request_head& head, const s3_request& r) {
    const target on = r.bucket.empty() ? target::service
                      : r.key.empty()  ? target::bucket
                                       : target::object;
    for (const operation& o : operation_table::rows())
        if (o.on == on && !o.subresource.empty() && r.has(o.subresource) && matches(o, head, r))
            return chosen(o);
    std::span<const std::string_view> unsupported;
    if (on == target::bucket) unsupported = bucket_unsupported;
    if (on == target::object) unsupported = object_unsupported;
    for (auto sub : unsupported)
        if (r.has(sub))
            return {nullptr,
                    {base::errc::not_implemented,
                     "Fjord does not implement ?" + std::string(sub) + " yet"}};
    for (const operation& o : operation_table::rows())
        if (o.on == on && o.subresource.empty() && matches(o, head, r)) return chosen(o);
    return {nullptr, method_not_allowed()};
}

}  // namespace fjord::s3
