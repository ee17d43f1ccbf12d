#pragma once

// Data files: an object's bytes written and read with O_DIRECT through io_uring, several I/Os in flight,
// with a CRC32C per block verified on every read.
//
// File layout (all offsets 4 KiB aligned):
//   [0, size)                 the object's bytes (the tail of the last 4 KiB is zero padding)
//   [align_up(size, 4 KiB))   footer: 64-byte header (magic, size, block size, id, table CRC, header CRC)
//                             followed by one CRC32C per block, padded to 4 KiB
// The metadata record keeps the table's CRC, so a corrupted footer is detected as surely as corrupted data.
// A file may have several names (hard links, one per object id): server-side copies share data that way, and
// removing one object removes only its name.
// A writer or reader belongs to the coroutine that created it, on one core.

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "base/result.h"
#include "io/buffer_pool.h"
#include "io/ops.h"
#include "io/task.h"
#include "store/bytes.h"
#include "store/drive.h"
#include "store/object.h"
#include "store/spare_files.h"
#include "store/write_scheduler.h"

namespace fjord::store {

struct data_file_options {
    std::uint32_t block_bytes = 64 * 1024;  // CRC granularity; also the smallest read unit
    std::size_t pipeline_depth = 4;         // I/Os in flight per request
};

constexpr std::uint64_t max_data_file_bytes = 5ULL * 1024 * 1024 * 1024;  // one PUT or one part

class object_writer {
public:
    // Data writes go through `scheduler` (the core's, shared by every request on it); without one the
    // writer has its own, which bounds only this writer's writes (pipeline_depth whole buffers). With
    // `spares` (the engine's), a write of known size reuses a spare data file when one fits.
    object_writer(const drive_set& drives, io::buffer_pool& pool, object_id id,
                  data_file_options options = {}, write_scheduler* scheduler = nullptr,
                  spare_files* spares = nullptr);
    ~object_writer();
    object_writer(const object_writer&) = delete;
    object_writer& operator=(const object_writer&) = delete;

    // Creates the file, or with a known size takes a spare that fits. A write the drive cannot take while
    // keeping its free-space floor fails here with storage_full, before any byte of the body is accepted
    // (after the drive's spares were freed). With a known size the file is then preallocated one step
    // (drive_space.h) ahead of the bytes written, never all at once.
    io::task<base::result<void>> open(std::optional<std::uint64_t> expected_size_bytes);
    // Streams `source` to the file until it ends. Fails with entity_too_large past max_size_bytes.
    io::task<base::result<std::uint64_t>> write_from(byte_source& source,
                                                     std::uint64_t max_size_bytes);
    // Push interface, for server-side copies: append() copies bytes into the writer's buffers and writes
    // each full one; finish_appends() writes the rest and waits for every write. Then seal().
    io::task<base::result<void>> append(std::span<const std::byte> data);
    io::task<base::result<std::uint64_t>> finish_appends();
    // Writes the footer, makes the file durable (fdatasync) and closes it.
    io::task<base::result<segment>> seal();
    // Closes and removes the file (an aborted or failed upload).
    io::task<void> discard();

    const std::vector<std::uint32_t>& block_crcs() const { return _block_crcs; }
    std::uint64_t size_bytes() const { return _size_bytes; }
    std::uint32_t drive_index() const { return _drive; }
    const object_id& id() const { return _id; }

private:
    struct slot {
        io::buffer buf;
        scheduled_write op;
        unsigned length = 0;
    };
    // A failed file operation's error; remembers a full drive (discard() then frees the spares).
    base::failure failed(int err, const std::string& what);
    // storage_full unless `bytes` more fit on the drive above its free-space floor (spares freed first).
    io::task<base::result<void>> admit(std::uint64_t bytes);
    // Admits, and while reserving preallocates, the file up to offset `end`, a step at a time.
    io::task<base::result<void>> account_to(std::uint64_t end);
    // Gives back the reserve-ahead budget of the bytes written so far (all of it, when done).
    void release_reserved(bool all);
    io::task<base::result<void>> drain(std::vector<slot>& slots);
    // A slot whose buffer is free to fill: an idle one, a new buffer, or the oldest write awaited.
    io::task<base::result<slot*>> next_slot(std::vector<slot>& slots,
                                            std::deque<std::size_t>& submitted);
    // CRCs the filled bytes, pads to 4 KiB and starts the write.
    void submit(slot& s, std::size_t fill);
    // Fills s.buf from the source and starts its write; returns the bytes taken (0 at the end).
    io::task<base::result<std::size_t>> fill_and_submit(slot& s, byte_source& source,
                                                        std::uint64_t max_size_bytes);

    const drive_set& _drives;
    io::buffer_pool& _pool;
    object_id _id;
    data_file_options _options;
    std::unique_ptr<write_scheduler> _own_scheduler;
    write_scheduler* _scheduler;
    spare_files* _spares;
    std::uint32_t _drive;
    int _fd = -1;
    bool _created = false;
    bool _out_of_space = false;
    // Space accounting (drive_space.h), in file offsets: [0, _accounted_end) passed the floor check;
    // [0, _claimed_end) is preallocated on the server's reserve-ahead budget, of which [0, _released_to)
    // was given back as its bytes were written.
    std::uint64_t _expected_total = 0;  // declared data + footer; 0 when the size is unknown
    std::uint64_t _accounted_end = 0;
    std::uint64_t _claimed_end = 0;
    std::uint64_t _released_to = 0;
    bool _reserving = true;  // false once a step went without a reservation: none after it
    std::uint64_t _size_bytes = 0;
    std::vector<std::uint32_t> _block_crcs;
    std::string _name;
    std::vector<slot> _push_slots;
    std::deque<std::size_t> _push_submitted;
    slot* _push_current = nullptr;
    std::size_t _push_fill = 0;
};

// Streams bytes [offset, offset + length) of an object to `sink`, verifying every block read. Errors:
// not_found when a data file vanished (the object was overwritten meanwhile: look it up again),
// data_corrupted on a checksum mismatch (logged with the file name), io_error otherwise.
io::task<base::result<void>> read_object(const drive_set& drives, io::buffer_pool& pool,
                                         object_record record, std::uint64_t offset,
                                         std::uint64_t length, byte_sink& sink,
                                         data_file_options options = {});

// Length of the footer for an object of this size (exposed for tests and the scrubber).
std::uint64_t footer_bytes(std::uint64_t size_bytes, std::uint32_t block_bytes);

}  // namespace fjord::store
