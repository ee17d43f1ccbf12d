#include "http/connection.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <set>

#include "base/clock.h"
#include "base/log.h"
#include "base/token_bucket.h"
#include "http/field_syntax.h"
#include "io/iovec.h"
#include "io/ops.h"
#include "io/reactor.h"
#include "io/socket.h"

namespace fjord::http {

// Per-connection state, on the accepting core. The head buffer holds the current request head (which the
// request_head views point into) plus any bytes received after it; it is compacted between requests.
class connection_state {
public:
    connection_state(io::stream socket, const server_limits& limits, base::metrics::shard& metrics)
        : socket(socket),
          limits(limits),
          metrics(metrics),
          request_rate(limits.max_requests_per_second, limits.request_burst) {
        in.resize(limits.initial_head_buffer_bytes);
    }

    io::task<base::result<std::size_t>> read_head(request_head& head);
    void start_body(exchange& ex, std::size_t head_bytes);
    void compact();
    // Sends everything or fails; with `rate`, also fails once the transfer falls below its floor.
    io::task<base::result<void>> send_bytes(const void* data, std::size_t len,
                                            base::rate_floor* rate = nullptr);
    // The same for pieces sent in order without gathering them first; advances `parts` as it goes.
    io::task<base::result<void>> send_gather(std::span<iovec> parts, base::rate_floor* rate);
    io::task<bool> drain_body(body_reader& body);
    base::failure send_failed(int n, const base::rate_floor* rate);
    std::int64_t send_wait_ms(const base::rate_floor* rate) const;
    void count_sent(int n, base::rate_floor* rate);
    // Half-closes, then reads and discards until the client closes or a limit is reached.
    io::task<void> linger();
    // Requests until the connection closes; true when request bytes may still be on their way.
    io::task<bool> serve_requests(handler& h, connection_stats& stats);

    // Over TLS, the socket operations above go through the session, with the socket's conventions:
    // bytes, 0 at the end of the stream, -errno (-ECANCELED: timed out; -EPROTO: a TLS failure).
    io::task<bool> tls_handshake();
    io::task<int> tls_receive(void* dst, std::size_t max, std::int64_t timeout_ms, bool idle);
    io::task<int> tls_send(const void* src, std::size_t len, std::int64_t timeout_ms);
    // Sends the session's pending output by the deadline (monotonic ms): 0, or -errno.
    io::task<int> tls_flush(std::int64_t deadline_ms);

