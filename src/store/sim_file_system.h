#pragma once

// A simulated file system for testing the engine: everything in memory, deterministic for a given seed,
// able to inject faults and to crash.
//
// Durability model. Each file has the bytes reads see and the bytes a crash keeps; write, truncate and
// allocate change the first and are logged as unsynced; fsync/fdatasync makes the file's bytes durable.
// Each directory likewise has its entries and its durable entries; creating, unlinking and renaming are
// logged, and fsync of the directory makes them durable. A crash (crash_and_restart) rebuilds the tree from
// durable state: for every file each unsynced change is dropped, applied, or (writes) torn to a prefix of
// 512-byte sectors; for every directory a random prefix of its unsynced changes survives (file systems
// journal metadata in order). A file no durable entry names is gone. Open descriptors die with the crash.
//
// Faults (set_faults): EIO from any operation, ENOSPC from creating, allocating and writing, short reads
// and writes, a flipped bit in the bytes a read returns, and latency (an asynchronous operation first
// yields to other coroutines, which reorders concurrent requests). A failed fsync makes a random part of
// the unsynced changes durable and loses the rest for good, although reads still see them; a later
// successful fsync does not bring them back (what Linux does after a writeback error).
// flip_bit_at_rest() damages stored bytes. power_off() makes every later operation fail with EIO and
// change nothing, which is how a test stops a "process" at an exact point before crashing it.
//
// Single-threaded: use it from one reactor (one core) plus the blocking startup code before it runs.
// O_DIRECT descriptors require 4 KiB aligned offsets, lengths and buffers (EINVAL otherwise), as the
// engine promises.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include "base/seeded_random.h"
#include <string>
#include <vector>

#include "store/file_system.h"

namespace fjord::store {

struct sim_faults {
    double eio = 0;            // probability that an operation fails with EIO
    double enospc = 0;         // ... that a create, allocate or write fails with ENOSPC
    double short_io = 0;       // ... that a read or write transfers only a prefix
    double read_bit_flip = 0;  // ... that a read returns one flipped bit
    double latency = 0;        // ... that an asynchronous operation yields first (1 to N times)
    unsigned max_latency_yields = 3;  // N: how long one such delay may be
};

struct sim_stats {
    std::uint64_t operations = 0;
    std::uint64_t injected_eio = 0;
    std::uint64_t injected_enospc = 0;
    std::uint64_t injected_short = 0;
    std::uint64_t injected_bit_flips = 0;
    std::uint64_t crashes = 0;
    std::uint64_t torn_writes = 0;      // writes cut to a prefix by a crash
    std::uint64_t dropped_changes = 0;  // unsynced file or directory changes lost in a crash
};

class sim_file_system final : public file_system {
public:
    explicit sim_file_system(std::uint64_t seed);
    ~sim_file_system() override;

    void set_faults(const sim_faults& faults) { _faults = faults; }
    const sim_faults& faults() const { return _faults; }
    const sim_stats& stats() const { return _stats; }
    // Powers off after `operations` more operations (0: now). Until crash_and_restart, every operation
    // fails with EIO and changes nothing.
    void power_off_after(std::uint64_t operations);
    // Forgets a power failure power_off_after() scheduled that has not happened yet.
    void cancel_power_off() { _power_off_at.reset(); }
    bool powered() const { return _powered; }
    // Rebuilds the tree as a crash leaves it (see above), forgets open descriptors, powers on.
    void crash_and_restart();
    // Flips one bit of a random file under `dir` (its current and durable bytes alike); returns the file's
    // name, or nothing when there is no non-empty file there.
    std::optional<std::string> flip_bit_at_rest(const std::string& dir);
    // Whether the file at `path` (under any of its names) had a bit flipped at rest.
    bool damaged(const std::string& path) const;
    // Names of the regular files directly in `dir` (sorted); empty if it does not exist.
    std::vector<std::string> files_in(const std::string& dir) const;
    std::uint64_t open_descriptors() const { return _fds.size(); }

