#pragma once

// The HTTP/1.1 connection loop and the per-request exchange a handler sees.
//
// A connection belongs to the core that accepted it; everything here runs on that core. Request bodies
// are never buffered whole: the handler pulls them through body_reader::read() straight into its own
// (registered, aligned) buffers, and the first read answers "100 Continue" when the client asked for it.
// Responses are streamed with send_head() + send_body(). Every receive and send carries a timeout, and
// bodies in both directions must keep a minimum average rate (server_limits::min_body_rate), so a slow
// client can hold neither a connection nor the pool buffers its request uses for long.

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/metrics.h"
#include "base/rate_floor.h"
#include "base/result.h"
#include "http/chunked.h"
#include "http/request.h"
#include "io/stream.h"
#include "io/task.h"
#include "tls/tls.h"

namespace fjord::http {

struct server_limits {
    parse_limits parse;
    std::int64_t idle_timeout_ms = 60'000;  // keep-alive connection with no request
    std::int64_t header_timeout_ms =
        30'000;                           // from the first byte of a request to its complete head
    std::int64_t io_timeout_ms = 60'000;  // any single receive or send of a body
    // Request bodies and responses, each from its first byte: after grace_ms, the average rate since
    // then must stay at or above bytes_per_second (0: no floor). A request body below it is answered
    // RequestTimeout; a response below it is cut. See docs/security.md for the choice of defaults.
    base::rate_floor_options min_body_rate{.bytes_per_second = 4096, .grace_ms = 30'000};
    std::size_t initial_head_buffer_bytes = 4096;
    std::size_t drain_limit_bytes =
        256 * 1024;  // unread body bytes we discard to keep a connection open
    // Closing while the client may still be sending (an error answered before the body was read): the
    // server stops sending, then discards what arrives for up to linger_ms / linger_bytes before closing,
    // so that the kernel does not answer the client's next bytes with a reset that destroys the response
    // before the client has read it (as nginx's lingering_close).
    std::int64_t linger_ms = 2'000;
    std::size_t linger_bytes = 64 * 1024 * 1024;
    // Requests one connection may make, as a token bucket: this many a second on average, with bursts
    // of up to request_burst. Requests over it are refused (handler::refuse, 503 SlowDown) and the
    // connection stays open. 0: no limit. See docs/security.md for the choice of defaults.
    std::uint64_t max_requests_per_second = 5'000;
    std::uint64_t request_burst = 10'000;
};

using header_list = std::vector<std::pair<std::string, std::string>>;

class connection_state;
class exchange;
class handler;

struct connection_stats {
    std::uint64_t open = 0;
    std::uint64_t accepted = 0;
    std::uint64_t requests = 0;
};

// The request body after HTTP framing (Content-Length or chunked). Reads return 0 at the end.
class body_reader {
public:
    io::task<base::result<std::size_t>> read(std::byte* dst, std::size_t max);
    bool finished() const { return _finished; }
    std::optional<std::uint64_t> declared_length() const { return _declared_length; }
    std::uint64_t bytes_read() const { return _bytes_read; }

private:
    friend class connection_state;
    friend class exchange;
    io::task<base::result<std::size_t>> read_length_framed(std::byte* dst, std::size_t max);
    io::task<base::result<std::size_t>> read_chunked(std::byte* dst, std::size_t max);
    io::task<base::result<std::size_t>> receive(std::byte* dst, std::size_t max);
    io::task<base::result<std::size_t>> receive_from_socket(std::byte* dst, std::size_t max);

