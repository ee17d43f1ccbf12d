// `fjord cluster status|remove-node`: the membership of a Fjord cluster as etcd holds it
// (docs/cluster.md). Talks to etcd only, so it answers while every node is down.

#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "cli/options.h"
#include "cluster/membership.h"
#include "io/reactor.h"
#include "io/task.h"

namespace fjord::cli {

namespace {

struct cluster_command {
    std::string op;  // status, remove-node
    std::string node_id;
    std::string cluster = "fjord";
    bool as_json = false;
    cluster::etcd_options etcd;
};

struct cluster_outcome {
    base::result<void> status;
    cluster::cluster_view view;
    std::int64_t epoch = 0;
};

io::task<void> run_cluster(const cluster_command* cmd, cluster_outcome* out,
                           io::reactor_group* group) {
    cluster::etcd_client etcd(cmd->etcd);
    if (cmd->op == "status") {
        auto view = co_await cluster::read_view(etcd, cmd->cluster);
        if (view)
            out->view = std::move(*view);
        else
            out->status = view.as_failure();
    } else {
        auto epoch = co_await cluster::remove_member(etcd, cmd->cluster, cmd->node_id);
        if (epoch)
            out->epoch = *epoch;
        else
            out->status = epoch.as_failure();
    }
    group->stop();
}

base::result<cluster_command> parse_cluster_args(int argc, char** argv) {
    static constexpr std::string_view with_value[] = {"etcd", "cluster"};
    static constexpr std::string_view flags[] = {"json"};
    if (argc < 1) return base::fail(base::errc::invalid_argument, "expected: status|remove-node");
    cluster_command cmd;
    cmd.op = argv[0];
    int first_option = 1;
    if (cmd.op == "remove-node") {
        if (argc < 2 || argv[1][0] == '-')
            return base::fail(base::errc::invalid_argument, "remove-node needs a node id");
        cmd.node_id = argv[1];
        FJORD_TRY(cluster::check_name("node id", cmd.node_id));
        first_option = 2;
    } else if (cmd.op != "status") {
        return base::fail(base::errc::invalid_argument, "expected: status|remove-node");
    }
    auto opts = command_options::parse(argc - first_option, argv + first_option, with_value, flags);
    if (!opts) return opts.as_failure();
    auto where = cluster::parse_etcd_url(opts->text("etcd", "http://127.0.0.1:2379"));
    if (!where) return where.as_failure();
    cmd.etcd.where = *where;
    cmd.cluster = opts->text("cluster", "fjord");
    FJORD_TRY(cluster::check_name("cluster name", cmd.cluster));
    cmd.as_json = opts->has("json");
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
}

}  // namespace

int cluster_main(int argc, char** argv) {
    auto cmd = parse_cluster_args(argc, argv);
    if (!cmd) {
        std::fprintf(stderr,
                     "fjord cluster: %s\nusage: fjord cluster status [--json]\n"
                     "       fjord cluster remove-node NODE   (decommission a node that is down)\n"
                     "options: --etcd http://127.0.0.1:2379 --cluster fjord\n",
                     cmd.err().message.c_str());
        return 2;
    }
    cluster_outcome out;
    io::reactor_group group(1);
    group.run([&cmd, &out, &group](unsigned) { io::spawn(run_cluster(&*cmd, &out, &group)); });
    if (!out.status) {
        std::fprintf(stderr, "fjord cluster: %s\n", out.status.err().message.c_str());
        return 1;
    }
    if (cmd->op == "status")
        print_status(*cmd, out.view);
    else
        std::printf("removed node %s from cluster %s (map epoch %lld)\n", cmd->node_id.c_str(),
                    cmd->cluster.c_str(), static_cast<long long>(out.epoch));
    return 0;
}

}  // namespace fjord::cli
