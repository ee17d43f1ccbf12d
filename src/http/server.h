#pragma once

// The per-core accept loop: each core listens on its own SO_REUSEPORT socket and serves the connections
// it accepts, up to a per-core limit; past the limit a connection gets a 503 and is closed at once.

#include <cstdint>

#include "http/connection.h"
#include "io/reactor.h"
#include "io/socket.h"
#include "io/task.h"

namespace fjord::http {

struct server_options {
    io::endpoint listen;
    std::size_t max_connections_per_core = 4096;
    int backlog = 1024;
    server_limits limits;
    // Set: every connection speaks TLS with the credentials' current certificate (not owned).
    tls::server_credentials* tls = nullptr;
};

class server {
public:
    // `metrics` is shared by every core's server; each counts in its own core's shard.
    server(handler& h, server_options options, base::metrics& metrics)
        : _handler(h), _options(options), _metrics(metrics) {}
    // Opens this core's listener (call on the reactor thread before run()).
    base::result<void> listen();
    // Accepts until the reactor stops; then closes idle connections.
    io::task<void> run();
    const connection_stats& stats() const { return _stats; }

private:
    handler& _handler;
    server_options _options;
    base::metrics& _metrics;
    int _listen_fd = -1;
    connection_stats _stats;
    io::completion* _accept_wait = nullptr;
};

}  // namespace fjord::http
