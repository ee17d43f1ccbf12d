#pragma once
// What a cluster keeps in etcd besides its members (docs/cluster.md, "Keys in etcd"): the topology
// (the erasure geometry and the sets of nodes objects are spread over) and the buckets.
//
//   topology          JSON: {"k", "m", "block_bytes", "sets": [[node, ...], ...], "created_unix_ms"};
//                     written once by `fjord cluster init` (create-if-absent); the data plane serves
//                     nothing before it exists
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

struct topology {
    geometry shape;
    std::uint32_t block_bytes = 0;
    std::vector<std::vector<std::string>> sets;  // node ids, k + m per set, shard order
    std::int64_t created_unix_ms = 0;
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
