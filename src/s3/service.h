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

namespace fjord::s3 {

class access_log;
struct bucket_policy;

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

// The state of one request (service_internal.h): operations are free functions of it (operations.h),
// listed with their handler in router.cc's table.
struct context;

class service final : public http::handler {
public:
    // An operation's handler (router.h's table).
    using handler = io::task<void> (*)(context&);

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

    // What every request's operation reads: the store, the configuration, the users, the metrics
    // (this core's shard), the access log (nullptr when off), and a bucket's parsed policy (cached
    // per core: `text` is the bucket's stored policy).
    store::object_store& store() const { return _store; }
    const service_options& options() const { return _options; }
    user_directory& users() const { return _users; }
    base::metrics& metrics() const { return _metrics; }
    base::metrics::shard& local_metrics() const;
    access_log* log() const { return _access_log; }
    std::shared_ptr<const bucket_policy> parsed_policy(const std::string& bucket,
                                                       const std::string& text) const;

private:
    store::object_store& _store;
    service_options _options;
    mutable user_directory _users;
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
