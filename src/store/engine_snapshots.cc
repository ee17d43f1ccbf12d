// Snapshots and journal rotation, on the shard's owner core; the snapshot file's header.
#include "store/engine.h"
#include "store/engine_internal.h"

#include <fcntl.h>
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <coroutine>
#include <cstring>
#include <deque>
#include <unordered_map>
#include <unordered_set>

#include "base/checksum.h"
#include "base/clock.h"
#include "base/log.h"
#include "io/cross_core.h"
#include "io/ops.h"
#include "io/reactor.h"

namespace fjord::store {

// Snapshot file: a 24-byte header, magic | u64 last_seq | u32 crc32c(magic, last_seq) | u32 zero, then the
// state as journal records (seq 1, 2, ...) ending in record_snapshot_end. last_seq is the sequence number
// of the last journal record the state contains: the next journal must start right after it, so one
// damaged byte there would make every later record look like a torn tail; hence its own checksum. A v1
// snapshot (16-byte header, no checksum) from before is still read.
constexpr char snapshot_magic_v1[8] = {'F', 'J', 'S', 'N', 'A', 'P', '0', '1'};
constexpr char snapshot_magic[8] = {'F', 'J', 'S', 'N', 'A', 'P', '0', '2'};
constexpr std::size_t snapshot_header_bytes = 24;

std::string snapshot_header(std::uint64_t last_seq) {
    std::string header(snapshot_magic, 8);
    header.append(reinterpret_cast<const char*>(&last_seq), 8);
    std::uint32_t crc = base::crc32c(base::as_bytes(header.data(), header.size()));
    header.append(reinterpret_cast<const char*>(&crc), 4);
    header.append(4, '\0');
    return header;
}

// The last_seq of a snapshot image and where its records start; nullopt when the header is damaged.
std::optional<std::pair<std::uint64_t, std::size_t>> parse_snapshot_header(
    const std::string& image) {
    std::uint64_t last_seq = 0;
    if (image.size() >= 16 && std::memcmp(image.data(), snapshot_magic_v1, 8) == 0) {
        std::memcpy(&last_seq, image.data() + 8, 8);
        return std::pair{last_seq, std::size_t{16}};
    }
    if (image.size() < snapshot_header_bytes || std::memcmp(image.data(), snapshot_magic, 8) != 0)
        return std::nullopt;
    std::uint32_t crc = 0, reserved = 0;
    std::memcpy(&last_seq, image.data() + 8, 8);
    std::memcpy(&crc, image.data() + 16, 4);
    std::memcpy(&reserved, image.data() + 20, 4);
    if (crc != base::crc32c(base::as_bytes(image.data(), 16)) || reserved != 0) return std::nullopt;
    return std::pair{last_seq, snapshot_header_bytes};
}

std::string gen_name(const char* kind, std::uint64_t gen, const char* ext) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s-%08llu.%s", kind, static_cast<unsigned long long>(gen), ext);
    return buf;
}

namespace {

// Writes `bytes` to a new file at `path` and makes them durable; 0, or the failure (-errno).
io::task<int> write_durable_file(file_system& fs, const std::string& path,
                                 const std::string& bytes) {
    int fd = co_await fs.openat(AT_FDCWD, path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) co_return fd;
    std::size_t done = 0;
    int rc = 0;
    while (done < bytes.size()) {
        unsigned len = static_cast<unsigned>(std::min<std::size_t>(bytes.size() - done, 1 << 30));
        rc = co_await fs.write(fd, bytes.data() + done, len, done);
        if (rc <= 0) break;
        done += static_cast<std::size_t>(rc);
    }
    if (done == bytes.size()) rc = co_await fs.fsync(fd, true);
    co_await fs.close(fd);
    if (done != bytes.size()) co_return rc < 0 ? rc : -EIO;
    co_return rc < 0 ? rc : 0;
}

}  // namespace

