#include "client/connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "base/clock.h"
#include "io/iovec.h"
#include "io/ops.h"

namespace fjord::client {

namespace {

base::failure io_failure(const char* what, int negative_errno) {
    if (negative_errno == -ECANCELED)
        return base::fail(base::errc::timed_out, std::string(what) + ": timed out");
    return base::fail(base::errc::io_error, std::string(what) + ": " + strerror(-negative_errno));
}

// Fills `storage` with the endpoint's address; returns its length, or 0 if the host is not a literal.
socklen_t make_address(const io::endpoint& where, sockaddr_storage& storage) {
    std::memset(&storage, 0, sizeof storage);
    if (where.host.find(':') != std::string::npos) {
        auto* a6 = reinterpret_cast<sockaddr_in6*>(&storage);
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons(where.port);
        if (inet_pton(AF_INET6, where.host.c_str(), &a6->sin6_addr) != 1) return 0;
        return sizeof(sockaddr_in6);
    }
    auto* a4 = reinterpret_cast<sockaddr_in*>(&storage);
    a4->sin_family = AF_INET;
    a4->sin_port = htons(where.port);
    if (inet_pton(AF_INET, where.host.c_str(), &a4->sin_addr) != 1) return 0;
    return sizeof(sockaddr_in);
}

}  // namespace

void connection::close() {
    if (_fd >= 0) ::close(_fd);  // a socket close does not block (no SO_LINGER)
    _fd = -1;
    _tls.reset();
}

io::task<base::result<void>> connection::connect() {
    close();
    sockaddr_storage address;
    socklen_t address_len = make_address(_options.where, address);
    if (address_len == 0)
        co_return base::fail(base::errc::invalid_argument,
                             "not an IP address: " + _options.where.host);
    int fd = ::socket(address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        co_return base::fail(base::errc::io_error, std::string("socket: ") + strerror(errno));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (int size = _options.socket_buffer_bytes; size > 0) {
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    }
    const sockaddr* target = reinterpret_cast<const sockaddr*>(&address);
    int rc = co_await io::make_op(
        [fd, target, address_len](io_uring_sqe* s) {
            io_uring_prep_connect(s, fd, target, address_len);
        },
        _options.io_timeout_ms);
    if (rc < 0) {
        ::close(fd);
        co_return io_failure(
            ("connect to " + _options.where.host + ":" + std::to_string(_options.where.port))
                .c_str(),
            rc);
    }
    _fd = fd;
    if (_options.tls) {
        auto started = tls::session::connect(_options.tls, _options.where.host);
        if (!started) {
            close();
            co_return started.as_failure();
        }
        _tls = std::move(*started);
        if (auto shaken = co_await tls_handshake(); !shaken) co_return shaken;
    }
    co_return base::result<void>{};
}

io::task<base::result<void>> connection::send_all(std::span<iovec> parts) {
    if (_fd < 0) co_return base::fail(base::errc::closed, "send on a closed connection");
    if (_tls) co_return co_await tls_send_all(parts);
    // Each round sends what is left in one SENDMSG; MSG_WAITALL lets the kernel finish a large body
    // without a completion per socket-buffer's worth. The loop bound is the byte count itself.
    while (!parts.empty()) {
        msghdr message{};
        message.msg_iov = parts.data();
        message.msg_iovlen = parts.size();
        int fd = _fd;
        const msghdr* m = &message;
        int rc = co_await io::make_op(
            [fd, m](io_uring_sqe* s) {
                io_uring_prep_sendmsg(s, fd, m, MSG_NOSIGNAL | MSG_WAITALL);
            },
            _options.io_timeout_ms);
        if (rc <= 0) {
            close();
            co_return rc == 0 ? base::fail(base::errc::closed, "send: connection closed")
                              : io_failure("send", rc);
        }
        parts = io::advance(parts, static_cast<std::size_t>(rc));
    }
    co_return base::result<void>{};
}

io::task<base::result<std::size_t>> connection::receive_some(std::byte* dst, std::size_t max) {
    if (_fd < 0) co_return base::fail(base::errc::closed, "receive on a closed connection");
    if (_tls) co_return co_await tls_receive_some(dst, max);
    int rc = co_await io::recv(_fd, dst, max, _options.io_timeout_ms);
    if (rc <= 0) {
        close();
        if (rc == 0) co_return base::fail(base::errc::closed, "connection closed by the server");
        co_return io_failure("receive", rc);
    }
    co_return static_cast<std::size_t>(rc);
}

io::task<base::result<void>> connection::receive_exact(std::byte* dst, std::size_t len) {
    if (_fd < 0) co_return base::fail(base::errc::closed, "receive on a closed connection");
    for (std::size_t done = 0; _tls && done < len;) {
        auto n = co_await tls_receive_some(dst + done, len - done);
        if (!n) co_return n.as_failure();
        done += *n;
    }
    if (_tls) co_return base::result<void>{};
    std::size_t done = 0;
    while (done < len) {
        // One operation per call is capped at 1 GiB so the length fits the SQE's 32-bit field.
        std::size_t want = std::min<std::size_t>(len - done, std::size_t{1} << 30);
        int fd = _fd;
        std::byte* at = dst + done;
        int rc = co_await io::make_op(
            [fd, at, want](io_uring_sqe* s) { io_uring_prep_recv(s, fd, at, want, MSG_WAITALL); },
            _options.io_timeout_ms);
        if (rc <= 0) {
            close();
            if (rc == 0)
                co_return base::fail(base::errc::closed,
                                     "connection closed in the middle of a body");
            co_return io_failure("receive", rc);
        }
        done += static_cast<std::size_t>(rc);
    }
    co_return base::result<void>{};
}

// ---- TLS ----

io::task<base::result<void>> connection::tls_flush(std::int64_t timeout_ms) {
    while (!_tls->output().empty()) {
        auto out = _tls->output();
        int rc = co_await io::send(_fd, out.data(), out.size(),
                                   timeout_ms > 0 ? timeout_ms : _options.io_timeout_ms);
        if (rc <= 0) {
            close();
            co_return rc == 0 ? base::fail(base::errc::closed, "send: connection closed")
                              : io_failure("send", rc);
        }
        _tls->output_sent(static_cast<std::size_t>(rc));
    }
    co_return base::result<void>{};
}

io::task<base::result<void>> connection::tls_fill(std::int64_t timeout_ms) {
    auto space = _tls->input_space();
    int rc = co_await io::recv(_fd, space.data(), space.size(),
                               timeout_ms > 0 ? timeout_ms : _options.io_timeout_ms);
    if (rc <= 0) {
        close();
        if (rc == 0) co_return base::fail(base::errc::closed, "connection closed by the server");
        co_return io_failure("receive", rc);
    }
    _tls->input_added(static_cast<std::size_t>(rc));
    co_return base::result<void>{};
}

io::task<base::result<void>> connection::tls_handshake() {
    // One deadline for the whole handshake: a server trickling its flight cannot stretch it.
    const std::int64_t deadline_ms = base::monotonic_now_ns() / 1'000'000 + _options.io_timeout_ms;
    auto left_ms = [&] {
        return std::max<std::int64_t>(1, deadline_ms - base::monotonic_now_ns() / 1'000'000);
    };
    for (;;) {
        auto done = _tls->handshake();
        auto flushed = co_await tls_flush(left_ms());
        if (!done) {
            close();
            co_return base::fail(base::errc::closed, "https://" + _options.where.host + ":" +
                                                         std::to_string(_options.where.port) +
                                                         ": " + done.err().message);
        }
        if (!flushed) co_return flushed;
        if (*done) co_return base::result<void>{};
        if (base::monotonic_now_ns() / 1'000'000 >= deadline_ms) {
            close();
            co_return base::fail(base::errc::timed_out, "TLS handshake: timed out");
        }
        if (auto filled = co_await tls_fill(left_ms()); !filled) co_return filled;
    }
}

io::task<base::result<void>> connection::tls_send_all(std::span<iovec> parts) {
    for (const iovec& part : parts) {
        const auto* p = static_cast<const std::byte*>(part.iov_base);
        std::size_t left = part.iov_len;
        while (left > 0) {
            auto took = _tls->write(p, left);
            if (!took) {
                close();
                co_return took.as_failure();
            }
            p += *took;
            left -= *took;
            // Small parts (a head) go out with what follows; the output is flushed once it is large.
            if (_tls->output().size() >= tls::session::max_plaintext_per_write)
                if (auto flushed = co_await tls_flush(); !flushed) co_return flushed;
        }
    }
    co_return co_await tls_flush();
}

io::task<base::result<std::size_t>> connection::tls_receive_some(std::byte* dst, std::size_t max) {
    for (;;) {
        auto got = _tls->read(dst, max);
        if (!got) {
            close();
            co_return got.as_failure();
        }
        if (*got > 0) co_return *got;
        if (_tls->peer_closed()) {
            close();
            co_return base::fail(base::errc::closed, "connection closed by the server");
        }
        if (auto flushed = co_await tls_flush(); !flushed) co_return flushed.as_failure();
        if (auto filled = co_await tls_fill(); !filled) co_return filled.as_failure();
    }
}

}  // namespace fjord::client
