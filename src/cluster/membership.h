#pragma once
// Cluster membership through etcd (docs/cluster.md): which nodes belong to a cluster, which of them are
// up, and the epoch of that map.
//
// Keys, all under /fjord/<cluster>/:
//   members/<node>  the node's record (JSON, node_record); written when the node first joins, removed only
//                   by remove_member (decommission). Membership is durable: a node that is down stays a
//                   member, so the cluster knows what it is missing.
//   alive/<node>    the same record bound to the node's lease; it disappears when the node stops
//                   heartbeating for the lease's TTL (crash, partition) or when it leaves (SIGTERM).
//   epoch           the cluster map's epoch, a decimal number: every change of members/ raises it by one,
//                   in the same etcd transaction (compare-and-swap on its mod revision).
//   lifecycle-runner  the node that applies the buckets' lifecycle rules, bound to its alive lease: a
//                   node that is up creates it if absent, so exactly one node holds it while any is up.
// At most one process holds a node id: alive/<node> is created only if absent, so a second process with
// the same id waits until the first one's lease is gone.
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "base/result.h"
#include "cluster/catalog.h"
#include "cluster/etcd_client.h"
#include "io/task.h"

namespace fjord::cluster {

// Names of clusters and nodes: 1 to 63 of [a-z0-9._-], starting with a letter or digit.
base::result<void> check_name(std::string_view what, std::string_view name);

struct node_record {
    std::string node_id;
    std::string s3_endpoint;  // where clients and peers reach its S3 API: http://host:port
    std::int64_t started_unix_ms = 0;
    unsigned cores = 0;
};
std::string encode_node_record(const node_record& node);
base::result<node_record> decode_node_record(std::string_view json);

struct member_state {
    node_record node;
    bool up = false;
    std::int64_t alive_lease = 0;  // the lease of alive/<node> (0 when down)
};

struct cluster_view {
    std::int64_t epoch = 0;
    std::int64_t revision = 0;          // etcd's revision of the snapshot
    std::int64_t read_began_ns = 0;     // monotonic: when the read of it was sent
    std::vector<member_state> members;  // by node id
    std::optional<topology> layout;     // none before `fjord cluster init`
    std::map<std::string, bucket_record> buckets;
    std::int64_t heal_request = 0;                  // the last `fjord cluster heal`'s id
    std::map<std::string, std::string> node_stats;  // stats/<node>: a node's healing figures (JSON)
    std::string lifecycle_runner;                   // the node applying lifecycle rules ("": none)
    std::size_t up() const;
    const member_state* member(std::string_view node_id) const;
};

std::string cluster_prefix(std::string_view cluster);
std::string heal_request_key(std::string_view cluster);
std::string stats_key(std::string_view cluster, std::string_view node);
std::string lifecycle_runner_key(std::string_view cluster);

// One consistent snapshot of the cluster's keys (a single range over its prefix).
io::task<base::result<cluster_view>> read_view(etcd_client& etcd, std::string cluster);
// The view of the cluster's keys as they stood at `revision` (a read's, or a read's with a watch's
// events applied after it); `read_began_ns` as in cluster_view. A record that does not decode fails.
base::result<cluster_view> view_of_keys(std::string_view cluster,
                                        const std::map<std::string, etcd_kv>& keys,
                                        std::int64_t revision, std::int64_t read_began_ns);
// Applies a watch's events, in order, to the keys of a map as of `*revision`: those newer than it (all
// the events of a revision: they share it), raising `*revision` to the newest applied. Returns how many
// were applied.
std::size_t apply_events(std::map<std::string, etcd_kv>& keys, std::int64_t* revision,
                         std::vector<watch_event>& events);
// Adds or updates members/<node> and raises the epoch when it changed; returns the epoch.
io::task<base::result<std::int64_t>> join(etcd_client& etcd, std::string cluster, node_record node);
// Decommissions a node that is down: removes members/<node> and raises the epoch. A node that is up is
// refused (invalid_request), and an unknown one is not_found.
io::task<base::result<std::int64_t>> remove_member(etcd_client& etcd, std::string cluster,
                                                   std::string node_id);

struct membership_options {
    std::string cluster = "fjord";
    node_record node;
    etcd_options etcd;
    std::int64_t lease_ttl_s = 10;       // a node that stops heartbeating is down after this long
    std::int64_t max_backoff_ms = 5000;  // between attempts while etcd cannot be reached
    // Watch the map (false: read it every TTL/3, as for an etcd proxy that cannot stream answers).
    bool watch = true;
    // Called on the agent's core with every snapshot: when its watch sees the map change (the watch's
    // events applied to the last read), on each full read (every 30 s while the watch answers, every
    // TTL/3 while it does not).
    std::function<void(const cluster_view&)> on_view;
    // The node's figures, written to stats/<node> under its lease at a heartbeat when they changed.
    std::function<std::string()> stats;
};

// The node's side of membership: joins, takes alive/<node> under a lease and keeps the lease alive.
// Losing etcd changes nothing else: the node goes on serving, retrying with backoff, and takes
// alive/<node> again if its lease expired meanwhile. On stop it revokes its lease, so the cluster sees
// it leave at once rather than after the TTL.
//
// Lifecycle: run() is spawned on one core and ends after the reactor is asked to stop (it holds the
// reactor for its final revoke, bounded by the call deadline). The counters may be read from any thread.
class membership_agent {
public:
    explicit membership_agent(membership_options options);
    io::task<void> run();

