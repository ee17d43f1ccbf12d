// The deterministic simulation of the cluster protocol (docs/cluster.md, docs/reliability.md).
//
// For each seed, N nodes run in one process on one simulated core: each its own simulated file system,
// its real engine, its real data plane (cluster::shard_service behind http::serve_connection) and its
// real coordinator (cluster::cluster_store), talking over the simulated network (sim_network.h), whose
// connections move bytes in pieces and in an order drawn from the seed, with a simulated clock. Nothing
// is mocked above the network and the disks: what runs is the code `fjord serve --etcd` runs.
//
// Clients write, read, delete and create-if-absent through random nodes while faults come: a node cut
// off from the others (its connections reset, new ones refused) and back, connections reset at random
// (a message lost: the rest of its stream with it), bit rot in one node's files, or (in half of the
// seeds, instead of bit rot) one node's drive replaced by an empty one while the clients run: the node
// is marked rebuilding as `fjord cluster replace-node N N` marks it, and the mark is cleared once
// healing has given it its shards. The checks:
//  - no acknowledged write is lost, and every read returns the last acknowledged version of its key or
//    one written after it whose outcome its client does not know, byte for byte;
//  - of the conditional creates of one key (If-None-Match: * through different nodes at once), at most
//    one succeeds, and what is read afterwards is the winner's;
//  - afterwards, with every node back, healing brings every key to full width: each reads back, exactly,
//    through every node, and with m nodes cut off (the rotting node among them).
//
// Scenarios (--scenario 1 to 18; 3, 4 and 5 with --nodes 6) drive one interleaving instead: a failed
// write's withdrawal held up in the network while healing takes the write up (held_withdrawal), a
// write's commits held past the leftover age (late_commits), two heals that see a write differently
// (partial_view), an abort after a completion that answered 503 (abort_after_completion), small
// objects read through every node of a healthy cluster, none waiting on a timer (healthy_small_reads),
// an abort crossing a completion (abort_crossing_completion), a part retried while its upload is
// completed (part_retried_during_completion), a node whose clock runs far ahead (clock_ahead), a
// tombstone expired while two nodes are suspect (tombstone_expiry), a manifest whose parts are gone
// set aside by the healer (parts_lost), a DeleteBucket crossing a PUT (delete_bucket_crossing_put), a
// batch of records larger than a peer's answer (large_record_batch), a node rebuilding read through
// one that has not seen its mark (stale_view_rebuild), a write stamped as an earlier one after a
// restart with the clock stepped back (repeated_stamp), an abort whose purge missed k nodes
// (partial_purge), and the cluster at up to 96 nodes: placement balance and a node's rebuild (at_scale).
//
// With --history DIR, clients of the random workload also race on two shared keys (reads, PUTs,
// create-only PUTs, DELETEs, and PUTs and DELETEs with If-Match on a value just read), and every operation's call and answer on the simulated clock goes to
// DIR/seed-N.json, which tests/integration/linearizability.py checks per key (test_linearizability.py).
//
// Usage: cluster_sim [--seed N] [--seeds COUNT] [--nodes 4..6, to 96 with --scenario 18] [--clients N] [--requests N]
//                    [--scenario 1..18] [--history DIR] [--verbose]
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <memory>
#include <optional>
#include "base/seeded_random.h"
#include <set>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/log.h"
#include "base/metrics.h"
#include "cluster/cluster_store.h"
#include "cluster/healer.h"
#include "cluster/shard_service.h"
#include "http/connection.h"
#include "io/cross_core.h"
#include "io/ops.h"
#include "io/reactor.h"
#include "seed_runner.h"
#include "sim_network.h"
#include "store/engine.h"
#include "store/sim_file_system.h"

namespace fjord::sim {
namespace {

const auth::credentials root{"SIMCLUSTERROOT01", "sim-cluster-root-secret"};
constexpr const char* bucket = "sim";
constexpr std::int64_t absent_value = 0;

struct run_options {
    unsigned nodes = 4;
    unsigned clients = 3;
    unsigned requests = 24;  // per client
    unsigned keys_per_client = 3;
    std::uint64_t first_seed = 1, seeds = 1;
    bool verbose = false;
    unsigned scenario = 0;  // 0: the random workload; 1 to 11: an interleaving (held_withdrawal)
    // The random workload: clients also race on shared keys, and every operation's call and answer
    // is written to <history>/seed-N.json for tests/integration/linearizability.py.
    std::string history;
};

// One client operation as linearizability.py reads it (its `Operation`).
struct recorded_op {
    std::string key, client, kind;  // kind: get, put, delete, create, replace, remove
    std::int64_t invoked_ns = 0;
    std::int64_t returned_ns = -1;  // -1: no answer came (the outcome is unknown)
    std::int64_t value = absent_value;
    std::optional<std::int64_t> expected;  // replace, remove: the value their If-Match names
    std::string outcome;                   // writes: ok, failed (412), absent (404 to an If-Match)
    bool dropped = false;                  // a read that failed: it says nothing
};

// The S3 side of a node is not under test here: requests outside the data plane get 404.
class no_s3 final : public http::handler {
public:
    io::task<void> handle(http::exchange& ex) override { (void)co_await ex.send_all(404, {}, ""); }
    io::task<void> refuse(http::exchange& ex, const base::error&, std::int64_t) override {
        (void)co_await ex.send_all(503, {}, "");
    }
    std::string protocol_error_response(const base::error&, std::string_view) override {
        return "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    }
};

// What one seed did, and what all seeds did together.
struct tally {
    std::uint64_t acknowledged = 0, unknown = 0, reads = 0, cuts = 0, resets = 0, rot = 0,
                  drives = 0, cas_rounds = 0, healed = 0, heals_during = 0, lost_answers = 0,
                  listed = 0;

    void add(const tally& o) {
        acknowledged += o.acknowledged, unknown += o.unknown, reads += o.reads, cuts += o.cuts;
        resets += o.resets, rot += o.rot, drives += o.drives, cas_rounds += o.cas_rounds;
        healed += o.healed, heals_during += o.heals_during, lost_answers += o.lost_answers;
        listed += o.listed;
    }
    std::string describe(std::size_t nodes) const {
        char line[400];
        std::snprintf(
            line, sizeof line,
            "%zu nodes: %llu acknowledged, %llu unknown, %llu reads checked, %llu "
            "cut-offs, %llu resets, %llu answers lost, %llu bits rotted, %llu drives replaced, %llu "
            "conditional rounds, %llu heals meanwhile, %llu keys healed, %llu listings checked",
            nodes, static_cast<unsigned long long>(acknowledged),
            static_cast<unsigned long long>(unknown), static_cast<unsigned long long>(reads),
            static_cast<unsigned long long>(cuts), static_cast<unsigned long long>(resets),
            static_cast<unsigned long long>(lost_answers), static_cast<unsigned long long>(rot),
            static_cast<unsigned long long>(drives), static_cast<unsigned long long>(cas_rounds),
            static_cast<unsigned long long>(heals_during), static_cast<unsigned long long>(healed),
            static_cast<unsigned long long>(listed));
        return line;
    }
};

struct simulation;

// What a node served from before its drive was replaced: kept until the run ends, since coroutines of
// connections it had may still hold it.
struct retired_drive {
    std::unique_ptr<store::sim_file_system> fs;
    std::unique_ptr<store::engine> engine;
    std::unique_ptr<cluster::shard_service> shards;
    std::unique_ptr<cluster::node_handler> front;
};

struct node_side {
    std::string id;
    unsigned index = 0;
    io::endpoint where;
    std::unique_ptr<store::sim_file_system> fs;
    std::unique_ptr<store::engine> engine;
    std::unique_ptr<cluster::cluster_store> store;
    std::unique_ptr<cluster::shard_service> shards;
    no_s3 s3;
    std::unique_ptr<cluster::node_handler> front;
    std::unique_ptr<http::handler> gate;  // in front of `front` (node_gate)
    http::server_limits limits;
    http::connection_stats stats;
    base::metrics metrics{1};
    bool cut_off = false;
    std::vector<std::shared_ptr<sim_connection>> connections;  // to its data plane
    std::vector<retired_drive> retired;
    std::vector<std::unique_ptr<cluster::cluster_store>> retired_stores;  // coordinators restarted
};

// A node as the network reaches it: its data plane, except that a shard upload the scenario names is
// taken whole and answered 500 with nothing stored (a node that fails the commit). An upload's record
// (a completion's or an abort's claim, the 'u' space) is never the one: the scenarios aim at what a
// write or a completion writes.
class node_gate final : public http::handler {
public:
    node_gate(std::string& fail_upload_at, node_side& n) : _fail_upload_at(fail_upload_at), _n(n) {}
    io::task<void> handle(http::exchange& ex) override {
        if (_fail_upload_at != _n.id || ex.head().method_text != "PUT" ||
            !ex.head().path.starts_with("/_fjord/cluster/v1/shard/") ||
            ex.head().path.starts_with("/_fjord/cluster/v1/shard/u.")) {
            co_await _n.front->handle(ex);
            co_return;
        }
        _fail_upload_at.clear();
        char sink[16 * 1024];
        for (;;) {
            auto n = co_await ex.body().read(reinterpret_cast<std::byte*>(sink), sizeof sink);
            if (!n || *n == 0) break;
        }
        (void)co_await ex.send_all(500, {}, "the commit failed");
    }
    io::task<void> refuse(http::exchange& ex, const base::error& err,
                          std::int64_t retry_after_ms) override {
        return _n.front->refuse(ex, err, retry_after_ms);
    }
    std::string protocol_error_response(const base::error& err, std::string_view remote) override {
        return _n.front->protocol_error_response(err, remote);
    }

private:
    std::string& _fail_upload_at;
    node_side& _n;
};

// A key's history as its one writer knows it (keys are owned by one client, as in the fault test).
struct key_history {
    std::int64_t acked = absent_value;  // the last acknowledged value (absent_value: deleted)
    std::set<std::int64_t> unknown;     // written since, outcome unknown
    bool allows(std::int64_t v) const { return v == acked || unknown.count(v) > 0; }
    // Monotonic reads: the writes in the order issued (absent_value: a DELETE), and the place in it
    // of the newest write a completed read returned. A read that starts later (the key's reads are
    // one client's, one after another, through any node) must not return an older one.
    std::vector<std::int64_t> writes;
    std::ptrdiff_t read_at = -1;
    std::ptrdiff_t acked_at = -1;  // the place in `writes` of the last write acknowledged
    // Where a read's value stands: its write; nullopt for absent (absent_place) and for a write this
    // history does not order (a conditional create's).
    std::optional<std::ptrdiff_t> place_of(std::int64_t v) const {
        if (v == absent_value) return std::nullopt;
        auto it = std::find(writes.rbegin(), writes.rend(), v);
        if (it != writes.rend()) return writes.rend() - it - 1;
        return std::nullopt;
    }
    // Where a read of absent can stand, at `at_least` or later: the acknowledged DELETE (or the start)
    // when the last acknowledged write deleted, or a DELETE issued since, whose outcome is unknown
    // (it may take effect at any time, or never); the earliest such place, nullopt when none is.
    std::optional<std::ptrdiff_t> absent_place(std::ptrdiff_t at_least) const {
        if (acked == absent_value && acked_at >= at_least) return acked_at;
        for (auto p = std::max(acked_at + 1, at_least); p < std::ssize(writes); ++p)
            if (writes[static_cast<std::size_t>(p)] == absent_value) return p;
        return std::nullopt;
    }
};

struct simulation {
    simulation(std::uint64_t s, const run_options& o)
        : seed(s),
          options(o),
          rng(s * 0x9E3779B97F4A7C15ULL + 11),
          clock(1'790'000'000'000 + static_cast<std::int64_t>(s % 1000) * 1000),
          net(s, clock) {}

