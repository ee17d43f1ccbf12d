#pragma once

// Simulated time and connections for the deterministic simulations (tests/sim).
//
// sim_clock replaces the thread's clock (base::set_thread_clock), so deadlines, rate floors, request
// dates and signatures all see simulated time, which moves only when the network steps.
//
// sim_connection is one TCP connection: a bounded byte queue each way (so a client that reads slowly
// holds up the server's sends, as a full socket buffer does) and the server's pending receive and send.
// The server side is an io::simulated_stream that http::serve_connection drives like a socket; the client
// side is plain calls from the simulation's client coroutines, which wait by yielding. Nothing moves
// between the two until sim_network::step(), which completes pending operations in an order drawn from
// the seed, sometimes a few bytes at a time, expires their timeouts, and advances the clock.
//
// Single-threaded: everything runs on the simulation's thread (io::reactor_group::run_simulated); a
// connection's server side may live on any of its cores.

#include <cstdint>
#include <memory>
#include <optional>
#include "base/seeded_random.h"
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "io/reactor.h"
#include "io/stream.h"

namespace fjord::sim {

class sim_clock final : public base::clock_source {
public:
    explicit sim_clock(std::int64_t unix_start_ms) : _unix_start_ms(unix_start_ms) {}
    std::int64_t unix_ms() override { return _unix_start_ms + _now_ns / 1'000'000; }
    std::int64_t monotonic_ns() override { return _now_ns; }
    std::int64_t now_ms() const { return _now_ns / 1'000'000; }
    void advance_ns(std::int64_t ns) { _now_ns += ns; }
    // The wall clock stepped (back, when negative), as NTP steps it; monotonic time goes on.
    void step_unix_ms(std::int64_t ms) { _unix_start_ms += ms; }

private:
    std::int64_t _unix_start_ms;
    std::int64_t _now_ns = 1'000'000'000;
};

class sim_network;

class sim_connection final : public io::simulated_stream {
public:
    sim_connection(sim_network& net, std::size_t capacity_bytes, std::string peer)
        : _net(net), _capacity(capacity_bytes), _peer(std::move(peer)) {}

    // The server's side.
    void start_receive(void* buf, std::size_t len, std::int64_t timeout_ms,
                       io::completion* c) override;
    void start_send(const void* buf, std::size_t len, std::int64_t timeout_ms,
                    io::completion* c) override;
    void cancel(io::completion* c) override;
    void shutdown_write() override { _server_write_shut = true; }
    void close() override;
    std::string peer_address() const override { return _peer; }

    // The client's side. client_write queues what fits and returns how much that was.
    std::size_t client_write(std::string_view bytes);
    // Takes up to `max` of the bytes the server has sent.
    std::string client_read(std::size_t max);
    // The server will send nothing more (it shut down its side or closed) and every byte was read.
    bool at_end() const { return (_server_write_shut || _server_closed) && _to_client.empty(); }
    // An orderly close (FIN): the server reads what is queued, then the end of the stream.
    void client_close() { _client_closed = true; }
    // The client vanishes (RST): the server's operations fail from now on.
    void client_vanish() { _client_gone = true; }
    bool server_closed() const { return _server_closed; }

private:
    friend class sim_network;
    struct pending {
        std::byte* buf;
        std::size_t len;
        std::int64_t deadline_ms;  // -1: none
        io::completion* c;
        io::reactor* owner;  // the core that started it, where its waiter resumes
    };
    void finish(std::optional<pending>& op, std::int32_t result);
    void step(base::seeded_random& rng, std::int64_t now_ms);
    std::size_t piece(base::seeded_random& rng, std::size_t n) const;

    sim_network& _net;
    std::size_t _capacity;
    std::string _peer;
    std::string _to_server, _to_client;
    std::optional<pending> _receive, _send;
    bool _client_closed = false, _client_gone = false;
    bool _server_write_shut = false, _server_closed = false;
};

class sim_network {
public:
    sim_network(std::uint64_t seed, sim_clock& clock)
        : _rng(seed ^ 0x5DEECE66DULL), _clock(clock) {}
    // A new connection whose queues hold `capacity_bytes` each way.
    std::shared_ptr<sim_connection> connect(std::size_t capacity_bytes);
    // Moves bytes of some connections, expires timeouts, advances the clock by up to `max_advance_ns`.
    void step(std::int64_t max_advance_ns = 2'000'000);
    std::int64_t now_ms() const { return _clock.now_ms(); }
    std::size_t open_connections() const { return _connections.size(); }

private:
    base::seeded_random _rng;
    sim_clock& _clock;
    std::uint64_t _next_port = 40000;
    std::vector<std::shared_ptr<sim_connection>> _connections;
};

}  // namespace fjord::sim
