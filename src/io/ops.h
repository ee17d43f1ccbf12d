#pragma once

// Awaitables for io_uring operations. Each awaitable holds its completion record, so an operation costs no
// allocation: `int n = co_await io::recv(fd, buf, len, timeout_ms);` returns the CQE result (bytes or
// -errno). With a timeout, a linked timeout SQE is submitted with the operation; on expiry the operation
// completes with -ECANCELED. Every buffer and path passed in must stay alive until the operation completes,
// which holds when it lives in the awaiting coroutine's frame.

#include <fcntl.h>
#include <liburing.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <coroutine>
#include <cstdint>

#include "io/reactor.h"

namespace fjord::io {

template <class Prep>
class uring_awaitable {
public:
    uring_awaitable(Prep prep, std::int64_t timeout_ms) : _prep(prep), _timeout_ms(timeout_ms) {}
    uring_awaitable(const uring_awaitable&) = delete;
    uring_awaitable& operator=(const uring_awaitable&) = delete;

    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) {
        reactor& r = reactor::current();
        _completion.waiter = h;
        io_uring_sqe* sqe = r.get_sqe(_timeout_ms >= 0 ? 2 : 1);
        _prep(sqe);
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
    std::int32_t await_resume() const noexcept { return _completion.result; }
    completion* record() { return &_completion; }

private:
    Prep _prep;
    std::int64_t _timeout_ms;
    completion _completion;
    __kernel_timespec _timeout{};
};

template <class Prep>
uring_awaitable<Prep> make_op(Prep prep, std::int64_t timeout_ms = -1) {
    return uring_awaitable<Prep>(prep, timeout_ms);
}

inline auto recv(int fd, void* buf, std::size_t len, std::int64_t timeout_ms = -1) {
    return make_op([=](io_uring_sqe* s) { io_uring_prep_recv(s, fd, buf, len, 0); }, timeout_ms);
}
inline auto send(int fd, const void* buf, std::size_t len, std::int64_t timeout_ms = -1,
                 int flags = 0) {
    return make_op(
        [=](io_uring_sqe* s) { io_uring_prep_send(s, fd, buf, len, flags | MSG_NOSIGNAL); },
        timeout_ms);
}
inline auto sendmsg(int fd, const msghdr* msg, std::int64_t timeout_ms = -1) {
    return make_op([=](io_uring_sqe* s) { io_uring_prep_sendmsg(s, fd, msg, MSG_NOSIGNAL); },
                   timeout_ms);
}
inline auto accept(int fd) {
    return make_op(
        [=](io_uring_sqe* s) { io_uring_prep_accept(s, fd, nullptr, nullptr, SOCK_CLOEXEC); });
}
// Reads/writes at an offset. buf_index >= 0 selects the registered-buffer (fixed) variant.
inline auto read(int fd, void* buf, unsigned len, std::uint64_t offset, int buf_index = -1) {
    return make_op([=](io_uring_sqe* s) {
        if (buf_index >= 0)
            io_uring_prep_read_fixed(s, fd, buf, len, offset, buf_index);
        else
            io_uring_prep_read(s, fd, buf, len, offset);
    });
}
inline auto write(int fd, const void* buf, unsigned len, std::uint64_t offset, int buf_index = -1) {
    return make_op([=](io_uring_sqe* s) {
        if (buf_index >= 0)
            io_uring_prep_write_fixed(s, fd, buf, len, offset, buf_index);
        else
            io_uring_prep_write(s, fd, buf, len, offset);
    });
}
inline auto fsync(int fd, bool datasync) {
    return make_op(
        [=](io_uring_sqe* s) { io_uring_prep_fsync(s, fd, datasync ? IORING_FSYNC_DATASYNC : 0); });
}
inline auto openat(int dir_fd, const char* path, int flags, mode_t mode = 0) {
    return make_op(
        [=](io_uring_sqe* s) { io_uring_prep_openat(s, dir_fd, path, flags | O_CLOEXEC, mode); });
}
inline auto close(int fd) {
    return make_op([=](io_uring_sqe* s) { io_uring_prep_close(s, fd); });
}
inline auto fallocate(int fd, int mode, std::uint64_t offset, std::uint64_t len) {
    return make_op([=](io_uring_sqe* s) { io_uring_prep_fallocate(s, fd, mode, offset, len); });
}
inline auto unlinkat(int dir_fd, const char* path, int flags = 0) {
    return make_op([=](io_uring_sqe* s) { io_uring_prep_unlinkat(s, dir_fd, path, flags); });
}
// flags: renameat2's (RENAME_NOREPLACE: fail with EEXIST rather than replace the target).
inline auto renameat(int old_dir_fd, const char* old_path, int new_dir_fd, const char* new_path,
                     unsigned flags = 0) {
    return make_op([=](io_uring_sqe* s) {
        io_uring_prep_renameat(s, old_dir_fd, old_path, new_dir_fd, new_path, flags);
    });
}
inline auto linkat(int old_dir_fd, const char* old_path, int new_dir_fd, const char* new_path) {
    return make_op([=](io_uring_sqe* s) {
        io_uring_prep_linkat(s, old_dir_fd, old_path, new_dir_fd, new_path, 0);
    });
}
inline auto mkdirat(int dir_fd, const char* path, mode_t mode) {
    return make_op([=](io_uring_sqe* s) { io_uring_prep_mkdirat(s, dir_fd, path, mode); });
}
inline auto statx(int dir_fd, const char* path, int flags, unsigned mask, struct statx* out) {
    return make_op(
        [=](io_uring_sqe* s) { io_uring_prep_statx(s, dir_fd, path, flags, mask, out); });
}
// Cancels the operation whose completion record is `target`; the target then completes with -ECANCELED.
inline auto cancel(completion* target) {
    return make_op([=](io_uring_sqe* s) { io_uring_prep_cancel(s, target, 0); });
}

// Lets the other ready coroutines of this core run first (no system call, no timer).
struct yield_now {
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) const { reactor::current().schedule(h); }
    void await_resume() const noexcept {}
};

