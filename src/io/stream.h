#pragma once

// A connected byte stream as the HTTP code sees it: a kernel socket driven by io_uring, or a simulated
// one that the deterministic simulation (tests/sim) drives. The HTTP connection loop is written once
// against this type, so the simulation replays the server's real connection code.
//
// An operation costs no allocation either way: the awaitable holds its completion record, as io/ops.h's
// do. A socket operation submits an SQE (with a linked timeout); a simulated one hands the record to the
// simulation, which completes it later and schedules the waiter on the reactor (never inline).
//
// Threading: a stream belongs to the core that accepted it; every call is made there.

#include <liburing.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <coroutine>
#include <cstdint>
#include <string>

#include "io/reactor.h"
#include "io/task.h"

namespace fjord::io {

// The simulation's side of a stream. start_receive / start_send begin one operation each (at most one
// of each kind at a time) and complete it later: result (bytes, 0 at the end of the stream, -errno;
// -ECANCELED when timeout_ms passes first, timeout_ms < 0: no timeout), done, then the waiter is
// scheduled on the reactor that started it.
class simulated_stream {
public:
    virtual ~simulated_stream() = default;
    virtual void start_receive(void* buf, std::size_t len, std::int64_t timeout_ms,
                               completion* c) = 0;
    virtual void start_send(const void* buf, std::size_t len, std::int64_t timeout_ms,
                            completion* c) = 0;
    // A pending operation with this record completes with -ECANCELED; none pending: nothing happens.
    virtual void cancel(completion* c) = 0;
    virtual void shutdown_write() = 0;
    // The server is done with the stream; no operation is pending.
    virtual void close() = 0;
    virtual std::string peer_address() const = 0;
};

class stream {
    enum class op_kind { receive, send, send_gather };

public:
    class operation {
    public:
        operation(const stream& s, op_kind kind, void* buf, std::size_t len,
                  std::int64_t timeout_ms)
            : _fd(s._fd),
              _sim(s._sim),
              _kind(kind),
              _buf(buf),
              _len(len),
              _timeout_ms(timeout_ms) {}
        operation(const operation&) = delete;
        operation& operator=(const operation&) = delete;

        bool await_ready() const noexcept { return false; }
        void await_suspend(std::coroutine_handle<> h);
        std::int32_t await_resume() const noexcept { return _completion.result; }
        // The record to name in stream::cancel while the operation is pending.
        completion* record() { return &_completion; }

    private:
        int _fd;
        simulated_stream* _sim;
        op_kind _kind;
        void* _buf;
        std::size_t _len;
        std::int64_t _timeout_ms;
        completion _completion;
        __kernel_timespec _timeout{};
        msghdr _message{};  // send_gather: names the caller's iovecs
    };

    static stream socket(int fd) { return stream(fd, nullptr); }
    static stream simulated(simulated_stream* s) { return stream(-1, s); }

    // Awaitables returning bytes moved, 0 at the end of the stream, or -errno (-ECANCELED on timeout;
    // timeout_ms < 0: none). A send may move fewer bytes than asked.
    operation receive(void* buf, std::size_t len, std::int64_t timeout_ms) const {
        return operation(*this, op_kind::receive, buf, len, timeout_ms);
    }
    operation send(const void* buf, std::size_t len, std::int64_t timeout_ms) const {
        return operation(*this, op_kind::send, const_cast<void*>(buf), len, timeout_ms);
    }
    // One send of the pieces `parts[0, count)` in order (one SENDMSG: no copy into a staging buffer);
    // the iovecs must stay unchanged until it completes. It may move fewer bytes than they hold (a
    // simulated stream moves at most the first piece's).
    operation send_gather(const iovec* parts, std::size_t count, std::int64_t timeout_ms) const {
        return operation(*this, op_kind::send_gather, const_cast<iovec*>(parts), count, timeout_ms);
    }
    // Makes the pending operation with record `c` complete with -ECANCELED.
    void cancel(completion* c) const;
    // Half-closes the sending side; false when the stream is already gone.
    bool shutdown_write() const;
    task<void> close() const;
    // "address:port" of the peer, or "-".
    std::string peer_address() const;

private:
    stream(int fd, simulated_stream* sim) : _fd(fd), _sim(sim) {}
    int _fd;
    simulated_stream* _sim;
};

}  // namespace fjord::io
