#pragma once

// Spare data files: the data files of replaced and deleted objects, kept (renamed into DIR/spare) instead of
// removed, so that a later write of about the same size overwrites them in place.
//
// Why: a new data file is fresh space. On the benchmark machine's disk (docs/benchmarks.md) writing fresh
// space is 10-35% slower than overwriting written space (the file system converts unwritten extents as
// writes complete, and a thin virtual disk allocates on first write), and removing a file discards its
// blocks (the file system is mounted with `discard`): a checkpoint job that overwrites its files paid both
// on every PUT. A reused file is written space: the write is an overwrite and nothing is discarded.
//
// Safety. A file is kept only when nothing else can reach its bytes:
// - its last name is gone: it is renamed away first, then kept only if its link count is 1 (a server-side
//   copy shares data by hard links, so another object may still name it);
// - no reader has it open (drive_set::reads(): readers pin a file before opening it, see open_reads);
// - the record that referred to it is durable (callers reclaim only after a commit, as before).
// A reused file is renamed to the new object's name before it is opened; the writer overwrites it from
// the start, and its footer sits right after the new size, so bytes past it (the old object's, when the
// spare was larger) are never read. Spares are removed at the next start (drive.h).
//
// Bounds: at most `bytes_per_drive` of spares per drive (the oldest go first; none kept longer than
// `idle_ms`), only files of segments of at
// least `min_segment_bytes` (small files gain nothing), and a spare is taken only by a write that fits it
// closely (larger by at most the larger of 1/8 and `min_segment_bytes`).
//
// A full drive: a data file that cannot be preallocated frees the drive's spares and tries again
// (object_writer::open); any other write that runs out of space (a write of unknown size, the journal, a
// link) frees them when it fails (object_writer::discard, and the S3 layer for every InsufficientStorage
// answer), so that a retry finds the space. After that the drive keeps no spares for a while
// (full_cooldown_ms): objects deleted to make room then free their space at once.
//
// Threading: one per engine, shared by every core: the lists are guarded by a mutex, held only to pick or
// add an entry; the file operations run on the calling core's reactor.

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "io/task.h"
#include "store/drive.h"
#include "store/object.h"

namespace fjord::store {

struct spare_file_options {
    std::uint64_t bytes_per_drive =
        1024ULL * 1024 * 1024;  // below min_segment_bytes: remove freed files at once
    // Data files of smaller segments are never kept (they gain little), so their readers need not pin them.
    // The engine hands this to its drive_set (drive_set::spare_min_segment_bytes), which readers consult.
    std::uint64_t min_segment_bytes = 1024ULL * 1024;
    std::int64_t full_cooldown_ms = 60'000;
    // Spares no write has taken for this long are removed by expire_idle (the server calls it every
    // minute), so space held for a workload that stopped is given back.
    std::int64_t idle_ms = 600'000;
};

struct spare_file_stats {
    std::uint64_t kept = 0;    // freed files kept as spares
    std::uint64_t reused = 0;  // spares taken by a write (renamed to its object id)
    std::uint64_t removed =
        0;  // freed files removed (too small, shared, being read, over the bound, or evicted)
};

class spare_files {
public:
    spare_files(const drive_set& drives, spare_file_options options);
    spare_files(const spare_files&) = delete;
    spare_files& operator=(const spare_files&) = delete;

    // Gives a spare file on `drive` whose size is at least `bytes` (and not much more) the name `name` in
    // `dir_fd`. Returns whether it did; the caller then opens it and writes it from the start.
    io::task<bool> take(std::uint32_t drive, std::uint64_t bytes, int dir_fd, std::string name);
    // The data file of a segment that no durable record refers to any more: kept as a spare or removed.
    io::task<void> give(const segment& seg);
    // The drive is full: removes every spare on it, and keeps none there for full_cooldown_ms. Returns
    // whether there were any.
    io::task<bool> release(std::uint32_t drive);
    // The same for every drive (a request failed for want of space somewhere).
    io::task<void> release_all();
    // Removes the spares kept longer than idle_ms ago; returns how many.
    io::task<std::uint64_t> expire_idle();
    // Whether spares are kept at all (--spare-data-mib of at least one segment).
    bool enabled() const { return _options.bytes_per_drive >= _options.min_segment_bytes; }

    std::uint64_t bytes_held(std::uint32_t drive) const;
    spare_file_stats stats() const;

private:
    struct spare {
        std::string name;
        std::uint64_t size_bytes = 0;
        std::int64_t kept_ms = 0;  // steady clock
    };
    struct per_drive {
        std::deque<spare> files;  // oldest first (by kept_ms)
        std::uint64_t bytes = 0;
        std::int64_t full_until_ms = 0;  // steady clock: keep no spares before this
    };
    // Removes a data file or spare by name (counted; a file already gone is fine).
    io::task<void> remove(int dir_fd, std::string name);
    // Moves the oldest spares of `d` to `out` while `more(oldest)` holds, keeping d.bytes right. Under _mutex.
    template <class Predicate>
    static void pop_oldest_while(per_drive& d, std::deque<spare>& out, Predicate more) {
        while (!d.files.empty() && more(d.files.front())) {
            d.bytes -= d.files.front().size_bytes;
            out.push_back(std::move(d.files.front()));
            d.files.pop_front();
        }
    }

    const drive_set& _drives;
    spare_file_options _options;
    mutable std::mutex _mutex;  // guards what follows
    std::vector<per_drive> _drives_state;
    std::uint64_t _next_name = 0;
    spare_file_stats _stats;
};

}  // namespace fjord::store
