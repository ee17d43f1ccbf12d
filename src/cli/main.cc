// The `fjord` binary. `fjord serve` runs the S3 server; later subcommands (cp, ls, bench) join it here.

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

namespace {

using namespace fjord;

constexpr const char* default_access_key = "fjordadmin";
constexpr const char* default_secret_key = "fjordadmin-secret";

void print_cluster_usage() {
    std::fputs(
        "  --etcd URL            join a cluster through etcd at http://HOST:PORT (docs/cluster.md):\n"
        "                        objects are erasure-coded over the nodes of its topology\n"
        "  --node-id ID          this node's id in the cluster (needed with --etcd)\n"
        "  --cluster NAME        the cluster's name, which etcd keys are under (default fjord)\n"
        "  --advertise HOST:PORT the S3 address peers and clients reach (default: --listen)\n"
        "  --lease-ttl-s N       seconds without a heartbeat before the node is down (default 10)\n"
        "  --heal-scan-interval-s N   how often a node scans its shards for objects below full\n"
        "                        width and damaged shards (default 600)\n"
        "  --heal-keys-per-second N   keys a scan looks at a second (default 2000)\n"
        "  --heal-leftover-age-s N    age at which healing decides a write left on fewer than W\n"
        "                        nodes; its writer decides within half of it (default 60). A\n"
        "                        cluster whose topology names one (fjord cluster init\n"
        "                        --heal-leftover-age-s) uses that on every node instead\n",
        stderr);
}

void print_usage() {
    std::fputs(
        "usage: fjord serve [options]\n"
        "  --data DIR            data directory (repeatable; default ./data)\n"
        "  --accept-empty-drive DIR   format DIR, a --data directory other than the first, though the\n"
        "                        others hold data: its drive replaced a lost one (without it, a set\n"
        "                        in which some directories are not Fjord drives is refused)\n"
        "  --listen HOST:PORT    address to listen on (default 127.0.0.1:9000)\n"
        "  --tls-cert PATH       serve HTTPS (TLS 1.2 and 1.3) with this PEM certificate chain, leaf first;\n"
        "                        needs --tls-key; both are read again on SIGHUP (default: plain HTTP)\n"
        "  --tls-key PATH        the PEM private key of --tls-cert\n"
        "  --cores N             reactor threads, one per core (default: all cores)\n"
        "  --domain NAME         domain for virtual-hosted-style buckets (repeatable; default localhost)\n"
        "  --region NAME         region reported to clients (default us-east-1)\n"
        "  --etag-md5            compute an MD5 ETag for every object (costs ~1.4 core-s per GiB)\n"
        "  --etag-md5-max-bytes N  MD5 ETags for objects up to N bytes (default 0)\n"
        "  --max-connections N   connections per core (default 4096)\n"
        "  --idle-timeout-ms N   close a keep-alive connection idle this long (default 60000)\n"
        "  --header-timeout-ms N time allowed for a request head once it started (default 30000)\n"
        "  --io-timeout-ms N     time allowed for any one body receive or send (default 60000)\n"
        "  --min-body-rate-bytes-per-second N   request bodies and responses slower than this on\n"
        "                        average are cut: RequestTimeout / closed (default 4096, 0: no floor)\n"
        "  --min-body-rate-grace-ms N   time before that floor applies (default 30000)\n"
        "  --max-requests-per-second-per-connection N   average request rate one connection may\n"
        "                        keep up; faster requests get 503 SlowDown (default 5000, 0: no limit)\n"
        "  --request-burst-per-connection N   requests a connection may send at once above that rate\n"
        "                        (default: twice the rate)\n"
        "  --buffers N           I/O buffers per core (default 64)\n"
        "  --io-size-kib N       size of one disk I/O and buffer, 512 or more, a multiple of 64 (default 1024)\n"
        "  --io-depth N          disk I/Os in flight per request (default 4)\n"
        "  --no-huge-pages       keep the I/O buffers on 4 KiB pages (default: transparent huge pages\n"
        "                        when the kernel gives them; see src/io/README.md)\n"
        "  --disk-writes-in-flight N   data writes in flight per drive, all cores together; each core\n"
        "                        gets an equal share, at least one (default 8)\n"
        "  --disk-write-kib N    largest single data write, a multiple of 4 (default 1024)\n"
        "  --spare-data-mib N    freed data files of 1 MiB or more kept per drive for reuse by later writes,\n"
        "                        all cores together (default 1024, 0: remove them at once)\n"
        "  --spare-data-idle-seconds N   remove spare data files no write took for N s (default 600)\n"
        "  --inline-max-bytes N  objects of at most N bytes written by one PUT are kept in their metadata\n"
        "                        record instead of a data file (default 4096, at most 65536; 0: never)\n"
        "  --inline-budget-mib N memory all such objects may hold together; past it they get data files\n"
        "                        (default 256)\n"
        "  --min-free-mib N      free space each drive keeps: new writes past it get 507 (default 1024, but\n"
        "                        at most 2%% of the drive; 0: none)\n"
        "  --reserve-ahead-mib N space preallocated ahead of the bytes received, all uploads together\n"
        "                        (default 1024; each upload reserves 64 MiB steps as its body arrives)\n"
        "  --multipart-expiry-seconds N   abort multipart uploads older than N s (default 604800)\n"
        "  --multipart-expiry-interval-seconds N   how often to look for them (default 3600)\n"
        "  --lifecycle-interval-seconds N   how often bucket lifecycle rules are applied (default 3600)\n"
        "  --lifecycle-actions-per-second N   at most N lifecycle deletes and aborts a second (default 1000)\n"
        "  --lifecycle-day-seconds N   the length of a lifecycle day, for tests (default 86400)\n"
        "  --kv-dram-mib N       DRAM tier of the KV buckets, all cores together (default 1024)\n"
        "  --kv-capacity-mib N   NVMe space of a KV bucket made without a capacity (default 16384)\n"
        "  --kv-read-queue-mib N NVMe reads of the KV tier in flight per core; more wait in order (default 8)\n"
        "  --metrics-public      serve GET /metrics without authentication (default: SigV4 required)\n"
        "  --access-log PATH     one JSON line per request to PATH (appended), or - for stderr (default: off)\n"
        "  --log-level LEVEL     debug, info, warn or error (default info)\n"
        "  --object-ownership O  of buckets made without one: ObjectWriter (default; ACLs on, private until\n"
        "                        granted), BucketOwnerPreferred, BucketOwnerEnforced (ACLs off; S3's default)\n",
        stderr);
    print_cluster_usage();
    std::fputs(
        "credentials come from FJORD_ACCESS_KEY and FJORD_SECRET_KEY\n"
        "       fjord bench disk|net|s3|checkpoint ...   (fjord bench --help)\n"
        "       fjord client put|get|head|delete|mb ...  (one request through the native client)\n"
        "       fjord admin user add|rm|ls ...            (users of a server; fjord admin --help)\n"
        "       fjord cluster init|status|heal|remove-node ...   (clusters on etcd)\n"
        "       fjord cp|ls|rm|mb|rb ...                 (objects and buckets; fjord cp --help)\n",
        stderr);
}

struct serve_config {
    std::int64_t multipart_expiry_s = 7 * 24 * 3600;
    std::int64_t multipart_expiry_interval_s = 3600;
    s3::lifecycle_options lifecycle;
    store::engine_options engine;
    kv::tier_options kv;
    s3::service_options service;
    http::server_options server;
    bool default_credentials = false;
    std::string access_log_path;  // empty: no access log; "-": stderr
    bool request_burst_given = false;
    bool ownership_given = false;  // --object-ownership
    std::string tls_cert_path;     // both empty: plain HTTP
    std::string tls_key_path;
    // Cluster membership (--etcd); empty etcd_url: the embedded single-node server, no etcd.
    std::string etcd_url;
    std::string advertise;
    cluster::membership_options membership;
    cluster::healer_options healing;
    std::int64_t leftover_age_ms = 60'000;
};

// What the options of `fjord serve` set before they are checked together.
struct serve_args {
    serve_config& cfg;
    std::vector<std::string> data_dirs;
    std::vector<std::string> domains;
    std::string listen = "127.0.0.1:9000";
};

// One option: a flag (no value), a text value, or a number in [min, max] and a multiple of `multiple`.
// apply() takes the text (text options) or the number (number options); false: the value is not valid.
struct serve_option {
    enum class kind { flag, text, number };
    std::string_view name;
    kind type;
    bool (*apply)(serve_args&, const char* text, std::uint64_t number);
    std::uint64_t min = 0;
    std::uint64_t max = UINT64_MAX;
    std::uint64_t multiple = 1;
};

constexpr std::uint64_t year_s = 365ULL * 86'400;
constexpr std::uint64_t year_ms = year_s * 1000;
using kind = serve_option::kind;
using args = serve_args;
using u64 = std::uint64_t;

bool set_log_level(std::string_view level) {
    if (level == "debug")
        base::set_log_level(base::log_level::debug);
    else if (level == "info")
        base::set_log_level(base::log_level::info);
    else if (level == "warn")
        base::set_log_level(base::log_level::warn);
    else if (level == "error")
        base::set_log_level(base::log_level::error);
    else
        return false;
    return true;
}

const serve_option serve_options[] = {
    {"--data", kind::text,
     [](args& a, const char* t, u64) {
         a.data_dirs.push_back(t);
         return true;
     }},
    {"--accept-empty-drive", kind::text,
     [](args& a, const char* t, u64) {
         a.cfg.engine.accept_empty_drives.push_back(t);
         return true;
     }},
    {"--listen", kind::text,
     [](args& a, const char* t, u64) {
         a.listen = t;
         return true;
     }},
    {"--domain", kind::text,
     [](args& a, const char* t, u64) {
         a.domains.push_back(t);
         return true;
     }},
    {"--region", kind::text,
     [](args& a, const char* t, u64) {
         a.cfg.service.region = t;
         return true;
     }},
    {"--access-log", kind::text,
     [](args& a, const char* t, u64) {
         a.cfg.access_log_path = t;
         return *t != 0;
     }},
    {"--tls-cert", kind::text,
     [](args& a, const char* t, u64) {
         a.cfg.tls_cert_path = t;
         return *t != 0;
     }},
    {"--tls-key", kind::text,
     [](args& a, const char* t, u64) {
         a.cfg.tls_key_path = t;
         return *t != 0;
     }},
    {"--etcd", kind::text,
     [](args& a, const char* t, u64) {
         a.cfg.etcd_url = t;
         return *t != 0;
     }},
    {"--node-id", kind::text,
     [](args& a, const char* t, u64) {
         a.cfg.membership.node.node_id = t;  // checked in finish_cluster_config, which says why
         return true;
     }},
    {"--cluster", kind::text,
     [](args& a, const char* t, u64) {
         a.cfg.membership.cluster = t;
         return true;
     }},
    {"--advertise", kind::text,
     [](args& a, const char* t, u64) {
         a.cfg.advertise = t;
         return static_cast<bool>(io::parse_endpoint(t));
     }},
    {"--lease-ttl-s", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.membership.lease_ttl_s = static_cast<std::int64_t>(n);
         return true;
     },
     2, 300},
    {"--heal-scan-interval-s", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.healing.scan_interval_ms = static_cast<std::int64_t>(n) * 1000;
         return true;
     },
     1, year_s},
    {"--heal-keys-per-second", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.healing.scan_keys_per_second = n;
         return true;
     },
     1, 1'000'000},
    {"--heal-leftover-age-s", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.leftover_age_ms = static_cast<std::int64_t>(n) * 1000;
         return true;
     },
     1, year_s},
    {"--log-level", kind::text, [](args&, const char* t, u64) { return set_log_level(t); }},
    {"--object-ownership", kind::text,
     [](args& a, const char* t, u64) {
         auto ownership = s3::parse_ownership(t);
         if (ownership) a.cfg.service.default_ownership = *ownership;
         a.cfg.ownership_given = true;
         return ownership.has_value();
     }},
    {"--etag-md5", kind::flag,
     [](args& a, const char*, u64) {
         a.cfg.service.etag_md5 = true;
         return true;
     }},
    {"--metrics-public", kind::flag,
     [](args& a, const char*, u64) {
         a.cfg.service.metrics_public = true;
         return true;
     }},
    {"--no-huge-pages", kind::flag,
     [](args& a, const char*, u64) {
         a.cfg.engine.buffers.huge_pages = false;
         return true;
     }},
    {"--cores", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.engine.cores = static_cast<unsigned>(n);
         return true;
     },
     1, 256},
    {"--etag-md5-max-bytes", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.service.etag_md5_max_bytes = n;
         return true;
     }},
    {"--idle-timeout-ms", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.server.limits.idle_timeout_ms = static_cast<std::int64_t>(n);
         return true;
     },
     1, year_ms},
    {"--header-timeout-ms", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.server.limits.header_timeout_ms = static_cast<std::int64_t>(n);
         return true;
     },
     1, year_ms},
    {"--io-timeout-ms", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.server.limits.io_timeout_ms = static_cast<std::int64_t>(n);
         return true;
     },
     1, year_ms},
    {"--min-body-rate-bytes-per-second", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.server.limits.min_body_rate.bytes_per_second = n;
         return true;
     },
     0, base::rate_floor::max_bytes_per_second},
    {"--min-body-rate-grace-ms", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.server.limits.min_body_rate.grace_ms = static_cast<std::int64_t>(n);
         return true;
     },
     1, 86'400'000},
    {"--max-requests-per-second-per-connection", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.server.limits.max_requests_per_second = n;
         return true;
     },
     0, 1'000'000},
    {"--request-burst-per-connection", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.server.limits.request_burst = n;
         a.cfg.request_burst_given = true;
         return true;
     },
     1, base::token_bucket::max_burst},
    {"--max-connections", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.server.max_connections_per_core = n;
         return true;
     },
     1},
    {"--multipart-expiry-seconds", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.multipart_expiry_s = static_cast<std::int64_t>(n);
         return true;
     },
     1, 100 * year_s},
    {"--multipart-expiry-interval-seconds", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.multipart_expiry_interval_s = static_cast<std::int64_t>(n);
         return true;
     },
     1, year_s},
    {"--lifecycle-interval-seconds", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.lifecycle.interval_s = static_cast<std::int64_t>(n);
         return true;
     },
     1, year_s},
    {"--lifecycle-actions-per-second", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.lifecycle.actions_per_second = static_cast<std::uint32_t>(n);
         return true;
     },
     1, 1000000},
    {"--lifecycle-day-seconds", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.lifecycle.day_seconds = static_cast<std::int64_t>(n);
         return true;
     },
     1, 86400},
    {"--io-depth", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.engine.data_files.pipeline_depth = n;
         return true;
     },
     1, 64},
    {"--disk-writes-in-flight", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.engine.writes.writes_in_flight_per_drive = n;
         return true;
     },
     1, 1024},
    {"--spare-data-idle-seconds", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.engine.spares.idle_ms = static_cast<std::int64_t>(n) * 1000;
         return true;
     },
     1, year_s},
    {"--min-free-mib", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.engine.space.min_free_bytes = n * base::MiB;
         return true;
     },
     0, 1024ULL * 1024 * 1024},
    {"--reserve-ahead-mib", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.engine.space.max_reserved_ahead_bytes = n * base::MiB;
         return true;
     },
     0, 1024ULL * 1024 * 1024},
    {"--inline-max-bytes", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.engine.inline_max_bytes = static_cast<std::uint32_t>(n);
         return true;
     },
     0, 64 * 1024},
    {"--inline-budget-mib", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.engine.inline_budget_bytes = n * base::MiB;
         return true;
     },
     0, 1024 * 1024},
    {"--spare-data-mib", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.engine.spares.bytes_per_drive = n * base::MiB;
         return true;
     },
     0, 1024 * 1024},
    {"--disk-write-kib", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.engine.writes.write_bytes = n * base::KiB;
         return true;
     },
     4, 8192, 4},
    {"--io-size-kib", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.engine.buffers.buffer_bytes = n * base::KiB;
         return true;
     },
     512, 8192, 64},
    {"--kv-dram-mib", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.kv.dram_bytes = n * base::MiB;
         return true;
     },
     0, 1024 * 1024},
    {"--kv-read-queue-mib", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.kv.read_queue_bytes = n * base::MiB;
         return true;
     },
     1, 1024},
    {"--kv-capacity-mib", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.kv.default_capacity_bytes = n * base::MiB;
         return true;
     },
     64, 1ULL << 30},
    {"--buffers", kind::number,
     [](args& a, const char*, u64 n) {
         a.cfg.engine.buffers.buffer_count = n;
         return true;
     },
     8, 16384},
};

