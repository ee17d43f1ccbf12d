#pragma once

// Private to the engine's .cc files: shard and per-core state, record types, the per-key lock.

#include <atomic>
#include <coroutine>
#include <deque>
#include <string>
#include <unordered_map>
#include <utility>

#include "io/reactor.h"
#include "io/task.h"
#include "store/engine.h"

namespace fjord::store {

enum record_type : std::uint8_t {
    record_put_object = 1,
    record_delete_object = 2,
    record_create_bucket = 3,
    record_delete_bucket = 4,
    record_create_upload = 5,
    record_put_part = 6,
    record_complete_upload = 7,
    record_abort_upload = 8,
    record_bucket_attribute =
        9,  // bucket, name, present (u8), value: shard 0, like the bucket records
    record_delete_version = 10,  // bucket, key, version id: removes that version of the key
    record_edit_version = 11,    // bucket, key, record: replaces the version it names, in place
    record_snapshot_end = 255,
};

// Waiters for a key whose commit is in progress, in arrival order.
// A shard's key locks: the keys held, each with its waiters in arrival order. The waiters are bounded by
// the requests in flight on the shard's core (each waits for one key at a time), which the connection
// limit bounds; how many waited, and the longest line, are counted for /metrics (any core reads them).
struct key_lock_table {
    std::unordered_map<std::string, std::deque<std::coroutine_handle<>>> held;
    std::atomic<std::uint64_t> waits{0};
    std::atomic<std::uint64_t> peak_waiters{0};
};

// Part commits of one upload run side by side (their journal records share group commits), but never
// while its completion or abort decides which parts the object keeps: a closer waits until the parts
// being committed are durable, and parts that arrive meanwhile wait until it is done. (Otherwise a
// completion could build the object from part N's old data while a newer upload of part N became
// durable first, and the old data would be reclaimed as "replaced" while the object used it.)
struct upload_gate {
    unsigned parts_in_flight = 0;
    bool closing =
        false;  // a completion or abort holds the upload: at most one, under the key lock
    std::coroutine_handle<> closer;  // waiting for parts_in_flight to reach zero
    std::deque<std::coroutine_handle<>> parts_waiting;
};
using upload_gates =
    std::unordered_map<std::string, upload_gate>;  // by upload id; idle gates are erased

// A shard's keys: the current version of each (possibly a delete marker) in `key_index`, older ones of a
// versioned bucket in `key_history`, oldest first. A key with older versions always has a current one.
using key_index = std::map<std::string, std::map<std::string, object_record>>;  // bucket -> key
using key_history = std::map<std::string, std::map<std::string, std::vector<object_record>>>;

// The one rule by which a write changes a key's versions, live and in recovery alike: `record` becomes
// the current version; the version with its id (the null version for "") is replaced wherever it is,
// and the previous current version, when it has another id, becomes the newest noncurrent one. Returns
// the replaced version (its data is the caller's to reclaim). In a bucket that never had versioning
// every version is the null one, so this is a plain replacement.
std::optional<object_record> apply_put(key_index& index, key_history& history,
                                       const std::string& bucket, const std::string& key,
                                       object_record record);
// Removes one version (nullptr: the current one); when that was the current one, the newest noncurrent
// version becomes current. Returns the removed version, nullopt when there was none.
std::optional<object_record> apply_remove(key_index& index, key_history& history,
                                          const std::string& bucket, const std::string& key,
                                          const std::string* version_id);
// Replaces, in place, the version `record` names; false when there is none.
bool apply_edit(key_index& index, key_history& history, const std::string& bucket,
                const std::string& key, object_record record);
// The version named (nullptr: the current one, a delete marker included), or nullptr.
object_record* find_version(key_index& index, key_history& history, const std::string& bucket,
                            const std::string& key, const std::string* version_id);

struct engine::shard {
    unsigned id = 0;
    std::string dir;
    std::uint64_t generation = 1;
    key_index index;
    key_history history;
    std::unique_ptr<journal> log;
    key_lock_table locks;
    std::map<std::string, int> commits_in_flight;  // per bucket
    std::map<std::string, upload_record> uploads;  // by upload id
    upload_gates gates;
    std::uint64_t recovered_next_seq = 1;
    std::uint64_t recovered_offset = 0;
};

struct engine::core_state {
    std::unique_ptr<io::buffer_pool> pool;
    std::unique_ptr<write_scheduler> writes;  // this core's share of every drive's write budget
    // Copies that read and rewrite data at once (see copy_admission)
    std::unique_ptr<io::semaphore> copies;
    std::map<std::string, bucket_info> buckets;
    std::set<std::string> closing;  // buckets being deleted: no new commits
    std::uint64_t next_id = 1;
};

struct lock_awaiter {
    std::deque<std::coroutine_handle<>>* queue;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) { queue->push_back(h); }
    void await_resume() const noexcept {}
};