// Sleeps for `ms` milliseconds (the result is -ETIME on expiry).
class sleep_awaitable {
public:
    explicit sleep_awaitable(std::int64_t ms) {
        _ts.tv_sec = ms / 1000;
        _ts.tv_nsec = (ms % 1000) * 1000000;
    }
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) {
        _completion.waiter = h;
        io_uring_sqe* sqe = reactor::current().get_sqe();
        io_uring_prep_timeout(sqe, &_ts, 0, 0);
        io_uring_sqe_set_data(sqe, &_completion);
    }
    std::int32_t await_resume() const noexcept { return _completion.result; }

private:
    completion _completion;
    __kernel_timespec _ts{};
};
inline sleep_awaitable sleep_for(std::int64_t ms) { return sleep_awaitable(ms); }

// An operation started now and awaited later, for pipelines (several disk I/Os in flight while the
// coroutine does other work). The object must not move while the operation is in flight, and must be
// awaited before it is destroyed.
class async_op {
public:
    async_op() = default;
    async_op(const async_op&) = delete;
    async_op& operator=(const async_op&) = delete;
    ~async_op() { FJORD_ASSERT(!_in_flight, "async_op destroyed while in flight"); }

    template <class Prep>
    void start(Prep prep) {
        FJORD_ASSERT(!_in_flight);
        _completion = completion{};
        io_uring_sqe* sqe = reactor::current().get_sqe();
        prep(sqe);
        io_uring_sqe_set_data(sqe, &_completion);
        _in_flight = true;
    }
    // Completes the operation at once with `result`, without the kernel: for a simulated file system that
    // does its work synchronously. Awaiting it then returns without suspending.
    void complete_now(std::int32_t result) {
        FJORD_ASSERT(!_in_flight);
        _completion = completion{};
        _completion.result = result;
        _completion.done = true;
        _in_flight = true;
    }
    bool in_flight() const { return _in_flight; }

    bool await_ready() const noexcept { return _completion.done; }
    void await_suspend(std::coroutine_handle<> h) noexcept { _completion.waiter = h; }
    std::int32_t await_resume() noexcept {
        _in_flight = false;
        return _completion.result;
    }

private:
    completion _completion;
    bool _in_flight = false;
};

}  // namespace fjord::io
