#include "io/reactor.h"

#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "base/log.h"

namespace fjord::io {

namespace {
thread_local reactor* t_current = nullptr;

std::size_t round_up_pow2(std::size_t n) {
    std::size_t p = 1;
    while (p < n) p <<= 1;
    return p;
}
}  // namespace

// ---- spsc_queue ----

spsc_queue::spsc_queue(std::size_t capacity)
    : _slots(round_up_pow2(capacity)), _mask(_slots.size() - 1) {}

bool spsc_queue::push(message* m) {
    std::size_t tail = _tail.load(std::memory_order_relaxed);
    if (tail - _head.load(std::memory_order_acquire) == _slots.size()) return false;
    _slots[tail & _mask] = m;
    _tail.store(tail + 1, std::memory_order_release);
    return true;
}

message* spsc_queue::pop() {
    std::size_t head = _head.load(std::memory_order_relaxed);
    if (head == _tail.load(std::memory_order_acquire)) return nullptr;
    message* m = _slots[head & _mask];
    _head.store(head + 1, std::memory_order_release);
    return m;
}

// ---- reactor ----

reactor::reactor(reactor_group& group, unsigned core, const reactor_options& options)
    : _group(group), _core(core) {
    io_uring_params params{};
    params.flags =
        IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_DEFER_TASKRUN;
    int rc = io_uring_queue_init_params(options.ring_entries, &_ring, &params);
    if (rc == -EINVAL) {  // older kernel: plain ring
        params = io_uring_params{};
        rc = io_uring_queue_init_params(options.ring_entries, &_ring, &params);
    }
    FJORD_ASSERT(rc == 0, "io_uring_queue_init failed (see probe_kernel_features)");
    _wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    FJORD_ASSERT(_wake_fd >= 0);
    for (unsigned i = 0; i < group.size(); ++i)
        _inboxes.push_back(std::make_unique<spsc_queue>(options.inbox_capacity));
}

reactor::~reactor() {
    io_uring_queue_exit(&_ring);
    if (_wake_fd >= 0) ::close(_wake_fd);
}

reactor& reactor::current() {
    FJORD_ASSERT(t_current != nullptr, "not on a reactor thread");
    return *t_current;
}

bool reactor::on_reactor_thread() { return t_current != nullptr; }

io_uring_sqe* reactor::get_sqe(unsigned needed) {
    if (io_uring_sq_space_left(&_ring) < needed) io_uring_submit(&_ring);
    io_uring_sqe* sqe = io_uring_get_sqe(&_ring);
    FJORD_ASSERT(sqe != nullptr, "submission queue full after flush");
    return sqe;
}

namespace {
std::atomic<std::uint64_t> overflowed_total{0};
std::atomic<std::uint64_t> overflow_peak{0};

void count_overflow(std::size_t length) {
    overflowed_total.fetch_add(1, std::memory_order_relaxed);
    std::uint64_t peak = overflow_peak.load(std::memory_order_relaxed);
    while (length > peak &&
           !overflow_peak.compare_exchange_weak(peak, length, std::memory_order_relaxed)) {}
}
}  // namespace

cross_core_figures cross_core_overflow() {
    return {overflowed_total.load(std::memory_order_relaxed),
            overflow_peak.load(std::memory_order_relaxed)};
}

void reactor::post(unsigned target, message* m) {
    reactor& to = _group.at(target);
    if (!_overflow.empty() || !to._inboxes[_core]->push(m)) {
        _overflow.emplace_back(target, m);
        count_overflow(_overflow.size());
        return;
    }
    if (&to != this) {
        if (!to._wake_pending.exchange(true)) to.wake();
    }
}

void reactor::wake() {
    std::uint64_t one = 1;
    ssize_t n = ::write(_wake_fd, &one, sizeof one);
    (void)n;  // EAGAIN means the counter is already non-zero: the reactor will wake anyway
}

void reactor::request_stop() {
    _stop_requested.store(true);
    _wake_pending.store(true);
    wake();
}

void reactor::arm_wakeup_read() {
    _wake_completion = completion{};
    io_uring_sqe* sqe = get_sqe();
    io_uring_prep_read(sqe, _wake_fd, &_wake_value, sizeof _wake_value, 0);
    io_uring_sqe_set_data(sqe, &_wake_completion);
}

void reactor::drain_inboxes() {
    if (!_overflow.empty()) {
        auto pending = std::move(_overflow);
        _overflow.clear();
        for (auto& [target, m] : pending) post(target, m);
    }
    for (auto& inbox : _inboxes) {
        // Bounded per iteration so one busy sender cannot starve completions.
        for (int i = 0; i < 256; ++i) {
            message* m = inbox->pop();
            if (!m) break;
            const bool owned = m->owned_by_queue;  // run() may end the frame holding an unowned one
            m->run();
            if (owned) delete m;
        }
    }
}

void reactor::run_ready() {
    // Only what is ready now: coroutines scheduled while running wait for the next iteration.
    std::size_t n = _ready.size();
    for (std::size_t i = 0; i < n; ++i) {
        auto h = _ready.front();
        _ready.pop_front();
        h.resume();
    }
}

void reactor::reap_completions() {
    io_uring_cqe* cqe;
    unsigned head;
    unsigned count = 0;
    bool rearm = false;
    io_uring_for_each_cqe(&_ring, head, cqe) {
        ++count;
        std::uint64_t data = cqe->user_data;
        if (data == ignored_user_data || data == 0) continue;
        auto* c = reinterpret_cast<completion*>(data);
        if (c == &_wake_completion) {
            rearm = true;
            continue;
        }
        c->result = cqe->res;
        c->flags = cqe->flags;
        c->done = true;
        if (c->waiter) _ready.push_back(c->waiter);
    }
    io_uring_cq_advance(&_ring, count);
    if (rearm) arm_wakeup_read();
}

void reactor::run() {
    t_current = this;
    base::set_log_core(static_cast<int>(_core));
    arm_wakeup_read();
    while (!turn(true)) {}
    io_uring_submit(&_ring);
    t_current = nullptr;
}

bool reactor::turn(bool may_block_allowed) {
    if (_stop_requested.load(std::memory_order_relaxed) && !_stopping) {
        _stopping = true;
        for (auto& callback : _stop_callbacks) callback();
    }
    run_ready();
    drain_inboxes();
    if (_stopping && _holds == 0 && _ready.empty() && _overflow.empty()) return true;
    bool may_block = may_block_allowed && _ready.empty() && _overflow.empty();
    if (may_block) {
        // Publish "asleep" before the last look at the inboxes, so a sender either sees the flag clear
        // (and writes the eventfd) or its message is found by this drain.
        _wake_pending.store(false);
        drain_inboxes();
        bool unhandled_stop = _stop_requested.load() && !_stopping;
        may_block = _ready.empty() && _overflow.empty() && !unhandled_stop;
    }
    int rc =
        may_block ? io_uring_submit_and_wait(&_ring, 1) : io_uring_submit_and_get_events(&_ring);
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY && rc != -ETIME)
        LOG_ERROR("io_uring_submit failed: %s", strerror(-rc));
    reap_completions();
    return false;
}

