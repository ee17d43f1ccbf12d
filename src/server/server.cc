// `fjord serve`: the wiring of engine, KV tier, cluster, TLS and service, and the housekeeping tasks.

#include "server/server.h"
#include "server/options.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/resource.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/encoding.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/metrics.h"
#include "base/token_bucket.h"
#include "io/ops.h"
#include "base/units.h"
#include "bench/bench.h"
#include "cli/commands.h"
#include "cluster/cluster_store.h"
#include "cluster/drive_identity.h"
#include "cluster/healer.h"
#include "cluster/membership.h"
#include "cluster/shard_service.h"
#include "http/server.h"
#include "io/reactor.h"
#include "s3/access_log.h"
#include "s3/lifecycle.h"
#include "s3/service.h"
#include "kv/tier.h"
#include "store/bucket_router.h"
#include "store/engine.h"
#include "tls/tls.h"

namespace fjord::server {

namespace {

// Removes spare data files that no write has taken for a while (core 0 only: the spares are shared).
io::task<void> expire_spares(store::engine* engine, std::int64_t idle_ms) {
    const std::int64_t interval_ms = std::clamp<std::int64_t>(idle_ms / 2, 1000, 60'000);
    while (!io::reactor::current().stopping()) {
        co_await io::sleep_for(interval_ms);
        if (io::reactor::current().stopping()) break;
        if (std::uint64_t n = co_await engine->spares().expire_idle(); n > 0)
            LOG_INFO("removed %llu spare data files unused for %lld s",
                     static_cast<unsigned long long>(n), static_cast<long long>(idle_ms / 1000));
    }
}

// Aborts this core's stale multipart uploads now and then. It holds no reactor reference, so shutdown
// does not wait for its sleep.
io::task<void> expire_uploads(store::engine* engine, std::int64_t max_age_s,
                              std::int64_t interval_s) {
    while (!io::reactor::current().stopping()) {
        co_await io::sleep_for(interval_s * 1000);
        if (io::reactor::current().stopping()) break;
        (void)co_await engine->expire_local_uploads(base::unix_now_ms() - max_age_s * 1000);
    }
}

// The background tasks of a core: stale uploads on every core; spare files and lifecycle rules on core 0.
void start_housekeeping(unsigned core, store::engine* engine, store::object_store& objects,
                        const serve_config& cfg) {
    io::spawn(expire_uploads(engine, cfg.multipart_expiry_s, cfg.multipart_expiry_interval_s));
    if (core != 0) return;
    if (engine->spares().enabled()) io::spawn(expire_spares(engine, cfg.engine.spares.idle_ms));
    io::spawn(s3::run_lifecycle(objects, cfg.lifecycle));
}

// Says once at start whether the I/O buffers got huge pages: on 4 KiB pages a virtio disk holds far fewer
// writes at a time (io/io_memory.h), which an operator otherwise only sees as lower throughput.
void log_buffer_memory(const io::buffer_pool& pool, const io::buffer_pool_options& options) {
    std::size_t total = pool.buffer_bytes() * pool.buffer_count(), huge = pool.huge_page_bytes();
    LOG_INFO("I/O buffers: %zu x %zu KiB per core, %zu of %zu MiB on huge pages",
             pool.buffer_count(), pool.buffer_bytes() / base::KiB, huge / base::MiB,
             total / base::MiB);
    if (options.huge_pages && huge < total / 2) {
        auto setting = [](const char* path) {
            std::string text = "unknown";
            if (FILE* f = std::fopen(path, "re")) {
                char line[128];
                if (std::fgets(line, sizeof line, f)) text.assign(line, std::strcspn(line, "\n"));
                std::fclose(f);
            }
            return text;
        };
        LOG_WARN(
            "most I/O buffers are on 4 KiB pages (transparent huge pages: %s; defrag: %s): disk "
            "throughput may be lower (src/io/README.md)",
            setting("/sys/kernel/mm/transparent_hugepage/enabled").c_str(),
            setting("/sys/kernel/mm/transparent_hugepage/defrag").c_str());
    }
}

// Blocks the signals `fjord serve` stops on, and SIGHUP (one ordinary thread takes them with sigwait;
// reactor threads never see them), ignores SIGPIPE, and raises the descriptor limit; returns the signals to wait for.
sigset_t prepare_process() {
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGUSR1);
    sigaddset(&signals, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    signal(SIGPIPE, SIG_IGN);
    // Every connection and data file is a descriptor: take the whole hard limit, not the soft default.
    rlimit files{};
    if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
        files.rlim_cur = files.rlim_max;
        setrlimit(RLIMIT_NOFILE, &files);
    }
    return signals;
}

// The access log's descriptor ("-": stderr), or -1 once the failure is logged.
int open_access_log(const std::string& path) {
    if (path == "-") return STDERR_FILENO;
    int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    if (fd < 0) LOG_ERROR("cannot open the access log %s: %s", path.c_str(), strerror(errno));
    return fd;
}

// The access log of --access-log (none without it); false once a failure to open it is logged.
bool make_access_log(const serve_config& cfg, int& fd, std::unique_ptr<s3::access_log>& log) {
    if (cfg.access_log_path.empty()) return true;
    fd = open_access_log(cfg.access_log_path);
    if (fd < 0) return false;
    log = std::make_unique<s3::access_log>(fd, cfg.engine.cores);
    return true;
}

// The start-up lines, written by core 0 before any core accepts.
void log_start_up(const serve_config& cfg, store::engine& engine) {
    log_buffer_memory(engine.pool(), cfg.engine.buffers);
    LOG_INFO("Fjord S3 server listening on %s://%s:%u (%u cores, data in %s%s)",
             cfg.server.tls ? "https" : "http", cfg.server.listen.host.c_str(),
             cfg.server.listen.port, cfg.engine.cores, cfg.engine.data_dirs[0].c_str(),
             cfg.engine.data_dirs.size() > 1 ? " and more" : "");
    if (cfg.default_credentials)
        LOG_WARN(
            "using the development credentials (access key '%s'; its secret is in README.md): "
            "set FJORD_ACCESS_KEY and FJORD_SECRET_KEY to choose your own",
            default_access_key);
}

// The HTTPS credentials of --tls-cert / --tls-key (none without them); false: they do not load (logged).
// Loaded before the data directories are recovered, so a mistake in them is found at once.
bool load_tls(serve_config& cfg, std::unique_ptr<tls::server_credentials>& out) {
    if (cfg.tls_cert_path.empty()) return true;
    auto loaded = tls::server_credentials::load(cfg.tls_cert_path, cfg.tls_key_path);
    if (!loaded) {
        LOG_ERROR("%s", loaded.err().message.c_str());
        return false;
    }
    out = std::move(*loaded);
    cfg.server.tls = out.get();
    return true;
}

// SIGHUP: the certificate and key are read again; connections accepted from now on use them.
void reload_tls(tls::server_credentials* tls) {
    if (!tls) {
        LOG_INFO("received SIGHUP: nothing to reload (no --tls-cert)");
        return;
    }
    if (auto r = tls->reload(); !r)
        LOG_ERROR("received SIGHUP: keeping the current TLS certificate: %s",
                  r.err().message.c_str());
    else
        LOG_INFO("received SIGHUP: reloaded the TLS certificate %s", tls->cert_path().c_str());
}

// The KV tier lives in the first data directory's kv/ (docs/kv.md).
std::unique_ptr<kv::tier> open_kv_tier(serve_config& cfg) {
    cfg.kv.directory = cfg.engine.data_dirs[0] + "/kv";
    cfg.kv.cores = cfg.engine.cores;
    auto opened = kv::tier::open_blocking(cfg.kv);
    if (!opened) {
        LOG_ERROR("cannot open the KV tier: %s", opened.err().message.c_str());
        return nullptr;
    }
    return std::move(*opened);
}

// The erasure-coded store of a cluster node (--etcd): what its S3 API serves; none for the embedded
// single-node server.
std::unique_ptr<cluster::cluster_store> make_cluster_store(const serve_config& cfg) {
    if (cfg.etcd_url.empty()) return nullptr;
    cluster::cluster_store_options o;
    o.cluster = cfg.membership.cluster;
    o.node_id = cfg.membership.node.node_id;
    o.etcd = cfg.membership.etcd;
    o.cores = cfg.engine.cores;
    const auth::credential_store& keys = cfg.service.credentials;
    o.peers.credentials = *keys.find(keys.first_access_key());
    o.peers.region = cfg.service.region;
    o.leftover_age_ms = cfg.leftover_age_ms;
    const std::int64_t waits_ms = o.peers.io_timeout_ms + o.peers.connect_timeout_ms;
    if (o.leftover_age_ms / 2 <= waits_ms)
        LOG_WARN(
            "--heal-leftover-age-s: a write is decided within half of it (%lld ms), no more than "
            "the data plane's time limits (%lld ms): a write that waits on a hung node answers "
            "503 though its quorum stored it",
            static_cast<long long>(o.leftover_age_ms / 2), static_cast<long long>(waits_ms));
    return std::make_unique<cluster::cluster_store>(std::move(o));
}

// The node's membership of a cluster (--etcd); none for the embedded single-node server. Every
// snapshot it reads goes to the cluster store.
std::unique_ptr<cluster::membership_agent> make_membership_agent(serve_config& cfg,
                                                                 cluster::cluster_store* objects,
                                                                 cluster::healer* healing,
                                                                 cluster::shard_service* shards) {
    if (cfg.etcd_url.empty()) return nullptr;
    cfg.membership.node.started_unix_ms = base::unix_now_ms();
    const std::string self = cfg.membership.node.node_id;
    if (objects)
        cfg.membership.on_view = [objects, healing, shards, self](const cluster::cluster_view& v) {
            objects->publish(v);
            if (shards)
                shards->note_view(v.layout && v.layout->is_rebuilding(self), v.read_began_ns);
            if (healing) healing->request_scan(v.heal_request);
        };
    if (healing) cfg.membership.stats = [healing] { return healing->stats_json(); };
    return std::make_unique<cluster::membership_agent>(cfg.membership);
}

// What a cluster node (--etcd) adds to the server: the erasure-coded store its S3 API serves, the
// data plane beside the S3 API on the same port (under /_fjord/cluster/), where its own engine keeps
// the shards that coordinators send it, and the healer.
struct cluster_node {
    std::unique_ptr<cluster::cluster_store> objects;
    std::optional<cluster::drive_id> drive;  // of the first data directory (drive_identity.h)
    std::unique_ptr<cluster::shard_service> shards;
    std::unique_ptr<cluster::node_handler> front;
    std::unique_ptr<cluster::healer> healing;
    std::unique_ptr<cluster::membership_agent> membership;

