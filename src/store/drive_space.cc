#include "store/drive_space.h"

#include <algorithm>
#include <cstring>

#include "base/assert.h"
#include "base/log.h"
#include "base/units.h"

namespace fjord::store {

base::result<void> drive_space::configure(file_system& fs, const std::vector<int>& drive_root_fds,
                                          space_options options) {
    FJORD_ASSERT(options.reserve_step_bytes >= base::direct_io_alignment_bytes &&
                 options.reserve_step_bytes % base::direct_io_alignment_bytes == 0);
    _fs = &fs;
    _root_fds = drive_root_fds;
    _options = options;
    _floor_bytes.clear();
    for (int fd : _root_fds) {
        space_figures figures;
        if (int rc = fs.free_space(fd, figures); rc < 0)
            return base::fail(base::errc::io_error,
                              std::string("free space of a data directory: ") + strerror(-rc));
        std::uint64_t floor =
            options.min_free_bytes
                ? *options.min_free_bytes
                : std::min<std::uint64_t>(1024ULL * base::MiB, figures.total_bytes / 50);
        _floor_bytes.push_back(floor);
    }
    return {};
}

bool drive_space::admits(std::uint32_t drive, std::uint64_t bytes) const {
    if (!_fs || drive >= _root_fds.size())
        return true;  // not configured (tests of the writer alone)
    space_figures figures;
    if (_fs->free_space(_root_fds[drive], figures) < 0)
        return true;  // the writes themselves will tell
    return figures.free_bytes >= bytes && figures.free_bytes - bytes >= _floor_bytes[drive];
}

bool drive_space::try_claim(std::uint64_t bytes) {
    std::uint64_t now = _reserved_ahead.load(std::memory_order_relaxed);
    do {
        if (now + bytes > _options.max_reserved_ahead_bytes) return false;
    } while (!_reserved_ahead.compare_exchange_weak(now, now + bytes, std::memory_order_relaxed));
    return true;
}

void drive_space::release(std::uint64_t bytes) {
    std::uint64_t before = _reserved_ahead.fetch_sub(bytes, std::memory_order_relaxed);
    FJORD_ASSERT(before >= bytes, "released more reserve-ahead budget than was claimed");
}

}  // namespace fjord::store
