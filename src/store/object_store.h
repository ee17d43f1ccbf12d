#pragma once

// The object-store boundary: every front end (the S3 API today; the KV batch API and the admin API
// later) talks to storage through this interface of whole operations, and nothing else of the store.
// The single-node engine (engine.h), the erasure-coded cluster (cluster/cluster_store.h) and the KV tier
// (kv/tier.h) implement it, each with the optional parts it offers (versions, multipart uploads, ...:
// see "The optional parts of a store" below); bucket_router.h sends each bucket to the right one. Where a
// write becomes durable is inside put / upload_part / copy / copy_part: the store writes the bytes into
// new data files, asks the front end to finish the record (its digests, its metadata), makes the data
// durable, commits the record under its conditions, and reclaims whatever the commit replaced, or the
// new data if the commit surely failed. A front end never sees drives, buffers, writers or commits.
//
// The store speaks its own terms: error codes from base/error.h with messages for logs (a front end
// words its answers itself), records whose fields mean the same to any front end (`etag` is the entity
// tag conditions compare, `tags` are key/value labels, `checksum_*` a whole-content checksum the front
// end computed). It calls back into the front end only through the finishers and planners below, which
// run on the calling core, synchronously, and must not suspend.
//
// Threading: every operation is called on a reactor thread and completes there; the store hops to the
// key's owner core inside. Records are values.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"
#include "io/task.h"
#include "store/bytes.h"
#include "store/object.h"

