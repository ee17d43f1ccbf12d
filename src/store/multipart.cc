// Multipart uploads: creation, parts, completion (without copying data), abort, listing, expiry.

#include <algorithm>

#include "base/clock.h"
#include "base/log.h"
#include "io/cross_core.h"
#include "io/ops.h"
#include "store/engine.h"
#include "store/engine_internal.h"

namespace fjord::store {

void encode_part(encoder& e, const part_record& p) {
    e.u32(p.number);
    e.u32(p.data.drive);
    e.u64(p.data.id.hi);
    e.u64(p.data.id.lo);
    e.u64(p.data.size_bytes);
    e.u32(p.data.block_bytes);
    e.u32(p.data.table_crc);
    e.str(p.etag);
    e.str(p.checksum_value);
    e.i64(p.modified_ms);
}

bool decode_part(decoder& d, part_record& p) {
    p.number = d.u32();
    p.data.drive = d.u32();
    p.data.id.hi = d.u64();
    p.data.id.lo = d.u64();
    p.data.size_bytes = d.u64();
    p.data.block_bytes = d.u32();
    p.data.table_crc = d.u32();
    p.etag = d.str();
    p.checksum_value = d.str();
    p.modified_ms = d.i64();
    return d.ok();
}

void encode_upload_header(encoder& e, const upload_record& u) {
    e.str(u.upload_id);
    e.str(u.bucket);
    e.str(u.key);
    e.i64(u.initiated_ms);
    e.str(u.checksum_type);
    encode(e, u.object);
}

bool decode_upload_header(decoder& d, upload_record& u) {
    u.upload_id = d.str();
    u.bucket = d.str();
    u.key = d.str();
    u.initiated_ms = d.i64();
    u.checksum_type = d.str();
    return decode(d, u.object) && d.ok();
}

namespace {
base::failure no_such_upload() { return base::fail(base::errc::no_such_upload, "no such upload"); }

// Finds an upload and checks that it belongs to (bucket, key): an upload id is not a capability for
// another key.
upload_record* find_upload(std::map<std::string, upload_record>& uploads, const std::string& id,
                           const std::string& bucket, const std::string& key) {
    auto it = uploads.find(id);
    if (it == uploads.end() || it->second.bucket != bucket || it->second.key != key) return nullptr;
    return &it->second;
}
}  // namespace

std::string engine::new_upload_id() {
    object_id id = new_object_id();
    return id.hex();
}

io::task<base::result<std::string>> engine::create_upload(std::string bucket, std::string key,
                                                          object_record metadata,
                                                          std::string checksum_type) {
    upload_record u;
    u.bucket = std::move(bucket);
    u.key = std::move(key);
    u.upload_id = new_upload_id();
    u.initiated_ms = base::unix_now_ms();
    u.checksum_type = std::move(checksum_type);
    u.object = std::move(metadata);
    u.object.segments.clear();
    unsigned shard_id = shard_of(u.bucket, u.key);
    auto call = [=, this] { return shard_create_upload(shard_id, u); };
    auto created = co_await io::invoke_on(owner_of(shard_id), std::move(call));
    if (!created) co_await free_space_after(created.err());
    co_return created;
}

io::task<base::result<std::string>> engine::shard_create_upload(unsigned shard_id,
                                                                upload_record upload) {
    shard& s = *_shards[shard_id];
    if (!bucket_exists(upload.bucket))
        co_return base::fail(base::errc::no_such_bucket, "no such bucket");
    // Counted from the check to the end, as a PUT is: a DeleteBucket meanwhile sees the bucket in use,
    // instead of deleting it under an upload that then survives (and reappears with the name).
    const std::string bucket = upload.bucket;
    ++s.commits_in_flight[bucket];
    std::string payload;
    encoder e(payload);
    encode_upload_header(e, upload);
    std::string id = upload.upload_id;
    auto appended = co_await s.log->append(record_create_upload, std::move(payload), {}, [&] {
        s.uploads[upload.upload_id] = std::move(upload);
    });
    if (--s.commits_in_flight[bucket] == 0) s.commits_in_flight.erase(bucket);
    if (!appended) co_return appended.as_failure();
    co_return id;
}

io::task<base::result<upload_record>> engine::get_upload(std::string bucket, std::string key,
                                                         std::string upload_id) {
    unsigned shard_id = shard_of(bucket, key);
    auto call = [=, this] { return shard_get_upload(shard_id, bucket, key, upload_id); };
    co_return co_await io::invoke_on(owner_of(shard_id), std::move(call));
}

io::task<base::result<upload_record>> engine::shard_get_upload(unsigned shard_id,
                                                               std::string bucket, std::string key,
                                                               std::string upload_id) {
    if (!bucket_exists(bucket)) co_return base::fail(base::errc::no_such_bucket, "no such bucket");
    upload_record* u = find_upload(_shards[shard_id]->uploads, upload_id, bucket, key);
    if (!u) co_return no_such_upload();
    co_return *u;
}

io::task<base::result<std::optional<part_record>>> engine::commit_part(std::string bucket,
                                                                       std::string key,
                                                                       std::string upload_id,
                                                                       part_record part) {
    unsigned shard_id = shard_of(bucket, key);
    auto call = [=, this] { return shard_commit_part(shard_id, upload_id, bucket, key, part); };
    co_return co_await io::invoke_on(owner_of(shard_id), std::move(call));
}

io::task<base::result<std::optional<part_record>>> engine::shard_commit_part(unsigned shard_id,
                                                                             std::string upload_id,
                                                                             std::string bucket,
                                                                             std::string key,
                                                                             part_record part) {
    shard& s = *_shards[shard_id];
    co_await enter_part(s.gates, upload_id);
    auto outcome = co_await shard_commit_part_entered(s, upload_id, bucket, key, std::move(part));
    leave_part(s.gates, upload_id);
    co_return outcome;
}

io::task<base::result<std::optional<part_record>>> engine::shard_commit_part_entered(
    shard& s, std::string upload_id, std::string bucket, std::string key, part_record part) {
    FJORD_CO_TRY(journal_usable(*s.log));
    if (!find_upload(s.uploads, upload_id, bucket, key)) co_return no_such_upload();
    std::string payload;
    encoder e(payload);
    e.str(upload_id);
    encode_part(e, part);
    std::vector<int> dirs{_drives.dir_fd_for(part.data.drive, part.data.id)};
    std::optional<part_record> replaced;
    bool upload_gone = false;
    auto appended =
        co_await s.log->append(record_put_part, std::move(payload), std::move(dirs), [&] {
            // A completion or abort may have been journaled while this part was in flight.
            upload_record* u = find_upload(s.uploads, upload_id, bucket, key);
            if (!u) {
                upload_gone = true;
                return;
            }
            auto it = u->parts.find(part.number);
            if (it != u->parts.end()) replaced = std::move(it->second);
            u->parts[part.number] = part;
        });
    if (!appended) co_return appended.as_failure();
    if (upload_gone) co_return no_such_upload();
    co_return replaced;
}

io::task<base::result<completed_upload>> engine::commit_complete(std::string bucket,
                                                                 std::string key,
                                                                 std::string upload_id,
                                                                 upload_finalizer finalize,
                                                                 write_conditions conditions) {
    unsigned shard_id = shard_of(bucket, key);
    auto call = [=, this] {
        return shard_complete_upload(shard_id, bucket, key, upload_id, finalize, conditions);
    };
    co_return co_await io::invoke_on(owner_of(shard_id), std::move(call));
}

io::task<base::result<completed_upload>> engine::shard_complete_upload(
    unsigned shard_id, std::string bucket, std::string key, std::string upload_id,
    upload_finalizer finalize, write_conditions conditions) {
    shard& s = *_shards[shard_id];
    if (!bucket_exists(bucket)) co_return base::fail(base::errc::no_such_bucket, "no such bucket");
    std::string lock = lock_name(bucket, key);
    ++s.commits_in_flight[bucket];
    key_guard held = co_await lock_key(s.locks, lock);
    base::result<completed_upload> outcome = no_such_upload();
    if (auto usable = journal_usable(*s.log); !usable) {
        outcome = usable.as_failure();
    } else if (find_upload(s.uploads, upload_id, bucket, key)) {
        // Only a request for the upload's own key takes its gate, so every closer of an upload holds that
        // key's lock and there is never more than one. The parts are chosen once no part commit of this
        // upload is in flight, and none starts until the completion is durable (or failed).
        co_await enter_close(s.gates, upload_id);
        outcome = co_await shard_complete_closing(s, bucket, key, upload_id, std::move(finalize),
                                                  conditions);
        leave_close(s.gates, upload_id);
    }
    held.release();
    if (--s.commits_in_flight[bucket] == 0) s.commits_in_flight.erase(bucket);
    co_return outcome;
}

io::task<base::result<completed_upload>> engine::shard_complete_closing(
    shard& s, std::string bucket, std::string key, std::string upload_id, upload_finalizer finalize,
    write_conditions conditions) {
    upload_record* u = find_upload(s.uploads, upload_id, bucket, key);
    if (!u)
        co_return no_such_upload();  // (not reached: only its own key's lock holder completes or aborts it)
    const object_record* existing = current_object(s, bucket, key);
    // A part commit that failed while this waited may have broken the journal.
    FJORD_CO_TRY(journal_usable(*s.log));
    FJORD_CO_TRY(check_conditions(existing, conditions));
    auto chosen = finalize(*u);
    if (!chosen) co_return chosen.as_failure();
    base::result<object_record> built = assemble_upload(*u, std::move(*chosen));
    if (!built) co_return built.as_failure();
    built->version_id = version_for_write(bucket);
    built->delete_marker = false;
    std::string payload;
    encoder e(payload);
    e.str(upload_id);
    e.str(bucket);
    e.str(key);
    encode(e, *built);
    completed_upload done;
    bool upload_gone = false;
    auto appended = co_await s.log->append(record_complete_upload, std::move(payload), {}, [&] {
        upload_record* still = find_upload(s.uploads, upload_id, bucket, key);
        if (!still) {
            upload_gone = true;  // aborted (or expired) while this completion was being written
            return;
        }
        for (const auto& entry : still->parts) {
            const segment& data = entry.second.data;
            bool used = std::any_of(built->segments.begin(), built->segments.end(),
                                    [&](const segment& g) { return g.id == data.id; });
            if (!used) done.unused_parts.push_back(data);
        }
        s.uploads.erase(upload_id);
        done.replaced = apply_put(s.index, s.history, bucket, key, *built);
    });
    done.object = std::move(*built);
    if (!appended) co_return appended.as_failure();
    if (upload_gone) co_return no_such_upload();
    co_return done;
}

io::task<base::result<upload_record>> engine::commit_abort(std::string bucket, std::string key,
                                                           std::string upload_id) {
    unsigned shard_id = shard_of(bucket, key);
    auto call = [=, this] { return shard_abort_upload(shard_id, bucket, key, upload_id); };
    co_return co_await io::invoke_on(owner_of(shard_id), std::move(call));
}

io::task<base::result<upload_record>> engine::shard_abort_upload(unsigned shard_id,
                                                                 std::string bucket,
                                                                 std::string key,
                                                                 std::string upload_id) {
    shard& s = *_shards[shard_id];
    FJORD_CO_TRY(journal_usable(*s.log));
    if (!find_upload(s.uploads, upload_id, bucket, key)) co_return no_such_upload();
    // Under the key lock, so an abort and a completion of the same upload never interleave; and once no
    // part commit is in flight, so that every part's data is in the record it returns (for reclaiming).
    std::string lock = lock_name(bucket, key);
    key_guard held = co_await lock_key(s.locks, lock);
    // Looked up again under the lock (a completion may have won it): only the upload's own key's lock
    // holder takes its gate, so there is one closer at a time.
    if (!find_upload(s.uploads, upload_id, bucket, key)) {
        held.release();
        co_return no_such_upload();
    }
    co_await enter_close(s.gates, upload_id);
    std::string payload;
    encoder e(payload);
    e.str(upload_id);
    std::optional<upload_record> removed;
    auto appended = co_await s.log->append(record_abort_upload, std::move(payload), {}, [&] {
        auto it = s.uploads.find(upload_id);
        if (it == s.uploads.end()) return;
        removed = std::move(it->second);
        s.uploads.erase(it);
    });
    leave_close(s.gates, upload_id);
    held.release();
    if (!appended) co_return appended.as_failure();
    if (!removed) co_return no_such_upload();
    co_return std::move(*removed);
}

io::task<base::result<std::vector<upload_record>>> engine::list_uploads(
    std::string bucket, std::string prefix, std::string key_marker, std::string upload_id_marker,
    std::uint32_t max_uploads) {
    std::vector<upload_record> all;
    for (unsigned c = 0; c < _options.cores; ++c) {
        auto call = [=, this] {
            return core_list_uploads(bucket, prefix, key_marker, upload_id_marker, max_uploads);
        };
        auto part = co_await io::invoke_on(c, std::move(call));
        if (!part) co_return part.as_failure();
        for (auto& u : *part) all.push_back(std::move(u));
    }
    std::sort(all.begin(), all.end(), [](const upload_record& a, const upload_record& b) {
        return a.key != b.key ? a.key < b.key : a.upload_id < b.upload_id;
    });
    if (all.size() > static_cast<std::size_t>(max_uploads) + 1)
        all.resize(static_cast<std::size_t>(max_uploads) + 1);
    co_return all;
}

io::task<base::result<std::vector<upload_record>>> engine::core_list_uploads(
    std::string bucket, std::string prefix, std::string key_marker, std::string upload_id_marker,
    std::uint32_t max_uploads) {
    if (!bucket_exists(bucket)) co_return base::fail(base::errc::no_such_bucket, "no such bucket");
    unsigned core = io::reactor::current().core();
    std::vector<upload_record> out;
    for (auto& s : _shards) {
        if (owner_of(s->id) != core) continue;
        for (const auto& [id, u] : s->uploads) {
            if (u.bucket != bucket || !u.key.starts_with(prefix)) continue;
            if (!key_marker.empty() &&
                (u.key < key_marker || (u.key == key_marker && u.upload_id <= upload_id_marker)))
                continue;
            upload_record summary = u;
            summary.parts.clear();  // listing needs no parts
            out.push_back(std::move(summary));
        }
    }
    std::sort(out.begin(), out.end(), [](const upload_record& a, const upload_record& b) {
        return a.key != b.key ? a.key < b.key : a.upload_id < b.upload_id;
    });
    if (out.size() > static_cast<std::size_t>(max_uploads) + 1)
        out.resize(static_cast<std::size_t>(max_uploads) + 1);
    co_return out;
}

io::task<std::uint64_t> engine::expire_local_uploads(std::int64_t initiated_before_ms) {
    unsigned core = io::reactor::current().core();
    std::vector<std::tuple<unsigned, std::string, std::string, std::string>> stale;
    for (auto& s : _shards) {
        if (owner_of(s->id) != core) continue;
        for (const auto& [id, u] : s->uploads)
            if (u.initiated_ms < initiated_before_ms)
                stale.emplace_back(s->id, u.bucket, u.key, id);
    }
    std::uint64_t expired = 0;
    for (auto& [shard_id, bucket, key, id] : stale) {
        auto removed = co_await shard_abort_upload(shard_id, bucket, key, id);
        if (!removed) continue;
        std::vector<segment> data;
        for (const auto& [number, part] : removed->parts) data.push_back(part.data);
        co_await reclaim_segments(std::move(data));
        ++expired;
    }
    if (expired)
        LOG_INFO("expired %llu stale multipart uploads", static_cast<unsigned long long>(expired));
    co_return expired;
}

io::task<void> engine::reclaim_segments(std::vector<segment> segments) {
    object_record r;
    r.segments = std::move(segments);
    co_await reclaim(std::move(r));
}

}  // namespace fjord::store