    std::uint64_t seed;
    run_options options;
    base::seeded_random rng;
    sim_clock clock;
    sim_network net;
    std::vector<std::unique_ptr<node_side>> nodes;
    std::map<std::string, key_history> keys;
    std::vector<recorded_op> history;  // --history
    std::string failure;
    std::string last_error;  // of the last read refused
    bool clients_done = false, all_done = false, healer_running = true;
    // Scenarios: withdrawals held in the network until released; the next answer to a shard upload
    // from this node lost; the next shard upload to this node failed (node_gate).
    bool hold_withdrawals = false;
    std::string lose_upload_answer_of, fail_upload_at;
    std::set<std::string> hold_commits_to;       // the ends of shard uploads to these nodes held
    std::set<std::string> hold_part_commits_to;  // ... of part attempts' shard uploads only
    unsigned clients_running = 0;
    tally counts;
    std::unique_ptr<cluster::healer> healer;                // scenario 12: node 1's
    std::vector<std::unique_ptr<cluster::healer>> healers;  // scenario 18: every node's
    std::string figures;                                    // scenario 18: what it measured
    bool replaces_a_drive = false;      // this seed: a drive replaced, no bit rot
    std::set<std::string> rebuilding;   // as the topology marks them
    std::set<std::string> stale_views;  // nodes no new view reaches (etcd out of their reach)
    std::int64_t view_revision = 0;
    bool bucket_deleted = false;  // scenario 13
    const bool* put_done_before_removal = nullptr;

    std::size_t record(std::string key, std::string client, std::string kind,
                       std::int64_t value = absent_value,
                       std::optional<std::int64_t> expected = std::nullopt) {
        recorded_op op;
        op.key = std::move(key), op.client = std::move(client), op.kind = std::move(kind);
        op.invoked_ns = base::monotonic_now_ns();
        op.value = value, op.expected = expected;
        history.push_back(std::move(op));
        return history.size() - 1;
    }
    void answered(std::size_t op, std::string outcome, std::int64_t value = absent_value) {
        history[op].returned_ns = base::monotonic_now_ns();
        if (history[op].kind == "get")
            history[op].value = value;
        else
            history[op].outcome = std::move(outcome);
    }
    std::uint64_t draw(std::uint64_t n) { return n == 0 ? 0 : rng() % n; }
    bool chance(double p) { return rng.unit() < p; }
    void violation(const std::string& what) {
        if (failure.empty()) failure = what;
    }
    node_side* node_at(const io::endpoint& where) {
        for (auto& n : nodes)
            if (n->where.host == where.host && n->where.port == where.port) return n.get();
        return nullptr;
    }
};

// A value's bytes: its id, then bytes drawn from it; sizes across one stripe, several, and none.
std::string value_bytes(std::int64_t id) {
    base::seeded_random r(static_cast<std::uint64_t>(id));
    static constexpr std::size_t sizes[] = {0, 8, 1000, 5000, 70'000, 150'000};
    std::string out = std::to_string(id) + ":";
    out.resize(std::max(out.size(), sizes[r() % std::size(sizes)]), 'x');
    for (std::size_t i = out.find(':') + 1; i < out.size(); ++i) out[i] = static_cast<char>(r());
    return out;
}

std::int64_t value_of(const std::string& bytes) {
    const std::size_t colon = bytes.find(':');
    if (colon == std::string::npos) return -1;
    std::int64_t id = std::atoll(bytes.substr(0, colon).c_str());
    return value_bytes(id) == bytes ? id : -1;
}

// A data-plane connection over the simulated network, from one node to another. Waits by yielding
// (the simulation's pump moves the bytes and the clock between turns).
class sim_transport final : public cluster::peer_transport {
public:
    sim_transport(simulation& sim, node_side* from, io::endpoint to)
        : _sim(sim), _from(from), _to(std::move(to)) {}
    ~sim_transport() override { close(); }
    bool is_open() const override { return _conn != nullptr; }
    void set_io_timeout_ms(std::int64_t timeout_ms) override { _timeout_ms = timeout_ms; }
    void close() override {
        if (_conn) _conn->client_close();
        _conn.reset();
    }

    io::task<base::result<void>> connect() override {
        close();
        _in_upload = false;
        node_side* target = _sim.node_at(_to);
        if (!target || target->cut_off || _from->cut_off)
            co_return base::fail(base::errc::io_error, "connect: connection refused");
        _conn = _sim.net.connect(_sim.chance(0.2) ? 4096 : 256 * 1024);
        target->connections.push_back(_conn);
        sim_connection* c = _conn.get();
        io::spawn(http::serve_connection(io::stream::simulated(c), *target->gate, target->limits,
                                         target->stats, target->metrics.for_core(0)));
        co_return base::result<void>{};
    }

    io::task<base::result<void>> send_all(std::span<iovec> parts) override {
        if (!parts.empty()) {
            const std::string_view start(static_cast<const char*>(parts[0].iov_base),
                                         std::min<std::size_t>(parts[0].iov_len, 64));
            if (start.starts_with("DELETE /_fjord/cluster/v1/shard/"))
                while (_sim.hold_withdrawals) co_await io::yield_now{};
            constexpr std::string_view upload = "PUT /_fjord/cluster/v1/shard/";
            if (start.starts_with(upload)) {
                _in_upload = true;
                _in_part_upload = start.substr(upload.size()).starts_with("p.");
                _in_record_upload = start.substr(upload.size()).starts_with("u.");
            }
            node_side* target = _sim.node_at(_to);
            if (_in_upload && start == "0\r\n\r\n" && target) {  // an upload's end: the commit
                while (_sim.hold_commits_to.count(target->id) > 0) co_await io::yield_now{};
                while (_in_part_upload && _sim.hold_part_commits_to.count(target->id) > 0)
                    co_await io::yield_now{};
            }
        }
        const std::int64_t deadline = base::monotonic_now_ns() + _timeout_ms * 1'000'000;
        for (const iovec& p : parts) {
            std::string_view left(static_cast<const char*>(p.iov_base), p.iov_len);
            while (!left.empty()) {
                FJORD_CO_TRY(check(deadline, "send", true));
                const std::size_t n = _conn->client_write(left);
                left.remove_prefix(n);
                if (n == 0) co_await io::yield_now{};
            }
        }
        co_return base::result<void>{};
    }

    io::task<base::result<std::size_t>> receive_some(std::byte* dst, std::size_t max) override {
        const std::int64_t deadline = base::monotonic_now_ns() + _timeout_ms * 1'000'000;
        for (;;) {
            if (!_conn) co_return base::fail(base::errc::closed, "not connected");
            std::string got = _conn->client_read(max);
            // An answer lost on its way back: the node did what was asked, the asker cannot know.
            node_side* target = _sim.node_at(_to);
            const bool lose_this = _in_upload && !_in_record_upload && target &&
                                   _sim.lose_upload_answer_of == target->id;
            if (!got.empty()) _in_upload = false;
            if (!got.empty() && lose_this) _sim.lose_upload_answer_of.clear();
            if (!got.empty() && (lose_this || (_sim.options.scenario == 0 && !_sim.clients_done &&
                                               _sim.chance(0.01)))) {
                ++_sim.counts.lost_answers;
                _conn->client_vanish();
                close();
                co_return base::fail(base::errc::io_error, "receive: connection reset");
            }
            if (!got.empty()) {
                std::memcpy(dst, got.data(), got.size());
                co_return got.size();
            }
            if (_conn->at_end()) {
                close();
                co_return base::fail(base::errc::closed, "connection closed by the server");
            }
            FJORD_CO_TRY(check(deadline, "receive", false));
            co_await io::yield_now{};
        }
    }

    io::task<base::result<void>> receive_exact(std::byte* dst, std::size_t len) override {
        for (std::size_t done = 0; done < len;) {
            auto n = co_await receive_some(dst + done, len - done);
            if (!n) co_return n.as_failure();
            done += *n;
        }
        co_return base::result<void>{};
    }

private:
    // A cut-off node, a reset connection or the deadline: the operation fails and the link closes.
    // (A server that closed takes no more bytes; what it sent before can still be read.)
    base::result<void> check(std::int64_t deadline_ns, const char* what, bool sending) {
        if (!_conn) return base::fail(base::errc::closed, "not connected");
        node_side* target = _sim.node_at(_to);
        if (!target || target->cut_off || _from->cut_off || (sending && _conn->server_closed())) {
            if (_conn) _conn->client_vanish();
            close();
            return base::fail(base::errc::io_error, std::string(what) + ": connection reset");
        }
        if (base::monotonic_now_ns() > deadline_ns) {
            _conn->client_vanish();
            close();
            return base::fail(base::errc::timed_out, std::string(what) + ": timed out");
        }
        return {};
    }

