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

namespace {

// The key lock that orders a bucket's create, delete and attribute changes on shard 0 (no object key
// starts with \x01).
std::string bucket_lock_name(const std::string& bucket) { return "\x01bucket:" + bucket; }

// A record_bucket_attribute: the attribute's new value, or (value null) its removal.
std::string bucket_attribute_payload(const std::string& bucket, const std::string& name,
                                     const std::string* value) {
    std::string payload;
    encoder e(payload);
    e.str(bucket);
    e.str(name);
    e.u8(value ? 1 : 0);
    e.str(value ? *value : std::string());
    return payload;
}

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

std::string shard_dir(const std::string& meta, unsigned id) {
    return meta + "/shard-" + std::to_string(id);
}
std::string gen_name(const char* kind, std::uint64_t gen, const char* ext) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s-%08llu.%s", kind, static_cast<unsigned long long>(gen), ext);
    return buf;
}

}  // namespace

std::string prefix_successor(std::string prefix) {
    while (!prefix.empty()) {
        unsigned char last = static_cast<unsigned char>(prefix.back());
        if (last < 0xff) {
            prefix.back() = static_cast<char>(last + 1);
            return prefix;
        }
        prefix.pop_back();
    }
    return prefix;
}

std::string lock_name(const std::string& bucket, const std::string& key) {
    std::string name = bucket;
    name.push_back('\0');
    name += key;
    return name;
}

base::result<void> check_conditions(const object_record* existing, const write_conditions& c) {
    if (c.if_none_match_any && existing)
        return base::fail(base::errc::precondition_failed, "a write condition does not hold");
    if (c.if_match_etag) {
        if (!existing) return base::fail(base::errc::no_such_key, "no such key");
        if (*c.if_match_etag != "*" && *c.if_match_etag != existing->etag)
            return base::fail(base::errc::precondition_failed, "a write condition does not hold");
    }
    if (c.if_etag_below && existing && !(existing->etag < *c.if_etag_below))
        return base::fail(base::errc::precondition_failed, "a newer version is stored");
    return {};
}

engine::engine(engine_options options, drive_set drives)
    : _options(std::move(options)), _drives(std::move(drives)) {
    _spares = std::make_unique<spare_files>(_drives, _options.spares);
    // Without spares no file is ever reused, so readers need not pin any.
    _drives.set_spare_min_segment_bytes(_spares->enabled() ? _options.spares.min_segment_bytes
                                                           : UINT64_MAX);
}

engine::~engine() = default;

base::result<std::unique_ptr<engine>> engine::open(engine_options options) {
    if (options.cores == 0 || options.cores > 256)
        return base::fail(base::errc::invalid_argument, "cores must be 1..256");
    auto drives = drive_set::open(options.data_dirs, options.fs ? *options.fs : posix_file_system(),
                                  options.accept_empty_drives);
    if (!drives) return drives.as_failure();
    std::vector<int> roots;
    for (std::uint32_t d = 0; d < drives->size(); ++d) roots.push_back(drives->at(d).root_fd);
    FJORD_TRY(drives->space().configure(drives->fs(), roots, options.space));
    std::unique_ptr<engine> e(new engine(std::move(options), std::move(*drives)));
    if (e->_options.boot_nonce)
        e->_boot_nonce = *e->_options.boot_nonce;
    else if (getrandom(&e->_boot_nonce, sizeof e->_boot_nonce, 0) != sizeof e->_boot_nonce)
        return base::fail(base::errc::internal, "getrandom failed");
    for (unsigned c = 0; c < e->_options.cores; ++c)
        e->_cores.push_back(std::make_unique<core_state>());
    FJORD_TRY(e->recover());
    FJORD_TRY(e->remove_orphans());
    for (auto& c : e->_cores) c->buckets = e->_recovered_buckets;
    return e;
}

void engine::attach_core(unsigned core, io_uring* ring) {
    core_state& cs = *_cores.at(core);
    cs.pool = std::make_unique<io::buffer_pool>(_options.buffers);
    cs.pool->register_with(ring);
    std::size_t write_bytes = std::min(_options.writes.write_bytes, _options.buffers.buffer_bytes);
    cs.writes = std::make_unique<write_scheduler>(
        _drives.fs(), _drives.size(),
        write_scheduler::slots_per_core(_options.writes, _options.cores), write_bytes);
    for (auto& s : _shards) {
        if (owner_of(s->id) != core) continue;
        s->log->set_rotation(_options.journal_rotate_bytes,
                             [this, sp = s.get()] { return rotate(*sp); });
    }
    // A streaming copy holds at most pipeline_depth read and pipeline_depth write buffers.
    std::size_t per_copy = 2 * std::max<std::size_t>(1, _options.data_files.pipeline_depth);
    cs.copies = std::make_unique<io::semaphore>(
        std::max<std::size_t>(1, _options.buffers.buffer_count / (2 * per_copy)));
}

engine::core_state& engine::local() { return *_cores[io::reactor::current().core()]; }
const engine::core_state& engine::local() const { return *_cores[io::reactor::current().core()]; }
io::buffer_pool& engine::pool() { return *local().pool; }
io::semaphore& engine::copy_admission() { return *local().copies; }
write_scheduler& engine::writes() { return *local().writes; }
spare_files& engine::spares() { return *_spares; }