// ---- reactor_group ----

reactor_group::reactor_group(unsigned cores, reactor_options options)
    : _cores(cores), _options(options), _reactors(cores, nullptr) {
    FJORD_ASSERT(cores >= 1 && cores <= 256);
}

reactor_group::~reactor_group() = default;

void reactor_group::run(std::function<void(unsigned)> start) {
    std::barrier ready(static_cast<std::ptrdiff_t>(_cores));
    std::vector<std::thread> threads;
    unsigned cpus = std::thread::hardware_concurrency();
    for (unsigned i = 0; i < _cores; ++i) {
        threads.emplace_back([this, i, cpus, &ready, &start] {
            if (i < cpus) {
                cpu_set_t set;
                CPU_ZERO(&set);
                CPU_SET(i, &set);
                pthread_setaffinity_np(pthread_self(), sizeof set, &set);
            }
            base::set_log_core(static_cast<int>(i));
            auto r = std::make_unique<reactor>(*this, i, _options);
            _reactors[i] = r.get();
            ready.arrive_and_wait();
            t_current = r.get();
            start(i);
            r->run();
            ready.arrive_and_wait();  // no reactor is destroyed while another may still post to it
            _reactors[i] = nullptr;
        });
    }
    for (auto& t : threads) t.join();
}

void reactor_group::run_simulated(std::function<void(unsigned)> start,
                                  std::function<unsigned(unsigned)> pick) {
    std::vector<std::unique_ptr<reactor>> owned;
    for (unsigned i = 0; i < _cores; ++i) {
        owned.push_back(std::make_unique<reactor>(*this, i, _options));
        _reactors[i] = owned.back().get();
    }
    for (unsigned i = 0; i < _cores; ++i) {
        t_current = _reactors[i];
        base::set_log_core(static_cast<int>(i));
        start(i);
    }
    std::vector<unsigned> running(_cores);
    for (unsigned i = 0; i < _cores; ++i) running[i] = i;
    while (!running.empty()) {
        std::size_t at = pick(static_cast<unsigned>(running.size()));
        FJORD_ASSERT(at < running.size());
        reactor* r = _reactors[running[at]];
        t_current = r;
        base::set_log_core(static_cast<int>(r->core()));
        if (r->turn(false)) {
            io_uring_submit(&r->_ring);
            running.erase(running.begin() + static_cast<std::ptrdiff_t>(at));
        }
    }
    t_current = nullptr;
    for (unsigned i = 0; i < _cores; ++i) _reactors[i] = nullptr;
}