// Says what a number option takes, for its error message.
std::string number_range(const serve_option& o) {
    std::string out = "a number";
    if (o.max == UINT64_MAX)
        out += o.min > 0 ? " of at least " + std::to_string(o.min) : "";
    else
        out += " from " + std::to_string(o.min) + " to " + std::to_string(o.max);
    if (o.multiple > 1) out += ", a multiple of " + std::to_string(o.multiple);
    return out;
}

// Applies argv[i] (and its value, which it then skips); 0, 1 (help asked for) or 2 (bad usage).
int apply_serve_option(serve_args& a, int argc, char** argv, int& i) {
    std::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") return print_usage(), 1;
    const serve_option* o = nullptr;
    for (const serve_option& candidate : serve_options)
        if (candidate.name == arg) o = &candidate;
    if (!o) {
        std::fprintf(stderr, "fjord serve: unknown option %s\n", argv[i]);
        print_usage();
        return 2;
    }
    if (o->type == kind::flag) return o->apply(a, nullptr, 0) ? 0 : 2;
    const char* value = i + 1 < argc ? argv[++i] : nullptr;
    std::optional<std::uint64_t> n;
    if (o->type == kind::number && value) n = base::parse_u64(value);
    bool ok = value && (o->type == kind::text ||
                        (n && *n >= o->min && *n <= o->max && *n % o->multiple == 0));
    if (ok && o->apply(a, value, n.value_or(0))) return 0;
    std::string name(arg);
    if (o->type == kind::number)
        std::fprintf(stderr, "fjord serve: %s takes %s\n", name.c_str(), number_range(*o).c_str());
    else
        std::fprintf(stderr, "fjord serve: %s needs a valid value\n", name.c_str());
    return 2;
}

