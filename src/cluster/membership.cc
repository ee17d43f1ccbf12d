#include "cluster/membership.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>
#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "base/encoding.h"
#include "base/log.h"
#include "io/ops.h"
#include "io/reactor.h"

namespace fjord::cluster {

namespace {

using json = nlohmann::json;

// Bounds the compare-and-swap retries of one membership change (each retry means another change won).
constexpr int max_epoch_attempts = 16;

std::string member_key(std::string_view cluster, std::string_view node) {
    return cluster_prefix(cluster) + "members/" + std::string(node);
}
std::string alive_key(std::string_view cluster, std::string_view node) {
    return cluster_prefix(cluster) + "alive/" + std::string(node);
}
std::string epoch_key(std::string_view cluster) { return cluster_prefix(cluster) + "epoch"; }

struct epoch_now {
    std::int64_t value = 0;
    std::int64_t mod_revision = 0;  // 0: no epoch yet
};

io::task<base::result<epoch_now>> read_epoch(etcd_client& etcd, std::string cluster) {
    auto got = co_await etcd.range(epoch_key(cluster));
    if (!got) co_return got.as_failure();
    epoch_now out;
    if (got->kvs.empty()) co_return out;
    auto n = base::parse_u64(got->kvs[0].value);
    if (!n) co_return base::fail(base::errc::data_corrupted, "the cluster epoch is not a number");
    out.value = static_cast<std::int64_t>(*n);
    out.mod_revision = got->kvs[0].mod_revision;
    co_return out;
}

// One membership change: `change` (the puts and deletes, plus conditions of its own) applied together with
// epoch + 1 when the epoch did not move meanwhile. Returns the new epoch, or, when the change's own
// conditions failed, the failure branch's read in `failed_read` and epoch 0.
io::task<base::result<std::int64_t>> change_with_epoch(etcd_client& etcd,
                                                       const std::string& cluster,
                                                       txn_request change,
                                                       std::vector<etcd_kv>* failed_read) {
    for (int attempt = 0; attempt < max_epoch_attempts; ++attempt) {
        auto now = co_await read_epoch(etcd, cluster);
        if (!now) co_return now.as_failure();
        txn_request txn = change;
        txn.compares.push_back({txn_compare::target::mod, epoch_key(cluster), now->mod_revision});
        txn.puts.push_back({epoch_key(cluster), std::to_string(now->value + 1), 0});
        auto done = co_await etcd.txn(std::move(txn));
        if (!done) co_return done.as_failure();
        if (done->succeeded) co_return now->value + 1;
        // Either the epoch moved (another change won: try again) or the change's own condition
        // failed, which the caller judges from what the failure branch read.
        auto again = co_await read_epoch(etcd, cluster);
        if (!again) co_return again.as_failure();
        if (again->mod_revision == now->mod_revision) {
            if (failed_read) *failed_read = std::move(done->read);
            co_return std::int64_t{0};
        }
    }
    co_return base::fail(base::errc::service_unavailable,
                         "the cluster map kept changing: gave up after " +
                             std::to_string(max_epoch_attempts) + " attempts");
}

}  // namespace

base::result<void> check_name(std::string_view what, std::string_view name) {
    auto allowed = [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    };
    bool ok = !name.empty() && name.size() <= 63 &&
              std::all_of(name.begin(), name.end(), allowed) && name[0] != '.' && name[0] != '_' &&
              name[0] != '-';
    if (ok) return {};
    return base::fail(base::errc::invalid_argument,
                      std::string(what) + " '" + std::string(name) +
                          "' must be 1 to 63 of a-z, 0-9, '.', '_', '-', starting with a letter or "
                          "digit");
}

std::string cluster_prefix(std::string_view cluster) {
    return "/fjord/" + std::string(cluster) + "/";
}

std::string heal_request_key(std::string_view cluster) {
    return cluster_prefix(cluster) + "heal-request";
}
std::string lifecycle_runner_key(std::string_view cluster) {
    return cluster_prefix(cluster) + "lifecycle-runner";
}
std::string stats_key(std::string_view cluster, std::string_view node) {
    return cluster_prefix(cluster) + "stats/" + std::string(node);
}

std::string encode_node_record(const node_record& node) {
    return json{{"node_id", node.node_id},
                {"s3_endpoint", node.s3_endpoint},
                {"started_unix_ms", node.started_unix_ms},
                {"cores", node.cores}}
        .dump();
}

base::result<node_record> decode_node_record(std::string_view text) {
    json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
    auto bad = [] { return base::fail(base::errc::data_corrupted, "a node record is not valid"); };
    if (!doc.is_object()) return bad();
    node_record out;
    auto id = doc.find("node_id"), endpoint = doc.find("s3_endpoint");
    auto started = doc.find("started_unix_ms"), cores = doc.find("cores");
    if (id == doc.end() || !id->is_string() || endpoint == doc.end() || !endpoint->is_string())
        return bad();
    out.node_id = id->get<std::string>();
    out.s3_endpoint = endpoint->get<std::string>();
    if (started != doc.end() && started->is_number_integer())
        out.started_unix_ms = started->get<std::int64_t>();
    if (cores != doc.end() && cores->is_number_unsigned()) out.cores = cores->get<unsigned>();
    if (!check_name("node id", out.node_id)) return bad();
    return out;
}

const member_state* cluster_view::member(std::string_view node_id) const {
    for (const auto& m : members)
        if (m.node.node_id == node_id) return &m;
    return nullptr;
}

std::size_t cluster_view::up() const {
    return static_cast<std::size_t>(
        std::count_if(members.begin(), members.end(), [](const member_state& m) { return m.up; }));
}

base::result<cluster_view> view_of_keys(std::string_view cluster_name,
                                        const std::map<std::string, etcd_kv>& keys,
                                        std::int64_t revision, std::int64_t read_began_ns) {
    const std::string cluster(cluster_name);
    cluster_view view;
    view.revision = revision;
    view.read_began_ns = read_began_ns;
    const std::string members = cluster_prefix(cluster) + "members/";
    const std::string alive = cluster_prefix(cluster) + "alive/";
    const std::string buckets = buckets_prefix(cluster);
    const std::string stats = cluster_prefix(cluster) + "stats/";
    std::map<std::string, member_state> by_id;
    std::map<std::string, std::int64_t> alive_leases;
    for (const auto& [key, kv] : keys) {
        if (key == epoch_key(cluster)) {
            view.epoch = static_cast<std::int64_t>(base::parse_u64(kv.value).value_or(0));
        } else if (key.starts_with(members)) {
            auto node = decode_node_record(kv.value);
            if (!node) return node.as_failure();
            by_id[node->node_id].node = std::move(*node);
        } else if (key.starts_with(alive)) {
            alive_leases[key.substr(alive.size())] = kv.lease;
        } else if (key == heal_request_key(cluster)) {
            view.heal_request = static_cast<std::int64_t>(base::parse_u64(kv.value).value_or(0));
        } else if (key == lifecycle_runner_key(cluster)) {
            view.lifecycle_runner = kv.value;
        } else if (key.starts_with(stats)) {
            view.node_stats[key.substr(stats.size())] = kv.value;
        } else if (key == topology_key(cluster)) {
            auto layout = decode_topology(kv.value);
            if (!layout) return layout.as_failure();
            view.layout = std::move(*layout);
        } else if (key.starts_with(buckets)) {
            auto bucket = decode_bucket_record(kv.value);
            if (!bucket) {
                LOG_WARN("cluster %s: skipping %s: %s", cluster.c_str(), key.c_str(),
                         bucket.err().message.c_str());
                continue;
            }
            bucket->mod_revision = kv.mod_revision;
            view.buckets[bucket->name] = std::move(*bucket);
        }
    }
    for (auto& [id, member] : by_id) {
        if (auto it = alive_leases.find(id); it != alive_leases.end()) {
            member.up = true;
            member.alive_lease = it->second;
        }
        view.members.push_back(std::move(member));
    }
    return view;
}

std::size_t apply_events(std::map<std::string, etcd_kv>& keys, std::int64_t* revision,
                         std::vector<watch_event>& events) {
    const std::int64_t read = *revision;  // what the keys hold already
    std::size_t applied = 0;
    for (auto& event : events) {
        const std::int64_t at = event.kv.mod_revision;
        if (at <= read) continue;
        if (event.deleted)
            keys.erase(event.kv.key);
        else
            keys[event.kv.key] = std::move(event.kv);
        *revision = std::max(*revision, at);
        ++applied;
    }
    return applied;
}

io::task<base::result<cluster_view>> read_view(etcd_client& etcd, std::string cluster) {
    const std::int64_t began_ns = base::monotonic_now_ns();
    auto got = co_await etcd.range_prefix(cluster_prefix(cluster));
    if (!got) co_return got.as_failure();
    std::map<std::string, etcd_kv> keys;
    for (etcd_kv& kv : got->kvs) keys.emplace(kv.key, std::move(kv));
    co_return view_of_keys(cluster, keys, got->revision, began_ns);
}

io::task<base::result<std::int64_t>> join(etcd_client& etcd, std::string cluster,
                                          node_record node) {
    auto current = co_await etcd.range(member_key(cluster, node.node_id));
    if (!current) co_return current.as_failure();
    if (!current->kvs.empty()) {
        auto known = decode_node_record(current->kvs[0].value);
        // A restart with the same endpoint is not a map change; only the record's start time moved.
        if (known && known->s3_endpoint == node.s3_endpoint && known->cores == node.cores) {
            auto now = co_await read_epoch(etcd, cluster);
            if (!now) co_return now.as_failure();
            co_return now->value;
        }
    }
    txn_request change;
    change.puts.push_back({member_key(cluster, node.node_id), encode_node_record(node), 0});
    co_return co_await change_with_epoch(etcd, cluster, std::move(change), nullptr);
}

io::task<base::result<std::int64_t>> remove_member(etcd_client& etcd, std::string cluster,
                                                   std::string node_id) {
    auto member = co_await etcd.range(member_key(cluster, node_id));
    if (!member) co_return member.as_failure();
    if (member->kvs.empty())
        co_return base::fail(base::errc::not_found, "node " + node_id + " is not a member");
    txn_request change;
    // Only while the node is down (no alive key) and its record is the one read.
    change.compares.push_back({txn_compare::target::create, alive_key(cluster, node_id), 0});
    change.compares.push_back(
        {txn_compare::target::mod, member_key(cluster, node_id), member->kvs[0].mod_revision});
    change.deletes.push_back(member_key(cluster, node_id));
    change.read_on_failure = alive_key(cluster, node_id);
    std::vector<etcd_kv> alive;
    auto epoch = co_await change_with_epoch(etcd, cluster, std::move(change), &alive);
    if (!epoch) co_return epoch.as_failure();
    if (*epoch == 0)
        co_return base::fail(base::errc::invalid_request,
                             alive.empty() ? "node " + node_id + " changed meanwhile; try again"
                                           : "node " + node_id + " is up: stop it first");
    co_return epoch;
}

membership_agent::membership_agent(membership_options options)
    : _options(std::move(options)), _etcd(_options.etcd), _watch(_options.etcd) {}

void membership_agent::lost_etcd(const base::error& why) {
    if (_reachable)
        LOG_WARN(
            "cluster %s: etcd unreachable (%s): serving on, membership changes wait until it "
            "answers",
            _options.cluster.c_str(), why.message.c_str());
    _reachable = false;
    _backoff_ms = std::clamp<std::int64_t>(_backoff_ms * 2, 100, _options.max_backoff_ms);
}

io::task<void> membership_agent::pause_ms(std::int64_t ms) {
    constexpr std::int64_t slice_ms = 100;
    for (std::int64_t waited = 0; waited < ms && !io::reactor::current().stopping();
         waited += slice_ms)
        co_await io::sleep_for(std::min(slice_ms, ms - waited));
}

// Joins (once per process start or lease loss) and creates alive/<node> under a fresh lease.
io::task<base::result<void>> membership_agent::take_alive_key() {
    auto epoch = co_await join(_etcd, _options.cluster, _options.node);
    if (!epoch) co_return epoch.as_failure();
    const std::int64_t granted_ns = base::monotonic_now_ns();
    auto lease = co_await _etcd.grant_lease(_options.lease_ttl_s);
    if (!lease) co_return lease.as_failure();
    txn_request take;
    const std::string key = alive_key(_options.cluster, _options.node.node_id);
    take.compares.push_back({txn_compare::target::create, key, 0});
    take.puts.push_back({key, encode_node_record(_options.node), lease->id});
    auto taken = co_await _etcd.txn(std::move(take));
    if (!taken || !taken->succeeded) {
        (void)co_await _etcd.revoke_lease(lease->id);
        if (!taken) co_return taken.as_failure();
        if (!_waiting_logged)
            LOG_WARN(
                "cluster %s: node id %s is held by a live process (or by this node's previous "
                "run until its lease of at most %lld s expires): waiting",
                _options.cluster.c_str(), _options.node.node_id.c_str(),
                static_cast<long long>(_options.lease_ttl_s));
        _waiting_logged = true;
        co_return base::fail(base::errc::service_unavailable, "node id held");
    }
    _lease = lease->id;
    _stats_written.clear();  // stats/<node> went with the old lease
    _epoch.store(*epoch, std::memory_order_relaxed);
    _registered.store(true, std::memory_order_relaxed);
    _waiting_logged = false;
    LOG_INFO("cluster %s: node %s is up (epoch %lld, lease %lld s)", _options.cluster.c_str(),
             _options.node.node_id.c_str(), static_cast<long long>(*epoch),
             static_cast<long long>(lease->ttl_s));
    co_await claim_lifecycle(granted_ns, lease->ttl_s);
    co_return base::result<void>{};
}

io::task<void> membership_agent::heartbeat() {
    const std::int64_t sent_ns = base::monotonic_now_ns();
    auto ttl = co_await _etcd.keep_alive(_lease);
    if (!ttl) {
        lost_etcd(ttl.err());
        co_return;
    }
    if (!_reachable) LOG_INFO("cluster %s: etcd answers again", _options.cluster.c_str());
    _reachable = true;
    _backoff_ms = 0;
    if (*ttl == 0) {
        LOG_WARN("cluster %s: the lease of node %s expired: taking its alive key again",
                 _options.cluster.c_str(), _options.node.node_id.c_str());
        _lease = 0;
        _registered.store(false, std::memory_order_relaxed);
        _runner_until_ns.store(0, std::memory_order_relaxed);
        co_return;
    }
    co_await claim_lifecycle(sent_ns, *ttl);
    if (!_options.stats) co_return;
    // Written when they changed only: each put reaches every node's watch
    std::string stats = _options.stats();
    if (stats == _stats_written) co_return;
    _stats_written.clear();  // a put whose answer is lost may have landed: written again next time
    if (co_await _etcd.put(stats_key(_options.cluster, _options.node.node_id), stats, _lease))
        _stats_written = std::move(stats);
}

io::task<void> membership_agent::claim_lifecycle(std::int64_t renewed_ns, std::int64_t ttl_s) {
    const std::string key = lifecycle_runner_key(_options.cluster);
    // The map says who holds the key: the holder's own lease, alive a moment ago, holds it still (the
    // key goes only with its lease), and a node that sees another hold it need not ask; only while
    // the watch keeps the map fresh (no read failing or due, no events dropped), and never when the
    // key is absent.
    const bool fresh = _watching && !_full_read_needed && !_view_failing;
    if (auto held = _map_keys.find(key);
        held != _map_keys.end() && _lease != 0 && (held->second.lease == _lease || fresh)) {
        note_runner(held->second.lease == _lease ? renewed_ns + ttl_s * 900'000'000 : 0);
        co_return;
    }
    txn_request claim;
    claim.compares.push_back({txn_compare::target::create, key, 0});
    claim.puts.push_back({key, _options.node.node_id, _lease});
    claim.read_on_failure = key;
    auto got = co_await _etcd.txn(std::move(claim));
    if (!got) co_return;  // what was certain stays so until it runs out
    const bool mine =
        got->succeeded || (got->read.size() == 1 && got->read[0].lease == _lease && _lease != 0);
    // A tenth of the TTL spare, for the rates of this machine's clock and etcd's
    note_runner(mine ? renewed_ns + ttl_s * 900'000'000 : 0);
}

void membership_agent::note_runner(std::int64_t until) {
    const bool had = runs_lifecycle();
    _runner_until_ns.store(until, std::memory_order_relaxed);
    if (had != runs_lifecycle())
        LOG_INFO("cluster %s: node %s %s the lifecycle rules", _options.cluster.c_str(),
                 _options.node.node_id.c_str(), had ? "no longer applies" : "applies");
}

namespace {
// With a watch that answers, a full read of the map is a safety net only
constexpr std::int64_t watched_read_ns = 30'000'000'000;
// The watch's events waiting for refresh_view, at most; more are dropped for a full read instead
constexpr std::size_t max_pending_events = 10'000;
}  // namespace

std::int64_t membership_agent::poll_interval_ms() const {
    return std::max<std::int64_t>(_options.lease_ttl_s * 1000 / 3, 200);
}

bool membership_agent::map_due() const {
    return !_watching || _map_changed || _full_read_needed ||
           base::monotonic_now_ns() - _view_read_ns >= watched_read_ns;
}

void membership_agent::take_events(std::vector<watch_event> events) {
    const std::string prefix = cluster_prefix(_options.cluster);
    const std::string stats = prefix + "stats/";
    const std::string layout = topology_key(_options.cluster);
    // A message is queued whole or not at all: etcd never splits a revision over two messages, so
    // the map never holds part of one.
    bool read_instead = _pending.size() + events.size() > max_pending_events;
    for (const auto& event : events) {
        if (!event.kv.key.starts_with(stats)) _map_changed = true;
        // The topology holds the rebuilding marks, whose clearing a node believes only from a read
        // sent after it marked itself (shard_service::note_view): a read, not an event, says when.
        if (event.kv.key == layout) read_instead = true;
    }
    if (read_instead) {
        _pending.clear();
        _full_read_needed = true;
    }
    if (_full_read_needed) return;  // the read to come has these
    _events_heard_ns = base::monotonic_now_ns();
    for (auto& event : events) _pending.push_back(std::move(event));
}

io::task<void> membership_agent::watch_map() {
    const std::string prefix = cluster_prefix(_options.cluster);
    constexpr std::int64_t quiet_ms = 10'000;  // a watch quiet this long is opened again
    bool failing = false;
    while (!io::reactor::current().stopping()) {
        if (_watch_from == 0 && _view_revision > 0) _watch_from = _view_revision + 1;
        if (_watch_from == 0) {  // waits for the first read of the map
            co_await pause_ms(100);
            continue;
        }
        auto opened = co_await _watch.open_watch(prefix, prefix_end(prefix), _watch_from);
        while (opened && !io::reactor::current().stopping()) {
            auto message = co_await _watch.next_watch_message(quiet_ms);
            if (!message) {
                if (message.code() != base::errc::timed_out) opened = message.as_failure();
                break;
            }
            if (message->canceled) {  // compacted past _watch_from: read the map, watch from it
                _map_changed = _full_read_needed = true;
                _pending.clear();
                _watching = false;
                const std::uint64_t reads = _map_reads.load(std::memory_order_relaxed);
                while (_map_reads.load(std::memory_order_relaxed) == reads &&
                       !io::reactor::current().stopping())
                    co_await pause_ms(100);
                _watch_from = _view_revision + 1;
                break;
            }
            _watching = true;
            failing = false;
            if (message->events.empty()) continue;
            _watch_from = std::max(_watch_from, message->last_mod_revision + 1);
            take_events(std::move(message->events));
        }
        if (!opened) {
            if (!failing)
                LOG_WARN("cluster %s: cannot watch the cluster map (%s); reading it every %lld ms",
                         _options.cluster.c_str(), opened.err().message.c_str(),
                         static_cast<long long>(poll_interval_ms()));
            failing = true;
            _watching = false;
            co_await pause_ms(1000);
        }
    }
    _watch.close_watch();
}

bool membership_agent::apply_pending() {
    const std::size_t applied = apply_events(_map_keys, &_view_revision, _pending);
    _map_events.fetch_add(applied, std::memory_order_relaxed);
    _pending.clear();
    return applied > 0;
}

io::task<bool> membership_agent::read_map() {
    _full_read_needed = false;  // set again if the watch drops events while this read runs
    const std::int64_t began_ns = base::monotonic_now_ns();
    auto got = co_await _etcd.range_prefix(cluster_prefix(_options.cluster));
    if (!got) {
        // Said once: etcd may answer heartbeats and still fail this read (a map it cannot send)
        if (!_view_failing)
            LOG_WARN(
                "cluster %s: cannot read the cluster map from etcd (%s); serving the last one read",
                _options.cluster.c_str(), got.err().message.c_str());
        _view_failing = true;
        _full_read_needed = true;
        _map_failures.fetch_add(1, std::memory_order_relaxed);
        // etcd answered (not a transport failure, nor etcd saying it cannot serve): the map itself
        // cannot be read.
        const base::errc code = got.code();
        _map_broken.store(code != base::errc::timed_out && code != base::errc::io_error &&
                              code != base::errc::closed && code != base::errc::cancelled &&
                              code != base::errc::service_unavailable,
                          std::memory_order_relaxed);
        co_return false;
    }
    _map_keys.clear();
    for (etcd_kv& kv : got->kvs) _map_keys.emplace(kv.key, std::move(kv));
    _view_revision = got->revision;
    _view_read_ns = began_ns;
    _map_reads.fetch_add(1, std::memory_order_relaxed);
    co_return true;
}

io::task<void> membership_agent::refresh_view() {
    const bool changed = std::exchange(_map_changed, false);
    const bool full = _full_read_needed || !_watching || _view_revision == 0 ||
                      base::monotonic_now_ns() - _view_read_ns >= watched_read_ns;
    if (full && !co_await read_map()) {
        _map_changed = _map_changed || changed;  // what the watch saw is still to be read
        co_return;
    }
    const bool applied = apply_pending();  // after a read, the events that came while it ran
    auto parsed = view_of_keys(_options.cluster, _map_keys, _view_revision, _view_read_ns);
    if (!parsed) {
        if (!_view_failing)
            LOG_WARN(
                "cluster %s: cannot read the cluster map from etcd (%s); serving the last "
                "one read",
                _options.cluster.c_str(), parsed.err().message.c_str());
        _view_failing = _full_read_needed = true;
        _map_failures.fetch_add(1, std::memory_order_relaxed);
        _map_broken.store(true, std::memory_order_relaxed);
        co_return;
    }
    if (_view_failing)
        LOG_INFO("cluster %s: the cluster map reads again", _options.cluster.c_str());
    _view_failing = false;
    _map_broken.store(false, std::memory_order_relaxed);
    // The map's age: from its read, or from when the watch's events just applied came
    if (full || applied)
        _map_read_ns.store(full ? parsed->read_began_ns : _events_heard_ns,
                           std::memory_order_relaxed);
    if (_options.on_view) _options.on_view(*parsed);
    std::int64_t before = _epoch.exchange(parsed->epoch, std::memory_order_relaxed);
    std::size_t up_before = _members_up.exchange(parsed->up(), std::memory_order_relaxed);
    if (before != parsed->epoch || up_before != parsed->up())
        LOG_INFO("cluster %s: map epoch %lld, %zu members, %zu up", _options.cluster.c_str(),
                 static_cast<long long>(parsed->epoch), parsed->members.size(), parsed->up());
}

io::task<void> membership_agent::run() {
    io::reactor& reactor = io::reactor::current();
    reactor.hold();  // the final revoke runs after the stop request
    const std::int64_t interval_ms = poll_interval_ms();
    if (_options.watch) io::spawn(watch_map());
    std::int64_t beat_due_ns = 0;  // when the next heartbeat is due (0: to be set)
    while (!reactor.stopping()) {
        if (_lease == 0) {
            auto taken = co_await take_alive_key();
            if (!taken) {
                if (taken.err().code != base::errc::service_unavailable ||
                    taken.err().message != "node id held")
                    lost_etcd(taken.err());
                else
                    co_await refresh_view();  // the map, to serve while the old lease runs out
                co_await pause_ms(std::max<std::int64_t>(_backoff_ms, 1000));
                continue;
            }
            if (!_reachable) LOG_INFO("cluster %s: etcd answers again", _options.cluster.c_str());
            _reachable = true;
            _backoff_ms = 0;
        }
        if (map_due()) co_await refresh_view();
        if (beat_due_ns == 0)
            beat_due_ns = base::monotonic_now_ns() +
                          (_backoff_ms > 0 ? _backoff_ms : interval_ms) * 1'000'000;
        // Until the heartbeat is due, or the watch saw the map change
        while (!reactor.stopping() && !_map_changed && base::monotonic_now_ns() < beat_due_ns)
            co_await io::sleep_for(20);
        if (reactor.stopping() || base::monotonic_now_ns() < beat_due_ns) continue;
        beat_due_ns = 0;
        if (_lease != 0) co_await heartbeat();
    }
    _runner_until_ns.store(0, std::memory_order_relaxed);
    if (_lease != 0) {
        if (auto left = co_await _etcd.revoke_lease(_lease); !left)
            LOG_WARN(
                "cluster %s: could not revoke the lease on stop (%s): the node is down once it "
                "expires",
                _options.cluster.c_str(), left.err().message.c_str());
        else
            LOG_INFO("cluster %s: node %s left (lease revoked)", _options.cluster.c_str(),
                     _options.node.node_id.c_str());
    }
    reactor.release();
}

std::optional<std::string> membership_agent::not_ready() const {
    if (!_map_broken.load(std::memory_order_relaxed)) return std::nullopt;
    // Said to anyone who asks (no signature): the reason's details are in the server's log.
    return "cluster " + _options.cluster +
           ": the cluster map cannot be read from etcd (see the server's log); serving an old one";
}

std::string membership_agent::metrics_text() const {
    const std::int64_t read_ns = _map_read_ns.load(std::memory_order_relaxed);
    const double age_s =
        read_ns == 0 ? -1.0 : static_cast<double>(base::monotonic_now_ns() - read_ns) / 1e9;
    char text[1400];
    std::snprintf(text, sizeof text,
                  "# HELP fjord_cluster_map_reads_total Whole reads of the cluster map from "
                  "etcd.\n"
                  "# TYPE fjord_cluster_map_reads_total counter\n"
                  "fjord_cluster_map_reads_total %llu\n"
                  "# HELP fjord_cluster_map_events_total Changes of the cluster map applied from "
                  "the watch of etcd.\n"
                  "# TYPE fjord_cluster_map_events_total counter\n"
                  "fjord_cluster_map_events_total %llu\n"
                  "# HELP fjord_cluster_map_read_failures_total Reads of the cluster map from etcd "
                  "that failed.\n"
                  "# TYPE fjord_cluster_map_read_failures_total counter\n"
                  "fjord_cluster_map_read_failures_total %llu\n"
                  "# HELP fjord_cluster_map_age_seconds Age of the cluster map this node serves "
                  "from (-1: none read yet).\n"
                  "# TYPE fjord_cluster_map_age_seconds gauge\n"
                  "fjord_cluster_map_age_seconds %.3f\n"
                  "# HELP fjord_cluster_map_unreadable 1 while etcd answers but the map cannot be "
                  "read from it.\n"
                  "# TYPE fjord_cluster_map_unreadable gauge\n"
                  "fjord_cluster_map_unreadable %d\n"
                  "# HELP fjord_cluster_lifecycle_runner 1 while this node is the one that applies "
                  "the lifecycle rules.\n"
                  "# TYPE fjord_cluster_lifecycle_runner gauge\n"
                  "fjord_cluster_lifecycle_runner %d\n",
                  static_cast<unsigned long long>(_map_reads.load(std::memory_order_relaxed)),
                  static_cast<unsigned long long>(_map_events.load(std::memory_order_relaxed)),
                  static_cast<unsigned long long>(_map_failures.load(std::memory_order_relaxed)),
                  age_s, _map_broken.load(std::memory_order_relaxed) ? 1 : 0,
                  runs_lifecycle() ? 1 : 0);
    return text;
}

}  // namespace fjord::cluster
