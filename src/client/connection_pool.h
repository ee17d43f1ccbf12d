#pragma once

// A bounded pool of keep-alive connections (each an s3_client) to one endpoint, owned by one core.
//
// acquire() hands out the most recently released idle client (its connection is the likeliest to be
// still open), opens a new one while fewer than max_connections exist, and otherwise suspends the
// caller until a lease comes back; waiters are served in arrival order. A client idle for longer than
// idle_timeout_ms has its connection closed when it is handed out again (it reconnects lazily), so a
// connection the server has dropped by then is not tried first.
//
// Lifecycle and threading: created, used and destroyed on one core; every lease must have been
// returned before the pool is destroyed. Not thread-safe.

#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "client/s3_client.h"
#include "io/pool_lease.h"
#include "io/task.h"

namespace fjord::client {

struct pool_options {
    std::size_t max_connections = 16;       // per pool, i.e. per endpoint and core
    std::int64_t idle_timeout_ms = 30'000;  // a connection idle this long is reopened before reuse
};

class connection_pool {
public:
    // Returns its client to the pool when reset or destroyed.
    using lease = io::pool_lease<connection_pool, s3_client>;

    connection_pool(client_options client, pool_options options);
    ~connection_pool();
    connection_pool(const connection_pool&) = delete;
    connection_pool& operator=(const connection_pool&) = delete;

    io::task<lease> acquire();

    std::size_t size() const { return _clients.size(); }  // clients created so far
    std::size_t idle() const { return _idle.size(); }
    std::uint64_t connections_reused() const {
        return _reused;
    }  // acquisitions of an open connection
    const client_options& client() const { return _client_options; }

private:
    friend lease;
    struct idle_client {
        s3_client* client;
        std::int64_t since_ns;
    };
    struct waiter {
        std::coroutine_handle<> handle;
        s3_client* client = nullptr;  // set by release() before the waiter is resumed
    };
    struct wait_for_client {
        connection_pool* pool;
        waiter slot;
        bool await_ready() const noexcept { return false; }
        void await_suspend(std::coroutine_handle<> h) {
            slot.handle = h;
            pool->_waiters.push_back(&slot);
        }
        s3_client* await_resume() const noexcept { return slot.client; }
    };
    void release(s3_client* client);
    s3_client* take_idle();

    client_options _client_options;
    pool_options _options;
    std::vector<std::unique_ptr<s3_client>> _clients;  // at most max_connections
    std::vector<idle_client> _idle;                    // LIFO
    std::deque<waiter*> _waiters;
    std::size_t _leased = 0;
    std::uint64_t _reused = 0;
};

}  // namespace fjord::client
