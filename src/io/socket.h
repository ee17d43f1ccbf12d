#pragma once

// Listening sockets. Each core opens its own SO_REUSEPORT listener on the same address, so the kernel
// spreads connections over the cores and no accept is ever shared.

#include <cstdint>
#include <string>

#include "base/result.h"

namespace fjord::io {

struct endpoint {
    std::string host = "127.0.0.1";
    std::uint16_t port = 9000;
};

// Parses "host:port" (IPv4 address or "localhost"; "[::1]:port" for IPv6).
base::result<endpoint> parse_endpoint(const std::string& text);
// Whether the address is a loopback one (127.0.0.0/8 or ::1): only this machine can reach it.
bool is_loopback(const endpoint& where);

// Creates a non-blocking-free (io_uring driven) listening TCP socket with SO_REUSEADDR and SO_REUSEPORT.
base::result<int> listen_tcp(const endpoint& where, int backlog);

// Sets TCP_NODELAY and larger socket buffers on an accepted connection.
void tune_connection(int fd);
// "address:port" of a connected socket's peer ("[v6]:port" for IPv6), or "-" when it cannot be told.
std::string peer_address(int fd);

}  // namespace fjord::io