    // The id of the drive it serves from (a cluster node only); false after logging why it has none.
    bool open_drive(const serve_config& cfg) {
        if (!objects) return true;
        auto id = cluster::load_or_make_drive_id(cfg.engine.data_dirs[0]);
        if (!id) {
            LOG_ERROR("cannot read or write this node's drive id: %s", id.err().message.c_str());
            return false;
        }
        drive = *id;
        return true;
    }

    // The handler connections go to: the node's (data plane, then S3), or S3 alone.
    http::handler& attach(serve_config& cfg, store::engine& engine, s3::service& s3) {
        if (objects) {
            const auth::credential_store& keys = cfg.service.credentials;
            shards = std::make_unique<cluster::shard_service>(
                engine, *keys.find(keys.first_access_key()), cfg.service.region, &objects->clock());
            if (drive) shards->hold_answers();  // until the drive is checked (start)
            cluster::cluster_store* store = objects.get();
            shards->on_bucket_deleted(
                [store](std::string shard_bucket) { return store->forget_bucket(shard_bucket); });
            front = std::make_unique<cluster::node_handler>(s3, *shards);
            healing = std::make_unique<cluster::healer>(*objects, engine, cfg.healing);
        }
        membership = make_membership_agent(cfg, objects.get(), healing.get(), shards.get());
        // One node of a cluster applies the lifecycle rules at a time (membership.h)
        if (cluster::membership_agent* agent = membership.get(); agent && objects)
            cfg.lifecycle.may_act = [agent] { return agent->runs_lifecycle(); };
        return front ? static_cast<http::handler&>(*front) : s3;
    }
    void attach_core(unsigned core) {
        if (objects) objects->attach_core(core);
    }
    // What a cluster node's readiness and /metrics add: its reads of the map (membership.h).
    void add_health(s3::service_options& o) {
        o.not_ready = [this]() -> std::optional<std::string> {
            return membership ? membership->not_ready() : std::nullopt;
        };
        o.more_metrics = [this] { return membership ? membership->metrics_text() : std::string(); };
    }
    // What the S3 API serves: the cluster's objects, or this server's own.
    store::object_store& served(store::object_store& own) { return objects ? *objects : own; }
    // Membership, healing and the drive's check run on core 0.
    void start(unsigned core, const serve_config& cfg) {
        if (core == 0 && shards && drive) io::spawn(check_drive(cfg));
        if (core == 0 && membership) io::spawn(membership->run());
        if (core == 0 && healing) io::spawn(healing->run());
    }

