#include "store/drive.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/log.h"

namespace fjord::store {

namespace {
base::failure io_failure(const std::string& what, int rc) {
    return base::fail(base::errc::io_error, what + ": " + strerror(-rc));
}

base::result<void> make_dir(file_system& fs, const std::string& path) {
    int rc = fs.mkdir_blocking(path);
    if (rc < 0 && rc != -EEXIST) return io_failure("mkdir " + path, rc);
    return {};
}

// Reads or writes DIR/FJORD_DRIVE. Startup only (blocking I/O before any reactor runs).
base::result<void> check_identity(file_system& fs, const std::string& dir, std::size_t index,
                                  std::size_t count) {
    std::string path = dir + "/FJORD_DRIVE";
    int probe = fs.open_blocking(path, O_RDONLY);
    if (probe >= 0) {
        fs.close_blocking(probe);
        auto text = fs.read_file_blocking(path);
        if (!text) return text.as_failure();
        std::size_t on_disk_index = 0, on_disk_count = 0;
        int version = 0;
        if (std::sscanf(text->c_str(), "fjord-drive v%d index=%zu count=%zu", &version,
                        &on_disk_index, &on_disk_count) != 3 ||
            version != 1)
            return base::fail(base::errc::invalid_argument,
                              path + " is not a Fjord drive identity file");
        if (on_disk_index != index || on_disk_count != count)
            return base::fail(base::errc::invalid_argument,
                              dir + " was formatted as drive " + std::to_string(on_disk_index) +
                                  " of " + std::to_string(on_disk_count) +
                                  ", but is given as drive " + std::to_string(index) + " of " +
                                  std::to_string(count) + ": pass --data in the original order");
        return {};
    }
    if (probe != -ENOENT) return io_failure("open " + path, probe);
    return fs.replace_file_blocking(path, "fjord-drive v1 index=" + std::to_string(index) +
                                              " count=" + std::to_string(count) + "\n");
}

// Opens one drive's directories into `d`, creating what is missing. New directories are made durable
// (their parents fsynced) before any data file is created in them: a file whose directory could vanish
// in a crash is not durable, whatever was fsynced inside it.
base::result<void> open_layout(file_system& fs, drive& d, bool metadata) {
    FJORD_TRY(make_dir(fs, d.path + "/objects"));
    FJORD_TRY(make_dir(fs, d.path + "/spare"));
    if (metadata) FJORD_TRY(make_dir(fs, d.path + "/meta"));
    d.root_fd = fs.open_blocking(d.path, O_RDONLY | O_DIRECTORY);
    if (d.root_fd < 0) return io_failure("open " + d.path, d.root_fd);
    for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof name, "%02x", b);
        std::string sub = d.path + "/objects/" + name;
        FJORD_TRY(make_dir(fs, sub));
        d.object_dir_fds[b] = fs.open_blocking(sub, O_RDONLY | O_DIRECTORY);
        if (d.object_dir_fds[b] < 0) return io_failure("open " + sub, d.object_dir_fds[b]);
    }
    // Spare files do not outlive a restart: after a crash one may still have its old name too (a rename
    // across directories that was half durable), so reusing it could overwrite an object's data. Removing
    // this name never does: another name keeps the data.
    std::string spare = d.path + "/spare";
    auto spares = fs.list_blocking(spare);
    if (!spares) return spares.as_failure();
    for (const std::string& name : *spares)
        if (int rc = fs.unlink_blocking(spare + "/" + name); rc < 0 && rc != -ENOENT)
            LOG_WARN("cannot remove spare data file %s/%s: %s (tried again at the next start)",
                     spare.c_str(), name.c_str(), strerror(-rc));
    d.spare_fd = fs.open_blocking(spare, O_RDONLY | O_DIRECTORY);
    if (d.spare_fd < 0) return io_failure("open " + spare, d.spare_fd);
    for (const std::string& dir : {spare, d.path + "/objects", d.path})
        if (int rc = fs.fsync_path_blocking(dir); rc < 0) return io_failure("fsync " + dir, rc);
    return {};
}

// Fails when some of the directories hold a drive identity and others do not (drive_set::open).
base::result<void> check_all_formatted_or_none(const std::vector<std::string>& paths,
                                               file_system& fs,
                                               const std::vector<std::string>& accept_empty) {
    std::vector<std::size_t> formatted, empty;
    for (std::size_t i = 0; i < paths.size(); ++i) {
        int probe = fs.open_blocking(paths[i] + "/FJORD_DRIVE", O_RDONLY);
        if (probe >= 0) {
            fs.close_blocking(probe);
            formatted.push_back(i);
        } else if (probe == -ENOENT) {
            empty.push_back(i);
        } else {
            return io_failure("open " + paths[i] + "/FJORD_DRIVE", probe);
        }
    }
    if (formatted.empty() || empty.empty()) return {};
    // Drives are formatted in order and the metadata's FORMAT file is written after all of them: a
    // first start that stopped partway (a mistyped directory, a kill) left a set that never held data.
    if (formatted.front() == 0) {
        int meta = fs.open_blocking(paths[0] + "/meta/FORMAT", O_RDONLY);
        if (meta == -ENOENT) return {};
        if (meta < 0) return io_failure("open " + paths[0] + "/meta/FORMAT", meta);
        fs.close_blocking(meta);
    }
    const std::string known = paths[formatted.front()];
    const std::string of = " of " + std::to_string(paths.size());
    for (std::size_t i : empty) {
        if (i == 0)
            return base::fail(
                base::errc::invalid_argument,
                paths[0] + " (drive 0" + of +
                    ", which holds the metadata journal) is not a Fjord " + "drive while " + known +
                    " is one: it is not mounted, or was replaced. " +
                    "Starting would find every data file on the other drives unreferenced and " +
                    "remove it; mount the drive and start again");
        if (std::find(accept_empty.begin(), accept_empty.end(), paths[i]) == accept_empty.end())
            return base::fail(
                base::errc::invalid_argument,
                paths[i] + " (drive " + std::to_string(i) + of + ") is not a Fjord drive while " +
                    known + " is one: it is not mounted, or was replaced. Mount it and start " +
                    "again; if the drive was replaced and the objects it held are lost, start once " +
                    "with --accept-empty-drive " + paths[i]);
        LOG_WARN(
            "formatting %s as drive %zu%s in place of a lost one (--accept-empty-drive): "
            "objects whose data it held read as damaged. Take the option off the command line "
            "now: left there, it would format this directory again were its drive ever not "
            "mounted",
            paths[i].c_str(), i, of.c_str());
    }
    return {};
}
}  // namespace

