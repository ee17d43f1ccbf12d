#pragma once

// Private to the S3 service's .cc files: the per-request context and shared response helpers.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "http/connection.h"
#include "s3/acl.h"
#include "s3/checksum.h"
#include "s3/payload.h"
#include "s3/policy.h"
#include "s3/router.h"
#include "s3/service.h"

namespace fjord::s3 {

// A permission the caller holds only if the object's ACL grants it (a bucket with ACLs enabled): checked
// once the record is read (acl_ops.cc, object_acl_allows).
struct deferred_acl {
    acl_permission wanted = acl_permission::read;
    std::string bucket_owner;  // canonical ID: the owner of an object whose record names none
    // The bucket's policy allows the request: that suffices for an object the bucket's owner owns, never
    // for one another user owns (S3: a bucket policy cannot grant access to objects of another account;
    // only their ACL can)
    bool policy_allows = false;
};

// A policy decision that needs the tags of the object the request acts on (s3:ExistingObjectTag):
// everything but the tags, taken on the request's core by check_access, completed with the record
// once it is read (complete_policy; it reads nothing shared, so it may run on the core that owns the
// key). It stands for the whole decision: what the object's ACL, the bucket's ACL or its ownership
// would have answered when the policy neither allows nor denies is kept with it.
struct deferred_policy {
    std::shared_ptr<const bucket_policy> policy;
    policy_request request;
    std::optional<deferred_acl> acl;  // the object's ACL decides when the policy does not
    bool fallback = false;  // else: whether the caller owns the bucket (or its ACL allows)
};
base::result<void> complete_policy(const deferred_policy& d, const std::string& caller,
                                   const store::object_record& record);

// What must still be checked of the object a request acts on once its record is read: its ACL, or a
// deferred policy decision. A copy travels into record editors.
struct object_check {
    std::optional<deferred_acl> acl;
    std::optional<deferred_policy> policy;
    std::string caller;
    base::result<void> operator()(const store::object_record& record) const;
};

struct context {
    service& svc;
    http::exchange& ex;
    s3_request req;
    std::string request_id;
    auth::auth_result auth;
    // What the request asks for, chosen once it is routed (router.h)
    chosen_operation chosen;
    base::operation_class op = base::operation_class::other;  // for fjord_requests_total
    std::string_view operation = "-";  // the S3 operation, for the access log
    std::int64_t received_ms = 0;      // Unix time the request arrived
    bool corruption_logged = false;    // send_error need not log it again
    // The version the request's versionId names ("" is the null version); nullopt: the current one
    std::optional<std::string> version;
    // Set by check_access: what the object's (and a copy source's) ACL must grant before it is served
    std::optional<deferred_acl> object_acl, source_acl;
    // Set by check_access instead of a decision when the bucket's policy tests the object's own tags
    // (and the copy source's bucket's, its source's)
    std::optional<deferred_policy> object_policy, source_policy;
    object_check check_of_object() const { return {object_acl, object_policy, auth.access_key}; }
    // What a copy must check of its source's record, as a GET of the source would
    object_check check_of_source() const { return {source_acl, source_policy, auth.access_key}; }
    // The ACL an object write stores (encode_acl; empty: the bucket owner's, FULL_CONTROL only)
    std::string write_acl;
    // The headers the request acts on, when they are not its HTTP head's: a POST Object form's signed
    // fields (post_object.cc). Authorization reads its x-amz-* condition keys from here, so it sees
    // exactly what is stored.
    const http::request_head* form_head = nullptr;
    const http::request_head& acting_head() const { return form_head ? *form_head : ex.head(); }
    http::header_list common_headers() const {
        http::header_list headers;
        headers.reserve(12);  // room for an object's headers: no regrowth on the GET path
        headers.emplace_back("x-amz-request-id", request_id);
        headers.emplace_back("x-amz-id-2", request_id);
        return headers;
    }
};

// What authorization knows of a bucket (user_ops.cc): it, whether the caller owns it, and its policy
// (`broken` when the stored one no longer parses, or its ACL: then only root passes); its Object
// Ownership, its owner's canonical ID, and its ACL when ACLs are enabled.
struct bucket_access {
    std::optional<store::bucket_info> info;
    bool owner = false;
    std::shared_ptr<const bucket_policy> policy;
    bool broken = false;
    object_ownership ownership = object_ownership::enforced;
    std::string owner_id;
    std::optional<access_control_list> acl;
};

// Versioning (version_ops.cc). Whether a bucket has had versioning enabled (it then stays Enabled or
// Suspended).
bool has_versioning(const store::object_store& store, const std::string& bucket);
// A version id as a request gives it (versionId, a copy source's, a DeleteObjects entry's): "null" is the
// null version ("", or, in a bucket that never had versioning, nullopt: its current object, the only
// version it has); any other id must be one Fjord could have made.
base::result<std::optional<std::string>> parse_version_id(std::string_view text, bool versioned);
// The version the request's versionId names in its bucket.
base::result<std::optional<std::string>> requested_version(const store::object_store& store,
                                                           const s3_request& r);
// A copy whose source names a delete marker: 400 InvalidRequest, as S3 answers.
base::error copy_source_error(const base::error& err);
// x-amz-version-id for a response about `r`: its id, or "null" when the request named the null version.
void add_version_header(http::header_list& h, const store::object_record& r, bool named);

// A bucket's Object Ownership: its attribute, BucketOwnerEnforced when there is none, ObjectWriter when
// its controls were deleted (acl_ops.cc).
object_ownership ownership_of(const store::bucket_info& bucket);
// Whether the object's ACL (`d`: what it must grant) lets `who` have the record (AccessDenied if not).
base::result<void> object_acl_allows(const deferred_acl& d, const std::string& who,
                                     const store::object_record& record);

// One of the store's optional parts for a bucket (object_store.h: versions_of, uploads_of, ...), or
// not_implemented saying what the bucket's store lacks.
template <class Part>
base::result<Part*> offered(Part* part, const std::string& bucket, std::string_view what) {
    if (part) return part;
    return base::fail(base::errc::not_implemented,
                      "bucket " + bucket + " keeps no " + std::string(what) + " in this store");
}

// What a PUT or UploadPart body needs from its request head: its declared size (the decoded size of an
// aws-chunked body) and the digests its bytes are checked against as they arrive.
struct body_plan {
    std::optional<std::uint64_t> size_bytes;
    payload_options options;
};

// The S3 <Message> of an error: the store words its errors for logs, S3 has fixed messages for many codes.
// A 500's or a 503 ServiceUnavailable's is always a fixed text, so no server detail (a path, an errno
// text, a peer's answer) reaches a client.
std::string s3_message(const base::error& err);
// The ETag of a body that was just stored: the MD5 when one was computed, else derived_etag.
std::string body_etag(const payload_source& source, const store::written_data& written);

std::optional<std::string> unquote_etag(std::string_view v);
// Reads the x-amz-checksum-*, x-amz-trailer and x-amz-sdk-checksum-algorithm headers of a request.
base::result<void> checksum_options(const http::request_head& head, payload_options& o);
// The non-MD5 ETag of data written without an MD5 (see docs/ARCHITECTURE.md, ETag policy).
std::string derived_etag(const store::written_data& written);
// Parses x-amz-tagging ("k1=v1&k2=v2", URL-encoded) with S3's limits.
base::result<std::vector<std::pair<std::string, std::string>>> parse_tagging_header(
    std::string_view text);
// Parses an object's Tagging document (PutObjectTagging's body, POST Object's tagging field).
base::result<std::vector<std::pair<std::string, std::string>>> parse_object_tagging(
    std::string_view body);
base::result<store::write_conditions> write_conditions_of(const http::request_head& head);
// Content-Type, the stored headers and x-amz-meta-* of a PUT or CreateMultipartUpload.
base::result<void> collect_metadata(const http::request_head& head, std::size_t max_meta_bytes,
                                    store::object_record& record);

// The stored header that keeps who initiated a multipart upload (never shown: GET and HEAD skip fjord-*).
inline constexpr std::string_view initiator_header = "fjord-initiator";

// The highest part number S3 allows.
inline constexpr std::uint32_t max_part_number = 10000;

// One <Part> of a CompleteMultipartUpload body.
struct requested_part {
    std::uint32_t number = 0;  // 1..10000
    std::string etag;          // unquoted
    std::string checksum;      // as sent, base64, may be empty
};

// Parses a CompleteMultipartUpload body (the caller bounds its size). Refuses DTDs and documents
// that are not well-formed; on success there are 1..10000 parts, each numbered 1..10000, in the
// order sent (the caller checks that they ascend).
base::result<std::vector<requested_part>> parse_complete_body(const std::string& body);

// A new request's x-amz-request-id: the core's number, then a counter that starts at the core's clock.
std::string next_request_id();

// The S3 <Error> document for an error.
// `details`: extra elements S3 puts in some errors (InvalidRange: RangeRequested, ActualObjectSize).
std::string error_xml(const base::error& err, std::string_view resource,
                      std::string_view request_id,
                      const std::vector<std::pair<std::string, std::string>>& details = {});

}  // namespace fjord::s3
