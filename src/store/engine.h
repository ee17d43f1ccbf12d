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

#include <atomic>
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
#include "store/object_store.h"

namespace fjord::store {

struct engine_options {
    std::vector<std::string> data_dirs{"./data"};
    // Data directories (other than the first) that may be formatted while the others are formatted
    // already: drives that replaced lost ones (drive_set::open).
    std::vector<std::string> accept_empty_drives;
    unsigned cores = 1;
    data_file_options data_files;
    write_scheduler_options writes;
    spare_file_options spares;
    // Free-space floor and space reserved ahead of received bytes (drive_space.h)
    space_options space;
    io::buffer_pool_options buffers;
    std::uint64_t journal_rotate_bytes =
        64ULL * 1024 * 1024;  // snapshot + new journal past this size (or past the last snapshot's)
    // Objects of at most this many bytes written by one PUT are kept in their record (journal, snapshot,
    // index) instead of a data file, while all such bytes stay within inline_budget_bytes (server-wide,
    // held in memory); 0 turns inlining off.
    std::uint32_t inline_max_bytes = 4096;
    std::uint64_t inline_budget_bytes = 256ULL * 1024 * 1024;
    file_system* fs = nullptr;  // null: posix_file_system(); a simulated one in tests
    // Names this run's object ids; random unless set (tests)
    std::optional<std::uint64_t> boot_nonce;
};

struct completed_upload {
    object_record object;
    std::optional<object_record> replaced;  // the object the upload overwrote
    std::vector<segment> unused_parts;      // uploaded parts the final object does not use
};

// Whether the writer of a failed commit may remove the data it wrote. Not when the outcome is unknown: the
// record may reappear at the next start, and must find its data (orphans are removed at start-up).
inline bool commit_surely_failed(const base::error& e) {
    return e.code != base::errc::commit_outcome_unknown;
}

struct recovery_stats {
    std::uint64_t objects = 0;
    std::uint64_t journal_records = 0;
    std::uint64_t torn_tails = 0;
    std::uint64_t orphans_removed = 0;
    std::uint64_t orphans_kept =
        0;  // could not be removed (an I/O error): tried again at the next start
};

// The single-node implementation of the object-store boundary (object_store.h), and beneath it the
// engine's own steps (commit_* change only metadata; writing data and reclaiming it belong to the
// caller of those), which only the engine's tests and the simulation use directly.
class engine final : public object_store,
                     public version_store,
                     public record_updates,
                     public object_copier,
                     public upload_store,
                     public ordered_puts,
                     public bucket_attributes {
public:
    static base::result<std::unique_ptr<engine>> open(engine_options options);
    ~engine() override;

    // Called once on each reactor thread before it serves: creates that core's buffer pool and write
    // scheduler.
    void attach_core(unsigned core, io_uring* ring);
    const recovery_stats& recovery() const { return _recovery; }

    // ---- object_store ----
    io::task<base::result<void>> create_bucket(std::string name) override;
    io::task<base::result<void>> delete_bucket(std::string name) override;
    bool bucket_exists(const std::string& name) const override;
    std::vector<bucket_info> list_buckets() const override;
    std::optional<bucket_info> find_bucket(const std::string& name) const override;
    bool bucket_has_attribute(const std::string& bucket, const std::string& name) const override;
    io::task<base::result<void>> set_bucket_attribute(std::string bucket, std::string name,
                                                      std::optional<std::string> value) override;
    io::task<base::result<object_record>> put(put_request request, byte_source& body,
                                              record_finisher finish) override;
    io::task<base::result<object_record>> head(std::string bucket, std::string key) override;
    io::task<base::result<object_record>> get(std::string bucket, std::string key,
                                              read_planner plan, byte_sink& sink) override;
    io::task<base::result<object_record>> update(std::string bucket, std::string key,
                                                 record_editor edit,
                                                 write_conditions conditions) override;
    io::task<base::result<std::optional<object_record>>> remove(
        std::string bucket, std::string key, write_conditions conditions) override;
    io::task<base::result<object_record>> copy(copy_request request, copy_planner plan) override;
    io::task<base::result<list_page>> list(list_request request) override;
    io::task<base::result<object_record>> head_version(std::string bucket, std::string key,
                                                       std::string version_id) override;
    io::task<base::result<object_record>> get_version(std::string bucket, std::string key,
                                                      std::string version_id, read_planner plan,
                                                      byte_sink& sink) override;
    io::task<base::result<object_record>> update_version(std::string bucket, std::string key,
                                                         std::string version_id,
                                                         record_editor edit) override;
    io::task<base::result<std::optional<object_record>>> remove_version(
        std::string bucket, std::string key, std::string version_id) override;
    io::task<base::result<list_page>> list_versions(list_request request) override;
    io::task<base::result<std::string>> create_upload(std::string bucket, std::string key,
                                                      object_record metadata,
                                                      std::string checksum_type) override;
    io::task<base::result<upload_record>> get_upload(std::string bucket, std::string key,
                                                     std::string upload_id) override;
    io::task<base::result<part_record>> upload_part(part_request request, byte_source& body,
                                                    part_finisher finish) override;
    io::task<base::result<part_record>> copy_part(part_copy_request request,
                                                  part_copy_planner plan) override;
    io::task<base::result<object_record>> complete_upload(std::string bucket, std::string key,
                                                          std::string upload_id,
                                                          upload_finalizer finalize,
                                                          write_conditions conditions) override;
    io::task<base::result<void>> abort_upload(std::string bucket, std::string key,
                                              std::string upload_id) override;
    io::task<base::result<std::vector<upload_record>>> list_uploads(
        std::string bucket, std::string prefix, std::string key_marker,
        std::string upload_id_marker, std::uint32_t max_uploads) override;
    storage_stats stats() const override;
    // Every part, for every bucket.
    version_store* versions_of(const std::string&) override { return this; }
    record_updates* updates_of(const std::string&) override { return this; }
    object_copier* copier_of(const std::string&) override { return this; }
    upload_store* uploads_of(const std::string&) override { return this; }
    ordered_puts* ordered_puts_of(const std::string&) override { return this; }
    io::task<base::result<object_record>> put_ordered(put_request request, write_order order,
                                                      byte_source& body,
                                                      record_finisher finish) override;
    bucket_attributes* attributes_of(const std::string&) override { return this; }

    // ---- for the scrubber, the simulation and the server's housekeeping ----
    io::buffer_pool& pool();
    // The spare data files (reclaimed files kept for reuse; shared by every core).
    spare_files& spares();
    const drive_set& drives() const { return _drives; }
    const data_file_options& data_file_settings() const { return _options.data_files; }
    // For tests and the simulation: persist a snapshot of every shard owned by this core now.
    io::task<void> snapshot_local_shards();
    // Aborts this core's uploads initiated before the cutoff; returns how many.
    io::task<std::uint64_t> expire_local_uploads(std::int64_t initiated_before_ms);

    // Every object of the shards this core owns, as (bucket, key, record) copies (for the scrubber).
    struct stored_object {
        std::string bucket;
        std::string key;
        object_record record;
    };
    std::vector<stored_object> local_objects() const;

    // What removing a key did: in a bucket with versioning it leaves a delete marker (and, while
    // versioning is suspended, replaces the null version, whose data is the caller's to reclaim).
    struct removal {
        std::optional<object_record> removed;
        std::optional<object_record> marker;
    };

private:
    friend struct engine_test_access;
    // ---- the engine's own steps: private, reached by its own files and by tests through
    // engine_test_access (tests/unit/store/engine_test_util.h) ----
    // This core's scheduler of data-file writes: give it to every object_writer on the core.
    write_scheduler& writes();
    // Server-side copies that stream data (read into some buffers, write from others) hold buffers while
    // they wait for more, so enough of them at once could take a core's whole pool and wait on each other
    // forever. Each must hold a unit of this (per core) while it streams: together they can take at most
    // half the pool, and the other requests never wait for a buffer while holding one.
    io::semaphore& copy_admission();
    object_id new_object_id();

    // Commits a written object as the version its version_id names (apply_put's rule); returns the
    // record it replaced (whose data the caller reclaims). `etag_below`: write_order's.
    io::task<base::result<std::optional<object_record>>> commit_put(
        std::string bucket, std::string key, object_record record, write_conditions conditions,
        std::optional<std::string> etag_below = std::nullopt);
    // Removes a key's record; returns it (its data is the caller's to reclaim).
    io::task<base::result<std::optional<object_record>>> commit_remove(std::string bucket,
                                                                       std::string key,
                                                                       write_conditions conditions);
    io::task<base::result<removal>> commit_delete(std::string bucket, std::string key,
                                                  write_conditions conditions);
    // Removes one version of a key for good; returns it (its data is the caller's to reclaim).
    io::task<base::result<std::optional<object_record>>> commit_remove_version(
        std::string bucket, std::string key, std::string version_id);
    // Commits a written part; returns the part it replaced (same number), whose data the caller reclaims.
    io::task<base::result<std::optional<part_record>>> commit_part(std::string bucket,
                                                                   std::string key,
                                                                   std::string upload_id,
                                                                   part_record part);
    // Commits the object an upload's finalizer builds; the unused parts and the replaced object are the
    // caller's to reclaim.
    io::task<base::result<completed_upload>> commit_complete(std::string bucket, std::string key,
                                                             std::string upload_id,
                                                             upload_finalizer finalize,
                                                             write_conditions conditions);
    io::task<base::result<upload_record>> commit_abort(std::string bucket, std::string key,
                                                       std::string upload_id);
    // Removes the data files of a replaced or deleted record (or keeps them as spares). Only once no
    // durable record refers to them.
    io::task<void> reclaim(object_record record);
    io::task<void> reclaim_segments(std::vector<segment> segments);
    // New segments naming the same data as `source` (hard links under new object ids, on the same drives),
    // for server-side copies that move no data. Fails with not_found when a source file vanished (the
    // source was overwritten meanwhile), or with another error where the file system cannot link; either
    // way nothing is left behind. The caller commits the result like freshly written data.
    io::task<base::result<std::vector<segment>>> share_segments(std::vector<segment> source);

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

    io::task<base::result<std::optional<object_record>>> shard_put(
        unsigned shard_id, std::string bucket, std::string key, object_record record,
        write_conditions conditions, std::optional<std::string> etag_below);
    io::task<base::result<removal>> shard_remove(unsigned shard_id, std::string bucket,
                                                 std::string key, write_conditions conditions);
    io::task<base::result<std::optional<object_record>>> shard_remove_version(
        unsigned shard_id, std::string bucket, std::string key, std::string version_id);
    // The current version (version_id nullopt; no_such_key when it is a delete marker) or the one named.
    io::task<base::result<object_record>> find(std::string bucket, std::string key,
                                               std::optional<std::string> version_id);
    io::task<base::result<object_record>> shard_find(unsigned shard_id, std::string bucket,
                                                     std::string key,
                                                     std::optional<std::string> version_id);
    io::task<base::result<object_record>> read(std::string bucket, std::string key,
                                               std::optional<std::string> version_id,
                                               read_planner plan, byte_sink& sink);
    io::task<base::result<object_record>> edit(std::string bucket, std::string key,
                                               std::optional<std::string> version_id,
                                               record_editor edit, write_conditions conditions);
    io::task<base::result<object_record>> shard_update(unsigned shard_id, std::string bucket,
                                                       std::string key,
                                                       std::optional<std::string> version_id,
                                                       record_editor edit,
                                                       write_conditions conditions);
    // One page of the keys (or, with `versions`, every version) of the shards this core owns.
    io::task<base::result<list_page>> core_list(list_request request, bool versions);
    io::task<base::result<list_page>> list_all(list_request request, bool versions);
    // The key's current version unless absent or a delete marker (for write conditions), else nullptr.
    static const object_record* current_object(shard& s, const std::string& bucket,
                                               const std::string& key);
    // Versioning of a bucket, as this core sees it (versioning_attribute).
    enum class versioning_state { never, enabled, suspended };
    versioning_state versioning_of(const std::string& bucket) const;
    // The id of a new version of a key in a bucket with versioning enabled, otherwise "" (null).
    std::string version_for_write(const std::string& bucket);
    io::task<base::result<void>> core0_create_bucket(std::string name);
    io::task<base::result<void>> core0_delete_bucket(std::string name);
    io::task<base::result<void>> core0_set_bucket_attribute(std::string bucket, std::string name,
                                                            std::optional<std::string> value);
    io::task<base::result<bool>> core_abort_bucket_uploads(std::string name);
    io::task<base::result<bool>> core_close_if_empty(std::string name);
    io::task<base::result<bool>> core_set_bucket(bucket_info info, bool present);
    io::task<void> publish_bucket(bucket_info info);
    io::task<void> rotate(shard& s);
    // The image of a snapshot of the shard's state now (every record up to its journal's durable_seq).
    std::string snapshot_image(const shard& s) const;
    // The second half of a rotation: makes the written snapshot `tmp` visible and switches the journal to
    // `jfd` (journal next_gen), or, when that cannot be done, removes both and keeps the current journal
    // (false).
    io::task<bool> publish_snapshot(shard& s, std::uint64_t next_gen, std::string tmp, int jfd,
                                    std::string new_journal);
    std::string new_upload_id();
    io::task<base::result<std::string>> shard_create_upload(unsigned shard_id,
                                                            upload_record upload);
    io::task<base::result<upload_record>> shard_get_upload(unsigned shard_id, std::string bucket,
                                                           std::string key, std::string upload_id);
    io::task<base::result<std::optional<part_record>>> shard_commit_part(unsigned shard_id,
                                                                         std::string upload_id,
                                                                         std::string bucket,
                                                                         std::string key,
                                                                         part_record part);
    io::task<base::result<std::optional<part_record>>> shard_commit_part_entered(
        shard& s, std::string upload_id, std::string bucket, std::string key, part_record part);
    io::task<base::result<completed_upload>> shard_complete_upload(
        unsigned shard_id, std::string bucket, std::string key, std::string upload_id,
        upload_finalizer finalize, write_conditions conditions);
    // The completion proper, once its upload's gate is closed (upload_gate in engine_internal.h).
    io::task<base::result<completed_upload>> shard_complete_closing(shard& s, std::string bucket,
                                                                    std::string key,
                                                                    std::string upload_id,
                                                                    upload_finalizer finalize,
                                                                    write_conditions conditions);
    io::task<base::result<upload_record>> shard_abort_upload(unsigned shard_id, std::string bucket,
                                                             std::string key,
                                                             std::string upload_id);
    io::task<base::result<std::vector<upload_record>>> core_list_uploads(
        std::string bucket, std::string prefix, std::string key_marker,
        std::string upload_id_marker, std::uint32_t max_uploads);

    // The write protocol (transfers.cc): a new data file from `source`, `before_seal` once every byte is
    // written, then durable; nothing is left behind on failure.
    using seal_check = std::function<base::result<void>(const written_data&)>;
    io::task<base::result<segment>> write_data(byte_source& source,
                                               std::optional<std::uint64_t> size_bytes,
                                               std::uint64_t max_size_bytes,
                                               const seal_check& before_seal);
    // Copies [range) of an object into a new durable data file, showing each chunk to `observe`.
    io::task<base::result<segment>> copy_data(
        const object_record& source, byte_range range,
        const std::function<void(std::span<const std::byte>)>& observe,
        const seal_check& before_seal);
    // The end of both: the front end's check once every byte is written, then the data made durable; a
    // failure (`so_far`'s, the check's or the seal's) discards the file.
    io::task<base::result<segment>> seal_checked(object_writer& writer, base::result<void> so_far,
                                                 const seal_check& before_seal);
    // Commits a record whose data this request wrote: reclaims what it replaced, or its own data when the
    // commit surely failed.
    io::task<base::result<object_record>> commit_written(std::string bucket, std::string key,
                                                         object_record record,
                                                         write_conditions conditions,
                                                         const write_order* order = nullptr);
    io::task<base::result<part_record>> commit_written_part(std::string bucket, std::string key,
                                                            std::string upload_id,
                                                            part_record part);
    // Space spares hold is given back when a write found a drive full, so that a retry finds it.
    io::task<void> free_space_after(const base::error& err);
    // Small objects in their record (transfers.cc): the budget is taken before the bytes are read and
    // given back when the record is reclaimed.
    bool take_inline_budget(std::uint64_t bytes);
    void give_inline_budget(std::uint64_t bytes);
    io::task<base::result<object_record>> put_inline(put_request request, byte_source& body,
                                                     record_finisher finish,
                                                     std::optional<write_order> order);
    io::task<base::result<object_record>> put_with(put_request request,
                                                   std::optional<write_order> order,
                                                   byte_source& body, record_finisher finish);
    io::task<base::result<object_record>> copy_inline(copy_request request,
                                                      const object_record& source,
                                                      copy_plan planned);

    engine_options _options;
    drive_set _drives;
    std::uint64_t _boot_nonce = 0;
    std::vector<std::unique_ptr<shard>> _shards;
    // Set once any shard's journal failed to fsync a data directory; then every journal refuses to
    // commit until the restart (journal::share_data_dir_failure).
    std::atomic<bool> _data_dir_sync_failed{false};
    std::vector<std::unique_ptr<core_state>> _cores;
    std::unique_ptr<spare_files> _spares;
    std::map<std::string, bucket_info> _recovered_buckets;
    recovery_stats _recovery;
    std::atomic<std::uint64_t> _inline_bytes{0};  // bytes of objects held in their records
};

}  // namespace fjord::store
