#include "store/journal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/checksum.h"
#include "base/log.h"
#include "io/ops.h"
#include "io/reactor.h"

namespace fjord::store {

void frame_record(std::string& out, std::uint64_t seq, std::uint8_t type,
                  std::string_view payload) {
    FJORD_ASSERT(payload.size() <= journal_max_payload_bytes);
    std::size_t start = out.size();
    out.resize(start + journal_record_header_bytes);
    out.append(payload);
    char* h = out.data() + start;
    std::uint32_t len = static_cast<std::uint32_t>(payload.size());
    std::memcpy(h, &len, 4);
    std::memcpy(h + 8, &seq, 8);
    h[16] = static_cast<char>(type);
    std::uint32_t crc = base::crc32c(base::as_bytes(h + 8, 9 + payload.size()));
    std::memcpy(h + 4, &crc, 4);
}

journal_scan scan_journal(
    std::string_view image, std::uint64_t first_seq,
    const std::function<void(std::uint64_t, std::uint8_t, std::string_view)>& visit) {
    journal_scan scan;
    std::uint64_t expected = first_seq;
    std::size_t pos = 0;
    while (image.size() - pos >= journal_record_header_bytes) {
        const char* h = image.data() + pos;
        std::uint32_t len, crc;
        std::uint64_t seq;
        std::memcpy(&len, h, 4);
        std::memcpy(&crc, h + 4, 4);
        std::memcpy(&seq, h + 8, 8);
        if (len > journal_max_payload_bytes ||
            len > image.size() - pos - journal_record_header_bytes)
            break;
        if (base::crc32c(base::as_bytes(h + 8, 9 + len)) != crc) break;
        if (expected != 0 && seq != expected) {
            // A torn write cannot make a whole record with a valid CRC, but a crash can expose old bytes
            // in the last batch's blocks on some file systems: only a break at the very start (the file
            // and the snapshot or journal before it disagree) or one with more than a batch after it is
            // damage; one in the last batch is dropped with the torn tail.
            scan.sequence_break = pos == 0 || image.size() - pos > max_batch_bytes;
            break;
        }
        visit(seq, static_cast<std::uint8_t>(h[16]),
              image.substr(pos + journal_record_header_bytes, len));
        expected = seq + 1;
        scan.last_seq = seq;
        ++scan.records;
        pos += journal_record_header_bytes + len;
    }
    scan.valid_bytes = pos;
    scan.torn_tail = pos != image.size();
    if (scan.torn_tail) {
        // A torn write damages at most the last batch (max_batch_bytes). A well-formed record with a later
        // sequence number beyond that is proof of damage in the middle. Cheap filters first (length in
        // bounds, plausible sequence) so a long garbage tail costs little.
        for (std::size_t at = pos + max_batch_bytes;
             at + journal_record_header_bytes <= image.size(); ++at) {
            const char* h = image.data() + at;
            std::uint32_t len, crc;
            std::uint64_t seq;
            std::memcpy(&len, h, 4);
            std::memcpy(&seq, h + 8, 8);
            if (len > image.size() - at - journal_record_header_bytes) continue;
            if (seq <= scan.last_seq || seq > scan.last_seq + (1ULL << 32)) continue;
            std::memcpy(&crc, h + 4, 4);
            if (base::crc32c(base::as_bytes(h + 8, 9 + len)) == crc) {
                scan.corrupt_before_valid_records = true;
                break;
            }
        }
    }
    return scan;
}

base::result<journal_scan> read_journal(
    file_system& fs, const std::string& path, std::uint64_t first_seq,
    const std::function<void(std::uint64_t, std::uint8_t, std::string_view)>& visit, bool last) {
    auto image = fs.read_file_blocking(path);
    if (!image) return image.as_failure();
    journal_scan scan = scan_journal(*image, first_seq, visit);
    const char* damage = nullptr;
    if (scan.corrupt_before_valid_records)
        damage = "valid records follow";
    else if (scan.sequence_break)
        damage = "the record there has a valid checksum but an unexpected sequence number";
    else if (scan.torn_tail && !last)
        damage = "a later journal holds records, so this one was complete";
    if (damage)
        return base::fail(
            base::errc::data_corrupted,
            path + " is damaged at offset " + std::to_string(scan.valid_bytes) + " (" + damage +
                "): refusing to start rather than drop acknowledged writes (restore the file from "
                "a backup, or move it away to accept the loss)");
    if (scan.torn_tail) {
        LOG_WARN("journal %s: dropping %zu bytes of torn or corrupt tail after %llu records",
                 path.c_str(), image->size() - scan.valid_bytes,
                 static_cast<unsigned long long>(scan.records));
        int fd = fs.open_blocking(path, O_RDWR);
        int rc = fd < 0 ? fd : fs.truncate_blocking(fd, scan.valid_bytes);
        if (rc >= 0) rc = fs.fsync_blocking(fd);
        if (fd >= 0) fs.close_blocking(fd);
        if (rc < 0)
            return base::fail(base::errc::io_error, "truncate " + path + ": " + strerror(-rc));
    }
    return scan;
}

journal::journal(file_system& fs, int fd, std::string path, std::uint64_t offset,
                 std::uint64_t next_seq)
    : _fs(fs),
      _fd(fd),
      _path(std::move(path)),
      _offset(offset),
      _next_seq(next_seq),
      _durable_seq(next_seq - 1) {
    FJORD_ASSERT(next_seq >= 1);
}

journal::~journal() {
    if (_fd >= 0) _fs.close_blocking(_fd);
}

void journal::set_rotation(std::uint64_t rotate_bytes, std::function<io::task<void>()> rotate) {
    _rotate_bytes = rotate_bytes;
    _rotate_at_bytes = rotate_bytes;
    _rotate = std::move(rotate);
}

void journal::defer_next_rotation(std::uint64_t snapshot_bytes) {
    _rotate_at_bytes = std::max(_rotate_at_bytes, _offset + snapshot_bytes);
}

int journal::replace_file(int fd, std::string path) {
    int old = _fd;
    _fd = fd;
    _path = std::move(path);
    _offset = 0;
    _rotate_at_bytes = _rotate_bytes;
    return old;
}

io::task<void> journal::rotate_now() {
    if (_flushing || !_rotate) co_return;  // a flush loop in progress rotates on its own when due
    _flushing = true;
    io::reactor::current().hold();
    co_await _rotate();
    // Records queued during the rotation are flushed by this same loop, into the new file.
    co_await flush_loop();
}

io::task<base::result<void>> journal::append(std::uint8_t type, std::string payload,
                                             std::vector<int> sync_dir_fds,
                                             std::function<void()> on_durable) {
    if (_broken)
        co_return base::fail(base::errc::io_error, "metadata journal failed; restart the server");
    if (payload.size() > journal_max_payload_bytes)
        co_return base::fail(base::errc::metadata_too_large, "metadata record too large");
    // A batch is one write and one fdatasync; it is capped so that a torn write can only damage the
    // last max_batch_bytes of the file (see scan_journal).
    if (_queue.empty() ||
        _queue.back().bytes.size() + journal_record_header_bytes + payload.size() > max_batch_bytes)
        _queue.push_back(batch{{}, {}, {}, _next_seq});
    batch& b = _queue.back();
    b.last_seq = _next_seq;
    frame_record(b.bytes, _next_seq++, type, payload);
    for (int fd : sync_dir_fds)
        if (std::find(b.dirs.begin(), b.dirs.end(), fd) == b.dirs.end()) b.dirs.push_back(fd);
    waiter w{{}, {}, std::move(on_durable), false};
    b.waiters.push_back(&w);
    if (!_flushing) {
        _flushing = true;
        io::reactor::current().hold();
        io::spawn(flush_loop());
    }
    struct suspend_waiter {
        waiter* w;
        // A flush that completes synchronously (a simulated file system) finishes the batch before the
        // appender gets here.
        bool await_ready() const noexcept { return w->done; }
        void await_suspend(std::coroutine_handle<> h) noexcept { w->handle = h; }
        void await_resume() const noexcept {}
    };
    co_await suspend_waiter{&w};
    co_return std::move(w.outcome);
}

io::task<base::result<void>> journal::write_batch(const std::string& bytes,
                                                  const std::vector<int>& dirs) {
    // Directory entries of new data files first: a durable record must never name a file that a crash
    // could make disappear.
    if (_data_dir_failed && _data_dir_failed->load())
        co_return base::fail(base::errc::io_error,
                             "a data directory failed to sync earlier; restart the server");
    std::vector<std::unique_ptr<io::async_op>> syncs;
    for (int fd : dirs) {
        syncs.push_back(std::make_unique<io::async_op>());
        _fs.start_fsync(*syncs.back(), fd, false);
    }
    int dir_error = 0;
    for (auto& op : syncs) {
        io::async_op& pending = *op;
        int rc = co_await pending;
        if (rc < 0) dir_error = rc;
    }
    if (dir_error < 0 && _data_dir_failed) _data_dir_failed->store(true);
    if (dir_error < 0)
        co_return base::fail(base::errc::io_error,
                             std::string("fsync data directory: ") + strerror(-dir_error));
    std::size_t done = 0;
    while (done < bytes.size()) {
        unsigned len = static_cast<unsigned>(std::min<std::size_t>(bytes.size() - done, 1 << 30));
        int rc = co_await _fs.write(_fd, bytes.data() + done, len, _offset + done);
        if (rc <= 0) {
            int err = rc < 0 ? -rc : EIO;
            co_return base::fail(
                err == ENOSPC || err == EDQUOT ? base::errc::storage_full : base::errc::io_error,
                std::string("write journal: ") + strerror(err));
        }
        done += static_cast<std::size_t>(rc);
    }
    int rc = co_await _fs.fsync(_fd, true);
    if (rc < 0)
        co_return base::fail(base::errc::io_error,
                             std::string("fdatasync journal: ") + strerror(-rc));
    co_return base::result<void>{};
}

void journal::finish(waiter* w, const base::result<void>& outcome) {
    w->outcome = outcome;
    w->done = true;
    if (w->handle) io::reactor::current().schedule(w->handle);
}

io::task<void> journal::flush_loop() {
    while (!_queue.empty()) {
        batch b = std::move(_queue.front());
        _queue.pop_front();
        auto outcome = co_await write_batch(b.bytes, b.dirs);
        if (outcome) {
            _offset += b.bytes.size();
            _durable_seq = b.last_seq;
            for (waiter* w : b.waiters)
                if (w->on_durable) w->on_durable();
        } else {
            // Cut the file back to the last durable record so a partial batch can never be replayed, and
            // give the failed batch's sequence numbers to the next one. Blocking here is acceptable: this
            // is a rare failure path. If even that fails, the shard refuses further writes.
            LOG_ERROR("journal %s: %s", _path.c_str(), outcome.err().message.c_str());
            _next_seq = b.first_seq;
            // Batches queued meanwhile were framed with later seqs and never written: they surely failed
            // (callers retry).
            for (batch& later : _queue)
                for (waiter* w : later.waiters) finish(w, outcome);
            _queue.clear();
            if (_fs.truncate_blocking(_fd, _offset) < 0 || _fs.fsync_blocking(_fd) < 0) {
                // The failed batch may still be on disk and be replayed at the next start: its writers
                // must not remove the data its records name.
                _broken = true;
                outcome = base::fail(base::errc::commit_outcome_unknown,
                                     outcome.err().message +
                                         "; the journal could not be cut back, so the "
                                         "change may still appear after a restart");
            }
        }
        for (waiter* w : b.waiters) finish(w, outcome);
        // Not only when the queue is empty: under steady group-commit load it never is, and the file would
        // grow without bound (and recovery read it whole). Batches queued meanwhile wait for the switch.
        // A rotation that failed (its file did not change) is tried again only after another
        // rotate_bytes: each attempt builds the whole snapshot, which must not happen at every batch.
        if (!_broken && _rotate && _rotate_bytes > 0 && _offset >= _rotate_at_bytes) {
            std::string before = _path;
            co_await _rotate();
            if (_path == before) _rotate_at_bytes = _offset + _rotate_bytes;
        }
    }
    _flushing = false;
    io::reactor::current().release();
}

}  // namespace fjord::store
