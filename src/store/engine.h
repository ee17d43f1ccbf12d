#pragma once

// The object engine: buckets, keys and their records, spread over metadata shards, each owned by one core.
//
// Ownership and threading
// - Shard s (a journal, a snapshot and an ordered in-memory index) is owned by core s % cores. Every read
//   or change of its index runs on that core: callers reach it with io::invoke_on.
// - A key's shard is a hash of (bucket, key). Object data never crosses cores: the core that receives a
//   PUT writes the data file and sends only the record to the owner to commit.
// - Buckets are few: their records live in shard 0's journal and every core keeps a copy of the list,
//   updated by core 0 before a CreateBucket/DeleteBucket is answered.
// - Commits to one key are serialised by a per-key lock on the owner, so conditional writes are exact.
// - open() recovers every shard and removes orphaned data files with plain blocking I/O, before any
//   reactor runs. After that, all I/O goes through io_uring on the reactor threads.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/result.h"
#include "io/buffer_pool.h"
#include "io/semaphore.h"
#include "io/task.h"
#include "store/data_file.h"
#include "store/drive.h"
#include "store/journal.h"
#include "store/object.h"

namespace fjord::store {

struct engine_options {
    std::vector<std::string> data_dirs{"./data"};
    unsigned cores = 1;
    data_file_options data_files;
    write_scheduler_options writes;
    spare_file_options spares;
    space_options space;  // free-space floor and space reserved ahead of received bytes (drive_space.h)
    io::buffer_pool_options buffers;
    std::uint64_t journal_rotate_bytes = 64ULL * 1024 * 1024;  // snapshot + new journal past this size
    file_system* fs = nullptr;                 // null: posix_file_system(); a simulated one in tests
    std::optional<std::uint64_t> boot_nonce;  // names this run's object ids; random unless set (tests)
};

struct bucket_info {
    std::string name;
    std::int64_t created_ms = 0;
};

// Conditions checked atomically with a commit (If-None-Match: * and If-Match on writes and deletes).
struct write_conditions {
    bool if_none_match_any = false;
    std::optional<std::string> if_match_etag;  // without quotes
};

struct list_request {
    std::string bucket;
    std::string prefix;
    std::string delimiter;
    std::string start_after;  // exclusive; a common prefix here skips every key under it
    std::uint32_t max_keys = 1000;
};

struct list_entry {
    std::string name;
    bool is_prefix = false;
    std::uint64_t size_bytes = 0;
    std::string etag;
    std::int64_t modified_ms = 0;
};

struct list_page {
    std::vector<list_entry> entries;  // sorted, at most max_keys
    bool truncated = false;
};

// Multipart uploads. An upload lives on its key's shard: its parts are data files written by whichever
// core received them, and completing it turns the chosen parts' segments into the object's segments
// without copying data.
struct part_record {
    std::uint32_t number = 0;
    segment data;
    std::string etag;  // without quotes
    std::string checksum_value;
    std::int64_t modified_ms = 0;
};

struct upload_record {
    std::string bucket;
    std::string key;
    std::string upload_id;
    std::int64_t initiated_ms = 0;
    std::string checksum_type;  // "COMPOSITE", "FULL_OBJECT" or empty
    object_record object;       // metadata for the final object (no segments yet)
    std::map<std::uint32_t, part_record> parts;
};

struct completed_upload {
    object_record object;
    std::optional<object_record> replaced;   // the object the upload overwrote
    std::vector<segment> unused_parts;       // uploaded parts the final object does not use
};

// Whether the writer of a failed commit may remove the data it wrote. Not when the outcome is unknown: the
// record may reappear at the next start, and must find its data (orphans are removed at start-up).
inline bool commit_surely_failed(const base::error& e) { return e.code != base::errc::commit_outcome_unknown; }

// Builds the final object record from the upload (validation and ETag rules belong to the caller's API).
using upload_finalizer = std::function<base::result<object_record>(const upload_record&)>;

struct recovery_stats {
    std::uint64_t objects = 0;
    std::uint64_t journal_records = 0;
    std::uint64_t torn_tails = 0;
    std::uint64_t orphans_removed = 0;
    std::uint64_t orphans_kept = 0;  // could not be removed (an I/O error): tried again at the next start
};

class engine {
public:
    static base::result<std::unique_ptr<engine>> open(engine_options options);
    ~engine();

