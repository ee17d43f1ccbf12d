#include "store/sim_file_system.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <coroutine>
#include <cstring>
#include <set>

#include "io/reactor.h"

namespace fjord::store {

namespace {
constexpr std::uint64_t direct_alignment_bytes = 4096;
constexpr std::uint64_t sector_bytes = 512;

struct file_change {
    enum class kind { write, resize } what = kind::write;
    std::uint64_t offset = 0;  // write: where the bytes go; resize: the new size
    std::string bytes;
};

void apply(std::string& bytes, const file_change& c, std::size_t keep) {
    if (c.what == file_change::kind::resize) {
        bytes.resize(c.offset, '\0');
        return;
    }
    if (keep == 0) return;
    if (bytes.size() < c.offset + keep) bytes.resize(c.offset + keep, '\0');
    std::memcpy(bytes.data() + c.offset, c.bytes.data(), keep);
}
}  // namespace

struct sim_file_system::node {
    struct entry_change {
        enum class kind { link, unlink, rename } what = kind::link;
        std::string name;
        std::string to;  // rename only
        std::shared_ptr<node> target;
    };
    using entry_map = std::map<std::string, std::shared_ptr<node>>;

    bool directory = false;
    std::uint64_t inode = 0;
    bool damaged = false;  // a bit was flipped at rest
    std::string bytes;
    std::string durable_bytes;
    std::vector<file_change> unsynced;
    entry_map entries;
    entry_map durable_entries;
    std::vector<entry_change> unsynced_entries;

