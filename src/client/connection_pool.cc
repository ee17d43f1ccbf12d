#include "client/connection_pool.h"

#include "base/clock.h"
#include "io/reactor.h"

namespace fjord::client {

namespace {
constexpr std::size_t max_waiters = 1 << 20;  // a bound far above any fan-out a caller configures
}

connection_pool::connection_pool(client_options client, pool_options options)
    : _client_options(std::move(client)), _options(options) {
    FJORD_ASSERT(_options.max_connections >= 1);
}

connection_pool::~connection_pool() {
    FJORD_ASSERT(_leased == 0 && _waiters.empty(),
                 "connection pool destroyed with leases outstanding");
}

s3_client* connection_pool::take_idle() {
    idle_client entry = _idle.back();
    _idle.pop_back();
    std::int64_t idle_ms = (base::monotonic_now_ns() - entry.since_ns) / 1'000'000;
    if (idle_ms > _options.idle_timeout_ms) entry.client->close_connection();
    if (entry.client->connection_open()) ++_reused;
    return entry.client;
}

io::task<connection_pool::lease> connection_pool::acquire() {
    s3_client* client = nullptr;
    if (!_idle.empty()) {
        client = take_idle();
    } else if (_clients.size() < _options.max_connections) {
        _clients.push_back(std::make_unique<s3_client>(_client_options));
        client = _clients.back().get();
    } else {
        FJORD_ASSERT(_waiters.size() < max_waiters, "too many coroutines waiting for a connection");
        client = co_await wait_for_client{this, {}};
        if (client->connection_open()) ++_reused;
    }
    ++_leased;
    co_return lease(this, client);
}

void connection_pool::release(s3_client* client) {
    FJORD_ASSERT(_leased > 0);
    --_leased;
    if (!_waiters.empty()) {
        waiter* next = _waiters.front();
        _waiters.pop_front();
        next->client = client;  // straight to the waiter, whose acquire() counts the lease again
        io::reactor::current().schedule(next->handle);
        return;
    }
    _idle.push_back(idle_client{client, base::monotonic_now_ns()});
}

}  // namespace fjord::client
