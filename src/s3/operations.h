#pragma once

// The S3 service's operations, one file per family, each a free function of the request's context
// (service_internal.h): what router.cc's table runs, and what those handlers share. Private to the S3
// service's .cc files. The service object itself (service.h) holds only what every request reads.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/kv_wire.h"
#include "s3/router.h"
#include "s3/service_internal.h"

namespace fjord::http {
class form_reader;
}

namespace fjord::s3 {

struct post_form;
struct post_policy;

// ---- service.cc: the path of every request ----
// Health checks, routing, the signature; then dispatch.
io::task<void> authenticate_and_dispatch(context& c);
// The order docs/security.md states, then the chosen operation's handler.
io::task<void> dispatch(context& c);
// A request body of at most `limit` bytes, with every digest it carries verified.
// The whole body, checked against the signature, Content-MD5 and (unless `body_checksums` is false:
// CompleteMultipartUpload's name the object's) the x-amz-checksum-* headers.
io::task<base::result<std::string>> read_verified_body(context& c, std::size_t limit,
                                                       bool body_checksums = true);

// ---- responses.cc: answers, errors, the access log ----
io::task<void> send_error(context& c, const base::error& err, http::header_list extra_headers = {});
io::task<void> send_xml(context& c, int status, std::string body);
// Answers a request dispatch could not give to an operation (counted as operation class `other`).
io::task<void> send_not_an_operation(context& c, base::error err);
io::task<void> send_metrics(context& c);
// The request's access log line (when the log is on).
void log_access(const context& c);
// A failed authentication, at warn, at most a few lines a second per core (the rest are counted and
// said in the next line): never the signature or any secret.
void log_auth_failure(const context& c, const base::error& err);
// A read of stored data (GET, a copy source) failed: a record whose data file is missing is damage
// too, so not_found becomes data_corrupted. Damage is logged once, naming bucket and key (and
// `role`, what the read was for), and counted in fjord_data_corrupted_total. Returns the error to
// answer with.
base::error read_failure(context& c, std::string_view bucket, std::string_view key, base::error err,
                         std::string_view role = {});

// ---- authorize.cc: the one place that decides whether a caller may ----
// Before dispatch: the admin API is root's; other users act only on buckets they own (the copy
// source's too); x-amz-expected-bucket-owner names the bucket's owner.
base::result<void> check_access(context& c, access_kind kind, std::string_view operation);
// Whether the caller may do `action` on `resource` ("bucket" or "bucket/key") of `bucket`: the
// bucket policy's Deny refuses, then its owner may, then the policy's Allow allows.
base::result<void> check_policy(const context& c, const std::string& bucket,
                                const std::string& resource, const std::string& action);
bucket_access access_of(const context& c, const std::string& bucket);
// `deferred`, when given, takes what an object's ACL must grant instead of refusing at once
// (object-level ACL permissions; see acl.h). `deferred_decision`, when given, takes the whole
// decision when the bucket's policy tests the object's tags (service_internal.h).
base::result<void> decide(const context& c, const bucket_access& access,
                          const std::string& resource, const std::string& action,
                          std::optional<deferred_acl>* deferred = nullptr,
                          std::optional<deferred_policy>* deferred_decision = nullptr);
// DeleteObjects, key by key.
bool may_delete(const context& c, const bucket_access& access, const std::string& key,
                bool version);
// A missing key is 403 to a caller who may not list the bucket (as S3 hides which keys exist).
base::error visible_error(const context& c, base::error err);
bool owns(const context& c, const store::bucket_info& bucket);

// ---- bucket_ops.cc: the store's bucket configuration ----
// Sets (or removes) one attribute of a bucket whose store keeps them (else not_implemented).
io::task<base::result<void>> set_bucket_attribute(const context& c, std::string bucket,
                                                  std::string name,
                                                  std::optional<std::string> value);

// ---- admin_ops.cc: users (users.h) ----
io::task<void> admin_users(context& c);

// ---- bucket_ops.cc ----
io::task<void> list_buckets(context& c);
io::task<void> create_bucket(context& c);
io::task<void> delete_bucket(context& c);
io::task<void> head_bucket(context& c);
io::task<void> bucket_location(context& c);
// CreateBucket with its owner: BucketAlreadyExists when another user has the name.
io::task<base::result<void>> create_owned_bucket(const context& c,
                                                 const std::optional<store::kv_bucket_options>& kv);
io::task<base::result<void>> configure_new_bucket(const context& c, bool root);
io::task<base::result<void>> reset_bucket_acl(const context& c, const store::bucket_info& bucket);

// ---- listing_ops.cc ----
io::task<void> list_objects(context& c, bool v2);
io::task<void> list_object_versions(context& c);
// The Owner of the objects in a listing of the request's bucket.
std::string listing_owner(const context& c);
io::task<base::result<store::list_page>> list_page_of(const context& c,
                                                      const store::list_request& lr);

// ---- version_ops.cc ----
io::task<void> get_bucket_versioning(context& c);
io::task<void> put_bucket_versioning(context& c);
// The headers of an answer about a delete marker (none for other errors).
io::task<http::header_list> delete_marker_headers(const context& c, base::errc code);
// x-amz-version-id for an answer about the version `c` reads (`r`): its id, or "null" for the null
// version where S3 names it (the request did, or the bucket has versioning).
void answer_version(http::header_list& h, const store::object_record& r, const context& c);
// The object a request names: its versionId's version, or the current one.
io::task<base::result<store::object_record>> head_named(const context& c);
io::task<base::result<store::object_record>> get_named(const context& c, store::read_planner plan,
                                                       store::byte_sink& sink);
io::task<base::result<store::object_record>> update_named(const context& c,
                                                          store::record_editor edit);

// ---- object_ops.cc ----
io::task<void> put_object(context& c);
io::task<void> get_object(context& c, bool head_only);
io::task<void> delete_object(context& c);
io::task<void> send_invalid_range(context& c, const base::error& err, std::uint64_t size_bytes);
// The declared size and the digests a PUT or UploadPart body must be checked against.
base::result<body_plan> plan_body(const context& c, checksum_algorithm expected_algorithm);

// ---- post_object.cc: POST Object, the form's fields, then its file, stored as a PutObject would be ----
io::task<void> post_object(context& c);
io::task<void> store_posted(context& c, const post_form& form, const std::string& file_type,
                            http::form_reader& reader, const post_policy& policy);
io::task<void> answer_post(context& c, const post_form& form, const store::object_record& stored);

// ---- copy_ops.cc ----
io::task<void> copy_object(context& c);
io::task<void> upload_part_copy(context& c);

// ---- batch_ops.cc: DeleteObjects, tagging, GetObjectAttributes ----
io::task<void> delete_objects(context& c);
io::task<void> put_object_tagging(context& c);
io::task<void> get_object_tagging(context& c);
io::task<void> delete_object_tagging(context& c);
io::task<void> put_bucket_tagging(context& c);
io::task<void> get_bucket_tagging(context& c);
io::task<void> delete_bucket_tagging(context& c);
io::task<void> get_object_attributes(context& c);

// ---- acl_ops.cc ----
io::task<void> get_acl(context& c, bool object);
io::task<void> put_acl(context& c, bool object);
io::task<void> get_ownership_controls(context& c);
io::task<void> put_ownership_controls(context& c);
io::task<void> delete_ownership_controls(context& c);
// The ACL an object write or CreateBucket names, checked against the bucket's Object Ownership;
// sets c.write_acl for object writes.
// `head`: the request's, or the headers a POST form's fields stand for.
base::result<void> resolve_write_acl(context& c, const http::request_head& head,
                                     bool creates_bucket);
// Every user a list grants to exists (InvalidArgument, as S3, for an unknown canonical ID).
base::result<void> check_grantees(const context& c, const access_control_list& acl);
// The canonical ID of a bucket's owner (its owner attribute, or root's).
std::string owner_id(const context& c, const store::bucket_info& bucket);

// ---- policy_ops.cc, lifecycle_ops.cc ----
io::task<void> put_bucket_policy(context& c);
io::task<void> get_bucket_policy(context& c);
io::task<void> delete_bucket_policy(context& c);
io::task<void> put_bucket_lifecycle(context& c);
io::task<void> get_bucket_lifecycle(context& c);
io::task<void> delete_bucket_lifecycle(context& c);

// ---- multipart_ops.cc, multipart_listing.cc ----
// The request's bucket's multipart uploads, or NoSuchUpload where its store keeps none (a KV bucket:
// no upload of it can exist).
base::result<store::upload_store*> uploads_in(const context& c);
io::task<void> create_multipart_upload(context& c);
io::task<void> upload_part(context& c);
io::task<void> complete_multipart_upload(context& c);
io::task<void> abort_multipart_upload(context& c);
io::task<void> list_parts(context& c);
io::task<void> list_multipart_uploads(context& c);

// ---- kv_batch.cc: the KV batch API ----
io::task<void> kv_batch(context& c);
io::task<void> kv_batch_exists(context& c, const std::vector<std::optional<std::uint64_t>>& sizes);
io::task<void> kv_batch_get(context& c, store::block_store& blocks_store,
                            const std::vector<std::string>& keys,
                            const std::vector<std::optional<std::uint64_t>>& sizes);
io::task<void> kv_batch_put(context& c, store::block_store& blocks,
                            std::vector<base::kv_wire::entry> entries);

}  // namespace fjord::s3