unsigned engine::shard_of(const std::string& bucket, const std::string& key) const {
    std::uint32_t h = base::crc32c(base::as_bytes(bucket.data(), bucket.size()));
    h = base::crc32c(base::as_bytes("\0", 1), h);
    h = base::crc32c(base::as_bytes(key.data(), key.size()), h);
    return h % static_cast<unsigned>(_shards.size());
}

object_id engine::new_object_id() {
    core_state& cs = local();
    object_id id;
    id.hi = _boot_nonce;
    id.lo = (static_cast<std::uint64_t>(io::reactor::current().core()) << 56) | cs.next_id++;
    return id;
}

bool engine::bucket_exists(const std::string& name) const {
    const core_state& cs = local();
    return cs.buckets.count(name) && !cs.closing.count(name);
}

std::vector<bucket_info> engine::list_buckets() const {
    std::vector<bucket_info> out;
    for (const auto& [name, info] : local().buckets) out.push_back(info);
    return out;
}

std::optional<bucket_info> engine::find_bucket(const std::string& name) const {
    if (!bucket_exists(name)) return std::nullopt;
    return local().buckets.at(name);
}

bool engine::bucket_has_attribute(const std::string& bucket, const std::string& name) const {
    const core_state& cs = local();
    auto found = cs.buckets.find(bucket);
    return found != cs.buckets.end() && !cs.closing.count(bucket) &&
           found->second.attributes.count(name);
}

// ---- recovery (startup, blocking I/O, before any reactor runs) ----

namespace {
struct record_applier {
    key_index& index;
    key_history& history;
    std::map<std::string, upload_record>& uploads;
    std::map<std::string, bucket_info>* buckets;  // shard 0 only
    bool ok = true;

    bool apply_upload_record(std::uint8_t type, decoder& d) {
        if (type == record_create_upload) {
            upload_record u;
            if (!decode_upload_header(d, u)) return false;
            uploads[u.upload_id] = std::move(u);
        } else if (type == record_put_part) {
            std::string id = d.str();
            part_record p;
            if (!decode_part(d, p)) return false;
            auto it = uploads.find(id);
            if (it != uploads.end()) it->second.parts[p.number] = std::move(p);
        } else if (type == record_complete_upload) {
            std::string id = d.str(), bucket = d.str(), key = d.str();
            object_record r;
            if (!decode(d, r)) return false;
            // A completion journaled after an abort of the same upload did not happen (as when it ran).
            if (uploads.erase(id) == 1) apply_put(index, history, bucket, key, std::move(r));
        } else if (type == record_abort_upload) {
            uploads.erase(d.str());
        } else {
            return false;
        }
        return true;
    }

    void apply_version_record(std::uint8_t type, decoder& d) {
        std::string bucket = d.str(), key = d.str();
        if (type == record_delete_version) {
            std::string version_id = d.str();
            apply_remove(index, history, bucket, key, &version_id);
            return;
        }
        object_record r;
        if (!decode(d, r)) ok = false;
        if (ok) apply_edit(index, history, bucket, key, std::move(r));
    }

    void operator()(std::uint64_t, std::uint8_t type, std::string_view payload) {
        decoder d(payload);
        if (type == record_put_object) {
            std::string bucket = d.str(), key = d.str();
            object_record r;
            if (!decode(d, r)) {
                ok = false;
                return;
            }
            apply_put(index, history, bucket, key, std::move(r));
        } else if (type == record_delete_object) {
            std::string bucket = d.str(), key = d.str();
            apply_remove(index, history, bucket, key, nullptr);
        } else if (type == record_delete_version || type == record_edit_version) {
            apply_version_record(type, d);
        } else if (type == record_create_bucket && buckets) {
            bucket_info info;
            info.name = d.str();
            info.created_ms = d.i64();
            (*buckets)[info.name] = info;
        } else if (type == record_delete_bucket && buckets) {
            buckets->erase(d.str());
        } else if (type == record_bucket_attribute && buckets) {
            std::string bucket = d.str(), name = d.str();
            bool present = d.u8() != 0;
            std::string value = d.str();
            // Shard 0 journals a bucket's records in order, so its bucket is here; were it not, the
            // attribute would describe nothing, and nothing is lost by leaving it out.
            auto it = buckets->find(bucket);
            if (it != buckets->end() && present)
                it->second.attributes[name] = std::move(value);
            else if (it != buckets->end())
                it->second.attributes.erase(name);
        } else if (type >= record_create_upload && type <= record_abort_upload) {
            if (!apply_upload_record(type, d)) ok = false;
        } else if (type != record_snapshot_end) {
            ok = false;
        }
        if (!d.ok()) ok = false;
    }
};

base::result<std::vector<std::uint64_t>> generations_in(file_system& fs, const std::string& dir,
                                                        const char* kind, const char* ext) {
    auto names = fs.list_blocking(dir);
    if (!names) return names.as_failure();
    std::vector<std::uint64_t> gens;
    std::string prefix = std::string(kind) + "-", suffix = std::string(".") + ext;
    for (const std::string& name : *names)
        if (name.size() == prefix.size() + 8 + suffix.size() && name.starts_with(prefix) &&
            name.ends_with(suffix))
            gens.push_back(std::strtoull(name.c_str() + prefix.size(), nullptr, 10));
    std::sort(gens.begin(), gens.end());
    return gens;
}
}  // namespace

