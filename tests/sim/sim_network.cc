#include "sim_network.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/assert.h"

namespace fjord::sim {

void sim_connection::start_receive(void* buf, std::size_t len, std::int64_t timeout_ms,
                                   io::completion* c) {
    FJORD_ASSERT(!_receive && !_server_closed, "one receive at a time, before close");
    std::int64_t deadline = timeout_ms < 0 ? -1 : _net.now_ms() + timeout_ms;
    _receive = pending{static_cast<std::byte*>(buf), len, deadline, c, &io::reactor::current()};
}

void sim_connection::start_send(const void* buf, std::size_t len, std::int64_t timeout_ms,
                                io::completion* c) {
    FJORD_ASSERT(!_send && !_server_closed && !_server_write_shut,
                 "one send at a time, before close");
    std::int64_t deadline = timeout_ms < 0 ? -1 : _net.now_ms() + timeout_ms;
    _send = pending{static_cast<std::byte*>(const_cast<void*>(buf)), len, deadline, c,
                    &io::reactor::current()};
}

void sim_connection::finish(std::optional<pending>& op, std::int32_t result) {
    io::completion* c = op->c;
    io::reactor* owner = op->owner;
    op.reset();
    c->result = result;
    c->done = true;
    if (c->waiter) owner->schedule(c->waiter);
}

void sim_connection::cancel(io::completion* c) {
    if (_receive && _receive->c == c) finish(_receive, -ECANCELED);
    if (_send && _send->c == c) finish(_send, -ECANCELED);
}

void sim_connection::close() {
    FJORD_ASSERT(!_receive && !_send, "closed with an operation pending");
    _server_closed = true;
}

std::size_t sim_connection::client_write(std::string_view bytes) {
    if (_client_closed || _client_gone) return 0;
    std::size_t room = _capacity > _to_server.size() ? _capacity - _to_server.size() : 0;
    std::size_t n = std::min(room, bytes.size());
    // A server that closed its receiving side drops what arrives (the kernel would answer with RST).
    if (!_server_closed) _to_server.append(bytes.substr(0, n));
    return n;
}

std::string sim_connection::client_read(std::size_t max) {
    std::size_t n = std::min(max, _to_client.size());
    std::string out = _to_client.substr(0, n);
    _to_client.erase(0, n);
    return out;
}

// How many of `n` bytes move in one step: usually all, sometimes a few (a segmented stream).
std::size_t sim_connection::piece(base::seeded_random& rng, std::size_t n) const {
    if (n <= 1 || rng() % 5 != 0) return n;
    return 1 + rng() % std::min<std::size_t>(n, 17);
}

void sim_connection::step(base::seeded_random& rng, std::int64_t now_ms) {
    if (_receive && rng() % 4 != 0) {
        if (_client_gone)
            finish(_receive, -ECONNRESET);
        else if (!_to_server.empty()) {
            std::size_t n = piece(rng, std::min(_receive->len, _to_server.size()));
            std::memcpy(_receive->buf, _to_server.data(), n);
            _to_server.erase(0, n);
            finish(_receive, static_cast<std::int32_t>(n));
        } else if (_client_closed)
            finish(_receive, 0);
    }
    if (_receive && _receive->deadline_ms >= 0 && now_ms >= _receive->deadline_ms)
        finish(_receive, -ECANCELED);
    if (_send && rng() % 4 != 0) {
        std::size_t room = _capacity > _to_client.size() ? _capacity - _to_client.size() : 0;
        if (_client_gone)
            finish(_send, -EPIPE);
        else if (room > 0) {
            std::size_t n = piece(rng, std::min(_send->len, room));
            _to_client.append(reinterpret_cast<const char*>(_send->buf), n);
            finish(_send, static_cast<std::int32_t>(n));
        }
    }
    if (_send && _send->deadline_ms >= 0 && now_ms >= _send->deadline_ms) finish(_send, -ECANCELED);
}

std::shared_ptr<sim_connection> sim_network::connect(std::size_t capacity_bytes) {
    auto c = std::make_shared<sim_connection>(*this, capacity_bytes,
                                              "10.0.0.1:" + std::to_string(_next_port++));
    _connections.push_back(c);
    return c;
}

void sim_network::step(std::int64_t max_advance_ns) {
    // Connections in an order drawn from the seed; a connection both sides are done with is dropped.
    _rng.shuffle(_connections.begin(), _connections.end());
    for (auto& c : _connections) c->step(_rng, _clock.now_ms());
    std::erase_if(_connections, [](const std::shared_ptr<sim_connection>& c) {
        return c->server_closed() && c.use_count() == 1;
    });
    if (max_advance_ns > 0)
        _clock.advance_ns(
            static_cast<std::int64_t>(_rng() % static_cast<std::uint64_t>(max_advance_ns)));
}

}  // namespace fjord::sim