void unlock_key(key_lock_table& table, const std::string& key);

// A held key lock, released when the guard is destroyed (or at release(), where the order of release
// matters): an early return cannot leave a key locked.
class key_guard {
public:
    key_guard(key_lock_table& table, std::string key) : _table(&table), _key(std::move(key)) {}
    key_guard(key_guard&& other) noexcept
        : _table(std::exchange(other._table, nullptr)), _key(std::move(other._key)) {}
    key_guard& operator=(key_guard&&) = delete;
    key_guard(const key_guard&) = delete;
    key_guard& operator=(const key_guard&) = delete;
    ~key_guard() { release(); }
    void release() {
        if (_table) unlock_key(*std::exchange(_table, nullptr), _key);
    }

private:
    key_lock_table* _table;
    std::string _key;
};

// Waits for the key's lock (FIFO among waiters) and holds it until the guard goes.
inline io::task<key_guard> lock_key(key_lock_table& table, std::string key) {
    auto it = table.held.find(key);
    if (it == table.held.end()) {
        table.held.emplace(key, std::deque<std::coroutine_handle<>>{});
        co_return key_guard(table, std::move(key));
    }
    table.waits.fetch_add(1, std::memory_order_relaxed);
    if (it->second.size() + 1 > table.peak_waiters.load(std::memory_order_relaxed))
        table.peak_waiters.store(it->second.size() + 1,
                                 std::memory_order_relaxed);  // owner core only
    co_await lock_awaiter{&it->second};  // ownership is handed over by unlock_key
    co_return key_guard(table, std::move(key));
}

inline void unlock_key(key_lock_table& table, const std::string& key) {
    auto it = table.held.find(key);
    FJORD_ASSERT(it != table.held.end());
    if (it->second.empty()) {
        table.held.erase(it);
        return;
    }
    auto next = it->second.front();
    it->second.pop_front();
    io::reactor::current().schedule(next);
}

struct handle_awaiter {
    std::coroutine_handle<>* slot;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) noexcept { *slot = h; }
    void await_resume() const noexcept {}
};

// A part commit enters the gate of its upload, waiting while a completion or abort holds it.
inline io::task<void> enter_part(upload_gates& gates, std::string upload_id) {
    for (;;) {
        upload_gate& g =
            gates[upload_id];  // looked up again after each wait: an idle gate may be erased
        if (!g.closing) {
            ++g.parts_in_flight;
            co_return;
        }
        co_await lock_awaiter{&g.parts_waiting};
    }
}

inline void erase_if_idle(upload_gates& gates, upload_gates::iterator it) {
    const upload_gate& g = it->second;
    if (g.parts_in_flight == 0 && !g.closing && g.parts_waiting.empty()) gates.erase(it);
}

inline void leave_part(upload_gates& gates, const std::string& upload_id) {
    auto it = gates.find(upload_id);
    FJORD_ASSERT(it != gates.end() && it->second.parts_in_flight > 0);
    upload_gate& g = it->second;
    if (--g.parts_in_flight == 0 && g.closer)
        io::reactor::current().schedule(std::exchange(g.closer, nullptr));
    erase_if_idle(gates, it);
}