base::result<void> engine::recover() {
    file_system& fs = _drives.fs();
    std::string meta = _drives.meta_path();
    std::string format_path = meta + "/FORMAT";
    unsigned shard_count = 0;
    int probe = fs.open_blocking(format_path, O_RDONLY);
    if (probe >= 0) {
        fs.close_blocking(probe);
        auto text = fs.read_file_blocking(format_path);
        if (!text) return text.as_failure();
        if (std::sscanf(text->c_str(), "fjord-meta v1 shards=%u", &shard_count) != 1 ||
            shard_count == 0 || shard_count > 1024)
            return base::fail(base::errc::data_corrupted,
                              format_path + " is not a valid Fjord metadata format file");
    } else if (probe == -ENOENT) {
        shard_count = _options.cores;
        FJORD_TRY(fs.replace_file_blocking(
            format_path, "fjord-meta v1 shards=" + std::to_string(shard_count) + "\n"));
    } else {
        return base::fail(base::errc::io_error, "open " + format_path + ": " + strerror(-probe));
    }
    for (unsigned i = 0; i < shard_count; ++i) {
        auto s = std::make_unique<shard>();
        s->id = i;
        s->dir = shard_dir(meta, i);
        if (int rc = fs.mkdir_blocking(s->dir); rc < 0 && rc != -EEXIST)
            return base::fail(base::errc::io_error, "mkdir " + s->dir + ": " + strerror(-rc));
        FJORD_TRY(recover_shard(*s));
        for (auto& [bucket, keys] : s->index) {
            _recovery.objects += keys.size();
            for (const auto& [key, record] : keys) _inline_bytes += record.inline_data.size();
        }
        for (auto& [bucket, keys] : s->history)
            for (const auto& [key, older] : keys)
                for (const auto& record : older) _inline_bytes += record.inline_data.size();
        _shards.push_back(std::move(s));
    }
    if (int rc = fs.fsync_path_blocking(meta); rc < 0)
        return base::fail(base::errc::io_error, "fsync " + meta + ": " + strerror(-rc));
    LOG_INFO(
        "recovered %llu objects in %zu buckets from %u shards (%llu journal records, %llu torn tails dropped)",
        static_cast<unsigned long long>(_recovery.objects), _recovered_buckets.size(), shard_count,
        static_cast<unsigned long long>(_recovery.journal_records),
        static_cast<unsigned long long>(_recovery.torn_tails));
    return {};
}

namespace {

struct recovered_snapshot {
    std::uint64_t generation = 0;  // 0: none
    std::uint64_t next_seq = 1;    // what the next journal's first record must carry
};

// Applies the newest snapshot of a shard directory (and removes older ones); a damaged one refuses the start.
base::result<recovered_snapshot> recover_snapshot(file_system& fs, const std::string& dir,
                                                  record_applier& apply) {
    auto listed = generations_in(fs, dir, "snapshot", "snap");
    if (!listed) return listed.as_failure();
    recovered_snapshot out;
    if (listed->empty()) return out;
    out.generation = listed->back();
    std::string path = dir + "/" + gen_name("snapshot", out.generation, "snap");
    auto image = fs.read_file_blocking(path);
    if (!image) return image.as_failure();
    auto header = parse_snapshot_header(*image);
    if (!header)
        return base::fail(
            base::errc::data_corrupted,
            path +
                ": not a Fjord snapshot, or its header is damaged; refusing to start without it");
    auto [last_seq, records_at] = *header;
    bool ended = false;
    journal_scan scan =
        scan_journal(std::string_view(*image).substr(records_at), 1,
                     [&](std::uint64_t seq, std::uint8_t type, std::string_view payload) {
                         if (type == record_snapshot_end)
                             ended = true;
                         else
                             apply(seq, type, payload);
                     });
    if (!ended || scan.torn_tail || !apply.ok)
        return base::fail(base::errc::data_corrupted,
                          path + " is damaged; refusing to start without it");
    out.next_seq = last_seq + 1;
    for (std::uint64_t g : *listed)
        if (g < out.generation) fs.unlink_blocking(dir + "/" + gen_name("snapshot", g, "snap"));
    return out;
}

// The newest journal from `active_gen` on that holds any bytes (0: none). A journal was complete when the
// next one was started, so damage in one before it is not a torn tail; an empty later journal does not
// count (a rotation that failed after creating it may have left it behind).
base::result<std::uint64_t> last_written_journal(file_system& fs, const std::string& dir,
                                                 const std::vector<std::uint64_t>& journals,
                                                 std::uint64_t active_gen) {
    std::uint64_t last = 0;
    for (std::uint64_t g : journals) {
        if (g < active_gen) continue;
        std::string name = gen_name("journal", g, "log");
        int fd = fs.open_blocking(dir + "/" + name, O_RDONLY);
        if (fd < 0)
            return base::fail(base::errc::io_error, "open journal " + name + ": " + strerror(-fd));
        std::int64_t size = fs.size_blocking(fd);
        fs.close_blocking(fd);
        if (size < 0) return base::fail(base::errc::io_error, "size of journal " + name);
        if (size > 0) last = g;
    }
    return last;
}

}  // namespace

