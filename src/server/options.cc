// The option table of `fjord serve` and the checks of the options taken together.

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

// What the options of `fjord serve` set before they are checked together.
struct serve_args {
    serve_config& cfg;
    void (*usage)();  // prints the binary's usage
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
    {"--no-etcd-watch", kind::flag,
     [](args& a, const char*, u64) {
         a.cfg.membership.watch = false;
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
    if (arg == "-h" || arg == "--help") return a.usage(), 1;
    const serve_option* o = nullptr;
    for (const serve_option& candidate : serve_options)
        if (candidate.name == arg) o = &candidate;
    if (!o) {
        std::fprintf(stderr, "fjord serve: unknown option %s\n", argv[i]);
        a.usage();
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

}  // namespace

int parse_serve_args(int argc, char** argv, serve_config& cfg, void (*usage)()) {
    serve_args a{cfg, usage};
    cfg.engine.cores = std::max(1u, std::thread::hardware_concurrency());
    for (int i = 0; i < argc; ++i)
        if (int rc = apply_serve_option(a, argc, argv, i); rc != 0) return rc;
    return finish_serve_config(a);
}

}  // namespace fjord::server
