#pragma once
// Sends one version of an object to some of its set's nodes (cluster_store.h, "put"; healer.h): one
// shard upload per node, the stripes' blocks with their CRC32Cs as a feed produces them, and at the
// end each shard's record. Writes feed it from the body they encode; healing from shards read back.
//
// Threading: one coroutine on one core.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/result.h"
#include "cluster/cluster_store.h"

namespace fjord::cluster {

// One node's upload of one shard of a version.
struct upload {
    std::string node;
    unsigned index = 0;
    peer_pool::lease link;
    enum class state : std::uint8_t { closed, open, stored, refused, failed } kind = state::closed;
    base::error failure;
    std::string held;  // refused: the version the node holds
    std::vector<std::uint32_t> crcs;
    // The node got the whole shard and its record but no answer came back: it may have stored it.
    bool maybe_stored = false;
};
std::size_t count_in(const std::vector<upload>& ups, upload::state s);
// The first failure's message, to say why a write fell short.
std::string first_failure(const std::vector<upload>& ups);

// Where the blocks of each stripe come from. next(s) points `blocks` (k + m entries) at stripe s's
// blocks; those of shards not sent may stay null.
class stripe_feed {
public:
    virtual ~stripe_feed() = default;
    virtual io::task<base::result<void>> next(std::uint64_t s,
                                              std::vector<const std::uint8_t*>& blocks) = 0;
};

struct streamed_version {
    std::vector<upload> uploads;
    shard_meta meta;  // as completed and sent (index and CRCs are each shard's own)
};

// Streams `meta`'s version to the shards `targets` (indexes into place.nodes) under `accept`: opens the
// uploads, sends every stripe from `feed` (none for a version without bytes), then lets `complete` fill
// in the record (a write's front end builds it once the body is in) and ends each upload with it. Fails,
// committing nothing anywhere (the uploads are broken off), once fewer than `needed` uploads go on.
// `commit_within_ms` > 0 (a write's): a node commits its shard only within that of the record's
// modification time (x-fjord-commit-within; docs/cluster.md, "Versions").
io::task<base::result<streamed_version>> stream_version(
    cluster_store& store, const key_place& place, std::vector<unsigned> targets, shard_meta meta,
    acceptance accept, stripe_feed* feed, std::size_t needed,
    const std::function<base::result<void>(shard_meta&)>& complete,
    std::int64_t commit_within_ms = 0);

// Removes a version from these nodes where they still hold it (best effort: a write that did not reach
// its quorum, a failed write's leftovers). `before_ms` > 0: a node takes the withdrawal only until
// then by its clock (a writer's, which healing must not cross).
io::task<void> withdraw(cluster_store* store, std::string shard_bucket, std::string key,
                        std::vector<std::string> nodes, stamp version, std::int64_t before_ms = 0);

// Removes the versions older than `below` from these nodes (best effort: the scanner finds what this
// misses): `below` is acknowledged, or healed to full width, and stands.
io::task<void> trim(cluster_store* store, std::string shard_bucket, std::string key,
                    std::vector<std::string> nodes, stamp below);
// trim(), answering the nodes that confirmed it (those down or suspect are not asked).
io::task<std::vector<std::string>> trim_where(cluster_store* store, std::string shard_bucket,
                                              std::string key, std::vector<std::string> nodes,
                                              stamp below);

bool transport_failure(const base::error& e);

}  // namespace fjord::cluster