std::string engine::snapshot_image(const shard& s) const {
    // Between batches every durable record is applied and nothing queued is: the index is exactly the
    // state up to durable_seq, and the queued batches (their records numbered after it) go to the new file.
    std::string image = snapshot_header(s.log->durable_seq());
    std::uint64_t seq = 1;
    if (s.id == 0) {
        for (const auto& [name, info] : local().buckets) {
            std::string payload;
            encoder e(payload);
            e.str(info.name);
            e.i64(info.created_ms);
            frame_record(image, seq++, record_create_bucket, payload);
            for (const auto& [attribute, value] : info.attributes)
                frame_record(image, seq++, record_bucket_attribute,
                             bucket_attribute_payload(info.name, attribute, &value));
        }
    }
    // Each key's older versions first, oldest first, then its current one: replayed by apply_put's rule,
    // they come back in the same order (their ids differ, so none replaces another).
    auto put = [&](const std::string& bucket, const std::string& key, const object_record& record) {
        std::string payload;
        encoder e(payload);
        e.str(bucket);
        e.str(key);
        encode(e, record);
        frame_record(image, seq++, record_put_object, payload);
    };
    for (const auto& [bucket, keys] : s.index) {
        auto h = s.history.find(bucket);
        for (const auto& [key, record] : keys) {
            if (h != s.history.end())
                if (auto older = h->second.find(key); older != h->second.end())
                    for (const auto& r : older->second) put(bucket, key, r);
            put(bucket, key, record);
        }
    }
    for (const auto& [id, upload] : s.uploads) {
        std::string payload;
        encoder e(payload);
        encode_upload_header(e, upload);
        frame_record(image, seq++, record_create_upload, payload);
        for (const auto& [number, part] : upload.parts) {
            std::string part_payload;
            encoder pe(part_payload);
            pe.str(id);
            encode_part(pe, part);
            frame_record(image, seq++, record_put_part, part_payload);
        }
    }
    frame_record(image, seq, record_snapshot_end, {});
    return image;
}

io::task<void> engine::rotate(shard& s) {
    // Snapshot G+1 holds the state after every record in journals <= G; journal G+1 continues from there.
    const std::uint64_t next_gen = s.generation + 1;
    // Built before the first suspension; while the rotation runs no batch is written, so durable_seq and
    // the index stay as the image has them, and appends queued meanwhile are numbered after it.
    const std::string image = snapshot_image(s);
    const std::string tmp = s.dir + "/" + gen_name("snapshot", next_gen, "tmp");
    const std::string new_journal = s.dir + "/" + gen_name("journal", next_gen, "log");
    auto fail = [&](const char* what, int rc) {
        LOG_ERROR("snapshot of shard %u failed at %s: %s; keeping the current journal", s.id, what,
                  strerror(-rc));
    };
    file_system& fs = _drives.fs();
    if (int rc = co_await write_durable_file(fs, tmp, image); rc < 0) {
        fail("write", rc);
        co_await fs.unlinkat(AT_FDCWD, tmp);
        co_return;
    }
    // The new journal exists before the snapshot is renamed into place, so once the snapshot is visible
    // nothing can fail before the switch: a snapshot never hides records written to the old journal.
    // It is always a new file: a journal G+1 seen now is left by an earlier attempt whose removal failed
    // too (recovery makes the newest journal the active one, so it holds no record), and its directory
    // entry may never become durable (a failed fsync loses it for good), so reusing it could put
    // acknowledged records into a file a crash takes away.
    int jfd = co_await fs.unlinkat(AT_FDCWD, new_journal);
    if (jfd < 0 && jfd != -ENOENT) {
        fail("remove a journal left by a failed attempt", jfd);
    } else if ((jfd = co_await fs.openat(AT_FDCWD, new_journal, O_WRONLY | O_CREAT | O_EXCL,
                                         0600)) < 0) {
        fail("create journal", jfd);
    }
    if (jfd < 0) {
        co_await fs.unlinkat(AT_FDCWD, tmp);
        co_return;
    }
    if (co_await publish_snapshot(s, next_gen, tmp, jfd, new_journal)) {
        s.log->defer_next_rotation(image.size());
        LOG_INFO("shard %u: snapshot %llu written (%zu bytes)", s.id,
                 static_cast<unsigned long long>(next_gen), image.size());
    }
}