namespace fjord::store {

struct bucket_info {
    std::string name;
    std::int64_t created_ms = 0;
    // Configuration a front end keeps with the bucket (the S3 layer: its tag set), by name; as durable
    // as the bucket itself.
    std::map<std::string, std::string> attributes;
};

// Conditions checked atomically with a commit (If-None-Match: * and If-Match on writes and deletes).
struct write_conditions {
    bool if_none_match_any = false;
    std::optional<std::string> if_match_etag;  // without quotes
};

// A KV bucket (docs/kv.md): immutable blocks in the KV tier (DRAM in front of a log-structured NVMe
// store) instead of the object engine. When a write is acknowledged is the bucket's choice.
enum class kv_write_ack : std::uint8_t {
    nvme,  // after the block is on stable storage (O_DSYNC): survives a crash
    dram,  // once the block is in DRAM; it reaches NVMe shortly after (cache semantics: a crash may lose it)
};
struct kv_bucket_options {
    std::uint64_t capacity_bytes = 0;  // NVMe space the bucket may use; 0: the tier's default
    std::int64_t ttl_seconds = 0;      // blocks older than this read as absent; 0: no expiry
    kv_write_ack ack = kv_write_ack::nvme;
};

// A block's bytes in memory (the DRAM tier's copy, or a read just verified), immutable and shared by
// its readers on any core (the reference count is atomic). The bytes sit after a 4 KiB header area in
// one 4 KiB-aligned allocation, so the same memory is the O_DIRECT record the NVMe tier writes; from
// 2 MiB up, the allocation is 2 MiB-aligned on huge pages (io/block_memory.cc says why).
class block_buffer {
public:
    static constexpr std::size_t header_bytes = 4096;
    static std::shared_ptr<block_buffer> allocate(std::size_t value_bytes);
    // The size of record() for a value of value_bytes.
    static constexpr std::size_t record_bytes_for(std::size_t value_bytes) {
        return header_bytes + (value_bytes + 4095) / 4096 * 4096;
    }
    ~block_buffer();
    block_buffer(const block_buffer&) = delete;
    block_buffer& operator=(const block_buffer&) = delete;
    std::span<std::byte> value() { return {_base + header_bytes, _value_bytes}; }
    std::span<const std::byte> value() const { return {_base + header_bytes, _value_bytes}; }
    // The header area and the value, padded with zeros to a multiple of 4 KiB.
    std::span<std::byte> record() { return {_base, _record_bytes}; }
    std::uint32_t value_crc = 0;  // CRC32C of value(), set by whoever filled it

private:
    block_buffer(std::byte* base, bool mapped, std::size_t value_bytes, std::size_t record_bytes)
        : _base(base), _mapped(mapped), _value_bytes(value_bytes), _record_bytes(record_bytes) {}
    std::byte* _base;
    bool
        _mapped;  // a mapping of its own (2 MiB and more, on huge pages) rather than a heap allocation
    std::size_t _value_bytes;
    std::size_t _record_bytes;
};
using block_ref = std::shared_ptr<const block_buffer>;

// What a KV bucket's batch API needs beyond object_store: lookups of many keys in one message per
// owner core, and blocks as shared buffers instead of streams. Implemented by the KV tier (kv/tier.h).
class block_store {
public:
    virtual ~block_store() = default;
    // The largest block `bucket` takes (0 when it is not a KV bucket here).
    virtual std::uint64_t max_block_bytes(const std::string& bucket) const = 0;
    // Each key's size, or nullopt when absent (never stored, deleted, evicted, expired); in order.
    virtual io::task<base::result<std::vector<std::optional<std::uint64_t>>>> sizes(
        std::string bucket, std::vector<std::string> keys) = 0;
    // A block's verified bytes and its record; not_found when absent, or when its bytes fail their
    // CRC32C (the block is then dropped and counted, never served).
    virtual io::task<base::result<std::pair<block_ref, object_record>>> read_block(
        std::string bucket, std::string key) = 0;
    // The verified blocks of many keys, in order (null where absent or dropped as corrupt): one message
    // per owner core, the cores' parts fetched side by side.
    virtual io::task<base::result<std::vector<block_ref>>> read_blocks(
        std::string bucket, std::vector<std::string> keys) = 0;
    // Stores a filled buffer (value_crc set) under `key` with `record` (size set by the store).
    // With if_none_match_any, an existing key is kept and the answer is false.
    virtual io::task<base::result<bool>> write_block(std::string bucket, std::string key,
                                                     std::shared_ptr<block_buffer> bytes,
                                                     object_record record,
                                                     write_conditions conditions) = 0;
};

struct list_request {
    std::string bucket;
    std::string prefix;
    std::string delimiter;
    std::string start_after;  // exclusive; a common prefix here skips every key under it
    std::uint32_t max_keys = 1000;
    // list_versions only: with start_after, resume within that key after this version ("": null)
    std::optional<std::string> version_id_marker;
};

struct list_entry {
    std::string name;
    bool is_prefix = false;
    std::uint64_t size_bytes = 0;
    std::string etag;
    std::int64_t modified_ms = 0;
    // list_versions only
    std::string version_id;  // "": the null version
    bool is_latest = true;
    bool delete_marker = false;
};

// Versioning. The store reads one bucket attribute itself: `versioning_attribute`, "Enabled" or
// "Suspended" (absent: versioning was never enabled). While it is Enabled, every write makes a new version
// with a fresh id and a remove leaves a delete marker; while it is Suspended, writes and removes replace
// the null version (id ""), and older versions stay. Old versions go only by remove_version.
inline constexpr const char* versioning_attribute = "versioning";

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
    std::uint64_t size_bytes() const { return data.size_bytes; }
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

// What the store knows of bytes it has just stored, for the front end to derive its entity tag from.
struct written_data {
    std::uint64_t size_bytes = 0;
    std::span<const std::uint32_t> block_crcs;  // CRC32C of each block, in order
};

// Called once every byte of a write is stored and before it is made durable: checks what only the front
// end can check (digests, signatures of what it received) and builds the record to commit, all but its
// size and segments. A failure discards the data and is the operation's answer.
using record_finisher = std::function<base::result<object_record>(const written_data&)>;
using part_finisher = std::function<base::result<part_record>(const written_data&)>;

struct put_request {
    std::string bucket;
    std::string key;
    // Declared: a body that ends sooner fails (incomplete_body)
    std::optional<std::uint64_t> size_bytes;
    std::uint64_t max_size_bytes = 0;  // more fails with entity_too_large
    write_conditions conditions;
};

struct part_request {
    std::string bucket;
    std::string key;
    std::string upload_id;
    std::uint32_t number = 0;  // 1..10000
    std::optional<std::uint64_t> size_bytes;
    std::uint64_t max_size_bytes = 0;
};

struct byte_range {
    std::uint64_t first = 0;
    std::uint64_t length = 0;
};

// Decides, from the object's record, what a read sends: the range, or nothing (a HEAD, an empty range),
// or an error that is the read's answer (a failed read condition, an unsatisfiable range). It may run
// more than once for one read: when the object is replaced between the lookup and the first byte, the
// store looks again.
using read_planner = std::function<base::result<std::optional<byte_range>>(const object_record&)>;

// A server-side copy, as the front end wants it once it has seen the source's record.
struct copy_plan {
    // The copy's metadata (size, entity tag and checksum are the source's if shared)
    object_record record;
    // The copy may share the source's data files (hard links: no bytes move). Where it cannot (or must
    // not: a copy that needs a checksum only its bytes give), the bytes are read, verified and written anew.
    bool may_share = true;
    std::function<void(std::span<const std::byte>)>
        observe;             // sees the bytes when they are rewritten
    record_finisher finish;  // completes `record` after a rewrite (entity tag, checksum)
};
using copy_planner = std::function<base::result<copy_plan>(const object_record& source)>;

struct copy_request {
    std::string source_bucket;
    std::string source_key;
    std::string bucket;
    std::string key;
    write_conditions conditions;
    std::optional<std::string> source_version_id;  // nullopt: the current version
};

// A part copied from a range of an object.
struct part_copy_plan {
    byte_range range;
    std::function<void(std::span<const std::byte>)> observe;
    part_finisher finish;
};
using part_copy_planner = std::function<base::result<part_copy_plan>(const object_record& source)>;

struct part_copy_request {
    std::string source_bucket;
    std::string source_key;
    std::string bucket;
    std::string key;
    std::string upload_id;
    std::uint32_t number = 0;
    std::optional<std::string> source_version_id;  // nullopt: the current version
};

// What a completion makes, as the front end chose it from the upload (validation and entity-tag rules
// are the front end's): the object's record (metadata, entity tag, checksum; no size and no data) and
// the numbers of the parts it is made of, in order. The store assembles the object from those parts.
struct upload_completion {
    object_record record;
    std::vector<std::uint32_t> parts;
};
using upload_finalizer = std::function<base::result<upload_completion>(const upload_record&)>;
// For the stores: the object record a completion makes, the chosen parts' data, sizes and checksums
// appended in order; invalid_part when the upload lacks one of them.
base::result<object_record> assemble_upload(const upload_record& upload, upload_completion chosen);
// Changes a record in place (metadata, tags); the change must keep the data.
using record_editor = std::function<base::result<void>(object_record&)>;

// Counters of the store's space management, for metrics.
struct storage_stats {
    std::uint64_t spare_files_kept = 0;
    std::uint64_t spare_files_reused = 0;
    std::uint64_t spare_files_removed = 0;
    std::uint64_t spare_bytes = 0;
    std::uint64_t reserved_ahead_bytes = 0;
    std::uint64_t key_lock_waits = 0;         // commits that waited for another's key lock
    std::uint64_t key_lock_waiters_peak = 0;  // the longest line behind one key lock
};

// ---- The optional parts of a store ----
// Each is offered per bucket (object_store::versions_of and the others): a store returns nullptr for a
// bucket it does not offer the part for, and the front end answers as S3 does where a feature is
// absent. Nothing here is a method that only refuses.

// Versions of keys (a bucket with versioning).
class version_store {
public:
    virtual ~version_store() = default;
    // One version of a key ("" is the null version), as head / get / update do the current one:
    // no_such_version when there is none, method_not_allowed when it is a delete marker.
    virtual io::task<base::result<object_record>> head_version(std::string bucket, std::string key,
                                                               std::string version_id) = 0;
    virtual io::task<base::result<object_record>> get_version(std::string bucket, std::string key,
                                                              std::string version_id,
                                                              read_planner plan,
                                                              byte_sink& sink) = 0;
    virtual io::task<base::result<object_record>> update_version(std::string bucket,
                                                                 std::string key,
                                                                 std::string version_id,
                                                                 record_editor edit) = 0;
    // Removes one version for good (a delete marker too); returns it (nullopt: there was none). When it
    // was the current version, the newest older one becomes current.
    virtual io::task<base::result<std::optional<object_record>>> remove_version(
        std::string bucket, std::string key, std::string version_id) = 0;
    // Every version, delete markers included, in key order and newest first within a key; each version
    // and each common prefix counts toward max_keys.
    virtual io::task<base::result<list_page>> list_versions(list_request request) = 0;
};

// Changes to a stored record in place (tags, ACL, metadata): the change must keep the data.
class record_updates {
public:
    virtual ~record_updates() = default;
    virtual io::task<base::result<object_record>> update(std::string bucket, std::string key,
                                                         record_editor edit,
                                                         write_conditions conditions) = 0;
};

// Server-side copies (of objects of the store's buckets).
class object_copier {
public:
    virtual ~object_copier() = default;
    virtual io::task<base::result<object_record>> copy(copy_request request, copy_planner plan) = 0;
};

// Multipart uploads. A part uploaded again under the same number replaces the earlier one.
class upload_store {
public:
    virtual ~upload_store() = default;
    virtual io::task<base::result<std::string>> create_upload(std::string bucket, std::string key,
                                                              object_record metadata,
                                                              std::string checksum_type) = 0;
    virtual io::task<base::result<upload_record>> get_upload(std::string bucket, std::string key,
                                                             std::string upload_id) = 0;
    virtual io::task<base::result<part_record>> upload_part(part_request request, byte_source& body,
                                                            part_finisher finish) = 0;
    virtual io::task<base::result<part_record>> copy_part(part_copy_request request,
                                                          part_copy_planner plan) = 0;
    // Commits the object `finalize` builds; parts it does not use are removed.
    virtual io::task<base::result<object_record>> complete_upload(std::string bucket,
                                                                  std::string key,
                                                                  std::string upload_id,
                                                                  upload_finalizer finalize,
                                                                  write_conditions conditions) = 0;
    virtual io::task<base::result<void>> abort_upload(std::string bucket, std::string key,
                                                      std::string upload_id) = 0;
    // Uploads of a bucket in (key, upload id) order after the markers, at most max_uploads + 1.
    virtual io::task<base::result<std::vector<upload_record>>> list_uploads(
        std::string bucket, std::string prefix, std::string key_marker,
        std::string upload_id_marker, std::uint32_t max_uploads) = 0;
};

// Writes whose versions a front end orders itself (the cluster's shards, whose entity tags begin with
// an ordered version stamp): the id of the version a write makes (in a bucket with versioning
// enabled; ignored otherwise; empty: a fresh one, as for any write), and that it replaces only an absent key or a current version whose
// entity tag sorts bytewise before `etag_below` (when given), so that an older write never replaces a
// newer one that arrived first (precondition_failed).
struct write_order {
    std::string version_id;
    std::optional<std::string> etag_below;
};
class ordered_puts {
public:
    virtual ~ordered_puts() = default;
    virtual io::task<base::result<object_record>> put_ordered(put_request request,
                                                              write_order order, byte_source& body,
                                                              record_finisher finish) = 0;
};

// A bucket's named attributes (its configuration: policy, ACL, lifecycle, tags, versioning).
class bucket_attributes {
public:
    virtual ~bucket_attributes() = default;
    // Sets (or, with nullopt, removes) one named attribute of a bucket, durably, then on every core;
    // no_such_bucket when the bucket does not exist.
    virtual io::task<base::result<void>> set_bucket_attribute(std::string bucket, std::string name,
                                                              std::optional<std::string> value) = 0;
};

// A view of the buckets that can lag behind the store's source of truth (a cluster node's, fed from
// etcd: another node changes buckets without a call on this one). A store without one sees every
// change of its buckets through its own calls: its view is never stale.
class bucket_catalog {
public:
    virtual ~bucket_catalog() = default;
    // The bucket as the source of truth holds it now, for a decision a stale view must not make
    // (CreateBucket of a name this core still sees after another node deleted it); this core's view
    // is brought up to date.
    virtual io::task<base::result<std::optional<bucket_info>>> find_bucket_now(
        std::string name) = 0;
    // Called before a request is answered NoSuchBucket from this core's view: looks the bucket up in
    // the source of truth (a bucket made through another node a moment ago) and brings the view up to
    // date. Bounded: past its bound the view answers. A failure (the source of truth did not answer)
    // is the request's answer.
    virtual io::task<base::result<void>> learn_bucket(std::string name) = 0;
    // Changes whenever this core's view of the buckets may have changed without a call on this node;
    // a front end caching bucket configuration reloads on a change.
    virtual std::uint64_t catalog_version() const = 0;
};

// Making KV buckets (a store with a KV tier).
class kv_buckets {
public:
    virtual ~kv_buckets() = default;
    virtual io::task<base::result<void>> create_kv_bucket(std::string name,
                                                          kv_bucket_options options) = 0;
};

class object_store {
public:
    virtual ~object_store() = default;