    bool registered() const { return _registered.load(std::memory_order_relaxed); }
    // Why the node is not ready: etcd answers its heartbeats but the map cannot be read from it (a
    // record that does not decode, an answer over the cap): the node serves from a map that stays
    // old for good. An etcd that does not answer at all is not a reason (the node serves on, by
    // design). nullopt when ready. Any thread.
    std::optional<std::string> not_ready() const;
    // Prometheus text: reads of the map (whole, failed), the watch's events applied, and the age of
    // the map served from. Any thread.
    std::string metrics_text() const;
    std::int64_t epoch() const { return _epoch.load(std::memory_order_relaxed); }
    std::size_t members_up() const { return _members_up.load(std::memory_order_relaxed); }
    // Whether this node applies the lifecycle rules now: it holds lifecycle-runner and its lease is
    // certainly alive. The certainty is from the time the lease was last renewed: a node cut off from
    // etcd stops before etcd can let the lease expire and another node take the key, so two nodes
    // never apply the rules at once. Any thread.
    bool runs_lifecycle() const {
        return base::monotonic_now_ns() < _runner_until_ns.load(std::memory_order_relaxed);
    }

private:
    io::task<base::result<void>> take_alive_key();
    io::task<void> heartbeat();
    // Takes lifecycle-runner if no node holds it; `renewed_ns` is when the lease's TTL last began
    // (before the call that renewed it was sent), `ttl_s` its length.
    io::task<void> claim_lifecycle(std::int64_t renewed_ns, std::int64_t ttl_s);
    // Whether this node runs the lifecycle rules until `until` (monotonic; 0: not); logs a change.
    void note_runner(std::int64_t until);
    io::task<void> refresh_view();
    // Reads the whole prefix into _map_keys; false when the read failed (said once, counted).
    io::task<bool> read_map();
    // Applies the watch's events that are newer than _map_keys; whether there were any.
    bool apply_pending();
    io::task<void> pause_ms(std::int64_t ms);  // wakes early when the reactor stops
    // Watches the cluster's prefix: queues its events for refresh_view and marks the map changed
    // when a key other than stats/ changes; spawned by run(), on a connection of its own.
    io::task<void> watch_map();
    // Queues one message's events, or, for a topology change or a queue over its bound, asks for a
    // full read instead.
    void take_events(std::vector<watch_event> events);
    bool map_due() const;                   // whether the map should be read again now
    std::int64_t poll_interval_ms() const;  // TTL/3: heartbeats, and reads without a watch
    void lost_etcd(const base::error& why);

    membership_options _options;
    etcd_client _etcd;
    etcd_client _watch;  // the watch's own connection
    std::int64_t _lease = 0;
    // The agent's core only: the map's keys as of _view_revision (the last full read with the
    // watch's events after it applied); when that read was sent (monotonic); the watch's events
    // not applied yet; whether the next refresh must read the whole map; the next revision the
    // watch wants; the watch saw a change; the watch is open and answering.
    std::map<std::string, etcd_kv> _map_keys;
    std::int64_t _view_revision = 0;
    std::int64_t _view_read_ns = 0;
    std::vector<watch_event> _pending;
    std::int64_t _events_heard_ns = 0;  // monotonic: when the last events queued came
    bool _full_read_needed = true;
    std::int64_t _watch_from = 0;
    bool _map_changed = false;
    bool _watching = false;
    std::string _stats_written;  // the stats last put under the current lease
    std::int64_t _backoff_ms = 0;
    bool _reachable = true;
    bool _view_failing = false;  // the last read of the map failed (said once, in the log)
    bool _waiting_logged = false;
    std::atomic<bool> _registered{false};
    std::atomic<bool> _map_broken{false};         // read failed while etcd answers
    std::atomic<std::uint64_t> _map_failures{0};  // reads of the map that failed
    std::atomic<std::uint64_t> _map_reads{0};     // whole reads of the map
    std::atomic<std::uint64_t> _map_events{0};    // the watch's events applied to the map
    std::atomic<std::int64_t> _map_read_ns{0};    // monotonic, when the last good read began
    std::atomic<std::int64_t> _epoch{0};
    std::atomic<std::size_t> _members_up{0};
    std::atomic<std::int64_t> _runner_until_ns{0};  // monotonic; see runs_lifecycle()
};

}  // namespace fjord::cluster
