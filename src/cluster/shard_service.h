#pragma once
// The node side of the inter-node data plane (rpc.h): it keeps the shards that coordinators send in
// the node's own engine (store::object_store, the single-node engine on this node's drives), one
// node-local bucket per cluster bucket, one record per key, and serves them back.
//
// A shard's record on the node is a version of the engine's object (the node-local bucket keeps
// versions; the version id is the stamp's text) with the shard's bytes as its data, its entity tag from
// shard_etag() (so the engine's ordered write, write_order::etag_below, compared with the newest version,
// refuses a write older than it) and its shard_meta in the header "fjord-shard". Older versions stay
// until a trim: a write that fails below its quorum never takes the version before it away. Every block is checked
// against the CRC32C it arrived with before the engine commits, and the engine's own block checksums
// guard it on disk.
//
// node_handler puts the data plane beside the S3 API on one port: requests under /_fjord/cluster/ go
// here, everything else to the S3 front end.
//
// Threading: one service shared by every core; each request runs on the core of its connection.
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "auth/sigv4.h"
#include "cluster/stamp.h"
#include "http/connection.h"
#include "io/task.h"
#include "store/object_store.h"

namespace fjord::cluster {

struct rpc_target;

// The engine's header that holds a shard's shard_meta, and the one that marks a damaged shard.
inline constexpr const char* shard_header = "fjord-shard";
inline constexpr const char* damaged_header = "fjord-damaged";

// The node's own store keeps versions and attributes in every bucket and takes writes in the order
// the cluster gives them (its engine: the shard buckets are versioned); these are those parts of it
// (asserted).
store::version_store& local_versions(store::object_store& local, const std::string& bucket);
store::ordered_puts& local_ordered(store::object_store& local, const std::string& bucket);
store::bucket_attributes& local_attributes(store::object_store& local, const std::string& bucket);

// Marks a version of a shard damaged on this node (its bytes fail their checksums, or its data file is
// gone). The record stays, so that the version still counts among those that reached their quorum;
// readers skip it and healing rewrites it.
io::task<void> mark_damaged(store::object_store& local, std::string bucket, std::string key,
                            std::string version_id);

class shard_service {
public:
    // `clock`, when given, moves past the version of every shard stored here, so that this node's
    // next write is ordered after every write it has seen (a client writing through one node and then
    // another sees its later write win).
    shard_service(store::object_store& local, auth::credentials root, std::string region,
                  stamp_clock* clock = nullptr);
    io::task<void> handle(http::exchange& ex);
    // While held, the node does not answer what it holds (records, listings: 503), only takes writes:
    // from start-up until its drive is known to be the one it had, or it is marked rebuilding
    // (drive_identity.h).
    void hold_answers() { _answers_held.store(true, std::memory_order_release); }
    void release_answers() { _answers_held.store(false, std::memory_order_release); }
    // Whether this node's drive is being rebuilt (rpc.h, rebuilding_header). Declared when the node
    // marks itself (drive_identity.h) or finds itself marked in a map it reads; withdrawn only by a
    // map whose read began after the last declaration and that no longer marks it (the heal that
    // rebuilt it finished). Any thread.
    void declare_rebuilding();
    void note_view(bool marked, std::int64_t read_began_ns);
    bool rebuilding() const { return _rebuilding.load(std::memory_order_acquire); }
    // Called (on the request's core) when a DeleteBucket that went through tells this node its bucket
    // generation is gone (POST fence/<shard bucket>?deleted): the node's own coordinator forgets the
    // bucket before its next read of the map. The answer waits for it.
    void on_bucket_deleted(std::function<io::task<void>(std::string shard_bucket)> f) {
        _on_deleted = std::move(f);
    }
    // How long a DeleteBucket's fence keeps a bucket generation's shard buckets closed to new shards
    // when it is not lifted: longer than any node's map takes to learn the deletion.
    static constexpr std::int64_t fence_ms = 10LL * 60 * 1000;

private:
    io::task<void> put_shard(http::exchange& ex, const rpc_target& target);
    io::task<void> get_shard(http::exchange& ex, const rpc_target& target);
    io::task<void> remove_shard(http::exchange& ex, const rpc_target& target);
    io::task<void> trim(http::exchange& ex, const rpc_target& target);
    io::task<void> meta(http::exchange& ex, const rpc_target& target);
    io::task<void> list(http::exchange& ex, const rpc_target& target);
    io::task<void> drop_bucket(http::exchange& ex, const rpc_target& target);
    // Answers a refused shard upload: the version the node holds instead (x-fjord-current).
    io::task<void> answer_refused(http::exchange& ex, const rpc_target& target,
                                  const std::string& version_text);
    io::task<base::result<void>> ensure_bucket(const std::string& bucket);
    // Fences (DeleteBucket, docs/cluster.md "Failure model"): POST closes a bucket generation's
    // shard buckets (every namespace) to new shards and answers once the shards already past their
    // check have committed; DELETE lifts it.
    io::task<void> fence(http::exchange& ex, const rpc_target& target);
    bool fenced(const std::string& shard_bucket);
    bool fenced_locked(const std::string& generation);  // _fence_mutex held
    // A shard about to commit: refused when fenced, else counted until end_commit.
    base::result<void> begin_commit(const std::string& shard_bucket);
    void end_commit(const std::string& shard_bucket);

    store::object_store& _local;
    stamp_clock* _clock;
    auth::credential_store _root;
    auth::verify_options _verify;
    std::atomic<bool> _answers_held{false};
    std::function<io::task<void>(std::string)> _on_deleted;
    std::atomic<bool> _rebuilding{false};
    std::mutex _rebuilding_mutex;   // orders declarations and maps
    std::int64_t _declared_ns = 0;  // monotonic, of the last declaration
    // By generation (a shard bucket's name without its namespace): fenced until, and shards committing.
    std::mutex _fence_mutex;
    std::map<std::string, std::int64_t> _fenced_until_ms;
    std::map<std::string, unsigned> _committing;
};

class node_handler final : public http::handler {
public:
    node_handler(http::handler& s3, shard_service& shards) : _s3(s3), _shards(shards) {}
    io::task<void> handle(http::exchange& ex) override;
    io::task<void> refuse(http::exchange& ex, const base::error& err,
                          std::int64_t retry_after_ms) override {
        return _s3.refuse(ex, err, retry_after_ms);
    }
    std::string protocol_error_response(const base::error& err,
                                        std::string_view remote_address) override {
        return _s3.protocol_error_response(err, remote_address);
    }

private:
    http::handler& _s3;
    shard_service& _shards;
};

}  // namespace fjord::cluster
