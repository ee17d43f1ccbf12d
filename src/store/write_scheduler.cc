#include "store/write_scheduler.h"

#include <algorithm>

#include "base/assert.h"
#include "base/units.h"
#include "io/reactor.h"

namespace fjord::store {

write_scheduler::write_scheduler(file_system& fs, std::size_t drive_count,
                                 std::size_t slots_per_drive, std::size_t write_bytes)
    : _fs(fs), _slots_per_drive(slots_per_drive), _write_bytes(write_bytes), _drives(drive_count) {
    FJORD_ASSERT(drive_count >= 1 && slots_per_drive >= 1);
    FJORD_ASSERT(write_bytes >= base::direct_io_alignment_bytes &&
                 write_bytes % base::direct_io_alignment_bytes == 0);
}

write_scheduler::~write_scheduler() {
    for (const auto& d : _drives)
        FJORD_ASSERT(d.in_flight == 0 && d.waiting.empty(),
                     "write_scheduler destroyed with writes pending");
}

std::size_t write_scheduler::slots_per_core(const write_scheduler_options& options,
                                            unsigned cores) {
    FJORD_ASSERT(cores >= 1);
    return std::max<std::size_t>(1, options.writes_in_flight_per_drive / cores);
}

void write_scheduler::start_write(scheduled_write& w, std::uint32_t drive, int fd,
                                  const std::byte* buf, unsigned len, std::uint64_t offset,
                                  int buf_index) {
    FJORD_ASSERT(!w._in_flight && len > 0);
    FJORD_ASSERT(drive < _drives.size());
    w._result = 0;
    w._waiter = nullptr;
    w._in_flight = true;
    w._pieces_left = (len + _write_bytes - 1) / _write_bytes;
    drive_queue& q = _drives[drive];
    for (unsigned done = 0; done < len;) {
        auto n = static_cast<unsigned>(std::min<std::size_t>(_write_bytes, len - done));
        q.waiting.push_back(piece{&w, fd, buf + done, n, offset + done, buf_index});
        done += n;
    }
    pump(drive);
}

void write_scheduler::pump(std::uint32_t drive) {
    drive_queue& q = _drives[drive];
    if (q.pumping) return;
    q.pumping = true;
    while (q.in_flight < _slots_per_drive && !q.waiting.empty()) {
        piece p = q.waiting.front();
        q.waiting.pop_front();
        ++q.in_flight;
        ++_stats.pieces_started;
        _stats.peak_in_flight = std::max(_stats.peak_in_flight, q.in_flight);
        io::spawn(run(drive, p));
    }
    q.pumping = false;
}

io::task<void> write_scheduler::run(std::uint32_t drive, piece p) {
    // A registered buffer stays registered for any part of it, so the piece keeps the buffer's index.
    int rc = co_await _fs.write(p.fd, p.buf, p.len, p.offset, p.buf_index);
    --_drives[drive].in_flight;
    finish(p, rc);
    pump(drive);
}

void write_scheduler::finish(const piece& p, int rc) {
    scheduled_write& w = *p.owner;
    if (rc < 0) {
        if (w._result >= 0) w._result = rc;
    } else if (w._result >= 0) {
        w._result += rc;
    }
    FJORD_ASSERT(w._pieces_left > 0);
    if (--w._pieces_left > 0 || !w._waiter) return;
    auto h = w._waiter;
    w._waiter = nullptr;
    io::reactor::current().schedule(h);
}

}  // namespace fjord::store
