// `fjord bench net`: the physical network limit on this machine, loopback TCP. Each stream is a
// sender thread and a receiver thread on one connection to 127.0.0.1, with plain blocking sockets and
// the kernel's default buffer autotuning (what a client and Fjord get). Throughput is counted at the
// receivers over the measured interval.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/units.h"
#include "bench/bench.h"
#include "cli/options.h"

namespace fjord::bench {

namespace {

struct net_config {
    double seconds = 3;
    unsigned streams = 1;
    std::size_t buffer_bytes = 1024 * base::KiB;
    std::string json_path;
};

struct stream_pair {
    int send_fd = -1;
    int receive_fd = -1;
    alignas(64) std::atomic<std::uint64_t> received_bytes{0};
};

void send_loop(int fd, std::size_t buffer_bytes, const std::atomic<bool>* stop) {
    std::vector<char> buffer(buffer_bytes, 'x');
    while (!stop->load(std::memory_order_relaxed)) {
        ssize_t n = ::send(fd, buffer.data(), buffer.size(), MSG_NOSIGNAL);
        if (n < 0 && errno != EINTR) break;
    }
    ::shutdown(fd, SHUT_WR);
}

void receive_loop(int fd, std::size_t buffer_bytes, std::atomic<std::uint64_t>* received) {
    std::vector<char> buffer(buffer_bytes);
    for (;;) {  // ends when the sender shuts down its side
        ssize_t n = ::recv(fd, buffer.data(), buffer.size(), 0);
        if (n == 0 || (n < 0 && errno != EINTR)) break;
        if (n > 0) received->fetch_add(static_cast<std::uint64_t>(n), std::memory_order_relaxed);
    }
}

// Connects `streams` pairs through one listener on an ephemeral loopback port.
base::result<std::vector<std::unique_ptr<stream_pair>>> connect_pairs(unsigned streams) {
    int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listener, static_cast<int>(streams)) != 0 ||
        ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
        if (listener >= 0) ::close(listener);
        return base::fail(base::errc::io_error,
                          std::string("loopback listener: ") + strerror(errno));
    }
    std::vector<std::unique_ptr<stream_pair>> pairs;
    for (unsigned i = 0; i < streams; ++i) {
        auto p = std::make_unique<stream_pair>();
        p->send_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (p->send_fd < 0 ||
            ::connect(p->send_fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
            (p->receive_fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC)) < 0) {
            ::close(listener);
            return base::fail(base::errc::io_error,
                              std::string("loopback connect: ") + strerror(errno));
        }
        int one = 1;
        setsockopt(p->send_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        pairs.push_back(std::move(p));
    }
    ::close(listener);
    return pairs;
}

base::result<net_config> parse_net_args(int argc, char** argv) {
    static constexpr std::string_view with_value[] = {"seconds", "streams", "buffer-kib", "json"};
    auto opts = cli::command_options::parse(argc, argv, with_value, {});
    if (!opts) return opts.as_failure();
    net_config cfg;
    auto seconds = opts->seconds("seconds", 3);
    auto streams = opts->number("streams", 1);
    auto buffer_kib = opts->number("buffer-kib", 1024);
    if (!seconds) return seconds.as_failure();
    if (!streams || !buffer_kib || *streams < 1 || *streams > 64 || *buffer_kib < 1 ||
        *buffer_kib > 65536)
        return base::fail(base::errc::invalid_argument,
                          "need --streams 1..64 and --buffer-kib 1..65536");
    cfg.seconds = *seconds;
    cfg.streams = static_cast<unsigned>(*streams);
    cfg.buffer_bytes = *buffer_kib * base::KiB;
    cfg.json_path = opts->text("json");
    return cfg;
}

}  // namespace

int bench_net_main(int argc, char** argv) {
    auto cfg = options_or_usage("net", parse_net_args(argc, argv));
    if (!cfg) return 2;
    auto pairs = connect_pairs(cfg->streams);
    if (!pairs) {
        std::fprintf(stderr, "fjord bench net: %s\n", pairs.err().message.c_str());
        return 1;
    }
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (auto& p : *pairs) {
        threads.emplace_back(receive_loop, p->receive_fd, cfg->buffer_bytes, &p->received_bytes);
        threads.emplace_back(send_loop, p->send_fd, cfg->buffer_bytes, &stop);
    }
    auto total = [&] {
        std::uint64_t sum = 0;
        for (auto& p : *pairs) sum += p->received_bytes.load(std::memory_order_relaxed);
        return sum;
    };
    // A short warm-up (connection start, buffer autotuning) is left out of the measured interval.
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::min<long>(200, static_cast<long>(cfg->seconds * 100))));
    std::uint64_t bytes_before = total();
    std::int64_t start_ns = base::monotonic_now_ns();
    std::this_thread::sleep_for(std::chrono::duration<double>(cfg->seconds));
    std::uint64_t bytes = total() - bytes_before;
    double seconds = static_cast<double>(base::monotonic_now_ns() - start_ns) / 1e9;
    stop.store(true);
    for (auto& t : threads) t.join();
    for (auto& p : *pairs) ::close(p->send_fd), ::close(p->receive_fd);

    double gib_s = cli::gib_per_s(bytes, seconds);
    std::printf("net loopback TCP: %u stream(s), %zu KiB sends: %.3f GiB/s (%.2f GiB in %.2f s)\n",
                cfg->streams, cfg->buffer_bytes / base::KiB, gib_s,
                static_cast<double>(bytes) / static_cast<double>(base::GiB), seconds);
    if (cfg->json_path.empty()) return 0;
    char json[512];
    std::snprintf(
        json, sizeof json,
        "{\"bench\": \"net\", \"streams\": %u, \"buffer_bytes\": %zu, \"seconds\": %.4f, \"bytes\": %llu, "
        "\"gib_s\": %.4f}",
        cfg->streams, cfg->buffer_bytes, seconds, static_cast<unsigned long long>(bytes), gib_s);
    return cli::write_json_file(cfg->json_path, json) ? 0 : 1;
}

}  // namespace fjord::bench
