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
// Usage: cluster_sim [--seed N] [--seeds COUNT] [--nodes 4|5|6] [--clients N] [--requests N] [--verbose]
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/log.h"
#include "base/metrics.h"
#include "cluster/cluster_store.h"
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
                  drives = 0, cas_rounds = 0, healed = 0;

    void add(const tally& o) {
        acknowledged += o.acknowledged, unknown += o.unknown, reads += o.reads, cuts += o.cuts;
        resets += o.resets, rot += o.rot, drives += o.drives, cas_rounds += o.cas_rounds;
        healed += o.healed;
    }
    std::string describe(std::size_t nodes) const {
        char line[256];
        std::snprintf(
            line, sizeof line,
            "%zu nodes: %llu acknowledged, %llu unknown, %llu reads checked, %llu "
            "cut-offs, %llu resets, %llu bits rotted, %llu drives replaced, %llu "
            "conditional rounds, %llu keys healed",
            nodes, static_cast<unsigned long long>(acknowledged),
            static_cast<unsigned long long>(unknown), static_cast<unsigned long long>(reads),
            static_cast<unsigned long long>(cuts), static_cast<unsigned long long>(resets),
            static_cast<unsigned long long>(rot), static_cast<unsigned long long>(drives),
            static_cast<unsigned long long>(cas_rounds), static_cast<unsigned long long>(healed));
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
    http::server_limits limits;
    http::connection_stats stats;
    base::metrics metrics{1};
    bool cut_off = false;
    std::vector<std::shared_ptr<sim_connection>> connections;  // to its data plane
    std::vector<retired_drive> retired;
};

// A key's history as its one writer knows it (keys are owned by one client, as in the fault test).
struct key_history {
    std::int64_t acked = absent_value;  // the last acknowledged value (absent_value: deleted)
    std::set<std::int64_t> unknown;     // written since, outcome unknown
    bool allows(std::int64_t v) const { return v == acked || unknown.count(v) > 0; }
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
    std::mt19937_64 rng;
    sim_clock clock;
    sim_network net;
    std::vector<std::unique_ptr<node_side>> nodes;
    std::map<std::string, key_history> keys;
    std::string failure;
    std::string last_error;  // of the last read refused
    bool clients_done = false, all_done = false;
    unsigned clients_running = 0;
    tally counts;
    bool replaces_a_drive = false;     // this seed: a drive replaced, no bit rot
    std::set<std::string> rebuilding;  // as the topology marks them
    std::int64_t view_revision = 0;

    std::uint64_t draw(std::uint64_t n) { return n == 0 ? 0 : rng() % n; }
    bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; }
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
    std::mt19937_64 r(static_cast<std::uint64_t>(id));
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
        node_side* target = _sim.node_at(_to);
        if (!target || target->cut_off || _from->cut_off)
            co_return base::fail(base::errc::io_error, "connect: connection refused");
        _conn = _sim.net.connect(_sim.chance(0.2) ? 4096 : 256 * 1024);
        target->connections.push_back(_conn);
        sim_connection* c = _conn.get();
        io::spawn(http::serve_connection(io::stream::simulated(c), *target->front, target->limits,
                                         target->stats, target->metrics.for_core(0)));
        co_return base::result<void>{};
    }

    io::task<base::result<void>> send_all(std::span<iovec> parts) override {
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
};

// ---- the nodes ----

