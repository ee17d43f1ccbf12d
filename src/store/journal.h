#pragma once

// The metadata journal of one shard: an append-only file of checksummed, sequence-numbered records with
// group commit. Records appended while a flush is in progress form the next batch, so one write and one
// fdatasync cover every commit that arrived meanwhile. A record's on_durable callback runs (in journal
// order) once its batch is on stable storage, before its appender resumes; the shard applies index
// updates there, so the in-memory index never shows anything that is not durable.
//
// Record framing (little-endian): u32 payload_bytes | u32 crc32c(seq..payload) | u64 seq | u8 type | payload
// A record is valid only if its CRC matches and its seq is the previous one plus one; recovery stops at the
// first invalid record (a torn tail) and truncates the file there, unless it is damage rather than a torn
// write, and then the server refuses to start: valid records follow more than one batch (max_batch_bytes)
// later, a whole record with a valid CRC carries the wrong sequence number at the start of the file (it
// and the snapshot before it disagree) or more than a batch before its end, or the file is not the last
// one written.
//
// Owned by the core that owns its shard; not thread-safe. Recovery (read_journal) runs at startup, before
// the reactors, with plain blocking I/O.

#include <atomic>
#include <coroutine>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "base/result.h"
#include "io/task.h"
#include "store/file_system.h"

namespace fjord::store {

constexpr std::size_t journal_record_header_bytes = 17;
constexpr std::uint32_t journal_max_payload_bytes = 64 * 1024 * 1024;
// The most one group-commit write covers (a bigger single record is written alone).
constexpr std::size_t max_batch_bytes = 1024 * 1024;

// Frames one record into `out`.
void frame_record(std::string& out, std::uint64_t seq, std::uint8_t type, std::string_view payload);

struct journal_scan {
    std::uint64_t valid_bytes = 0;  // offset just past the last valid record
    std::uint64_t last_seq = 0;     // 0 when no record was found
    std::uint64_t records = 0;
    bool torn_tail = false;  // bytes after valid_bytes were dropped
    // A valid later record follows the first invalid one: that is damage in the middle of the journal,
    // not a torn tail, and dropping the rest would lose acknowledged writes.
    bool corrupt_before_valid_records = false;
    // The scan stopped at a whole record with a valid CRC but an unexpected sequence number, at the start
    // of the image or with more than max_batch_bytes after it (in the last batch it is a torn tail).
    bool sequence_break = false;
};

// Decodes records from an in-memory image of a journal; calls visit(seq, type, payload) for each valid one.
// first_seq is the sequence number the first record must carry (0 = accept any start).
journal_scan scan_journal(
    std::string_view image, std::uint64_t first_seq,
    const std::function<void(std::uint64_t, std::uint8_t, std::string_view)>& visit);

// Reads a journal file, visits its valid records, and truncates a torn tail (startup only). A file that later
// journals follow (`last` false) was complete when its successor was started, so anything but valid
// records in it is damage. Damage is refused with data_corrupted, before anything is truncated.
base::result<journal_scan> read_journal(
    file_system& fs, const std::string& path, std::uint64_t first_seq,
    const std::function<void(std::uint64_t, std::uint8_t, std::string_view)>& visit,
    bool last = true);

class journal {
public:
    // fd: the journal file opened for writing (through fs); offset: where valid data ends; next_seq: the
    // next seq.
    journal(file_system& fs, int fd, std::string path, std::uint64_t offset,
            std::uint64_t next_seq);
    ~journal();
    journal(const journal&) = delete;
    journal& operator=(const journal&) = delete;

    // Appends a record and returns once it is durable. sync_dir_fds: directories whose entries must be
    // durable first (new data files). on_durable runs in journal order before this returns.
    io::task<base::result<void>> append(std::uint8_t type, std::string payload,
                                        std::vector<int> sync_dir_fds,
                                        std::function<void()> on_durable);

    std::uint64_t size_bytes() const { return _offset; }
    std::uint64_t next_seq() const { return _next_seq; }
    // The sequence number of the last durable record (every on_durable up to it has run); records after it
    // are queued, not yet written. A snapshot taken between batches holds exactly the state up to here.
    std::uint64_t durable_seq() const { return _durable_seq; }
    const std::string& path() const { return _path; }
    bool idle() const { return !_flushing && _queue.empty(); }
    // A failed batch could not be cut back: the shard's in-memory state is no longer authoritative (a
    // write that failed may reappear at the next start), so it must not answer anything as done.
    bool broken() const { return _broken; }
    // Called between batches once the file has passed rotate_bytes, whether or not more batches are queued
    // (under steady load the queue never empties): the shard snapshots the state up to durable_seq() and
    // switches files; the queued batches then go to the new file. After a rotation that failed, the next
    // try waits until the file has grown by another rotate_bytes.
    void set_rotation(std::uint64_t rotate_bytes, std::function<io::task<void>()> rotate);
    // A flag every journal of the engine shares: set by the first journal whose fsync of a data directory
    // fails. After such a failure the directory entries that were not yet durable may be lost for good
    // (a later fsync that succeeds does not bring them back), whichever shard's files they are, so from
    // then on no journal commits anything that may name them: every batch fails until the restart.
    void share_data_dir_failure(std::atomic<bool>* failed) { _data_dir_failed = failed; }
    // Switches to a new file (used by rotation); the old fd is closed by the caller.
    int replace_file(int fd, std::string path);
    // After a rotation that wrote a snapshot of `snapshot_bytes`: the next one waits until the new file
    // holds at least that much (and rotate_bytes). A snapshot is the whole state, so rewriting it every
    // rotate_bytes of journal would cost more writes than the journal itself once the state outgrows
    // rotate_bytes (small objects inline make it large); this way each journal byte pays for at most one
    // snapshot byte, and recovery reads at most twice the state.
    void defer_next_rotation(std::uint64_t snapshot_bytes);
    // Runs the rotation now, between batches: appends that arrive meanwhile wait for the next batch.
    io::task<void> rotate_now();

private:
    struct waiter {
        std::coroutine_handle<> handle;  // set once the appender suspends
        base::result<void> outcome;
        std::function<void()> on_durable;
        bool done = false;  // the batch finished (possibly before the appender suspended)
    };
    static void finish(waiter* w, const base::result<void>& outcome);
    io::task<void> flush_loop();
    io::task<base::result<void>> write_batch(const std::string& bytes,
                                             const std::vector<int>& dirs);

    file_system& _fs;
    std::atomic<bool>* _data_dir_failed = nullptr;
    int _fd;
    std::string _path;
    std::uint64_t _offset;
    std::uint64_t _next_seq;
    std::uint64_t _durable_seq;
    struct batch {
        std::string bytes;
        std::vector<waiter*> waiters;
        std::vector<int> dirs;
        std::uint64_t first_seq = 0;
        std::uint64_t last_seq = 0;
    };
    std::deque<batch> _queue;  // the batch being filled is the last
    bool _flushing = false;
    bool _broken = false;
    std::uint64_t _rotate_bytes = 0;
    std::uint64_t _rotate_at_bytes = 0;  // the next rotation is tried once the file is this long
    std::function<io::task<void>()> _rotate;
};

}  // namespace fjord::store
