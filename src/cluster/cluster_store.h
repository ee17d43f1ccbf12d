#pragma once
// The erasure-coded cluster's implementation of the object-store boundary (store/object_store.h):
// what the S3 front end of a cluster node talks to (docs/cluster.md, "Data path").
//
// A node that receives a request is the request's coordinator. For a key it finds the bucket in the
// cluster's catalog (etcd, catalog.h), the key's erasure set (rendezvous hashing over the topology's
// sets, placement.h) and the set's k + m nodes in shard order. Then:
//  - put: reads the body a stripe at a time, encodes the stripe's m parity blocks (ISA-L), and streams
//    block i of every stripe with its CRC32C to the node of shard i, all nodes side by side, over the
//    data plane (rpc.h, peer.h); after the last stripe it sends each node the shard's record, with a new
//    version stamp (stamp.h), and each node commits it to its own engine. The write is acknowledged
//    once a write quorum W = k + 1 of the nodes committed it (docs/cluster.md says why k + 1); a write
//    below full width goes on the heal queue.
//  - head/get: asks every node of the set for its record of the key (a quorum read: R = k + m - W + 1
//    answers at least, the rest while they come within a short grace), takes the newest version that
//    can be read (a tombstone, or data with k shards), then reads the range's stripes from k of the
//    version's shards, data shards first, checks every block's CRC32C, and rebuilds from parity any
//    block whose shard fails, is corrupt or answers too slowly (a hedged read).
//  - remove: a tombstone version on every node of the set, acknowledged at W.
//  - conditional writes (If-None-Match, If-Match): the quorum read gives the current version V; the
//    write goes out with "at most V" (rpc.h, acceptance), which each node checks atomically in its
//    engine; since W > (k + m) / 2, two writes that both read V cannot both reach W nodes.
//  - list: every node's shards of the bucket, merged by key (the newest version wins; tombstones drop
//    out), grouped by the delimiter here.
// Buckets and their attributes live in etcd; every core keeps the latest snapshot (publish()), and a
// change made here is applied on this node's cores before it is acknowledged.
//
//  - multipart uploads (multipart.cc): an upload's record and each part are objects of their own, in
//    namespaces of the bucket kept in the set of the object's key; completing writes a manifest
//    version of the key that lists its parts, so no byte is copied.
// Not built yet (answered not_implemented): versioning, KV buckets, in-place record updates (object
// tagging and ACLs).
//
// Threading: one object shared by every core; each core has its own state (snapshot, connection
// pools, etcd client, admission), created by attach_core() on that core's reactor thread.
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/units.h"
#include "cluster/catalog.h"
#include "cluster/erasure.h"
#include "cluster/etcd_client.h"
#include "cluster/membership.h"
#include "cluster/peer.h"
#include "cluster/rpc.h"
#include "cluster/stamp.h"
#include "cluster/stripe.h"
#include "io/semaphore.h"
#include "store/object_store.h"