// A completion or abort (holding the key lock) takes the upload: returns once no part commit is in flight.
inline io::task<void> enter_close(upload_gates& gates, std::string upload_id) {
    upload_gate& g = gates[upload_id];  // not erased while closing
    FJORD_ASSERT(!g.closing, "two closers of one upload: they must hold the key lock");
    g.closing = true;
    if (g.parts_in_flight > 0) co_await handle_awaiter{&g.closer};
}

inline void leave_close(upload_gates& gates, const std::string& upload_id) {
    auto it = gates.find(upload_id);
    FJORD_ASSERT(it != gates.end() && it->second.closing);
    upload_gate& g = it->second;
    g.closing = false;
    for (auto h : std::exchange(g.parts_waiting, {})) io::reactor::current().schedule(h);
    erase_if_idle(gates, it);
}

// A shard whose journal could not cut back a failed batch may see that batch's changes reappear at the next
// start, so its in-memory state cannot vouch for any answer: every mutator checks this after taking its
// key lock (a commit that failed while it waited may have broken the journal) and answers this error.
inline base::result<void> journal_usable(const journal& log) {
    if (log.broken())
        return base::fail(base::errc::io_error, "metadata journal failed; restart the server");
    return {};
}

// The smallest string greater than every string starting with `prefix` (empty: none).
std::string prefix_successor(std::string prefix);
// With a delimiter, a key (at `it`) that holds one past the prefix is under a common prefix: that prefix
// goes to `out` (unless at or before start_after: an earlier page had it) and `it` moves past every key
// under it. False when the key is under none.
bool fold_common_prefix(const std::map<std::string, object_record>& keys,
                        std::map<std::string, object_record>::const_iterator& it,
                        const list_request& req, std::vector<list_entry>& out);
// A shard's versions of a bucket's keys (history: its older versions, or null) into `out`, newest first
// within a key, from the request's markers on, at most `limit` entries.
void list_shard_versions(const std::map<std::string, object_record>& keys,
                         const std::map<std::string, std::vector<object_record>>* history,
                         const list_request& req, std::size_t limit, std::vector<list_entry>& out);
// The cores' listings merged: sorted by name (a key's versions keep their order), common prefixes
// once, at most max_keys (truncated set when there were more).
list_page merge_listing(std::vector<list_entry> all, std::uint32_t max_keys);

// The key lock that orders a bucket's create, delete and attribute changes on shard 0 (engine_buckets.cc).
std::string bucket_lock_name(const std::string& bucket);
// A record_bucket_attribute's payload: the attribute's new value, or (value null) its removal.
std::string bucket_attribute_payload(const std::string& bucket, const std::string& name,
                                     const std::string* value);
// A snapshot file's header, and the last_seq and record offset parsed back from an image (nullopt when
// damaged); the name of a shard's journal or snapshot of a generation (engine_snapshots.cc).
std::string snapshot_header(std::uint64_t last_seq);
std::optional<std::pair<std::uint64_t, std::size_t>> parse_snapshot_header(
    const std::string& image);
std::string gen_name(const char* kind, std::uint64_t gen, const char* ext);

// The per-key lock's name for (bucket, key).
std::string lock_name(const std::string& bucket, const std::string& key);
// Checks If-None-Match: * / If-Match against the current record (nullptr: no such key), and an
// ordered write's bound (write_order::etag_below).
base::result<void> check_conditions(const object_record* existing, const write_conditions& c,
                                    const std::optional<std::string>& etag_below = std::nullopt);

// Upload and part records in the journal.
void encode_part(encoder& e, const part_record& p);
bool decode_part(decoder& d, part_record& p);
void encode_upload_header(encoder& e, const upload_record& u);
bool decode_upload_header(decoder& d, upload_record& u);

}  // namespace fjord::store