base::result<void> engine::recover_shard(shard& s) {
    record_applier apply{s.index, s.history, s.uploads, s.id == 0 ? &_recovered_buckets : nullptr};
    auto visit = [&apply](std::uint64_t seq, std::uint8_t type, std::string_view payload) {
        apply(seq, type, payload);
    };
    file_system& fs = _drives.fs();
    auto snapshot = recover_snapshot(fs, s.dir, apply);
    if (!snapshot) return snapshot.as_failure();
    std::uint64_t snapshot_gen = snapshot->generation, next_seq = snapshot->next_seq;
    auto listed_journals = generations_in(fs, s.dir, "journal", "log");
    if (!listed_journals) return listed_journals.as_failure();
    const std::vector<std::uint64_t>& journals = *listed_journals;
    std::uint64_t active_gen = std::max<std::uint64_t>(snapshot_gen, 1);
    auto last_written_gen = last_written_journal(fs, s.dir, journals, active_gen);
    if (!last_written_gen) return last_written_gen.as_failure();
    journal_scan last{};
    for (std::uint64_t g : journals) {
        std::string path = s.dir + "/" + gen_name("journal", g, "log");
        if (g < active_gen) {
            fs.unlink_blocking(path);  // fully contained in the snapshot
            continue;
        }
        auto scan = read_journal(fs, path, next_seq, visit, g >= *last_written_gen);
        if (!scan) return scan.as_failure();
        if (!apply.ok) return base::fail(base::errc::data_corrupted, path + ": undecodable record");
        _recovery.journal_records += scan->records;
        if (scan->torn_tail) ++_recovery.torn_tails;
        if (scan->records) next_seq = scan->last_seq + 1;
        active_gen = g;
        last = *scan;
    }
    std::string active = s.dir + "/" + gen_name("journal", active_gen, "log");
    int fd = fs.open_blocking(active, O_WRONLY | O_CREAT, 0600);
    if (fd < 0) return base::fail(base::errc::io_error, "open " + active + ": " + strerror(-fd));
    // The journal may have just been created: its directory entry must be durable before any record in
    // it is acknowledged, or a crash can take the whole file away.
    if (int rc = fs.fsync_path_blocking(s.dir); rc < 0) {
        fs.close_blocking(fd);
        return base::fail(base::errc::io_error, "fsync " + s.dir + ": " + strerror(-rc));
    }
    std::uint64_t offset =
        (!journals.empty() && journals.back() == active_gen) ? last.valid_bytes : 0;
    s.generation = active_gen;
    s.log = std::make_unique<journal>(fs, fd, active, offset, next_seq);
    s.log->share_data_dir_failure(&_data_dir_sync_failed);
    return {};
}

base::result<void> engine::remove_orphans() {
    std::unordered_set<std::string> referenced;
    for (auto& s : _shards) {
        for (auto& [bucket, keys] : s->index)
            for (auto& [key, record] : keys)
                for (auto& seg : record.segments) referenced.insert(seg.id.hex());
        for (auto& [bucket, keys] : s->history)
            for (auto& [key, older] : keys)
                for (auto& record : older)
                    for (auto& seg : record.segments) referenced.insert(seg.id.hex());
        for (auto& [id, upload] : s->uploads)
            for (auto& [number, part] : upload.parts) referenced.insert(part.data.id.hex());
    }
    file_system& fs = _drives.fs();
    for (std::uint32_t d = 0; d < _drives.size(); ++d) {
        for (int b = 0; b < 256; ++b) {
            char fan[4];
            std::snprintf(fan, sizeof fan, "%02x", b);
            std::string dir = _drives.at(d).path + "/objects/" + fan;
            auto names = fs.list_blocking(dir);
            if (!names) return names.as_failure();
            for (const std::string& name : *names) {
                if (name.size() != 32 || referenced.count(name)) continue;
                if (int rc = fs.unlinkat_blocking(_drives.at(d).object_dir_fds[b], name); rc == 0) {
                    ++_recovery.orphans_removed;
                } else {
                    ++_recovery.orphans_kept;
                    LOG_WARN("cannot remove orphaned data file %s: %s", name.c_str(),
                             strerror(-rc));
                }
            }
        }
    }
    if (_recovery.orphans_removed)
        LOG_INFO("removed %llu orphaned data files (uncommitted uploads or replaced objects)",
                 static_cast<unsigned long long>(_recovery.orphans_removed));
    return {};
}

// ---- objects ----