// --etcd and the options that go with it; 0 or 2 (bad usage). The node advertises --advertise, else the
// address it listens on, which must then be one that others can reach.
int finish_cluster_config(serve_config& cfg) {
    cluster::membership_options& m = cfg.membership;
    if (cfg.etcd_url.empty()) {
        if (!m.node.node_id.empty() || !cfg.advertise.empty()) {
            std::fputs("fjord serve: --node-id and --advertise need --etcd\n", stderr);
            return 2;
        }
        return 0;
    }
    auto etcd = cluster::parse_etcd_url(cfg.etcd_url);
    if (!etcd) {
        std::fprintf(stderr, "fjord serve: --etcd: %s\n", etcd.err().message.c_str());
        return 2;
    }
    m.etcd.where = *etcd;
    if (m.node.node_id.empty()) {
        std::fputs("fjord serve: --etcd needs --node-id\n", stderr);
        return 2;
    }
    for (auto named : {cluster::check_name("node id", m.node.node_id),
                       cluster::check_name("cluster name", m.cluster)}) {
        if (!named) {
            std::fprintf(stderr, "fjord serve: %s\n", named.err().message.c_str());
            return 2;
        }
    }
    io::endpoint reach = cfg.server.listen;
    if (!cfg.advertise.empty()) reach = *io::parse_endpoint(cfg.advertise);
    if (reach.host == "0.0.0.0" || reach.host == "::") {
        std::fputs(
            "fjord serve: listening on every address: say which one peers reach with "
            "--advertise HOST:PORT\n",
            stderr);
        return 2;
    }
    if (!cfg.tls_cert_path.empty()) {
        std::fputs(
            "fjord serve: a cluster node speaks plain HTTP for now (--etcd without --tls-cert)\n",
            stderr);
        return 2;
    }
    bool ipv6 = reach.host.find(':') != std::string::npos;
    m.node.s3_endpoint = std::string(cfg.tls_cert_path.empty() ? "http" : "https") + "://" +
                         (ipv6 ? "[" + reach.host + "]" : reach.host) + ":" +
                         std::to_string(reach.port);
    m.node.cores = cfg.engine.cores;
    // A cluster cannot change an object's ACL in place yet (docs/cluster.md): its buckets keep ACLs
    // disabled unless the operator asks otherwise.
    if (!cfg.ownership_given) cfg.service.default_ownership = s3::object_ownership::enforced;
    return 0;
}

