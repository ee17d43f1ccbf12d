#pragma once

// Private to the engine's .cc files: shard and per-core state, record types, the per-key lock.

#include <coroutine>
#include <deque>
#include <string>
#include <unordered_map>

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
    record_snapshot_end = 255,
};

// Waiters for a key whose commit is in progress, in arrival order.
struct key_lock_table {
    std::unordered_map<std::string, std::deque<std::coroutine_handle<>>> held;
};

struct engine::shard {
    unsigned id = 0;
    std::string dir;
    std::uint64_t generation = 1;
    std::map<std::string, std::map<std::string, object_record>> index;  // bucket -> key -> record
    std::unique_ptr<journal> log;
    key_lock_table locks;
    std::map<std::string, int> commits_in_flight;  // per bucket
    std::map<std::string, upload_record> uploads;  // by upload id
    std::uint64_t recovered_next_seq = 1;
    std::uint64_t recovered_offset = 0;
};

struct engine::core_state {
    std::unique_ptr<io::buffer_pool> pool;
    std::unique_ptr<write_scheduler> writes;  // this core's share of every drive's write budget
    std::unique_ptr<io::semaphore> copies;    // copies that read and rewrite data at once (see copy_admission)
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

inline io::task<void> lock_key(key_lock_table& table, std::string key) {
    auto it = table.held.find(key);
    if (it == table.held.end()) {
        table.held.emplace(std::move(key), std::deque<std::coroutine_handle<>>{});
        co_return;
    }
    co_await lock_awaiter{&it->second};  // ownership is handed over by unlock_key
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


// A shard whose journal could not cut back a failed batch may see that batch's changes reappear at the next
// start, so its in-memory state cannot vouch for any answer: every mutator checks this after taking its
// key lock (a commit that failed while it waited may have broken the journal) and answers this error.
inline base::result<void> journal_usable(const journal& log) {
    if (log.broken()) return base::fail(base::errc::io_error, "metadata journal failed; restart the server");
    return {};
}

// The per-key lock's name for (bucket, key).
std::string lock_name(const std::string& bucket, const std::string& key);
// Checks If-None-Match: * / If-Match against the current record (nullptr: no such key).
base::result<void> check_conditions(const object_record* existing, const write_conditions& c);

// Upload and part records in the journal.
void encode_part(encoder& e, const part_record& p);
bool decode_part(decoder& d, part_record& p);
void encode_upload_header(encoder& e, const upload_record& u);
bool decode_upload_header(decoder& d, upload_record& u);

}  // namespace fjord::store