io::task<base::result<std::optional<object_record>>> engine::commit_put(
    std::string bucket, std::string key, object_record record, write_conditions conditions) {
    unsigned shard_id = shard_of(bucket, key);
    // The cross-core lambdas in this file are named before co_await: GCC 12 destroys a capturing lambda
    // temporary twice when it appears in a co_await expression (a double free of its captures).
    auto call = [=, this] { return shard_put(shard_id, bucket, key, record, conditions); };
    co_return co_await io::invoke_on(owner_of(shard_id), std::move(call));
}

io::task<base::result<std::optional<object_record>>> engine::shard_put(
    unsigned shard_id, std::string bucket, std::string key, object_record record,
    write_conditions conditions) {
    shard& s = *_shards[shard_id];
    if (!bucket_exists(bucket)) co_return base::fail(base::errc::no_such_bucket, "no such bucket");
    std::string lock = lock_name(bucket, key);
    ++s.commits_in_flight[bucket];
    co_await lock_key(s.locks, lock);
    std::optional<object_record> replaced;
    base::result<void> outcome;
    const object_record* existing = current_object(s, bucket, key);
    outcome = journal_usable(*s.log);
    if (outcome) outcome = check_conditions(existing, conditions);
    if (outcome) {
        std::string payload;
        encoder e(payload);
        e.str(bucket);
        e.str(key);
        encode(e, record);
        std::vector<int> dirs;
        for (const auto& seg : record.segments)
            dirs.push_back(_drives.dir_fd_for(seg.drive, seg.id));
        outcome = co_await s.log->append(
            record_put_object, std::move(payload), std::move(dirs),
            [&] { replaced = apply_put(s.index, s.history, bucket, key, std::move(record)); });
    }
    unlock_key(s.locks, lock);
    if (--s.commits_in_flight[bucket] == 0) s.commits_in_flight.erase(bucket);
    if (!outcome) co_return outcome.as_failure();
    co_return replaced;
}

io::task<base::result<std::optional<object_record>>> engine::commit_remove(
    std::string bucket, std::string key, write_conditions conditions) {
    auto done = co_await commit_delete(std::move(bucket), std::move(key), conditions);
    if (!done) co_return done.as_failure();
    co_return std::move(done->removed);
}

io::task<base::result<engine::removal>> engine::commit_delete(std::string bucket, std::string key,
                                                              write_conditions conditions) {
    unsigned shard_id = shard_of(bucket, key);
    auto call = [=, this] { return shard_remove(shard_id, bucket, key, conditions); };
    co_return co_await io::invoke_on(owner_of(shard_id), std::move(call));
}

io::task<base::result<engine::removal>> engine::shard_remove(unsigned shard_id, std::string bucket,
                                                             std::string key,
                                                             write_conditions conditions) {
    shard& s = *_shards[shard_id];
    if (!bucket_exists(bucket)) co_return base::fail(base::errc::no_such_bucket, "no such bucket");
    std::string lock = lock_name(bucket, key);
    ++s.commits_in_flight[bucket];  // a delete marker may be written: the bucket stays meanwhile
    co_await lock_key(s.locks, lock);
    removal done;
    const object_record* existing = current_object(s, bucket, key);
    const object_record* latest = find_version(s.index, s.history, bucket, key, nullptr);
    // Versioned when this core knows it, or when the key already has a versioned write (made through a
    // core that saw versioning enabled first: removing it for good would lose it).
    const bool versioned =
        versioning_of(bucket) != versioning_state::never || (latest && !latest->version_id.empty());
    // Deleting a missing key succeeds without a journal record; with a broken journal a failed write of
    // this key may still reappear at restart, so that success would be a lie.
    base::result<void> outcome = journal_usable(*s.log);
    if (outcome) outcome = check_conditions(existing, conditions);
    std::string payload;
    encoder e(payload);
    e.str(bucket);
    e.str(key);
    if (outcome && versioned) {
        // A delete marker becomes the current version (even of a key that has none)
        object_record marker;
        marker.delete_marker = true;
        marker.modified_ms = base::unix_now_ms();
        marker.version_id = version_for_write(bucket);
        encode(e, marker);
        outcome = co_await s.log->append(record_put_object, std::move(payload), {}, [&] {
            done.removed = apply_put(s.index, s.history, bucket, key, marker);
        });
        if (outcome) done.marker = std::move(marker);
    } else if (outcome && existing) {
        outcome = co_await s.log->append(record_delete_object, std::move(payload), {}, [&] {
            done.removed = apply_remove(s.index, s.history, bucket, key, nullptr);
        });
    }
    unlock_key(s.locks, lock);
    if (--s.commits_in_flight[bucket] == 0) s.commits_in_flight.erase(bucket);
    if (!outcome) co_return outcome.as_failure();
    co_return done;
}

const object_record* engine::current_object(shard& s, const std::string& bucket,
                                            const std::string& key) {
    const object_record* r = find_version(s.index, s.history, bucket, key, nullptr);
    return r && !r->delete_marker ? r : nullptr;
}

io::task<base::result<object_record>> engine::head(std::string bucket, std::string key) {
    co_return co_await find(std::move(bucket), std::move(key), std::nullopt);
}

