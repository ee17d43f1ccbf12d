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

base::result<void> check_conditions(const object_record* existing, const write_conditions& c,
                                    const std::optional<std::string>& etag_below) {
    if (c.if_none_match_any && existing)
        return base::fail(base::errc::precondition_failed, "a write condition does not hold");
    if (c.if_match_etag) {
        if (!existing) return base::fail(base::errc::no_such_key, "no such key");
        if (*c.if_match_etag != "*" && *c.if_match_etag != existing->etag)
            return base::fail(base::errc::precondition_failed, "a write condition does not hold");
    }
    if (etag_below && existing && !(existing->etag < *etag_below))
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
    FJORD_TRY_CONTEXT(e->recover(), "recovering the metadata");
    FJORD_TRY_CONTEXT(e->remove_orphans(), "removing orphaned data files");
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

// ---- objects ----

io::task<base::result<std::optional<object_record>>> engine::commit_put(
    std::string bucket, std::string key, object_record record, write_conditions conditions,
    std::optional<std::string> etag_below) {
    unsigned shard_id = shard_of(bucket, key);
    // The cross-core lambdas in this file are named before co_await: GCC 12 destroys a capturing lambda
    // temporary twice when it appears in a co_await expression (a double free of its captures).
    auto call = [=, this] {
        return shard_put(shard_id, bucket, key, record, conditions, etag_below);
    };
    co_return co_await io::invoke_on(owner_of(shard_id), std::move(call));
}

io::task<base::result<std::optional<object_record>>> engine::shard_put(
    unsigned shard_id, std::string bucket, std::string key, object_record record,
    write_conditions conditions, std::optional<std::string> etag_below) {
    shard& s = *_shards[shard_id];
    if (!bucket_exists(bucket)) co_return base::fail(base::errc::no_such_bucket, "no such bucket");
    std::string lock = lock_name(bucket, key);
    ++s.commits_in_flight[bucket];
    key_guard held = co_await lock_key(s.locks, lock);
    std::optional<object_record> replaced;
    base::result<void> outcome;
    const object_record* existing = current_object(s, bucket, key);
    outcome = journal_usable(*s.log);
    if (outcome) outcome = check_conditions(existing, conditions, etag_below);
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
    held.release();
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
    key_guard held = co_await lock_key(s.locks, lock);
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
    held.release();
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
    key_guard held = co_await lock_key(s.locks, lock);
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
    held.release();
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

}  // namespace fjord::store
