// Deterministic simulation of the server's whole request path.
//
// For each seed, the real HTTP connection code (http::serve_connection), the real S3 service and the
// engine (on store::sim_file_system) run together on one to three cores, interleaved on one thread in
// an order drawn from the seed (io::reactor_group::run_simulated), with their real cross-core messages,
// simulated connections spread over the cores and a simulated clock (sim_network.h). Clients send signed S3 requests over keep-alive connections, on a
// few keys they share: PUTs (by Content-Length or chunked, some with If-None-Match: *), GETs (whole and
// ranged), HEADs, DELETEs, listings, and multipart uploads whose completion races a part upload of the
// same upload, an abort, or a delete of the key. Some requests are pipelined behind another; some
// clients send or read a few bytes at a time; some vanish in the middle of a body. The file system
// injects its faults (EIO, ENOSPC, short I/O, bit flips, latency).
//
// Every answer is checked against a model of each key as a register:
//   - a read returns the bytes of a write that had started before the read ended and that no write
//     acknowledged before the read started had replaced (or "absent" on the same terms), byte for byte,
//     never a mix; a ranged read the same bytes of such a write;
//   - a write answered 2xx counts as done; one refused with a 4xx, or whose client vanished before the
//     body ended, never takes effect; one cut off or failed with a 5xx may have;
//   - without injected faults no request fails with a 5xx and no response is cut short.
// Every choice comes from the seed, so a failure replays exactly: `server_sim --seed N`.

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include "base/seeded_random.h"
#include <string>
#include <vector>

#include "auth/sigv4.h"
#include "base/clock.h"
#include "base/digest.h"
#include "base/encoding.h"
#include "base/log.h"
#include "base/metrics.h"
#include "http/connection.h"
#include "io/cross_core.h"
#include "io/ops.h"
#include "io/reactor.h"
#include "io/task.h"
#include "io/wait_group.h"
#include "s3/service.h"
#include "seed_runner.h"
#include "sim_network.h"
#include "store/engine.h"
#include "store/sim_file_system.h"

namespace fjord::sim {
namespace {

constexpr const char* bucket = "sim";
constexpr std::uint64_t never_ended = std::numeric_limits<std::uint64_t>::max();
const auth::credentials user{"simulation-key", "simulation-secret-key"};

struct run_options {
    std::uint64_t first_seed = 1;
    std::uint64_t seeds = 1;
    unsigned clients = 6;
    unsigned requests_per_client = 30;
    unsigned keys = 4;
    bool verbose = false;
};

// ---- the model: each key a register of writes ----

enum class outcome { done, maybe, never };

struct write_event {
    std::uint32_t value = 0;  // 0: absent (a delete, or before any write)
    std::uint64_t start = 0, end = never_ended;
    outcome result = outcome::maybe;
};

struct server_side;

struct simulation {
    simulation(std::uint64_t s, const run_options& o)
        : seed(s),
          options(o),
          rng(s * 0x9E3779B97F4A7C15ULL + 7),
          fs(s),
          clock(1'780'000'000'000 + static_cast<std::int64_t>(s % 1000) * 1000),
          net(s, clock) {
        // Every key starts absent, as if deleted and acknowledged before the run.
        for (unsigned i = 0; i < o.keys; ++i)
            keys["k" + std::to_string(i)] = {write_event{0, 0, 0, outcome::done}};
    }

    std::uint64_t seed;
    run_options options;
    base::seeded_random rng;
    store::sim_file_system fs;
    sim_clock clock;
    sim_network net;
    std::deque<std::string> values{std::string()};  // value id -> bytes; 0 is "absent"
    std::map<std::string, std::vector<write_event>> keys;
    std::uint64_t now = 1;  // logical time: every request start and end takes the next tick
    bool faults_on = false;
    bool clients_done = false;
    bool scratch_busy = false;
    server_side* server =
        nullptr;  // the server under test, while the seed runs  // one client at a time churns the scratch bucket
    std::string failure;
    std::uint64_t requests = 0, acknowledged = 0, failed = 0, reads_checked = 0, pipelined = 0,
                  vanished = 0, crashes = 0;

