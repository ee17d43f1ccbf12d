#pragma once

// The reactor: one per core, pinned to it, owning one io_uring. Everything a core does happens on its
// reactor thread: coroutines are resumed from io_uring completions or from the ready queue, cross-core
// messages are drained from per-sender single-producer queues. No blocking system call runs here.
//
// Lifecycle: constructed on the thread that runs it (the ring is created single-issuer), run() loops until
// request_stop() and until every operation it submitted has completed, then returns.

#include <liburing.h>

#include <atomic>
#include <barrier>
#include <coroutine>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/result.h"

namespace fjord::io {

// The completion record of one io_uring operation. It lives inside the awaiting coroutine's frame (or in
// an object that outlives the operation), so submitting an I/O allocates nothing. user_data points to it.
struct completion {
    std::coroutine_handle<> waiter;  // resumed when the CQE arrives, if set
    std::int32_t result = 0;
    std::uint32_t flags = 0;
    bool done = false;
};

struct reactor_options {
    unsigned ring_entries = 1024;
    std::size_t inbox_capacity = 4096;  // messages queued from one sender core before it must wait
};

class reactor;

// A unit of work posted from one core to another. run() executes on the target core; then, if it was
// allocated for the trip (owned_by_queue), the message is deleted there. A message that lives in a
// waiting coroutine's frame (a cross-core call's request and reply) is not owned: posting it allocates
// nothing, and it is not touched after run(), which may end the frame that holds it.
// The cross-core queues' overflow over the process's life (fjord_cross_core_overflow_* in /metrics):
// messages that found their queue full and waited in the sender's overflow list, and the longest any
// list has been. Any thread.
struct cross_core_figures {
    std::uint64_t overflowed_total = 0;
    std::uint64_t overflow_peak = 0;
};
cross_core_figures cross_core_overflow();

struct message {
    explicit message(bool owned = true) : owned_by_queue(owned) {}
    virtual ~message() = default;
    virtual void run() = 0;
    const bool owned_by_queue;
};

// Bounded single-producer single-consumer ring of message pointers (one per ordered pair of cores).
class spsc_queue {
public:
    explicit spsc_queue(std::size_t capacity);
    bool push(message* m);  // producer side; false when full
    message* pop();         // consumer side; nullptr when empty
private:
    std::vector<message*> _slots;
    std::size_t _mask;
    alignas(64) std::atomic<std::size_t> _head{0};  // next slot to read (consumer)
    alignas(64) std::atomic<std::size_t> _tail{0};  // next slot to write (producer)
};

class reactor_group;

class reactor {
public:
    reactor(reactor_group& group, unsigned core, const reactor_options& options);
    ~reactor();
    reactor(const reactor&) = delete;
    reactor& operator=(const reactor&) = delete;

    static reactor& current();
    static bool on_reactor_thread();
    unsigned core() const { return _core; }
    reactor_group& group() { return _group; }
    io_uring* ring() { return &_ring; }

    // Returns an SQE, flushing the submission queue first when fewer than `needed` slots are free, so that
    // linked SQEs always land in one submission.
    io_uring_sqe* get_sqe(unsigned needed = 1);
    // Resumes h from the run loop (not inline).
    void schedule(std::coroutine_handle<> h) { _ready.push_back(h); }
    // Posts a message to core `target` (which may be this core). Never blocks: if the queue is full the
    // message waits in a local overflow list and is retried on every loop iteration, in order. The list
    // is bounded by the messages this core has outstanding: every message in production is a cross-core
    // call's request or reply, and the coroutine that sent it is suspended until the reply, so a core
    // never has more in its list than it has coroutines waiting on other cores (which the connection
    // limit bounds). Fire-and-forget posts (post_to) must be bounded by their caller.
    void post(unsigned target, message* m);
    // Messages waiting in the overflow list now (for tests and metrics).
    std::size_t overflowed() const { return _overflow.size(); }

    void run();
    // One turn of the loop: runs what is ready, takes messages, submits, reaps. With may_block, waits
    // for a completion when there is nothing else to do. Returns true once stopped with nothing left.
    bool turn(bool may_block);
    // Thread-safe: asks the reactor to stop; stop callbacks run on the reactor thread.
    void request_stop();
    bool stopping() const { return _stopping; }
    // Called on the reactor thread when a stop is requested (e.g. to cancel accepts and idle reads).
    void on_stop(std::function<void()> callback) { _stop_callbacks.push_back(std::move(callback)); }
    // Work that keeps the loop alive after stop until it finishes (connections, flushes).
    void hold() { ++_holds; }
    void release() { --_holds; }

    // Sentinel user_data for CQEs nobody waits for (linked timeouts, cancels, wake-ups).
    static constexpr std::uint64_t ignored_user_data = 1;

private:
    friend class reactor_group;
    void wake();  // thread-safe
    void arm_wakeup_read();
    void drain_inboxes();
    void reap_completions();
    void run_ready();

    reactor_group& _group;
    unsigned _core;
    io_uring _ring{};
    int _wake_fd = -1;
    std::uint64_t _wake_value = 0;
    completion _wake_completion;
    std::atomic<bool> _wake_pending{false};
    std::atomic<bool> _stop_requested{false};
    bool _stopping = false;
    int _holds = 0;
    std::deque<std::coroutine_handle<>> _ready;
    std::vector<std::unique_ptr<spsc_queue>> _inboxes;  // one per sender core
    std::vector<std::pair<unsigned, message*>> _overflow;
    std::vector<std::function<void()>> _stop_callbacks;
};

// Checks that the kernel's io_uring supports every operation Fjord uses. Returns a readable error naming
// the first missing one.
base::result<void> probe_kernel_features();

// Owns N reactors and their threads. Thread i is pinned to CPU i (when that CPU exists).
class reactor_group {
public:
    explicit reactor_group(unsigned cores, reactor_options options = {});
    ~reactor_group();
    unsigned size() const { return _cores; }
    reactor& at(unsigned core) { return *_reactors[core]; }

    // Runs `start(core)` on every reactor thread once the reactor exists, then the loops; blocks until all
    // loops return (after stop()).
    void run(std::function<void(unsigned)> start);
    // The deterministic simulation's run: every reactor on the calling thread, one turn at a time,
    // the next one to turn chosen by pick(n) (an index below n into the reactors still running), so
    // that a seed fixes how the cores interleave. Cross-core messages travel the same queues as in
    // run(). Never blocks: what the reactors wait for must be simulated too (no real I/O).
    void run_simulated(std::function<void(unsigned)> start, std::function<unsigned(unsigned)> pick);
    void stop();  // thread-safe

private:
    friend class reactor;
    unsigned _cores;
    reactor_options _options;
    std::vector<reactor*> _reactors;  // filled by each thread before the start barrier
};

}  // namespace fjord::io