cluster::cluster_view view_of(simulation& sim) {
    cluster::cluster_view v;
    v.revision = ++sim.view_revision;
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
    v.buckets[bucket] = cluster::bucket_record{bucket, 1, "0001", {}, 1};
    return v;
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

base::result<void> open_node(simulation& sim, unsigned i) {
    auto n = std::make_unique<node_side>();
    n->id = "n" + std::to_string(i + 1);
    n->index = i;
    n->where = io::endpoint{"10.1.0." + std::to_string(i + 1), 9000};
    if (auto drive = open_drive(sim, *n, 0); !drive) return drive;
    cluster::cluster_store_options co;
    co.cluster = "sim";
    co.node_id = n->id;
    co.cores = 1;
    co.peers.credentials = root;
    co.peers.io_timeout_ms = 2'000;
    co.peers.connect_timeout_ms = 500;
    co.leftover_age_ms = 1'000;
    node_side* self = n.get();
    co.peers.transport = [&sim, self](const io::endpoint& where) {
        return std::unique_ptr<cluster::peer_transport>(new sim_transport(sim, self, where));
    };
    n->store = std::make_unique<cluster::cluster_store>(co);
    n->shards =
        std::make_unique<cluster::shard_service>(*n->engine, root, "us-east-1", &n->store->clock());
    n->front = std::make_unique<cluster::node_handler>(n->s3, *n->shards);
    sim.nodes.push_back(std::move(n));
    return {};
}

void cut(simulation&, node_side& n, bool off) {
    n.cut_off = off;
    if (!off) return;
    for (auto& c : n.connections) c->client_vanish();
    n.connections.clear();
}

void publish_view(simulation& sim) {
    const cluster::cluster_view view = view_of(sim);
    for (auto& n : sim.nodes) n->store->publish(view);
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
    auto got = co_await n.store->get(bucket, key, whole, sink);
    if (!got) {
        if (got.code() == base::errc::no_such_key) co_return absent_value;
        sim.last_error = got.err().message;
        if (!outcome_unknown(got.err()))
            sim.violation(key + ": a read through " + n.id + " failed with " +
                          std::string(base::errc_name(got.code())) + ": " + got.err().message);
        co_return std::nullopt;
    }
    const std::int64_t v = value_of(sink.bytes);
    if (v < 0) sim.violation(key + ": wrong bytes read through " + n.id);
    co_return v;
}

void check_read(simulation& sim, const std::string& key, std::int64_t v, const std::string& where) {
    ++sim.counts.reads;
    const key_history& h = sim.keys[key];
    if (!h.allows(v))
        sim.violation(key + ": read " + std::to_string(v) + " through " + where +
                      " but the last acknowledged was " + std::to_string(h.acked));
}

io::task<void> one_request(simulation& sim, unsigned client, std::int64_t& next_value) {
    const std::string key =
        "c" + std::to_string(client) + "/k" + std::to_string(sim.draw(sim.options.keys_per_client));
    node_side& n = *sim.nodes[sim.draw(sim.nodes.size())];
    key_history& h = sim.keys[key];
    const double roll = std::uniform_real_distribution<double>(0, 1)(sim.rng);
    if (roll < 0.5) {
        const std::int64_t v = ++next_value;
        h.unknown.insert(v);
        string_source body(value_bytes(v));
        store::put_request r{bucket, key, value_bytes(v).size(), 1 << 20, {}};
        auto put = co_await n.store->put(r, body, finisher(v));
        if (put) {
            h.acked = v, h.unknown.clear();
            ++sim.counts.acknowledged;
        } else if (outcome_unknown(put.err())) {
            ++sim.counts.unknown;
        } else {
            h.unknown.erase(v);
            sim.violation(key + ": a PUT failed with " + put.err().message);
        }
    } else if (roll < 0.85) {
        auto v = co_await read_key(sim, n, key);
        if (v) check_read(sim, key, *v, n.id);
    } else {
        h.unknown.insert(absent_value);
        auto removed = co_await n.store->remove(bucket, key, {});
        if (removed) {
            h.acked = absent_value, h.unknown.clear();
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
    std::set<std::int64_t> refused;  // answered 412: never visible
};

io::task<void> try_create(simulation& sim, cas_round* round, node_side* n, std::string key,
                          std::int64_t v) {
    string_source body(value_bytes(v));
    store::put_request r{bucket, key, value_bytes(v).size(), 1 << 20, {}};
    r.conditions.if_none_match_any = true;
    auto put = co_await n->store->put(r, body, finisher(v));
    if (put)
        round->winners.push_back(v);
    else if (put.code() == base::errc::precondition_failed)
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

io::task<void> life(simulation& sim) {
    for (auto& n : sim.nodes)  // the published view reaches each store as a message
        while (!n->store->ready()) co_await io::yield_now{};
    sim.replaces_a_drive = sim.chance(0.5);
    sim.clients_running = sim.options.clients + 1;
    for (unsigned c = 0; c < sim.options.clients; ++c) io::spawn(client(sim, c));
    io::spawn(cas_client(sim));
    io::spawn(faults(sim));
    while (sim.clients_running > 0) co_await io::yield_now{};
    sim.clients_done = true;
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
    return sim.failure;
}

int usage() {
    std::fprintf(stderr,
                 "usage: cluster_sim [--seed N] [--seeds COUNT] [--nodes 4|5|6] [--clients N] "
                 "[--requests N] [--verbose]\n");
    return 64;
}

}  // namespace
}  // namespace fjord::sim

int main(int argc, char** argv) {
    using namespace fjord::sim;
    run_options options;
    seed_args args;
    if (!parse_seed_args(argc, argv, args,
                         {{"nodes", &options.nodes},
                          {"clients", &options.clients},
                          {"requests", &options.requests}}) ||
        options.nodes < 4 || options.nodes > 6 || options.clients == 0)
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
