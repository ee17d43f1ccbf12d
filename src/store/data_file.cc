#include "store/data_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cerrno>
#include <cstring>
#include <utility>

#include "base/checksum.h"
#include "base/log.h"
#include "base/units.h"

namespace fjord::store {

namespace {
constexpr char footer_magic[8] = {'F', 'J', 'D', 'A', 'T', 'A', '0', '1'};
constexpr std::size_t footer_header_bytes = 64;
constexpr std::uint64_t align = base::direct_io_alignment_bytes;

struct footer_header {
    char magic[8];
    std::uint32_t version;
    std::uint32_t block_bytes;
    std::uint64_t size_bytes;
    std::uint64_t block_count;
    std::uint64_t id_hi;
    std::uint64_t id_lo;
    std::uint32_t table_crc;
    std::uint32_t header_crc;  // CRC32C of the bytes before this field
    std::uint8_t reserved[8];
};
static_assert(sizeof(footer_header) == footer_header_bytes);

std::uint64_t block_count_of(std::uint64_t size, std::uint32_t block) {
    return (size + block - 1) / block;
}

base::failure errno_failure(int err, const std::string& what) {
    if (err == ENOSPC || err == EDQUOT)
        return base::fail(base::errc::storage_full, what + ": no space left on drive");
    return base::fail(base::errc::io_error, what + ": " + strerror(err));
}

}  // namespace

std::uint64_t footer_bytes(std::uint64_t size_bytes, std::uint32_t block_bytes) {
    return base::align_up(footer_header_bytes + 4 * block_count_of(size_bytes, block_bytes), align);
}

// ---- writer ----

object_writer::object_writer(const drive_set& drives, io::buffer_pool& pool, object_id id,
                             data_file_options options, write_scheduler* scheduler,
                             spare_files* spares)
    : _drives(drives),
      _pool(pool),
      _id(id),
      _options(options),
      _own_scheduler(scheduler ? nullptr
                               : std::make_unique<write_scheduler>(drives.fs(), drives.size(),
                                                                   options.pipeline_depth,
                                                                   pool.buffer_bytes())),
      _scheduler(scheduler ? scheduler : _own_scheduler.get()),
      _spares(spares),
      _drive(drives.place(id)),
      _name(drive_set::file_name(id)) {
    FJORD_ASSERT(pool.buffer_bytes() % options.block_bytes == 0);
    FJORD_ASSERT(options.block_bytes % align == 0);
}

object_writer::~object_writer() {
    FJORD_ASSERT(_fd < 0, "object_writer destroyed while open: seal or discard it");
}

io::task<base::result<void>> object_writer::open(std::optional<std::uint64_t> expected_size_bytes) {
    int dir = _drives.dir_fd_for(_drive, _id);
    file_system& fs = _drives.fs();
    std::uint64_t total = 0;
    if (expected_size_bytes && *expected_size_bytes > 0)
        total = base::align_up(*expected_size_bytes, align) +
                footer_bytes(*expected_size_bytes, _options.block_bytes);
    _expected_total = total;
    if (_spares && total > 0 && co_await _spares->take(_drive, total, dir, _name)) {
        int fd = co_await fs.openat(dir, _name, O_WRONLY | O_DIRECT);
        if (fd >= 0) {
            _fd = fd;
            _created = true;
            _accounted_end = total;  // a spare's space is allocated already
            co_return base::result<void>{};
        }
        co_await fs.unlinkat(dir, _name);  // a fresh file instead
    }
    // A write that cannot fit is refused before it starts (drive_space.h); its space is then reserved in
    // steps as the bytes arrive, not all at once from the declared size.
    // (A declared size of one step or less is admitted by its first step below, once.)
    const std::uint64_t step = _drives.space().step_bytes();
    if (total == 0 || total > step) FJORD_CO_TRY(co_await admit(total > 0 ? total : step));
    int fd = co_await fs.openat(dir, _name, O_CREAT | O_EXCL | O_WRONLY | O_DIRECT, 0600);
    if (fd < 0) co_return failed(-fd, "create data file " + _name);
    _fd = fd;
    _created = true;
    if (total == 0) {
        _accounted_end = step;
        co_return base::result<void>{};
    }
    co_return co_await account_to(std::min(total, step));
}

io::task<base::result<void>> object_writer::admit(std::uint64_t bytes) {
    drive_space& space = _drives.space();
    if (space.admits(_drive, bytes)) co_return base::result<void>{};
    // Space kept in spares is given back before the drive counts as full.
    if (_spares && co_await _spares->release(_drive) && space.admits(_drive, bytes))
        co_return base::result<void>{};
    _out_of_space = true;
    co_return base::fail(base::errc::storage_full,
                         "drive " + std::to_string(_drive) + " keeps " +
                             std::to_string(space.floor_bytes(_drive) / base::MiB) +
                             " MiB free; no room for " + std::to_string(bytes) + " more bytes");
}

io::task<base::result<void>> object_writer::account_to(std::uint64_t end) {
    drive_space& space = _drives.space();
    file_system& fs = _drives.fs();
    while (_accounted_end < end) {
        const bool declared = _expected_total > _accounted_end;
        std::uint64_t len = declared
                                ? std::min(space.step_bytes(), _expected_total - _accounted_end)
                                : space.step_bytes();
        FJORD_CO_TRY(co_await admit(len));
        // Preallocated only while every step so far was (the reserved part is a prefix of the file), and
        // only on the server's budget of space reserved ahead of received bytes.
        if (declared && _reserving && _claimed_end == _accounted_end && space.try_claim(len)) {
            int rc = co_await fs.allocate(_fd, _accounted_end, len);
            if ((rc == -ENOSPC || rc == -EDQUOT) && _spares && co_await _spares->release(_drive))
                rc = co_await fs.allocate(_fd, _accounted_end, len);
            if (rc == -EOPNOTSUPP) {
                space.release(len);
                _reserving = false;
            } else if (rc < 0) {
                space.release(len);
                co_return failed(-rc, "preallocate data file");
            } else {
                _claimed_end = _accounted_end + len;
            }
        } else {
            _reserving = false;
        }
        _accounted_end += len;
    }
    co_return base::result<void>{};
}

void object_writer::release_reserved(bool all) {
    std::uint64_t upto = all ? _claimed_end : std::min(_size_bytes, _claimed_end);
    if (upto > _released_to) {
        _drives.space().release(upto - _released_to);
        _released_to = upto;
    }
}

base::failure object_writer::failed(int err, const std::string& what) {
    if (err == ENOSPC || err == EDQUOT) _out_of_space = true;
    return errno_failure(err, what);
}

io::task<base::result<void>> object_writer::drain(std::vector<slot>& slots) {
    base::result<void> outcome;
    for (auto& s : slots) {
        if (!s.op.in_flight()) continue;
        int rc = co_await s.op;
        if (rc < 0 && outcome)
            outcome = failed(-rc, "write data file");
        else if (rc >= 0 && static_cast<unsigned>(rc) != s.length && outcome)
            outcome = base::fail(base::errc::io_error, "short write to data file");
    }
    co_return outcome;
}

io::task<base::result<object_writer::slot*>> object_writer::next_slot(
    std::vector<slot>& slots, std::deque<std::size_t>& submitted) {
    for (auto& x : slots)
        if (x.buf && !x.op.in_flight()) co_return &x;
    for (auto& x : slots) {
        if (x.buf) continue;
        // Wait for a buffer only while holding none: waiting for a second one while holding one could
        // deadlock the pool across requests.
        if (submitted.empty())
            x.buf = co_await _pool.acquire();
        else if (auto b = _pool.try_acquire())
            x.buf = std::move(*b);
        if (x.buf) co_return &x;
        break;
    }
    slot* s = &slots[submitted.front()];
    submitted.pop_front();
    int rc = co_await s->op;
    if (rc < 0) co_return failed(-rc, "write data file");
    if (static_cast<unsigned>(rc) != s->length)
        co_return base::fail(base::errc::io_error, "short write to data file");
    co_return s;
}

void object_writer::submit(slot& s, std::size_t fill) {
    const std::uint32_t block = _options.block_bytes;
    for (std::size_t off = 0; off < fill; off += block) {
        std::size_t len = std::min<std::size_t>(block, fill - off);
        _block_crcs.push_back(base::crc32c({s.buf.data() + off, len}));
    }
    std::size_t padded = base::align_up(fill, align);
    std::memset(s.buf.data() + fill, 0, padded - fill);
    s.length = static_cast<unsigned>(padded);
    _scheduler->start_write(s.op, _drive, _fd, s.buf.data(), s.length, _size_bytes,
                            s.buf.registered_index());
    _size_bytes += fill;
    release_reserved(false);
}

io::task<base::result<std::uint64_t>> object_writer::write_from(byte_source& source,
                                                                std::uint64_t max_size_bytes) {
    FJORD_ASSERT(_fd >= 0);
    std::vector<slot> slots(_options.pipeline_depth);
    std::deque<std::size_t> submitted;  // slot indices in submission order
    base::result<void> status;
    bool eof = false;
    while (!eof && status) {
        auto s = co_await next_slot(slots, submitted);
        if (!s) {
            status = s.as_failure();
            break;
        }
        auto filled = co_await fill_and_submit(**s, source, max_size_bytes);
        if (!filled) {
            status = filled.as_failure();
            break;
        }
        if (*filled == 0) break;
        submitted.push_back(static_cast<std::size_t>(*s - slots.data()));
        if (*filled < (*s)->buf.capacity()) eof = true;
    }
    auto drained = co_await drain(slots);
    if (!status) co_return status.as_failure();
    if (!drained) co_return drained.as_failure();
    co_return _size_bytes;
}

io::task<base::result<std::size_t>> object_writer::fill_and_submit(slot& s, byte_source& source,
                                                                   std::uint64_t max_size_bytes) {
    std::size_t fill = 0;
    const std::size_t capacity = s.buf.capacity();
    while (fill < capacity) {
        auto n = co_await source.read(s.buf.data() + fill, capacity - fill);
        if (!n) co_return n.as_failure();
        if (*n == 0) break;
        fill += *n;
        if (_size_bytes + fill > max_size_bytes)
            co_return base::fail(base::errc::entity_too_large,
                                 "object larger than the allowed maximum");
    }
    if (fill > 0) {
        FJORD_CO_TRY(co_await account_to(base::align_up(_size_bytes + fill, align)));
        submit(s, fill);
    }
    co_return fill;
}

io::task<base::result<void>> object_writer::append(std::span<const std::byte> data) {
    FJORD_ASSERT(_fd >= 0);
    if (_push_slots.empty()) std::vector<slot>(_options.pipeline_depth).swap(_push_slots);
    while (!data.empty()) {
        if (!_push_current) {
            auto s = co_await next_slot(_push_slots, _push_submitted);
            if (!s) co_return s.as_failure();
            _push_current = *s;
            _push_fill = 0;
        }
        slot& s = *_push_current;
        std::size_t n = std::min(data.size(), s.buf.capacity() - _push_fill);
        std::memcpy(s.buf.data() + _push_fill, data.data(), n);
        _push_fill += n;
        data = data.subspan(n);
        if (_push_fill == s.buf.capacity()) {
            FJORD_CO_TRY(co_await account_to(base::align_up(_size_bytes + _push_fill, align)));
            submit(s, _push_fill);
            _push_submitted.push_back(static_cast<std::size_t>(&s - _push_slots.data()));
            _push_current = nullptr;
        }
    }
    co_return base::result<void>{};
}

io::task<base::result<std::uint64_t>> object_writer::finish_appends() {
    base::result<void> accounted;
    if (_push_current && _push_fill > 0) {
        accounted = co_await account_to(base::align_up(_size_bytes + _push_fill, align));
        if (accounted) submit(*_push_current, _push_fill);
    }
    _push_current = nullptr;
    auto drained = co_await drain(_push_slots);
    _push_slots.clear();
    _push_submitted.clear();
    if (!accounted) co_return accounted.as_failure();
    if (!drained) co_return drained.as_failure();
    co_return _size_bytes;
}

io::task<base::result<segment>> object_writer::seal() {
    FJORD_ASSERT(_fd >= 0);
    const std::uint32_t block = _options.block_bytes;
    FJORD_ASSERT(_block_crcs.size() == block_count_of(_size_bytes, block));
    std::uint64_t footer_len = footer_bytes(_size_bytes, block);
    if (footer_len > _pool.buffer_bytes())
        co_return base::fail(base::errc::entity_too_large, "object too large for one data file");
    io::buffer buf = co_await _pool.acquire();
    std::memset(buf.data(), 0, footer_len);
    footer_header h{};
    std::memcpy(h.magic, footer_magic, sizeof footer_magic);
    h.version = 1;
    h.block_bytes = block;
    h.size_bytes = _size_bytes;
    h.block_count = _block_crcs.size();
    h.id_hi = _id.hi;
    h.id_lo = _id.lo;
    h.table_crc = base::crc32c(base::as_bytes(_block_crcs.data(), _block_crcs.size() * 4));
    h.header_crc = base::crc32c(base::as_bytes(&h, offsetof(footer_header, header_crc)));
    std::memcpy(buf.data(), &h, sizeof h);
    // An empty object has no blocks (and a null table pointer, which memcpy must not be given).
    if (!_block_crcs.empty())
        std::memcpy(buf.data() + sizeof h, _block_crcs.data(), _block_crcs.size() * 4);
    std::uint64_t footer_offset = base::align_up(_size_bytes, align);
    int rc = co_await _drives.fs().write(_fd, buf.data(), static_cast<unsigned>(footer_len),
                                         footer_offset, buf.registered_index());
    buf.reset();
    if (rc < 0) co_return failed(-rc, "write data file footer");
    if (static_cast<std::uint64_t>(rc) != footer_len)
        co_return base::fail(base::errc::io_error, "short footer write");
    release_reserved(true);
    rc = co_await _drives.fs().fsync(_fd, true);
    if (rc < 0) co_return failed(-rc, "fdatasync data file");
    co_await _drives.fs().close(_fd);
    _fd = -1;
    segment seg;
    seg.drive = _drive;
    seg.id = _id;
    seg.size_bytes = _size_bytes;
    seg.block_bytes = block;
    seg.table_crc = h.table_crc;
    co_return seg;
}

io::task<void> object_writer::discard() {
    release_reserved(true);
    if (_fd >= 0) {
        co_await _drives.fs().close(_fd);
        _fd = -1;
    }
    if (_created) {
        co_await _drives.fs().unlinkat(_drives.dir_fd_for(_drive, _id), _name);
        _created = false;
    }
    // The drive filled up while writing: the space spares hold is given back, so that a retry can succeed.
    if (_out_of_space && _spares) co_await _spares->release(_drive);
}

// ---- reader ----

namespace {

struct read_slot {
    io::buffer buf;
    io::async_op op;
    std::uint64_t file_offset = 0;  // where this chunk starts in the file (block aligned)
    std::uint64_t data_bytes = 0;   // object bytes in this chunk
    unsigned length = 0;            // bytes requested (4 KiB aligned)
};

// Everything a segment read needs once the footer has been checked.
struct open_segment {
    int fd = -1;
    std::string name;
    std::vector<std::uint32_t> table;
    std::uint32_t drive = 0;
    std::optional<std::uint64_t> pinned_inode;  // see open_reads

