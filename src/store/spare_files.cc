#include "store/spare_files.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/clock.h"
#include "base/log.h"

namespace fjord::store {

namespace {
// The monotonic clock the simulation can replace (base/clock.h).
std::int64_t steady_now_ms() { return base::monotonic_now_ns() / 1'000'000; }
}  // namespace

spare_files::spare_files(const drive_set& drives, spare_file_options options)
    : _drives(drives), _options(options), _drives_state(drives.size()) {}

std::uint64_t spare_files::bytes_held(std::uint32_t drive) const {
    std::lock_guard lock(_mutex);
    return _drives_state.at(drive).bytes;
}

spare_file_stats spare_files::stats() const {
    std::lock_guard lock(_mutex);
    return _stats;
}

io::task<bool> spare_files::take(std::uint32_t drive, std::uint64_t bytes, int dir_fd,
                                 std::string name) {
    spare s;
    {
        std::lock_guard lock(_mutex);
        per_drive& d = _drives_state.at(drive);
        std::uint64_t slack = std::max(bytes / 8, _options.min_segment_bytes);
        auto best = d.files.end();
        for (auto it = d.files.begin(); it != d.files.end(); ++it)
            if (it->size_bytes >= bytes && it->size_bytes <= bytes + slack &&
                (best == d.files.end() || it->size_bytes < best->size_bytes))
                best = it;
        if (best == d.files.end()) co_return false;
        s = std::move(*best);
        d.files.erase(best);
        d.bytes -= s.size_bytes;
    }
    // Never over an existing file, as the O_EXCL create of a fresh file would not. A file system without
    // RENAME_NOREPLACE (EINVAL) gets a plain rename: the target is a new object id.
    int rc =
        co_await _drives.fs().rename_noreplace(_drives.at(drive).spare_fd, s.name, dir_fd, name);
    if (rc == -EINVAL)
        rc = co_await _drives.fs().renameat(_drives.at(drive).spare_fd, s.name, dir_fd, name);
    if (rc < 0) {
        LOG_WARN("cannot reuse spare data file %s: %s", s.name.c_str(), strerror(-rc));
        co_await remove(_drives.at(drive).spare_fd, std::move(s.name));
        co_return false;
    }
    std::lock_guard lock(_mutex);
    ++_stats.reused;
    co_return true;
}

io::task<void> spare_files::give(const segment& seg) {
    file_system& fs = _drives.fs();
    const int dir_fd = _drives.dir_fd_for(seg.drive, seg.id);
    const int spare_fd = _drives.at(seg.drive).spare_fd;
    std::string name = drive_set::file_name(seg.id);
    std::string spare_name;
    if (enabled() && seg.size_bytes >= _drives.spare_min_segment_bytes()) {
        std::lock_guard lock(_mutex);
        if (steady_now_ms() >= _drives_state.at(seg.drive).full_until_ms)
            spare_name = std::to_string(_next_name++);
    }
    // Rename first: from then on no reader can open the file by this name, and no copy can link it.
    int rc = spare_name.empty() ? -EXDEV : co_await fs.renameat(dir_fd, name, spare_fd, spare_name);
    if (rc <
        0) {  // not a candidate, or the rename failed: remove it as before (gone already is fine)
        co_await remove(dir_fd, std::move(name));
        co_return;
    }
    file_stat st;
    rc = co_await fs.stat(spare_fd, spare_name, st);
    bool keep = rc == 0 && st.links == 1 && !_drives.reads().pinned(seg.drive, st.inode) &&
                st.size_bytes <= _options.bytes_per_drive;
    std::deque<spare> evicted;
    {
        std::lock_guard lock(_mutex);
        per_drive& d = _drives_state.at(seg.drive);
        const std::int64_t now = steady_now_ms();
        if (keep &&
            now >= d.full_until_ms) {  // the drive may have been found full during the rename
            const std::uint64_t limit = _options.bytes_per_drive;  // the oldest make room
            pop_oldest_while(d, evicted,
                             [&](const spare&) { return d.bytes + st.size_bytes > limit; });
            d.files.push_back({std::move(spare_name), st.size_bytes, now});
            d.bytes += st.size_bytes;
            ++_stats.kept;
        } else {
            evicted.push_back({std::move(spare_name), 0, 0});
        }
    }
    for (auto& s : evicted) co_await remove(spare_fd, std::move(s.name));
}

io::task<bool> spare_files::release(std::uint32_t drive) {
    std::deque<spare> files;
    {
        std::lock_guard lock(_mutex);
        per_drive& d = _drives_state.at(drive);
        pop_oldest_while(d, files, [](const spare&) { return true; });
        d.full_until_ms = steady_now_ms() + _options.full_cooldown_ms;
    }
    if (files.empty()) co_return false;
    for (auto& s : files) co_await remove(_drives.at(drive).spare_fd, std::move(s.name));
    co_return true;
}

io::task<void> spare_files::release_all() {
    for (std::uint32_t d = 0; d < _drives.size(); ++d) co_await release(d);
}

io::task<std::uint64_t> spare_files::expire_idle() {
    std::uint64_t expired = 0;
    for (std::uint32_t drive = 0; drive < _drives.size(); ++drive) {
        std::deque<spare> old;
        {
            std::lock_guard lock(_mutex);
            per_drive& d = _drives_state.at(drive);
            const std::int64_t cutoff = steady_now_ms() - _options.idle_ms;
            pop_oldest_while(d, old, [&](const spare& oldest) { return oldest.kept_ms <= cutoff; });
        }
        expired += old.size();
        for (auto& s : old) co_await remove(_drives.at(drive).spare_fd, std::move(s.name));
    }
    co_return expired;
}

io::task<void> spare_files::remove(int dir_fd, std::string name) {
    {
        std::lock_guard lock(_mutex);
        ++_stats.removed;
    }
    int rc = co_await _drives.fs().unlinkat(dir_fd, name);
    if (rc < 0 && rc != -ENOENT)
        LOG_WARN("cannot remove data file %s: %s (it will be removed at the next start)",
                 name.c_str(), strerror(-rc));
}

}  // namespace fjord::store
