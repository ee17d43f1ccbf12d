#pragma once

// Free space on the drives, and the space data files hold before their bytes have arrived.
//
// Why: a data file used to be preallocated whole from the request's declared length, before any byte of
// the body. A dozen signed PUTs declaring 5 GiB each and then trickling their bodies just above the rate
// floor could reserve the whole disk and starve every other writer, with nothing written. Now:
// - a writer reserves (preallocates) its file in steps of `reserve_step_bytes` as the body arrives, never
//   more than one step ahead of the bytes it has received;
// - the space reserved ahead of received bytes is bounded for the whole server (`max_reserved_ahead_bytes`,
//   all writers on all cores); a writer that finds the bound reached reserves nothing more and takes space
//   as its writes land;
// - new data is admitted only while the drive's free space stays above a floor (`min_free_bytes`):
//   before a file is created (the declared size, or one step when it is unknown) and at every step after.
//   Below it the write is refused with storage_full (507) while the disk still has room, so the metadata
//   journal, deletes (which free space) and the writes already admitted keep working. Journal records are
//   not subject to the floor.
// Space that a preallocation takes shows in the file system's free space at once, so the floor counts it.
//
// Threading: one per drive set, shared by every core; the figures that change are atomics. free_space is
// fstatvfs, which reads the file system's counters and does no I/O (like the clock, it is called on the
// reactor thread, once per step of a write).

#include <atomic>
#include <cstdint>
#include <optional>
#include <vector>

#include "base/result.h"
#include "store/file_system.h"

namespace fjord::store {

struct space_options {
    // Free space each drive keeps. Unset: 1 GiB, but at most 2% of the drive's size (small drives, such
    // as the file systems tests mount, stay usable). 0 turns the floor off.
    std::optional<std::uint64_t> min_free_bytes;
    // How far ahead of its received bytes a writer reserves its file.
    std::uint64_t reserve_step_bytes = 64ULL * 1024 * 1024;
    // Space reserved ahead of received bytes, all writers of the server together.
    std::uint64_t max_reserved_ahead_bytes = 1024ULL * 1024 * 1024;
};

class drive_space {
public:
    drive_space() = default;
    drive_space(const drive_space&) = delete;
    drive_space& operator=(const drive_space&) = delete;

    // Called once, before any write: sets the options and computes each drive's floor from its size.
    base::result<void> configure(file_system& fs, const std::vector<int>& drive_root_fds,
                                 space_options options);

    // Whether `bytes` more may be written on the drive keeping its free space at or above the floor.
    bool admits(std::uint32_t drive, std::uint64_t bytes) const;
    std::uint64_t floor_bytes(std::uint32_t drive) const {
        return drive < _floor_bytes.size() ? _floor_bytes[drive] : 0;
    }
    std::uint64_t step_bytes() const { return _options.reserve_step_bytes; }

    // Takes `bytes` of the server's reserve-ahead budget, all or nothing.
    bool try_claim(std::uint64_t bytes);
    void release(std::uint64_t bytes);
    std::uint64_t reserved_ahead_bytes() const {
        return _reserved_ahead.load(std::memory_order_relaxed);
    }

private:
    file_system* _fs = nullptr;
    std::vector<int> _root_fds;
    std::vector<std::uint64_t> _floor_bytes;
    space_options _options;
    std::atomic<std::uint64_t> _reserved_ahead{0};
};

}  // namespace fjord::store