io::task<bool> engine::publish_snapshot(shard& s, std::uint64_t next_gen, std::string tmp, int jfd,
                                        std::string new_journal) {
    file_system& fs = _drives.fs();
    int dir_fd = co_await fs.openat(AT_FDCWD, s.dir, O_RDONLY | O_DIRECTORY);
    int rc = dir_fd < 0 ? dir_fd : co_await fs.fsync(dir_fd, false);
    if (rc >= 0)
        rc = co_await fs.renameat(AT_FDCWD, tmp, AT_FDCWD,
                                  s.dir + "/" + gen_name("snapshot", next_gen, "snap"));
    if (rc < 0) {
        // No snapshot G+1 is visible: journal G stays in use and complete. Journal G+1 is removed too:
        // if the failure was the directory fsync, its entry may never become durable, and a later
        // attempt that found the name still there would write acknowledged records into a file a crash
        // can take away (an empty G+1 surviving the removal is harmless: recovery replays it after G).
        LOG_ERROR("snapshot of shard %u failed at %s: %s; keeping the current journal", s.id,
                  dir_fd < 0 ? "open the metadata directory"
                             : "fsync or rename in the metadata directory",
                  strerror(-rc));
        if (dir_fd >= 0) co_await fs.close(dir_fd);
        co_await fs.close(jfd);
        co_await fs.unlinkat(AT_FDCWD, tmp);
        co_await fs.unlinkat(AT_FDCWD, new_journal);
        co_return false;
    }
    // From here the switch must happen: once snapshot G+1 may be visible, recovery ignores journal G.
    // If the rename is not yet durable, recovery replays G then G+1 instead: consistent either way, as
    // long as G and snapshot G stay until the rename is known to be durable. So they are removed only
    // after a successful fsync of the directory; otherwise the next start removes them.
    rc = co_await fs.fsync(dir_fd, false);
    if (rc < 0)
        LOG_WARN(
            "shard %u: fsync of the metadata directory failed: %s (keeping the previous journal and "
            "snapshot)",
            s.id, strerror(-rc));
    co_await fs.close(dir_fd);
    std::string old_journal = s.log->path();
    int old_fd = s.log->replace_file(jfd, std::move(new_journal));
    co_await fs.close(old_fd);
    std::string old_snapshot = s.dir + "/" + gen_name("snapshot", s.generation, "snap");
    s.generation = next_gen;
    if (rc >= 0) {
        co_await fs.unlinkat(AT_FDCWD, old_journal);
        co_await fs.unlinkat(AT_FDCWD, old_snapshot);
    }
    co_return true;
}

std::vector<engine::stored_object> engine::local_objects() const {
    unsigned core = io::reactor::current().core();
    std::vector<stored_object> out;
    for (const auto& s : _shards) {
        if (owner_of(s->id) != core) continue;
        for (const auto& [bucket, keys] : s->index)
            for (const auto& [key, record] : keys)
                if (!record.delete_marker) out.push_back({bucket, key, record});
        for (const auto& [bucket, keys] : s->history)
            for (const auto& [key, older] : keys)
                for (const auto& record : older)
                    if (!record.delete_marker) out.push_back({bucket, key, record});
    }
    return out;
}

io::task<void> engine::snapshot_local_shards() {
    unsigned core = io::reactor::current().core();
    for (auto& s : _shards)
        if (owner_of(s->id) == core) co_await s->log->rotate_now();
}

}  // namespace fjord::store