    simulation& _sim;
    node_side* _from;
    io::endpoint _to;
    std::shared_ptr<sim_connection> _conn;
    std::int64_t _timeout_ms = 10'000;
    bool _in_upload = false;         // a shard upload was sent and its answer has not come
    bool _in_part_upload = false;    // ... of a part attempt
    bool _in_record_upload = false;  // ... of an upload's record (a claim)
};

// ---- the nodes ----

cluster::cluster_view view_of(simulation& sim) {
    cluster::cluster_view v;
    v.revision = ++sim.view_revision;
    v.read_began_ns = base::monotonic_now_ns();
    v.epoch = static_cast<std::int64_t>(sim.nodes.size());
    std::vector<std::string> ids;
    for (auto& n : sim.nodes) {
        cluster::member_state m;
        m.node = {n->id, "http://" + n->where.host + ":" + std::to_string(n->where.port), 0, 1};
        m.up =
            true;  // etcd's view lags: a cut-off node still looks up, as it does for a lease's TTL
        v.members.push_back(m);
        ids.push_back(n->id);
    }
    v.layout = *cluster::default_topology(ids, 64 * 1024);
    for (const auto& id : sim.rebuilding) v.layout->rebuilding.push_back({id, 0});
    if (!sim.bucket_deleted) v.buckets[bucket] = cluster::bucket_record{bucket, 1, "0001", {}, 1};
    return v;
}

void publish_view(simulation& sim);

// The catalog's removal of the bucket's record (etcd's, in `fjord serve`): the next view lacks it.
io::task<base::result<void>> remove_record(simulation* sim, std::string name) {
    if (name != bucket || sim->bucket_deleted)
        co_return base::fail(base::errc::no_such_bucket, "no such bucket");
    if (sim->put_done_before_removal) {  // scenario 13: the held PUT lands between probe and removal
        sim->hold_commits_to.clear();
        while (!*sim->put_done_before_removal) co_await io::yield_now{};
    }
    sim->bucket_deleted = true;
    publish_view(*sim);
    co_return base::result<void>{};
}

// The node's drive: a file system and the engine on it (`generation` > 0: a replacement drive).
base::result<void> open_drive(simulation& sim, node_side& n, unsigned generation) {
    const unsigned i = n.index;
    n.fs = std::make_unique<store::sim_file_system>(sim.seed * 31 + i + generation * 1009);
    store::engine_options eo;
    eo.data_dirs = {"/drive0"};
    eo.cores = 1;
    eo.buffers = io::buffer_pool_options{64 * 1024, 32};
    eo.journal_rotate_bytes = 64 * 1024;
    eo.fs = n.fs.get();
    eo.boot_nonce = sim.seed * 1000003 + i + generation * 7919;
    auto opened = store::engine::open(eo);
    if (!opened) return opened.as_failure();
    n.engine = std::move(*opened);
    return {};
}

std::unique_ptr<cluster::cluster_store> make_store(simulation& sim, node_side& n);

base::result<void> open_node(simulation& sim, unsigned i) {
    auto n = std::make_unique<node_side>();
    n->id = "n" + std::to_string(i + 1);
    n->index = i;
    n->where = io::endpoint{"10.1.0." + std::to_string(i + 1), 9000};
    if (auto drive = open_drive(sim, *n, 0); !drive) return drive;
    n->store = make_store(sim, *n);
    n->shards =
        std::make_unique<cluster::shard_service>(*n->engine, root, "us-east-1", &n->store->clock());
    n->front = std::make_unique<cluster::node_handler>(n->s3, *n->shards);
    n->gate = std::make_unique<node_gate>(sim.fail_upload_at, *n);
    sim.nodes.push_back(std::move(n));
    return {};
}

// The node's coordinator, as `fjord serve` makes it.
std::unique_ptr<cluster::cluster_store> make_store(simulation& sim, node_side& n) {
    cluster::cluster_store_options co;
    co.cluster = "sim";
    co.node_id = n.id;
    co.cores = 1;
    co.peers.credentials = root;
    co.peers.io_timeout_ms = 2'000;
    co.peers.connect_timeout_ms = 500;
    if (sim.options.scenario == 14) co.peers.max_answer_bytes = 1024;
    co.leftover_age_ms = 1'000;
    if (sim.options.scenario == 11) co.tombstone_age_ms = 1'500;  // tombstones expire in the run
    co.remove_bucket_record = [&sim](std::string name) { return remove_record(&sim, name); };
    node_side* self = &n;
    co.peers.transport = [&sim, self](const io::endpoint& where) {
        return std::unique_ptr<cluster::peer_transport>(new sim_transport(sim, self, where));
    };
    return std::make_unique<cluster::cluster_store>(co);
}

void cut(simulation&, node_side& n, bool off) {
    n.cut_off = off;
    if (!off) return;
    for (auto& c : n.connections) c->client_vanish();
    n.connections.clear();
}

void publish_view(simulation& sim) {
    const cluster::cluster_view view = view_of(sim);
    for (auto& n : sim.nodes) {
        if (sim.stale_views.count(n->id)) continue;
        n->store->publish(view);
        n->shards->note_view(view.layout->is_rebuilding(n->id), view.read_began_ns);
    }
}

// The node's drive is swapped for an empty one (its coordinator, clock and address stay), and the
// topology marks it rebuilding, as an operator's `fjord cluster replace-node N N` does.
void replace_drive(simulation& sim, node_side& n) {
    cut(sim, n, true);
    n.retired.push_back(
        {std::move(n.fs), std::move(n.engine), std::move(n.shards), std::move(n.front)});
    if (auto drive = open_drive(sim, n, static_cast<unsigned>(n.retired.size())); !drive) {
        sim.violation(n.id + ": the replacement drive did not open: " + drive.err().message);
        return;
    }
    n.engine->attach_core(0, io::reactor::current().ring());
    n.shards =
        std::make_unique<cluster::shard_service>(*n.engine, root, "us-east-1", &n.store->clock());
    n.front = std::make_unique<cluster::node_handler>(n.s3, *n.shards);
    sim.rebuilding.insert(n.id);
    publish_view(sim);
    n.shards->declare_rebuilding();  // as `fjord serve` does once its check of the drive marked it
    cut(sim, n, false);
}

// ---- the clients ----

class string_source final : public store::byte_source {
public:
    explicit string_source(std::string bytes) : _bytes(std::move(bytes)) {}
    io::task<base::result<std::size_t>> read(std::byte* dst, std::size_t max) override {
        const std::size_t n = std::min({max, _bytes.size() - _at, std::size_t{30'000}});
        std::memcpy(dst, _bytes.data() + _at, n);
        _at += n;
        co_return n;
    }

private:
    std::string _bytes;
    std::size_t _at = 0;
};

class string_sink final : public store::byte_sink {
public:
    io::task<base::result<void>> write(std::span<const std::byte> data) override {
        bytes.append(reinterpret_cast<const char*>(data.data()), data.size());
        co_return base::result<void>{};
    }
    std::string bytes;
};

store::record_finisher finisher(std::int64_t id) {
    return [id](const store::written_data&) -> base::result<store::object_record> {
        store::object_record r;
        r.etag = "v" + std::to_string(id);
        return r;
    };
}

// A conditional write that did not happen: its condition failed (412) or it crossed another (409).
bool refused(const base::error& e) {
    return e.code == base::errc::precondition_failed ||
           e.code == base::errc::conditional_request_conflict;
}

bool outcome_unknown(const base::error& e) {
    return base::errc_http_status(e.code) >= 500 || e.code == base::errc::timed_out ||
           e.code == base::errc::closed || e.code == base::errc::io_error;
}

// A read of `key` through `n`: the value id, absent_value for absent; nullopt when refused.
io::task<std::optional<std::int64_t>> read_key(simulation& sim, node_side& n, std::string key) {
    string_sink sink;
    store::read_planner whole =
        [](const store::object_record& r) -> base::result<std::optional<store::byte_range>> {
        return std::optional<store::byte_range>(store::byte_range{0, r.size_bytes});
    };
    const std::size_t op = sim.record(key, n.id, "get");
    auto got = co_await n.store->get(bucket, key, whole, sink);
    if (!got) {
        if (got.code() == base::errc::no_such_key) {
            sim.answered(op, {}, absent_value);
            co_return absent_value;
        }
        sim.history[op].dropped = true;
        sim.last_error = got.err().message;
        if (!outcome_unknown(got.err()))
            sim.violation(key + ": a read through " + n.id + " failed with " +
                          std::string(base::errc_name(got.code())) + ": " + got.err().message);
        co_return std::nullopt;
    }
    const std::int64_t v = value_of(sink.bytes);
    if (v < 0) sim.violation(key + ": wrong bytes read through " + n.id);
    sim.answered(op, {}, v);
    co_return v;
}

void check_read(simulation& sim, const std::string& key, std::int64_t v, const std::string& where) {
    ++sim.counts.reads;
    key_history& h = sim.keys[key];
    if (!h.allows(v))
        sim.violation(key + ": read " + std::to_string(v) + " through " + where +
                      " but the last acknowledged was " + std::to_string(h.acked));
    if (v == absent_value) {
        if (auto at = h.absent_place(h.read_at))
            h.read_at = *at;
        else if (h.read_at >= 0)
            sim.violation(key + ": read absent through " + where + " after a read had returned " +
                          std::to_string(h.writes[static_cast<std::size_t>(h.read_at)]) +
                          ", and no DELETE since can explain it (reads went back)");
    } else if (auto at = h.place_of(v)) {
        if (*at < h.read_at)
            sim.violation(key + ": read " + std::to_string(v) + " through " + where +
                          " after a read had returned the newer " +
                          std::to_string(h.writes[h.read_at]) + " (reads went back)");
        h.read_at = std::max(h.read_at, *at);
    }
}

// A write's answer into its record: ok, refused by its condition (412; 404 to an If-Match), or
// unknown; a 409 (it crossed another write and did not happen) or a violation leaves it out.
template <typename T>
base::result<void> answer(simulation& sim, std::size_t op, const base::result<T>& done) {
    if (done) {
        sim.answered(op, "ok");
        return {};
    }
    if (done.code() == base::errc::precondition_failed)
        sim.answered(op, "failed");
    else if (done.code() == base::errc::no_such_key && sim.history[op].expected)
        sim.answered(op, "absent");
    else if (!outcome_unknown(done.err()))
        sim.history[op].dropped = true;
    return done.as_failure();
}

// A PUT of value v through n, recorded: `create` with If-None-Match: *; with `expected`, If-Match
// on that value's ETag.
io::task<base::result<void>> send_value(simulation& sim, node_side& n, std::string key,
                                        std::int64_t v, bool create,
                                        std::optional<std::int64_t> expected = std::nullopt) {
    const char* kind = create ? "create" : expected ? "replace" : "put";
    const std::size_t op = sim.record(key, n.id, kind, v, expected);
    string_source body(value_bytes(v));
    store::put_request r{bucket, key, value_bytes(v).size(), 1 << 20, {}};
    r.conditions.if_none_match_any = create;
    if (expected) r.conditions.if_match_etag = "v" + std::to_string(*expected);
    auto put = co_await n.store->put(r, body, finisher(v));
    co_return answer(sim, op, put);
}

// A DELETE through n, recorded; with `expected`, If-Match on that value's ETag.
io::task<base::result<void>> send_delete(simulation& sim, node_side& n, std::string key,
                                         std::optional<std::int64_t> expected = std::nullopt) {
    const std::size_t op =
        sim.record(key, n.id, expected ? "remove" : "delete", absent_value, expected);
    store::write_conditions conditions;
    if (expected) conditions.if_match_etag = "v" + std::to_string(*expected);
    auto removed = co_await n.store->remove(bucket, key, conditions);
    co_return answer(sim, op, removed);
}

// A PUT of value v through n, its outcome kept in the key's history; true when acknowledged.
io::task<bool> put_value(simulation& sim, node_side& n, std::string key, std::int64_t v) {
    key_history& h = sim.keys[key];
    h.unknown.insert(v);
    const auto at = static_cast<std::ptrdiff_t>(h.writes.size());
    h.writes.push_back(v);
    auto put = co_await send_value(sim, n, key, v, false);
    if (put) {
        LOG_DEBUG("sim: %s = %lld acknowledged", key.c_str(), static_cast<long long>(v));
        h.acked = v, h.acked_at = at, h.unknown.clear();
        ++sim.counts.acknowledged;
        co_return true;
    }
    if (outcome_unknown(put.err())) {
        ++sim.counts.unknown;
        co_return false;
    }
    h.unknown.erase(v);
    sim.violation(key + ": a PUT failed with " + put.err().message);
    co_return false;
}

io::task<void> heal_now(node_side& n, cluster::key_place place) {
    (void)co_await n.store->heal_key(std::move(place));
}

// --history: an operation on a key every client uses (a read, and then half the time a PUT or
// DELETE with If-Match on what it read; a PUT, a create-only PUT, a DELETE), judged by the recorded
// history alone (linearizability.py), not by the keys' own histories here.
io::task<void> shared_request(simulation& sim, std::int64_t& next_value) {
    const std::string key = "shared/k" + std::to_string(sim.draw(2));
    node_side& n = *sim.nodes[sim.draw(sim.nodes.size())];
    const double roll = sim.rng.unit();
    base::result<void> done;
    if (roll < 0.4) {
        auto read = co_await read_key(sim, n, key);
        if (!read || *read <= absent_value || sim.chance(0.5)) co_return;
        node_side& writer = *sim.nodes[sim.draw(sim.nodes.size())];
        if (sim.chance(0.25))
            done = co_await send_delete(sim, writer, key, *read);
        else
            done = co_await send_value(sim, writer, key, ++next_value, false, *read);
    } else if (roll < 0.9) {
        done = co_await send_value(sim, n, key, ++next_value, roll >= 0.6);
    } else {
        done = co_await send_delete(sim, n, key);
    }
    if (done) {
        ++sim.counts.acknowledged;
    } else if (outcome_unknown(done.err())) {
        ++sim.counts.unknown;
    } else if (!refused(done.err()) && done.code() != base::errc::no_such_key) {
        sim.violation(key + ": a write failed with " + done.err().message);
    }
}

io::task<void> one_request(simulation& sim, unsigned client, std::int64_t& next_value) {
    if (!sim.options.history.empty() && sim.chance(0.3)) {
        co_await shared_request(sim, next_value);
        co_return;
    }
    const std::string key =
        "c" + std::to_string(client) + "/k" + std::to_string(sim.draw(sim.options.keys_per_client));
    node_side& n = *sim.nodes[sim.draw(sim.nodes.size())];
    key_history& h = sim.keys[key];
    const double roll = sim.rng.unit();
    if (roll < 0.5) {
        const std::int64_t v = ++next_value;
        if (!co_await put_value(sim, n, key, v) && h.unknown.count(v) > 0) {
            // Healing may take the key up at once (a read through another node queued it), while
            // the failed write's coordinator withdraws what it sent; and the client reads it back.
            if (auto place = n.store->place(bucket, key); place && sim.chance(0.5)) {
                ++sim.counts.heals_during;
                io::spawn(heal_now(*sim.nodes[sim.draw(sim.nodes.size())], *place));
            }
            if (auto back = co_await read_key(sim, *sim.nodes[sim.draw(sim.nodes.size())], key))
                check_read(sim, key, *back, "a node after a failed PUT");
        }
    } else if (roll < 0.85) {
        auto v = co_await read_key(sim, n, key);
        if (v) check_read(sim, key, *v, n.id);
    } else {
        h.unknown.insert(absent_value);
        const auto at = static_cast<std::ptrdiff_t>(h.writes.size());
        h.writes.push_back(absent_value);
        auto removed = co_await send_delete(sim, n, key);
        if (removed) {
            h.acked = absent_value, h.acked_at = at, h.unknown.clear();
            ++sim.counts.acknowledged;
        } else if (!outcome_unknown(removed.err())) {
            sim.violation(key + ": a DELETE failed with " + removed.err().message);
        }
    }
}

// Conditional creates of one key through every node at once: at most one wins.
struct cas_round {
    unsigned running = 0;
    std::vector<std::int64_t> winners;
    std::set<std::int64_t> refused;  // answered 412 or 409: never visible
};

io::task<void> try_create(simulation& sim, cas_round* round, node_side* n, std::string key,
                          std::int64_t v) {
    auto put = co_await send_value(sim, *n, key, v, true);
    if (put)
        round->winners.push_back(v);
    else if (refused(put.err()))
        round->refused.insert(v);
    else if (!outcome_unknown(put.err()))
        sim.violation(key + ": a conditional create failed with " + put.err().message);
    --round->running;
}

io::task<void> cas_client(simulation& sim) {
    for (unsigned r = 0; r < 3; ++r) {
        const std::string key = "once-" + std::to_string(r);
        cas_round round;
        std::vector<std::int64_t> tried;
        for (auto& n : sim.nodes) {
            const std::int64_t v = 1'000'000 + r * 100 + static_cast<std::int64_t>(tried.size());
            tried.push_back(v);
            ++round.running;
            io::spawn(try_create(sim, &round, n.get(), key, v));
        }
        while (round.running > 0) co_await io::yield_now{};
        ++sim.counts.cas_rounds;
        if (round.winners.size() > 1)
            sim.violation(key + ": " + std::to_string(round.winners.size()) +
                          " conditional creates succeeded");
        key_history& h = sim.keys[key];
        h.acked = round.winners.empty() ? absent_value : round.winners[0];
        for (std::int64_t v : tried)
            if ((round.winners.empty() || v != round.winners[0]) && !round.refused.count(v))
                h.unknown.insert(v);
    }
    --sim.clients_running;
}

io::task<void> client(simulation& sim, unsigned index) {
    std::int64_t next_value = static_cast<std::int64_t>(index + 1) * 1'000'000'000;
    for (unsigned i = 0; i < sim.options.requests && sim.failure.empty(); ++i)
        co_await one_request(sim, index, next_value);
    --sim.clients_running;
}

// One fault at a time: a node cut off for a while, a connection reset, a bit flipped on node 1.
io::task<void> faults(simulation& sim) {
    while (!sim.clients_done) {
        const std::uint64_t kind = sim.draw(10);
        if (kind < 3) {
            node_side& n = *sim.nodes[sim.draw(sim.nodes.size())];
            cut(sim, n, true);
            ++sim.counts.cuts;
            const std::int64_t until = base::monotonic_now_ns() + (50 + sim.draw(400)) * 1'000'000;
            while (base::monotonic_now_ns() < until && !sim.clients_done) co_await io::yield_now{};
            cut(sim, n, false);
        } else if (kind < 6) {
            node_side& n = *sim.nodes[sim.draw(sim.nodes.size())];
            if (!n.connections.empty()) {
                n.connections[sim.draw(n.connections.size())]->client_vanish();
                ++sim.counts.resets;
            }
        } else if (kind == 6 && sim.replaces_a_drive) {
            if (sim.counts.drives == 0) {  // one per seed; never node 1's (it rots in other seeds)
                ++sim.counts.drives;
                replace_drive(sim, *sim.nodes[1 + sim.draw(sim.nodes.size() - 1)]);
            }
        } else if (kind == 6) {  // a data file in one of node 1's fan-out directories
            char dir[32];
            std::snprintf(dir, sizeof dir, "/drive0/objects/%02x",
                          static_cast<unsigned>(sim.draw(256)));
            if (sim.nodes[0]->fs->flip_bit_at_rest(dir)) ++sim.counts.rot;
        }
        const std::int64_t until = base::monotonic_now_ns() + (5 + sim.draw(40)) * 1'000'000;
        while (base::monotonic_now_ns() < until && !sim.clients_done) co_await io::yield_now{};
    }
}

// Healing while the clients run, as the nodes' healers do: each node heals the keys its reads and
// writes queued (below full width, versions to trim, a failed write's leftovers), and now and then a
// random key, as the scanner does.
io::task<void> healing(simulation& sim) {
    while (!sim.clients_done) {
        for (auto& n : sim.nodes)
            for (const auto& item : n->store->take_heal_queue(4)) {
                auto place = n->store->place_in(item.space, item.bucket, item.object_key, item.key);
                if (!place) continue;
                ++sim.counts.heals_during;
                (void)co_await n->store->heal_key(*place);
            }
        if (sim.chance(0.2) && !sim.keys.empty()) {
            auto it = sim.keys.begin();
            std::advance(it, static_cast<std::ptrdiff_t>(sim.draw(sim.keys.size())));
            auto place = sim.nodes[0]->store->place(bucket, it->first);
            ++sim.counts.heals_during;
            (void)co_await sim.nodes[sim.draw(sim.nodes.size())]->store->heal_key(*place);
        }
        const std::int64_t until = base::monotonic_now_ns() + (1 + sim.draw(10)) * 1'000'000;
        while (base::monotonic_now_ns() < until && !sim.clients_done) co_await io::yield_now{};
    }
    sim.healer_running = false;
}

// Afterwards: every node back, every key healed, then read through every node and with the last m
// nodes cut off.
io::task<void> settle(simulation& sim) {
    for (auto& n : sim.nodes) cut(sim, *n, false);
    const unsigned m = sim.nodes[0]->store->snapshot()->layout->shape.m;
    for (auto& [key, h] : sim.keys) {
        auto place = sim.nodes[0]->store->place(bucket, key);
        bool done = false;
        for (int attempt = 0; attempt < 20 && !done; ++attempt) {
            auto healed = co_await sim.nodes[sim.draw(sim.nodes.size())]->store->heal_key(*place);
            done = healed && *healed;
            if (!done) {  // a failed write's leftovers wait for their age
                const std::int64_t until = base::monotonic_now_ns() + 300'000'000;
                while (base::monotonic_now_ns() < until) co_await io::yield_now{};
            }
        }
        if (!done)
            sim.violation(key + ": not healed to full width");
        else
            ++sim.counts.healed;
    }
    if (!sim.rebuilding.empty()) {  // every key at full width: the marks go
        sim.rebuilding.clear();
        publish_view(sim);
        for (auto& n : sim.nodes)
            while (!n->store->snapshot()->layout->rebuilding.empty()) co_await io::yield_now{};
    }
    for (auto& [key, h] : sim.keys)
        for (auto& n : sim.nodes) {
            auto v = co_await read_key(sim, *n, key);
            if (!v)
                sim.violation(key + ": unreadable after healing through " + n->id + ": " +
                              sim.last_error);
            else
                check_read(sim, key, *v, n->id + " after healing");
        }
    // m nodes cut off, node 1 among them: its files may have rotted unseen, which is a failure too.
    // First every version is past its writer's decision (3/4 of the leftover age): a younger one whose
    // holders cannot all be heard is not returned (its writer could still withdraw it).
    for (auto t = base::monotonic_now_ns() + 1'000'000'000; base::monotonic_now_ns() < t;)
        co_await io::yield_now{};
    cut(sim, *sim.nodes[0], true);
    for (unsigned i = 1; i < m; ++i) cut(sim, *sim.nodes[sim.nodes.size() - i], true);
    for (auto& [key, h] : sim.keys) {
        auto v = co_await read_key(sim, *sim.nodes[1], key);
        if (!v)
            sim.violation(key + ": unreadable with " + std::to_string(m) +
                          " nodes cut off: " + sim.last_error);
        else
            check_read(sim, key, *v, "n2 with m nodes cut off");
    }
}

// Whether node n's listing of the bucket names `key`; nullopt when it cannot list now.
io::task<std::optional<bool>> listed(node_side& n, std::string key) {
    store::list_request r;
    r.bucket = bucket;
    r.prefix = key;
    r.max_keys = 1000;
    auto page = co_await n.store->list(std::move(r));
    if (!page) co_return std::nullopt;
    for (const auto& e : page->entries)
        if (e.name == key) co_return true;
    co_return false;
}

// Before healing, with the workload's leftovers still in place: a listing names a key exactly when a
// GET through the same node finds it (listings judge versions by the GET's rule). A key whose two
// listings around the GET differ (a version came of age meanwhile), or that cannot be read now, is
// not compared.
io::task<void> compare_listings(simulation& sim) {
    for (auto& [key, h] : sim.keys) {
        node_side& n = *sim.nodes[sim.draw(sim.nodes.size())];
        auto before = co_await listed(n, key);
        auto v = co_await read_key(sim, n, key);
        auto after = co_await listed(n, key);
        if (v) check_read(sim, key, *v, n.id + " between listings");
        if (!before || !v || !after || *before != *after) continue;
        ++sim.counts.listed;
        if (*before != (*v != absent_value))
            sim.violation(key + ": listed through " + n.id + " as " +
                          (*before ? "present" : "absent") + " but a GET read " +
                          (*v == absent_value ? "nothing" : std::to_string(*v)));
    }
}

// The simulated time `ms` from now (what waits for it yields until then).
std::int64_t after_ms(std::int64_t ms) { return base::monotonic_now_ns() + ms * 1'000'000; }

// A write that fails while healing takes it up, its coordinator's withdrawal held up in the network
// (docs/cluster.md, "Versions"). Scenario 1: node 3 cut off and node 2's answer lost, so the write
// reached W = 3 of 4 nodes though its coordinator counts 2; healing copies it to node 3 at once and
// trims the acknowledged version before it; a withdrawal from its first nodes would leave it on node 3
// alone. Scenario 2: node 3 cut off and node 2 failing the commit, so the write is on 2 nodes; healing
// waits for the leftover age, then copies it to the rest; the withdrawal comes too late and is
// refused. Scenario 3 (6 nodes, 4+2, W = 5): node 6 cut off and node 2 failing the commit, so the
// write is on 4 nodes, readable; healing leaves it to its writer, whose withdrawal comes in time
// (copied to nodes 2 and 6 with the version before trimmed, the withdrawal would leave 2 shards).
// Scenario 4 (6 nodes): the write's commits to nodes 2, 4 and 5 held past the leftover age, node 6
// cut off: healing withdraws it from nodes 1 and 3 as a write that cannot have reached its quorum;
// when the held commits land it is on 3 nodes, and its writer must not acknowledge it (and trim the
// version before) though it counts 5 stored.
io::task<void> put_and_mark(simulation& sim, node_side& n, std::string key, std::int64_t v,
                            bool& done) {
    (void)co_await put_value(sim, n, std::move(key), v);
    done = true;
}

io::task<void> late_commits(simulation& sim) {
    node_side &n1 = *sim.nodes[0], &n4 = *sim.nodes[3], &n6 = *sim.nodes[5];
    const std::string key = "late";
    if (!co_await put_value(sim, n1, key, 1)) {
        sim.violation("the first PUT was not acknowledged");
        co_return;
    }
    cut(sim, n6, true);
    sim.hold_commits_to = {"n2", "n4", "n5"};
    bool written = false;
    io::spawn(put_and_mark(sim, n1, key, 2, written));
    for (auto t = after_ms(1'200); base::monotonic_now_ns() < t;) co_await io::yield_now{};
    cut(sim, n6, false);
    auto place = n4.store->place(bucket, key);
    (void)co_await n4.store->heal_key(*place);  // withdraws the write from nodes 1 and 3
    sim.hold_commits_to.clear();
    while (!written) co_await io::yield_now{};
    // The held commits came after their deadline: refused, they left the write nowhere.
    auto reports = co_await n4.store->read_records(*place, {key}, true);
    for (unsigned i = 0; i < reports.size(); ++i)
        for (const cluster::shard_meta& v : reports[i][0].versions)
            if (v.object.etag == "v2")
                sim.violation("node " + place->nodes[i] + " stored a commit after its deadline");
    co_await settle(sim);
}

// Scenario 5 (6 nodes): node 6 cut off and node 2 failing the commit put a write on nodes 1, 3, 4 and
// 5, where it stays past the leftover age (its withdrawal held past its deadline). One heal, through
// node 6 with node 5 cut off, passes it over (3 sound + 1 silent < W) and decides the version before;
// its withdrawals of the leftover from nodes 1, 3 and 4 are held up. Another, through node 2, hears
// every node, takes the write up (4 sound: readable) and trims the version before. Then the held
// withdrawals land.
io::task<void> partial_view(simulation& sim) {
    node_side &n1 = *sim.nodes[0], &n2 = *sim.nodes[1], &n5 = *sim.nodes[4], &n6 = *sim.nodes[5];
    const std::string key = "partial";
    if (!co_await put_value(sim, n1, key, 1)) {
        sim.violation("the first PUT was not acknowledged");
        co_return;
    }
    cut(sim, n6, true);
    sim.fail_upload_at = n2.id;
    sim.hold_withdrawals = true;
    if (co_await put_value(sim, n1, key, 2))
        sim.violation("a PUT was acknowledged with one node cut off and another failing");
    cut(sim, n6, false);
    for (auto t = after_ms(1'200); base::monotonic_now_ns() < t;) co_await io::yield_now{};
    auto place = n1.store->place(bucket, key);
    cut(sim, n5, true);
    io::spawn(heal_now(n6, *place));  // waits on its withdrawals, if it sends any
    for (auto t = after_ms(200); base::monotonic_now_ns() < t;) co_await io::yield_now{};
    cut(sim, n5, false);
    auto healed = co_await n2.store->heal_key(*place);
    if (!healed || !*healed) sim.violation("the readable write was not healed to full width");
    sim.hold_withdrawals = false;
    for (auto t = after_ms(500); base::monotonic_now_ns() < t;) co_await io::yield_now{};
    co_await settle(sim);
}

// One part holding value v, uploaded through n; the upload's id, or empty (a violation is noted).
io::task<std::string> upload_one_part(simulation& sim, node_side& n, std::string key,
                                      std::int64_t v) {
    auto id = co_await n.store->create_upload(bucket, key, {}, "");
    if (!id) {
        sim.violation(key + ": CreateMultipartUpload failed: " + id.err().message);
        co_return std::string();
    }
    string_source body(value_bytes(v));
    store::part_request r{bucket, key, *id, 1, value_bytes(v).size(), 1 << 20};
    auto part = co_await n.store->upload_part(
        r, body, [](const store::written_data& w) -> base::result<store::part_record> {
            store::part_record p;
            p.etag = "p1";
            p.data.size_bytes = w.size_bytes;
            return p;
        });
    if (!part) {
        sim.violation(key + ": UploadPart failed: " + part.err().message);
        co_return std::string();
    }
    co_return *id;
}

// Part 1 of an upload uploaded again through n with value v's bytes (the same ETag as before).
io::task<void> retry_part(simulation& sim, node_side& n, std::string key, std::string id,
                          std::int64_t v, bool& done) {
    string_source body(value_bytes(v));
    store::part_request r{bucket, key, id, 1, value_bytes(v).size(), 1 << 20};
    (void)co_await n.store->upload_part(
        r, body, [](const store::written_data& w) -> base::result<store::part_record> {
            store::part_record p;
            p.etag = "p1";
            p.data.size_bytes = w.size_bytes;
            return p;
        });
    (void)sim;
    done = true;
}

// Completes an upload through n as value v (one part); true when acknowledged.
io::task<bool> complete_as(simulation& sim, node_side& n, std::string key, std::string id,
                           std::int64_t v) {
    sim.keys[key].unknown.insert(v);
    sim.keys[key].writes.push_back(v);
    auto done = co_await n.store->complete_upload(
        bucket, key, id,
        [v](const store::upload_record& u) -> base::result<store::upload_completion> {
            store::upload_completion chosen{u.object, {}};
            for (const auto& entry : u.parts) chosen.parts.push_back(entry.first);
            chosen.record.etag = "v" + std::to_string(v);
            return chosen;
        },
        {});
    if (!done && !outcome_unknown(done.err()))
        sim.violation(key + ": a completion failed with " + done.err().message);
    co_return done.has_value();
}

// Scenario 6: an AbortMultipartUpload after a completion that answered 503. (a) Node 3 cut off and
// node 2's answer lost: the manifest is on W nodes and stands, so the abort answers NoSuchUpload and
// the parts stay (healing takes the manifest up and trims the version before: without its parts, it
// would be unreadable). (b) Node 2 failing the commit: the manifest is on 2 nodes, its withdrawal held
// up: the abort waits (503); once the withdrawal has landed and the leftover age has passed since the
// completion claimed the upload, it goes through.
io::task<void> abort_after_completion(simulation& sim) {
    node_side &n1 = *sim.nodes[0], &n2 = *sim.nodes[1], &n3 = *sim.nodes[2];
    for (const bool stands : {true, false}) {
        const std::string key = stands ? "mp-stands" : "mp-undecided";
        if (!co_await put_value(sim, n1, key, 1)) sim.violation(key + ": the first PUT failed");
        const std::string id = co_await upload_one_part(sim, n1, key, 2);
        if (id.empty()) co_return;
        cut(sim, n3, true);
        (stands ? sim.lose_upload_answer_of : sim.fail_upload_at) = n2.id;
        sim.hold_withdrawals = !stands;
        if (co_await complete_as(sim, n1, key, id, 2))
            sim.violation(key +
                          ": a completion was acknowledged with one node cut off and another "
                          "failing");
        cut(sim, n3, false);
        auto aborted = co_await n2.store->abort_upload(bucket, key, id);
        const base::errc wanted = stands ? base::errc::no_such_upload : base::errc::slow_down;
        if (aborted || aborted.code() != wanted)
            sim.violation(key + ": the abort after a completion that " +
                          (stands ? "stands" : "is undecided") + " answered " +
                          (aborted ? std::string("OK") : aborted.err().message));
        if (stands) {
            for (auto t = after_ms(100); base::monotonic_now_ns() < t;) co_await io::yield_now{};
            if (auto left = co_await n2.store->get_upload(bucket, key, id);
                left || left.code() != base::errc::no_such_upload)
                sim.violation(key + ": the upload's record outlived the completion that stands");
            continue;
        }
        // Once the withdrawal landed and the leftover age has passed since the completion claimed
        // the upload (no commit of its manifest can land after that), the abort goes through
        sim.hold_withdrawals = false;
        for (auto t = after_ms(1'200); base::monotonic_now_ns() < t;) co_await io::yield_now{};
        if (auto again = co_await n2.store->abort_upload(bucket, key, id); !again)
            sim.violation(key + ": the abort once the completion was withdrawn failed: " +
                          again.err().message);
        else
            sim.keys[key].unknown.erase(2);  // withdrawn for good: the key reads as before
    }
    co_await settle(sim);
}

io::task<void> complete_and_mark(simulation& sim, node_side& n, std::string key, std::string id,
                                 std::int64_t v, bool& acknowledged, bool& done) {
    acknowledged = co_await complete_as(sim, n, std::move(key), std::move(id), v);
    done = true;
}

io::task<void> abort_and_mark(node_side& n, std::string key, std::string id,
                              base::result<void>& outcome, bool& done) {
    outcome = co_await n.store->abort_upload(bucket, key, id);
    done = true;
}

// Scenario 8: an AbortMultipartUpload through node 2 that starts while a completion through node 1 is
// under way, every node's commits held until both are in flight. A completion and an abort each claim
// the upload's record first, so at most one acts: an acknowledged completion leaves a readable
// object; an abort that goes through leaves the key as it was. (Without the claims the abort saw no
// manifest, purged the parts the held one names, and the completion then answered 200 for an object
// no read could return.)
io::task<void> abort_crossing_completion(simulation& sim) {
    node_side &n1 = *sim.nodes[0], &n2 = *sim.nodes[1];
    const std::string key = "mp-crossed";
    if (!co_await put_value(sim, n1, key, 1)) {
        sim.violation(key + ": the first PUT failed");
        co_return;
    }
    const std::string id = co_await upload_one_part(sim, n1, key, 2);
    if (id.empty()) co_return;
    for (auto& n : sim.nodes) sim.hold_commits_to.insert(n->id);
    bool completed = false, completion_done = false, abort_done = false;
    base::result<void> aborted = base::fail(base::errc::internal);
    io::spawn(complete_and_mark(sim, n1, key, id, 2, completed, completion_done));
    for (auto t = after_ms(20 + sim.draw(40)); base::monotonic_now_ns() < t;)
        co_await io::yield_now{};
    io::spawn(abort_and_mark(n2, key, id, aborted, abort_done));
    for (auto t = after_ms(20 + sim.draw(40)); base::monotonic_now_ns() < t;)
        co_await io::yield_now{};
    sim.hold_commits_to.clear();
    while (!completion_done || !abort_done) co_await io::yield_now{};
    if (completed) {
        sim.keys[key].acked = 2;
        sim.keys[key].unknown.clear();
    }
    if (completed && aborted)
        sim.violation(key + ": both the completion and the abort of one upload succeeded");
    co_await settle(sim);
}

// Scenario 9: part 1 acknowledged, then uploaded again with the same bytes (a retried UploadPart)
// while its commits to nodes 3 and 4 are held: the new attempt is on 2 nodes (k: readable, below W)
// and its writer still waits. A completion now must choose the acknowledged attempt, which is durable,
// not the newer one its writer may yet withdraw (it was chosen, the acknowledged one purged, and the
// withdrawal left the acknowledged object without its part).
io::task<void> part_retried_during_completion(simulation& sim) {
    node_side &n1 = *sim.nodes[0], &n2 = *sim.nodes[1];
    const std::string key = "mp-retried";
    if (!co_await put_value(sim, n1, key, 1)) {
        sim.violation(key + ": the first PUT failed");
        co_return;
    }
    const std::string id = co_await upload_one_part(sim, n1, key, 2);
    if (id.empty()) co_return;
    sim.hold_part_commits_to = {sim.nodes[2]->id, sim.nodes[3]->id};
    bool retried = false;
    io::spawn(retry_part(sim, n2, key, id, 2, retried));
    for (auto t = after_ms(100); base::monotonic_now_ns() < t;) co_await io::yield_now{};
    const bool completed = co_await complete_as(sim, n1, key, id, 2);
    if (!completed) sim.violation(key + ": a completion of a healthy upload failed");
    if (completed) {
        sim.keys[key].acked = 2;
        sim.keys[key].unknown.clear();
    }
    // The retried attempt's writer gives up (its held commits time out) and withdraws it
    for (auto t = after_ms(2'500); base::monotonic_now_ns() < t;) co_await io::yield_now{};
    sim.hold_part_commits_to.clear();
    while (!retried) co_await io::yield_now{};
    co_await settle(sim);
}

// Scenario 10: node 1's clock runs 20 minutes ahead (past what other clocks follow) and it writes a
// key. Another coordinator's unconditional PUT of that key is refused by the version held ahead and
// answers 503 once; its retry goes past the held version and is acknowledged, and so is a DELETE after
// it: nothing pins the key until real time catches up (each was refused, 409 then 503, for 20 minutes).
io::task<void> clock_ahead(simulation& sim) {
    node_side &n1 = *sim.nodes[0], &n2 = *sim.nodes[1];
    const std::string key = "ahead";
    const std::int64_t ahead_ms = base::unix_now_ms() + 20 * 60 * 1000;
    (void)n1.store->clock().next_after(
        cluster::stamp{static_cast<std::uint64_t>(ahead_ms) << 16, 0});
    if (!co_await put_value(sim, n1, key, 1)) {
        sim.violation(key + ": a PUT through the node ahead failed");
        co_return;
    }
    for (std::int64_t v = 2; v <= 3; ++v) {
        bool acknowledged = false;
        for (int attempt = 0; attempt < 2 && !acknowledged; ++attempt)
            acknowledged = co_await put_value(sim, n2, key, v);
        if (!acknowledged)
            sim.violation(key +
                          ": a PUT through another node was refused twice: the key is pinned");
    }
    bool deleted = false;
    for (int attempt = 0; attempt < 2 && !deleted; ++attempt)
        deleted = bool(co_await n2.store->remove(bucket, key, {}));
    if (!deleted) sim.violation(key + ": a DELETE through another node was refused twice");
    sim.keys[key].acked = deleted ? absent_value : sim.keys[key].acked;
    sim.keys[key].unknown.clear();
    co_await settle(sim);
}

// Every shard of every part attempt in the bucket removed from every node's drive (lost for good).
io::task<void> lose_parts(simulation& sim) {
    auto snap = sim.nodes[0]->store->snapshot();
    const std::string parts =
        cluster::shard_bucket(bucket, snap->buckets.at(bucket).generation, 'p');
    for (auto& n : sim.nodes) {
        store::list_request request;
        request.bucket = parts;
        request.max_keys = 1000;
        auto page = co_await n->engine->list_versions(request);
        if (!page) continue;
        for (const auto& e : page->entries)
            (void)co_await n->engine->remove_version(parts, e.name, e.version_id);
    }
}

io::task<void> simulated_pause(std::int64_t ms) {
    std::int64_t until = after_ms(ms);
    do {
        co_await io::yield_now{};
    } while (base::monotonic_now_ns() < until && !io::reactor::current().stopping());
}

// Node 1's healer, as `fjord serve` runs it, until its scan asked for now has finished; its figures.
io::task<nlohmann::json> scan_with_healer(simulation& sim, unsigned node = 0) {
    cluster::healer_options o;
    o.queue_interval_ms = 100;
    o.scan_interval_ms = 3'600'000;
    o.pause = simulated_pause;
    node_side& n = *sim.nodes[node];
    sim.healer = std::make_unique<cluster::healer>(*n.store, *n.engine, o);
    io::spawn(sim.healer->run());
    sim.healer->request_scan(1);
    nlohmann::json stats;
    for (auto t = after_ms(10'000); base::monotonic_now_ns() < t;) {
        for (auto step = after_ms(100); base::monotonic_now_ns() < step;) co_await io::yield_now{};
        stats = nlohmann::json::parse(sim.healer->stats_json());
        if (stats["scan"]["request"] == 1 && stats["scan"]["finished_unix_ms"] != 0)
            co_return stats;
    }
    sim.violation(n.id + "'s healer did not finish a scan in 10 s");
    co_return stats;
}

// Scenario 12: a manifest whose parts are gone: its completion acknowledged with node 4 cut off (so the
// manifest is below full width), then every part shard lost. No heal can repair it: heal_key answers
// data_corrupted (it answered "not yet", and the healer retried the key every minute forever, which
// kept `heal --wait`, and so a rebuilding mark, from ever finishing). The healer of the holder that
// acts on it sets it aside once: counted as unrepairable, nothing left in its queue or its scan's
// remaining.
io::task<void> parts_lost(simulation& sim) {
    node_side &n1 = *sim.nodes[0], &n4 = *sim.nodes[3];
    const std::string key = "mp-parts-lost";
    if (!co_await put_value(sim, n1, key, 1)) {
        sim.violation(key + ": the first PUT failed");
        co_return;
    }
    const std::string id = co_await upload_one_part(sim, n1, key, 2);
    if (id.empty()) co_return;
    cut(sim, n4, true);
    const bool completed = co_await complete_as(sim, n1, key, id, 2);
    cut(sim, n4, false);
    if (!completed) {
        sim.violation(key + ": a completion with one node of 2+2 cut off failed");
        co_return;
    }
    co_await lose_parts(sim);
    for (auto t = after_ms(1'200); base::monotonic_now_ns() < t;) co_await io::yield_now{};
    auto place = n1.store->place(bucket, key);
    auto healed = co_await n1.store->heal_key(*place);
    if (healed || healed.code() != base::errc::data_corrupted)
        sim.violation(key + ": healing a manifest whose parts are gone answered " +
                      (healed ? (*healed ? "healed" : "not yet") : healed.err().message));
    // The scan that acts on the manifest is that of its holder (nodes 1 to 3) scoring highest for it
    unsigned actor = 0;
    for (unsigned i = 1; i < 3; ++i)
        if (cluster::object_hash(sim.nodes[i]->id, place->key) >
            cluster::object_hash(sim.nodes[actor]->id, place->key))
            actor = i;
    const nlohmann::json stats = co_await scan_with_healer(sim, actor);
    if (stats.value("unrepairable", 0) != 1 || stats["scan"].value("unrepairable", 0) != 1 ||
        stats.value("queue", 1) != 0 || stats["scan"].value("remaining", 1) != 0)
        sim.violation(key + ": " + sim.nodes[actor]->id +
                      "'s healer did not set the manifest aside: " + stats.dump());
}

io::task<void> put_outcome(node_side& n, std::string key, base::result<void>& outcome, bool& done) {
    string_source body(value_bytes(1));
    store::put_request r{bucket, key, value_bytes(1).size(), 1 << 20, {}};
    auto put = co_await n.store->put(r, body, finisher(1));
    outcome = put ? base::result<void>{} : put.as_failure();
    done = true;
}

// Scenario 13: DeleteBucket through node 2 while a PUT through node 1 is under way, the ends of its
// shard uploads held until the deletion has probed the bucket (empty) and is removing its record. At most one of them may succeed: a PUT
// acknowledged into a bucket whose deletion also succeeded is lost. Nor may a node's shard bucket of
// the deleted bucket be made again by the late shards (it was never reclaimed). Without the fences,
// the probe saw an empty bucket, the deletion succeeded, and the held shards then committed: both
// answered OK.
io::task<void> delete_bucket_crossing_put(simulation& sim) {
    node_side &n1 = *sim.nodes[0], &n2 = *sim.nodes[1];
    const std::string generation = n1.store->snapshot()->buckets.at(bucket).generation;
    for (auto& n : sim.nodes) sim.hold_commits_to.insert(n->id);
    base::result<void> put = base::fail(base::errc::internal);
    bool put_done = false;
    io::spawn(put_outcome(n1, "crossed-by-delete", put, put_done));
    for (auto t = after_ms(20 + sim.draw(40)); base::monotonic_now_ns() < t;)
        co_await io::yield_now{};
    sim.put_done_before_removal = &put_done;
    auto deleted = co_await n2.store->delete_bucket(bucket);
    sim.hold_commits_to.clear();
    while (!put_done) co_await io::yield_now{};
    if (put && deleted)
        sim.violation("a PUT was acknowledged into a bucket whose deletion succeeded (lost)");
    if (!deleted) co_return;  // (the PUT won: its shards committed before the fence)
    for (auto t = after_ms(500); base::monotonic_now_ns() < t;) co_await io::yield_now{};
    for (auto& n : sim.nodes)
        for (char space : {'c', 'u', 'p'})
            if (n->engine->bucket_exists(cluster::shard_bucket(bucket, generation, space)))
                sim.violation(n->id + " still holds a shard bucket of the deleted bucket");
}

// Scenario 14 (a peer's answer may be at most 1 KiB): 40 keys written, then their records read from
// every node in one batch, as a heal scan does. The batch's answer is larger than a peer's answer may
// be; the reader asks again in halves. Without that, each node's whole answer failed (every key of
// the batch "not decidable" for the scan), however few of its keys were large.
io::task<void> large_record_batch(simulation& sim) {
    node_side& n1 = *sim.nodes[0];
    std::vector<std::string> keys;
    for (int i = 0; i < 40; ++i) {
        keys.push_back("batch/" + std::to_string(100 + i));
        if (!co_await put_value(sim, n1, keys.back(), i + 1)) {
            sim.violation(keys.back() + ": a PUT to a healthy cluster was not acknowledged");
            co_return;
        }
    }
    auto place = n1.store->place(bucket, keys.front());
    std::vector<std::string> same_set;
    for (const auto& key : keys)
        if (auto p = n1.store->place(bucket, key); p && p->nodes == place->nodes)
            same_set.push_back(key);
    auto reports = co_await n1.store->read_records(*place, same_set);
    for (std::size_t i = 0; i < reports.size(); ++i)
        for (std::size_t j = 0; j < same_set.size(); ++j)
            if (reports[i][j].kind != cluster::node_report::state::present)
                sim.violation(same_set[j] + ": node " + place->nodes[i] +
                              "'s record was not read: " + reports[i][j].failure.message);
}

// Scenario 11 (tombstones expire after 1.5 s): a key written, then deleted and healed to full width
// through node 1, to which nodes 3 and 4 are suspect: the trims skip them, so the value stays there
// under the tombstone. Once the tombstone is old, a heal through node 2, to which nodes 3 and 4 are
// suspect again, expires it. Its trim skips them again, so the tombstone must stay there: withdrawn,
// the value it hid (on 2 = k nodes) would be read again (it was: the deleted object came back).
io::task<void> tombstone_expiry(simulation& sim) {
    node_side &n1 = *sim.nodes[0], &n2 = *sim.nodes[1];
    const std::string key = "expired";
    if (!co_await put_value(sim, n1, key, 1)) {
        sim.violation(key + ": the PUT failed");
        co_return;
    }
    n1.store->suspect(sim.nodes[2]->id);
    n1.store->suspect(sim.nodes[3]->id);
    if (!co_await n1.store->remove(bucket, key, {})) {
        sim.violation(key + ": the DELETE failed");
        co_return;
    }
    sim.keys[key].acked = absent_value;
    auto place = n1.store->place(bucket, key);
    bool full = false;
    for (int attempt = 0; attempt < 10 && !full; ++attempt) {
        auto healed = co_await n1.store->heal_key(*place);
        full = healed && *healed;
    }
    for (auto t = after_ms(2'000); base::monotonic_now_ns() < t;) co_await io::yield_now{};
    n2.store->suspect(sim.nodes[2]->id);
    n2.store->suspect(sim.nodes[3]->id);
    (void)co_await n2.store->heal_key(*place);
    for (auto t = after_ms(2'500); base::monotonic_now_ns() < t;) co_await io::yield_now{};
    for (auto& n : sim.nodes) {
        auto v = co_await read_key(sim, *n, key);
        if (v) check_read(sim, key, *v, n->id + " after the tombstone expired");
    }
    co_await settle(sim);
}

// Scenario 16: node 1 writes a key at full width, then restarts (its coordinator and its clock afresh)
// with its wall clock stepped back, and its next write of the key gets the same stamp as the first
// (forced here: the clock is moved to just before it, as a step back of the right size does). Every
// node holds that stamp already and counted the upload as a repeat of it: the second write answered
// 200 though no node holds its bytes, and reads returned the first. A node now says what it holds
// under the stamp (its entity tag) and the coordinator counts it stored only if it is its own.
io::task<void> repeated_stamp(simulation& sim) {
    node_side& n1 = *sim.nodes[0];
    const std::string key = "repeated";
    if (!co_await put_value(sim, n1, key, 1)) {
        sim.violation("a PUT to a healthy cluster was not acknowledged");
        co_return;
    }
    auto place = n1.store->place(bucket, key);
    auto first = co_await n1.store->quorum_read(*place);
    if (!first || !first->found) {
        sim.violation(key + ": the first write did not read back");
        co_return;
    }
    sim.clock.step_unix_ms(-1'000);
    n1.retired_stores.push_back(std::move(n1.store));
    n1.store = make_store(sim, n1);
    n1.store->attach_core(0);
    n1.store->publish(view_of(sim));
    while (!n1.store->ready()) co_await io::yield_now{};
    const cluster::stamp held = first->meta.version;
    n1.store->clock().observe(cluster::stamp{held.time - 1, held.node});
    (void)co_await put_value(sim, n1, key, 2);  // its stamp is the first write's
    if (auto v = co_await read_key(sim, n1, key)) check_read(sim, key, *v, n1.id);
    if (!co_await put_value(sim, n1, key, 3))  // past the stamp it was refused for
        sim.violation(key + ": the write after the refused one was not acknowledged");
    for (auto& n : sim.nodes)
        if (auto v = co_await read_key(sim, *n, key)) check_read(sim, key, *v, n->id);
    // Its stamp is the first write's time, 1 s ahead of the clock stepped back: past its writer's
    // decision only once that much more has gone by.
    for (auto t = after_ms(1'500); base::monotonic_now_ns() < t;) co_await io::yield_now{};
    co_await settle(sim);
}

// The keys of a shard bucket as node n's engine holds them.
io::task<std::vector<std::string>> shard_keys(node_side& n, std::string shard_bucket) {
    store::list_request r;
    r.bucket = shard_bucket;
    r.max_keys = 1000;
    auto page = co_await n.engine->list(std::move(r));
    std::vector<std::string> keys;
    if (page)
        for (const auto& e : page->entries) keys.push_back(e.name);
    co_return keys;
}

// Scenario 17: an upload of one part aborted through node 1, to which nodes 3 and 4 are suspect: the
// abort's claim reaches every node (suspects are asked when too few are open), but a purge by trims
// skips them, so the part stays on 2 = k nodes. The scan of node 3 or 4 (the one that acts on the part)
// then read it as a readable version and healed it back to full width: the aborted upload's part back for good, its space never reclaimed. A
// purge now writes a tombstone, which healing carries to the nodes the purge missed.
io::task<void> partial_purge(simulation& sim) {
    node_side &n1 = *sim.nodes[0], &n3 = *sim.nodes[2], &n4 = *sim.nodes[3];
    const std::string key = "purged";
    const std::string id = co_await upload_one_part(sim, n1, key, 1);
    if (id.empty()) co_return;
    auto parts = n1.store->place_in('p', bucket, key, std::string());
    const std::vector<std::string> part_keys = co_await shard_keys(n3, parts->shard_bucket);
    if (part_keys.empty()) {
        sim.violation(key + ": the part is not on " + n3.id);
        co_return;
    }
    n1.store->suspect(n3.id);
    n1.store->suspect(n4.id);
    if (auto aborted = co_await n1.store->abort_upload(bucket, key, id); !aborted)
        sim.violation(key + ": the abort failed: " + aborted.err().message);
    for (auto t = after_ms(2'500); base::monotonic_now_ns() < t;) co_await io::yield_now{};
    // The scan of the part's holder (node 3 or 4) that scores highest for it: the one that acts
    const std::string part_key = n1.store->place_in('p', bucket, key, part_keys[0])->key;
    const bool third =
        cluster::object_hash(n3.id, part_key) > cluster::object_hash(n4.id, part_key);
    (void)co_await scan_with_healer(sim, third ? 2 : 3);
    for (const auto& part_key : part_keys) {
        auto place = n1.store->place_in('p', bucket, key, part_key);
        auto d = co_await n1.store->quorum_read(*place);
        if (d && d->found)
            sim.violation(key + ": a part of the aborted upload came back by healing, on " +
                          std::to_string(d->holders) + " nodes");
    }
}

// Scenario 15: a node whose drive was replaced (empty) is read through a node that cannot read the map
// (etcd out of its reach), so it has not seen the rebuilding mark: a key acknowledged on the wiped node
// and two others, one of them cut off at the read. Counting what the wiped node lacks as an answer, the
// reader settled on "absent" and an acknowledged PUT read as missing (404). The wiped node says it is
// rebuilding in its answers (rpc.h): the read cannot settle until the holder is back (503), then reads
// the value.
io::task<void> stale_view_rebuild(simulation& sim) {
    const std::string key = "stale";
    auto place = sim.nodes[0]->store->place(bucket, key);
    auto node = [&](unsigned shard) -> node_side& {
        for (auto& n : sim.nodes)
            if (n->id == place->nodes[shard]) return *n;
        return *sim.nodes[0];
    };
    node_side &wiped = node(0), &holder = node(1), &cut_holder = node(2), &reader = node(3);
    cut(sim, reader, true);
    if (!co_await put_value(sim, holder, key, 1)) {
        sim.violation("a PUT on W nodes was not acknowledged");
        co_return;
    }
    cut(sim, reader, false);
    sim.stale_views.insert(reader.id);
    replace_drive(sim, wiped);
    cut(sim, cut_holder, true);
    if (auto v = co_await read_key(sim, reader, key)) check_read(sim, key, *v, reader.id);
    cut(sim, cut_holder, false);
    for (auto t = after_ms(2'500); base::monotonic_now_ns() < t;) co_await io::yield_now{};
    auto v = co_await read_key(sim, reader, key);
    if (!v)
        sim.violation(key + ": unreadable through " + reader.id +
                      " with every node back: " + sim.last_error);
    else
        check_read(sim, key, *v, reader.id + " with every node back");
    sim.stale_views.clear();
    co_await settle(sim);
}

io::task<void> held_withdrawal(simulation& sim) {
    const unsigned scenario = sim.options.scenario;
    node_side &n1 = *sim.nodes[0], &n2 = *sim.nodes[1], &n4 = *sim.nodes[3];
    node_side& away = *sim.nodes[scenario == 3 ? 5 : 2];
    const std::string key = "held";
    if (!co_await put_value(sim, n1, key, 1)) {
        sim.violation("the first PUT was not acknowledged");
        co_return;
    }
    cut(sim, away, true);
    (scenario == 1 ? sim.lose_upload_answer_of : sim.fail_upload_at) = n2.id;
    sim.hold_withdrawals = true;
    if (co_await put_value(sim, n1, key, 2))
        sim.violation("a PUT was acknowledged with one node cut off and another failing");
    cut(sim, away, false);
    if (scenario == 2)  // past the leftover age
        for (auto t = after_ms(1'200); base::monotonic_now_ns() < t;) co_await io::yield_now{};
    auto place = n4.store->place(bucket, key);
    if (scenario == 3) {
        auto healed = co_await n4.store->heal_key(*place);
        if (healed && *healed) sim.violation("healing took up a young write below its quorum");
        sim.hold_withdrawals = false;
        co_await settle(sim);
        co_return;
    }
    bool healed = false;
    for (int attempt = 0; attempt < 10 && !healed; ++attempt) {
        auto done = co_await n4.store->heal_key(*place);
        healed = done && *done;
        for (auto t = after_ms(healed ? 0 : 300); base::monotonic_now_ns() < t;)
            co_await io::yield_now{};
    }
    if (!healed) sim.violation("the failed write was not healed to full width");
    sim.hold_withdrawals = false;
    for (auto t = after_ms(500); base::monotonic_now_ns() < t;) co_await io::yield_now{};
    auto reports = co_await n4.store->read_records(*place, {key}, true);
    std::vector<cluster::node_report> by_node;
    for (auto& node : reports) by_node.push_back(std::move(node[0]));
    auto d = cluster::decide_version(*place, by_node);
    if (!d || !d->found || !d->full_width || d->meta.object.etag != "v2")
        sim.violation("after the held withdrawal, the failed write is not on every node");
    co_await settle(sim);
}

// Scenario 7: small objects (1,000 and 5,000 bytes among them) written and read through every node of
// a healthy cluster. A shard read whose answer is already buffered finishes before it yields; the
// reader must count it, or it waits for a read that does not exist until the hedge timer (it did:
// 2 s on every such GET). A read of a healthy cluster takes a few simulated milliseconds.
io::task<void> healthy_small_reads(simulation& sim) {
    constexpr std::int64_t bound_ms = 500;  // hedge_ms is 2,000
    for (std::int64_t v = 1; v <= 24 && sim.failure.empty(); ++v) {
        const std::string key = "small/" + std::to_string(v);
        if (!co_await put_value(sim, *sim.nodes[v % sim.nodes.size()], key, v)) {
            sim.violation(key + ": a PUT to a healthy cluster was not acknowledged");
            co_return;
        }
        for (auto& n : sim.nodes) {
            const std::int64_t began_ns = base::monotonic_now_ns();
            auto got = co_await read_key(sim, *n, key);
            const std::int64_t took_ms = (base::monotonic_now_ns() - began_ns) / 1'000'000;
            if (got) check_read(sim, key, *got, n->id);
            if (took_ms > bound_ms)
                sim.violation(key + " (" + std::to_string(value_bytes(v).size()) + " bytes) took " +
                              std::to_string(took_ms) + " ms to read through " + n->id +
                              " on a healthy cluster");
        }
    }
}

// Scenario 18 (any --nodes from 4 to 96; docs/cluster.md, "Scale", runs it with 96): the cluster at
// its size, nothing failing but one drive. Eight writers put `scale_keys_per_node` keys per node through
// random nodes. Placement is then counted on the nodes' own drives: every node holds a shard of exactly
// the keys whose set it is in, and the figures say how evenly keys fall on sets and shards on nodes.
// One node's drive is replaced by an empty one (marked rebuilding, as `fjord cluster replace-node` does),
// every node's healer scans as `fjord cluster heal` asks, and the rebuild is timed on the simulated clock
// until the node holds its share again; then every key reads back through a random node.
constexpr unsigned scale_keys_per_node = 8;

io::task<void> scale_writer(simulation& sim, unsigned writer, unsigned count, unsigned* running) {
    for (unsigned i = 0; i < count && sim.failure.empty(); ++i) {
        const std::string key = "scale-" + std::to_string(sim.seed) + "-" + std::to_string(writer) +
                                "-" + std::to_string(i);
        const std::int64_t v = static_cast<std::int64_t>(writer + 1) * 1'000'000'000 + i + 1;
        if (!co_await put_value(sim, *sim.nodes[sim.draw(sim.nodes.size())], key, v))
            sim.violation(key + ": a PUT failed with nothing failing");
    }
    --*running;
}

// The keys of one node-local shard bucket on the node's own drive.
io::task<std::size_t> count_shards(node_side& n, std::string shard_bucket) {
    std::size_t count = 0;
    store::list_request r;
    r.bucket = std::move(shard_bucket);
    for (;;) {
        auto page = co_await n.engine->list(r);
        if (!page) co_return count;
        count += page->entries.size();
        if (!page->truncated || page->entries.empty()) co_return count;
        r.start_after = page->entries.back().name;
    }
}

// "least / mean / most" of a count per item, over `items` items (those missing count 0).
template <typename Map>
std::string spread(const Map& counts, std::size_t items) {
    std::size_t least = counts.size() < items ? 0 : SIZE_MAX, most = 0, sum = 0;
    for (const auto& [name, c] : counts)
        least = std::min(least, c), most = std::max(most, c), sum += c;
    char text[80];
    std::snprintf(text, sizeof text, "%zu / %.1f / %zu", least,
                  static_cast<double>(sum) / static_cast<double>(std::max<std::size_t>(items, 1)),
                  most);
    return text;
}

// Each node's count of shards on its drive against what placement says it should hold; the expected
// count per node, per set.
io::task<std::map<std::string, std::size_t>> check_placement(simulation& sim,
                                                             std::string* figures) {
    std::map<std::string, std::size_t> per_node, per_set;
    auto layout = *sim.nodes[0]->store->snapshot()->layout;
    std::string shard_bucket;
    for (const auto& [key, h] : sim.keys) {
        auto place = sim.nodes[0]->store->place(bucket, key);
        shard_bucket = place->shard_bucket;
        for (const auto& id : place->nodes) ++per_node[id];
        for (std::size_t s = 0; s < layout.sets.size(); ++s)
            if (std::count(layout.sets[s].begin(), layout.sets[s].end(), place->nodes[0]))
                ++per_set["set" + std::to_string(s)];
    }
    for (auto& n : sim.nodes) {
        const std::size_t held = co_await count_shards(*n, shard_bucket);
        if (held != per_node[n->id])
            sim.violation(n->id + " holds " + std::to_string(held) +
                          " shards; placement gives it " + std::to_string(per_node[n->id]));
    }
    *figures = std::to_string(sim.keys.size()) + " keys over " +
               std::to_string(layout.sets.size()) + " sets of " + std::to_string(layout.shape.k) +
               "+" + std::to_string(layout.shape.m) + ": keys per set (least / mean / most) " +
               spread(per_set, layout.sets.size()) + ", shards per node " +
               spread(per_node, sim.nodes.size());
    co_return per_node;
}

io::task<void> at_scale(simulation& sim) {
    constexpr unsigned writers = 8;
    const unsigned each = scale_keys_per_node * static_cast<unsigned>(sim.nodes.size()) / writers;
    unsigned running = writers;
    for (unsigned w = 0; w < writers; ++w) io::spawn(scale_writer(sim, w, each, &running));
    while (running > 0) co_await io::yield_now{};
    std::string placed;
    const auto shares = co_await check_placement(sim, &placed);
    if (!sim.failure.empty()) co_return;
    node_side& lost = *sim.nodes[1 + sim.draw(sim.nodes.size() - 1)];
    replace_drive(sim, lost);
    ++sim.counts.drives;
    const std::int64_t began = base::monotonic_now_ns();
    cluster::healer_options o;
    o.queue_interval_ms = 100;
    o.scan_interval_ms = 3'600'000;
    o.pause = simulated_pause;
    for (auto& n : sim.nodes) {
        sim.healers.push_back(std::make_unique<cluster::healer>(*n->store, *n->engine, o));
        io::spawn(sim.healers.back()->run());
        sim.healers.back()->request_scan(1);
    }
    const std::string shard_bucket = sim.nodes[0]->store->place(bucket, "scale-0-0")->shard_bucket;
    std::size_t held = 0;
    for (auto t = after_ms(60'000); base::monotonic_now_ns() < t && held < shares.at(lost.id);) {
        for (auto step = after_ms(100); base::monotonic_now_ns() < step;) co_await io::yield_now{};
        held = co_await count_shards(lost, shard_bucket);
    }
    const double rebuilt_s = static_cast<double>(base::monotonic_now_ns() - began) / 1e9;
    if (held < shares.at(lost.id))
        sim.violation(lost.id + " holds " + std::to_string(held) + " of its " +
                      std::to_string(shares.at(lost.id)) +
                      " shards 60 s after its drive was replaced");
    sim.rebuilding.clear();
    publish_view(sim);
    for (auto& [key, h] : sim.keys) {
        node_side& n = *sim.nodes[sim.draw(sim.nodes.size())];
        if (auto v = co_await read_key(sim, n, key))
            check_read(sim, key, *v, n.id + " after the rebuild");
        else
            sim.violation(key + ": unreadable through " + n.id +
                          " after the rebuild: " + sim.last_error);
    }
    std::size_t healers = 0, most = 0;  // the nodes that rebuilt something, and the most one did
    for (const auto& h : sim.healers) {
        const auto healed = nlohmann::json::parse(h->stats_json())["healed"].get<std::size_t>();
        healers += healed > 0, most = std::max(most, healed);
    }
    char rebuilt[200];
    std::snprintf(
        rebuilt, sizeof rebuilt,
        "; %s's drive replaced: its %zu shards rebuilt in %.2f s by %zu nodes (at most %zu "
        "by one)",
        lost.id.c_str(), shares.at(lost.id), rebuilt_s, healers, most);
    sim.figures = placed + rebuilt;
}

io::task<void> life(simulation& sim) {
    for (auto& n : sim.nodes)  // the published view reaches each store as a message
        while (!n->store->ready()) co_await io::yield_now{};
    if (sim.options.scenario >= 4) {
        if (sim.options.scenario == 18)
            co_await at_scale(sim);
        else if (sim.options.scenario == 17)
            co_await partial_purge(sim);
        else if (sim.options.scenario == 16)
            co_await repeated_stamp(sim);
        else if (sim.options.scenario == 15)
            co_await stale_view_rebuild(sim);
        else if (sim.options.scenario == 14)
            co_await large_record_batch(sim);
        else if (sim.options.scenario == 13)
            co_await delete_bucket_crossing_put(sim);
        else if (sim.options.scenario == 12)
            co_await parts_lost(sim);
        else if (sim.options.scenario == 11)
            co_await tombstone_expiry(sim);
        else if (sim.options.scenario == 10)
            co_await clock_ahead(sim);
        else if (sim.options.scenario == 9)
            co_await part_retried_during_completion(sim);
        else if (sim.options.scenario == 8)
            co_await abort_crossing_completion(sim);
        else if (sim.options.scenario == 7)
            co_await healthy_small_reads(sim);
        else if (sim.options.scenario == 6)
            co_await abort_after_completion(sim);
        else
            co_await (sim.options.scenario == 4 ? late_commits(sim) : partial_view(sim));
        sim.all_done = true;
        co_return;
    }
    if (sim.options.scenario != 0) {
        co_await held_withdrawal(sim);
        sim.all_done = true;
        co_return;
    }
    sim.replaces_a_drive = sim.chance(0.5);
    sim.clients_running = sim.options.clients + 1;
    for (unsigned c = 0; c < sim.options.clients; ++c) io::spawn(client(sim, c));
    io::spawn(cas_client(sim));
    io::spawn(faults(sim));
    io::spawn(healing(sim));
    while (sim.clients_running > 0) co_await io::yield_now{};
    sim.clients_done = true;
    while (sim.healer_running) co_await io::yield_now{};
    if (sim.failure.empty()) co_await compare_listings(sim);
    if (sim.failure.empty()) co_await settle(sim);
    sim.all_done = true;
}

io::task<void> pump(simulation& sim, io::reactor_group* group) {
    while (!sim.all_done) {
        sim.net.step(3'000'000);
        co_await io::yield_now{};
    }
    for (auto& n : sim.nodes) cut(sim, *n, true);  // every connection ends
    for (int i = 0; i < 10'000 && sim.net.open_connections() > 0; ++i) {
        sim.net.step();
        co_await io::yield_now{};
    }
    group->stop();
}

// The seed's history as linearizability.py loads it: {"keys": {key: [operation, ...]}}, times in
// seconds of the simulated clock.
std::string write_history(const simulation& sim) {
    nlohmann::json keys = nlohmann::json::object();
    for (const recorded_op& op : sim.history) {
        if (op.dropped) continue;
        nlohmann::json o = {{"client", op.client},
                            {"kind", op.kind},
                            {"note", op.client},
                            {"invoked", static_cast<double>(op.invoked_ns) / 1e9}};
        o["returned"] = op.returned_ns < 0
                            ? nlohmann::json(nullptr)
                            : nlohmann::json(static_cast<double>(op.returned_ns) / 1e9);
        o["value"] = op.value == absent_value ? nlohmann::json(nullptr) : nlohmann::json(op.value);
        o["expected"] = op.expected ? nlohmann::json(*op.expected) : nlohmann::json(nullptr);
        o["outcome"] = op.outcome.empty() ? nlohmann::json(nullptr) : nlohmann::json(op.outcome);
        keys[op.key].push_back(std::move(o));
    }
    const std::string path = sim.options.history + "/seed-" + std::to_string(sim.seed) + ".json";
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (!f) return "cannot write " + path + ": " + std::strerror(errno);
    const std::string text = nlohmann::json{{"keys", std::move(keys)}}.dump();
    const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    if (std::fclose(f) != 0 || !written) return "cannot write " + path;
    return {};
}

std::string run_seed(std::uint64_t seed, const run_options& options, tally* totals,
                     std::string* summary) {
    simulation sim(seed, options);
    base::set_thread_clock(&sim.clock);
    for (unsigned i = 0; i < options.nodes; ++i)
        if (auto opened = open_node(sim, i); !opened) {
            base::set_thread_clock(nullptr);
            return "node " + std::to_string(i + 1) + " did not open: " + opened.err().message;
        }
    io::reactor_group group(1);
    group.run_simulated(
        [&](unsigned) {
            const cluster::cluster_view view = view_of(sim);
            for (auto& n : sim.nodes) {
                n->engine->attach_core(0, io::reactor::current().ring());
                n->store->attach_core(0);
                n->store->publish(view);
            }
            io::spawn(life(sim));
            io::spawn(pump(sim, &group));
        },
        [&](unsigned running) { return static_cast<unsigned>(sim.draw(running)); });
    base::set_thread_clock(nullptr);
    totals->add(sim.counts);
    *summary = sim.counts.describe(sim.nodes.size());
    if (!sim.figures.empty()) *summary += "; " + sim.figures;
    if (!options.history.empty() && options.scenario == 0)
        if (auto failed = write_history(sim); !failed.empty() && sim.failure.empty()) return failed;
    return sim.failure;
}

int usage() {
    std::fprintf(
        stderr,
        "usage: cluster_sim [--seed N] [--seeds COUNT] [--nodes 4..6, to 96 with --scenario 18] [--clients N] "
        "[--requests N] [--scenario 1..18] [--history DIR] [--verbose]\n");
    return 64;
}

}  // namespace
}  // namespace fjord::sim

int main(int argc, char** argv) {
    using namespace fjord::sim;
    run_options options;
    seed_args args;
    std::vector<char*> rest;  // the arguments parse_seed_args knows
    for (int i = 0; i < argc; ++i) {
        if (std::string_view(argv[i]) == "--history" && i + 1 < argc)
            options.history = argv[++i];
        else
            rest.push_back(argv[i]);
    }
    argc = static_cast<int>(rest.size());
    argv = rest.data();
    if (!parse_seed_args(argc, argv, args,
                         {{"nodes", &options.nodes},
                          {"clients", &options.clients},
                          {"requests", &options.requests},
                          {"scenario", &options.scenario}}) ||
        options.nodes < 4 || options.nodes > (options.scenario == 18 ? 96 : 6) ||
        options.clients == 0 || options.scenario > 18 ||
        ((options.scenario == 3 || options.scenario == 4 || options.scenario == 5) &&
         options.nodes != 6))
        return usage();
    options.first_seed = args.first_seed;
    options.seeds = args.seeds;
    options.verbose = args.verbose;
    fjord::base::set_log_level(options.verbose ? fjord::base::log_level::debug
                                               : fjord::base::log_level::off);
    tally totals;
    auto one = [&](std::uint64_t seed) {
        seed_outcome out;
        out.failure = run_seed(seed, options, &totals, &out.summary);
        return out;
    };
    return run_seeds("cluster_sim", options.first_seed, options.seeds, options.verbose, one,
                     [&] { return totals.describe(options.nodes); });
}