    static void apply_entry(entry_map& map, const entry_change& c) {
        switch (c.what) {
            case entry_change::kind::link: map[c.name] = c.target; break;
            case entry_change::kind::unlink: map.erase(c.name); break;
            case entry_change::kind::rename:
                map.erase(c.name);
                map[c.to] = c.target;
                break;
        }
    }
};

using entry_change = sim_file_system::node::entry_change;

sim_file_system::sim_file_system(std::uint64_t seed) : _rng(seed), _root(std::make_shared<node>()) {
    _root->directory = true;
}

sim_file_system::~sim_file_system() = default;

void sim_file_system::power_off_after(std::uint64_t operations) {
    if (operations == 0)
        _powered = false;
    else
        _power_off_at = _stats.operations + operations;
}

bool sim_file_system::begin() {
    ++_stats.operations;
    if (_power_off_at && _stats.operations >= *_power_off_at) {
        _powered = false;
        _power_off_at.reset();
    }
    return _powered;
}

bool sim_file_system::inject(fault f) {
    double p = 0;
    switch (f) {
        case fault::eio: p = _faults.eio; break;
        case fault::enospc: p = _faults.enospc; break;
        case fault::short_io: p = _faults.short_io; break;
        case fault::bit_flip: p = _faults.read_bit_flip; break;
    }
    if (p <= 0) return false;
    if (_rng.unit() >= p) return false;
    switch (f) {
        case fault::eio: ++_stats.injected_eio; break;
        case fault::enospc: ++_stats.injected_enospc; break;
        case fault::short_io: ++_stats.injected_short; break;
        case fault::bit_flip: ++_stats.injected_bit_flips; break;
    }
    return true;
}

io::task<void> sim_file_system::maybe_delay() {
    if (_faults.latency <= 0 || _rng.unit() >= _faults.latency) co_return;
    int times = 1 + static_cast<int>(_rng() % std::max(1u, _faults.max_latency_yields));
    for (int i = 0; i < times; ++i) co_await io::yield_now{};
}

// ---- paths and descriptors ----

std::string sim_file_system::resolve(int dir_fd, const std::string& name) const {
    if (!name.empty() && name[0] == '/') return name;
    if (dir_fd == AT_FDCWD) return "/" + name;
    auto it = _fds.find(dir_fd);
    if (it == _fds.end()) return {};
    return it->second.path + "/" + name;
}

std::shared_ptr<sim_file_system::node> sim_file_system::lookup(const std::string& path) const {
    if (path.empty() || path[0] != '/') return nullptr;
    std::shared_ptr<node> current = _root;
    std::size_t pos = 1;
    while (pos < path.size()) {
        std::size_t next = path.find('/', pos);
        if (next == std::string::npos) next = path.size();
        std::string part = path.substr(pos, next - pos);
        pos = next + 1;
        if (part.empty() || part == ".") continue;
        if (!current->directory) return nullptr;
        auto it = current->entries.find(part);
        if (it == current->entries.end()) return nullptr;
        current = it->second;
    }
    return current;
}

std::pair<std::shared_ptr<sim_file_system::node>, std::string> sim_file_system::parent_of(
    const std::string& path) const {
    std::size_t slash = path.find_last_of('/');
    if (slash == std::string::npos || slash + 1 >= path.size()) return {nullptr, {}};
    std::shared_ptr<node> parent = lookup(slash == 0 ? "/" : path.substr(0, slash));
    if (!parent || !parent->directory) return {nullptr, {}};
    return {parent, path.substr(slash + 1)};
}

sim_file_system::open_file* sim_file_system::file(int fd) {
    auto it = _fds.find(fd);
    return it == _fds.end() ? nullptr : &it->second;
}

int sim_file_system::do_open(const std::string& path, int flags) {
    auto [parent, name] = parent_of(path);
    std::shared_ptr<node> target = path == "/" ? _root : nullptr;
    if (!target) {
        if (!parent) return -ENOENT;
        auto it = parent->entries.find(name);
        if (it != parent->entries.end()) {
            if ((flags & O_CREAT) && (flags & O_EXCL)) return -EEXIST;
            target = it->second;
        } else {
            if (!(flags & O_CREAT)) return -ENOENT;
            if (inject(fault::enospc)) return -ENOSPC;
            target = std::make_shared<node>();
            target->inode = _next_inode++;
            parent->entries[name] = target;
            parent->unsynced_entries.push_back({entry_change::kind::link, name, {}, target});
        }
    }
    if ((flags & O_DIRECTORY) && !target->directory) return -ENOTDIR;
    if (target->directory && (flags & O_ACCMODE) != O_RDONLY) return -EISDIR;
    if ((flags & O_TRUNC) && !target->directory && !target->bytes.empty()) {
        target->bytes.clear();
        target->unsynced.push_back({file_change::kind::resize, 0, {}});
    }
    int fd = _next_fd++;
    _fds[fd] = open_file{target, path, flags};
    return fd;
}

namespace {
bool misaligned(int flags, const void* buf, std::size_t len, std::uint64_t offset) {
    if (!(flags & O_DIRECT)) return false;
    return offset % direct_alignment_bytes != 0 || len % direct_alignment_bytes != 0 ||
           reinterpret_cast<std::uintptr_t>(buf) % direct_alignment_bytes != 0;
}
}  // namespace

std::int64_t sim_file_system::do_read(int fd, void* buf, std::size_t len, std::uint64_t offset,
                                      bool with_faults) {
    open_file* f = file(fd);
    if (!f || (f->flags & O_ACCMODE) == O_WRONLY) return -EBADF;
    if (f->target->directory) return -EISDIR;
    if (misaligned(f->flags, buf, len, offset)) return -EINVAL;
    if (with_faults && inject(fault::eio)) return -EIO;
    const std::string& bytes = f->target->bytes;
    std::size_t n = offset >= bytes.size() ? 0 : std::min<std::size_t>(len, bytes.size() - offset);
    if (with_faults && n > 0 && inject(fault::short_io)) n = _rng() % n;
    if (n > 0) std::memcpy(buf, bytes.data() + offset, n);
    if (with_faults && n > 0 && inject(fault::bit_flip)) {
        std::uint64_t bit = _rng() % (n * 8);
        static_cast<unsigned char*>(buf)[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    }
    return static_cast<std::int64_t>(n);
}

std::int64_t sim_file_system::do_write(int fd, const void* buf, std::size_t len,
                                       std::uint64_t offset, bool with_faults) {
    open_file* f = file(fd);
    if (!f || (f->flags & O_ACCMODE) == O_RDONLY) return -EBADF;
    if (f->target->directory) return -EISDIR;
    if (misaligned(f->flags, buf, len, offset)) return -EINVAL;
    std::size_t n = len;
    int error = 0;
    if (with_faults && inject(fault::enospc)) return -ENOSPC;
    if (with_faults && inject(fault::eio)) {
        error = -EIO;  // the device may have taken part of it before failing
        n = (_rng() % 2) ? (_rng() % (len + 1)) / sector_bytes * sector_bytes : 0;
    } else if (with_faults && len > 0 && inject(fault::short_io)) {
        n = (_rng() % len) / sector_bytes * sector_bytes;
    }
    if (n > 0) {
        file_change c{file_change::kind::write, offset,
                      std::string(static_cast<const char*>(buf), n)};
        apply(f->target->bytes, c, n);
        f->target->unsynced.push_back(std::move(c));
    }
    return error ? error : static_cast<std::int64_t>(n);
}

int sim_file_system::do_fsync(int fd) {
    open_file* f = file(fd);
    if (!f) return -EBADF;
    node& n = *f->target;
    if (inject(fault::eio)) {
        // After a writeback error some of the changes reached the disk and the rest are lost for good,
        // although reads still see them until the next crash.
        if (n.directory) {
            std::size_t keep = _rng() % (n.unsynced_entries.size() + 1);
            for (std::size_t i = 0; i < keep; ++i)
                node::apply_entry(n.durable_entries, n.unsynced_entries[i]);
            _stats.dropped_changes += n.unsynced_entries.size() - keep;
            n.unsynced_entries.clear();
        } else {
            for (const auto& c : n.unsynced) {
                if (_rng() % 2)
                    apply(n.durable_bytes, c, c.bytes.size());
                else
                    ++_stats.dropped_changes;
            }
            n.unsynced.clear();
        }
        return -EIO;
    }
    // Only the changes still marked unsynced become durable: those a failed fsync lost stay lost, although
    // reads see them (a later successful fsync does not bring them back, as on Linux).
    if (n.directory) {
        for (const auto& c : n.unsynced_entries) node::apply_entry(n.durable_entries, c);
        n.unsynced_entries.clear();
    } else {
        for (const auto& c : n.unsynced) apply(n.durable_bytes, c, c.bytes.size());
        n.unsynced.clear();
    }
    return 0;
}

int sim_file_system::do_unlink(const std::string& path) {
    auto [parent, name] = parent_of(path);
    if (!parent) return -ENOENT;
    auto it = parent->entries.find(name);
    if (it == parent->entries.end()) return -ENOENT;
    if (it->second->directory) return -EISDIR;
    if (inject(fault::eio)) return -EIO;
    parent->unsynced_entries.push_back({entry_change::kind::unlink, name, {}, it->second});
    parent->entries.erase(it);
    return 0;
}

int sim_file_system::do_rename(const std::string& from, const std::string& to, bool replace) {
    auto [parent, name] = parent_of(from);
    auto [to_parent, to_name] = parent_of(to);
    if (!parent || !to_parent) return -ENOENT;
    auto it = parent->entries.find(name);
    if (it == parent->entries.end()) return -ENOENT;
    if (!replace && to_parent->entries.count(to_name)) return -EEXIST;
    if (inject(fault::eio)) return -EIO;
    std::shared_ptr<node> target = it->second;
    parent->entries.erase(it);
    if (parent == to_parent) {
        parent->entries[to_name] = target;
        parent->unsynced_entries.push_back({entry_change::kind::rename, name, to_name, target});
        return 0;
    }
    // Across directories each side is a change of its own directory, made durable by that directory's fsync;
    // a crash may keep either, both or neither (weaker than a journaling file system, which keeps both or
    // neither: the engine must cope with both names or none).
    auto& replaced = to_parent->entries[to_name];
    replaced = target;
    to_parent->unsynced_entries.push_back({entry_change::kind::link, to_name, {}, target});
    parent->unsynced_entries.push_back({entry_change::kind::unlink, name, {}, target});
    return 0;
}

namespace {
std::uint32_t count_links(const sim_file_system::node& dir, const sim_file_system::node* target) {
    std::uint32_t n = 0;
    for (const auto& [name, child] : dir.entries) {
        if (child.get() == target) ++n;
        if (child->directory) n += count_links(*child, target);
    }
    return n;
}
}  // namespace

// ---- asynchronous operations ----

io::task<int> sim_file_system::openat(int dir_fd, std::string name, int flags, mode_t) {
    co_await maybe_delay();
    if (!begin()) co_return -EIO;
    std::string path = resolve(dir_fd, name);
    if (path.empty()) co_return -EBADF;
    if (inject(fault::eio)) co_return -EIO;
    co_return do_open(path, flags);
}

io::task<int> sim_file_system::close(int fd) {
    begin();
    co_return _fds.erase(fd) ? 0 : -EBADF;
}

io::task<int> sim_file_system::read(int fd, void* buf, unsigned len, std::uint64_t offset, int) {
    co_await maybe_delay();
    if (!begin()) co_return -EIO;
    co_return static_cast<int>(do_read(fd, buf, len, offset, true));
}

io::task<int> sim_file_system::write(int fd, const void* buf, unsigned len, std::uint64_t offset,
                                     int) {
    co_await maybe_delay();
    if (!begin()) co_return -EIO;
    co_return static_cast<int>(do_write(fd, buf, len, offset, true));
}

io::task<int> sim_file_system::fsync(int fd, bool) {
    co_await maybe_delay();
    if (!begin()) co_return -EIO;
    co_return do_fsync(fd);
}

int sim_file_system::free_space(int fd, space_figures& out) {
    if (!_fds.count(fd)) return -EBADF;
    out.free_bytes = sim_capacity_bytes;
    out.total_bytes = sim_capacity_bytes;
    return 0;
}

io::task<int> sim_file_system::allocate(int fd, std::uint64_t offset, std::uint64_t len) {
    co_await maybe_delay();
    if (!begin()) co_return -EIO;
    open_file* f = file(fd);
    if (!f || f->target->directory) co_return -EBADF;
    if (inject(fault::enospc)) co_return -ENOSPC;
    if (inject(fault::eio)) co_return -EIO;
    if (f->target->bytes.size() < offset + len) {
        file_change c{file_change::kind::resize, offset + len, {}};
        apply(f->target->bytes, c, 0);
        f->target->unsynced.push_back(std::move(c));
    }
    co_return 0;
}

io::task<int> sim_file_system::unlinkat(int dir_fd, std::string name) {
    co_await maybe_delay();
    if (!begin()) co_return -EIO;
    std::string path = resolve(dir_fd, name);
    co_return path.empty() ? -EBADF : do_unlink(path);
}

io::task<int> sim_file_system::renameat(int old_dir_fd, std::string old_name, int new_dir_fd,
                                        std::string new_name) {
    co_await maybe_delay();
    if (!begin()) co_return -EIO;
    std::string from = resolve(old_dir_fd, old_name), to = resolve(new_dir_fd, new_name);
    if (from.empty() || to.empty()) co_return -EBADF;
    co_return do_rename(from, to);
}

io::task<int> sim_file_system::rename_noreplace(int old_dir_fd, std::string old_name,
                                                int new_dir_fd, std::string new_name) {
    co_await maybe_delay();
    if (!begin()) co_return -EIO;
    std::string from = resolve(old_dir_fd, old_name), to = resolve(new_dir_fd, new_name);
    if (from.empty() || to.empty()) co_return -EBADF;
    co_return do_rename(from, to, false);
}

io::task<int> sim_file_system::linkat(int old_dir_fd, std::string old_name, int new_dir_fd,
                                      std::string new_name) {
    co_await maybe_delay();
    if (!begin()) co_return -EIO;
    std::string from = resolve(old_dir_fd, old_name), to = resolve(new_dir_fd, new_name);
    if (from.empty() || to.empty()) co_return -EBADF;
    std::shared_ptr<node> target = lookup(from);
    auto [parent, name] = parent_of(to);
    if (!target) co_return -ENOENT;
    if (target->directory) co_return -EPERM;
    if (!parent) co_return -ENOENT;
    if (parent->entries.count(name)) co_return -EEXIST;
    if (inject(fault::enospc)) co_return -ENOSPC;
    if (inject(fault::eio)) co_return -EIO;
    parent->entries[name] = target;
    parent->unsynced_entries.push_back({entry_change::kind::link, name, {}, target});
    co_return 0;
}

io::task<int> sim_file_system::stat(int dir_fd, std::string name, file_stat& out) {
    co_await maybe_delay();
    if (!begin()) co_return -EIO;
    std::string path = resolve(dir_fd, name);
    if (path.empty()) co_return -EBADF;
    std::shared_ptr<node> target = lookup(path);
    if (!target) co_return -ENOENT;
    if (inject(fault::eio)) co_return -EIO;
    out.inode = target->inode;
    out.links = target->directory ? 2 : count_links(*_root, target.get());
    out.size_bytes = target->bytes.size();
    co_return 0;
}

void sim_file_system::start_read(io::async_op& op, int fd, void* buf, unsigned len,
                                 std::uint64_t offset, int) {
    op.complete_now(begin() ? static_cast<std::int32_t>(do_read(fd, buf, len, offset, true))
                            : -EIO);
}

void sim_file_system::start_write(io::async_op& op, int fd, const void* buf, unsigned len,
                                  std::uint64_t offset, int) {
    op.complete_now(begin() ? static_cast<std::int32_t>(do_write(fd, buf, len, offset, true))
                            : -EIO);
}

void sim_file_system::start_fsync(io::async_op& op, int fd, bool) {
    op.complete_now(begin() ? do_fsync(fd) : -EIO);
}

// ---- blocking operations ----

int sim_file_system::open_blocking(const std::string& path, int flags, mode_t) {
    if (!begin()) return -EIO;
    if (inject(fault::eio)) return -EIO;
    return do_open(path, flags);
}

int sim_file_system::close_blocking(int fd) {
    begin();
    return _fds.erase(fd) ? 0 : -EBADF;
}

std::int64_t sim_file_system::pread_blocking(int fd, void* buf, std::size_t len,
                                             std::uint64_t offset) {
    if (!begin()) return -EIO;
    return do_read(fd, buf, len, offset, true);
}

std::int64_t sim_file_system::pwrite_blocking(int fd, const void* buf, std::size_t len,
                                              std::uint64_t offset) {
    if (!begin()) return -EIO;
    return do_write(fd, buf, len, offset, true);
}

int sim_file_system::fsync_blocking(int fd) { return begin() ? do_fsync(fd) : -EIO; }

int sim_file_system::truncate_blocking(int fd, std::uint64_t size_bytes) {
    if (!begin()) return -EIO;
    open_file* f = file(fd);
    if (!f || f->target->directory || (f->flags & O_ACCMODE) == O_RDONLY) return -EBADF;
    if (inject(fault::eio)) return -EIO;
    file_change c{file_change::kind::resize, size_bytes, {}};
    apply(f->target->bytes, c, 0);
    f->target->unsynced.push_back(std::move(c));
    return 0;
}

std::int64_t sim_file_system::size_blocking(int fd) {
    if (!begin()) return -EIO;
    open_file* f = file(fd);
    if (!f) return -EBADF;
    return static_cast<std::int64_t>(f->target->bytes.size());
}

int sim_file_system::mkdir_blocking(const std::string& path) {
    if (!begin()) return -EIO;
    if (path == "/") return -EEXIST;
    auto [parent, name] = parent_of(path);
    if (!parent) return -ENOENT;
    if (parent->entries.count(name)) return -EEXIST;
    if (inject(fault::eio)) return -EIO;
    auto dir = std::make_shared<node>();
    dir->inode = _next_inode++;
    dir->directory = true;
    parent->entries[name] = dir;
    parent->unsynced_entries.push_back({entry_change::kind::link, name, {}, dir});
    return 0;
}

int sim_file_system::rename_blocking(const std::string& from, const std::string& to) {
    return begin() ? do_rename(from, to) : -EIO;
}

int sim_file_system::unlink_blocking(const std::string& path) {
    return begin() ? do_unlink(path) : -EIO;
}

int sim_file_system::unlinkat_blocking(int dir_fd, const std::string& name) {
    if (!begin()) return -EIO;
    std::string path = resolve(dir_fd, name);
    return path.empty() ? -EBADF : do_unlink(path);
}

int sim_file_system::lock_blocking(int fd) {
    if (!begin()) return -EIO;
    return file(fd) ? 0 : -EBADF;
}

base::result<std::vector<std::string>> sim_file_system::list_blocking(const std::string& dir_path) {
    if (!begin() || inject(fault::eio))
        return base::fail(base::errc::io_error, "list " + dir_path + ": I/O error");
    std::shared_ptr<node> dir = lookup(dir_path);
    if (!dir || !dir->directory)
        return base::fail(base::errc::io_error, "list " + dir_path + ": no such directory");
    std::vector<std::string> names;
    for (const auto& [name, child] : dir->entries) names.push_back(name);
    return names;
}

// ---- crashes and damage ----

void sim_file_system::crash_file(node& f) {
    std::string bytes = f.durable_bytes;
    for (const auto& c : f.unsynced) {
        switch (_rng() % 3) {
            case 0: ++_stats.dropped_changes; break;
            case 1: apply(bytes, c, c.bytes.size()); break;
            default:
                if (c.what == file_change::kind::write && c.bytes.size() > sector_bytes) {
                    std::uint64_t sectors = (c.bytes.size() + sector_bytes - 1) / sector_bytes;
                    apply(bytes, c, static_cast<std::size_t>((_rng() % sectors) * sector_bytes));
                    ++_stats.torn_writes;
                } else {
                    apply(bytes, c, c.bytes.size());
                }
        }
    }
    f.bytes = f.durable_bytes = std::move(bytes);
    f.unsynced.clear();
}

void sim_file_system::crash_directory(node& dir) {
    std::size_t keep = _rng() % (dir.unsynced_entries.size() + 1);
    for (std::size_t i = 0; i < keep; ++i)
        node::apply_entry(dir.durable_entries, dir.unsynced_entries[i]);
    _stats.dropped_changes += dir.unsynced_entries.size() - keep;
    dir.unsynced_entries.clear();
    dir.entries = dir.durable_entries;
    for (auto& [name, child] : dir.entries) {
        if (child->directory)
            crash_directory(*child);
        else
            crash_file(*child);
    }
}

void sim_file_system::crash_and_restart() {
    ++_stats.crashes;
    _fds.clear();
    crash_directory(*_root);
    _powered = true;
    _power_off_at.reset();
}

std::optional<std::string> sim_file_system::flip_bit_at_rest(const std::string& dir) {
    std::shared_ptr<node> d = lookup(dir);
    if (!d || !d->directory) return std::nullopt;
    std::vector<std::pair<std::string, node*>> candidates;
    for (auto& [name, child] : d->entries)
        if (!child->directory && !child->bytes.empty()) candidates.push_back({name, child.get()});
    if (candidates.empty()) return std::nullopt;
    auto& [name, f] = candidates[_rng() % candidates.size()];
    std::uint64_t bit = _rng() % (f->bytes.size() * 8);
    auto flip = [&](std::string& bytes) {
        if (bit / 8 < bytes.size())
            bytes[bit / 8] = static_cast<char>(bytes[bit / 8] ^ (1 << (bit % 8)));
    };
    flip(f->bytes);
    flip(f->durable_bytes);
    f->damaged = true;
    for (auto& c : f->unsynced)
        if (c.what == file_change::kind::write && bit / 8 >= c.offset &&
            bit / 8 < c.offset + c.bytes.size())
            c.bytes[bit / 8 - c.offset] =
                static_cast<char>(c.bytes[bit / 8 - c.offset] ^ (1 << (bit % 8)));
    return name;
}

bool sim_file_system::damaged(const std::string& path) const {
    std::shared_ptr<node> n = lookup(path);
    return n && n->damaged;
}

std::vector<std::string> sim_file_system::files_in(const std::string& dir) const {
    std::vector<std::string> names;
    std::shared_ptr<node> d = lookup(dir);
    if (!d || !d->directory) return names;
    for (const auto& [name, child] : d->entries)
        if (!child->directory) names.push_back(name);
    return names;
}

}  // namespace fjord::store