    // The data plane answers for this node's shards once etcd knows its drive; a drive that is not the
    // one the node had is marked rebuilding first, and the node says so in every answer about what it
    // holds (rpc.h, rebuilding_header): a node that has not seen the mark in its map yet learns it
    // there.
    io::task<void> check_drive(const serve_config& cfg) {
        cluster::etcd_client etcd(cfg.membership.etcd);
        const std::string& name = cfg.membership.cluster;
        bool warned = false;
        for (std::int64_t backoff_ms = 250; !io::reactor::current().stopping();
             backoff_ms = std::min<std::int64_t>(backoff_ms * 2, 5000)) {
            auto checked =
                co_await cluster::check_drive(etcd, name, cfg.membership.node.node_id, *drive);
            if (checked) {
                if (checked->marked_now)
                    LOG_WARN(
                        "cluster %s: this node's drive is not the one it had (empty, or another "
                        "node's): marked rebuilding; run fjord cluster heal --wait to rebuild it",
                        name.c_str());
                if (checked->rebuilding) shards->declare_rebuilding();
                shards->release_answers();
                co_return;
            }
            if (!warned)
                LOG_WARN(
                    "cluster %s: cannot check this node's drive with etcd (%s): its shards are "
                    "not answered for until it can",
                    name.c_str(), checked.err().message.c_str());
            warned = true;
            co_await io::sleep_for(backoff_ms);
        }
    }
};

}  // namespace

int serve(int argc, char** argv, void (*usage)()) {
    serve_config cfg;
    if (int rc = parse_serve_args(argc, argv, cfg, usage); rc != 0) return rc == 1 ? 0 : rc;
    if (auto probe = io::probe_kernel_features(); !probe) {
        LOG_ERROR("%s", probe.err().message.c_str());
        return 1;
    }
    sigset_t signals = prepare_process();
    std::unique_ptr<tls::server_credentials> tls;
    if (!load_tls(cfg, tls)) return 1;
    auto opened = store::engine::open(cfg.engine);
    if (!opened) {
        LOG_ERROR("cannot open the data directories: %s", opened.err().message.c_str());
        return 1;
    }
    std::unique_ptr<store::engine> engine = std::move(*opened);
    std::unique_ptr<kv::tier> kv_tier = open_kv_tier(cfg);
    if (!kv_tier) return 1;
    store::bucket_router router(*engine, *kv_tier);
    base::metrics metrics(cfg.engine.cores);
    int access_fd = -1;
    std::unique_ptr<s3::access_log> access;
    if (!make_access_log(cfg, access_fd, access)) return 1;
    cluster_node node{make_cluster_store(cfg)};  // a cluster node's S3 API serves its objects
    node.add_health(cfg.service);
    if (!node.open_drive(cfg)) return 1;
    store::object_store& objects = node.served(router);
    s3::service svc(objects, cfg.service, metrics, access.get());
    http::handler& front = node.attach(cfg, *engine, svc);
    io::reactor_group group(cfg.engine.cores);
    std::vector<std::unique_ptr<http::server>> servers;
    for (unsigned c = 0; c < cfg.engine.cores; ++c)
        servers.push_back(std::make_unique<http::server>(front, cfg.server, metrics));

    std::atomic<bool> listen_failed{false};
    std::thread signal_thread([&] {
        int sig = 0;
        while (sigwait(&signals, &sig) == 0 && sig == SIGHUP) reload_tls(tls.get());
        if (sig != SIGUSR1)
            LOG_INFO("received %s: finishing in-flight requests, then stopping", strsignal(sig));
        group.stop();
    });
    // Start-up in two steps, with every core at a barrier between them: first each core attaches and opens
    // its listener; then core 0 writes the start-up lines, and only after that does any core accept. So a
    // client (or a test) that got an answer from the server finds every start-up line already in the log.
    std::barrier started(static_cast<std::ptrdiff_t>(cfg.engine.cores));
    group.run([&](unsigned core) {
        engine->attach_core(core, io::reactor::current().ring());
        node.attach_core(core);
        if (auto l = servers[core]->listen(); !l) {
            LOG_ERROR("%s", l.err().message.c_str());
            listen_failed = true;
        }
        started.arrive_and_wait();
        if (listen_failed) {
            group.stop();
            return;
        }
        if (core == 0) log_start_up(cfg, *engine);
        started.arrive_and_wait();
        io::spawn(servers[core]->run());
        start_housekeeping(core, engine.get(), objects, cfg);
        node.start(core, cfg);
    });
    pthread_kill(signal_thread.native_handle(), SIGUSR1);
    signal_thread.join();
    if (access_fd > STDERR_FILENO) ::close(access_fd);
    LOG_INFO("stopped");
    return listen_failed ? 1 : 0;
}

}  // namespace fjord::server
