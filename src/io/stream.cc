#include "io/stream.h"

#include <sys/socket.h>

#include "io/ops.h"
#include "io/socket.h"

namespace fjord::io {

void stream::operation::await_suspend(std::coroutine_handle<> h) {
    _completion.waiter = h;
    if (_sim) {
        if (_kind == op_kind::receive) {
            _sim->start_receive(_buf, _len, _timeout_ms, &_completion);
        } else if (_kind == op_kind::send) {
            _sim->start_send(_buf, _len, _timeout_ms, &_completion);
        } else {
            const iovec* first = static_cast<const iovec*>(_buf);
            _sim->start_send(first->iov_base, first->iov_len, _timeout_ms, &_completion);
        }
        return;
    }
    reactor& r = reactor::current();
    io_uring_sqe* sqe = r.get_sqe(_timeout_ms >= 0 ? 2 : 1);
    if (_kind == op_kind::receive) {
        io_uring_prep_recv(sqe, _fd, _buf, _len, 0);
    } else if (_kind == op_kind::send) {
        io_uring_prep_send(sqe, _fd, _buf, _len, MSG_NOSIGNAL);
    } else {
        _message.msg_iov = static_cast<iovec*>(_buf);
        _message.msg_iovlen = _len;
        io_uring_prep_sendmsg(sqe, _fd, &_message, MSG_NOSIGNAL);
    }
    io_uring_sqe_set_data(sqe, &_completion);
    if (_timeout_ms >= 0) {
        sqe->flags |= IOSQE_IO_LINK;
        _timeout.tv_sec = _timeout_ms / 1000;
        _timeout.tv_nsec = (_timeout_ms % 1000) * 1000000;
        io_uring_sqe* t = r.get_sqe();
        io_uring_prep_link_timeout(t, &_timeout, 0);
        io_uring_sqe_set_data64(t, reactor::ignored_user_data);
    }
}

void stream::cancel(completion* c) const {
    if (_sim) return _sim->cancel(c);
    io_uring_sqe* sqe = reactor::current().get_sqe();
    io_uring_prep_cancel(sqe, c, 0);
    io_uring_sqe_set_data64(sqe, reactor::ignored_user_data);
}

bool stream::shutdown_write() const {
    if (_sim) {
        _sim->shutdown_write();
        return true;
    }
    return ::shutdown(_fd, SHUT_WR) == 0;  // a socket call that never blocks
}

task<void> stream::close() const {
    if (_sim) {
        _sim->close();
        co_return;
    }
    co_await io::close(_fd);
}

std::string stream::peer_address() const {
    return _sim ? _sim->peer_address() : io::peer_address(_fd);
}

}  // namespace fjord::io
