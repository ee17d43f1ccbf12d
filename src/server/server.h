#pragma once

// `fjord serve`: the engine, the KV tier, the cluster node (with --etcd), TLS and the S3 service wired
// together on one reactor per core, run until SIGINT or SIGTERM.

namespace fjord::server {

// argv without "fjord serve"; `usage` prints the binary's usage (for --help and bad options). Returns the
// process's exit status.
int serve(int argc, char** argv, void (*usage)());

}  // namespace fjord::server
