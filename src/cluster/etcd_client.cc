#include "cluster/etcd_client.h"

#include <algorithm>

#include "base/clock.h"
#include "base/encoding.h"
#include "client/response.h"
#include "http/chunked.h"

namespace fjord::cluster {

namespace {

constexpr std::size_t max_head_bytes = 16 * 1024;
constexpr std::size_t receive_step_bytes = 16 * 1024;

std::int64_t now_ms() { return base::monotonic_now_ns() / 1'000'000; }

}  // namespace

base::result<io::endpoint> parse_etcd_url(std::string_view url) {
    constexpr std::string_view scheme = "http://";
    if (url.substr(0, scheme.size()) != scheme)
        return base::fail(base::errc::invalid_argument,
                          "an etcd endpoint is http://HOST:PORT, not " + std::string(url));
    std::string_view rest = url.substr(scheme.size());
    if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
    return io::parse_endpoint(std::string(rest));
}

etcd_client::etcd_client(etcd_options options)
    : _options(std::move(options)),
      _connection(client::connection_options{_options.where, _options.call_timeout_ms}) {}

io::task<base::result<std::string>> etcd_client::call(std::string_view path, std::string body) {
    co_await _calls.acquire();
    io::semaphore::permit held(_calls);
    const std::int64_t deadline_ms = now_ms() + _options.call_timeout_ms;
    auto answer = co_await exchange(path, body, deadline_ms);
    if (!answer) {
        _connection.close();
        _buffer.clear();
        co_return base::fail(answer.err().code,
                             "etcd " + std::string(path) + " at " + _options.where.host + ":" +
                                 std::to_string(_options.where.port) + ": " + answer.err().message);
    }
    co_return answer;
}

io::task<base::result<std::string>> etcd_client::exchange(std::string_view path,
                                                          const std::string& body,
                                                          std::int64_t deadline_ms) {
    if (!_connection.is_open()) {
        _buffer.clear();
        FJORD_CO_TRY(co_await _connection.connect());
    }
    FJORD_CO_TRY(co_await send_request(path, body, deadline_ms));
    co_return co_await read_answer(deadline_ms);
}

io::task<base::result<void>> etcd_client::send_request(std::string_view path,
                                                       const std::string& body,
                                                       std::int64_t deadline_ms) {
    std::string head =
        "POST " + std::string(path) + " HTTP/1.1\r\nHost: " + _options.where.host + ":" +
        std::to_string(_options.where.port) +
        "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\n\r\n";
    iovec parts[2] = {{head.data(), head.size()}, {const_cast<char*>(body.data()), body.size()}};
    std::int64_t left_ms = deadline_ms - now_ms();
    if (left_ms <= 0) co_return base::fail(base::errc::timed_out, "deadline passed");
    _connection.set_io_timeout_ms(left_ms);
    co_return co_await _connection.send_all(parts);
}

io::task<base::result<void>> etcd_client::open_watch(std::string key, std::string range_end,
                                                     std::int64_t start_revision) {
    close_watch();
    const std::int64_t deadline_ms = now_ms() + _options.call_timeout_ms;
    auto opened = co_await _connection.connect();
    if (opened)
        opened = co_await send_request(
            "/v3/watch", watch_create_body(key, range_end, start_revision), deadline_ms);
    if (opened) opened = co_await watch_head(deadline_ms);
    if (!opened) {
        close_watch();
        co_return base::fail(opened.err().code, "etcd /v3/watch at " + _options.where.host + ":" +
                                                    std::to_string(_options.where.port) + ": " +
                                                    opened.err().message);
    }
    co_return base::result<void>{};
}

// The watch answer's head: 200 and a chunked body, whose messages follow as they happen.
io::task<base::result<void>> etcd_client::watch_head(std::int64_t deadline_ms) {
    client::response_head head;
    std::size_t head_bytes = 0;
    while (head_bytes == 0) {
        auto parsed = client::parse_response_head(_buffer, max_head_bytes, head);
        if (!parsed) co_return parsed.as_failure();
        head_bytes = *parsed;
        if (head_bytes == 0) FJORD_CO_TRY(co_await receive_more(deadline_ms));
    }
    if (head.status != 200)
        co_return base::fail(base::errc::service_unavailable,
                             "the watch was answered " + std::to_string(head.status));
    if (!head.chunked) co_return base::fail(base::errc::bad_request, "a watch answer not chunked");
    _buffer.erase(0, head_bytes);
    _watch_body.emplace(http::chunked_decoder::format::http);
    co_return base::result<void>{};
}

io::task<base::result<watch_message>> etcd_client::next_watch_message(std::int64_t timeout_ms) {
    if (!_watch_body) co_return base::fail(base::errc::closed, "no watch open");
    const std::int64_t deadline_ms = now_ms() + timeout_ms;
    while (true) {
        if (const std::size_t end = _watch_text.find('\n'); end != std::string::npos) {
            std::string line = _watch_text.substr(0, end);
            _watch_text.erase(0, end + 1);
            if (line.find_first_not_of(" \r\t") == std::string::npos) continue;
            auto message = parse_watch_message(line);
            if (!message) close_watch();
            co_return message;
        }
        base::result<void> more{};
        if (_watch_text.size() > _options.max_response_bytes) {
            more = base::fail(base::errc::entity_too_large, "a watch message is too long");
        } else if (!_buffer.empty()) {
            const std::size_t old_size = _watch_text.size();
            _watch_text.resize(old_size + _buffer.size());
            auto step = _watch_body->decode(
                std::as_bytes(std::span(_buffer.data(), _buffer.size())),
                reinterpret_cast<std::byte*>(_watch_text.data() + old_size), _buffer.size());
            _watch_text.resize(old_size + (step ? step->produced : 0));
            if (!step)
                more = step.as_failure();
            else if (step->consumed > 0) {
                _buffer.erase(0, step->consumed);
                continue;
            }
        }
        if (more && _watch_body->finished())
            more = base::fail(base::errc::closed, "etcd ended the watch's stream");
        if (more) more = co_await receive_more(deadline_ms);
        if (!more) {
            close_watch();
            co_return more.as_failure();
        }
    }
}

void etcd_client::close_watch() {
    _connection.close();
    _buffer.clear();
    _watch_body.reset();
    _watch_text.clear();
}

io::task<base::result<void>> etcd_client::receive_more(std::int64_t deadline_ms) {
    std::int64_t left_ms = deadline_ms - now_ms();
    if (left_ms <= 0) co_return base::fail(base::errc::timed_out, "no answer before the deadline");
    if (_buffer.size() > _options.max_response_bytes + max_head_bytes)
        co_return base::fail(base::errc::entity_too_large, "the answer is too long");
    _connection.set_io_timeout_ms(left_ms);
    std::size_t old_size = _buffer.size();
    _buffer.resize(old_size + receive_step_bytes);
    auto got = co_await _connection.receive_some(
        reinterpret_cast<std::byte*>(_buffer.data() + old_size), receive_step_bytes);
    _buffer.resize(old_size + (got ? *got : 0));
    if (!got) co_return got.as_failure();
    co_return base::result<void>{};
}

io::task<base::result<std::string>> etcd_client::read_answer(std::int64_t deadline_ms) {
    client::response_head head;
    std::size_t head_bytes = 0;
    while (true) {
        auto parsed = client::parse_response_head(_buffer, max_head_bytes, head);
        if (!parsed) co_return parsed.as_failure();
        if (*parsed > 0) {
            head_bytes = *parsed;
            break;
        }
        FJORD_CO_TRY(co_await receive_more(deadline_ms));
    }
    const int status = head.status;
    const bool keep_alive = head.keep_alive, chunked = head.chunked;
    const std::optional<std::uint64_t> length = head.content_length;
    _buffer.erase(0, head_bytes);  // `head` points into the buffer: not used from here on
    std::string body;
    if (chunked) {
        http::chunked_decoder decoder(http::chunked_decoder::format::http);
        while (!decoder.finished()) {
            std::size_t old_size = body.size();
            body.resize(old_size + std::max(_buffer.size(), std::size_t{1}));
            auto step = decoder.decode(std::as_bytes(std::span(_buffer.data(), _buffer.size())),
                                       reinterpret_cast<std::byte*>(body.data() + old_size),
                                       body.size() - old_size);
            if (!step) co_return step.as_failure();
            body.resize(old_size + step->produced);
            _buffer.erase(0, step->consumed);
            if (body.size() > _options.max_response_bytes)
                co_return base::fail(base::errc::entity_too_large, "the answer is too long");
            if (!decoder.finished() && step->consumed == 0)
                FJORD_CO_TRY(co_await receive_more(deadline_ms));
        }
    } else if (length) {
        if (*length > _options.max_response_bytes)
            co_return base::fail(base::errc::entity_too_large, "the answer is too long");
        while (_buffer.size() < *length) FJORD_CO_TRY(co_await receive_more(deadline_ms));
        body = _buffer.substr(0, *length);
        _buffer.erase(0, *length);
    } else {
        co_return base::fail(base::errc::bad_request, "an answer without a length");
    }
    if (!keep_alive) _connection.close();
    if (status != 200) co_return base::fail(gateway_error(status, body));
    co_return body;
}

io::task<base::result<range_result>> etcd_client::range(std::string key, std::string range_end,
                                                        std::int64_t limit, std::int64_t revision) {
    auto body = co_await call("/v3/kv/range", range_body(key, range_end, limit, revision));
    if (!body) co_return body.as_failure();
    co_return parse_range(*body);
}

io::task<base::result<range_result>> etcd_client::range_prefix(std::string prefix) {
    const std::string end = prefix_end(prefix);
    range_result all;
    std::string from = std::move(prefix);
    for (std::size_t pages = 0; pages < max_prefix_pages;) {
        // The page size is remembered between pages and calls: halved when an answer is too large
        // (large values), doubled back after each page that fits, so a map with large records is not
        // asked for whole again on every refresh
        auto page = co_await range(from, end, _page_keys, all.revision);
        if (!page && page.code() == base::errc::entity_too_large && _page_keys > 1) {
            _page_keys = std::max<std::int64_t>(1, _page_keys / 2);
            continue;
        }
        if (!page) co_return page.as_failure();
        ++pages;
        _page_keys = std::min(prefix_page_keys, _page_keys * 2);
        if (all.revision == 0) all.revision = page->revision;
        const bool more = page->more && !page->kvs.empty();
        if (more) from = page->kvs.back().key + std::string(1, '\0');  // the next key after it
        for (auto& kv : page->kvs) all.kvs.push_back(std::move(kv));
        all.count = static_cast<std::int64_t>(all.kvs.size());
        if (!more) co_return all;
    }
    co_return base::fail(base::errc::entity_too_large,
                         "more than " + std::to_string(max_prefix_pages) + " pages under a prefix");
}

io::task<base::result<std::int64_t>> etcd_client::put(std::string key, std::string value,
                                                      std::int64_t lease) {
    auto body = co_await call("/v3/kv/put", put_body(key, value, lease));
    if (!body) co_return body.as_failure();
    co_return parse_revision(*body);
}

io::task<base::result<std::int64_t>> etcd_client::remove(std::string key) {
    auto body = co_await call("/v3/kv/deleterange", delete_range_body(key, {}));
    if (!body) co_return body.as_failure();
    co_return parse_deleted(*body);
}

io::task<base::result<txn_result>> etcd_client::txn(txn_request request) {
    auto body = co_await call("/v3/kv/txn", txn_body(request));
    if (!body) co_return body.as_failure();
    co_return parse_txn(*body);
}

io::task<base::result<lease_grant>> etcd_client::grant_lease(std::int64_t ttl_s) {
    auto body = co_await call("/v3/lease/grant", lease_grant_body(ttl_s));
    if (!body) co_return body.as_failure();
    co_return parse_lease_grant(*body);
}

io::task<base::result<std::int64_t>> etcd_client::keep_alive(std::int64_t lease) {
    auto body = co_await call("/v3/lease/keepalive", lease_id_body(lease));
    if (!body) co_return body.as_failure();
    co_return parse_keepalive(*body);
}

io::task<base::result<void>> etcd_client::revoke_lease(std::int64_t lease) {
    auto body = co_await call("/v3/lease/revoke", lease_id_body(lease));
    if (!body) co_return body.as_failure();
    FJORD_CO_TRY(parse_revision(*body));
    co_return base::result<void>{};
}

}  // namespace fjord::cluster