// The checks across options, and the credentials from the environment; 0 or 2 (bad usage).
int finish_serve_config(serve_args& a) {
    serve_config& cfg = a.cfg;
    if (!cfg.request_burst_given)
        cfg.server.limits.request_burst =
            std::max<std::uint64_t>(1, 2 * cfg.server.limits.max_requests_per_second);
    // The region is echoed in headers and error documents: S3's own shape only (us-east-1, eu-west-3, ...).
    const std::string& region = cfg.service.region;
    auto region_char = [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
    };
    if (region.empty() || region.size() > 64 ||
        !std::all_of(region.begin(), region.end(), region_char)) {
        std::fputs(
            "fjord serve: --region takes a region name of lower-case letters, digits and '-'\n",
            stderr);
        return 2;
    }
    if (cfg.tls_cert_path.empty() != cfg.tls_key_path.empty()) {
        std::fputs("fjord serve: --tls-cert and --tls-key go together\n", stderr);
        return 2;
    }
    if (!a.data_dirs.empty()) cfg.engine.data_dirs = a.data_dirs;
    for (const std::string& dir : cfg.engine.accept_empty_drives)
        if (std::find(cfg.engine.data_dirs.begin() + 1, cfg.engine.data_dirs.end(), dir) ==
            cfg.engine.data_dirs.end()) {
            std::fprintf(stderr,
                         "fjord serve: --accept-empty-drive %s names no --data directory after "
                         "the first (the first holds the metadata and is never formatted over "
                         "the others)\n",
                         dir.c_str());
            return 2;
        }
    if (!a.domains.empty()) cfg.service.domains = a.domains;
    auto ep = io::parse_endpoint(a.listen);
    if (!ep) {
        std::fprintf(stderr, "fjord serve: %s\n", ep.err().message.c_str());
        return 2;
    }
    cfg.server.listen = *ep;
    if (int rc = finish_cluster_config(cfg); rc != 0) return rc;
    const char* access = std::getenv("FJORD_ACCESS_KEY");
    const char* secret = std::getenv("FJORD_SECRET_KEY");
    if ((access && *access) != (secret && *secret)) {
        std::fputs("fjord serve: set both FJORD_ACCESS_KEY and FJORD_SECRET_KEY, or neither\n",
                   stderr);
        return 2;
    }
    cfg.default_credentials = !(access && *access);
    if (cfg.default_credentials && !io::is_loopback(cfg.server.listen)) {
        std::fprintf(
            stderr,
            "fjord serve: refusing to listen on %s with the development credentials, which anyone can "
            "read in README.md: set FJORD_ACCESS_KEY and FJORD_SECRET_KEY (or listen on 127.0.0.1)\n",
            cfg.server.listen.host.c_str());
        return 2;
    }
    auth::credentials chosen{cfg.default_credentials ? default_access_key : access,
                             cfg.default_credentials ? default_secret_key : secret};
    if (auto valid = auth::check_credentials(chosen); !valid) {
        std::fprintf(stderr, "fjord serve: %s\n", valid.err().message.c_str());
        return 2;
    }
    cfg.service.credentials.add(std::move(chosen));
    return 0;
}

