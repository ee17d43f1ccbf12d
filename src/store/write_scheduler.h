#pragma once

// The per-core scheduler of data-file writes: it bounds the writes in flight to each drive, across every
// request on the core, and cuts each buffer's write into pieces of at most `write_bytes`.
//
// Why: each request used to keep its own pipeline of writes, so the device queue grew with the number of
// requests (eight 64 MiB PUTs: 32 writes of 1 MiB). A device has a queue shape it serves best, and more or
// larger writes in flight can lower its throughput rather than raise it: on the virtual disk of
// docs/benchmarks.md with buffers on 4 KiB pages, `fjord bench disk --files 8` wrote faster at depth
// 8 x 256 KiB than at 32 x 1 MiB (on huge pages, io/io_memory.h, 1 MiB writes are the faster ones).
// The budget keeps the device at one chosen shape however many requests write. Requests keep their buffers
// (the socket keeps filling them); only the writes to the device wait here.
//
// Lifecycle and concurrency: one scheduler per core (the engine creates it in attach_core), used only on
// that core's reactor; a scheduled_write belongs to the coroutine that started it and must be awaited
// before it is destroyed. Pieces start in the order they were queued (FIFO across requests).
//
// Bounds: at most `slots_per_drive` pieces in flight per drive. Queued pieces each belong to a buffer a
// writer holds, so the queue is bounded by the core's buffer pool. A slot is held only by a write in flight
// and is released when the write completes, never while waiting for anything else, so waiting for a slot
// cannot deadlock with waiting for a buffer.

#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "io/task.h"
#include "store/file_system.h"

namespace fjord::store {

struct write_scheduler_options {
    // Data writes in flight per drive, all cores together; each core gets an equal share, at least one.
    // The default is the best shape `fjord bench disk` found on the benchmark machine (depth 8).
    std::size_t writes_in_flight_per_drive = 8;
    // Largest single write to a data file; a multiple of 4 KiB. Buffers larger than this are written in
    // several pieces. A whole 1 MiB buffer by default: on huge-page buffers (io/io_memory.h) it is one
    // segment, and PUT wrote about 1.2x faster in 1 MiB writes than in 256 KiB ones (docs/benchmarks.md).
    std::size_t write_bytes = 1024 * 1024;
};

// A write handed to a write_scheduler; awaitable like io::async_op. Awaiting it gives the bytes written
// (less than asked when a piece was short) or the first -errno.
class scheduled_write {
public:
    scheduled_write() = default;
    scheduled_write(const scheduled_write&) = delete;
    scheduled_write& operator=(const scheduled_write&) = delete;
    ~scheduled_write() { FJORD_ASSERT(!_in_flight, "scheduled_write destroyed while in flight"); }

    bool in_flight() const { return _in_flight; }
    bool await_ready() const noexcept { return _pieces_left == 0; }
    void await_suspend(std::coroutine_handle<> h) noexcept { _waiter = h; }
    int await_resume() noexcept {
        _in_flight = false;
        return _result;
    }

private:
    friend class write_scheduler;
    int _result = 0;
    std::size_t _pieces_left = 0;
    bool _in_flight = false;
    std::coroutine_handle<> _waiter;
};

struct write_scheduler_stats {
    std::uint64_t pieces_started = 0;
    std::size_t peak_in_flight = 0;  // largest number of pieces in flight to one drive
};

class write_scheduler {
public:
    write_scheduler(file_system& fs, std::size_t drive_count, std::size_t slots_per_drive,
                    std::size_t write_bytes);
    write_scheduler(const write_scheduler&) = delete;
    write_scheduler& operator=(const write_scheduler&) = delete;
    ~write_scheduler();

    // A core's share of a per-drive budget shared by `cores` cores.
    static std::size_t slots_per_core(const write_scheduler_options& options, unsigned cores);

    // Queues [buf, buf + len) for writing at `offset` of fd on `drive`; `w` completes when every piece has.
    // buf, len and offset must be 4 KiB aligned (O_DIRECT); the buffer must stay in place until then.
    void start_write(scheduled_write& w, std::uint32_t drive, int fd, const std::byte* buf,
                     unsigned len, std::uint64_t offset, int buf_index);

    std::size_t in_flight(std::uint32_t drive) const { return _drives.at(drive).in_flight; }
    std::size_t queued(std::uint32_t drive) const { return _drives.at(drive).waiting.size(); }
    std::size_t slots_per_drive() const { return _slots_per_drive; }
    const write_scheduler_stats& stats() const { return _stats; }

private:
    struct piece {
        scheduled_write* owner;
        int fd;
        const std::byte* buf;
        unsigned len;
        std::uint64_t offset;
        int buf_index;
    };
    struct drive_queue {
        std::size_t in_flight = 0;
        std::deque<piece> waiting;
        bool pumping = false;
    };
    // Starts waiting pieces while slots are free. Not reentrant: a write that completes at once (a
    // simulated file system) calls it again from inside, which only returns, and the outer loop goes on.
    void pump(std::uint32_t drive);
    io::task<void> run(std::uint32_t drive, piece p);
    static void finish(const piece& p, int rc);

    file_system& _fs;
    std::size_t _slots_per_drive;
    std::size_t _write_bytes;
    std::vector<drive_queue> _drives;
    write_scheduler_stats _stats;
};

}  // namespace fjord::store
