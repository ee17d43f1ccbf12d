#pragma once

// A drive is one data directory given with --data. Layout:
//   DIR/FJORD_DRIVE          identity: format version, this drive's index, drive count
//   DIR/objects/00 .. ff/    data files, named by object id (hex), fanned out by the id's low byte
//   DIR/spare/               data files no object refers to, kept for reuse by later writes (spare_files.h);
//                            emptied at every start
//   DIR/meta/                metadata journals and snapshots (drive 0 only)
// Directory file descriptors are opened once at start so the data path never resolves long paths.
// The drive set is created before the reactors start and is read-only afterwards, so every core may use it;
// only its open_reads registry changes, under its own lock.

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/result.h"
#include "store/drive_space.h"
#include "store/file_system.h"
#include "store/object.h"

namespace fjord::store {

struct drive {
    std::string path;
    int root_fd = -1;
    int lock_fd =
        -1;  // DIR/LOCK, flock()ed for the process lifetime: one process per data directory
    int spare_fd = -1;  // DIR/spare
    std::array<int, 256> object_dir_fds{};
};

// The data files open for reading, by (drive, inode), all cores together. A reader pins a file before it
// opens it and unpins it after closing it; a spare data file (spare_files.h) is reused only if nobody has
// it pinned, since a reused file is overwritten in place while an open descriptor would still read it.
// Protocol (why it is race-free): the reader looks up the inode by name, pins it, then opens by name; the
// reclaimer first renames the file's last name away, then checks the pins. Either the pin comes first and
// the reclaimer sees it, or the reader's open comes after the rename and fails with ENOENT.
class open_reads {
public:
    void pin(std::uint32_t drive, std::uint64_t inode);
    void unpin(std::uint32_t drive, std::uint64_t inode);
    bool pinned(std::uint32_t drive, std::uint64_t inode) const;

private:
    static std::uint64_t key(std::uint32_t drive, std::uint64_t inode) {
        return inode * 64 +
               drive;  // at most 64 drives; wrapping inode numbers only cost a false "pinned"
    }
    mutable std::mutex _mutex;
    std::unordered_map<std::uint64_t, std::uint32_t> _pins;
};

class drive_set {
public:
    // Opens (and on first use formats) the given directories. Fails if a directory belongs to a
    // different position or a different drive count than on disk, and when some of the directories
    // are formatted and others are not: an unformatted one is a drive that is not mounted (or was
    // replaced), and starting would format it, lose sight of what it held, and, were it the first
    // (the metadata), remove every data file on the others as unreferenced. A replaced drive other
    // than the first is accepted when its directory is in `accept_empty` (--accept-empty-drive).
    // Every later file operation on these drives goes through `fs`, which must outlive the set.
    static base::result<drive_set> open(const std::vector<std::string>& paths,
                                        file_system& fs = posix_file_system(),
                                        const std::vector<std::string>& accept_empty = {});
    drive_set() = default;
    drive_set(drive_set&&) noexcept;
    drive_set& operator=(drive_set&&) noexcept;
    ~drive_set();

    std::size_t size() const { return _drives.size(); }
    file_system& fs() const { return *_fs; }
    const drive& at(std::uint32_t index) const { return _drives.at(index); }
    // Single node placement: a hash of the object id over the local drives. Multi-drive erasure coding and
    // cluster placement replace this function, not its callers.
    std::uint32_t place(const object_id& id) const;
    int dir_fd_for(std::uint32_t drive_index, const object_id& id) const {
        return _drives[drive_index].object_dir_fds[id.lo & 0xff];
    }
    std::string meta_path() const { return _drives.at(0).path + "/meta"; }
    // File name of an object's data file inside its fan-out directory.
    static std::string file_name(const object_id& id) { return id.hex(); }
    open_reads& reads() const { return *_reads; }
    // Free space and space reserved ahead of received bytes (drive_space.h); configured by the engine.
    drive_space& space() const { return *_space; }
    // Segments at least this large may have their data files reused as spares once freed, so readers pin
    // them (open_reads). Set once by the engine before any I/O.
    std::uint64_t spare_min_segment_bytes() const { return _spare_min_segment_bytes; }
    void set_spare_min_segment_bytes(std::uint64_t bytes) { _spare_min_segment_bytes = bytes; }

private:
    std::vector<drive> _drives;
    file_system* _fs = &posix_file_system();
    std::unique_ptr<open_reads> _reads = std::make_unique<open_reads>();
    std::unique_ptr<drive_space> _space = std::make_unique<drive_space>();
    std::uint64_t _spare_min_segment_bytes = 1024ULL * 1024;
};

}  // namespace fjord::store
