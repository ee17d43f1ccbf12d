#pragma once

// The options of `fjord serve` (the table in options.cc, one row per flag, each with its bounds), and the
// configuration they make once checked together.

#include <cstdint>
#include <string>

#include "cluster/healer.h"
#include "cluster/membership.h"
#include "http/server.h"
#include "kv/tier.h"
#include "s3/lifecycle.h"
#include "s3/service.h"
#include "store/engine.h"

namespace fjord::server {

// The development credentials `make serve` uses when none are given (loopback addresses only).
inline constexpr const char* default_access_key = "fjordadmin";
inline constexpr const char* default_secret_key = "fjordadmin-secret";

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

// Parses and checks `fjord serve`'s arguments (argv without "fjord serve"). 0: `cfg` is ready; 1: help
// was printed (with `usage`); 2: bad usage (said on stderr).
int parse_serve_args(int argc, char** argv, serve_config& cfg, void (*usage)());

}  // namespace fjord::server
