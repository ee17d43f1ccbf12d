#pragma once

// The file system as the storage engine sees it. Every file operation of the engine (data files, journals,
// snapshots, drive identity, recovery) goes through one of these, so that a test can put a simulated file
// system underneath (sim_file_system: deterministic, injects faults and crashes) while production uses
// posix_file_system (io_uring on the reactor, plain system calls at startup).
//
// Results follow the kernel's convention: a value >= 0 on success, -errno on failure.
//
// Two kinds of operations:
// - asynchronous (tasks and pipelined starts): on a reactor thread, the only ones the data path uses;
// - blocking (suffix _blocking): startup, recovery and rare failure paths, never per request.
// Paths are absolute, or relative to a directory descriptor obtained from this same file system.
// An implementation is shared by all cores; posix_file_system keeps no state, a simulated one is used with
// a single core.

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"
#include "io/ops.h"
#include "io/task.h"

namespace fjord::store {

struct file_stat {
    std::uint64_t inode = 0;
    std::uint32_t links = 0;
    std::uint64_t size_bytes = 0;
};

struct space_figures {
    std::uint64_t free_bytes = 0;   // available to this process (f_bavail)
    std::uint64_t total_bytes = 0;  // the file system's size
};

class file_system {
public:
    virtual ~file_system() = default;

    // ---- asynchronous, on a reactor thread ----
    virtual io::task<int> openat(int dir_fd, std::string name, int flags, mode_t mode = 0) = 0;
    virtual io::task<int> close(int fd) = 0;
    // buf_index >= 0: buf lies in the registered buffer with that index (the fixed-buffer variant).
    virtual io::task<int> read(int fd, void* buf, unsigned len, std::uint64_t offset,
                               int buf_index = -1) = 0;
    virtual io::task<int> write(int fd, const void* buf, unsigned len, std::uint64_t offset,
                                int buf_index = -1) = 0;
    virtual io::task<int> fsync(int fd, bool datasync) = 0;
    // Reserves [offset, offset + len) (mode 0 fallocate): a full drive fails here rather than in the middle
    // of a write.
    virtual io::task<int> allocate(int fd, std::uint64_t offset, std::uint64_t len) = 0;
    virtual io::task<int> unlinkat(int dir_fd, std::string name) = 0;
    virtual io::task<int> renameat(int old_dir_fd, std::string old_name, int new_dir_fd,
                                   std::string new_name) = 0;
    // Like renameat, but fails with -EEXIST instead of replacing an existing target (RENAME_NOREPLACE).
    virtual io::task<int> rename_noreplace(int old_dir_fd, std::string old_name, int new_dir_fd,
                                           std::string new_name) = 0;
    // A second name for an existing file (a hard link): server-side copies share data this way.
    virtual io::task<int> linkat(int old_dir_fd, std::string old_name, int new_dir_fd,
                                 std::string new_name) = 0;
    // Identity and link count of a named file (spare data files are reused only when nothing else names them).
    virtual io::task<int> stat(int dir_fd, std::string name, file_stat& out) = 0;
    // Pipelined variants: start the operation now, the caller awaits `op` later. `op` and the buffer must
    // stay alive and in place until then.
    virtual void start_read(io::async_op& op, int fd, void* buf, unsigned len, std::uint64_t offset,
                            int buf_index) = 0;
    virtual void start_write(io::async_op& op, int fd, const void* buf, unsigned len,
                             std::uint64_t offset, int buf_index) = 0;
    virtual void start_fsync(io::async_op& op, int fd, bool datasync) = 0;
    // Free and total space of the file system holding `fd` (fstatvfs: the file system's counters, no I/O,
    // so it may run on a reactor thread).
    virtual int free_space(int fd, space_figures& out) = 0;

    // ---- blocking: startup, recovery and rare failure paths ----
    virtual int open_blocking(const std::string& path, int flags, mode_t mode = 0) = 0;
    virtual int close_blocking(int fd) = 0;
    virtual std::int64_t pread_blocking(int fd, void* buf, std::size_t len,
                                        std::uint64_t offset) = 0;
    virtual std::int64_t pwrite_blocking(int fd, const void* buf, std::size_t len,
                                         std::uint64_t offset) = 0;
    virtual int fsync_blocking(int fd) = 0;
    virtual int truncate_blocking(int fd, std::uint64_t size_bytes) = 0;
    virtual std::int64_t size_blocking(int fd) = 0;
    // -EEXIST when it exists already.
    virtual int mkdir_blocking(const std::string& path) = 0;
    virtual int rename_blocking(const std::string& from, const std::string& to) = 0;
    virtual int unlink_blocking(const std::string& path) = 0;
    virtual int unlinkat_blocking(int dir_fd, const std::string& name) = 0;
    // Takes an exclusive advisory lock on an open file without waiting: -EWOULDBLOCK when another holds it.
    virtual int lock_blocking(int fd) = 0;
    // The names in a directory (without "." and ".."), in no particular order.
    virtual base::result<std::vector<std::string>> list_blocking(const std::string& dir_path) = 0;

    // ---- helpers built on the operations above ----
    base::result<std::string> read_file_blocking(const std::string& path);
    // Writes `content` to path.tmp, makes it durable, renames it over `path` and makes the rename durable.
    base::result<void> replace_file_blocking(const std::string& path, const std::string& content);
    // Opens a file or directory and fsyncs it (errors are returned, not ignored).
    int fsync_path_blocking(const std::string& path);
};

// The production file system: io_uring on reactor threads, POSIX system calls for the blocking part.
// Stateless; one instance serves every core.
file_system& posix_file_system();

}  // namespace fjord::store