    io::stream socket;
    std::string remote_address = socket.peer_address();
    const server_limits& limits;
    base::metrics::shard& metrics;
    base::token_bucket request_rate;
    std::vector<char> in;
    std::size_t start = 0;  // unread bytes are [start, end)
    std::size_t end = 0;
    std::string spill;  // bytes received past a chunked body (the next request), kept for later
    // Gives back the last `n` bytes a body read took (they follow the body: the next request's), to where
    // they came from, so that the stream stays in order: into the head buffer they are still in, or in
    // front of the spill. While the spill holds bytes the head buffer holds none unread.
    void unread(const std::byte* data, std::size_t n, bool from_buffer) {
        if (from_buffer) {
            FJORD_ASSERT(start >= n && std::memcmp(in.data() + start - n, data, n) == 0);
            start -= n;
        } else {
            spill.insert(0, reinterpret_cast<const char*>(data), n);
        }
    }
    std::unique_ptr<tls::session> tls;
    io::completion* idle_wait = nullptr;
    std::int64_t head_deadline_ms = 0;  // monotonic; 0 while no byte of the next head has arrived
    bool broken = false;
};

namespace {
thread_local std::set<connection_state*>* t_connections = nullptr;

std::set<connection_state*>& connections() {
    if (!t_connections) t_connections = new std::set<connection_state*>();
    return *t_connections;
}

thread_local std::time_t t_date_second = 0;
thread_local std::string t_date_text;

const std::string& current_date() {
    std::time_t now = static_cast<std::time_t>(base::unix_now_ms() / 1000);
    if (now != t_date_second) {
        t_date_second = now;
        t_date_text = base::format_http_date(now);
    }
    return t_date_text;
}
}  // namespace

std::string_view status_reason(int status) {
    switch (status) {
        case 100: return "Continue";
        case 200: return "OK";
        case 204: return "No Content";
        case 206: return "Partial Content";
        case 304: return "Not Modified";
        case 400: return "Bad Request";
        case 403: return "Forbidden";
        case 404: return "Not Found";
        case 405: return "Method Not Allowed";
        case 408: return "Request Timeout";
        case 409: return "Conflict";
        case 411: return "Length Required";
        case 412: return "Precondition Failed";
        case 413: return "Payload Too Large";
        case 414: return "URI Too Long";
        case 416: return "Requested Range Not Satisfiable";
        case 431: return "Request Header Fields Too Large";
        case 500: return "Internal Server Error";
        case 501: return "Not Implemented";
        case 503: return "Service Unavailable";
        case 505: return "HTTP Version Not Supported";
        case 507: return "Insufficient Storage";
        default: return "Status";
    }
}

std::string format_response_head(int status, const header_list& headers,
                                 std::optional<std::uint64_t> content_length, bool close) {
    std::string out;
    out.reserve(256 + headers.size() * 48);
    out += "HTTP/1.1 ";
    out += std::to_string(status);
    out += ' ';
    out += status_reason(status);
    out += "\r\nDate: ";
    out += current_date();
    out += "\r\nServer: Fjord\r\n";
    for (const auto& [name, value] : headers) {
        // The last line of defence against response splitting: a value that would end the line (or a name
        // that is not a token) is never written. Handlers refuse such input with an error first; reaching
        // this is a bug, so it is logged.
        if (!syntax::is_token(name) || !syntax::is_field_value(value)) {
            LOG_ERROR("not sending response header '%.*s': it holds a byte a header may not carry",
                      static_cast<int>(std::min<std::size_t>(name.size(), 64)), name.data());
            continue;
        }
        out += name;
        out += ": ";
        out += value;
        out += "\r\n";
    }
    if (content_length) {
        out += "Content-Length: ";
        out += std::to_string(*content_length);
        out += "\r\n";
    }
    if (close) out += "Connection: close\r\n";
    out += "\r\n";
    return out;
}

// ---- connection_state ----

io::task<base::result<std::size_t>> connection_state::read_head(request_head& head) {
    head_deadline_ms = 0;
    for (;;) {
        if (end > start) {
            auto parsed = parse_request_head(std::string_view(in.data() + start, end - start),
                                             limits.parse, head);
            if (!parsed) co_return parsed.as_failure();
            if (*parsed > 0) co_return *parsed;
        }
        if (!spill.empty()) {
            // Bytes that followed a chunked body: they start the next request.
            std::size_t room = in.size() - end;
            if (room < spill.size())
                in.resize(std::min(limits.parse.max_head_bytes + 1, end + spill.size()));
            std::size_t take = std::min(spill.size(), in.size() - end);
            std::memcpy(in.data() + end, spill.data(), take);
            end += take;
            spill.erase(0, take);
            continue;
        }
        if (end == in.size()) {
            if (in.size() > limits.parse.max_head_bytes)
                co_return base::fail(base::errc::header_too_large, "request head too large");
            in.resize(std::min(in.size() * 2, limits.parse.max_head_bytes + 1));
        }
        bool idle = end == start;
        // The head has one deadline from its first byte, so a client sending a byte at a time (slowloris)
        // cannot hold the connection longer than header_timeout_ms.
        std::int64_t now_ms = base::monotonic_now_ns() / 1'000'000;
        if (idle)
            head_deadline_ms = 0;
        else if (head_deadline_ms == 0)
            head_deadline_ms = now_ms + limits.header_timeout_ms;
        std::int64_t timeout_ms = idle ? limits.idle_timeout_ms : head_deadline_ms - now_ms;
        if (timeout_ms <= 0)
            co_return base::fail(base::errc::timed_out, "timed out reading a request head");
        int n = 0;
        if (tls) {
            n = co_await tls_receive(in.data() + end, in.size() - end, timeout_ms, idle);
        } else {
            auto op = socket.receive(in.data() + end, in.size() - end, timeout_ms);
            if (idle) idle_wait = op.record();
            n = co_await op;
            idle_wait = nullptr;
        }
        if (n == 0) co_return std::size_t{0};  // peer closed
        if (n == -ECANCELED)
            co_return base::fail(base::errc::timed_out, "timed out waiting for a request");
        if (n < 0) co_return base::fail(base::errc::closed, strerror(-n));
        metrics.add(base::counter::bytes_received, static_cast<std::uint64_t>(n));
        end += static_cast<std::size_t>(n);
    }
}

void connection_state::compact() {
    if (tls) tls->shrink();
    if (start > 0) {
        std::memmove(in.data(), in.data() + start, end - start);
        end -= start;
        start = 0;
    }
}

// The failure a send that moved nothing (n <= 0) ends the response with.
base::failure connection_state::send_failed(int n, const base::rate_floor* rate) {
    broken = true;
    if (n == -ECANCELED) {
        metrics.add(base::counter::send_timeouts);
        bool too_slow = rate && rate->below(base::monotonic_now_ns());
        LOG_DEBUG("cutting a response after %llu bytes: the client %s",
                  static_cast<unsigned long long>(rate ? rate->bytes() : 0),
                  too_slow ? "reads below the minimum body rate" : "stopped reading");
        return base::fail(base::errc::timed_out, "send timed out");
    }
    return base::fail(base::errc::closed, n == 0 ? "connection closed" : strerror(-n));
}

std::int64_t connection_state::send_wait_ms(const base::rate_floor* rate) const {
    return rate ? rate->wait_limit_ms(base::monotonic_now_ns(), limits.io_timeout_ms)
                : limits.io_timeout_ms;
}

void connection_state::count_sent(int n, base::rate_floor* rate) {
    metrics.add(base::counter::bytes_sent, static_cast<std::uint64_t>(n));
    if (rate) rate->add(static_cast<std::uint64_t>(n));
}

io::task<base::result<void>> connection_state::send_bytes(const void* data, std::size_t len,
                                                          base::rate_floor* rate) {
    const char* p = static_cast<const char*>(data);
    while (len > 0) {
        const std::int64_t wait_ms = send_wait_ms(rate);
        int n = -ECANCELED;
        if (wait_ms > 0)
            n = tls ? co_await tls_send(p, len, wait_ms) : co_await socket.send(p, len, wait_ms);
        if (n <= 0) co_return send_failed(n, rate);
        count_sent(n, rate);
        p += n;
        len -= static_cast<std::size_t>(n);
    }
    co_return base::result<void>{};
}

io::task<base::result<void>> connection_state::send_gather(std::span<iovec> parts,
                                                           base::rate_floor* rate) {
    if (tls) {
        // The session copies into its records anyway: small pieces are gathered first, so that a
        // batch of small blocks is not a record and a socket send each.
        constexpr std::size_t gather_bytes = 64 * 1024;
        std::vector<std::byte> gathered;
        for (const iovec& part : parts) {
            const auto* bytes = static_cast<const std::byte*>(part.iov_base);
            if (gathered.size() + part.iov_len > gather_bytes && !gathered.empty()) {
                FJORD_CO_TRY(co_await send_bytes(gathered.data(), gathered.size(), rate));
                gathered.clear();
            }
            if (part.iov_len >= gather_bytes)
                FJORD_CO_TRY(co_await send_bytes(bytes, part.iov_len, rate));
            else
                gathered.insert(gathered.end(), bytes, bytes + part.iov_len);
        }
        if (!gathered.empty())
            FJORD_CO_TRY(co_await send_bytes(gathered.data(), gathered.size(), rate));
        co_return base::result<void>{};
    }
    parts = io::advance(parts, 0);  // no empty piece first
    while (!parts.empty()) {
        const std::int64_t wait_ms = send_wait_ms(rate);
        int n = -ECANCELED;
        if (wait_ms > 0)
            n = co_await socket.send_gather(parts.data(),
                                            std::min<std::size_t>(parts.size(), IOV_MAX), wait_ms);
        if (n <= 0) co_return send_failed(n, rate);
        count_sent(n, rate);
        parts = io::advance(parts, static_cast<std::size_t>(n));
    }
    co_return base::result<void>{};
}

// Reads and discards what is left of a body, up to a limit, so the connection can serve the next request.
io::task<bool> connection_state::drain_body(body_reader& body) {
    std::vector<std::byte> scratch(16 * 1024);
    std::size_t budget = limits.drain_limit_bytes;
    if (body.declared_length() && *body.declared_length() - body.bytes_read() > budget)
        co_return false;
    while (!body.finished() && budget > 0) {
        auto n = co_await body.read(scratch.data(), std::min(scratch.size(), budget));
        if (!n || *n == 0) break;
        budget -= *n;
    }
    co_return body.finished();
}

// ---- body_reader ----

io::task<base::result<std::size_t>> body_reader::receive(std::byte* dst, std::size_t max) {
    connection_state& c = *_conn;
    std::size_t take = 0;
    _last_from_buffer = c.end > c.start;
    if (c.end > c.start) {
        take = std::min(max, c.end - c.start);
        std::memcpy(dst, c.in.data() + c.start, take);
        c.start += take;
    } else if (!c.spill.empty()) {
        take = std::min(max, c.spill.size());
        std::memcpy(dst, c.spill.data(), take);
        c.spill.erase(0, take);
    } else {
        auto n = co_await receive_from_socket(dst, max);
        if (!n) _failed = true;
        co_return n;
    }
    _rate.add(take);
    co_return take;
}

io::task<base::result<std::size_t>> body_reader::receive_from_socket(std::byte* dst,
                                                                     std::size_t max) {
    connection_state& c = *_conn;
    std::int64_t wait_ms = _rate.wait_limit_ms(base::monotonic_now_ns(), c.limits.io_timeout_ms);
    int n = -ECANCELED;
    if (wait_ms > 0)
        n = c.tls ? co_await c.tls_receive(dst, max, wait_ms, false)
                  : co_await c.socket.receive(dst, max, wait_ms);
    if (n == 0)
        co_return base::fail(base::errc::incomplete_body,
                             "the client closed the connection before the body ended");
    if (n == -ECANCELED) {
        c.metrics.add(base::counter::receive_timeouts);
        bool too_slow = _rate.below(base::monotonic_now_ns());
        LOG_DEBUG("request body cut after %llu bytes: %s",
                  static_cast<unsigned long long>(_rate.bytes()),
                  too_slow ? "below the minimum body rate" : "no bytes within --io-timeout-ms");
        // S3's own words, which SDKs recognise as a retryable timeout.
        co_return base::fail(
            base::errc::request_timeout,
            "Your socket connection to the server was not read from or written to within the "
            "timeout period. Idle connections will be closed.");
    }
    if (n < 0) co_return base::fail(base::errc::closed, strerror(-n));
    c.metrics.add(base::counter::bytes_received, static_cast<std::uint64_t>(n));
    _rate.add(static_cast<std::uint64_t>(n));
    co_return static_cast<std::size_t>(n);
}

io::task<base::result<std::size_t>> body_reader::read(std::byte* dst, std::size_t max) {
    if (_finished || max == 0) co_return std::size_t{0};
    if (_failed) co_return base::fail(base::errc::closed, "the request body already failed");
    if (!_continue_sent) {
        _continue_sent = true;
        if (_expect_continue) {
            static constexpr char text[] = "HTTP/1.1 100 Continue\r\n\r\n";
            auto sent = co_await _conn->send_bytes(text, sizeof text - 1);
            if (!sent) {
                _failed = true;
                co_return sent.as_failure();
            }
        }
        _rate.start(base::monotonic_now_ns());
    }
    if (_chunked) co_return co_await read_chunked(dst, max);
    co_return co_await read_length_framed(dst, max);
}

io::task<base::result<std::size_t>> body_reader::read_length_framed(std::byte* dst,
                                                                    std::size_t max) {
    std::uint64_t remaining = *_declared_length - _bytes_read;
    if (remaining == 0) {
        _finished = true;
        co_return std::size_t{0};
    }
    auto n =
        co_await receive(dst, static_cast<std::size_t>(std::min<std::uint64_t>(max, remaining)));
    if (!n) co_return n;
    _bytes_read += *n;
    if (_bytes_read == *_declared_length) _finished = true;
    co_return *n;
}

io::task<base::result<std::size_t>> body_reader::read_chunked(std::byte* dst, std::size_t max) {
    // Decodes in place: raw bytes land in dst and the payload is compacted towards its start.
    std::size_t produced = 0;
    while (produced == 0 && !_chunked->finished()) {
        auto got = co_await receive(dst, max);
        if (!got) co_return got;
        std::size_t consumed = 0;
        while (consumed < *got && !_chunked->finished()) {
            auto step =
                _chunked->decode({dst + consumed, *got - consumed}, dst + produced, max - produced);
            if (!step) {
                _failed = true;
                co_return step.as_failure();
            }
            consumed += step->consumed;
            produced += step->produced;
            if (step->consumed == 0 && step->produced == 0) break;
        }
        if (consumed < *got) _conn->unread(dst + consumed, *got - consumed, _last_from_buffer);
    }
    _bytes_read += produced;
    if (_chunked->finished()) _finished = true;
    co_return produced;
}

// ---- exchange ----

exchange::exchange(connection_state& conn, const request_head& head)
    : _conn(conn),
      _head(head),
      _send_rate(conn.limits.min_body_rate),
      _started_ns(base::monotonic_now_ns()) {}

bool exchange::stopping() const { return io::reactor::current().stopping(); }

std::string_view exchange::remote_address() const { return _conn.remote_address; }

bool exchange::secure() const { return _conn.tls != nullptr; }

void exchange::start_response() {
    FJORD_ASSERT(!_head_sent);
    _head_sent = true;
    _send_rate.start(base::monotonic_now_ns());
    // A body whose reading failed has lost its framing: nothing after it on this connection is usable.
    if (_body._failed) _close_after = true;
}

std::string exchange::begin_response(int status, const header_list& headers,
                                     std::optional<std::uint64_t> content_length) {
    start_response();
    _status = status;
    if (!content_length) _close_after = true;
    if (!_body.finished() && _body._expect_continue && !_body._continue_sent) _close_after = true;
    bool close = _close_after || !_head.keep_alive || stopping();
    if (close) _close_after = true;
    return format_response_head(status, headers, content_length, close);
}

io::task<base::result<void>> exchange::send_head(int status, const header_list& headers,
                                                 std::optional<std::uint64_t> content_length) {
    std::string text = begin_response(status, headers, content_length);
    co_return co_await _conn.send_bytes(text.data(), text.size(), &_send_rate);
}

io::task<base::result<void>> exchange::send_head_with(int status, const header_list& headers,
                                                      std::optional<std::uint64_t> content_length,
                                                      std::span<const std::byte> first) {
    std::string text = begin_response(status, headers, content_length);
    iovec parts[2] = {{text.data(), text.size()},
                      {const_cast<std::byte*>(first.data()), first.size()}};
    co_return co_await _conn.send_gather(parts, &_send_rate);
}

io::task<base::result<void>> exchange::send_body(std::span<const std::byte> data) {
    FJORD_ASSERT(_head_sent);
    co_return co_await _conn.send_bytes(data.data(), data.size(), &_send_rate);
}

io::task<base::result<void>> exchange::send_body_gather(std::span<iovec> parts) {
    FJORD_ASSERT(_head_sent);
    co_return co_await _conn.send_gather(parts, &_send_rate);
}

io::task<base::result<void>> exchange::send_all(int status, const header_list& headers,
                                                std::string_view body) {
    start_response();
    _status = status;
    // An unread body we cannot cheaply drain means the connection must close after this answer.
    if (!_body.finished() && _body.declared_length() &&
        *_body.declared_length() - _body.bytes_read() > _conn.limits.drain_limit_bytes)
        _close_after = true;
    if (!_body.finished() && _body._chunked) _close_after = true;
    // The client is still waiting for "100 Continue" and may or may not send the body now.
    if (!_body.finished() && _body._expect_continue && !_body._continue_sent) _close_after = true;
    bool close = _close_after || !_head.keep_alive || stopping();
    if (close) _close_after = true;
    std::string text = format_response_head(status, headers, body.size(), close);
    if (_head.verb != method::head) text.append(body);
    co_return co_await _conn.send_bytes(text.data(), text.size(), &_send_rate);
}

// ---- the connection loop ----

void connection_state::start_body(exchange& ex, std::size_t head_bytes) {
    start += head_bytes;
    body_reader& body = ex._body;
    body._conn = this;
    body._rate = base::rate_floor(limits.min_body_rate);
    body._expect_continue = ex.head().expect_continue;
    if (ex.head().chunked) {
        body._chunked.emplace(chunked_decoder::format::http);
    } else {
        body._declared_length = ex.head().content_length.value_or(0);
        if (*body._declared_length == 0) body._finished = true;
    }
}

io::task<void> connection_state::linger() {
    if (!socket.shutdown_write()) co_return;
    const std::int64_t deadline_ms = base::monotonic_now_ns() / 1'000'000 + limits.linger_ms;
    std::size_t discarded = 0;
    while (discarded < limits.linger_bytes) {
        std::int64_t left_ms = deadline_ms - base::monotonic_now_ns() / 1'000'000;
        if (left_ms <= 0) break;
        int n = co_await socket.receive(in.data(), in.size(), left_ms);
        if (n <= 0) break;  // the client closed (0), or an error or the deadline (< 0)
        discarded += static_cast<std::size_t>(n);
    }
}

io::task<bool> connection_state::serve_requests(handler& h, connection_stats& stats) {
    for (;;) {
        request_head head;
        auto head_bytes = co_await read_head(head);
        if (!head_bytes) {
            base::errc code = head_bytes.code();
            if (code == base::errc::timed_out || code == base::errc::closed) co_return false;
            std::string text = h.protocol_error_response(head_bytes.err(), remote_address);
            // The client may still be sending the rest of its head (or a body): the connection lingers
            // so that what it sends does not turn into a reset that destroys the answer unread.
            co_return (co_await send_bytes(text.data(), text.size())).has_value();
        }
        if (*head_bytes == 0) co_return false;
        ++stats.requests;
        exchange ex(*this, head);
        start_body(ex, *head_bytes);
        const std::int64_t now_ns = base::monotonic_now_ns();
        if (request_rate.try_take(now_ns)) {
            co_await h.handle(ex);
        } else {
            metrics.add(base::counter::slowdowns);
            std::int64_t wait_ns = request_rate.wait_ns(now_ns);
            std::int64_t retry_after_ms =
                std::max<std::int64_t>(1, (wait_ns + 999'999) / 1'000'000);
            co_await h.refuse(ex, {base::errc::slow_down, "Please reduce your request rate."},
                              retry_after_ms);
        }
        if (!ex.head_sent()) {
            LOG_ERROR("handler sent no response for %.*s; closing",
                      static_cast<int>(head.target.size()), head.target.data());
            co_return false;
        }
        if (broken || ex._close_after || !head.keep_alive || io::reactor::current().stopping())
            co_return !broken && !ex.body().finished();
        if (!ex.body().finished() && !co_await drain_body(ex.body())) co_return !broken;
        compact();
    }
}

io::task<void> serve_connection(io::stream socket, handler& h, const server_limits& limits,
                                connection_stats& stats, base::metrics::shard& metrics,
                                std::unique_ptr<tls::session> tls) {
    io::reactor::current().hold();
    connection_state conn(socket, limits, metrics);
    conn.tls = std::move(tls);
    connections().insert(&conn);
    ++stats.open;
    ++stats.accepted;
    metrics.add(base::counter::connections_accepted);
    metrics.add(base::gauge::connections_open, 1);
    bool unread_body = false;  // closing with request bytes perhaps still on their way
    if (!conn.tls || co_await conn.tls_handshake()) {
        unread_body = co_await conn.serve_requests(h, stats);
        if (conn.tls && !conn.broken) {
            // close_notify, so the client knows the response ended here and was not cut.
            conn.tls->close_notify();
            (void)co_await conn.tls_flush(base::monotonic_now_ns() / 1'000'000 + 1'000);
        }
    }
    if (unread_body && !io::reactor::current().stopping()) co_await conn.linger();
    connections().erase(&conn);
    --stats.open;
    metrics.add(base::gauge::connections_open, -1);
    co_await socket.close();
    io::reactor::current().release();
}

// ---- TLS ----

namespace {
std::int64_t monotonic_ms() { return base::monotonic_now_ns() / 1'000'000; }
}  // namespace

io::task<int> connection_state::tls_flush(std::int64_t deadline_ms) {
    while (!tls->output().empty()) {
        std::int64_t left_ms = deadline_ms - monotonic_ms();
        if (left_ms <= 0) co_return -ECANCELED;
        auto out = tls->output();
        int n = co_await socket.send(out.data(), out.size(), left_ms);
        if (n <= 0) co_return n == 0 ? -EPIPE : n;
        tls->output_sent(static_cast<std::size_t>(n));
    }
    co_return 0;
}

io::task<bool> connection_state::tls_handshake() {
    const std::int64_t deadline_ms = monotonic_ms() + limits.header_timeout_ms;
    for (;;) {
        auto done = tls->handshake();
        // The server's flight, or the alert that tells the client why its handshake failed.
        int flushed = co_await tls_flush(deadline_ms);
        if (!done || flushed < 0) {
            metrics.add(base::counter::tls_handshake_failures);
            LOG_DEBUG("TLS handshake with %s failed: %s", remote_address.c_str(),
                      done ? strerror(-flushed) : done.err().message.c_str());
            co_return false;
        }
        if (*done) co_return true;
        std::int64_t left_ms = deadline_ms - monotonic_ms();
        // Past its deadline, or the server stopping (which cancels only receives already waiting):
        // the handshake has failed, whatever the client still trickles in.
        if (left_ms <= 0 || io::reactor::current().stopping()) {
            metrics.add(base::counter::tls_handshake_failures);
            co_return false;
        }
        auto space = tls->input_space();
        // Shutdown may cancel a handshake in progress, as it cancels an idle connection's wait.
        auto op = socket.receive(space.data(), space.size(), left_ms);
        idle_wait = op.record();
        int n = co_await op;
        idle_wait = nullptr;
        if (n <= 0) {
            metrics.add(base::counter::tls_handshake_failures);
            co_return false;
        }
        tls->input_added(static_cast<std::size_t>(n));
    }
}

io::task<int> connection_state::tls_receive(void* dst, std::size_t max, std::int64_t timeout_ms,
                                            bool idle) {
    // One deadline for the call: a client trickling a record a byte at a time gains nothing.
    const std::int64_t deadline_ms = monotonic_ms() + timeout_ms;
    max = std::min<std::size_t>(max, std::size_t{1} << 30);
    for (;;) {
        auto got = tls->read(static_cast<std::byte*>(dst), max);
        if (!got) {
            LOG_DEBUG("TLS connection from %s: %s", remote_address.c_str(),
                      got.err().message.c_str());
            co_return -EPROTO;
        }
        if (*got > 0) co_return static_cast<int>(*got);
        if (tls->peer_closed()) co_return 0;
        // Output a read produced (TLS 1.3 session tickets, alerts) goes before waiting for the peer.
        if (int flushed = co_await tls_flush(deadline_ms); flushed < 0) co_return flushed;
        std::int64_t left_ms = deadline_ms - monotonic_ms();
        if (left_ms <= 0 || (idle && io::reactor::current().stopping())) co_return -ECANCELED;
        auto space = tls->input_space();
        auto op = socket.receive(space.data(), space.size(), left_ms);
        if (idle) idle_wait = op.record();
        int n = co_await op;
        idle_wait = nullptr;
        if (n <= 0) co_return n;
        tls->input_added(static_cast<std::size_t>(n));
    }
}

io::task<int> connection_state::tls_send(const void* src, std::size_t len,
                                         std::int64_t timeout_ms) {
    // At most 64 KiB of plaintext per call, so that send_bytes credits the response's rate floor as
    // each part goes out, as over plain HTTP, instead of one deadline for a large batch of records.
    constexpr std::size_t max_plaintext_per_send = 64 * 1024;
    auto took =
        tls->write(static_cast<const std::byte*>(src), std::min(len, max_plaintext_per_send));
    if (!took) {
        LOG_DEBUG("TLS connection to %s: %s", remote_address.c_str(), took.err().message.c_str());
        co_return -EPROTO;
    }
    if (int flushed = co_await tls_flush(monotonic_ms() + timeout_ms); flushed < 0)
        co_return flushed;
    co_return static_cast<int>(*took);
}

void close_idle_connections() {
    for (connection_state* c : connections()) {
        if (c->idle_wait) c->socket.cancel(c->idle_wait);
    }
}

}  // namespace fjord::http