    std::uint64_t draw(std::uint64_t n) { return n == 0 ? 0 : rng() % n; }
    bool chance(double p) { return rng.unit() < p; }
    void violation(const std::string& what) {
        if (failure.empty()) failure = what;
    }
};

std::string make_bytes(simulation& sim, std::size_t size) {
    std::string bytes(size, '\0');
    std::uint64_t x = sim.rng();
    for (std::size_t i = 0; i < size; i += 8) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        std::memcpy(bytes.data() + i, &x, std::min<std::size_t>(8, size - i));
    }
    return bytes;
}

std::uint32_t new_value(simulation& sim) {
    static constexpr std::size_t sizes[] = {0, 1, 100, 4095, 4096, 4097, 65536, 131073, 300000};
    std::size_t size = sizes[sim.draw(std::size(sizes))];
    sim.values.push_back(make_bytes(sim, size));
    return static_cast<std::uint32_t>(sim.values.size() - 1);
}

std::size_t begin_write(simulation& sim, const std::string& key, std::uint32_t value) {
    auto& events = sim.keys[key];
    events.push_back(write_event{value, sim.now++, never_ended, outcome::maybe});
    return events.size() - 1;
}

// A write whose request got no answer at all may still commit at any later time: it keeps no end.
void end_write(simulation& sim, const std::string& key, std::size_t index, outcome result,
               bool answered = true) {
    write_event& w = sim.keys[key][index];
    w.end = answered ? sim.now++ : never_ended;
    w.result = result;
    if (result == outcome::done) ++sim.acknowledged;
    if (result != outcome::done) ++sim.failed;
}

// Whether a read over [start, end] may see write w: w began before the read ended, and no write
// acknowledged before the read began had started after w ended.
bool may_see(const std::vector<write_event>& events, const write_event& w, std::uint64_t start,
             std::uint64_t end) {
    if (w.result == outcome::never || w.start >= end) return false;
    for (const write_event& later : events)
        if (later.result == outcome::done && w.end != never_ended && later.start > w.end &&
            later.end < start)
            return false;
    return true;
}

// What a read found, as a test on one write's value (nullptr: the key absent).
using read_test = std::function<bool(const std::string* value)>;

// A read of `key` over [start, end] found what `fits` accepts from some visible write. With `after`,
// the read is known to have run after that write (acknowledged) committed: writes it replaced are not
// visible either.
void check_read(simulation& sim, const std::string& key, std::uint64_t start, std::uint64_t end,
                const read_test& fits, const std::string& what,
                const write_event* after = nullptr) {
    ++sim.reads_checked;
    const auto& events = sim.keys[key];
    for (const write_event& w : events) {
        if (!may_see(events, w, start, end)) continue;
        if (after && after->result == outcome::done && after->start > w.end) continue;
        if (fits(w.value == 0 ? nullptr : &sim.values[w.value])) return;
    }
    sim.violation(what + " of " + key + " found what no visible write holds");
}

read_test whole_body(const std::string& body) {
    return [&body](const std::string* v) { return v && *v == body; };
}

read_test absent() {
    return [](const std::string* v) { return v == nullptr; };
}

// A 206 for bytes=first-last: exactly the bytes of the range, clipped to the value's end.
read_test range_body(const std::string& body, std::uint64_t first, std::uint64_t last) {
    return [&body, first, last](const std::string* v) {
        if (!v || v->size() <= first) return false;
        std::uint64_t n = std::min<std::uint64_t>(last, v->size() - 1) - first + 1;
        return body.size() == n && v->compare(first, n, body) == 0;
    };
}

// ---- the HTTP client side ----

struct http_response {
    int status = 0;                              // 0: no complete head (the connection was lost)
    std::map<std::string, std::string> headers;  // names lower-cased
    std::string body;
    bool complete = false;  // the whole body arrived
    std::string header(const std::string& name) const {
        auto it = headers.find(name);
        return it == headers.end() ? "" : it->second;
    }
};

struct client_connection {
    std::shared_ptr<sim_connection> conn;
    bool slow = false;     // sends and reads a few bytes at a time
    std::string received;  // bytes read past the last response
};

std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

// A signed request: head (and body for Content-Length framing; chunked framing when `chunked`).
std::string build_request(const std::string& method, const std::string& path,
                          const std::string& query, std::vector<auth::header_view> extra,
                          const std::string& body, bool chunked) {
    std::string amz_date = base::format_amz_date(base::unix_now_ms() / 1000);
    std::string length = std::to_string(body.size());
    std::vector<auth::header_view> headers = {{"host", "sim.local"},
                                              {"x-amz-date", amz_date},
                                              {"x-amz-content-sha256", "UNSIGNED-PAYLOAD"}};
    for (const auto& h : extra) headers.push_back(h);
    auth::request_view view{method, path, query, headers};
    std::string authorization =
        auth::sign_authorization(view, user, "us-east-1", amz_date, "UNSIGNED-PAYLOAD");
    std::string out = method + " " + path + (query.empty() ? "" : "?" + query) + " HTTP/1.1\r\n";
    for (const auto& h : headers) out.append(h.name).append(": ").append(h.value).append("\r\n");
    out += "authorization: " + authorization + "\r\n";
    if (!chunked) return out + "content-length: " + length + "\r\n\r\n" + body;
    out += "transfer-encoding: chunked\r\n\r\n";
    for (std::size_t at = 0; at < body.size();) {
        std::size_t n = std::min<std::size_t>(body.size() - at, 1 + (at * 7919 + 13) % 70000);
        char size_line[32];
        std::snprintf(size_line, sizeof size_line, "%zx\r\n", n);
        out.append(size_line).append(body, at, n).append("\r\n");
        at += n;
    }
    return out + "0\r\n\r\n";
}

// Sends `bytes`; with `vanish_after`, vanishes once that many are sent. False when it gave up.
io::task<bool> send_request(simulation& sim, client_connection& c, std::string bytes,
                            std::optional<std::size_t> vanish_after = std::nullopt) {
    std::size_t sent = 0;
    std::int64_t give_up_ms = sim.net.now_ms() + 400'000;
    while (sent < bytes.size()) {
        if (vanish_after && sent >= *vanish_after) {
            c.conn->client_vanish();
            ++sim.vanished;
            co_return false;
        }
        // A server that closed may have answered first (an early error): the caller reads it.
        if (c.conn->server_closed()) co_return true;
        if (sim.net.now_ms() > give_up_ms) co_return false;
        std::size_t want = bytes.size() - sent;
        if (c.slow) want = std::min<std::size_t>(want, 1 + sim.draw(64));
        if (vanish_after) want = std::min(want, *vanish_after - sent);
        sent += c.conn->client_write(std::string_view(bytes).substr(sent, want));
        // Reading while sending, as a pipelining client must: the server may be answering an earlier
        // request and cannot take more of this one until its answer is read.
        c.received += c.conn->client_read(c.slow ? 1 + sim.draw(100) : 1 << 20);
        co_await io::yield_now();
    }
    co_return true;
}

// Reads the next response; a HEAD's has no body.
io::task<http_response> read_response(simulation& sim, client_connection& c, bool head_request) {
    http_response r;
    std::int64_t give_up_ms = sim.net.now_ms() + 400'000;
    std::size_t head_end = std::string::npos;
    while ((head_end = c.received.find("\r\n\r\n")) == std::string::npos) {
        if (c.conn->at_end() || sim.net.now_ms() > give_up_ms) co_return r;
        c.received += c.conn->client_read(c.slow ? 1 + sim.draw(100) : 1 << 20);
        co_await io::yield_now();
    }
    std::string head = c.received.substr(0, head_end);
    c.received.erase(0, head_end + 4);
    r.status =
        head.size() >= 12 && head.compare(0, 5, "HTTP/") == 0 ? std::atoi(head.c_str() + 9) : 0;
    for (std::size_t at = head.find("\r\n"); at != std::string::npos;) {
        std::size_t next = head.find("\r\n", at + 2);
        std::string line = head.substr(at + 2, next == std::string::npos ? next : next - at - 2);
        std::size_t colon = line.find(':');
        if (colon != std::string::npos) {
            std::size_t v = line.find_first_not_of(' ', colon + 1);
            r.headers[lower(line.substr(0, colon))] = v == std::string::npos ? "" : line.substr(v);
        }
        at = next;
    }
    bool no_body = head_request || r.status == 204 || r.status == 304;
    std::string length_text = r.header("content-length");
    std::uint64_t length = no_body ? 0 : std::strtoull(length_text.c_str(), nullptr, 10);
    bool until_close = !no_body && length_text.empty();
    while (until_close || c.received.size() < length) {
        if (c.conn->at_end() || sim.net.now_ms() > give_up_ms) break;
        c.received += c.conn->client_read(c.slow ? 1 + sim.draw(4096) : 1 << 20);
        co_await io::yield_now();
    }
    std::size_t take =
        until_close ? c.received.size() : std::min<std::size_t>(length, c.received.size());
    r.body = c.received.substr(0, take);
    c.received.erase(0, take);
    r.complete = until_close || r.body.size() == length;
    if (lower(r.header("connection")) == "close") c.conn->client_close();
    co_return r;
}

// ---- the server side ----

struct server_side {
    unsigned cores = 1;
    s3::service* service = nullptr;
    http::server_limits limits;
    std::vector<http::connection_stats> stats;  // per core
    base::metrics* metrics = nullptr;
};

// A new connection, served on a core drawn from the seed (as the kernel spreads connections over the
// cores' SO_REUSEPORT listeners).
void connect(simulation& sim, client_connection& c) {
    if (c.conn) c.conn->client_close();
    c.slow = sim.chance(0.15);
    c.received.clear();
    c.conn = sim.net.connect(c.slow ? 4096 : 65536);
    server_side* server = sim.server;
    unsigned core = static_cast<unsigned>(sim.draw(server->cores));
    sim_connection* conn = c.conn.get();
    io::post_to(core, [conn, core, server] {
        return http::serve_connection(io::stream::simulated(conn), *server->service, server->limits,
                                      server->stats[core], server->metrics->for_core(core));
    });
}

// Whether the connection can carry another request.
bool usable(const client_connection& c) {
    return c.conn && !c.conn->server_closed() && !c.conn->at_end() && c.received.empty();
}

// One request and its response on `c` (reconnecting first if needed).
io::task<http_response> round_trip(simulation& sim, client_connection& c, std::string request,
                                   bool head_request) {
    if (!usable(c)) connect(sim, c);
    ++sim.requests;
    std::string line = sim.options.verbose ? request.substr(0, request.find(" HTTP/1.1")) : "";
    std::uint64_t began = sim.now;
    http_response r;
    if (co_await send_request(sim, c, std::move(request)))
        r = co_await read_response(sim, c, head_request);
    if (sim.options.verbose)
        std::printf("  [%llu-%llu] %s -> %d%s\n", static_cast<unsigned long long>(began),
                    static_cast<unsigned long long>(sim.now), line.c_str(), r.status,
                    r.complete ? "" : " (cut)");
    if (r.status == 0 || !r.complete) connect(sim, c);
    co_return r;
}

outcome outcome_of(const http_response& r) {
    if (r.status >= 200 && r.status < 300 && r.complete &&
        r.body.find("<Error>") == std::string::npos)
        return outcome::done;
    if (r.status >= 400 && r.status < 500) return outcome::never;
    return outcome::maybe;
}

std::string between(const std::string& text, const std::string& open, const std::string& close) {
    std::size_t a = text.find(open);
    if (a == std::string::npos) return "";
    a += open.size();
    std::size_t b = text.find(close, a);
    return b == std::string::npos ? "" : text.substr(a, b - a);
}

// Without injected faults and with the power on, a request gets a whole answer with one of the
// statuses it may have.
void expect(simulation& sim, const http_response& r, const std::string& what,
            std::initializer_list<int> allowed) {
    if (sim.faults_on || !sim.fs.powered()) return;
    if (r.status == 0) return sim.violation(what + ": no response");
    if (r.complete && std::find(allowed.begin(), allowed.end(), r.status) != allowed.end()) return;
    std::string detail = "status " + std::to_string(r.status);
    if (!r.complete)
        detail += ", body cut short after " + std::to_string(r.body.size()) + " of " +
                  r.header("content-length") + " bytes";
    if (r.status >= 300)
        detail += " (" + between(r.body, "<Code>", "</Code>") + ": " +
                  between(r.body, "<Message>", "</Message>") + ")";
    sim.violation(what + ": " + detail);
}

std::string key_path(const std::string& key) { return std::string("/") + bucket + "/" + key; }

std::string pick_key(simulation& sim) { return "k" + std::to_string(sim.draw(sim.options.keys)); }

io::task<void> put_object(simulation& sim, client_connection& c, std::string key) {
    std::uint32_t value = new_value(sim);
    const std::string& body = sim.values[value];
    bool conditional = sim.chance(0.15);
    std::vector<auth::header_view> extra;
    if (conditional) extra.push_back({"if-none-match", "*"});
    std::string request = build_request("PUT", key_path(key), "", extra, body, sim.chance(0.2));
    std::size_t event = begin_write(sim, key, value);
    if (body.size() > 10 && sim.chance(0.05)) {
        // The client vanishes in the middle of the body: the write must never take effect.
        if (!usable(c)) connect(sim, c);
        ++sim.requests;
        std::size_t head = request.size() - body.size();
        co_await send_request(sim, c, request, head + sim.draw(body.size() - 1));
        end_write(sim, key, event, outcome::never);
        connect(sim, c);
        co_return;
    }
    http_response r = co_await round_trip(sim, c, std::move(request), false);
    end_write(sim, key, event, outcome_of(r), r.status != 0);
    if (conditional)
        expect(sim, r, "PUT If-None-Match " + key, {200, 412});
    else
        expect(sim, r, "PUT " + key, {200});
}

io::task<void> get_object(simulation& sim, client_connection& c, std::string key) {
    bool ranged = sim.chance(0.3);
    std::uint64_t first = sim.draw(200000), last = first + sim.draw(150000);
    std::string range = "bytes=" + std::to_string(first) + "-" + std::to_string(last);
    std::vector<auth::header_view> extra;
    if (ranged) extra.push_back({"range", range});
    std::string request = build_request("GET", key_path(key), "", extra, "", false);
    std::uint64_t start = sim.now++;
    if (sim.chance(0.03)) {
        // A reader that vanishes part-way through the response.
        if (!usable(c)) connect(sim, c);
        if (co_await send_request(sim, c, request)) {
            for (unsigned i = 0; i < 1 + sim.draw(20); ++i) {
                c.conn->client_read(1 + sim.draw(8192));
                co_await io::yield_now();
            }
        }
        c.conn->client_vanish();
        ++sim.vanished;
        connect(sim, c);
        co_return;
    }
    http_response r = co_await round_trip(sim, c, std::move(request), false);
    std::uint64_t end = sim.now++;
    if (!r.complete) {
        expect(sim, r, "GET " + key, {});
        co_return;
    }
    if (r.status == 200) {
        check_read(sim, key, start, end, whole_body(r.body), "GET");
    } else if (r.status == 206 && ranged) {
        check_read(sim, key, start, end, range_body(r.body, first, last), "ranged GET");
    } else if (r.status == 404 && r.body.find("NoSuchKey") != std::string::npos) {
        check_read(sim, key, start, end, absent(), "GET");
    } else if (r.status == 416 && ranged) {
        auto too_short = [first](const std::string* v) { return v && v->size() <= first; };
        check_read(sim, key, start, end, too_short, "ranged GET answered 416");
    } else if (!(r.status == 503 && r.body.find("SlowDown") != std::string::npos)) {
        // (SlowDown: the key was replaced again and again while the read looked it up.)
        expect(sim, r, "GET " + key, {});
    }
}

io::task<void> delete_object(simulation& sim, client_connection& c, std::string key) {
    std::string request = build_request("DELETE", key_path(key), "", {}, "", false);
    std::size_t event = begin_write(sim, key, 0);
    http_response r = co_await round_trip(sim, c, std::move(request), false);
    end_write(sim, key, event, outcome_of(r), r.status != 0);
    expect(sim, r, "DELETE " + key, {204});
}

io::task<void> head_or_list(simulation& sim, client_connection& c, std::string key) {
    bool head = sim.chance(0.5);
    std::string request = head ? build_request("HEAD", key_path(key), "", {}, "", false)
                               : build_request("GET", std::string("/") + bucket,
                                               "list-type=2&prefix=k", {}, "", false);
    std::uint64_t start = sim.now++;
    http_response r = co_await round_trip(sim, c, std::move(request), head);
    std::uint64_t end = sim.now++;
    if (!head) {
        expect(sim, r, "LIST", {200});
        co_return;
    }
    expect(sim, r, "HEAD " + key, {200, 404});
    if (r.status == 404) check_read(sim, key, start, end, absent(), "HEAD");
    if (r.status != 200) co_return;
    std::uint64_t size = std::strtoull(r.header("content-length").c_str(), nullptr, 10);
    auto sized = [size](const std::string* v) { return v && v->size() == size; };
    check_read(sim, key, start, end, sized, "HEAD");
}

// The first of a pipelined pair: a PUT of a new value, or a DeleteObjects naming the key with a large
// head (the connection's head buffer then holds body bytes and the next request, which a body read of
// a few KiB at a time must leave in order). Both chunked or not.
std::string first_of_pair(simulation& sim, const std::string& key, std::uint32_t value,
                          bool batch_delete) {
    bool chunked = sim.chance(0.5);
    if (!batch_delete)
        return build_request("PUT", key_path(key), "", {}, sim.values[value], chunked);
    std::string xml = "<Delete><Quiet>false</Quiet>";
    unsigned others = static_cast<unsigned>(sim.draw(400));  // absent keys: bodies of 0-16 KiB
    for (unsigned i = 0; i < others; ++i)
        xml += "<Object><Key>none-" + std::to_string(i) + "</Key></Object>";
    xml += "<Object><Key>" + key + "</Key></Object></Delete>";
    std::string md5 = base::base64_encode(base::md5(xml));
    std::string filler(8 * 1024 + sim.draw(40 * 1024), 'f');
    return build_request("POST", std::string("/") + bucket,
                         "delete=", {{"content-md5", md5}, {"x-sim-filler", filler}}, xml, chunked);
}

// Two requests sent back to back on one keep-alive connection, then both answers read.
io::task<void> pipelined(simulation& sim, client_connection& c, std::string key) {
    if (!usable(c)) connect(sim, c);
    ++sim.pipelined;
    sim.requests += 2;
    bool batch_delete = sim.chance(0.3);
    std::uint32_t value = batch_delete ? 0 : new_value(sim);
    std::string first_request = first_of_pair(sim, key, value, batch_delete);
    // After a DeleteObjects, sometimes a GET with a large head too: a body read that ends inside the
    // head buffer then leaves part of the GET there and takes the rest.
    std::vector<auth::header_view> get_headers;
    std::string filler(batch_delete ? sim.draw(24 * 1024) : 0, 'g');
    if (!filler.empty()) get_headers.push_back({"x-sim-filler", filler});
    std::string get = build_request("GET", key_path(key), "", get_headers, "", false);
    std::size_t event = begin_write(sim, key, value);
    std::uint64_t get_start = sim.now++;
    bool sent = co_await send_request(sim, c, first_request + get);
    http_response first, second;
    if (sent) first = co_await read_response(sim, c, false);
    if (sent && first.status != 0 && first.complete) second = co_await read_response(sim, c, false);
    // A DeleteObjects answers 200 whether or not each key was deleted: it says which in its body.
    outcome first_outcome = outcome_of(first);
    if (batch_delete && first.body.find("<Deleted><Key>" + key + "</Key>") == std::string::npos &&
        first_outcome == outcome::done)
        first_outcome = outcome::maybe;
    end_write(sim, key, event, first_outcome, first.status != 0);
    std::uint64_t get_end = sim.now++;
    expect(sim, first, batch_delete ? "pipelined DeleteObjects" : "pipelined PUT " + key, {200});
    if (batch_delete && first.status == 200 && first_outcome != outcome::done && !sim.faults_on &&
        sim.fs.powered())
        sim.violation("pipelined DeleteObjects did not delete " + key);
    if (first.status == 200 && first.complete)
        expect(sim, second, "GET after a pipelined request", {200, 404});
    // The GET ran after the first request had committed: it sees that write or a later one.
    const write_event* first_done = &sim.keys[key][event];
    if (second.status == 200 && second.complete)
        check_read(sim, key, get_start, get_end, whole_body(second.body), "pipelined GET",
                   first_done);
    if (second.status == 404 && second.complete)
        check_read(sim, key, get_start, get_end, absent(), "pipelined GET", first_done);
    if (!usable(c)) connect(sim, c);
}

enum class rival_kind { part_uploads, abort, delete_key, read_key, none };

struct upload_state {
    std::string key, id;
    std::vector<std::pair<std::string, std::string>> parts;  // (etag as sent, bytes), by number - 1
    rival_kind rival = rival_kind::none;                     // what races the completion
    int completed = 0, aborted = 0;                          // their statuses
};

// A part upload; `keep` for the parts the completion will name (no rival yet: it must succeed), not
// for a rival's (which may find the upload completed or aborted: 404).
io::task<void> upload_part(simulation& sim, client_connection& c, upload_state* u, unsigned number,
                           std::string bytes, bool keep) {
    std::string query = "partNumber=" + std::to_string(number) + "&uploadId=" + u->id;
    http_response r = co_await round_trip(
        sim, c, build_request("PUT", key_path(u->key), query, {}, bytes, sim.chance(0.2)), false);
    if (keep)
        expect(sim, r, "UploadPart " + u->key, {200});
    else
        expect(sim, r, "UploadPart racing a completion " + u->key, {200, 404});
    if (keep && r.status == 200) u->parts.emplace_back(r.header("etag"), std::move(bytes));
}

io::task<void> complete_upload(simulation& sim, client_connection& c, upload_state* u) {
    std::string xml = "<CompleteMultipartUpload>";
    std::string value;
    for (std::size_t i = 0; i < u->parts.size(); ++i) {
        xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" +
               u->parts[i].first + "</ETag></Part>";
        value += u->parts[i].second;
    }
    xml += "</CompleteMultipartUpload>";
    sim.values.push_back(value);
    std::size_t event = begin_write(sim, u->key, static_cast<std::uint32_t>(sim.values.size() - 1));
    http_response r = co_await round_trip(
        sim, c, build_request("POST", key_path(u->key), "uploadId=" + u->id, {}, xml, false),
        false);
    end_write(sim, u->key, event, outcome_of(r), r.status != 0);
    u->completed = r.status;
    // It may lose to a new upload of a part it names (InvalidPart) or to an abort (NoSuchUpload).
    if (u->rival == rival_kind::part_uploads)
        expect(sim, r, "CompleteMultipartUpload", {200, 400});
    else if (u->rival == rival_kind::abort)
        expect(sim, r, "CompleteMultipartUpload", {200, 404});
    else
        expect(sim, r, "CompleteMultipartUpload", {200});
    if (r.status == 400 && r.body.find("InvalidPart") == std::string::npos)
        expect(sim, r, "CompleteMultipartUpload", {200});
}

io::task<void> abort_upload(simulation& sim, client_connection& c, upload_state* u) {
    http_response r = co_await round_trip(
        sim, c, build_request("DELETE", key_path(u->key), "uploadId=" + u->id, {}, "", false),
        false);
    u->aborted = r.status;
    expect(sim, r, "AbortMultipartUpload", {204, 404});
}

// New uploads of the upload's part numbers (a straggling duplicate, a retry), each on a connection of
// its own after a head start drawn from the seed: some commit while a completion is deciding.
io::task<void> reupload_part(simulation& sim, upload_state* u, unsigned number) {
    client_connection own;
    for (std::uint64_t k = sim.draw(120); k > 0; --k) co_await io::yield_now();
    co_await upload_part(sim, own, u, number, make_bytes(sim, 1 + sim.draw(9000)), false);
    if (own.conn) own.conn->client_close();
}

io::task<void> reupload_parts(simulation& sim, upload_state* u, unsigned parts) {
    io::wait_group group(parts);
    for (unsigned n = 1; n <= parts; ++n) co_await group.spawn(reupload_part(sim, u, n));
    co_await group.wait();
}

// Create, parts, then a completion that races one of: a part upload of the same number, an abort, a
// delete of the key, a read of the key.
io::task<void> multipart(simulation& sim, client_connection& c, std::string key) {
    upload_state u{key, "", {}};
    http_response created = co_await round_trip(
        sim, c, build_request("POST", key_path(key), "uploads=", {}, "", false), false);
    expect(sim, created, "CreateMultipartUpload", {200});
    u.id = between(created.body, "<UploadId>", "</UploadId>");
    if (created.status != 200 || u.id.empty()) co_return;
    unsigned parts = 1 + static_cast<unsigned>(sim.draw(3));
    for (unsigned n = 1; n <= parts; ++n) {
        std::uint32_t v = new_value(sim);
        std::string bytes = sim.values[v].empty() ? std::string("x") : sim.values[v];
        co_await upload_part(sim, c, &u, n, bytes, true);
        if (u.parts.size() != n) co_return co_await abort_upload(sim, c, &u);
    }
    client_connection other;
    io::wait_group race(2);
    // The rival: new uploads of the parts (40%), an abort (25%), a delete (15%), a read (15%), none.
    static constexpr rival_kind rivals[20] = {
        rival_kind::part_uploads, rival_kind::part_uploads, rival_kind::part_uploads,
        rival_kind::part_uploads, rival_kind::part_uploads, rival_kind::part_uploads,
        rival_kind::part_uploads, rival_kind::part_uploads, rival_kind::abort,
        rival_kind::abort,        rival_kind::abort,        rival_kind::abort,
        rival_kind::abort,        rival_kind::delete_key,   rival_kind::delete_key,
        rival_kind::delete_key,   rival_kind::read_key,     rival_kind::read_key,
        rival_kind::read_key,     rival_kind::none};
    u.rival = rivals[sim.draw(20)];
    bool rival_first = sim.chance(0.5);
    // (Named lambdas whose frames live until race.wait() below: nothing returns in between.)
    auto rival_task = [&]() -> io::task<void> {
        switch (u.rival) {
            case rival_kind::part_uploads: co_return co_await reupload_parts(sim, &u, parts);
            case rival_kind::abort: co_return co_await abort_upload(sim, other, &u);
            case rival_kind::delete_key: co_return co_await delete_object(sim, other, key);
            case rival_kind::read_key: co_return co_await get_object(sim, other, key);
            case rival_kind::none: co_return;
        }
    };
    if (rival_first) co_await race.spawn(rival_task());
    // A head start of a few network steps for the first: it spreads the moment the two requests meet
    // (a part upload's commit comes well after its body, a completion's almost at once).
    for (std::uint64_t k = sim.draw(80); k > 0; --k) co_await io::yield_now();
    co_await race.spawn(complete_upload(sim, c, &u));
    if (!rival_first) co_await race.spawn(rival_task());
    co_await race.wait();
    if (other.conn) other.conn->client_close();
    // An upload is completed or aborted, never both.
    if (u.rival == rival_kind::abort && u.completed == 200 && u.aborted == 204)
        sim.violation(
            "CompleteMultipartUpload and AbortMultipartUpload of one upload both succeeded");
    if (u.rival != rival_kind::abort) co_await abort_upload(sim, c, &u);  // 404 once completed
}

// Bucket operations on a second bucket: create it, then a DeleteBucket races a CreateMultipartUpload
// in it. A delete first leaves no bucket to create in (404); an upload created first is aborted by the
// delete (a bucket holding only uploads is deleted with them), so when both succeed the upload must be
// gone. Then the bucket is emptied and deleted.
io::task<void> bucket_churn(simulation& sim, client_connection& c) {
    if (sim.scratch_busy) co_return;
    sim.scratch_busy = true;
    const std::string scratch = "/scratch";
    http_response made =
        co_await round_trip(sim, c, build_request("PUT", scratch, "", {}, "", false), false);
    expect(sim, made, "CreateBucket scratch", {200, 409});
    client_connection other;
    http_response created, deleted;
    auto create = [&]() -> io::task<void> {
        created = co_await round_trip(
            sim, c, build_request("POST", scratch + "/upload", "uploads=", {}, "", false), false);
    };
    auto remove = [&]() -> io::task<void> {
        deleted = co_await round_trip(sim, other,
                                      build_request("DELETE", scratch, "", {}, "", false), false);
    };
    io::wait_group race(2);
    bool create_first = sim.chance(0.5);
    co_await race.spawn(create_first ? create() : remove());
    co_await race.spawn(create_first ? remove() : create());
    co_await race.wait();
    if (other.conn) other.conn->client_close();
    std::string id = between(created.body, "<UploadId>", "</UploadId>");
    if (created.status == 200 && !id.empty()) {
        http_response aborted = co_await round_trip(
            sim, c, build_request("DELETE", scratch + "/upload", "uploadId=" + id, {}, "", false),
            false);
        if (deleted.status == 204)  // deleted with its bucket: no such bucket, nor upload
            expect(sim, aborted, "AbortMultipartUpload after its bucket was deleted", {404});
        else
            expect(sim, aborted,
                   "AbortMultipartUpload in scratch (delete: " + std::to_string(deleted.status) +
                       " " + between(deleted.body, "<Code>", "</Code>") + ")",
                   {204});
    }
    if (deleted.status != 204) {
        http_response last =
            co_await round_trip(sim, c, build_request("DELETE", scratch, "", {}, "", false), false);
        if (!sim.faults_on && sim.fs.powered() && last.status != 204 && last.status != 404)
            sim.violation("DeleteBucket of the emptied scratch bucket: status " +
                          std::to_string(last.status) + " (" +
                          between(last.body, "<Code>", "</Code>") + ")");
    }
    sim.scratch_busy = false;
}

io::task<void> client(simulation& sim, unsigned budget) {
    client_connection c;
    for (unsigned i = 0; i < budget && sim.failure.empty(); ++i) {
        std::string key = pick_key(sim);
        unsigned op = static_cast<unsigned>(sim.draw(100));
        if (op < 30)
            co_await put_object(sim, c, key);
        else if (op < 55)
            co_await get_object(sim, c, key);
        else if (op < 67)
            co_await delete_object(sim, c, key);
        else if (op < 75)
            co_await head_or_list(sim, c, key);
        else if (op < 86)
            co_await multipart(sim, c, key);
        else if (op < 88)
            co_await bucket_churn(sim, c);
        else
            co_await pipelined(sim, c, key);
    }
    if (c.conn) c.conn->client_close();
}

// With every request answered and faults off: every key reads as the model allows, and the listing
// agrees with the reads.
io::task<void> verify(simulation& sim) {
    client_connection c;
    std::map<std::string, bool> present;
    for (const auto& [key, events] : sim.keys) {
        std::uint64_t start = sim.now++;
        http_response r = co_await round_trip(
            sim, c, build_request("GET", key_path(key), "", {}, "", false), false);
        std::uint64_t end = sim.now++;
        expect(sim, r, "final GET " + key, {200, 404});
        if (r.status == 200) check_read(sim, key, start, end, whole_body(r.body), "final GET");
        if (r.status == 404) check_read(sim, key, start, end, absent(), "final GET");
        present[key] = r.status == 200;
    }
    http_response list = co_await round_trip(
        sim, c, build_request("GET", std::string("/") + bucket, "list-type=2", {}, "", false),
        false);
    expect(sim, list, "final LIST", {200});
    for (const auto& [key, there] : present)
        if (list.status == 200 &&
            (list.body.find("<Key>" + key + "</Key>") != std::string::npos) != there)
            sim.violation("the listing and a GET disagree about " + key);
    if (c.conn) c.conn->client_close();
}

store::sim_faults random_faults(simulation& sim) {
    store::sim_faults f;
    f.latency = 0.3;
    // Slow storage in some seeds: a long fsync holds a journal batch open, which is when a request on
    // another connection can slip in between a decision and its commit.
    static constexpr unsigned delays[] = {3, 3, 10, 40};
    f.max_latency_yields = delays[sim.draw(4)];
    if (sim.chance(0.4)) return f;
    static constexpr double rates[] = {0.002, 0.01, 0.03};
    f.eio = rates[sim.draw(3)];
    f.enospc = rates[sim.draw(3)] / 2;
    f.short_io = rates[sim.draw(3)] / 2;
    f.read_bit_flip = rates[sim.draw(3)] / 2;
    return f;
}

// The first life: create the bucket, run the clients (in half the seeds the power fails at a random
// file-system operation meanwhile), and, unless the power failed, check every key.
io::task<void> clients_life(simulation& sim) {
    client_connection setup;
    http_response made = co_await round_trip(
        sim, setup, build_request("PUT", std::string("/") + bucket, "", {}, "", false), false);
    expect(sim, made, "CreateBucket", {200});
    setup.conn->client_close();
    store::sim_faults faults = random_faults(sim);
    sim.fs.set_faults(faults);
    sim.faults_on =
        faults.eio > 0 || faults.enospc > 0 || faults.short_io > 0 || faults.read_bit_flip > 0;
    if (sim.chance(0.5)) sim.fs.power_off_after(1 + sim.draw(2'500));
    io::wait_group clients(sim.options.clients);
    for (unsigned i = 0; i < sim.options.clients; ++i)
        co_await clients.spawn(client(sim, sim.options.requests_per_client));
    co_await clients.wait();
    sim.fs.set_faults(store::sim_faults{});
    sim.fs.cancel_power_off();  // a failure not reached yet would cut into the checks
    sim.faults_on = false;
    if (sim.failure.empty() && sim.fs.powered()) co_await verify(sim);
    sim.clients_done = true;
}

// After a power failure and recovery: every acknowledged write must have survived (or been replaced),
// none that was refused or cut off mid-body may appear.
io::task<void> recovered_life(simulation& sim) {
    co_await verify(sim);
    sim.clients_done = true;
}

// Moves the network until the clients are done and the server has closed every connection.
io::task<void> pump(simulation& sim, io::reactor_group* group) {
    while (!sim.clients_done || sim.net.open_connections() > 0) {
        sim.net.step();
        co_await io::yield_now();
    }
    group->stop();
}

store::engine_options options_for(simulation& sim) {
    store::engine_options o;
    o.data_dirs = {"/drive0"};
    if (sim.chance(0.5)) o.data_dirs.push_back("/drive1");
    o.cores = 1 + static_cast<unsigned>(sim.draw(3));
    o.buffers = io::buffer_pool_options{128 * 1024, 16};
    o.journal_rotate_bytes = 16 * 1024;
    o.spares.min_segment_bytes = 64 * 1024;
    o.spares.bytes_per_drive = 2 * 1024 * 1024;
    o.spares.full_cooldown_ms = 0;
    o.fs = &sim.fs;
    o.boot_nonce = sim.seed * 1000003 + 1;
    return o;
}

struct totals {
    std::uint64_t requests = 0, acknowledged = 0, failed = 0, reads = 0, pipelined = 0,
                  vanished = 0, faults = 0, crashes = 0, torn = 0, dropped = 0, fs_operations = 0;
    void add(const simulation& sim) {
        requests += sim.requests, acknowledged += sim.acknowledged, failed += sim.failed;
        reads += sim.reads_checked, pipelined += sim.pipelined, vanished += sim.vanished;
        const store::sim_stats& st = sim.fs.stats();
        faults += st.injected_eio + st.injected_enospc + st.injected_short + st.injected_bit_flips;
        crashes += sim.crashes, torn += st.torn_writes, dropped += st.dropped_changes;
        fs_operations += st.operations;
    }
    void add_totals(const totals& o) {
        requests += o.requests, acknowledged += o.acknowledged, failed += o.failed;
        reads += o.reads, pipelined += o.pipelined, vanished += o.vanished, faults += o.faults;
        crashes += o.crashes, torn += o.torn, dropped += o.dropped;
        fs_operations += o.fs_operations;
    }
    std::string describe() const {
        char line[480];
        std::snprintf(
            line, sizeof line,
            "%llu requests (%llu writes acknowledged, %llu failed), %llu reads checked, "
            "%llu pipelined pairs, %llu vanished clients, %llu file-system operations, %llu "
            "injected faults, %llu power failures (%llu torn writes, %llu unsynced changes lost)",
            static_cast<unsigned long long>(requests),
            static_cast<unsigned long long>(acknowledged), static_cast<unsigned long long>(failed),
            static_cast<unsigned long long>(reads), static_cast<unsigned long long>(pipelined),
            static_cast<unsigned long long>(vanished),
            static_cast<unsigned long long>(fs_operations), static_cast<unsigned long long>(faults),
            static_cast<unsigned long long>(crashes), static_cast<unsigned long long>(torn),
            static_cast<unsigned long long>(dropped));
        return line;
    }
};

// One life of the server: the engine opened (recovering what the last life left), the S3 service
// and the connections on simulated cores, running `life` until it is done.
void run_life(simulation& sim, store::engine_options eo, io::task<void> (*life)(simulation&)) {
    auto opened = store::engine::open(eo);
    if (!opened) return sim.violation("the engine did not open: " + opened.err().message);
    std::unique_ptr<store::engine> engine = std::move(*opened);
    s3::service_options so;
    so.credentials.add(user);
    so.min_part_bytes = 1;
    base::metrics metrics(eo.cores);
    s3::service service(*engine, so, metrics);
    server_side server;
    server.cores = eo.cores;
    server.service = &service;
    server.stats.resize(eo.cores);
    server.metrics = &metrics;
    sim.server = &server;
    sim.clients_done = false;
    io::reactor_group group(eo.cores);
    group.run_simulated(
        [&](unsigned core) {
            engine->attach_core(core, io::reactor::current().ring());
            if (core != 0) return;
            io::spawn(life(sim));
            io::spawn(pump(sim, &group));
        },
        [&](unsigned running) { return static_cast<unsigned>(sim.draw(running)); });
    sim.server = nullptr;
}

std::string run_seed(std::uint64_t seed, const run_options& options, totals* sum) {
    simulation sim(seed, options);
    store::engine_options eo = options_for(sim);
    base::set_thread_clock(&sim.clock);
    run_life(sim, eo, clients_life);
    if (sim.failure.empty() && !sim.fs.powered()) {
        ++sim.crashes;
        sim.fs.crash_and_restart();
        eo.boot_nonce = *eo.boot_nonce + 1;
        run_life(sim, eo, recovered_life);
    }
    base::set_thread_clock(nullptr);
    if (sim.failure.empty() && sim.fs.open_descriptors() > 0)
        sim.violation(std::to_string(sim.fs.open_descriptors()) + " descriptors left open");
    sum->add(sim);
    return sim.failure;
}

int usage() {
    std::fprintf(stderr,
                 "usage: server_sim [--seed N] [--seeds COUNT] [--clients N] [--requests N] "
                 "[--keys N] [--verbose]\n"
                 "  runs COUNT seeds starting at N (default: seed 1, 1 seed); a failure prints "
                 "its seed\n");
    return 64;
}

}  // namespace
}  // namespace fjord::sim

int main(int argc, char** argv) {
    using namespace fjord::sim;
    run_options options;
    seed_args args;
    if (!parse_seed_args(argc, argv, args,
                         {{"clients", &options.clients},
                          {"requests", &options.requests_per_client},
                          {"keys", &options.keys}}) ||
        options.clients == 0 || options.keys == 0)
        return usage();
    options.first_seed = args.first_seed;
    options.seeds = args.seeds;
    options.verbose = args.verbose;
    fjord::base::set_log_level(options.verbose ? fjord::base::log_level::debug
                                               : fjord::base::log_level::off);
    totals sum;
    auto one = [&](std::uint64_t seed) {
        totals done;
        seed_outcome out;
        out.failure = run_seed(seed, options, &done);
        out.summary = done.describe();
        sum.add_totals(done);
        return out;
    };
    return run_seeds("server_sim", options.first_seed, options.seeds, options.verbose, one,
                     [&] { return sum.describe(); });
}
