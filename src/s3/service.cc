#include "s3/service.h"
#include "s3/service_internal.h"

#include <algorithm>
#include <cstdio>

#include "base/clock.h"
#include "base/encoding.h"
#include "base/log.h"
#include "io/reactor.h"
#include "base/token_bucket.h"
#include "s3/access_log.h"
#include "s3/payload.h"
#include "s3/xml.h"

namespace fjord::s3 {

namespace {

std::string next_request_id() {
    thread_local std::uint64_t counter = static_cast<std::uint64_t>(base::unix_now_ms()) << 16;
    char buf[24];
    std::snprintf(buf, sizeof buf, "%02X%014llX",
                  io::reactor::on_reactor_thread() ? io::reactor::current().core() : 0,
                  static_cast<unsigned long long>(++counter & 0xFFFFFFFFFFFFFFULL));
    return buf;
}

std::string_view host_without_port(std::string_view host) {
    if (!host.empty() && host.front() == '[') {
        auto close = host.find(']');
        return close == std::string_view::npos ? host : host.substr(0, close + 1);
    }
    auto colon = host.rfind(':');
    return colon == std::string_view::npos ? host : host.substr(0, colon);
}

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

base::error method_not_allowed() {
    return {base::errc::method_not_allowed,
            "The specified method is not allowed against this resource."};
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

// The operation class a routed request counts under; dispatch() turns it into `other` when it finds no
// operation after all (an unsupported subresource or method).
base::operation_class operation_of(http::method verb, const s3_request& r) {
    using http::method;
    using op = base::operation_class;
    if (r.bucket.empty()) return verb == method::get ? op::list : op::other;
    if (r.key.empty()) {
        if (r.has("uploads")) return op::list;
        if (r.has("delete")) return op::remove;
        if (verb == method::get) return r.has("location") ? op::bucket : op::list;
        if (verb == method::put || verb == method::delete_ || verb == method::head)
            return op::bucket;
        return verb == method::post && r.query.empty() ? op::write : op::other;  // POST Object
    }
    if (r.has("uploads")) return op::multipart;
    if (r.has("uploadId")) {
        if (verb == method::put) return op::write;
        return verb == method::get ? op::list : op::multipart;
    }
    switch (verb) {
        case method::get:
        case method::head: return op::read;
        case method::put: return op::write;
        case method::delete_: return op::remove;
        default: return op::other;
    }
}

base::operation_class operation_class_of(const http::request_head& head, const s3_request& r) {
    if (is_health_check(head) || is_metrics_request(head, r)) return base::operation_class::admin;
    return operation_of(head.verb, r);
}
// The S3 operation a routed request asks for. Chosen before authentication, so that a refused request is
// logged with the operation it tried.
enum class s3_op {
    none,  // no operation: `refusal` says why
    list_buckets,
    create_bucket,
    delete_bucket,
    head_bucket,
    bucket_location,
    list_objects,
    list_objects_v2,
    list_object_versions,
    get_bucket_versioning,
    put_bucket_versioning,
    admin_users,
    put_bucket_lifecycle,
    get_bucket_lifecycle,
    delete_bucket_lifecycle,
    put_bucket_policy,
    get_bucket_policy,
    delete_bucket_policy,
    list_multipart_uploads,
    delete_objects,
    create_multipart_upload,
    upload_part,
    upload_part_copy,
    complete_multipart_upload,
    abort_multipart_upload,
    list_parts,
    put_object_tagging,
    get_object_tagging,
    delete_object_tagging,
    put_bucket_tagging,
    get_bucket_tagging,
    delete_bucket_tagging,
    get_bucket_acl,
    put_bucket_acl,
    get_object_acl,
    put_object_acl,
    get_ownership_controls,
    put_ownership_controls,
    delete_ownership_controls,
    get_object_attributes,
    copy_object,
    put_object,
    post_object,
    get_object,
    head_object,
    delete_object,
    kv_batch,
};

struct chosen_operation {
    s3_op op = s3_op::none;
    std::string_view name = "-";  // as AWS names the operation
    base::error refusal;
};

// A KV bucket is asked for with x-fjord-bucket-type: kv on CreateBucket (docs/kv.md), and its options
// with x-fjord-kv-capacity-bytes, x-fjord-kv-ttl-seconds and x-fjord-kv-write-ack (nvme or dram).
base::result<std::optional<store::kv_bucket_options>> kv_bucket_options_of(
    const http::request_head& head) {
    std::string_view type = head.value_of("x-fjord-bucket-type");
    if (type.empty() || type == "object") return std::optional<store::kv_bucket_options>{};
    if (type != "kv")
        return base::fail(base::errc::invalid_argument, "x-fjord-bucket-type must be kv or object");
    store::kv_bucket_options o;
    if (auto v = head.value_of("x-fjord-kv-capacity-bytes"); !v.empty()) {
        auto n = base::parse_u64(v);
        if (!n) return base::fail(base::errc::invalid_argument, "bad x-fjord-kv-capacity-bytes");
        o.capacity_bytes = *n;
    }
    if (auto v = head.value_of("x-fjord-kv-ttl-seconds"); !v.empty()) {
        auto n = base::parse_u64(v);
        if (!n || *n > 100ULL * 365 * 86400)
            return base::fail(base::errc::invalid_argument, "bad x-fjord-kv-ttl-seconds");
        o.ttl_seconds = static_cast<std::int64_t>(*n);
    }
    std::string_view ack = head.value_of("x-fjord-kv-write-ack");
    if (ack == "dram")
        o.ack = store::kv_write_ack::dram;
    else if (!ack.empty() && ack != "nvme")
        return base::fail(base::errc::invalid_argument,
                          "x-fjord-kv-write-ack must be nvme or dram");
    return std::optional<store::kv_bucket_options>{o};
}

chosen_operation named(s3_op op, std::string_view name) { return {op, name, {}}; }
chosen_operation refused(base::error err) { return {s3_op::none, "-", std::move(err)}; }

base::error not_implemented_subresource(std::string_view sub) {
    return {base::errc::not_implemented, "Fjord does not implement ?" + std::string(sub) + " yet"};
}

// Versions and lifecycle rules of a bucket.
std::optional<chosen_operation> choose_versions_operation(http::method verb, const s3_request& r) {
    using http::method;
    if (r.has("versions") && verb == method::get)
        return named(s3_op::list_object_versions, "ListObjectVersions");
    if (r.has("versioning") && verb == method::get)
        return named(s3_op::get_bucket_versioning, "GetBucketVersioning");
    if (r.has("versioning") && verb == method::put)
        return named(s3_op::put_bucket_versioning, "PutBucketVersioning");
    if (r.has("lifecycle") && verb == method::put)
        return named(s3_op::put_bucket_lifecycle, "PutBucketLifecycleConfiguration");
    if (r.has("lifecycle") && verb == method::get)
        return named(s3_op::get_bucket_lifecycle, "GetBucketLifecycleConfiguration");
    if (r.has("lifecycle") && verb == method::delete_)
        return named(s3_op::delete_bucket_lifecycle, "DeleteBucketLifecycle");
    if (r.has("policy") && verb == method::put)
        return named(s3_op::put_bucket_policy, "PutBucketPolicy");
    if (r.has("policy") && verb == method::get)
        return named(s3_op::get_bucket_policy, "GetBucketPolicy");
    if (r.has("policy") && verb == method::delete_)
        return named(s3_op::delete_bucket_policy, "DeleteBucketPolicy");
    return std::nullopt;
}

chosen_operation choose_bucket_operation(http::method verb, const s3_request& r) {
    using http::method;
    if (r.has("uploads") && verb == method::get)
        return named(s3_op::list_multipart_uploads, "ListMultipartUploads");
    if (r.has("delete") && verb == method::post)
        return named(s3_op::delete_objects, "DeleteObjects");
    if (r.has("fjord-batch") && verb == method::post) return named(s3_op::kv_batch, "FjordKvBatch");
    if (auto versions = choose_versions_operation(verb, r)) return *versions;
    if (r.has("acl") && verb == method::get) return named(s3_op::get_bucket_acl, "GetBucketAcl");
    if (r.has("acl") && verb == method::put) return named(s3_op::put_bucket_acl, "PutBucketAcl");
    if (r.has("ownershipControls") && verb == method::get)
        return named(s3_op::get_ownership_controls, "GetBucketOwnershipControls");
    if (r.has("ownershipControls") && verb == method::put)
        return named(s3_op::put_ownership_controls, "PutBucketOwnershipControls");
    if (r.has("ownershipControls") && verb == method::delete_)
        return named(s3_op::delete_ownership_controls, "DeleteBucketOwnershipControls");
    if (r.has("tagging") && verb == method::put)
        return named(s3_op::put_bucket_tagging, "PutBucketTagging");
    if (r.has("tagging") && verb == method::get)
        return named(s3_op::get_bucket_tagging, "GetBucketTagging");
    if (r.has("tagging") && verb == method::delete_)
        return named(s3_op::delete_bucket_tagging, "DeleteBucketTagging");
    static constexpr std::string_view unsupported[] = {"uploads",
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
    for (auto sub : unsupported)
        if (r.has(sub)) return refused(not_implemented_subresource(sub));
    switch (verb) {
        case method::put: return named(s3_op::create_bucket, "CreateBucket");
        case method::delete_: return named(s3_op::delete_bucket, "DeleteBucket");
        case method::head: return named(s3_op::head_bucket, "HeadBucket");
        case method::get:
            if (r.has("location")) return named(s3_op::bucket_location, "GetBucketLocation");
            if (r.param("list-type") == "2") return named(s3_op::list_objects_v2, "ListObjectsV2");
            return named(s3_op::list_objects, "ListObjects");
        case method::post: return named(s3_op::post_object, "PostObject");
        default: return refused(method_not_allowed());
    }
}

chosen_operation choose_object_operation(http::method verb, const s3_request& r,
                                         const http::request_head& head) {
    using http::method;
    const bool copy_source = !head.value_of("x-amz-copy-source").empty();
    if (r.has("uploads"))
        return verb == method::post ? named(s3_op::create_multipart_upload, "CreateMultipartUpload")
                                    : refused(method_not_allowed());
    if (r.has("uploadId")) {
        switch (verb) {
            case method::put:
                return copy_source ? named(s3_op::upload_part_copy, "UploadPartCopy")
                                   : named(s3_op::upload_part, "UploadPart");
            case method::post:
                return named(s3_op::complete_multipart_upload, "CompleteMultipartUpload");
            case method::delete_:
                return named(s3_op::abort_multipart_upload, "AbortMultipartUpload");
            case method::get: return named(s3_op::list_parts, "ListParts");
            default: break;
        }
    }
    if (r.has("tagging")) {
        switch (verb) {
            case method::put: return named(s3_op::put_object_tagging, "PutObjectTagging");
            case method::get: return named(s3_op::get_object_tagging, "GetObjectTagging");
            case method::delete_: return named(s3_op::delete_object_tagging, "DeleteObjectTagging");
            default: break;
        }
    }
    if (r.has("attributes") && verb == method::get)
        return named(s3_op::get_object_attributes, "GetObjectAttributes");
    if (r.has("acl") && verb == method::get) return named(s3_op::get_object_acl, "GetObjectAcl");
    if (r.has("acl") && verb == method::put) return named(s3_op::put_object_acl, "PutObjectAcl");
    static constexpr std::string_view unsupported[] = {
        "uploads",    "uploadId", "tagging", "acl",    "retention",   "legal-hold",
        "attributes", "restore",  "torrent", "select", "renameObject"};
    for (auto sub : unsupported)
        if (r.has(sub)) return refused(not_implemented_subresource(sub));
    switch (verb) {
        case method::put:
            return copy_source ? named(s3_op::copy_object, "CopyObject")
                               : named(s3_op::put_object, "PutObject");
        case method::get: return named(s3_op::get_object, "GetObject");
        case method::head: return named(s3_op::head_object, "HeadObject");
        case method::delete_: return named(s3_op::delete_object, "DeleteObject");
        default: return refused(method_not_allowed());
    }
}

chosen_operation choose_operation(const http::request_head& head, const s3_request& r) {
    if (r.bucket.empty() && (r.has("fjord-admin-user") || r.has("fjord-admin-users")))
        return named(s3_op::admin_users, "FjordAdminUsers");
    if (r.bucket.empty())
        return head.verb == http::method::get ? named(s3_op::list_buckets, "ListBuckets")
                                              : refused(method_not_allowed());
    if (r.key.empty()) return choose_bucket_operation(head.verb, r);
    return choose_object_operation(head.verb, r, head);
}

}  // namespace

std::string s3_message(const base::error& err) {
    // S3 words these errors the same way every time; the store's own wording is for logs.
    switch (err.code) {
        case base::errc::no_such_bucket: return "The specified bucket does not exist";
        case base::errc::no_such_key: return "The specified key does not exist.";
        case base::errc::no_such_upload:
            return "The specified upload does not exist. The upload ID may be invalid, or the upload may have been "
                   "aborted or completed.";
        case base::errc::precondition_failed:
            return "At least one of the pre-conditions you specified did not hold";
        case base::errc::bucket_already_owned_by_you:
            return "Your previous request to create the named bucket succeeded and you already own it.";
        case base::errc::bucket_not_empty: return "The bucket you tried to delete is not empty";
        case base::errc::incomplete_body:
            return "You did not provide the number of bytes specified by the Content-Length HTTP header.";
        case base::errc::entity_too_large:
            return "Your proposed upload exceeds the maximum allowed object size.";
        case base::errc::data_corrupted:
            return "The stored data is damaged or missing; it is not served.";
        case base::errc::storage_full: return "The server has no space left to store this object.";
        case base::errc::service_unavailable:
            // Cluster nodes say which node was down or what a peer answered: that is for the log.
            return "The service cannot handle the request now. Please try again.";
        default:
            // A server-side failure's own text (file names, errno text) is for the log only.
            if (base::errc_http_status(err.code) == 500)
                return "We encountered an internal error. Please try again.";
            return err.message;
    }
}

std::string error_xml(const base::error& err, std::string_view resource,
                      std::string_view request_id,
                      const std::vector<std::pair<std::string, std::string>>& details) {
    xml_writer x;
    x.open("Error");
    x.element("Code", base::errc_s3_code(err.code));
    x.element("Message",
              err.message.empty() ? std::string(base::errc_name(err.code)) : err.message);
    for (const auto& [name, value] : details) x.element(name, value);
    x.element("Resource", resource);
    x.element("RequestId", request_id);
    x.close("Error");
    return x.take();
}

bool s3_request::has(std::string_view name) const {
    return std::any_of(query.begin(), query.end(), [&](const auto& p) { return p.first == name; });
}

std::string_view s3_request::param(std::string_view name) const {
    for (const auto& [k, v] : query)
        if (k == name) return v;
    return {};
}

bool valid_bucket_name(std::string_view name) {
    if (name.size() < 3 || name.size() > 63) return false;
    for (char c : name)
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-'))
            return false;
    auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
    if (!alnum(name.front()) || !alnum(name.back())) return false;
    if (name.find("..") != std::string_view::npos || name.find(".-") != std::string_view::npos ||
        name.find("-.") != std::string_view::npos)
        return false;
    if (name.starts_with("xn--") || name.starts_with("sthree-") || name.ends_with("-s3alias") ||
        name.ends_with("--ol-s3"))
        return false;
    int dots = 0;
    bool digits_and_dots = true;
    for (char c : name) {
        if (c == '.')
            ++dots;
        else if (c < '0' || c > '9')
            digits_and_dots = false;
    }
    return !(digits_and_dots && dots == 3);  // looks like an IPv4 address
}

service::service(store::object_store& store, service_options options, base::metrics& metrics,
                 access_log* log)
    : _store(store),
      _options(std::move(options)),
      _users(metrics.cores(), _options.credentials),
      _metrics(metrics),
      _access_log(log) {
    for (unsigned c = 0; c < metrics.cores(); ++c)
        _policy_caches.push_back(std::make_unique<policy_cache>());
    // A signature scoped to another region is refused, as S3 refuses it (the client learns the right one
    // from the error's <Region>).
    _options.auth.region = _options.region;
}

base::metrics::shard& service::local_metrics() {
    return io::reactor::on_reactor_thread() ? _metrics.for_core(io::reactor::current().core())
                                            : _metrics.shared();
}

std::string service::protocol_error_response(const base::error& err,
                                             std::string_view remote_address) {
    std::string id = next_request_id();
    std::string body = error_xml(err, "/", id);
    int status = base::errc_http_status(err.code);
    local_metrics().count_request(base::operation_class::other, status);
    if (_access_log) {
        access_entry entry;
        entry.time_ms = base::unix_now_ms();
        entry.remote = remote_address;
        entry.operation = "-";
        entry.status = status;
        entry.request_id = id;
        _access_log->record(entry);
    }
    return http::format_response_head(
               status, {{"Content-Type", "application/xml"}, {"x-amz-request-id", id}}, body.size(),
               true) +
           body;
}

io::task<void> service::send_error(context& c, const base::error& err,
                                   http::header_list extra_headers) {
    int status = base::errc_http_status(err.code);
    auto headers = c.common_headers();
    for (auto& h : extra_headers) headers.push_back(std::move(h));
    if (status == 304) {
        (void)co_await c.ex.send_all(status, headers, "");
        co_return;
    }
    base::error shown{err.code, s3_message(err)};
    // 501 is a client asking for what we lack, and 503 SlowDown a client going too fast (counted in
    // fjord_slowdown_total): neither is worth a log line per request. Corruption has its own line.
    const bool logged = err.code == base::errc::slow_down ||
                        (err.code == base::errc::data_corrupted && c.corruption_logged);
    if (status >= 500 && status != 501 && !logged) {
        std::string method(c.ex.head().method_text);
        LOG_WARN("%s %s -> %d %s (request %s)", method.c_str(), c.req.resource.c_str(), status,
                 err.message.c_str(), c.request_id.c_str());
    }
    headers.emplace_back("Content-Type", "application/xml");
    std::vector<std::pair<std::string, std::string>> details;
    if (err.code == base::errc::wrong_region || err.code == base::errc::wrong_region_presigned)
        details.emplace_back("Region", _options.region);
    std::string body =
        error_xml(shown, c.req.resource.empty() ? std::string(c.ex.head().path) : c.req.resource,
                  c.request_id, details);
    (void)co_await c.ex.send_all(status, headers, body);
}

base::error service::read_failure(context& c, std::string_view bucket, std::string_view key,
                                  base::error err, std::string_view role) {
    if (err.code == base::errc::not_found) err.code = base::errc::data_corrupted;
    if (err.code != base::errc::data_corrupted) return err;
    local_metrics().add(base::counter::data_corrupted);
    c.corruption_logged = true;
    std::string method(c.ex.head().method_text);
    LOG_ERROR("data corrupted: s3://%.*s/%.*s%s%.*s: %s (%s %s, request %s)",
              static_cast<int>(bucket.size()), bucket.data(), static_cast<int>(key.size()),
              key.data(), role.empty() ? "" : " as ", static_cast<int>(role.size()), role.data(),
              err.message.c_str(), method.c_str(), c.req.resource.c_str(), c.request_id.c_str());
    return err;
}

io::task<void> service::send_xml(context& c, int status, std::string body) {
    auto headers = c.common_headers();
    headers.emplace_back("Content-Type", "application/xml");
    (void)co_await c.ex.send_all(status, headers, body);
}

io::task<void> service::send_not_an_operation(context& c, base::error err) {
    c.op = base::operation_class::other;
    co_await send_error(c, err);
}

io::task<void> service::send_metrics(context& c) {
    auto headers = c.common_headers();
    headers.emplace_back("Content-Type", std::string(base::prometheus_content_type));
    store::storage_stats st = _store.stats();
    base::storage_figures storage{st.spare_files_kept, st.spare_files_reused,
                                  st.spare_files_removed, st.spare_bytes, st.reserved_ahead_bytes};
    std::string text = base::render_prometheus(_metrics.collect(), storage);
    if (_options.more_metrics) text += _options.more_metrics();
    (void)co_await c.ex.send_all(200, headers, text);
}

io::task<void> service::handle(http::exchange& ex) {
    context c{ex, {}, next_request_id(), {}};
    c.received_ms = base::unix_now_ms();
    co_await authenticate_and_dispatch(c);
    local_metrics().count_request(c.op, ex.status());
    log_access(c);
}

io::task<void> service::refuse(http::exchange& ex, const base::error& err,
                               std::int64_t retry_after_ms) {
    context c{ex, {}, next_request_id(), {}};
    c.received_ms = base::unix_now_ms();
    if (auto routed = route(ex.head(), _options.domains)) {
        c.req = std::move(*routed);
        c.op = operation_class_of(ex.head(), c.req);
        c.operation = choose_operation(ex.head(), c.req).name;
    }
    co_await send_error(c, err, {{"x-amz-retry-after", std::to_string(retry_after_ms)}});
    local_metrics().count_request(c.op, ex.status());
    log_access(c);
}

void service::log_access(const context& c) {
    if (!_access_log) return;
    access_entry entry;
    entry.time_ms = c.received_ms;
    entry.remote = c.ex.remote_address();
    entry.access_key = c.auth.access_key;
    entry.operation = c.operation;
    entry.bucket = c.req.bucket;
    entry.key = c.req.key;
    entry.status = c.ex.status();
    entry.bytes_in = c.ex.body().bytes_read();
    entry.bytes_out = c.ex.bytes_sent();
    entry.duration_us = (base::monotonic_now_ns() - c.ex.started_ns()) / 1000;
    entry.request_id = c.request_id;
    _access_log->record(entry);
}

namespace {
// The access key a request claims (Credential=KEY/... or X-Amz-Credential=KEY%2F...), for the log of a
// failed authentication: at most 64 visible characters, "?" when there is none.
std::string claimed_access_key(const http::request_head& head) {
    std::string_view text = head.value_of("authorization");
    std::size_t at = text.find("Credential=");
    std::string claimed;
    if (at != std::string_view::npos) {
        claimed = std::string(text.substr(at + 11, text.find('/', at + 11) - (at + 11)));
    } else if (std::size_t q = head.query.find("X-Amz-Credential="); q != std::string_view::npos) {
        std::string_view raw = head.query.substr(q + 17, head.query.find('&', q + 17) - (q + 17));
        auto decoded = base::uri_decode(raw, true);
        if (decoded) claimed = decoded->substr(0, decoded->find('/'));
    }
    if (claimed.empty() || claimed.size() > 64) return "?";
    for (char ch : claimed)
        if (ch <= 0x20 || ch >= 0x7f) return "?";
    return claimed;
}

// Failed authentications logged per core: a burst of 20, then 5 a second.
thread_local base::token_bucket t_auth_log_budget(5, 20);
thread_local std::uint64_t t_auth_log_suppressed = 0;
}  // namespace

void service::log_auth_failure(const context& c, const base::error& err) {
    if (!t_auth_log_budget.try_take(base::monotonic_now_ns())) {
        ++t_auth_log_suppressed;
        return;
    }
    std::string method(c.ex.head().method_text);
    std::string suppressed;
    if (t_auth_log_suppressed > 0)
        suppressed = "; " + std::to_string(std::exchange(t_auth_log_suppressed, 0)) +
                     " more not logged before this";
    LOG_WARN("authentication failed: %.*s for %s %s from %.*s (access key '%s', request %s%s)",
             static_cast<int>(base::errc_s3_code(err.code).size()),
             base::errc_s3_code(err.code).data(), method.c_str(),
             c.req.resource.empty() ? "/" : c.req.resource.c_str(),
             static_cast<int>(c.ex.remote_address().size()), c.ex.remote_address().data(),
             claimed_access_key(c.ex.head()).c_str(), c.request_id.c_str(), suppressed.c_str());
}

namespace {
bool is_anonymous(const http::request_head& head, const s3_request& r) {
    return head.find("authorization") == nullptr && !r.has("X-Amz-Signature") &&
           !r.has("X-Amz-Credential") && !r.has("Signature") && !r.has("AWSAccessKeyId");
}
}  // namespace

io::task<void> service::authenticate_and_dispatch(context& c) {
    const http::request_head& head = c.ex.head();
    if (is_health_check(head)) {
        c.op = base::operation_class::admin;
        c.operation = "Health";
        std::optional<std::string> why;
        if (head.path == "/health/ready" && _options.not_ready) why = _options.not_ready();
        (void)co_await c.ex.send_all(why ? 503 : 200, c.common_headers(),
                                     why ? *why + "\n" : std::string());
        co_return;
    }
    auto routed = route(head, _options.domains);
    if (!routed) co_return co_await send_error(c, routed.err());
    c.req = std::move(*routed);
    const bool metrics = is_metrics_request(head, c.req);
    c.op = operation_class_of(head, c.req);
    c.operation = metrics ? "GetMetrics" : choose_operation(head, c.req).name;
    if (metrics && _options.metrics_public) co_return co_await send_metrics(c);
    // A request with no signature at all is anonymous: only a bucket policy can let it through
    // (check_access); /metrics stays signed unless --metrics-public.
    if (!metrics && is_anonymous(head, c.req)) co_return co_await dispatch(c);
    std::vector<auth::header_view> headers;
    headers.reserve(head.headers.size());
    for (const auto& h : head.headers) headers.push_back({h.name, h.value});
    auth::request_view view{head.method_text, head.path, head.query, headers};
    auto auth =
        auth::verify_request(view, _users.local(_store), base::unix_now_ms() / 1000, _options.auth);
    if (!auth) {
        log_auth_failure(c, auth.err());
        co_return co_await send_error(c, auth.err());
    }
    c.auth = std::move(*auth);
    if (metrics) co_return co_await send_metrics(c);
    co_await dispatch(c);
}

namespace {}  // namespace

namespace {
access_kind kind_of(s3_op op) {
    using kind = access_kind;
    if (op == s3_op::admin_users) return kind::admin;
    if (op == s3_op::copy_object || op == s3_op::upload_part_copy) return kind::copy;
    return op == s3_op::create_bucket ? kind::create_bucket : kind::other;
}
}  // namespace

namespace {
// A request for a bucket this core does not know: it may have been made through another node a moment
// ago (object_store::learn_bucket).
bool names_unknown_bucket(const s3_request& r, s3_op op, const store::object_store& store) {
    return !r.bucket.empty() && op != s3_op::create_bucket && r.bucket != system_bucket &&
           !store.bucket_exists(r.bucket);
}
}  // namespace

io::task<void> service::dispatch(context& c) {
    chosen_operation chosen = choose_operation(c.ex.head(), c.req);
    if (names_unknown_bucket(c.req, chosen.op, _store))
        if (auto learned = co_await _store.learn_bucket(c.req.bucket); !learned)
            co_return co_await send_error(c, learned.err());
    // A POST form names its key and its signer in its body: post_object checks access once it has
    // read them.
    if (chosen.op == s3_op::post_object) co_return co_await post_object(c);
    if (auto allowed = check_access(c, kind_of(chosen.op), chosen.name); !allowed)
        co_return co_await send_error(c, allowed.err());
    const bool writes = chosen.op == s3_op::put_object || chosen.op == s3_op::copy_object ||
                        chosen.op == s3_op::create_multipart_upload;
    if (writes || chosen.op == s3_op::create_bucket)
        if (auto acl = resolve_write_acl(c, c.ex.head(), chosen.op == s3_op::create_bucket); !acl)
            co_return co_await send_error(c, acl.err());
    if (!c.req.key.empty() && c.req.has("versionId")) {
        auto version = requested_version(_store, c.req);
        if (!version) co_return co_await send_error(c, version.err());
        c.version = std::move(*version);
    }
    switch (chosen.op) {
        case s3_op::none: co_return co_await send_not_an_operation(c, chosen.refusal);
        case s3_op::list_buckets: co_return co_await list_buckets(c);
        case s3_op::create_bucket: co_return co_await create_bucket(c);
        case s3_op::kv_batch: co_return co_await kv_batch(c);
        case s3_op::delete_bucket: co_return co_await delete_bucket(c);
        case s3_op::head_bucket: co_return co_await head_bucket(c);
        case s3_op::bucket_location: co_return co_await bucket_location(c);
        case s3_op::list_objects: co_return co_await list_objects(c, false);
        case s3_op::list_objects_v2: co_return co_await list_objects(c, true);
        case s3_op::list_object_versions: co_return co_await list_object_versions(c);
        case s3_op::get_bucket_versioning: co_return co_await get_bucket_versioning(c);
        case s3_op::put_bucket_versioning: co_return co_await put_bucket_versioning(c);
        case s3_op::admin_users: co_return co_await admin_users(c);
        case s3_op::put_bucket_lifecycle: co_return co_await put_bucket_lifecycle(c);
        case s3_op::get_bucket_lifecycle: co_return co_await get_bucket_lifecycle(c);
        case s3_op::delete_bucket_lifecycle: co_return co_await delete_bucket_lifecycle(c);
        case s3_op::put_bucket_policy: co_return co_await put_bucket_policy(c);
        case s3_op::get_bucket_policy: co_return co_await get_bucket_policy(c);
        case s3_op::delete_bucket_policy: co_return co_await delete_bucket_policy(c);
        case s3_op::list_multipart_uploads: co_return co_await list_multipart_uploads(c);
        case s3_op::delete_objects: co_return co_await delete_objects(c);
        case s3_op::create_multipart_upload: co_return co_await create_multipart_upload(c);
        case s3_op::upload_part: co_return co_await upload_part(c);
        case s3_op::upload_part_copy: co_return co_await upload_part_copy(c);
        case s3_op::complete_multipart_upload: co_return co_await complete_multipart_upload(c);
        case s3_op::abort_multipart_upload: co_return co_await abort_multipart_upload(c);
        case s3_op::list_parts: co_return co_await list_parts(c);
        case s3_op::put_object_tagging: co_return co_await put_object_tagging(c);
        case s3_op::get_object_tagging: co_return co_await get_object_tagging(c);
        case s3_op::delete_object_tagging: co_return co_await delete_object_tagging(c);
        case s3_op::get_bucket_acl: co_return co_await get_acl(c, false);
        case s3_op::put_bucket_acl: co_return co_await put_acl(c, false);
        case s3_op::get_object_acl: co_return co_await get_acl(c, true);
        case s3_op::put_object_acl: co_return co_await put_acl(c, true);
        case s3_op::get_ownership_controls: co_return co_await get_ownership_controls(c);
        case s3_op::put_ownership_controls: co_return co_await put_ownership_controls(c);
        case s3_op::delete_ownership_controls: co_return co_await delete_ownership_controls(c);
        case s3_op::put_bucket_tagging: co_return co_await put_bucket_tagging(c);
        case s3_op::get_bucket_tagging: co_return co_await get_bucket_tagging(c);
        case s3_op::delete_bucket_tagging: co_return co_await delete_bucket_tagging(c);
        case s3_op::get_object_attributes: co_return co_await get_object_attributes(c);
        case s3_op::copy_object: co_return co_await copy_object(c);
        case s3_op::put_object: co_return co_await put_object(c);
        case s3_op::post_object: co_return co_await post_object(c);
        case s3_op::get_object: co_return co_await get_object(c, false);
        case s3_op::head_object: co_return co_await get_object(c, true);
        case s3_op::delete_object: co_return co_await delete_object(c);
    }
}

// ---- buckets ----

namespace {

// ListBuckets' optional paging: max-buckets (1 to 10,000), continuation-token (the base64 of the last
// name sent, as in ListObjectsV2) and prefix.
struct bucket_page_request {
    std::size_t max_buckets = SIZE_MAX;
    std::string after;
    std::string prefix;
};

base::result<bucket_page_request> parse_bucket_page(const s3_request& r) {
    bucket_page_request p;
    p.prefix = std::string(r.param("prefix"));
    if (!xml_representable(p.prefix))  // echoed in <Prefix>, which XML 1.0 could not carry
        return base::fail(base::errc::invalid_argument,
                          "prefix holds a character XML cannot carry");
    if (r.has("max-buckets")) {
        auto n = base::parse_u64(r.param("max-buckets"));
        if (!n || *n < 1 || *n > 10000)
            return base::fail(base::errc::invalid_argument,
                              "max-buckets must be an integer from 1 to 10000");
        p.max_buckets = *n;
    }
    if (!r.param("continuation-token").empty()) {
        auto decoded = base::base64_decode(r.param("continuation-token"));
        if (!decoded || decoded->empty())
            return base::fail(base::errc::invalid_argument,
                              "The continuation token provided is incorrect");
        p.after = *decoded;
    }
    return p;
}

}  // namespace

io::task<void> service::list_buckets(context& c) {
    auto paging = parse_bucket_page(c.req);
    if (!paging) co_return co_await send_error(c, paging.err());
    auto buckets = _store.list_buckets();
    std::sort(buckets.begin(), buckets.end(),
              [](const auto& a, const auto& b) { return a.name < b.name; });
    xml_writer x;
    x.open("ListAllMyBucketsResult", s3_xmlns);
    x.open("Owner")
        .element("ID", c.auth.access_key)
        .element("DisplayName", c.auth.access_key)
        .close("Owner");
    x.open("Buckets");
    std::size_t sent = 0;
    std::string last;
    bool more = false;
    for (const auto& b : buckets) {
        if (!b.name.starts_with(paging->prefix) || b.name <= paging->after) continue;
        if (b.name == system_bucket) continue;
        if (!_users.is_root(c.auth.access_key) && !owns(c, b)) continue;  // a user sees its own
        if (sent == paging->max_buckets) {
            more = true;
            break;
        }
        x.open("Bucket")
            .element("Name", b.name)
            .element("CreationDate", base::format_iso8601_ms(b.created_ms))
            .element("BucketRegion", _options.region)
            .close("Bucket");
        ++sent, last = b.name;
    }
    x.close("Buckets");
    if (more) x.element("ContinuationToken", base::base64_encode(last));
    if (c.req.has("prefix")) x.element("Prefix", paging->prefix);
    x.close("ListAllMyBucketsResult");
    co_await send_xml(c, 200, x.take());
}

io::task<void> service::create_bucket(context& c) {
    if (!valid_bucket_name(c.req.bucket))
        co_return co_await send_error(
            c, {base::errc::invalid_bucket_name, "The specified bucket is not valid."});
    // The optional CreateBucketConfiguration body only names a location; any region is accepted.
    std::vector<std::byte> scratch(4096);
    std::size_t total = 0;
    for (;;) {
        auto n = co_await c.ex.body().read(scratch.data(), scratch.size());
        if (!n) co_return co_await send_error(c, n.err());
        if (*n == 0) break;
        total += *n;
        if (total > 64 * 1024)
            co_return co_await send_error(c, {base::errc::malformed_xml, "request body too large"});
    }
    auto kv = kv_bucket_options_of(c.ex.head());
    if (!kv) co_return co_await send_error(c, kv.err());
    auto created = co_await create_owned_bucket(c, *kv);
    if (!created) co_return co_await send_error(c, created.err());
    auto headers = c.common_headers();
    headers.emplace_back("Location", "/" + c.req.bucket);
    (void)co_await c.ex.send_all(200, headers, "");
}

io::task<void> service::delete_bucket(context& c) {
    auto deleted = co_await _store.delete_bucket(c.req.bucket);
    if (!deleted) co_return co_await send_error(c, deleted.err());
    (void)co_await c.ex.send_all(204, c.common_headers(), "");
}

io::task<void> service::head_bucket(context& c) {
    if (!_store.bucket_exists(c.req.bucket))
        co_return co_await send_error(c, {base::errc::no_such_bucket, "no such bucket"});
    auto headers = c.common_headers();
    headers.emplace_back("x-amz-bucket-region", _options.region);
    (void)co_await c.ex.send_all(200, headers, "");
}

io::task<void> service::bucket_location(context& c) {
    if (!_store.bucket_exists(c.req.bucket))
        co_return co_await send_error(c, {base::errc::no_such_bucket, "no such bucket"});
    xml_writer x;
    x.open("LocationConstraint", s3_xmlns);
    std::string body = x.take();
    if (_options.region != "us-east-1") append_escaped(body, _options.region);
    body += "</LocationConstraint>";
    co_await send_xml(c, 200, std::move(body));
}

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
io::task<base::result<store::list_page>> service::list_page_of(const store::list_request& lr) {
    if (lr.max_keys > 0) co_return co_await _store.list(lr);
    if (!_store.bucket_exists(lr.bucket))
        co_return base::fail(base::errc::no_such_bucket, "no such bucket");
    co_return store::list_page{};
}

io::task<void> service::list_object_versions(context& c) {
    const bool versioned = has_versioning(_store, c.req.bucket);
    auto lr = parse_versions_request(c.req, versioned);
    if (!lr) co_return co_await send_error(c, lr.err());
    // A bucket that never had versioning: each object is its own latest, null version
    base::result<store::list_page> page = base::fail(base::errc::internal);
    if (versioned && lr->max_keys > 0)
        page = co_await _store.list_versions(*lr);
    else
        page = co_await list_page_of(*lr);
    if (!page) co_return co_await send_error(c, page.err());
    co_await send_xml(c, 200, versions_result_xml(c.req, *lr, *page, listing_owner(c)));
}

io::task<void> service::list_objects(context& c, bool v2) {
    auto lr = parse_list_request(c.req, v2);
    if (!lr) co_return co_await send_error(c, lr.err());
    auto page = co_await list_page_of(*lr);
    if (!page) co_return co_await send_error(c, page.err());
    co_await send_xml(c, 200, list_result_xml(c.req, v2, *lr, *page, listing_owner(c)));
}

// Listings name the bucket's owner as the objects' owner (who owns every object of a
// BucketOwnerEnforced bucket), not the caller, who may be another user or anonymous.
std::string service::listing_owner(const context& c) const {
    auto bucket = _store.find_bucket(c.req.bucket);
    return bucket ? owner_id(*bucket) : _users.root_id();
}

}  // namespace fjord::s3

namespace fjord::s3 {

io::task<base::result<std::string>> service::read_verified_body(context& c, std::size_t limit,
                                                                bool body_checksums) {
    const http::request_head& head = c.ex.head();
    payload_options po;
    po.aws_chunked = c.auth.mode == auth::payload_mode::streaming_signed ||
                     c.auth.mode == auth::payload_mode::streaming_signed_trailer ||
                     c.auth.mode == auth::payload_mode::streaming_unsigned_trailer;
    if (po.aws_chunked)
        po.decoded_length = base::parse_u64(head.value_of("x-amz-decoded-content-length"));
    if (body_checksums) FJORD_CO_TRY(checksum_options(head, po));
    std::string_view content_md5 = head.value_of("content-md5");
    if (!content_md5.empty()) {
        auto raw = base::base64_decode(content_md5);
        if (!raw || raw->size() != 16)
            co_return base::fail(base::errc::invalid_digest,
                                 "The Content-MD5 you specified is not valid.");
        po.content_md5 = *raw;
    }
    payload_source source(c.ex.body(), c.auth, po);
    std::string body;
    std::vector<std::byte> chunk(16 * 1024);
    for (;;) {
        auto n = co_await source.read(chunk.data(), chunk.size());
        if (!n) co_return n.as_failure();
        if (*n == 0) break;
        if (body.size() + *n > limit)
            co_return base::fail(base::errc::malformed_xml, "request body too large");
        body.append(reinterpret_cast<const char*>(chunk.data()), *n);
    }
    FJORD_CO_TRY(source.verify());
    co_return body;
}

}  // namespace fjord::s3