    io::task<int> openat(int dir_fd, std::string name, int flags, mode_t mode) override;
    io::task<int> close(int fd) override;
    io::task<int> read(int fd, void* buf, unsigned len, std::uint64_t offset,
                       int buf_index) override;
    io::task<int> write(int fd, const void* buf, unsigned len, std::uint64_t offset,
                        int buf_index) override;
    io::task<int> fsync(int fd, bool datasync) override;
    io::task<int> allocate(int fd, std::uint64_t offset, std::uint64_t len) override;
    io::task<int> unlinkat(int dir_fd, std::string name) override;
    io::task<int> renameat(int old_dir_fd, std::string old_name, int new_dir_fd,
                           std::string new_name) override;
    io::task<int> rename_noreplace(int old_dir_fd, std::string old_name, int new_dir_fd,
                                   std::string new_name) override;
    io::task<int> linkat(int old_dir_fd, std::string old_name, int new_dir_fd,
                         std::string new_name) override;
    io::task<int> stat(int dir_fd, std::string name, file_stat& out) override;
    void start_read(io::async_op& op, int fd, void* buf, unsigned len, std::uint64_t offset,
                    int buf_index) override;
    void start_write(io::async_op& op, int fd, const void* buf, unsigned len, std::uint64_t offset,
                     int buf_index) override;
    void start_fsync(io::async_op& op, int fd, bool datasync) override;
    // A drive of sim_capacity_bytes with nothing used: the simulation injects ENOSPC instead of filling up.
    int free_space(int fd, space_figures& out) override;
    static constexpr std::uint64_t sim_capacity_bytes = 1ULL << 40;

    int open_blocking(const std::string& path, int flags, mode_t mode) override;
    int close_blocking(int fd) override;
    std::int64_t pread_blocking(int fd, void* buf, std::size_t len, std::uint64_t offset) override;
    std::int64_t pwrite_blocking(int fd, const void* buf, std::size_t len,
                                 std::uint64_t offset) override;
    int fsync_blocking(int fd) override;
    int truncate_blocking(int fd, std::uint64_t size_bytes) override;
    std::int64_t size_blocking(int fd) override;
    int mkdir_blocking(const std::string& path) override;
    int rename_blocking(const std::string& from, const std::string& to) override;
    int unlink_blocking(const std::string& path) override;
    int unlinkat_blocking(int dir_fd, const std::string& name) override;
    int lock_blocking(int fd) override;
    base::result<std::vector<std::string>> list_blocking(const std::string& dir_path) override;

    struct node;  // a file or directory (private to the implementation)

private:
    struct open_file {
        std::shared_ptr<node> target;
        std::string path;
        int flags = 0;
    };
    enum class fault { eio, enospc, short_io, bit_flip };

    // Every operation starts here: counts it, and answers -EIO when powered off.
    bool begin();
    bool inject(fault f);
    io::task<void> maybe_delay();
    std::string resolve(int dir_fd, const std::string& name) const;
    std::shared_ptr<node> lookup(const std::string& path) const;
    // The parent directory of `path` and the last component.
    std::pair<std::shared_ptr<node>, std::string> parent_of(const std::string& path) const;
    open_file* file(int fd);
    int do_open(const std::string& path, int flags);
    std::int64_t do_read(int fd, void* buf, std::size_t len, std::uint64_t offset,
                         bool direct_checks);
    std::int64_t do_write(int fd, const void* buf, std::size_t len, std::uint64_t offset,
                          bool direct_checks);
    int do_fsync(int fd);
    int do_unlink(const std::string& path);
    int do_rename(const std::string& from, const std::string& to, bool replace = true);
    void crash_directory(node& dir);
    void crash_file(node& file);

    base::seeded_random _rng;
    sim_faults _faults;
    sim_stats _stats;
    std::shared_ptr<node> _root;
    std::map<int, open_file> _fds;
    int _next_fd = 1000;
    std::uint64_t _next_inode = 1;
    bool _powered = true;
    std::optional<std::uint64_t> _power_off_at;
};

}  // namespace fjord::store
