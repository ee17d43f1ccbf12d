#pragma once

// The S3 front end: routes each HTTP exchange to an S3 operation, authenticates it (SigV4), runs it
// against the object store (store/object_store.h, the only part of the store it sees) and answers in
// S3's wire format. One service object is shared by every core;
// it holds only immutable configuration and the process's metrics (each core counts in its own shard),
// and all work happens on the core that owns the connection (metadata commits hop to the key's owner
// core inside the engine). Besides S3 it answers /health/live, /health/ready and /metrics.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/kv_wire.h"
#include "base/metrics.h"
#include "http/connection.h"
#include "s3/checksum.h"
#include "s3/acl.h"
#include "s3/users.h"
#include "auth/sigv4.h"
#include "store/object_store.h"

namespace fjord::http {
class form_reader;
}

namespace fjord::s3 {

class access_log;
struct body_plan;
struct access_control_list;
struct bucket_access;
struct deferred_acl;
struct deferred_policy;
struct bucket_policy;
struct post_form;
struct post_policy;

struct service_options {
    auth::credential_store credentials;
    std::vector<std::string> domains{"localhost"};  // virtual-hosted style: <bucket>.<domain>
    std::string region = "us-east-1";
    // ETag policy (docs/s3-compatibility.md): a real MD5 when the client sends Content-MD5, when
    // etag_md5 is set, or for objects up to etag_md5_max_bytes; otherwise a content-derived non-MD5 tag.
    bool etag_md5 = false;
    std::uint64_t etag_md5_max_bytes = 0;
    std::uint64_t max_object_bytes = 5ULL * 1024 * 1024 * 1024;  // single PUT
    std::size_t max_metadata_bytes = 2048;                       // x-amz-meta-* names + values
    // Every part of a completed multipart upload but the last is at least this large (S3: 5 MiB). The
    // simulation lowers it to keep its objects small.
    std::uint64_t min_part_bytes = 5ULL * 1024 * 1024;
    auth::verify_options auth;
    // GET /metrics without authentication (for a Prometheus scraper on a trusted network). Off: /metrics
    // needs a SigV4 signature like every S3 request.
    bool metrics_public = false;
    // The Object Ownership of a bucket whose CreateBucket names none (acl.h): ObjectWriter, ACLs
    // enabled and private until granted, as every S3 bucket was until April 2023 and as the S3 tools
    // and suites written before then expect; BucketOwnerEnforced (S3's default since) when the
    // operator chooses it (docs/security.md, "ACLs").
    object_ownership default_ownership = object_ownership::writer;
    // What else the server's readiness depends on (a cluster node: its map reads from etcd): why it
    // is not ready (GET /health/ready then answers 503 with it), or nullopt. Any core.
    std::function<std::optional<std::string>()> not_ready;
    // More Prometheus text for GET /metrics (a cluster node's own figures). Any core.
    std::function<std::string()> more_metrics;
};

// A routed request: which bucket and key it names (decoded) and its query parameters (decoded).
struct s3_request {
    std::string bucket;
    std::string key;
    std::vector<std::pair<std::string, std::string>> query;
    std::string resource;  // "/bucket/key" for error bodies
    bool has(std::string_view name) const;
    std::string_view param(std::string_view name) const;
};

// What an operation needs checked before it runs (service::check_access); `form`: nothing yet, the
// operation checks access itself once it has read who signed it (POST Object's form).
enum class access_kind { other, admin, copy, create_bucket, form };

class service final : public http::handler {
public:
    // The state of one request (service_internal.h), and an operation's handler (router.h's table).
    struct context;
    using handler = io::task<void> (*)(service&, context&);