    // Called once on each reactor thread before it serves: creates that core's buffer pool and write
    // scheduler.
    void attach_core(unsigned core, io_uring* ring);
    io::buffer_pool& pool();
    // This core's scheduler of data-file writes: give it to every object_writer on the core.
    write_scheduler& writes();
    // The spare data files (reclaimed files kept for reuse; shared by every core): give them to every
    // object_writer too.
    spare_files& spares();
    // Server-side copies that stream data (read into some buffers, write from others) hold buffers while
    // they wait for more, so enough of them at once could take a core's whole pool and wait on each other
    // forever. Each must hold a unit of this (per core) while it streams: together they can take at most
    // half the pool, and the other requests never wait for a buffer while holding one.
    io::semaphore& copy_admission();
    const drive_set& drives() const { return _drives; }
    const data_file_options& data_file_settings() const { return _options.data_files; }
    const recovery_stats& recovery() const { return _recovery; }

    // Buckets.
    io::task<base::result<void>> create_bucket(std::string name);
    io::task<base::result<void>> delete_bucket(std::string name);
    bool bucket_exists(const std::string& name) const;  // this core's view
    std::vector<bucket_info> list_buckets() const;      // this core's view, sorted

    // Objects.
    object_id new_object_id();
    // Commits a written object; returns the record it replaced (whose data the caller reclaims).
    io::task<base::result<std::optional<object_record>>> commit_put(std::string bucket, std::string key,
                                                                     object_record record, write_conditions conditions);
    io::task<base::result<object_record>> lookup(std::string bucket, std::string key);
    // Changes an existing object's record in place (metadata, tags) under its key lock; the change must
    // keep the segments. Returns the new record.
    using record_editor = std::function<base::result<void>(object_record&)>;
    io::task<base::result<object_record>> update(std::string bucket, std::string key, record_editor edit,
                                                 write_conditions conditions);
    // Removes a key; deleting a missing key succeeds with nullopt (S3 semantics).
    io::task<base::result<std::optional<object_record>>> remove(std::string bucket, std::string key,
                                                                 write_conditions conditions);
    io::task<base::result<list_page>> list(list_request request);
    // Removes the data files of a replaced or deleted record (or keeps them as spares). Only once no
    // durable record refers to them.
    io::task<void> reclaim(object_record record);
    io::task<void> reclaim_segments(std::vector<segment> segments);
    // New segments naming the same data as `source` (hard links under new object ids, on the same drives),
    // for server-side copies that move no data. Fails with not_found when a source file vanished (the
    // source was overwritten meanwhile), or with another error where the file system cannot link; either
    // way nothing is left behind. The caller commits the result like freshly written data.
    io::task<base::result<std::vector<segment>>> share_segments(std::vector<segment> source);

    // Multipart uploads.
    io::task<base::result<std::string>> create_upload(std::string bucket, std::string key, object_record metadata,
                                                      std::string checksum_type);
    io::task<base::result<upload_record>> get_upload(std::string bucket, std::string key, std::string upload_id);
    // Commits a written part; returns the part it replaced (same number), whose data the caller reclaims.
    io::task<base::result<std::optional<part_record>>> commit_part(std::string bucket, std::string key,
                                                                    std::string upload_id, part_record part);
    io::task<base::result<completed_upload>> complete_upload(std::string bucket, std::string key,
                                                             std::string upload_id, upload_finalizer finalize,
                                                             write_conditions conditions);
    io::task<base::result<upload_record>> abort_upload(std::string bucket, std::string key, std::string upload_id);
    // Uploads of a bucket in (key, upload id) order after the markers, at most max_uploads + 1.
    io::task<base::result<std::vector<upload_record>>> list_uploads(std::string bucket, std::string prefix,
                                                                    std::string key_marker,
                                                                    std::string upload_id_marker,
                                                                    std::uint32_t max_uploads);
    // Aborts this core's uploads initiated before the cutoff; returns how many.
    io::task<std::uint64_t> expire_local_uploads(std::int64_t initiated_before_ms);