    // Buckets.
    virtual io::task<base::result<void>> create_bucket(std::string name) = 0;
    virtual io::task<base::result<void>> delete_bucket(std::string name) = 0;
    virtual bool bucket_exists(const std::string& name) const = 0;  // this core's view
    virtual std::vector<bucket_info> list_buckets() const = 0;      // this core's view, sorted
    // This core's view of one bucket; nullopt when it does not exist.
    virtual std::optional<bucket_info> find_bucket(const std::string& name) const;
    // Whether this core's view of a bucket holds the named attribute: what a request path asks on every
    // request, without copying the bucket's configuration.
    virtual bool bucket_has_attribute(const std::string& bucket, const std::string& name) const;

    // Objects. A failed write leaves nothing behind; a read never returns bytes that fail their checks
    // (data_corrupted), and not_found from a read means a data file is gone (damage, to the front end).
    virtual io::task<base::result<object_record>> put(put_request request, byte_source& body,
                                                      record_finisher finish) = 0;
    virtual io::task<base::result<object_record>> head(std::string bucket, std::string key) = 0;
    // Streams what `plan` chooses into `sink`; returns the record read.
    virtual io::task<base::result<object_record>> get(std::string bucket, std::string key,
                                                      read_planner plan, byte_sink& sink) = 0;
    // Removes a key (a missing key succeeds with nullopt); returns the removed record, whose data is gone,
    // or, in a bucket with versioning, the delete marker the removal left. A key whose current version is
    // a delete marker reads as absent (no_such_key) and is left out of list().
    virtual io::task<base::result<std::optional<object_record>>> remove(
        std::string bucket, std::string key, write_conditions conditions) = 0;
    virtual io::task<base::result<list_page>> list(list_request request) = 0;

    virtual storage_stats stats() const = 0;

    // The optional parts this store offers for `bucket` (this core's view), or nullptr.
    virtual version_store* versions_of(const std::string&) { return nullptr; }
    virtual record_updates* updates_of(const std::string&) { return nullptr; }
    virtual object_copier* copier_of(const std::string&) { return nullptr; }
    virtual upload_store* uploads_of(const std::string&) { return nullptr; }
    virtual ordered_puts* ordered_puts_of(const std::string&) { return nullptr; }
    virtual bucket_attributes* attributes_of(const std::string&) { return nullptr; }
    // The block interface of `bucket` when it is a KV bucket, else nullptr.
    virtual block_store* blocks_of(const std::string&) { return nullptr; }
    // Whether, and how, this store makes KV buckets.
    virtual kv_buckets* kv() { return nullptr; }
    // The store's view of its buckets when it can lag (nullptr: it never does).
    virtual bucket_catalog* lagging_catalog() { return nullptr; }
    const bucket_catalog* lagging_catalog() const {
        return const_cast<object_store*>(this)->lagging_catalog();
    }
};

}  // namespace fjord::store
