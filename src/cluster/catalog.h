#pragma once
// What a cluster keeps in etcd besides its members (docs/cluster.md, "Keys in etcd"): the topology
// (the erasure geometry and the sets of nodes objects are spread over) and the buckets.
//
//   topology          JSON: {"k", "m", "block_bytes", "sets": [[node, ...], ...], "created_unix_ms",
//                     "rebuilding": [{"node", "after_heal"}, ...]}; written by `fjord cluster init`
//                     (create-if-absent), then changed only by replace-node and by a heal that finished
//                     a rebuild (compare-and-swap on its revision); the data plane serves nothing before
//                     it exists
//   buckets/<name>    JSON: {"name", "created_ms", "generation", "attributes": {name: value}}; made
//                     with create-if-absent, changed with compare-and-swap on its revision, so two
//                     nodes changing one bucket never lose an update. The generation names the bucket's
//                     node-local shard buckets, so a bucket deleted and made again starts empty.
//
// Every node reads these with its membership snapshot (membership.h, read_view) and on every change
// it makes itself.
//
// Thread-safety: pure functions and coroutines on the caller's etcd_client.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "cluster/etcd_client.h"
#include "cluster/placement.h"
#include "io/task.h"

namespace fjord::cluster {

// A node that took another's place in a set (or came back with an empty drive) and has not yet been
// given every shard it should hold. Its "absent" does not mean a write never reached its place, so a
// quorum read does not count it (cluster_store.h, decide_version). `fjord cluster heal --wait` clears
// the mark once a heal asked for after `after_heal` finished with every object at full width.
struct rebuild_mark {
    std::string node;
    std::int64_t after_heal = 0;  // the heal-request counter when the node was marked
};

struct topology {
    geometry shape;
    std::uint32_t block_bytes = 0;
    std::vector<std::vector<std::string>> sets;  // node ids, k + m per set, shard order
    std::int64_t created_unix_ms = 0;
    // The age at which healing decides a write left below W (fjord cluster init --heal-leftover-age-s):
    // one value for every node, which the write and healing rules assume. 0 in topologies written
    // before it was kept here: each node's --heal-leftover-age-s then.
    std::int64_t leftover_age_ms = 0;
    std::vector<rebuild_mark> rebuilding;
    bool is_rebuilding(std::string_view node) const;
    bool is_in_a_set(std::string_view node) const;
    // The sets as placement takes them (one drive per node: each node's engine spreads over its own).
    std::vector<erasure_set> erasure_sets() const;
};
std::string encode_topology(const topology& t);
// Checks the shape: 1 <= k, k + m <= 32, block 64 B to 16 MiB, every set k + m distinct node ids.
base::result<topology> decode_topology(std::string_view json);
// The default topology of these nodes: default_geometry(nodes, 1) and one set per k + m of them.
base::result<topology> default_topology(std::vector<std::string> nodes, std::uint32_t block_bytes);

struct bucket_record {
    std::string name;
    std::int64_t created_ms = 0;
    std::string generation;
    std::map<std::string, std::string> attributes;
    std::int64_t mod_revision = 0;  // etcd's, for compare-and-swap (not in the JSON)
};
std::string encode_bucket_record(const bucket_record& b);
base::result<bucket_record> decode_bucket_record(std::string_view json);

std::string topology_key(std::string_view cluster);
std::string bucket_key(std::string_view cluster, std::string_view bucket);
std::string buckets_prefix(std::string_view cluster);

// Writes the topology unless one exists; returns the one in force (which may differ from `t`).
io::task<base::result<topology>> init_topology(etcd_client& etcd, std::string cluster, topology t);
// Puts `replacement` in `old`'s place in its set and marks it rebuilding, with the heal-request counter
// `heal_now`. `old` == `replacement`: the node keeps its place and is only marked (its drive was
// replaced). Refuses a node in no set, and a replacement already in a set. Compare-and-swap.
io::task<base::result<topology>> replace_topology_node(etcd_client& etcd, std::string cluster,
                                                       std::string old, std::string replacement,
                                                       std::int64_t heal_now);
// Clears the rebuild marks taken before heal request `finished` (a heal that ended with every object
// at full width); returns the nodes cleared.
io::task<base::result<std::vector<std::string>>> finish_rebuilds(etcd_client& etcd,
                                                                 std::string cluster,
                                                                 std::int64_t finished);
// The bucket's record as etcd holds it now; nullopt when there is none.
io::task<base::result<std::optional<bucket_record>>> read_bucket_record(etcd_client& etcd,
                                                                        std::string cluster,
                                                                        std::string name);
// bucket_already_owned_by_you when it exists.
io::task<base::result<bucket_record>> create_bucket_record(etcd_client& etcd, std::string cluster,
                                                           std::string name);
// no_such_bucket when it does not exist.
io::task<base::result<void>> delete_bucket_record(etcd_client& etcd, std::string cluster,
                                                  std::string name);
// Sets or removes one attribute (compare-and-swap, retried a bounded number of times).
io::task<base::result<bucket_record>> set_bucket_record_attribute(etcd_client& etcd,
                                                                  std::string cluster,
                                                                  std::string name,
                                                                  std::string attribute,
                                                                  std::optional<std::string> value);

}  // namespace fjord::cluster
