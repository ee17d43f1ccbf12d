#pragma once

// The access log: one JSON line per request (off unless --access-log names a file, or - for stderr).
//
// A line: {"time":"2026-12-01T09:00:00.123Z","remote":"127.0.0.1:41234","access_key":"AKIA...",
// "operation":"GetObject","bucket":"b","key":"k","status":200,"bytes_in":0,"bytes_out":1048862,
// "duration_us":812,"request_id":"00187A..."}. bytes_in counts the request body as received, bytes_out
// the whole response (head and body). It never holds a query string, header, signature or secret: only
// the fields above, each escaped as JSON (control characters as \u00XX).
//
// Writing never blocks a reactor: each core appends its lines to its own buffer and keeps at most one
// io_uring write of that buffer in flight; lines that arrive meanwhile go out with the next write (as
// the journal's group commit). Every write holds whole lines (at most 1 MiB to a file, PIPE_BUF to a
// pipe or terminal, where only that much is atomic), so the lines of several cores never mix. A core whose buffer reaches max_pending_bytes (the disk is not keeping up)
// drops lines and counts them; a warning says how many, at most once a minute. At shutdown each core's
// last write finishes before its reactor stops.
//
// Threading: one object for the process; each core touches only its own slot.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "io/task.h"

namespace fjord::s3 {

struct access_entry {
    std::int64_t time_ms =
        0;  // Unix time the server began to handle the request (its head complete)
    std::string_view remote;
    std::string_view access_key;  // empty when the request was not authenticated
    std::string_view operation;   // "GetObject", ...; "-" for what is no S3 operation
    std::string_view bucket;
    std::string_view key;
    int status = 0;
    std::uint64_t bytes_in = 0;
    std::uint64_t bytes_out = 0;
    std::int64_t duration_us = 0;
    std::string_view request_id;
};

class access_log {
public:
    // fd: a file opened for appending (O_APPEND), or 2 for stderr; it must outlive the log.
    access_log(int fd, unsigned cores, std::size_t max_pending_bytes = 4 * 1024 * 1024);
    access_log(const access_log&) = delete;
    access_log& operator=(const access_log&) = delete;

    // On a reactor thread: queues the line and starts this core's write if none is in flight.
    void record(const access_entry& entry);
    // Lines dropped so far on this core because its buffer was full.
    std::uint64_t dropped_here() const;

    // The line for an entry (exposed for tests).
    static std::string format(const access_entry& entry);

private:
    struct alignas(64) per_core {  // one cache line apart: each core writes only its own
        std::string pending;
        bool writing = false;
        std::uint64_t dropped = 0;
        std::int64_t last_warning_ms = 0;
    };
    io::task<void> drain(per_core* slot);

    int _fd;
    std::size_t _max_pending_bytes;
    // Lines go out in writes of whole lines, at most this long (or one line)
    std::size_t _max_write_bytes;
    std::vector<per_core> _cores;
};

}  // namespace fjord::s3
