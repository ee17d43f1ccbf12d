#pragma once

// One client-side TCP connection driven by the core's io_uring: connect, gathered sends straight from
// the caller's memory, and receives straight into the caller's memory. It knows nothing about HTTP.
// With connection_options::tls the same calls go through a TLS session (tls/tls.h): bytes are then
// encrypted from, and decrypted into, the caller's memory.
//
// Lifecycle: created closed; connect() opens it; any failed operation closes it (the socket state is
// then unknown), and a later connect() opens a fresh one. Owned by one core, one operation at a time:
// it is not thread-safe and does not allow concurrent sends or receives.

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "base/result.h"
#include "io/socket.h"
#include "io/task.h"
#include "tls/tls.h"

namespace fjord::client {

struct connection_options {
    io::endpoint where;                   // IPv4 or IPv6 literal (parse_endpoint maps "localhost")
    std::int64_t io_timeout_ms = 60'000;  // bound on connect and on each send or receive operation
    int socket_buffer_bytes = 0;          // SO_SNDBUF / SO_RCVBUF; 0 keeps the kernel's autotuning
    // Set: the connection speaks TLS (a client context), verifying the server as `where.host`.
    std::shared_ptr<tls::context> tls;
};

class connection {
public:
    explicit connection(connection_options options) : _options(std::move(options)) {}
    ~connection() { close(); }
    connection(const connection&) = delete;
    connection& operator=(const connection&) = delete;

    bool is_open() const { return _fd >= 0; }
    const connection_options& options() const { return _options; }
    void set_io_timeout_ms(std::int64_t timeout_ms) { _options.io_timeout_ms = timeout_ms; }

    // Opens a new socket and connects it (IORING_OP_CONNECT). Closes the old one first.
    io::task<base::result<void>> connect();
    // Sends every byte of every part (the iovec array and what it points to must outlive the call).
    io::task<base::result<void>> send_all(std::span<iovec> parts);
    // Receives at least one byte (fewer than max when that is what has arrived); 0-byte end of stream
    // is the error `closed`.
    io::task<base::result<std::size_t>> receive_some(std::byte* dst, std::size_t max);
    // Receives exactly len bytes, asking the kernel to fill the whole range in one operation.
    io::task<base::result<void>> receive_exact(std::byte* dst, std::size_t len);
    void close();

private:
    io::task<base::result<void>> tls_handshake();
    // Each socket operation is bounded by timeout_ms (the handshake's remaining time), else io_timeout_ms.
    io::task<base::result<void>> tls_flush(std::int64_t timeout_ms = 0);
    io::task<base::result<void>> tls_send_all(std::span<iovec> parts);
    io::task<base::result<std::size_t>> tls_receive_some(std::byte* dst, std::size_t max);
    // One receive of ciphertext into the session's input.
    io::task<base::result<void>> tls_fill(std::int64_t timeout_ms = 0);

    connection_options _options;
    int _fd = -1;
    std::unique_ptr<tls::session> _tls;
};

}  // namespace fjord::client