// 0: `cfg` is ready; 1: help was printed; 2: bad usage (said on stderr).
int parse_serve_args(int argc, char** argv, serve_config& cfg) {
    serve_args a{cfg};
    cfg.engine.cores = std::max(1u, std::thread::hardware_concurrency());
    for (int i = 0; i < argc; ++i)
        if (int rc = apply_serve_option(a, argc, argv, i); rc != 0) return rc;
    return finish_serve_config(a);
}

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

int serve(int argc, char** argv) {
    serve_config cfg;
    if (int rc = parse_serve_args(argc, argv, cfg); rc != 0) return rc == 1 ? 0 : rc;
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

}  // namespace

int main(int argc, char** argv) {
    if (argc >= 2 && std::string(argv[1]) == "scrub")
        return fjord::cli::scrub_main(argc - 2, argv + 2);
    if (argc >= 2 && std::string(argv[1]) == "serve") return serve(argc - 2, argv + 2);
    if (argc >= 2 && std::string(argv[1]) == "bench")
        return fjord::bench::bench_main(argc - 2, argv + 2);
    if (argc >= 2 && std::string(argv[1]) == "client")
        return fjord::cli::client_main(argc - 2, argv + 2);
    if (argc >= 2 && std::string(argv[1]) == "cluster")
        return fjord::cli::cluster_main(argc - 2, argv + 2);
    if (argc >= 2 && std::string(argv[1]) == "admin")
        return fjord::cli::admin_main(argc - 2, argv + 2);
    for (const char* name : {"cp", "ls", "rm", "mb", "rb"})
        if (argc >= 2 && std::string(argv[1]) == name)
            return fjord::cli::object_command_main(name, argc - 2, argv + 2);
    print_usage();
    return argc >= 2 && (std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help") ? 0 : 2;
}
