#include "cluster/cluster_store.h"

#include <algorithm>
#include <mutex>

#include "base/clock.h"
#include "base/log.h"
#include "io/cross_core.h"
#include "io/reactor.h"

namespace fjord::cluster {

struct cluster_store::core_state {
    explicit core_state(const cluster_store_options& options)
        : etcd(options.etcd),
          operations(std::max<std::size_t>(1, options.max_operations_per_core)) {}
    std::shared_ptr<const cluster_snapshot> snapshot = std::make_shared<cluster_snapshot>();
    std::uint64_t snapshots_taken = 0;                        // catalog_version()
    std::map<std::string, std::unique_ptr<peer_pool>> pools;  // by node id
    std::map<std::string, std::int64_t> suspect_until_ns;
    etcd_client etcd;
    io::semaphore operations;
    std::size_t bucket_lookups = 0;  // learn_bucket's etcd reads in flight on this core
    // Versions a node refused a write for that were stamped further ahead than the clock follows
    // (stamp_clock::max_skew_ms), by shard bucket and key: this core's next unconditional write of
    // the key goes past them (version_for_write). At most max_held_ahead.
    std::map<std::string, stamp> held_ahead;
};

namespace {

store::bucket_info info_of(const bucket_record& b) {
    return store::bucket_info{b.name, b.created_ms, b.attributes};
}

std::shared_ptr<cluster_snapshot> snapshot_of(const cluster_view& view) {
    auto snap = std::make_shared<cluster_snapshot>();
    snap->revision = view.revision;
    snap->layout = view.layout;
    if (view.layout) snap->sets = view.layout->erasure_sets();
    for (const auto& member : view.members) {
        auto where = peer_endpoint(member.node.s3_endpoint);
        if (!where) continue;
        snap->nodes[member.node.node_id] = node_entry{*where, member.up};
    }
    snap->buckets = view.buckets;
    return snap;
}

}  // namespace

cluster_store::cluster_store(cluster_store_options options)
    : _options(std::move(options)), _clock(node_tag(_options.node_id)) {
    _cores.resize(std::max(1u, _options.cores));
}

cluster_store::~cluster_store() = default;

void cluster_store::attach_core(unsigned core) {
    FJORD_ASSERT(core < _cores.size());
    _cores[core] = std::make_unique<core_state>(_options);
}

cluster_store::core_state& cluster_store::local() { return *_cores[io::reactor::current().core()]; }
const cluster_store::core_state& cluster_store::local() const {
    return *_cores[io::reactor::current().core()];
}

io::semaphore& cluster_store::operations() { return local().operations; }

std::shared_ptr<const cluster_snapshot> cluster_store::snapshot() const { return local().snapshot; }

bool cluster_store::ready() const { return local().snapshot->layout.has_value(); }

void cluster_store::publish(const cluster_view& view) {
    std::shared_ptr<const cluster_snapshot> snap = snapshot_of(view);
    for (unsigned c = 0; c < _cores.size(); ++c)
        io::post_to(c, [this, snap] { return take_snapshot(snap); });
}

io::task<void> cluster_store::take_snapshot(std::shared_ptr<const cluster_snapshot> snapshot) {
    core_state& cs = local();
    if (snapshot->revision < cs.snapshot->revision) co_return;
    if (snapshot->layout && !cs.snapshot->layout) {
        LOG_INFO("cluster %s: topology of %zu set(s) of %u+%u: serving data",
                 _options.cluster.c_str(), snapshot->sets.size(), snapshot->layout->shape.k,
                 snapshot->layout->shape.m);
        const std::int64_t age_ms = snapshot->layout->leftover_age_ms;
        if (age_ms > 0 && age_ms != _options.leftover_age_ms && io::reactor::current().core() == 0)
            LOG_INFO(
                "cluster %s: heal leftover age %lld s, the cluster's (fjord cluster init); "
                "this node's --heal-leftover-age-s (%lld s) is not used",
                _options.cluster.c_str(), static_cast<long long>(age_ms / 1000),
                static_cast<long long>(_options.leftover_age_ms / 1000));
    } else if (snapshot->layout && cs.snapshot->layout && io::reactor::current().core() == 0 &&
               encode_topology(*snapshot->layout) != encode_topology(*cs.snapshot->layout))
        LOG_INFO("cluster %s: topology changed: %s", _options.cluster.c_str(),
                 encode_topology(*snapshot->layout).c_str());
    cs.snapshot = std::move(snapshot);
    ++cs.snapshots_taken;
}

std::uint64_t cluster_store::catalog_version() const { return local().snapshots_taken; }

// ---- nodes ----

peer_pool* cluster_store::pool_for(const std::string& node) {
    core_state& cs = local();
    auto known = cs.snapshot->nodes.find(node);
    if (known == cs.snapshot->nodes.end()) return nullptr;
    auto& pool = cs.pools[node + "@" + known->second.where.host + ":" +
                          std::to_string(known->second.where.port)];
    if (!pool) pool = std::make_unique<peer_pool>(known->second.where, _options.peers);
    return pool.get();
}

bool cluster_store::usable(const std::string& node) {
    core_state& cs = local();
    auto known = cs.snapshot->nodes.find(node);
    if (known == cs.snapshot->nodes.end() || !known->second.up) return false;
    auto s = cs.suspect_until_ns.find(node);
    if (s == cs.suspect_until_ns.end()) return true;
    const std::int64_t now = base::monotonic_now_ns();
    if (now < s->second) return false;
    // Past its time: one request tries it again (and suspects it anew if it fails).
    cs.suspect_until_ns.erase(s);
    return true;
}

void cluster_store::suspect(const std::string& node) {
    // This node answers its own requests whenever it runs them: a failure there is the shard's.
    if (node == _options.node_id) return;
    local().suspect_until_ns[node] = base::monotonic_now_ns() + _options.suspect_ms * 1'000'000;
}

base::result<key_place> cluster_store::place(const std::string& bucket,
                                             const std::string& key) const {
    const cluster_snapshot& snap = *local().snapshot;
    if (!snap.layout)
        return base::fail(base::errc::service_unavailable,
                          "the cluster has no topology yet (fjord cluster init)");
    auto b = snap.buckets.find(bucket);
    if (b == snap.buckets.end()) return base::fail(base::errc::no_such_bucket, "no such bucket");
    key_place p;
    p.bucket = bucket;
    p.shard_bucket = shard_bucket(bucket, b->second.generation);
    p.key = key;
    p.object_key = key;
    p.k = snap.layout->shape.k;
    p.m = snap.layout->shape.m;
    p.block_bytes = snap.layout->block_bytes;
    const std::uint64_t h = object_hash(bucket, key);
    const erasure_set& set = snap.sets[choose_set(h, snap.sets)];
    FJORD_ASSERT(p.k >= 1 && set.drives.size() >= p.width(), "a set has a drive for every shard");
    p.nodes.resize(p.width());
    for (unsigned i = 0; i < p.width(); ++i)
        p.nodes[i] = set.drives[shard_drive(h, i, p.width())].node_id;
    // Shard i's node is the drive i places past the hash's start: every drive of the set gets one.
    FJORD_ASSERT(p.nodes[0] == set.drives[h % p.width()].node_id);
    p.rebuilding.assign(p.width(), false);
    refresh_marks(p);
    return p;
}

void cluster_store::refresh_marks(key_place& place) const {
    const cluster_snapshot& snap = *local().snapshot;
    place.rebuilding.resize(place.width(), false);
    for (unsigned i = 0; i < place.width() && snap.layout; ++i)
        if (snap.layout->is_rebuilding(place.nodes[i])) place.rebuilding[i] = true;
}

// ---- heal queue ----

void cluster_store::queue_heal(const key_place& place) {
    std::lock_guard<std::mutex> lock(_heal_mutex);
    if (_heal_items.size() >= _options.heal_queue_limit) {
        ++_heal_dropped;
        return;
    }
    _heal_items.push_back({place.bucket, place.object_key, place.space, place.key});
    _heal_queued = _heal_items.size();
}

std::vector<cluster_store::heal_item> cluster_store::take_heal_queue(std::size_t max) {
    std::lock_guard<std::mutex> lock(_heal_mutex);
    std::vector<heal_item> out;
    while (!_heal_items.empty() && out.size() < max) {
        out.push_back(std::move(_heal_items.front()));
        _heal_items.pop_front();
    }
    _heal_queued = _heal_items.size();
    return out;
}

// ---- buckets ----

bool cluster_store::bucket_exists(const std::string& name) const {
    return local().snapshot->buckets.count(name) > 0;
}

std::vector<store::bucket_info> cluster_store::list_buckets() const {
    std::vector<store::bucket_info> out;
    for (const auto& [name, b] : local().snapshot->buckets) out.push_back(info_of(b));
    return out;  // the map is sorted by name
}

std::optional<store::bucket_info> cluster_store::find_bucket(const std::string& name) const {
    const auto& buckets = local().snapshot->buckets;
    auto it = buckets.find(name);
    if (it == buckets.end()) return std::nullopt;
    return info_of(it->second);
}

io::task<base::result<std::optional<store::bucket_info>>> cluster_store::find_bucket_now(
    std::string name) {
    auto read = co_await read_bucket_record(local().etcd, _options.cluster, name);
    if (!read) co_return read.as_failure();
    const bool seen = bucket_exists(name);
    if (*read || seen) co_await apply_bucket_change(name, *read);
    if (!*read) co_return std::optional<store::bucket_info>{};
    co_return std::optional<store::bucket_info>(info_of(**read));
}

std::map<std::string, stamp>& cluster_store::local_held_ahead() { return local().held_ahead; }

std::int64_t cluster_store::leftover_age_ms() const {
    const auto& layout = local().snapshot->layout;
    return layout && layout->leftover_age_ms > 0 ? layout->leftover_age_ms
                                                 : _options.leftover_age_ms;
}

io::task<base::result<void>> cluster_store::learn_bucket(std::string name) {
    // Enough for a client that makes a bucket through one node and writes through all of them at once;
    // past it a request for an unknown bucket is answered from the view (NoSuchBucket).
    constexpr std::size_t max_bucket_lookups_per_core = 8;
    core_state& cs = local();
    if (!ready() || cs.bucket_lookups >= max_bucket_lookups_per_core)
        co_return base::result<void>{};
    ++cs.bucket_lookups;
    auto found = co_await find_bucket_now(std::move(name));
    --local().bucket_lookups;
    if (found) co_return base::result<void>{};
    LOG_DEBUG("cluster: looking up a bucket in etcd failed: %s", found.err().message.c_str());
    // Not known here and not looked up: whether it exists cannot be said now (503, retried)
    co_return base::fail(base::errc::service_unavailable, "cannot look the bucket up in etcd now");
}

bool cluster_store::bucket_has_attribute(const std::string& bucket, const std::string& name) const {
    const auto& buckets = local().snapshot->buckets;
    auto it = buckets.find(bucket);
    return it != buckets.end() && it->second.attributes.count(name) > 0;
}

io::task<void> cluster_store::apply_bucket_change(std::string name,
                                                  std::optional<bucket_record> record) {
    for (unsigned c = 0; c < _cores.size(); ++c) {
        auto change = [this, name, record] {
            return [](cluster_store* self, std::string n,
                      std::optional<bucket_record> r) -> io::task<bool> {
                core_state& cs = self->local();
                auto next = std::make_shared<cluster_snapshot>(*cs.snapshot);
                if (r) {
                    next->buckets[n] = *r;
                    // A snapshot read before this change must not undo it.
                    next->revision = std::max(next->revision, r->mod_revision);
                } else {
                    next->buckets.erase(n);
                }
                cs.snapshot = std::move(next);
                ++cs.snapshots_taken;
                co_return true;
            }(this, name, record);
        };
        (void)co_await io::invoke_on(c, std::move(change));
    }
}

io::task<base::result<void>> cluster_store::create_bucket(std::string name) {
    if (!ready())
        co_return base::fail(base::errc::service_unavailable,
                             "the cluster has no topology yet (fjord cluster init)");
    auto made = co_await create_bucket_record(local().etcd, _options.cluster, name);
    if (!made) co_return made.as_failure();
    co_await apply_bucket_change(name, *made);
    co_return base::result<void>{};
}

// A write acknowledged between the emptiness probe and the record's removal would be lost, and its
// node-local shard bucket made again after the drop: so every node up in the map first closes the
// bucket's shard buckets to new shards (waiting for those already committing), then the probe runs.
// Fences not lifted expire after shard_service::fence_ms, by when every node has seen the deletion.
io::task<base::result<void>> cluster_store::delete_bucket(std::string name) {
    auto b = local().snapshot->buckets.find(name);
    const std::string generation =
        b == local().snapshot->buckets.end() ? std::string() : b->second.generation;
    const std::string fence = generation.empty() ? std::string() : shard_bucket(name, generation);
    if (!fence.empty()) {
        if (auto fenced = co_await fence_bucket(fence, true); !fenced) {
            (void)co_await fence_bucket(fence, false);
            co_return fenced;
        }
    }
    store::list_request probe;
    probe.bucket = name;
    probe.max_keys = 1;
    auto page = co_await list(probe);
    base::result<void> removed;
    if (!page)
        removed = page.as_failure();
    else if (!page->entries.empty())
        removed = base::fail(base::errc::bucket_not_empty, "the bucket is not empty");
    else if (_options.remove_bucket_record)
        removed = co_await _options.remove_bucket_record(name);
    else
        removed = co_await delete_bucket_record(local().etcd, _options.cluster, name);
    if (!removed) {
        if (!fence.empty()) (void)co_await fence_bucket(fence, false);
        co_return removed;
    }
    co_await apply_bucket_change(name, std::nullopt);
    if (!fence.empty()) co_await announce_deleted(fence);
    // Objects, and the unfinished uploads' records and parts: they go with the bucket, as on AWS.
    if (!generation.empty())
        for (char space : {'c', 'u', 'p'})
            io::spawn(drop_shard_buckets(shard_bucket(name, generation, space)));
    co_return base::result<void>{};
}

io::task<void> cluster_store::announce_deleted(std::string shards) {
    auto snap = local().snapshot;
    for (const auto& [node, entry] : snap->nodes) {
        if (!entry.up || node == _options.node_id) continue;
        if (peer_pool* pool = pool_for(node)) {
            auto link = co_await pool->acquire();
            (void)co_await link->call("POST", rpc_path("fence", shards), "deleted=1", {}, "");
        }
    }
}

io::task<void> cluster_store::forget_bucket(std::string shards) {
    // Each core by the generation it knows: one that already has the name made again keeps it.
    for (unsigned c = 0; c < _cores.size(); ++c) {
        auto forget = [this, shards] {
            return [](cluster_store* self, std::string gone) -> io::task<bool> {
                core_state& cs = self->local();
                for (const auto& [name, b] : cs.snapshot->buckets)
                    if (shard_bucket(name, b.generation) == gone) {
                        auto next = std::make_shared<cluster_snapshot>(*cs.snapshot);
                        next->buckets.erase(name);
                        cs.snapshot = std::move(next);
                        ++cs.snapshots_taken;
                        break;
                    }
                co_return true;
            }(this, shards);
        };
        (void)co_await io::invoke_on(c, std::move(forget));
    }
}

io::task<base::result<void>> cluster_store::fence_bucket(std::string shards, bool on) {
    auto snap = local().snapshot;
    for (const auto& [node, entry] : snap->nodes) {
        if (!entry.up) continue;  // down: it takes no shard (and learns the deletion on its way up)
        peer_pool* pool = pool_for(node);
        bool confirmed = false;
        if (pool) {
            auto link = co_await pool->acquire();
            auto answer =
                co_await link->call(on ? "POST" : "DELETE", rpc_path("fence", shards), "", {}, "");
            confirmed = answer && answer->status == 200;
        }
        if (on && !confirmed)
            co_return base::fail(
                base::errc::service_unavailable,
                "node " + node + " did not close the bucket to new writes: try again");
    }
    co_return base::result<void>{};
}

// Removes a deleted bucket's node-local shard buckets (tombstones, mostly) on every node that answers;
// a node that does not keeps them until the scanner finds them (healer.h).
io::task<void> cluster_store::drop_shard_buckets(std::string shards) {
    auto snap = local().snapshot;
    for (const auto& [node, entry] : snap->nodes) {
        if (!entry.up) continue;
        peer_pool* pool = pool_for(node);
        if (!pool) continue;
        for (int round = 0; round < 10'000; ++round) {
            auto link = co_await pool->acquire();
            auto answer = co_await link->call("DELETE", rpc_path("bucket", shards), "", {}, "");
            if (!answer || answer->status != 202) break;
        }
    }
}

io::task<base::result<void>> cluster_store::set_bucket_attribute(std::string bucket,
                                                                 std::string name,
                                                                 std::optional<std::string> value) {
    if (name == store::versioning_attribute)
        co_return base::fail(base::errc::not_implemented,
                             "versioning is not built for clusters yet");
    auto changed = co_await set_bucket_record_attribute(local().etcd, _options.cluster, bucket,
                                                        name, std::move(value));
    if (!changed) co_return changed.as_failure();
    co_await apply_bucket_change(bucket, *changed);
    co_return base::result<void>{};
}

}  // namespace fjord::cluster