namespace fjord::cluster {

class byte_pipe;
struct upload;

struct cluster_store_options {
    std::string cluster = "fjord";
    std::string node_id;
    etcd_options etcd;
    peer_options peers;
    unsigned cores = 1;
    // Once a quorum of the set answered a metadata read, how long it still waits for the others.
    std::int64_t straggler_ms = 100;
    // A shard read that has not delivered its block this long is replaced by another shard.
    std::int64_t hedge_ms = 2'000;
    // A node whose request failed for a transport reason is skipped this long (then tried again).
    std::int64_t suspect_ms = 2'000;
    // Data-plane operations a core runs at once; each holds a stripe of buffers.
    std::size_t max_operations_per_core = 16;
    // A PUT whose body length is not declared is read into memory first, up to this size.
    std::uint64_t max_unsized_put_bytes = 64 * base::MiB;
    // Objects written below full width, remembered for the healer (on core 0); past it, the scanner
    // finds them.
    std::size_t heal_queue_limit = 100'000;
    // A version on fewer than W nodes (a write that failed, or one still going) is left alone this
    // long after its last byte, then withdrawn by healing (or, readable, healed). Its writer decides
    // it (acknowledges it, or withdraws it) within half of this (docs/cluster.md, "Versions").
    std::int64_t leftover_age_ms = 60'000;
    // Tombstones on every node of the set are removed once this old (a write slower than this that
    // arrives after could bring back what was deleted).
    std::int64_t tombstone_age_ms = 24LL * 3600 * 1000;
    // Where the catalog is not etcd (the simulation publishes its own views): removes a bucket's
    // record. Empty: etcd's (catalog.h, delete_bucket_record).
    std::function<io::task<base::result<void>>(std::string bucket)> remove_bucket_record;
};

// One node as the coordinator sees it.
struct node_entry {
    io::endpoint where;
    bool up = false;
};

// An immutable picture of the cluster a core works from.
struct cluster_snapshot {
    std::int64_t revision = 0;
    std::optional<topology> layout;
    std::vector<erasure_set> sets;
    std::map<std::string, node_entry> nodes;
    std::map<std::string, bucket_record> buckets;
};

// Where a key's shards live.
struct key_place {
    std::string bucket;        // the cluster bucket
    std::string shard_bucket;  // the node-local bucket of its shards
    std::string key;         // the key there (an object's, or an upload's or part's: multipart.cc)
    char space = 'c';        // the namespace (stripe.h, shard_bucket)
    std::string object_key;  // the object key the set was chosen by
    unsigned k = 0, m = 0;
    std::uint32_t block_bytes = 0;
    std::vector<std::string> nodes;  // shard i's node is nodes[i]
    // By shard index: the node is rebuilding (catalog.h, rebuild_mark): its "absent" proves nothing.
    std::vector<bool> rebuilding;
    unsigned width() const { return k + m; }
    unsigned write_quorum() const { return m == 0 ? k : k + 1; }
    unsigned read_quorum() const { return width() - write_quorum() + 1; }
};

// What one node said about a key.
struct node_report {
    enum class state : std::uint8_t { pending, absent, present, failed } kind = state::pending;
    std::vector<shard_meta> versions;  // present: every version the node holds, newest first
    base::error failure;
    // The node said its drive is being rebuilt (rpc.h): not an answer, whatever the map says.
    bool rebuilding = false;
};

// The version a quorum read settled on.
struct read_decision {
    bool found = false;  // false: absent, or deleted
    shard_meta meta;     // of one holder (the object's record, the version)
    std::vector<std::optional<shard_meta>> shards;  // by shard index: the sound holders' records
    std::vector<bool> damaged;  // by shard index: the node holds this version, damaged
    std::size_t answered = 0;
    std::size_t holders = 0;  // sound ones
    bool full_width = false;  // every node holds this version, sound
    bool others = false;      // some node holds another version too (older, or a failed write's)
};

// The newest version that the nodes' reports (by shard index) allow reading: a tombstone, or data on k
// sound shards at least. A newer version is passed over only when it cannot have reached its write
// quorum (counting its damaged shards and the nodes that did not answer); otherwise, and when fewer
// than the read quorum answered, the decision fails (service_unavailable: try again). A rebuilding
// node's answer (marked in the place, or said by the node itself) is not counted as one: what it
// lacks, the node it replaced may have held.
//
// With `undecided_young_ms` (a read that answers a client: quorum_read), a version younger than that
// and not known to be on W nodes (its writer may still withdraw it) is not returned: a read that
// returned it, followed by its withdrawal, would let the next read go back to the version before
// (reads must be monotonic). Below W for sure, it is passed over; possibly on W (nodes that did not
// answer), the decision fails (service_unavailable). Healing decides such a version only after
// that age. Older, a version below W among the answers (a failed write's leftover, which healing
// has not decided yet) is returned only from k sound records, whatever its kind, and is not passed
// over while the nodes that did not answer could make up k: a read that returned it and a read that
// passed it over, one after the other, would have the key go back (the linearizability check of
// the fault test's histories found such reads).
base::result<read_decision> decide_version(const key_place& place,
                                           const std::vector<node_report>& by_node,
                                           std::int64_t undecided_young_ms = 0);

// How a read judges one version of a key, newest first: decide_version's rule, which listings share
// so that a listing shows what a GET of the key returns. Take it; pass over it to the version before;
// or neither now (young: its writer may still withdraw it; unreadable: too few of its holders
// answered), where a GET answers 503.
enum class version_judgement : std::uint8_t { take, pass_over, young, unreadable };
struct version_evidence {
    shard_kind kind = shard_kind::object;
    std::int64_t written_ms = 0;  // written_ms() of its record
    std::size_t sound = 0;        // nodes that answered holding it with a sound record
    std::size_t held = 0;         // nodes that answered holding it
    std::size_t unanswered = 0;   // nodes of its set that did not answer
};
// `undecided_young_ms` as decide_version's (0: not a client's read); `now_ms` Unix time.
version_judgement judge_version(unsigned k, unsigned write_quorum, const version_evidence& v,
                                std::int64_t undecided_young_ms, std::int64_t now_ms);

// When a version's write ended, by its writer's clock: a failed write's leftovers age from it (a long
// upload's stamp is as old as its first byte).
std::int64_t written_ms(const shard_meta& v);

// What a completion or an abort wrote over an upload's record before it acts (cluster_multipart.cc):
// each must win that conditional write first, so they exclude each other.
struct upload_claim {
    enum class state : std::uint8_t { open = 0, completing = 1, aborting = 2 };
    state what = state::open;
    std::string parts;       // completing: the parts it chose, digested (a retry of it goes on)
    std::int64_t at_ms = 0;  // Unix time of the claim
};

class cluster_store final : public store::object_store,
                            public store::object_copier,
                            public store::upload_store,
                            public store::bucket_attributes,
                            public store::bucket_catalog {
public:
    explicit cluster_store(cluster_store_options options);
    ~cluster_store() override;

    // On each reactor thread before it serves.
    void attach_core(unsigned core);
    // A snapshot read from etcd (membership agent, any core): every core takes it unless it has a
    // newer one.
    void publish(const cluster_view& view);
    // Whether this core has a topology to place objects with.
    bool ready() const;

    // ---- object_store ----
    io::task<base::result<void>> create_bucket(std::string name) override;
    io::task<base::result<void>> delete_bucket(std::string name) override;
    bool bucket_exists(const std::string& name) const override;
    std::vector<store::bucket_info> list_buckets() const override;
    std::optional<store::bucket_info> find_bucket(const std::string& name) const override;
    // At most max_bucket_lookups_per_core in flight on a core: requests naming buckets that do not
    // exist cannot turn into an unbounded stream of etcd reads.
    io::task<base::result<void>> learn_bucket(std::string name) override;
    io::task<base::result<std::optional<store::bucket_info>>> find_bucket_now(
        std::string name) override;
    store::bucket_catalog* lagging_catalog() override { return this; }
    bool bucket_has_attribute(const std::string& bucket, const std::string& name) const override;
    // Changes with every snapshot this core takes (the catalog may have changed on another node).
    std::uint64_t catalog_version() const override;
    io::task<base::result<void>> set_bucket_attribute(std::string bucket, std::string name,
                                                      std::optional<std::string> value) override;
    io::task<base::result<store::object_record>> put(store::put_request request,
                                                     store::byte_source& body,
                                                     store::record_finisher finish) override;
    io::task<base::result<store::object_record>> head(std::string bucket, std::string key) override;
    io::task<base::result<store::object_record>> get(std::string bucket, std::string key,
                                                     store::read_planner plan,
                                                     store::byte_sink& sink) override;
    io::task<base::result<std::optional<store::object_record>>> remove(
        std::string bucket, std::string key, store::write_conditions conditions) override;
    io::task<base::result<store::object_record>> copy(store::copy_request request,
                                                      store::copy_planner plan) override;
    io::task<base::result<store::list_page>> list(store::list_request request) override;
    io::task<base::result<std::string>> create_upload(std::string bucket, std::string key,
                                                      store::object_record metadata,
                                                      std::string checksum_type) override;
    io::task<base::result<store::upload_record>> get_upload(std::string bucket, std::string key,
                                                            std::string upload_id) override;
    io::task<base::result<store::part_record>> upload_part(store::part_request request,
                                                           store::byte_source& body,
                                                           store::part_finisher finish) override;
    io::task<base::result<store::part_record>> copy_part(store::part_copy_request request,
                                                         store::part_copy_planner plan) override;
    io::task<base::result<store::object_record>> complete_upload(
        std::string bucket, std::string key, std::string upload_id,
        store::upload_finalizer finalize, store::write_conditions conditions) override;
    io::task<base::result<void>> abort_upload(std::string bucket, std::string key,
                                              std::string upload_id) override;
    io::task<base::result<std::vector<store::upload_record>>> list_uploads(
        std::string bucket, std::string prefix, std::string key_marker,
        std::string upload_id_marker, std::uint32_t max_uploads) override;
    store::storage_stats stats() const override { return {}; }
    // No versions and no changes of a record in place yet (ROADMAP: the cluster's second wave).
    store::object_copier* copier_of(const std::string&) override { return this; }
    store::upload_store* uploads_of(const std::string&) override { return this; }
    store::bucket_attributes* attributes_of(const std::string&) override { return this; }

    // ---- the cluster's own steps (healer, CLI, tests) ----
    base::result<key_place> place(const std::string& bucket, const std::string& key) const;
    // Where a key of a namespace (stripe.h, shard_bucket) lives: in the set of the object key it
    // belongs to.
    base::result<key_place> place_in(char space, const std::string& bucket,
                                     const std::string& object_key, std::string local_key) const;
    // Asks every node of the set for its record of the key and settles on a version.
    io::task<base::result<read_decision>> quorum_read(key_place place);
    // Each node's records of these keys (one request per node), by node then key; a node that
    // could not be asked has failed reports.
    // With `insist`, nodes down in etcd's view or suspect are asked too, at once.
    io::task<std::vector<std::vector<node_report>>> read_records(key_place place,
                                                                 std::vector<std::string> keys,
                                                                 bool insist = false);
    // Copies the decided version onto the set's nodes that lack it (rebuilding their shards from k
    // others); true when every node of the set then holds it. data_corrupted: the version can never
    // be healed (a manifest whose parts are gone); trying again will not help.
    io::task<base::result<bool>> heal_key(key_place place);
    // Adds the rebuilding marks of the place's nodes in this core's newest snapshot to those it had: a
    // node marked while a read was going, or unmarked meanwhile (its "absent" may predate its healing),
    // does not count as an answer (decide_version).
    void refresh_marks(key_place& place) const;
    // A DeleteBucket through another node removed the bucket whose shard bucket this is (shard_service
    // on_bucket_deleted): every core forgets it now, not at the next read of the map.
    io::task<void> forget_bucket(std::string shard_bucket);
    // Objects written below full width since start, waiting for the healer (core 0's queue).
    struct heal_item {
        std::string bucket;
        std::string object_key;
        char space = 'c';
        std::string key;  // in the namespace
    };
    std::vector<heal_item> take_heal_queue(std::size_t max);
    std::size_t heal_queue_length() const { return _heal_queued.load(); }
    std::uint64_t heal_queue_dropped() const { return _heal_dropped.load(); }
    const cluster_store_options& options() const { return _options; }
    stamp_clock& clock() { return _clock; }
    // The age at which a write left below W is decided by healing: the topology's (one value for the
    // cluster), else this node's option (topologies written before it was kept there).
    std::int64_t leftover_age_ms() const;
    // A client's read leaves a version below W this young undecided (decide_version): a write's
    // coordinator withdraws it only within L/2 of its last byte, by the nodes' clocks (which agree
    // within L/4), so past 3L/4 no withdrawal can take a version a read returned.
    std::int64_t client_read_young_ms() const { return leftover_age_ms() * 3 / 4; }
    std::shared_ptr<const cluster_snapshot> snapshot() const;
    // The node-local shard buckets, by cluster bucket name, as this core knows them.
    peer_pool* pool_for(const std::string& node);
    bool usable(const std::string& node);  // up and not suspect
    void suspect(const std::string& node);

private:
    struct core_state;
    core_state& local();
    // This core's admission of data-plane operations (each holds a stripe of buffers).
    io::semaphore& operations();
    const core_state& local() const;
    io::task<void> take_snapshot(std::shared_ptr<const cluster_snapshot> snapshot);
    // Applies a bucket change this node made to every core of the node before it is answered.
    io::task<void> apply_bucket_change(std::string name, std::optional<bucket_record> record);
    io::task<void> drop_shard_buckets(std::string shard_bucket);
    // Closes a bucket generation's shard buckets to new shards on every node up in the map (`on`),
    // or lifts that (best effort); fails unless every such node confirmed the fence.
    io::task<base::result<void>> fence_bucket(std::string shard_bucket, bool on);
    // Tells every node up in the map that the bucket generation is gone (best effort; a node not
    // told learns it at its next read of the map, its writes refused by its fence meanwhile).
    io::task<void> announce_deleted(std::string shard_bucket);
    void queue_heal(const key_place& place);

    struct write_outcome;
    // Writes one version (data from `body`, or a tombstone) to every node of the place.
    io::task<base::result<store::object_record>> write_version(
        const key_place& place, store::byte_source* body, std::uint64_t size_bytes,
        const store::record_finisher& finish, shard_kind kind, acceptance accept, stamp version,
        std::string upload_id = {}, std::vector<manifest_part> parts = {});
    // `withdraw_by`: until when (Unix ms) its nodes take the write's withdrawal; 0: too late.
    base::failure write_failed(const key_place& place, const std::vector<upload>& ups,
                               acceptance accept, stamp version, std::int64_t withdraw_by);
    io::task<base::result<std::optional<stamp>>> current_for_condition(
        const key_place& place, const store::write_conditions& conditions);
    void remember_held(const key_place& place, const stamp& held);
    stamp unconditional_version(const key_place& place);
    std::map<std::string, stamp>& local_held_ahead();
    // How a write is accepted and its new version: after the quorum read its conditions need.
    io::task<base::result<std::pair<acceptance, stamp>>> version_for_write(
        const key_place& place, const store::write_conditions& conditions);
    io::task<base::result<void>> read_range(const key_place& place, const read_decision& decision,
                                            std::uint64_t first, std::uint64_t length,
                                            store::byte_sink& sink);
    // read_range of an object's stripes, or of a manifest's parts (each an object of its own).
    io::task<base::result<void>> read_object(const key_place& place, const read_decision& decision,
                                             std::uint64_t first, std::uint64_t length,
                                             store::byte_sink& sink);
    // The shards of a namespace ('c', 'u', 'p': stripe.h, shard_bucket) of a bucket, merged across
    // the nodes (list()'s work).
    io::task<base::result<store::list_page>> list_shards(char space, store::list_request request);
    // A small object of the cluster's own (an upload's record), whole; nullopt when absent.
    io::task<base::result<std::optional<std::string>>> read_small(key_place place);
    // Deletes a key of the cluster's own (an upload's record, a part attempt) with a tombstone, which
    // healing carries to the nodes it missed; without one (fewer than W nodes took it), removes every
    // version from the nodes it reaches (best effort).
    io::task<void> purge(key_place place);
    // data_corrupted: a manifest whose parts are gone, which no heal can repair.
    io::task<base::result<bool>> may_take_up(const key_place& place, const read_decision& d,
                                             bool changes);
    // Whether every part a manifest names can still be read (false: one is gone for sure).
    io::task<base::result<bool>> parts_readable(const key_place& place, const shard_meta& manifest);
    // A completed upload's record and the part attempts its manifest did not choose go (spawned).
    void purge_completed(const std::string& bucket, const std::string& key,
                         const std::string& upload_id, const std::vector<std::string>& attempts,
                         const std::vector<manifest_part>& chosen);
    // Whether an unacknowledged completion of the upload may still stand (its manifest is on some
    // node): failed while it is undecided; true when it stands (the upload is complete).
    io::task<base::result<bool>> completed_meanwhile(const std::string& bucket,
                                                     const std::string& key,
                                                     const std::string& upload_id,
                                                     std::vector<manifest_part>& chosen);
    // An upload's record, with its parts when asked (the newest durable attempt of each number); the
    // keys of every attempt of every part into `attempts`, its claim into `claim`, when given.
    io::task<base::result<store::upload_record>> load_upload(
        std::string bucket, std::string key, std::string upload_id, bool with_parts,
        std::vector<std::string>* attempts = nullptr, upload_claim* claim = nullptr);
    // The upload exists and no completion or abort has claimed it: a part may be added.
    io::task<base::result<void>> require_open_upload(const std::string& bucket,
                                                     const std::string& key,
                                                     const std::string& upload_id);
    // Writes `now` over the upload's record if it still holds `was` (412 if another claim came first,
    // 409 if one crossed it; 503 when the outcome is unknown).
    io::task<base::result<void>> claim_upload(const std::string& bucket, const std::string& key,
                                              const store::upload_record& u,
                                              const upload_claim& was, const upload_claim& now);
    // What a Complete does with the upload's claim before it writes its manifest; the claim it
    // wrote into `mine`.
    io::task<base::result<void>> claim_for_completion(
        const std::string& bucket, const std::string& key, const store::upload_record& u,
        const upload_claim& found, const std::vector<manifest_part>& chosen, upload_claim& mine);
    io::task<void> read_into(key_place place, read_decision decision, store::byte_range range,
                             byte_pipe* pipe,
                             const std::function<void(std::span<const std::byte>)>* observe);

    cluster_store_options _options;
    stamp_clock _clock;
    std::vector<std::unique_ptr<core_state>> _cores;
    // The heal queue is shared by the cores: a degraded write is rare, and the lock is never held
    // across a suspension.
    std::mutex _heal_mutex;
    std::deque<heal_item> _heal_items;
    std::atomic<std::size_t> _heal_queued{0};
    std::atomic<std::uint64_t> _heal_dropped{0};
};

}  // namespace fjord::cluster
