#pragma once
// Healing (docs/cluster.md, "Healing"): brings every object back to full width, k + m shards of its
// newest version on the k + m nodes of its set, after nodes were down, drives were lost or shards
// rotted.
//
// Three ways in, all on core 0 of every node:
//  - the heal queue (cluster_store::queue_heal): objects a write or read found below full width, healed
//    at once and tried again after 1 s, 2 s, 4 s ... (at most a minute) while a node stays away;
//  - the scanner: every scan_interval_ms, and whenever `fjord cluster heal` asks, the node walks the
//    shards it holds, asks the other nodes of each key's set for their records (a batch per set and
//    page), and heals every key not at full width; of the nodes holding a key's newest version, the one
//    that scores highest for the key (rendezvous hashing of key and node id) does it, so a key is
//    healed once and a lost node's keys are spread over its set's other nodes. A node that lost its
//    disk holds nothing: the others' scans rebuild all of it (a whole-node or whole-drive rebuild).
//  - verification: the scan also reads back the node's own shards at a bounded rate and checks every
//    block against its CRC32C (the engine checks its own checksums on the way); a shard that fails is
//    withdrawn and rebuilt from the others.
// A key no heal can repair (a manifest whose parts are gone) is logged once, counted ("unrepairable")
// and set aside: it leaves the queue, and `heal --wait` does not wait for it.
// The rates (keys and bytes a second) bound what healing takes from the node's disk and network.
//
// The healer's figures are published in etcd with the node's lease (stats/<node>, JSON) and shown by
// `fjord cluster status`.
//
// Threading: run() on core 0; stats_json() and request_scan() from any thread.
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/units.h"
#include "cluster/cluster_store.h"
#include "io/task.h"

namespace fjord::cluster {

struct healer_options {
    std::int64_t queue_interval_ms = 1'000;
    std::int64_t scan_interval_ms = 10LL * 60 * 1000;
    std::uint64_t scan_keys_per_second = 2'000;
    std::uint64_t verify_bytes_per_second = 64 * base::MiB;
    // How the healer waits, when not io::sleep_for (a simulation's clock).
    std::function<io::task<void>(std::int64_t ms)> pause;
};

class healer {
public:
    healer(cluster_store& cluster, store::object_store& local, healer_options options);
    io::task<void> run();
    // A scan asked for by `fjord cluster heal` (the id it wrote in etcd); one is started unless a
    // scan at least as new already ran.
    void request_scan(std::int64_t id);
    // The figures, for etcd: {"queue", "healed", "corrupt", "unrepairable", "scans", "scan": {...}}.
    std::string stats_json() const;

private:
    // Heals what the queue holds (a batch, and the deferred items due; with everything_due, all).
    io::task<void> drain_queue(bool everything_due);
    io::task<void> scan();
    io::task<void> scan_bucket(std::string bucket, char space, std::string shard_bucket);
    io::task<void> scan_keys(std::string bucket, char space, std::vector<std::string> keys);
    io::task<bool> verify_local(const key_place& place, const shard_meta& meta);
    io::task<void> pace_keys(std::size_t keys);
    io::task<void> pause(std::int64_t ms);
    // A key no heal can repair (heal_key's data_corrupted): logged the first time, counted, and no
    // longer retried from the queue; a scan still looks at it (a new write replaces it: take_back).
    void set_aside(const key_place& place, const std::string& why);
    void take_back(const key_place& place);

    cluster_store& _cluster;
    store::object_store& _local;
    healer_options _options;
    std::string _node;
    struct deferred {
        std::int64_t at_ms = 0;     // tried next at
        std::int64_t delay_ms = 0;  // then this long after a failure
        cluster_store::heal_item item;
    };
    std::map<std::string, deferred> _deferred;  // by bucket, namespace and key
    std::int64_t _pace_started_ms = 0;
    std::uint64_t _paced_keys = 0;
    std::uint64_t _verified_bytes = 0;
    std::atomic<std::int64_t> _requested{0};
    std::atomic<std::int64_t> _completed_request{0};
    std::atomic<std::uint64_t> _healed{0};
    std::atomic<std::uint64_t> _corrupt{0};
    std::atomic<std::uint64_t> _scans{0};
    // The last scan (or the one running: finished 0).
    std::atomic<std::int64_t> _scan_started_ms{0};
    std::atomic<std::int64_t> _scan_finished_ms{0};
    std::atomic<std::uint64_t> _scan_keys{0};
    std::atomic<std::uint64_t> _scan_degraded{0};
    std::atomic<std::uint64_t> _scan_healed{0};
    std::atomic<std::uint64_t> _scan_remaining{0};
    std::atomic<std::uint64_t> _scan_unreachable{0};
    std::atomic<std::size_t> _deferred_size{0};
    std::set<std::string> _set_aside;  // by bucket, namespace and key; at most max_set_aside
    std::atomic<std::size_t> _set_aside_size{0};
    std::atomic<std::uint64_t> _scan_unrepairable{0};
};

}  // namespace fjord::cluster
