#include "io/socket.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/encoding.h"

namespace fjord::io {

base::result<endpoint> parse_endpoint(const std::string& text) {
    auto colon = text.rfind(':');
    if (colon == std::string::npos)
        return base::fail(base::errc::invalid_argument, "expected host:port in " + text);
    endpoint e;
    e.host = text.substr(0, colon);
    if (e.host.size() >= 2 && e.host.front() == '[' && e.host.back() == ']')
        e.host = e.host.substr(1, e.host.size() - 2);
    if (e.host == "localhost" || e.host.empty()) e.host = "127.0.0.1";
    auto port = base::parse_u64(std::string_view(text).substr(colon + 1));
    if (!port || *port > 65535)
        return base::fail(base::errc::invalid_argument, "bad port in " + text);
    e.port = static_cast<std::uint16_t>(*port);
    return e;
}

bool is_loopback(const endpoint& where) {
    in_addr v4{};
    if (inet_pton(AF_INET, where.host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
    in6_addr v6{};
    if (inet_pton(AF_INET6, where.host.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
    return false;
}

base::result<int> listen_tcp(const endpoint& where, int backlog) {
    bool v6 = where.host.find(':') != std::string::npos;
    int fd = ::socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return base::fail(base::errc::io_error, std::string("socket: ") + strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    int rc;
    if (v6) {
        sockaddr_in6 addr{};
        addr.sin6_family = AF_INET6;
        addr.sin6_port = htons(where.port);
        if (inet_pton(AF_INET6, where.host.c_str(), &addr.sin6_addr) != 1) {
            ::close(fd);
            return base::fail(base::errc::invalid_argument, "bad IPv6 address " + where.host);
        }
        rc = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    } else {
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(where.port);
        if (inet_pton(AF_INET, where.host.c_str(), &addr.sin_addr) != 1) {
            ::close(fd);
            return base::fail(base::errc::invalid_argument, "bad IPv4 address " + where.host);
        }
        rc = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    }
    if (rc < 0 || ::listen(fd, backlog) < 0) {
        std::string why = strerror(errno);
        ::close(fd);
        return base::fail(base::errc::io_error, "cannot listen on " + where.host + ":" +
                                                    std::to_string(where.port) + ": " + why);
    }
    return fd;
}

void tune_connection(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

std::string peer_address(int fd) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) < 0) return "-";
    char host[INET6_ADDRSTRLEN] = {};
    if (addr.ss_family == AF_INET) {
        const auto* v4 = reinterpret_cast<const sockaddr_in*>(&addr);
        if (!inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host)) return "-";
        return std::string(host) + ":" + std::to_string(ntohs(v4->sin_port));
    }
    if (addr.ss_family == AF_INET6) {
        const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&addr);
        if (!inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host)) return "-";
        return "[" + std::string(host) + "]:" + std::to_string(ntohs(v6->sin6_port));
    }
    return "-";
}

}  // namespace fjord::io
