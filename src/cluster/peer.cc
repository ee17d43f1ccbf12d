#include "cluster/peer.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "base/clock.h"
#include "base/encoding.h"
#include "client/response.h"

namespace fjord::cluster {

namespace {

constexpr std::size_t max_head_bytes = 16 * 1024;
constexpr std::size_t receive_step_bytes = 16 * 1024;

bool is_fjord_header(std::string_view name) {
    return name.size() > 8 && base::iequals(name.substr(0, 8), "x-fjord-");
}

// The data plane's transport: a TCP connection on the core's io_uring.
class tcp_transport final : public peer_transport {
public:
    explicit tcp_transport(client::connection_options options) : _c(std::move(options)) {}
    bool is_open() const override { return _c.is_open(); }
    io::task<base::result<void>> connect() override { return _c.connect(); }
    io::task<base::result<void>> send_all(std::span<iovec> parts) override {
        return _c.send_all(parts);
    }
    io::task<base::result<std::size_t>> receive_some(std::byte* dst, std::size_t max) override {
        return _c.receive_some(dst, max);
    }
    io::task<base::result<void>> receive_exact(std::byte* dst, std::size_t len) override {
        return _c.receive_exact(dst, len);
    }
    void set_io_timeout_ms(std::int64_t timeout_ms) override { _c.set_io_timeout_ms(timeout_ms); }
    void close() override { _c.close(); }

private:
    client::connection _c;
};

}  // namespace

std::string_view peer_answer::header(std::string_view name) const {
    for (const auto& [n, v] : headers)
        if (n == name) return v;
    return {};
}

base::result<io::endpoint> peer_endpoint(std::string_view url) {
    constexpr std::string_view scheme = "http://";
    if (url.substr(0, scheme.size()) != scheme)
        return base::fail(base::errc::invalid_argument,
                          "a node's endpoint is http://HOST:PORT, not " + std::string(url));
    std::string_view rest = url.substr(scheme.size());
    if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
    return io::parse_endpoint(std::string(rest));
}

peer_link::peer_link(io::endpoint where, const peer_options& options)
    : _where(std::move(where)),
      _options(options),
      _host(_where.host.find(':') != std::string::npos
                ? "[" + _where.host + "]:" + std::to_string(_where.port)
                : _where.host + ":" + std::to_string(_where.port)),
      _connection(options.transport ? options.transport(_where)
                                    : std::make_unique<tcp_transport>(client::connection_options{
                                          _where, options.connect_timeout_ms})) {}

void peer_link::close() {
    _connection->close();
    _close_after_body = false;
    _buffer.clear();
    _body_left = 0;
    _between_messages = true;
}

std::string peer_link::format_head(std::string_view method, const std::string& path,
                                   const std::string& query, const header_list& headers,
                                   std::string_view framing) const {
    const std::string amz_date =
        base::format_amz_date(static_cast<std::time_t>(base::unix_now_ms() / 1000));
    std::vector<auth::header_view> signed_headers = {
        {"host", _host},
        {"x-amz-content-sha256", auth::unsigned_payload_value},
        {"x-amz-date", amz_date},
    };
    for (const auto& [name, value] : headers) signed_headers.push_back({name, value});
    auth::request_view view{method, path, query, signed_headers};
    const std::string authorization = auth::sign_authorization(
        view, _options.credentials, _options.region, amz_date, auth::unsigned_payload_value);
    std::string head;
    head.reserve(512 + path.size() + query.size());
    head.append(method).append(" ").append(path);
    if (!query.empty()) head.append("?").append(query);
    head.append(" HTTP/1.1\r\n");
    for (const auto& h : signed_headers)
        head.append(h.name).append(": ").append(h.value).append("\r\n");
    head.append(framing);
    head.append("Authorization: ").append(authorization).append("\r\n\r\n");
    return head;
}

// Opens the connection when it is closed, or reopens one idle for long (the peer may have dropped
// it); `fresh` says whether the request goes on a new connection.
io::task<base::result<void>> peer_link::open_for(bool& fresh) {
    const std::int64_t now_ns = base::monotonic_now_ns();
    if (_connection->is_open() && now_ns - _last_used_ns > _options.idle_reopen_ms * 1'000'000)
        close();
    fresh = !_connection->is_open();
    if (fresh) {
        close();
        _connection->set_io_timeout_ms(_options.connect_timeout_ms);
        FJORD_CO_TRY(co_await _connection->connect());
    }
    _connection->set_io_timeout_ms(_options.io_timeout_ms);
    _last_used_ns = now_ns;
    _between_messages = false;
    co_return base::result<void>{};
}

io::task<base::result<peer_answer>> peer_link::call(std::string_view method, std::string path,
                                                    std::string query, header_list headers,
                                                    std::string_view body) {
    const std::string framing = "Content-Length: " + std::to_string(body.size()) + "\r\n";
    const std::string head = format_head(method, path, query, headers, framing);
    for (int round = 0; round < 2; ++round) {
        bool fresh = false;
        FJORD_CO_TRY(co_await open_for(fresh));
        iovec parts[2] = {{const_cast<char*>(head.data()), head.size()},
                          {const_cast<char*>(body.data()), body.size()}};
        auto sent = co_await _connection->send_all(std::span(parts, body.empty() ? 1 : 2));
        if (sent) {
            auto answer = co_await read_answer(true);
            // A reused connection the peer closed while idle fails before any answer: once more
            // (the calls are idempotent).
            if (answer || fresh) co_return answer;
        } else if (fresh) {
            close();
            co_return sent.as_failure();
        }
        close();
    }
    co_return base::fail(base::errc::closed, "the peer closed two connections in a row");
}

io::task<base::result<void>> peer_link::begin_upload(std::string_view method, std::string path,
                                                     std::string query, header_list headers) {
    const std::string head =
        format_head(method, path, query, headers, "Transfer-Encoding: chunked\r\n");
    bool fresh = false;
    FJORD_CO_TRY(co_await open_for(fresh));
    iovec part{const_cast<char*>(head.data()), head.size()};
    auto sent = co_await _connection->send_all(std::span(&part, 1));
    if (!sent && !fresh) {  // a stale keep-alive connection: the body has not started, so retry
        close();
        FJORD_CO_TRY(co_await open_for(fresh));
        sent = co_await _connection->send_all(std::span(&part, 1));
    }
    if (!sent) close();
    co_return sent;
}

io::task<base::result<void>> peer_link::send_chunk(std::span<iovec> parts) {
    std::size_t total = 0;
    for (const auto& p : parts) total += p.iov_len;
    if (total == 0) co_return base::result<void>{};
    char open[24];
    const int open_len = std::snprintf(open, sizeof open, "%zx\r\n", total);
    static const char crlf[] = "\r\n";
    std::vector<iovec> all;
    all.reserve(parts.size() + 2);
    all.push_back({open, static_cast<std::size_t>(open_len)});
    for (const auto& p : parts)
        if (p.iov_len > 0) all.push_back(p);
    all.push_back({const_cast<char*>(crlf), 2});
    auto sent = co_await _connection->send_all(std::span(all.data(), all.size()));
    if (!sent) close();
    co_return sent;
}

io::task<base::result<peer_answer>> peer_link::finish(std::string_view last_bytes) {
    if (!last_bytes.empty()) {
        iovec part{const_cast<char*>(last_bytes.data()), last_bytes.size()};
        FJORD_CO_TRY(co_await send_chunk(std::span(&part, 1)));
    }
    static const char last_chunk[] = "0\r\n\r\n";
    iovec end{const_cast<char*>(last_chunk), 5};
    auto sent = co_await _connection->send_all(std::span(&end, 1));
    if (!sent) {
        close();
        co_return sent.as_failure();
    }
    co_return co_await read_answer(true);
}

io::task<base::result<peer_answer>> peer_link::begin_download(std::string path, std::string query,
                                                              header_list headers) {
    const std::string head = format_head("GET", path, query, headers, "");
    for (int round = 0; round < 2; ++round) {
        bool fresh = false;
        FJORD_CO_TRY(co_await open_for(fresh));
        iovec part{const_cast<char*>(head.data()), head.size()};
        auto sent = co_await _connection->send_all(std::span(&part, 1));
        if (sent) {
            auto answer = co_await read_answer(false);
            if (answer || fresh) co_return answer;
        } else if (fresh) {
            close();
            co_return sent.as_failure();
        }
        close();
    }
    co_return base::fail(base::errc::closed, "the peer closed two connections in a row");
}

// Reads the answer's head; the body too unless it is a 2xx answer to a download (keep_body false).
io::task<base::result<peer_answer>> peer_link::read_answer(bool keep_body) {
    client::response_head head;
    std::size_t head_bytes = 0;
    _buffer.clear();
    for (;;) {
        auto parsed = client::parse_response_head(_buffer, max_head_bytes, head);
        if (!parsed) {
            close();
            co_return parsed.as_failure();
        }
        if (*parsed > 0 && head.status >= 200) {
            head_bytes = *parsed;
            break;
        }
        if (*parsed > 0) {  // 1xx: skip it
            _buffer.erase(0, *parsed);
            continue;
        }
        const std::size_t old_size = _buffer.size();
        _buffer.resize(old_size + receive_step_bytes);
        auto got = co_await _connection->receive_some(
            reinterpret_cast<std::byte*>(_buffer.data() + old_size), receive_step_bytes);
        _buffer.resize(old_size + (got ? *got : 0));
        if (!got) {
            close();
            co_return got.as_failure();
        }
    }
    peer_answer answer;
    answer.status = head.status;
    for (const auto& h : head.headers)
        if (is_fjord_header(h.name))
            answer.headers.emplace_back(base::to_lower(h.name), std::string(h.value));
    const bool chunked = head.chunked, keep_alive = head.keep_alive;
    const std::optional<std::uint64_t> length = head.content_length;
    _buffer.erase(0, head_bytes);  // `head` points into the buffer: not used from here on
    if (chunked || !length) {
        close();
        co_return base::fail(base::errc::bad_request,
                             "a peer's answer without Content-Length (status " +
                                 std::to_string(answer.status) + ")");
    }
    answer.content_length = *length;
    _close_after_body = !keep_alive;
    if (answer.ok() && !keep_body) {
        _body_left = *length;
        if (_body_left == 0) {
            _between_messages = true;
            if (_close_after_body) close();
        }
        co_return answer;
    }
    FJORD_CO_TRY(co_await read_small_body(answer, *length));
    _between_messages = true;
    if (!keep_alive) close();
    co_return answer;
}

io::task<base::result<void>> peer_link::read_small_body(peer_answer& answer, std::uint64_t length) {
    if (length > _options.max_answer_bytes) {
        close();
        co_return base::fail(base::errc::entity_too_large, "a peer's answer is too long");
    }
    answer.body.resize(length);
    _body_left = length;
    auto read = co_await read_exact(reinterpret_cast<std::byte*>(answer.body.data()), length);
    if (!read) co_return read.as_failure();
    co_return base::result<void>{};
}

io::task<base::result<void>> peer_link::read_exact(std::byte* dst, std::size_t len) {
    if (len > _body_left) {
        close();
        co_return base::fail(base::errc::invalid_argument, "read past the end of a peer's answer");
    }
    const std::size_t buffered = std::min(len, _buffer.size());
    std::memcpy(dst, _buffer.data(), buffered);
    _buffer.erase(0, buffered);
    if (buffered < len) {
        auto got = co_await _connection->receive_exact(dst + buffered, len - buffered);
        if (!got) {
            close();
            co_return got;
        }
    }
    _body_left -= len;
    if (_body_left == 0) {
        if (!_buffer.empty()) {  // bytes after the answer: the peer never pipelines
            close();
            co_return base::fail(base::errc::bad_request, "bytes after a peer's answer");
        }
        _between_messages = true;
        _last_used_ns = base::monotonic_now_ns();
        if (_close_after_body) close();  // the peer said Connection: close
    }
    co_return base::result<void>{};
}

peer_pool::peer_pool(io::endpoint where, const peer_options& options)
    : _where(std::move(where)),
      _options(options),
      _slots(std::max<std::size_t>(1, options.max_links)) {}

peer_pool::~peer_pool() = default;

io::task<peer_pool::lease> peer_pool::acquire() {
    co_await _slots.acquire();
    if (!_idle.empty()) {
        peer_link* link = _idle.back();
        _idle.pop_back();
        co_return lease(this, link);
    }
    _links.push_back(std::make_unique<peer_link>(_where, _options));
    co_return lease(this, _links.back().get());
}

void peer_pool::release(peer_link* link) {
    if (!link->reusable()) link->close();
    _idle.push_back(link);
    _slots.release();
}

}  // namespace fjord::cluster
