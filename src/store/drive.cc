#include "store/drive.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace fjord::store {

namespace {
base::failure io_failure(const std::string& what) {
    return base::fail(base::errc::io_error, what + ": " + strerror(errno));
}

base::result<void> make_dir(const std::string& path) {
    if (::mkdir(path.c_str(), 0755) < 0 && errno != EEXIST) return io_failure("mkdir " + path);
    return {};
}

// Reads or writes DIR/FJORD_DRIVE. Startup only (blocking I/O before any reactor runs).
base::result<void> check_identity(const std::string& dir, std::size_t index, std::size_t count) {
    std::string path = dir + "/FJORD_DRIVE";
    std::ifstream in(path);
    if (in) {
        std::string line;
        std::getline(in, line);
        std::size_t on_disk_index = 0, on_disk_count = 0;
        int version = 0;
        if (std::sscanf(line.c_str(), "fjord-drive v%d index=%zu count=%zu", &version, &on_disk_index,
                        &on_disk_count) != 3 || version != 1)
            return base::fail(base::errc::invalid_argument, path + " is not a Fjord drive identity file");
        if (on_disk_index != index || on_disk_count != count)
            return base::fail(base::errc::invalid_argument,
                              dir + " was formatted as drive " + std::to_string(on_disk_index) + " of " +
                                  std::to_string(on_disk_count) + ", but is given as drive " +
                                  std::to_string(index) + " of " + std::to_string(count) +
                                  ": pass --data in the original order");
        return {};
    }
    std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp);
        out << "fjord-drive v1 index=" << index << " count=" << count << "\n";
        if (!out) return io_failure("write " + tmp);
    }
    int fd = ::open(tmp.c_str(), O_RDONLY);
    if (fd >= 0) {
        ::fsync(fd);
        ::close(fd);
    }
    if (::rename(tmp.c_str(), path.c_str()) < 0) return io_failure("rename " + tmp);
    return {};
}
}  // namespace

base::result<drive_set> drive_set::open(const std::vector<std::string>& paths) {
    if (paths.empty()) return base::fail(base::errc::invalid_argument, "no data directory given");
    if (paths.size() > 64) return base::fail(base::errc::invalid_argument, "at most 64 data directories");
    drive_set set;
    for (std::size_t i = 0; i < paths.size(); ++i) {
        drive d;
        d.path = paths[i];
        d.object_dir_fds.fill(-1);
        FJORD_TRY(make_dir(d.path));
        // Two processes on one directory would each remove the other's new files as orphans.
        std::string lock_path = d.path + "/LOCK";
        d.lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (d.lock_fd < 0) return io_failure("open " + lock_path);
        if (::flock(d.lock_fd, LOCK_EX | LOCK_NB) < 0) {
            int err = errno;
            ::close(d.lock_fd);
            if (err == EWOULDBLOCK)
                return base::fail(base::errc::invalid_argument,
                                  d.path + " is in use by another Fjord process (stop it first)");
            errno = err;
            return io_failure("lock " + lock_path);
        }
        set._drives.push_back(d);  // from here the set owns (and on failure closes) this drive's descriptors
        drive& owned = set._drives.back();
        FJORD_TRY(check_identity(d.path, i, paths.size()));
        FJORD_TRY(make_dir(owned.path + "/objects"));
        if (i == 0) FJORD_TRY(make_dir(owned.path + "/meta"));
        owned.root_fd = ::open(owned.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (owned.root_fd < 0) return io_failure("open " + owned.path);
        for (int b = 0; b < 256; ++b) {
            char name[8];
            std::snprintf(name, sizeof name, "%02x", b);
            std::string sub = owned.path + "/objects/" + name;
            FJORD_TRY(make_dir(sub));
            owned.object_dir_fds[b] = ::open(sub.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (owned.object_dir_fds[b] < 0) return io_failure("open " + sub);
        }
    }
    return set;
}

drive_set::drive_set(drive_set&& other) noexcept : _drives(std::move(other._drives)) { other._drives.clear(); }

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
            if (fd >= 0) ::close(fd);
        if (d.root_fd >= 0) ::close(d.root_fd);
        if (d.lock_fd >= 0) ::close(d.lock_fd);
    }
    _drives.clear();
}

std::uint32_t drive_set::place(const object_id& id) const {
    std::uint64_t h = id.lo * 0x9E3779B97F4A7C15ULL ^ id.hi;
    return static_cast<std::uint32_t>((h >> 32) % _drives.size());
}

}  // namespace fjord::store
