#include "http/server.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/log.h"
#include "io/ops.h"
#include "io/reactor.h"

namespace fjord::http {

base::result<void> server::listen() {
    auto fd = io::listen_tcp(_options.listen, _options.backlog);
    if (!fd) return fd.as_failure();
    _listen_fd = *fd;
    io::reactor::current().on_stop([this] {
        if (_accept_wait) {
            io_uring_sqe* sqe = io::reactor::current().get_sqe();
            io_uring_prep_cancel(sqe, _accept_wait, 0);
            io_uring_sqe_set_data64(sqe, io::reactor::ignored_user_data);
        }
        close_idle_connections();
    });
    return {};
}

io::task<void> server::run() {
    io::reactor& r = io::reactor::current();
    base::metrics::shard& metrics = _metrics.for_core(r.core());
    r.hold();
    while (!r.stopping()) {
        auto op = io::accept(_listen_fd);
        _accept_wait = op.record();
        int fd = co_await op;
        _accept_wait = nullptr;
        if (fd < 0) {
            if (fd == -ECANCELED || r.stopping()) break;
            LOG_WARN("accept failed: %s", strerror(-fd));
            if (fd == -EMFILE || fd == -ENFILE)
                co_await io::sleep_for(10);  // let connections close
            continue;
        }
        if (_stats.open >= _options.max_connections_per_core) {
            static constexpr char busy[] =
                "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\nRetry-After: 1\r\n\r\n";
            metrics.add(base::counter::connections_refused);
            // A TLS client could not read a plain answer: it only sees the connection close.
            if (!_options.tls) (void)co_await io::send(fd, busy, sizeof busy - 1, 1000);
            co_await io::close(fd);
            continue;
        }
        std::unique_ptr<tls::session> session;
        if (_options.tls) {
            auto made = tls::session::accept(_options.tls->current());
            if (!made) {
                LOG_WARN("cannot start a TLS session: %s", made.err().message.c_str());
                co_await io::close(fd);
                continue;
            }
            session = std::move(*made);
        }
        io::tune_connection(fd);
        io::spawn(serve_connection(io::stream::socket(fd), _handler, _options.limits, _stats,
                                   metrics, std::move(session)));
    }
    close_idle_connections();
    co_await io::close(_listen_fd);
    _listen_fd = -1;
    r.release();
}

}  // namespace fjord::http