void reactor_group::stop() {
    for (reactor* r : _reactors)
        if (r) r->request_stop();
}

// ---- kernel probe ----

base::result<void> probe_kernel_features() {
    io_uring_probe* probe = io_uring_get_probe();
    if (!probe)
        return base::fail(base::errc::unsupported_feature,
                          "io_uring is not available in this kernel");
    struct {
        int op;
        const char* name;
    } required[] = {
        {IORING_OP_READ, "READ"},
        {IORING_OP_WRITE, "WRITE"},
        {IORING_OP_READ_FIXED, "READ_FIXED"},
        {IORING_OP_WRITE_FIXED, "WRITE_FIXED"},
        {IORING_OP_SEND, "SEND"},
        {IORING_OP_RECV, "RECV"},
        {IORING_OP_ACCEPT, "ACCEPT"},
        {IORING_OP_OPENAT, "OPENAT"},
        {IORING_OP_CLOSE, "CLOSE"},
        {IORING_OP_STATX, "STATX"},
        {IORING_OP_FALLOCATE, "FALLOCATE"},
        {IORING_OP_RENAMEAT, "RENAMEAT"},
        {IORING_OP_UNLINKAT, "UNLINKAT"},
        {IORING_OP_FSYNC, "FSYNC"},
        {IORING_OP_TIMEOUT, "TIMEOUT"},
        {IORING_OP_LINK_TIMEOUT, "LINK_TIMEOUT"},
        {IORING_OP_ASYNC_CANCEL, "ASYNC_CANCEL"},
        {IORING_OP_MKDIRAT, "MKDIRAT"},
        {IORING_OP_SENDMSG, "SENDMSG"},
        {IORING_OP_LINKAT, "LINKAT"},
    };
    for (auto& r : required) {
        if (!io_uring_opcode_supported(probe, r.op)) {
            io_uring_free_probe(probe);
            return base::fail(base::errc::unsupported_feature,
                              std::string("the kernel's io_uring lacks IORING_OP_") + r.name +
                                  " (Fjord needs Linux 5.19 or newer)");
        }
    }
    io_uring_free_probe(probe);
    return {};
}

}  // namespace fjord::io