    // With `log`, every request is written to the access log (access_log.h).
    service(store::object_store& store, service_options options, base::metrics& metrics,
            access_log* log = nullptr);
    io::task<void> handle(http::exchange& ex) override;
    // Answers 503 SlowDown with x-amz-retry-after (milliseconds), which current AWS SDKs wait for
    // before their retry.
    io::task<void> refuse(http::exchange& ex, const base::error& err,
                          std::int64_t retry_after_ms) override;
    std::string protocol_error_response(const base::error& err,
                                        std::string_view remote_address) override;

private:
    friend struct operation_table;
    io::task<void> authenticate_and_dispatch(context& c);
    io::task<void> dispatch(context& c);
    io::task<void> send_error(context& c, const base::error& err,
                              http::header_list extra_headers = {});
    io::task<void> send_xml(context& c, int status, std::string body);
    // Answers a request dispatch could not give to an operation (counted as operation class `other`).
    io::task<void> send_not_an_operation(context& c, base::error err);
    io::task<void> send_metrics(context& c);
    base::metrics::shard& local_metrics();
    // The request's access log line (when the log is on).
    void log_access(const context& c);
    // A failed authentication, at warn, at most a few lines a second per core (the rest are counted and
    // said in the next line): never the signature or any secret.
    void log_auth_failure(const context& c, const base::error& err);
    // A read of stored data (GET, a copy source) failed: a record whose data file is missing is damage
    // too, so not_found becomes data_corrupted. Damage is logged once, naming bucket and key (and
    // `role`, what the read was for), and counted in fjord_data_corrupted_total. Returns the error to
    // answer with.
    base::error read_failure(context& c, std::string_view bucket, std::string_view key,
                             base::error err, std::string_view role = {});

