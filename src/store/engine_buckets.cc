// Buckets: created, deleted and changed on core 0 (which owns shard 0 and its journal), then published
// to every core.
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
    key_guard held =
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
    held.release();
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
    key_guard held = co_await lock_key(s0.locks, lock);
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
    held.release();
    co_return outcome;
}

io::task<base::result<void>> engine::core0_delete_bucket(std::string name) {
    shard& s0 = *_shards[0];
    std::string lock = bucket_lock_name(name);
    key_guard held = co_await lock_key(s0.locks, lock);
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
    held.release();
    co_return outcome;
}

}  // namespace fjord::store