    // Every object of the shards this core owns, as (bucket, key, record) copies (for the scrubber).
    struct stored_object {
        std::string bucket;
        std::string key;
        object_record record;
    };
    std::vector<stored_object> local_objects() const;

    // For tests: persist a snapshot of every shard owned by this core now.
    io::task<void> snapshot_local_shards();

private:
    struct shard;
    struct core_state;
    engine(engine_options options, drive_set drives);
    base::result<void> recover();
    base::result<void> recover_shard(shard& s);
    base::result<void> remove_orphans();
    unsigned shard_of(const std::string& bucket, const std::string& key) const;
    unsigned owner_of(unsigned shard_id) const { return shard_id % _options.cores; }
    core_state& local();
    const core_state& local() const;

    io::task<base::result<std::optional<object_record>>> shard_put(unsigned shard_id, std::string bucket,
                                                                    std::string key, object_record record,
                                                                    write_conditions conditions);
    io::task<base::result<std::optional<object_record>>> shard_remove(unsigned shard_id, std::string bucket,
                                                                       std::string key, write_conditions conditions);
    io::task<base::result<object_record>> shard_lookup(unsigned shard_id, std::string bucket, std::string key);
    io::task<base::result<object_record>> shard_update(unsigned shard_id, std::string bucket, std::string key,
                                                       record_editor edit, write_conditions conditions);
    io::task<base::result<list_page>> core_list(list_request request);
    io::task<base::result<void>> core0_create_bucket(std::string name);
    io::task<base::result<void>> core0_delete_bucket(std::string name);
    io::task<base::result<bool>> core_close_if_empty(std::string name);
    io::task<base::result<bool>> core_set_bucket(bucket_info info, bool present);
    io::task<void> rotate(shard& s);
    std::string new_upload_id();
    io::task<base::result<std::string>> shard_create_upload(unsigned shard_id, upload_record upload);
    io::task<base::result<upload_record>> shard_get_upload(unsigned shard_id, std::string bucket, std::string key,
                                                           std::string upload_id);
    io::task<base::result<std::optional<part_record>>> shard_commit_part(unsigned shard_id, std::string upload_id,
                                                                          std::string bucket, std::string key,
                                                                          part_record part);
    io::task<base::result<std::optional<part_record>>> shard_commit_part_entered(shard& s, std::string upload_id,
                                                                                  std::string bucket, std::string key,
                                                                                  part_record part);
    io::task<base::result<completed_upload>> shard_complete_upload(unsigned shard_id, std::string bucket,
                                                                   std::string key, std::string upload_id,
                                                                   upload_finalizer finalize,
                                                                   write_conditions conditions);
    // The completion proper, once its upload's gate is closed (upload_gate in engine_internal.h).
    io::task<base::result<completed_upload>> shard_complete_closing(shard& s, std::string bucket, std::string key,
                                                                    std::string upload_id, upload_finalizer finalize,
                                                                    write_conditions conditions);
    io::task<base::result<upload_record>> shard_abort_upload(unsigned shard_id, std::string bucket, std::string key,
                                                             std::string upload_id);
    io::task<base::result<std::vector<upload_record>>> core_list_uploads(std::string bucket, std::string prefix,
                                                                         std::string key_marker,
                                                                         std::string upload_id_marker,
                                                                         std::uint32_t max_uploads);

    engine_options _options;
    drive_set _drives;
    std::uint64_t _boot_nonce = 0;
    std::vector<std::unique_ptr<shard>> _shards;
    std::vector<std::unique_ptr<core_state>> _cores;
    std::unique_ptr<spare_files> _spares;
    std::map<std::string, bucket_info> _recovered_buckets;
    recovery_stats _recovery;
};

}  // namespace fjord::store