io::task<base::result<object_record>> engine::update(std::string bucket, std::string key,
                                                     record_editor editor,
                                                     write_conditions conditions) {
    co_return co_await edit(std::move(bucket), std::move(key), std::nullopt, std::move(editor),
                            conditions);
}

io::task<base::result<object_record>> engine::edit(std::string bucket, std::string key,
                                                   std::optional<std::string> version_id,
                                                   record_editor editor,
                                                   write_conditions conditions) {
    unsigned shard_id = shard_of(bucket, key);
    auto call = [=, this] {
        return shard_update(shard_id, bucket, key, version_id, editor, conditions);
    };
    auto updated = co_await io::invoke_on(owner_of(shard_id), std::move(call));
    if (!updated) co_await free_space_after(updated.err());
    co_return updated;
}

io::task<base::result<object_record>> engine::shard_update(unsigned shard_id, std::string bucket,
                                                           std::string key,
                                                           std::optional<std::string> version_id,
                                                           record_editor edit,
                                                           write_conditions conditions) {
    shard& s = *_shards[shard_id];
    if (!bucket_exists(bucket)) co_return base::fail(base::errc::no_such_bucket, "no such bucket");
    std::string lock = lock_name(bucket, key);
    ++s.commits_in_flight[bucket];
    co_await lock_key(s.locks, lock);
    // Looked up under the lock: the version named, or the current one (absent when a delete marker)
    base::result<object_record> outcome = co_await shard_find(shard_id, bucket, key, version_id);
    const object_record* existing =
        outcome ? find_version(s.index, s.history, bucket, key, &outcome->version_id) : nullptr;
    if (auto usable = journal_usable(*s.log); !usable) {
        outcome = usable.as_failure();
    } else if (existing) {
        object_record changed = *existing;
        auto ok = check_conditions(existing, conditions);
        if (ok) ok = edit(changed);
        changed.version_id = existing->version_id;  // an edit keeps the version what it is
        changed.delete_marker = false;
        FJORD_ASSERT(!ok || changed.segments.size() == existing->segments.size(),
                     "update must keep the data");
        if (!ok) {
            outcome = ok.as_failure();
        } else {
            std::string payload;
            encoder e(payload);
            e.str(bucket);
            e.str(key);
            encode(e, changed);
            auto appended = co_await s.log->append(
                record_edit_version, std::move(payload), {},
                [&] { apply_edit(s.index, s.history, bucket, key, changed); });
            if (appended)
                outcome = std::move(changed);
            else
                outcome = appended.as_failure();
        }
    }
    unlock_key(s.locks, lock);
    if (--s.commits_in_flight[bucket] == 0) s.commits_in_flight.erase(bucket);
    co_return outcome;
}

io::task<void> engine::reclaim(object_record record) {
    if (!record.inline_data.empty()) give_inline_budget(record.inline_data.size());
    for (const auto& seg : record.segments) co_await _spares->give(seg);
}

io::task<base::result<std::vector<segment>>> engine::share_segments(std::vector<segment> source) {
    file_system& fs = _drives.fs();
    std::vector<segment> shared;
    base::result<void> status;
    for (const segment& from : source) {
        segment to = from;
        to.id = new_object_id();
        int rc = co_await fs.linkat(
            _drives.dir_fd_for(from.drive, from.id), drive_set::file_name(from.id),
            _drives.dir_fd_for(to.drive, to.id), drive_set::file_name(to.id));
        if (rc == -ENOENT)
            status = base::fail(base::errc::not_found, "source data file gone");
        else if (rc == -ENOSPC || rc == -EDQUOT)
            status = base::fail(base::errc::storage_full, "no space left on drive");
        else if (rc < 0)
            status =
                base::fail(base::errc::io_error, std::string("link data file: ") + strerror(-rc));
        if (!status) break;
        shared.push_back(to);
    }
    if (!status) {
        co_await reclaim_segments(std::move(shared));
        co_return status.as_failure();
    }
    co_return shared;
}

// ---- listing ----

bool fold_common_prefix(const std::map<std::string, object_record>& keys,
                        std::map<std::string, object_record>::const_iterator& it,
                        const list_request& req, std::vector<list_entry>& out) {
    if (req.delimiter.empty()) return false;
    const std::string& key = it->first;
    auto pos = key.find(req.delimiter, req.prefix.size());
    if (pos == std::string::npos) return false;
    std::string common = key.substr(0, pos + req.delimiter.size());
    // A common prefix at or before the marker was returned on an earlier page.
    if (common > req.start_after) {
        list_entry e;
        e.name = common;
        e.is_prefix = true;
        out.push_back(std::move(e));
    }
    std::string next = prefix_successor(common);
    it = next.empty() ? keys.end() : keys.lower_bound(next);
    return true;
}

