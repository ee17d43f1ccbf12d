// `fjord cluster init|status|topology|heal|replace-node|remove-node`: the topology and membership of a
// Fjord cluster
// as etcd holds them (docs/cluster.md). Talks to etcd only, so it answers while every node is down.

#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <algorithm>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "base/encoding.h"
#include "cli/options.h"
#include "cluster/catalog.h"
#include "cluster/erasure.h"
#include "cluster/membership.h"
#include "base/clock.h"
#include "io/ops.h"
#include "io/reactor.h"
#include "io/task.h"

namespace fjord::cli {

namespace {

struct cluster_command {
    std::string op;  // init, status, topology, heal, replace-node, remove-node
    std::string node_id;
    std::string replacement;   // replace-node
    cluster::topology layout;  // init
    std::string cluster = "fjord";
    bool as_json = false;
    bool wait = false;             // heal: until every node that is up finished a scan
    std::int64_t timeout_s = 600;  // heal --wait
    cluster::etcd_options etcd;
};

struct cluster_outcome {
    base::result<void> status;
    cluster::cluster_view view;
    std::int64_t epoch = 0;
    cluster::topology layout;  // init: the one in force
    std::int64_t heal_request = 0;
    bool timed_out = false;
    std::vector<std::string> rebuilt;  // heal --wait: the rebuild marks it cleared
};

// Asks every node for a scan: raises heal-request (compare-and-swap).
io::task<base::result<std::int64_t>> request_heal(cluster::etcd_client& etcd, std::string name) {
    const std::string key = cluster::heal_request_key(name);
    for (int attempt = 0; attempt < 16; ++attempt) {
        auto got = co_await etcd.range(key);
        if (!got) co_return got.as_failure();
        std::int64_t now = 0, revision = 0;
        if (!got->kvs.empty()) {
            now = static_cast<std::int64_t>(base::parse_u64(got->kvs[0].value).value_or(0));
            revision = got->kvs[0].mod_revision;
        }
        cluster::txn_request txn;
        txn.compares.push_back({cluster::txn_compare::target::mod, key, revision});
        txn.puts.push_back({key, std::to_string(now + 1), 0});
        auto done = co_await etcd.txn(std::move(txn));
        if (!done) co_return done.as_failure();
        if (done->succeeded) co_return now + 1;
    }
    co_return base::fail(base::errc::service_unavailable, "heal-request kept changing");
}

// Whether every node that is up has finished a scan for `request`.
bool scans_done(const cluster::cluster_view& view, std::int64_t request) {
    for (const auto& m : view.members) {
        if (!m.up) continue;
        auto it = view.node_stats.find(m.node.node_id);
        if (it == view.node_stats.end()) return false;
        auto doc = nlohmann::json::parse(it->second, nullptr, false);
        if (!doc.is_object() || !doc.contains("scan")) return false;
        if (doc["scan"].value("request", std::int64_t{0}) < request) return false;
    }
    return true;
}

io::task<void> pause(std::int64_t ms) { co_await io::sleep_for(ms); }

struct heal_figures {
    std::uint64_t queue = 0, healed = 0, corrupt = 0, keys = 0, below = 0, remaining = 0,
                  unreachable = 0, unrepairable = 0;
    std::int64_t finished_ms = 0;
    bool known = false;
};

heal_figures figures_of(const cluster::cluster_view& view, const std::string& node) {
    heal_figures f;
    auto it = view.node_stats.find(node);
    if (it == view.node_stats.end()) return f;
    auto doc = nlohmann::json::parse(it->second, nullptr, false);
    if (!doc.is_object()) return f;
    f.known = true;
    f.queue = doc.value("queue", std::uint64_t{0});
    f.healed = doc.value("healed", std::uint64_t{0});
    f.corrupt = doc.value("corrupt", std::uint64_t{0});
    f.unrepairable = doc.value("unrepairable", std::uint64_t{0});
    if (doc.contains("scan") && doc["scan"].is_object()) {
        const auto& scan = doc["scan"];
        f.keys = scan.value("keys", std::uint64_t{0});
        f.below = scan.value("degraded", std::uint64_t{0});
        f.remaining = scan.value("remaining", std::uint64_t{0});
        f.unreachable = scan.value("unreachable", std::uint64_t{0});
        f.finished_ms = scan.value("finished_unix_ms", std::int64_t{0});
    }
    return f;
}

// Objects below full width as the nodes last saw them: what their last scans could not heal, what
// they could not decide, and what waits in their queues. What no heal can repair is set aside and
// counted apart (unrepairable_objects): waiting cannot change it.
std::uint64_t below_full_width(const cluster::cluster_view& view) {
    std::uint64_t total = 0;
    for (const auto& m : view.members) {
        heal_figures f = figures_of(view, m.node.node_id);
        total += f.remaining + f.unreachable + f.queue;
    }
    return total;
}

std::uint64_t unrepairable_objects(const cluster::cluster_view& view) {
    std::uint64_t total = 0;
    for (const auto& m : view.members) total += figures_of(view, m.node.node_id).unrepairable;
    return total;
}

// replace-node: the replacement must have joined (its endpoint is known); the node it replaces must be
// down, or the same node (a new drive).
io::task<base::result<void>> replace_node(cluster::etcd_client& etcd, const cluster_command& cmd,
                                          cluster_outcome* out) {
    auto view = co_await cluster::read_view(etcd, cmd.cluster);
    if (!view) co_return view.as_failure();
    if (!view->member(cmd.replacement))
        co_return base::fail(
            base::errc::invalid_argument,
            "node " + cmd.replacement + " is not a member: start it with --cluster first");
    const cluster::member_state* old = view->member(cmd.node_id);
    if (cmd.node_id != cmd.replacement && old && old->up)
        co_return base::fail(base::errc::invalid_request,
                             "node " + cmd.node_id + " is up: stop it first");
    auto layout = co_await cluster::replace_topology_node(etcd, cmd.cluster, cmd.node_id,
                                                          cmd.replacement, view->heal_request);
    if (!layout) co_return layout.as_failure();
    out->layout = std::move(*layout);
    co_return base::result<void>{};
}

// remove-node: only a node that holds no place in a set (replace-node first).
io::task<base::result<void>> remove_node(cluster::etcd_client& etcd, const cluster_command& cmd,
                                         cluster_outcome* out) {
    auto view = co_await cluster::read_view(etcd, cmd.cluster);
    if (!view) co_return view.as_failure();
    if (view->layout && view->layout->is_in_a_set(cmd.node_id))
        co_return base::fail(base::errc::invalid_request,
                             "node " + cmd.node_id +
                                 " holds a place in a set: fjord cluster replace-node " +
                                 cmd.node_id + " NEW first");
    auto epoch = co_await cluster::remove_member(etcd, cmd.cluster, cmd.node_id);
    if (!epoch) co_return epoch.as_failure();
    out->epoch = *epoch;
    co_return base::result<void>{};
}

io::task<void> run_cluster(const cluster_command* cmd, cluster_outcome* out,
                           io::reactor_group* group) {
    cluster::etcd_client etcd(cmd->etcd);
    if (cmd->op == "status" || cmd->op == "topology") {
        auto view = co_await cluster::read_view(etcd, cmd->cluster);
        if (view)
            out->view = std::move(*view);
        else
            out->status = view.as_failure();
    } else if (cmd->op == "heal") {
        auto id = co_await request_heal(etcd, cmd->cluster);
        if (!id) {
            out->status = id.as_failure();
        } else {
            out->heal_request = *id;
            const std::int64_t deadline =
                base::monotonic_now_ns() / 1'000'000 + cmd->timeout_s * 1000;
            std::int64_t request = *id;
            for (bool first = true; cmd->wait; first = false) {
                if (!first) co_await pause(500);
                auto view = co_await cluster::read_view(etcd, cmd->cluster);
                if (!view) continue;  // etcd busy: look again
                out->view = std::move(*view);
                // Done once every node scanned and nothing is below full width any more. A scan
                // that left something (a node was still coming back) is followed by another.
                if (scans_done(out->view, request)) {
                    if (below_full_width(out->view) == 0) break;
                    if (auto again = co_await request_heal(etcd, cmd->cluster)) request = *again;
                }
                if (base::monotonic_now_ns() / 1'000'000 > deadline) {
                    out->timed_out = true;
                    break;
                }
            }
            // Every object at full width after a heal asked for after a node was marked: it holds
            // all it should, and its answers count again.
            if (cmd->wait && !out->timed_out) {
                auto cleared = co_await cluster::finish_rebuilds(etcd, cmd->cluster, request);
                if (cleared)
                    out->rebuilt = std::move(*cleared);
                else
                    out->status = cleared.as_failure();
            }
        }
    } else if (cmd->op == "init") {
        auto layout = co_await cluster::init_topology(etcd, cmd->cluster, cmd->layout);
        if (layout)
            out->layout = std::move(*layout);
        else
            out->status = layout.as_failure();
    } else if (cmd->op == "replace-node") {
        out->status = co_await replace_node(etcd, *cmd, out);
    } else {
        out->status = co_await remove_node(etcd, *cmd, out);
    }
    group->stop();
}

std::vector<std::string> split_list(std::string_view text) {
    std::vector<std::string> out;
    while (!text.empty()) {
        const std::size_t comma = text.find(',');
        out.emplace_back(text.substr(0, comma));
        text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    }
    return out;
}

// init's topology: the default for the nodes, or the geometry asked for, sets cut from the nodes in
// order of their ids.
base::result<cluster::topology> topology_of(const command_options& opts) {
    std::vector<std::string> nodes = split_list(opts.text("nodes", ""));
    if (nodes.empty())
        return base::fail(base::errc::invalid_argument, "init needs --nodes ID,ID,...");
    for (const auto& n : nodes) FJORD_TRY(cluster::check_name("node id", n));
    auto block_kib = base::parse_u64(opts.text("block-kib", "1024"));
    if (!block_kib || *block_kib < 4 || *block_kib > 16 * 1024)
        return base::fail(base::errc::invalid_argument, "--block-kib takes 4 to 16384");
    const auto block_bytes = static_cast<std::uint32_t>(*block_kib * 1024);
    auto age_s = base::parse_u64(opts.text("heal-leftover-age-s", "60"));
    if (!age_s || *age_s < 1 || *age_s > 365ULL * 24 * 3600)
        return base::fail(base::errc::invalid_argument,
                          "--heal-leftover-age-s takes 1 to 31536000 (seconds)");
    if (!opts.has("data-shards") && !opts.has("parity-shards")) {
        auto made = cluster::default_topology(nodes, block_bytes);
        if (made) made->leftover_age_ms = static_cast<std::int64_t>(*age_s) * 1000;
        return made;
    }
    base::result<cluster::topology> layout = cluster::topology{};
    layout->leftover_age_ms = static_cast<std::int64_t>(*age_s) * 1000;
    layout->block_bytes = block_bytes;
    layout->created_unix_ms = base::unix_now_ms();
    {
        auto k = base::parse_u64(opts.text("data-shards", ""));
        auto m = base::parse_u64(opts.text("parity-shards", ""));
        if (!k || !m || *k < 1 || *m < 1 || *m > *k + 1 || *k + *m > cluster::max_stripe_width)
            return base::fail(base::errc::invalid_argument,
                              "--data-shards K and --parity-shards M go together, 1 <= K, "
                              "1 <= M <= K + 1 (writes are acknowledged at K + 1 nodes, which must "
                              "be a majority) and K + M <= 32");
        std::sort(nodes.begin(), nodes.end());
        cluster::geometry g{static_cast<unsigned>(*k), static_cast<unsigned>(*m)};
        auto sets = cluster::layout_sets(nodes, 1, g);
        if (!sets) return sets.as_failure();
        layout->shape = g;
        layout->sets.clear();
        for (const auto& set : *sets) {
            std::vector<std::string> ids;
            for (const auto& d : set.drives) ids.push_back(d.node_id);
            layout->sets.push_back(std::move(ids));
        }
    }
    return layout;
}

base::result<cluster_command> parse_cluster_args(int argc, char** argv) {
    static constexpr std::string_view with_value[] = {
        "etcd",          "cluster",   "nodes",     "data-shards",
        "parity-shards", "block-kib", "timeout-s", "heal-leftover-age-s"};
    static constexpr std::string_view flags[] = {"json", "wait"};
    if (argc < 1)
        return base::fail(base::errc::invalid_argument,
                          "expected: init|status|topology|heal|replace-node|remove-node");
    cluster_command cmd;
    cmd.op = argv[0];
    int first_option = 1;
    if (cmd.op == "remove-node") {
        if (argc < 2 || argv[1][0] == '-')
            return base::fail(base::errc::invalid_argument, "remove-node needs a node id");
        cmd.node_id = argv[1];
        FJORD_TRY(cluster::check_name("node id", cmd.node_id));
        first_option = 2;
    } else if (cmd.op == "replace-node") {
        if (argc < 3 || argv[1][0] == '-' || argv[2][0] == '-')
            return base::fail(base::errc::invalid_argument,
                              "replace-node needs the node and its replacement: OLD NEW");
        cmd.node_id = argv[1];
        cmd.replacement = argv[2];
        FJORD_TRY(cluster::check_name("node id", cmd.node_id));
        FJORD_TRY(cluster::check_name("node id", cmd.replacement));
        first_option = 3;
    } else if (cmd.op != "status" && cmd.op != "init" && cmd.op != "heal" && cmd.op != "topology") {
        return base::fail(base::errc::invalid_argument,
                          "expected: init|status|topology|heal|replace-node|remove-node");
    }
    auto opts = command_options::parse(argc - first_option, argv + first_option, with_value, flags);
    if (!opts) return opts.as_failure();
    auto where = cluster::parse_etcd_url(opts->text("etcd", "http://127.0.0.1:2379"));
    if (!where) return where.as_failure();
    cmd.etcd.where = *where;
    cmd.cluster = opts->text("cluster", "fjord");
    FJORD_TRY(cluster::check_name("cluster name", cmd.cluster));
    cmd.as_json = opts->has("json");
    cmd.wait = opts->has("wait");
    auto timeout = opts->number("timeout-s", 600);
    if (!timeout || *timeout < 1) return base::fail(base::errc::invalid_argument, "--timeout-s N");
    cmd.timeout_s = static_cast<std::int64_t>(*timeout);
    if (cmd.op == "init") {
        auto layout = topology_of(*opts);
        if (!layout) return layout.as_failure();
        cmd.layout = std::move(*layout);
    }
    return cmd;
}

std::string utc_text(std::int64_t unix_ms) {
    std::time_t seconds = static_cast<std::time_t>(unix_ms / 1000);
    std::tm tm{};
    gmtime_r(&seconds, &tm);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return text;
}

void print_healing(const cluster::cluster_view& view) {
    std::printf("%-24s %7s %8s %8s %8s %10s %9s %8s  %s\n", "NODE", "QUEUE", "HEALED", "CORRUPT",
                "UNREPAIR", "SCAN KEYS", "BELOW", "LEFT", "SCAN FINISHED (UTC)");
    for (const auto& m : view.members) {
        heal_figures f = figures_of(view, m.node.node_id);
        if (!f.known) {
            std::printf("%-24s %7s\n", m.node.node_id.c_str(), "-");
            continue;
        }
        std::printf(
            "%-24s %7llu %8llu %8llu %8llu %10llu %9llu %8llu  %s\n", m.node.node_id.c_str(),
            static_cast<unsigned long long>(f.queue), static_cast<unsigned long long>(f.healed),
            static_cast<unsigned long long>(f.corrupt),
            static_cast<unsigned long long>(f.unrepairable),
            static_cast<unsigned long long>(f.keys), static_cast<unsigned long long>(f.below),
            static_cast<unsigned long long>(f.remaining + f.unreachable),
            f.finished_ms ? utc_text(f.finished_ms).c_str() : "(running or none yet)");
    }
}

// The erasure sets and the state of each of their nodes; 1 without a topology.
int print_topology(const cluster_command& cmd, const cluster::cluster_view& view) {
    if (!view.layout) {
        std::fprintf(stderr, "fjord cluster: cluster %s has no topology (fjord cluster init)\n",
                     cmd.cluster.c_str());
        return 1;
    }
    const cluster::topology& t = *view.layout;
    if (cmd.as_json) {
        std::printf("%s\n", nlohmann::json::parse(cluster::encode_topology(t)).dump(2).c_str());
        return 0;
    }
    std::printf(
        "cluster %s: %zu set(s) of %u+%u, %u KiB blocks; writes acknowledged at %u nodes "
        "of a set, reads from any %u\n",
        cmd.cluster.c_str(), t.sets.size(), t.shape.k, t.shape.m, t.block_bytes / 1024,
        t.shape.k + 1, t.shape.k);
    if (t.leftover_age_ms > 0)
        std::printf("heal leftover age: %lld s\n",
                    static_cast<long long>(t.leftover_age_ms / 1000));
    else
        std::printf("heal leftover age: each node's --heal-leftover-age-s (not in the topology)\n");
    for (std::size_t s = 0; s < t.sets.size(); ++s) {
        std::string line;
        std::size_t up = 0;
        for (const auto& node : t.sets[s]) {
            const cluster::member_state* m = view.member(node);
            const char* state = !m ? "not a member" : m->up ? "up" : "down";
            if (m && m->up) ++up;
            line +=
                "  " + node + " (" + state + (t.is_rebuilding(node) ? ", rebuilding" : "") + ")";
        }
        std::printf("set %zu: %zu of %u up:%s\n", s, up, t.shape.width(), line.c_str());
    }
    return 0;
}

void print_status(const cluster_command& cmd, const cluster::cluster_view& view) {
    if (cmd.as_json) {
        nlohmann::json members = nlohmann::json::array();
        for (const auto& m : view.members)
            members.push_back({{"node_id", m.node.node_id},
                               {"s3_endpoint", m.node.s3_endpoint},
                               {"up", m.up},
                               {"cores", m.node.cores},
                               {"started_unix_ms", m.node.started_unix_ms}});
        nlohmann::json doc = {{"cluster", cmd.cluster},
                              {"epoch", view.epoch},
                              {"members", members},
                              {"up", view.up()}};
        if (view.layout) {
            doc["topology"] = nlohmann::json::parse(cluster::encode_topology(*view.layout));
            doc["buckets"] = view.buckets.size();
            doc["below_full_width"] = below_full_width(view);
            nlohmann::json healing = nlohmann::json::object();
            for (const auto& [node, text] : view.node_stats)
                healing[node] = nlohmann::json::parse(text, nullptr, false);
            doc["healing"] = healing;
            doc["lifecycle_runner"] = view.lifecycle_runner;
        }
        std::printf("%s\n", doc.dump(2).c_str());
        return;
    }
    std::printf("cluster %s: map epoch %lld, %zu members, %zu up\n", cmd.cluster.c_str(),
                static_cast<long long>(view.epoch), view.members.size(), view.up());
    if (view.members.empty()) return;
    std::printf("%-24s %-5s %-32s %5s  %s\n", "NODE", "STATE", "S3 ENDPOINT", "CORES",
                "STARTED (UTC)");
    for (const auto& m : view.members)
        std::printf("%-24s %-5s %-32s %5u  %s\n", m.node.node_id.c_str(), m.up ? "up" : "down",
                    m.node.s3_endpoint.c_str(), m.node.cores,
                    utc_text(m.node.started_unix_ms).c_str());
    if (!view.layout) {
        std::printf("no topology yet: fjord cluster init --nodes ID,ID,...\n");
        return;
    }
    std::printf("topology: %zu set(s) of %u+%u, %u KiB blocks; %zu bucket(s)\n",
                view.layout->sets.size(), view.layout->shape.k, view.layout->shape.m,
                view.layout->block_bytes / 1024, view.buckets.size());
    print_healing(view);
    std::printf("lifecycle rules applied by: %s\n", view.lifecycle_runner.empty()
                                                        ? "no node (none up)"
                                                        : view.lifecycle_runner.c_str());
    std::printf("objects below full width (last scans and queues): %llu\n",
                static_cast<unsigned long long>(below_full_width(view)));
    for (const auto& mark : view.layout->rebuilding)
        std::printf(
            "rebuilding: %s (fjord cluster heal --wait clears it once all is at full width)\n",
            mark.node.c_str());
}

// What `heal` did; with --wait, 0 once nothing is below full width.
int print_heal(const cluster_command& cmd, const cluster_outcome& out) {
    std::printf("asked every node of cluster %s for a scan (request %lld)\n", cmd.cluster.c_str(),
                static_cast<long long>(out.heal_request));
    if (!cmd.wait) return 0;
    print_healing(out.view);
    if (out.timed_out) {
        std::fprintf(stderr, "fjord cluster heal: not every node finished its scan in %lld s\n",
                     static_cast<long long>(cmd.timeout_s));
        return 1;
    }
    const std::uint64_t below = below_full_width(out.view);
    std::printf("objects below full width: %llu\n", static_cast<unsigned long long>(below));
    if (const std::uint64_t lost = unrepairable_objects(out.view); lost > 0)
        std::printf(
            "objects no heal can repair (their parts are gone; each named once in its node's "
            "log): %llu\n",
            static_cast<unsigned long long>(lost));
    for (const auto& node : out.rebuilt)
        std::printf("node %s holds every shard it should: no longer rebuilding\n", node.c_str());
    return below == 0 ? 0 : 1;
}

}  // namespace

void print_cluster_usage(std::FILE* to) {
    std::fputs(
        "usage: fjord cluster status [--json]\n"
        "       fjord cluster topology [--json]\n"
        "       fjord cluster init --nodes ID,ID,... [--data-shards K "
        "--parity-shards M] [--block-kib N] [--heal-leftover-age-s N]\n"
        "       fjord cluster heal [--wait] [--timeout-s N]   (every node scans and heals)\n"
        "       fjord cluster replace-node OLD NEW   (NEW takes OLD's place; OLD is down)\n"
        "       fjord cluster remove-node NODE   (decommission a node that is down)\n"
        "options: --etcd http://127.0.0.1:2379 --cluster fjord (docs/cluster.md)\n",
        to);
}

int cluster_main(int argc, char** argv) {
    if (asks_for_help(argc, argv)) return print_cluster_usage(stdout), 0;
    auto cmd = parse_cluster_args(argc, argv);
    if (!cmd) {
        std::fprintf(stderr, "fjord cluster: %s\n", cmd.err().message.c_str());
        print_cluster_usage(stderr);
        return 2;
    }
    cluster_outcome out;
    io::reactor_group group(1);
    group.run([&cmd, &out, &group](unsigned) { io::spawn(run_cluster(&*cmd, &out, &group)); });
    if (!out.status) {
        std::fprintf(stderr, "fjord cluster: %s\n", out.status.err().message.c_str());
        return 1;
    }
    if (cmd->op == "heal") return print_heal(*cmd, out);
    if (cmd->op == "status") {
        print_status(*cmd, out.view);
    } else if (cmd->op == "topology") {
        return print_topology(*cmd, out.view);
    } else if (cmd->op == "init") {
        const bool ours =
            cluster::encode_topology(out.layout) == cluster::encode_topology(cmd->layout);
        std::printf("cluster %s: %s topology of %zu set(s) of %u+%u (%u KiB blocks):\n",
                    cmd->cluster.c_str(), ours ? "wrote the" : "already has a",
                    out.layout.sets.size(), out.layout.shape.k, out.layout.shape.m,
                    out.layout.block_bytes / 1024);
        for (const auto& set : out.layout.sets) {
            std::string line;
            for (const auto& n : set) line += (line.empty() ? "" : " ") + n;
            std::printf("  %s\n", line.c_str());
        }
        if (!ours) return 1;
    } else if (cmd->op == "replace-node") {
        if (cmd->node_id == cmd->replacement)
            std::printf("node %s keeps its place and is rebuilding\n", cmd->node_id.c_str());
        else
            std::printf("node %s takes node %s's place and is rebuilding\n",
                        cmd->replacement.c_str(), cmd->node_id.c_str());
        std::printf(
            "run fjord cluster heal --wait: it rebuilds the node's shards and clears the mark\n");
    } else {
        std::printf("removed node %s from cluster %s (map epoch %lld)\n", cmd->node_id.c_str(),
                    cmd->cluster.c_str(), static_cast<long long>(out.epoch));
    }
    return 0;
}

}  // namespace fjord::cli
