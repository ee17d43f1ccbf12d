// The engine at startup: journals and snapshots replayed into every shard, orphaned data files removed
// (blocking I/O, before any reactor runs).
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

std::string shard_dir(const std::string& meta, unsigned id) {
    return meta + "/shard-" + std::to_string(id);
}
}  // namespace

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
        FJORD_TRY_CONTEXT(recover_shard(*s), "shard " + std::to_string(i));
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

}  // namespace fjord::store