    connection_state* _conn = nullptr;
    base::rate_floor _rate;  // started by the first read (after any 100 Continue)
    std::optional<std::uint64_t> _declared_length;
    std::optional<chunked_decoder> _chunked;
    std::uint64_t _bytes_read = 0;
    bool _finished = false;
    // A receive failed (timeout, peer gone, bad framing): the rest of the body cannot be trusted or
    // drained, so the connection closes after the answer.
    bool _failed = false;
    bool _expect_continue = false;
    bool _continue_sent = false;
    bool _last_from_buffer =
        false;  // the last receive took its bytes from the connection's head buffer
};

class exchange {
public:
    const request_head& head() const { return _head; }
    body_reader& body() { return _body; }
    // Sends the status line and headers. With content_length, a Content-Length header is added; without
    // it the response has no body framing and the connection closes after it.
    io::task<base::result<void>> send_head(int status, const header_list& headers,
                                           std::optional<std::uint64_t> content_length);
    // send_head, then send_body(first), in one send: a small response's head and body in one segment.
    io::task<base::result<void>> send_head_with(int status, const header_list& headers,
                                                std::optional<std::uint64_t> content_length,
                                                std::span<const std::byte> first);
    io::task<base::result<void>> send_body(std::span<const std::byte> data);
    // Body bytes from several places, sent in order with no copy into one buffer first (a SENDMSG;
    // over TLS, piece by piece). The iovecs are advanced as bytes go out; what they name must stay
    // alive until this returns.
    io::task<base::result<void>> send_body_gather(std::span<iovec> parts);
    // A complete small response in one send.
    io::task<base::result<void>> send_all(int status, const header_list& headers,
                                          std::string_view body);
    bool head_sent() const { return _head_sent; }
    // The status of the response sent (0 before send_head / send_all).
    int status() const { return _status; }
    // The connection closes after this response (e.g. after an error that left the body unread).
    void close_after() { _close_after = true; }
    bool stopping() const;
    // The client's address ("ip:port"), for logs.
    std::string_view remote_address() const;
    // Bytes of the response sent so far (head and body).
    std::uint64_t bytes_sent() const { return _send_rate.bytes(); }
    // Monotonic time at which the request head was complete.
    std::int64_t started_ns() const { return _started_ns; }
    // The request came over TLS.
    bool secure() const;

private:
    friend class connection_state;
    exchange(connection_state& conn, const request_head& head);
    void start_response();
    // Starts the response: the head's text, with the connection's close decision made.
    std::string begin_response(int status, const header_list& headers,
                               std::optional<std::uint64_t> content_length);
    connection_state& _conn;
    const request_head& _head;
    body_reader _body;
    base::rate_floor _send_rate;  // started by the response head
    bool _head_sent = false;
    bool _close_after = false;
    int _status = 0;
    std::int64_t _started_ns = 0;
};

class handler {
public:
    virtual ~handler() = default;
    virtual io::task<void> handle(exchange& ex) = 0;
    // Answers a request the connection will not hand to handle() (over its request rate), with the
    // error given; a request retried after `retry_after_ms` would be taken. The body has not been read;
    // the connection drains it or closes as for any answer.
    virtual io::task<void> refuse(exchange& ex, const base::error& err,
                                  std::int64_t retry_after_ms) = 0;
    // A complete response (status line to body) for a request that could not be parsed, from the client
    // at `remote_address`.
    virtual std::string protocol_error_response(const base::error& err,
                                                std::string_view remote_address) = 0;
};

// Serves one accepted stream (a socket, or a simulated one) until the peer closes, an error, or
// shutdown; closes the stream. With `tls`, the stream carries TLS: the handshake comes first (bounded by
// header_timeout_ms) and every byte goes through the session. Bytes and connections are counted in
// `metrics`, the shard of the calling core (bytes_received / bytes_sent count plaintext).
io::task<void> serve_connection(io::stream socket, handler& h, const server_limits& limits,
                                connection_stats& stats, base::metrics::shard& metrics,
                                std::unique_ptr<tls::session> tls = nullptr);

// Asks every idle connection on this core to close now (shutdown). Connections busy with a request
// finish it first.
void close_idle_connections();

// Formats the status line and headers (adds Date and Content-Length / Connection as needed).
std::string format_response_head(int status, const header_list& headers,
                                 std::optional<std::uint64_t> content_length, bool close);
std::string_view status_reason(int status);

}  // namespace fjord::http