namespace {
// Lists one shard's keys of a bucket into `out` (at most `limit` entries, sorted).
void list_shard(const std::map<std::string, object_record>& keys, const list_request& req,
                std::size_t limit, std::vector<list_entry>& out) {
    const std::string& start = req.start_after;
    auto it = start.empty() || start < req.prefix ? keys.lower_bound(req.prefix)
                                                  : keys.upper_bound(start);
    while (it != keys.end() && out.size() < limit) {
        const std::string& key = it->first;
        if (!key.starts_with(req.prefix)) break;
        if (it->second
                .delete_marker) {  // deleted: neither listed nor the reason for a common prefix
            ++it;
            continue;
        }
        if (fold_common_prefix(keys, it, req, out)) continue;
        list_entry e;
        e.name = key;
        e.size_bytes = it->second.size_bytes;
        e.etag = it->second.etag;
        e.modified_ms = it->second.modified_ms;
        out.push_back(std::move(e));
        ++it;
    }
}
}  // namespace

io::task<base::result<list_page>> engine::core_list(list_request request, bool versions) {
    if (!bucket_exists(request.bucket))
        co_return base::fail(base::errc::no_such_bucket, "no such bucket");
    unsigned core = io::reactor::current().core();
    std::size_t limit = static_cast<std::size_t>(request.max_keys) + 1;
    list_page page;
    for (auto& s : _shards) {
        if (owner_of(s->id) != core) continue;
        auto it = s->index.find(request.bucket);
        if (it == s->index.end()) continue;
        // Each shard up to the limit on its own (a core may own several: the shard count is the
        // first start's core count); the merge keeps the first max_keys of them all.
        std::vector<list_entry> part;
        if (versions) {
            auto h = s->history.find(request.bucket);
            list_shard_versions(it->second, h == s->history.end() ? nullptr : &h->second, request,
                                limit, part);
        } else {
            list_shard(it->second, request, limit, part);
        }
        for (auto& e : part) page.entries.push_back(std::move(e));
    }
    co_return page;
}

io::task<base::result<list_page>> engine::list(list_request request) {
    co_return co_await list_all(std::move(request), false);
}

io::task<base::result<list_page>> engine::list_all(list_request request, bool versions) {
    std::vector<list_entry> all;
    for (unsigned c = 0; c < _options.cores; ++c) {
        auto call = [=, this] { return core_list(request, versions); };
        auto part = co_await io::invoke_on(c, std::move(call));
        if (!part) co_return part.as_failure();
        for (auto& e : part->entries) all.push_back(std::move(e));
    }
    co_return merge_listing(std::move(all), request.max_keys);
}

list_page merge_listing(std::vector<list_entry> all, std::uint32_t max_keys) {
    std::stable_sort(all.begin(), all.end(),
                     [](const list_entry& a, const list_entry& b) { return a.name < b.name; });
    all.erase(std::unique(all.begin(), all.end(),
                          [](const list_entry& a, const list_entry& b) {
                              return a.is_prefix && b.is_prefix && a.name == b.name;
                          }),
              all.end());
    list_page page;
    page.truncated = all.size() > max_keys;
    if (page.truncated) all.resize(max_keys);
    page.entries = std::move(all);
    return page;
}

// ---- buckets (serialised on core 0, which owns shard 0 and its journal) ----

// A bucket's new state, once durable on shard 0, on every core's list.
io::task<void> engine::publish_bucket(bucket_info info) {
    for (unsigned c = 0; c < _options.cores; ++c) {
        auto call = [=, this] { return core_set_bucket(info, true); };
        (void)co_await io::invoke_on(c, std::move(call));
    }
}

io::task<base::result<void>> engine::set_bucket_attribute(std::string bucket, std::string name,
                                                          std::optional<std::string> value) {
    auto call = [=, this] { return core0_set_bucket_attribute(bucket, name, value); };
    auto set = co_await io::invoke_on(0, std::move(call));
    if (!set) co_await free_space_after(set.err());
    co_return set;
}

io::task<base::result<void>> engine::core0_set_bucket_attribute(std::string bucket,
                                                                std::string name,
                                                                std::optional<std::string> value) {
    shard& s0 = *_shards[0];
    std::string lock = bucket_lock_name(bucket);
    co_await lock_key(s0.locks, lock);  // ordered with the bucket's create and delete
    base::result<void> outcome;
    auto it = local().buckets.find(bucket);
    if (it == local().buckets.end() || local().closing.count(bucket)) {
        outcome = base::fail(base::errc::no_such_bucket, "no such bucket");
    } else if (auto usable = journal_usable(*s0.log); !usable) {
        outcome = usable;
    } else {
        bucket_info info = it->second;
        if (value)
            info.attributes[name] = *value;
        else
            info.attributes.erase(name);
        // Applied in on_durable, as a bucket's creation is: a snapshot right after the batch has it.
        outcome = co_await s0.log->append(
            record_bucket_attribute,
            bucket_attribute_payload(bucket, name, value ? &*value : nullptr), {},
            [&] { local().buckets[bucket] = info; });
        if (outcome) co_await publish_bucket(info);
    }
    unlock_key(s0.locks, lock);
    co_return outcome;
}

io::task<base::result<void>> engine::create_bucket(std::string name) {
    auto call = [=, this] { return core0_create_bucket(name); };
    auto created = co_await io::invoke_on(0, std::move(call));
    if (!created) co_await free_space_after(created.err());
    co_return created;
}

