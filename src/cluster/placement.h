#pragma once
// Where an object's shards live in a cluster (docs/cluster.md, "Placement"): the erasure geometry, the
// erasure sets laid out over the nodes' drives, and the deterministic choice of a set for each key.
//
// Sets: the cluster's drives in node-cyclic order, (n0,d0) (n1,d0) ... (nN,d0) (n0,d1) ..., cut into
// consecutive runs of k + m. When k + m <= nodes, each set has its shards on k + m distinct nodes, so a
// node lost is one shard lost per set.
//
// A key's set: rendezvous (highest random weight) hashing over the set ids. Every node computes it from the
// key and the map alone (no lookup table, no ring state), and when sets are added only the keys whose
// highest score moves to a new set move, about added / total of them, which is what a rebalance then
// copies. The cost is one hash per set per lookup: 96 nodes of 8 drives in sets of 12 are 64 sets, well
// under a microsecond.
//
// Thread-safety: pure functions.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace fjord::cluster {

struct geometry {
    unsigned k = 0;  // data shards
    unsigned m = 0;  // parity shards
    unsigned width() const { return k + m; }
};

// The default for `nodes` nodes of `drives_per_node` drives each (docs/cluster.md has the table): the
// widest set of 3 to 16 drives that divides the drives into whole sets, on distinct nodes where that is
// possible; 1 parity shard for a set of 3, 2 up to 7, 3 up to 11, 4 from 12. With the default write quorum
// of k + 1, a set keeps taking writes with m - 1 of its nodes down and serves reads with m down. With fewer
// nodes than shards (s shards of a set per node), m is s + 1, at most half the set.
base::result<geometry> default_geometry(unsigned nodes, unsigned drives_per_node);

struct drive_ref {
    std::string node_id;
    unsigned drive = 0;  // the node's drive index, its --data order
    bool operator==(const drive_ref&) const = default;
};

struct erasure_set {
    unsigned id = 0;
    std::vector<drive_ref> drives;  // k + m; shard order of an object is rotated over them
};

// Lays out the sets over `nodes` (node ids in a fixed order, each with `drives_per_node` drives). Fails
// when the drives do not divide into whole sets of the geometry's width.
base::result<std::vector<erasure_set>> layout_sets(std::span<const std::string> nodes,
                                                   unsigned drives_per_node, geometry g);

// The stable 64-bit hash of an object's name that placement works from.
std::uint64_t object_hash(std::string_view bucket, std::string_view key);

// The index in `sets` (not empty) of the set that holds the object.
std::size_t choose_set(std::uint64_t object, std::span<const erasure_set> sets);

// The index in the set's drives of the drive holding shard `shard` of the object: shard 0 starts at a
// position taken from the hash, so parity shards are spread over every drive of the set.
unsigned shard_drive(std::uint64_t object, unsigned shard, unsigned width);

}  // namespace fjord::cluster