base::result<drive_set> drive_set::open(const std::vector<std::string>& paths, file_system& fs,
                                        const std::vector<std::string>& accept_empty) {
    if (paths.empty()) return base::fail(base::errc::invalid_argument, "no data directory given");
    if (paths.size() > 64)
        return base::fail(base::errc::invalid_argument, "at most 64 data directories");
    FJORD_TRY(check_all_formatted_or_none(paths, fs, accept_empty));
    drive_set set;
    set._fs = &fs;
    for (std::size_t i = 0; i < paths.size(); ++i) {
        drive d;
        d.path = paths[i];
        d.object_dir_fds.fill(-1);
        if (int rc = fs.mkdir_blocking(d.path); rc == 0) {
            // A new data directory: its own entry must survive a crash too.
            std::string parent = d.path.substr(0, d.path.find_last_of('/'));
            if (d.path.find('/') == std::string::npos) parent = ".";
            if (int synced = fs.fsync_path_blocking(parent.empty() ? "/" : parent); synced < 0)
                return io_failure("fsync " + parent, synced);
        } else if (rc != -EEXIST) {
            return io_failure("mkdir " + d.path, rc);
        }
        // Two processes on one directory would each remove the other's new files as orphans.
        std::string lock_path = d.path + "/LOCK";
        d.lock_fd = fs.open_blocking(lock_path, O_RDWR | O_CREAT, 0600);
        if (d.lock_fd < 0) return io_failure("open " + lock_path, d.lock_fd);
        if (int rc = fs.lock_blocking(d.lock_fd); rc < 0) {
            fs.close_blocking(d.lock_fd);
            if (rc == -EWOULDBLOCK)
                return base::fail(base::errc::invalid_argument,
                                  d.path + " is in use by another Fjord process (stop it first)");
            return io_failure("lock " + lock_path, rc);
        }
        // From here the set owns (and on failure closes) this drive's descriptors.
        set._drives.push_back(d);
        FJORD_TRY_CONTEXT(check_identity(fs, d.path, i, paths.size()), "drive " + d.path);
        FJORD_TRY_CONTEXT(open_layout(fs, set._drives.back(), i == 0), "drive " + d.path);
    }
    return set;
}

drive_set::drive_set(drive_set&& other) noexcept
    : _drives(std::move(other._drives)),
      _fs(other._fs),
      _reads(std::move(other._reads)),
      _space(std::move(other._space)),
      _spare_min_segment_bytes(other._spare_min_segment_bytes) {
    other._drives.clear();
}

drive_set& drive_set::operator=(drive_set&& other) noexcept {
    if (this != &other) {
        this->~drive_set();
        new (this) drive_set(std::move(other));
    }
    return *this;
}

drive_set::~drive_set() {
    for (auto& d : _drives) {
        for (int fd : d.object_dir_fds)
            if (fd >= 0) _fs->close_blocking(fd);
        if (d.root_fd >= 0) _fs->close_blocking(d.root_fd);
        if (d.spare_fd >= 0) _fs->close_blocking(d.spare_fd);
        if (d.lock_fd >= 0) _fs->close_blocking(d.lock_fd);
    }
    _drives.clear();
}

void open_reads::pin(std::uint32_t drive, std::uint64_t inode) {
    std::lock_guard lock(_mutex);
    ++_pins[key(drive, inode)];
}

void open_reads::unpin(std::uint32_t drive, std::uint64_t inode) {
    std::lock_guard lock(_mutex);
    auto it = _pins.find(key(drive, inode));
    FJORD_ASSERT(it != _pins.end());
    if (--it->second == 0) _pins.erase(it);
}

bool open_reads::pinned(std::uint32_t drive, std::uint64_t inode) const {
    std::lock_guard lock(_mutex);
    return _pins.count(key(drive, inode)) > 0;
}

std::uint32_t drive_set::place(const object_id& id) const {
    std::uint64_t h = id.lo * 0x9E3779B97F4A7C15ULL ^ id.hi;
    return static_cast<std::uint32_t>((h >> 32) % _drives.size());
}

}  // namespace fjord::store