    io::task<void> list_buckets(context& c);
    io::task<void> create_bucket(context& c);
    io::task<void> delete_bucket(context& c);
    io::task<void> head_bucket(context& c);
    io::task<void> bucket_location(context& c);
    io::task<void> list_objects(context& c, bool v2);
    io::task<void> list_object_versions(context& c);
    // The Owner of the objects in a listing of the request's bucket.
    std::string listing_owner(const context& c) const;
    io::task<base::result<store::list_page>> list_page_of(const store::list_request& lr);
    io::task<void> get_bucket_versioning(context& c);
    io::task<void> put_bucket_versioning(context& c);
    // Users (users.h): the admin API, and whether the caller may act on a bucket.
    io::task<void> admin_users(context& c);
    // Before dispatch: the admin API is root's; other users act only on buckets they own (the copy
    // source's too); x-amz-expected-bucket-owner names the bucket's owner.
    base::result<void> check_access(context& c, access_kind kind, std::string_view operation) const;
    // Whether the caller may do `action` on `resource` ("bucket" or "bucket/key") of `bucket`: the
    // bucket policy's Deny refuses, then its owner may, then the policy's Allow allows.
    base::result<void> check_policy(const context& c, const std::string& bucket,
                                    const std::string& resource, const std::string& action) const;
    bucket_access access_of(const context& c, const std::string& bucket) const;
    std::shared_ptr<const bucket_policy> parsed_policy(const std::string& bucket,
                                                       const std::string& text) const;
    // `deferred`, when given, takes what an object's ACL must grant instead of refusing at once
    // (object-level ACL permissions; see acl.h). `deferred_decision`, when given, takes the whole
    // decision when the bucket's policy tests the object's tags (service_internal.h).
    base::result<void> decide(const context& c, const bucket_access& access,
                              const std::string& resource, const std::string& action,
                              std::optional<deferred_acl>* deferred = nullptr,
                              std::optional<deferred_policy>* deferred_decision = nullptr) const;
    // The canonical ID of a bucket's owner (its owner attribute, or root's).
    std::string owner_id(const store::bucket_info& bucket) const;
    // DeleteObjects, key by key.
    bool may_delete(const context& c, const bucket_access& access, const std::string& key,
                    bool version) const;
    // A missing key is 403 to a caller who may not list the bucket (as S3 hides which keys exist).
    base::error visible_error(const context& c, base::error err) const;
    io::task<void> put_bucket_policy(context& c);
    io::task<void> get_bucket_policy(context& c);
    io::task<void> delete_bucket_policy(context& c);
    bool owns(const context& c, const store::bucket_info& bucket) const;
    // CreateBucket with its owner: BucketAlreadyExists when another user has the name.
    io::task<base::result<void>> create_owned_bucket(
        const context& c, const std::optional<store::kv_bucket_options>& kv);
    io::task<base::result<void>> configure_new_bucket(const context& c, bool root);
    io::task<base::result<void>> reset_bucket_acl(const context& c,
                                                  const store::bucket_info& bucket);
    io::task<void> put_bucket_lifecycle(context& c);
    io::task<void> get_bucket_lifecycle(context& c);
    io::task<void> delete_bucket_lifecycle(context& c);
    // The headers of an answer about a delete marker (none for other errors).
    io::task<http::header_list> delete_marker_headers(const context& c, base::errc code);
    // x-amz-version-id for an answer about the version `c` reads (`r`): its id, or "null" for the null
    // version where S3 names it (the request did, or the bucket has versioning).
    void answer_version(http::header_list& h, const store::object_record& r,
                        const context& c) const;
    // The object a request names: its versionId's version, or the current one.
    io::task<base::result<store::object_record>> head_named(const context& c);
    io::task<base::result<store::object_record>> get_named(const context& c,
                                                           store::read_planner plan,
                                                           store::byte_sink& sink);
    io::task<base::result<store::object_record>> update_named(const context& c,
                                                              store::record_editor edit);
    io::task<void> put_object(context& c);
    // POST Object (post_object.cc): the form's fields, then its file, stored as a PutObject would be.
    io::task<void> post_object(context& c);
    io::task<void> store_posted(context& c, const post_form& form, const std::string& file_type,
                                http::form_reader& reader, const post_policy& policy);
    io::task<void> answer_post(context& c, const post_form& form,
                               const store::object_record& stored);
    // The declared size and the digests a PUT or UploadPart body must be checked against.
    base::result<body_plan> plan_body(const context& c,
                                      checksum_algorithm expected_algorithm) const;
    // A request body of at most `limit` bytes, with every digest it carries verified.
    // The whole body, checked against the signature, Content-MD5 and (unless `body_checksums` is false:
    // CompleteMultipartUpload's name the object's) the x-amz-checksum-* headers.
    io::task<base::result<std::string>> read_verified_body(context& c, std::size_t limit,
                                                           bool body_checksums = true);
    io::task<void> copy_object(context& c);
    io::task<void> upload_part_copy(context& c);
    io::task<void> delete_objects(context& c);
    io::task<void> put_object_tagging(context& c);
    io::task<void> get_object_tagging(context& c);
    io::task<void> delete_object_tagging(context& c);
    io::task<void> get_acl(context& c, bool object);
    io::task<void> put_acl(context& c, bool object);
    io::task<void> get_ownership_controls(context& c);
    io::task<void> put_ownership_controls(context& c);
    io::task<void> delete_ownership_controls(context& c);
    // The ACL an object write or CreateBucket names, checked against the bucket's Object Ownership;
    // sets c.write_acl for object writes.
    // `head`: the request's, or the headers a POST form's fields stand for.
    base::result<void> resolve_write_acl(context& c, const http::request_head& head,
                                         bool creates_bucket) const;
    // Every user a list grants to exists (InvalidArgument, as S3, for an unknown canonical ID).
    base::result<void> check_grantees(const access_control_list& acl) const;
    io::task<void> put_bucket_tagging(context& c);
    io::task<void> get_bucket_tagging(context& c);
    io::task<void> delete_bucket_tagging(context& c);
    io::task<void> get_object_attributes(context& c);
    io::task<void> create_multipart_upload(context& c);
    io::task<void> upload_part(context& c);
    io::task<void> complete_multipart_upload(context& c);
    io::task<void> abort_multipart_upload(context& c);
    io::task<void> list_parts(context& c);
    io::task<void> list_multipart_uploads(context& c);
    io::task<void> get_object(context& c, bool head_only);
    io::task<void> send_invalid_range(context& c, const base::error& err, std::uint64_t size_bytes);
    io::task<void> delete_object(context& c);
    // The KV batch API (kv_batch.cc).
    io::task<void> kv_batch(context& c);
    io::task<void> kv_batch_exists(context& c,
                                   const std::vector<std::optional<std::uint64_t>>& sizes);
    io::task<void> kv_batch_get(context& c, store::block_store& blocks_store,
                                const std::vector<std::string>& keys,
                                const std::vector<std::optional<std::uint64_t>>& sizes);
    io::task<void> kv_batch_put(context& c, store::block_store& blocks,
                                std::vector<base::kv_wire::entry> entries);

    store::object_store& _store;
    service_options _options;
    user_directory _users;
    // Per core: bucket -> (policy text, its parse)
    using policy_cache =
        std::unordered_map<std::string,
                           std::pair<std::string, std::shared_ptr<const bucket_policy>>>;
    mutable std::vector<std::unique_ptr<policy_cache>> _policy_caches;
    base::metrics& _metrics;
    access_log* _access_log;
};

// S3 bucket naming rules: 3-63 characters of a-z 0-9 . -, starting and ending with a letter or digit,
// no "..", not an IPv4 address, no reserved prefixes/suffixes.
bool valid_bucket_name(std::string_view name);

}  // namespace fjord::s3
