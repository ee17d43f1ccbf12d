#pragma once

// A drive is one data directory given with --data. Layout:
//   DIR/FJORD_DRIVE          identity: format version, this drive's index, drive count
//   DIR/objects/00 .. ff/    data files, named by object id (hex), fanned out by the id's low byte
//   DIR/meta/                metadata journals and snapshots (drive 0 only)
// Directory file descriptors are opened once at start so the data path never resolves long paths.
// The drive set is created before the reactors start and is read-only afterwards, so every core may use it.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"
#include "store/file_system.h"
#include "store/object.h"

namespace fjord::store {

struct drive {
    std::string path;
    int root_fd = -1;
    int lock_fd = -1;  // DIR/LOCK, flock()ed for the process lifetime: one process per data directory
    std::array<int, 256> object_dir_fds{};
};

class drive_set {
public:
    // Opens (and on first use formats) the given directories. Fails if a directory belongs to a
    // different position or a different drive count than on disk. Every later file operation on these
    // drives goes through `fs`, which must outlive the set.
    static base::result<drive_set> open(const std::vector<std::string>& paths,
                                        file_system& fs = posix_file_system());
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

private:
    std::vector<drive> _drives;
    file_system* _fs = &posix_file_system();
};

}  // namespace fjord::store