io::task<base::result<void>> engine::delete_bucket(std::string name) {
    auto call = [=, this] { return core0_delete_bucket(name); };
    auto deleted = co_await io::invoke_on(0, std::move(call));
    if (!deleted) co_await free_space_after(deleted.err());
    co_return deleted;
}

io::task<base::result<bool>> engine::core_set_bucket(bucket_info info, bool present) {
    core_state& cs = local();
    cs.closing.erase(info.name);
    if (present)
        cs.buckets[info.name] = info;
    else
        cs.buckets.erase(info.name);
    co_return true;
}

io::task<base::result<bool>> engine::core_close_if_empty(std::string name) {
    unsigned core = io::reactor::current().core();
    for (auto& s : _shards) {
        if (owner_of(s->id) != core) continue;
        // A broken shard may hold objects of this bucket that reappear at the next start.
        FJORD_CO_TRY(journal_usable(*s->log));
        if (s->index.count(name) || s->commits_in_flight.count(name)) co_return false;
    }
    local().closing.insert(name);  // unfinished uploads do not keep it: they are aborted with it
    co_return true;
}

// Aborts this core's unfinished uploads in a bucket being deleted (closed: no new ones can begin).
io::task<base::result<bool>> engine::core_abort_bucket_uploads(std::string name) {
    unsigned core = io::reactor::current().core();
    for (auto& s : _shards) {
        if (owner_of(s->id) != core) continue;
        std::vector<std::pair<std::string, std::string>> uploads;  // (key, upload id)
        for (const auto& [id, upload] : s->uploads)
            if (upload.bucket == name) uploads.emplace_back(upload.key, id);
        for (const auto& [key, id] : uploads) {
            auto removed = co_await shard_abort_upload(s->id, name, key, id);
            if (!removed && removed.code() != base::errc::no_such_upload)
                co_return removed.as_failure();
            if (!removed) continue;
            std::vector<segment> data;
            for (const auto& [number, part] : removed->parts) data.push_back(part.data);
            co_await reclaim_segments(std::move(data));
        }
    }
    co_return true;
}

io::task<base::result<void>> engine::core0_create_bucket(std::string name) {
    shard& s0 = *_shards[0];
    std::string lock = bucket_lock_name(name);
    co_await lock_key(s0.locks, lock);
    base::result<void> outcome;
    if (local().buckets.count(name)) {
        outcome = base::fail(base::errc::bucket_already_owned_by_you, "the bucket exists");
    } else {
        bucket_info info{name, base::unix_now_ms()};
        std::string payload;
        encoder e(payload);
        e.str(info.name);
        e.i64(info.created_ms);
        // Core 0's list changes in on_durable, like a shard's index: a snapshot taken right after this
        // batch (journal rotation) must already contain the bucket, or it is lost with the old journal.
        outcome = co_await s0.log->append(record_create_bucket, std::move(payload), {},
                                          [&] { local().buckets[info.name] = info; });
        if (outcome) co_await publish_bucket(info);
    }
    unlock_key(s0.locks, lock);
    co_return outcome;
}

io::task<base::result<void>> engine::core0_delete_bucket(std::string name) {
    shard& s0 = *_shards[0];
    std::string lock = bucket_lock_name(name);
    co_await lock_key(s0.locks, lock);
    base::result<void> outcome;
    auto found = local().buckets.find(name);
    if (found == local().buckets.end()) {
        outcome = base::fail(base::errc::no_such_bucket, "no such bucket");
    } else {
        bucket_info info = found->second;
        bool empty = true;
        base::result<void> checked;
        for (unsigned c = 0; c < _options.cores; ++c) {
            auto call = [=, this] { return core_close_if_empty(name); };
            auto closed = co_await io::invoke_on(c, std::move(call));
            if (!closed && checked) checked = closed.as_failure();
            if (!closed || !*closed) empty = false;
        }
        for (unsigned c = 0; c < _options.cores && checked && empty; ++c) {
            auto call = [=, this] { return core_abort_bucket_uploads(name); };
            auto aborted = co_await io::invoke_on(c, std::move(call));
            if (!aborted) checked = aborted.as_failure();
        }
        if (!checked) {
            outcome = checked;
        } else if (empty) {
            std::string payload;
            encoder e(payload);
            e.str(name);
            // As in create: a snapshot taken right after this batch must no longer contain the bucket.
            outcome = co_await s0.log->append(record_delete_bucket, std::move(payload), {},
                                              [&] { local().buckets.erase(name); });
        } else {
            outcome = base::fail(base::errc::bucket_not_empty, "the bucket holds objects");
        }
        // After a deletion whose outcome is unknown the bucket may or may not exist after a restart: it
        // stays closed (no new objects) until then.
        bool present = !outcome && commit_surely_failed(outcome.err());
        for (unsigned c = 0; c < _options.cores; ++c) {
            auto call = [=, this] { return core_set_bucket(info, present); };
            (void)co_await io::invoke_on(c, std::move(call));
        }
    }
    unlock_key(s0.locks, lock);
    co_return outcome;
}

// ---- snapshots and journal rotation (on the shard's owner core) ----

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