    open_segment() = default;
    // A moved-from segment owns neither the descriptor nor the pin.
    open_segment(open_segment&& o) noexcept
        : fd(std::exchange(o.fd, -1)),
          name(std::move(o.name)),
          table(std::move(o.table)),
          drive(o.drive),
          pinned_inode(std::exchange(o.pinned_inode, std::nullopt)) {}
    open_segment& operator=(open_segment&& o) noexcept {
        FJORD_ASSERT(fd < 0 && !pinned_inode, "open_segment overwritten while open");
        fd = std::exchange(o.fd, -1);
        name = std::move(o.name);
        table = std::move(o.table);
        drive = o.drive;
        pinned_inode = std::exchange(o.pinned_inode, std::nullopt);
        return *this;
    }
};

// Closes the file and unpins it.
io::task<void> close_segment(const drive_set& drives, open_segment& file) {
    if (file.fd >= 0) co_await drives.fs().close(file.fd);
    file.fd = -1;
    if (file.pinned_inode) drives.reads().unpin(file.drive, *file.pinned_inode);
    file.pinned_inode.reset();
}

io::task<base::result<open_segment>> open_and_check(const drive_set& drives, io::buffer_pool& pool,
                                                    const segment& seg) {
    open_segment out;
    out.name = drives.at(seg.drive).path + "/objects/" + drive_set::file_name(seg.id);
    out.drive = seg.drive;
    file_system& fs = drives.fs();
    const int dir_fd = drives.dir_fd_for(seg.drive, seg.id);
    if (seg.size_bytes >= drives.spare_min_segment_bytes()) {
        // Its file may become a spare and be overwritten once its name is gone: pin it before opening it.
        file_stat st;
        int rc = co_await fs.stat(dir_fd, drive_set::file_name(seg.id), st);
        if (rc == -ENOENT)
            co_return base::fail(base::errc::not_found, "data file gone: " + out.name);
        if (rc < 0) co_return errno_failure(-rc, "stat " + out.name);
        drives.reads().pin(seg.drive, st.inode);
        out.pinned_inode = st.inode;
    }
    int fd =
        co_await fs.openat(dir_fd, drive_set::file_name(seg.id), O_RDONLY | O_DIRECT | O_NOFOLLOW);
    base::result<open_segment> failure_result = base::fail(base::errc::internal);
    if (fd == -ENOENT)
        failure_result = base::fail(base::errc::not_found, "data file gone: " + out.name);
    else if (fd < 0)
        failure_result = errno_failure(-fd, "open " + out.name);
    if (fd < 0) {
        co_await close_segment(drives, out);
        co_return failure_result;
    }
    out.fd = fd;
    std::uint64_t footer_len = footer_bytes(seg.size_bytes, seg.block_bytes);
    std::uint64_t footer_offset = base::align_up(seg.size_bytes, align);
    io::buffer buf = co_await pool.acquire();
    int rc = co_await fs.read(fd, buf.data(), static_cast<unsigned>(footer_len), footer_offset,
                              buf.registered_index());
    auto corrupt = [&](const char* why) {
        LOG_ERROR("data file %s: %s", out.name.c_str(), why);
        return base::fail(base::errc::data_corrupted,
                          std::string("stored data failed verification: ") + why);
    };
    if (rc < 0)
        failure_result = errno_failure(-rc, "read footer of " + out.name);
    else if (static_cast<std::uint64_t>(rc) != footer_len)
        failure_result = corrupt("footer truncated");
    else {
        footer_header h;
        std::memcpy(&h, buf.data(), sizeof h);
        std::uint64_t blocks = block_count_of(seg.size_bytes, seg.block_bytes);
        if (std::memcmp(h.magic, footer_magic, sizeof footer_magic) != 0)
            failure_result = corrupt("bad footer magic");
        else if (h.header_crc !=
                 base::crc32c(base::as_bytes(&h, offsetof(footer_header, header_crc))))
            failure_result = corrupt("footer header checksum mismatch");
        // The footer's id is the one the data was first written under: a server-side copy names the same
        // file under its own id (a hard link), so the id is not compared; size and table CRC are.
        else if (h.size_bytes != seg.size_bytes || h.block_bytes != seg.block_bytes ||
                 h.block_count != blocks || h.table_crc != seg.table_crc)
            failure_result = corrupt("footer does not match the metadata");
        else {
            out.table.resize(blocks);
            // An empty object has no blocks (and a null table, which memcpy must not be given).
            if (blocks > 0) std::memcpy(out.table.data(), buf.data() + sizeof h, blocks * 4);
            if (base::crc32c(base::as_bytes(out.table.data(), blocks * 4)) != seg.table_crc)
                failure_result = corrupt("block checksum table mismatch");
            else
                co_return out;
        }
    }
    co_await close_segment(drives, out);
    co_return failure_result;
}

// Verifies the blocks of one completed chunk; returns the bytes of the object it holds.
base::result<void> verify_chunk(const read_slot& s, const segment& seg, const open_segment& file) {
    const std::uint32_t block = seg.block_bytes;
    for (std::uint64_t off = 0; off < s.data_bytes; off += block) {
        std::uint64_t index = (s.file_offset + off) / block;
        std::uint64_t len = std::min<std::uint64_t>(block, s.data_bytes - off);
        if (base::crc32c({s.buf.data() + off, static_cast<std::size_t>(len)}) !=
            file.table[index]) {
            LOG_ERROR("data file %s: CRC32C mismatch in block %llu (offset %llu)",
                      file.name.c_str(), static_cast<unsigned long long>(index),
                      static_cast<unsigned long long>(s.file_offset + off));
            return base::fail(base::errc::data_corrupted,
                              "stored data failed its checksum; refusing to serve it");
        }
    }
    return {};
}

io::task<base::result<void>> read_segment(const drive_set& drives, io::buffer_pool& pool,
                                          const segment& seg, open_segment file,
                                          std::uint64_t begin, std::uint64_t end, byte_sink& sink,
                                          const data_file_options& options) {
    file_system& fs = drives.fs();
    const std::uint64_t chunk = pool.buffer_bytes();
    std::vector<read_slot> slots(options.pipeline_depth);
    std::deque<std::size_t> order;
    std::uint64_t next_offset = base::align_down(begin, seg.block_bytes);
    base::result<void> status;
    // Starts reads into idle slots; `busy` is the slot whose bytes the sink has not taken yet (reusing it
    // would overwrite them and change its offsets before they are delivered).
    auto submit_more = [&](std::size_t busy) -> bool {
        for (std::size_t i = 0; i < slots.size() && next_offset < end; ++i) {
            if (i == busy) continue;
            read_slot& s = slots[i];
            if (s.op.in_flight()) continue;
            if (!s.buf) {
                auto b = pool.try_acquire();
                if (!b) continue;
                s.buf = std::move(*b);
            }
            s.file_offset = next_offset;
            s.data_bytes = std::min<std::uint64_t>(chunk, seg.size_bytes - next_offset);
            s.length = static_cast<unsigned>(base::align_up(s.data_bytes, align));
            fs.start_read(s.op, file.fd, s.buf.data(), s.length, s.file_offset,
                          s.buf.registered_index());
            order.push_back(i);
            next_offset += chunk;
        }
        return !order.empty();
    };
    while (status && (next_offset < end || !order.empty())) {
        if (order.empty() && !submit_more(slots.size())) {
            // Nothing in flight and no free buffer: wait for one (we hold none, so this cannot deadlock).
            slots[0].buf = co_await pool.acquire();
            continue;
        }
        const std::size_t current = order.front();
        read_slot& s = slots[current];
        order.pop_front();
        int rc = co_await s.op;
        if (rc < 0) {
            status = errno_failure(-rc, "read " + file.name);
            break;
        }
        if (static_cast<std::uint64_t>(rc) < s.data_bytes) {
            LOG_ERROR("data file %s: truncated at %llu", file.name.c_str(),
                      static_cast<unsigned long long>(s.file_offset));
            status = base::fail(base::errc::data_corrupted, "stored data is truncated");
            break;
        }
        status = verify_chunk(s, seg, file);
        if (!status) break;
        submit_more(current);  // keep the disk busy while the socket drains this chunk
        std::uint64_t from = std::max(begin, s.file_offset);
        std::uint64_t to = std::min(end, s.file_offset + s.data_bytes);
        if (to > from)
            status = co_await sink.write(
                {s.buf.data() + (from - s.file_offset), static_cast<std::size_t>(to - from)});
    }
    for (auto& s : slots)
        if (s.op.in_flight()) co_await s.op;
    co_await close_segment(drives, file);
    co_return status;
}

}  // namespace

// Up to this many data files of one object are opened before the first byte is sent, so an overwrite or
// delete that frees them meanwhile cannot cut the response short (an open file outlives its name, and a
// pinned one is never reused as a spare).
// Objects with more parts open the rest as the read reaches them.
constexpr std::size_t max_files_opened_ahead = 1024;

io::task<base::result<void>> read_object(const drive_set& drives, io::buffer_pool& pool,
                                         object_record record, std::uint64_t offset,
                                         std::uint64_t length, byte_sink& sink,
                                         data_file_options options) {
    std::uint64_t end = offset + length;
    FJORD_ASSERT(end <= record.size_bytes);
    if (!record.inline_data.empty()) {  // a small object kept in its record
        const auto* bytes = reinterpret_cast<const std::byte*>(record.inline_data.data());
        co_return co_await sink.write(std::span<const std::byte>(bytes + offset, length));
    }
    struct piece {
        const segment* seg;
        std::uint64_t begin, end;
        std::optional<open_segment> file;
    };
    std::vector<piece> pieces;
    std::uint64_t segment_start = 0;
    for (const segment& seg : record.segments) {
        std::uint64_t segment_end = segment_start + seg.size_bytes;
        if (segment_end > offset && segment_start < end)
            pieces.push_back({&seg, std::max(offset, segment_start) - segment_start,
                              std::min(end, segment_end) - segment_start, std::nullopt});
        segment_start = segment_end;
        if (segment_start >= end) break;
    }
    base::result<void> status;
    for (std::size_t i = 0; i < pieces.size() && i < max_files_opened_ahead && status; ++i) {
        auto opened = co_await open_and_check(drives, pool, *pieces[i].seg);
        if (opened)
            pieces[i].file = std::move(*opened);
        else
            status = opened.as_failure();
    }
    for (std::size_t i = 0; i < pieces.size() && status; ++i) {
        if (!pieces[i].file) {
            auto opened = co_await open_and_check(drives, pool, *pieces[i].seg);
            if (!opened) {
                status = opened.as_failure();
                break;
            }
            pieces[i].file = std::move(*opened);
        }
        open_segment file = std::move(*pieces[i].file);
        pieces[i].file.reset();
        status = co_await read_segment(drives, pool, *pieces[i].seg, std::move(file),
                                       pieces[i].begin, pieces[i].end, sink, options);
    }
    for (auto& p : pieces)  // files opened ahead but not read (an earlier piece failed)
        if (p.file) co_await close_segment(drives, *p.file);
    co_return status;
}

}  // namespace fjord::store
