// Versions of a key (object_store.h, "Versioning"): the rule every write and removal follows on a shard's
// index and history, lookups of one version, removal of one version, and the listing of all of them.

#include <algorithm>

#include "io/cross_core.h"
#include "store/engine.h"
#include "store/engine_internal.h"

namespace fjord::store {

namespace {
std::vector<object_record>* older_versions(key_history& history, const std::string& bucket,
                                           const std::string& key) {
    auto b = history.find(bucket);
    if (b == history.end()) return nullptr;
    auto k = b->second.find(key);
    return k == b->second.end() ? nullptr : &k->second;
}

void forget_if_empty(key_history& history, const std::string& bucket, const std::string& key) {
    auto b = history.find(bucket);
    if (b == history.end()) return;
    auto k = b->second.find(key);
    if (k != b->second.end() && k->second.empty()) b->second.erase(k);
    if (b->second.empty()) history.erase(b);
}

std::optional<object_record> take_older(std::vector<object_record>* older,
                                        const std::string& version_id) {
    if (!older) return std::nullopt;
    auto it = std::find_if(older->begin(), older->end(),
                           [&](const object_record& r) { return r.version_id == version_id; });
    if (it == older->end()) return std::nullopt;
    object_record taken = std::move(*it);
    older->erase(it);
    return taken;
}
}  // namespace

std::optional<object_record> apply_put(key_index& index, key_history& history,
                                       const std::string& bucket, const std::string& key,
                                       object_record record) {
    std::optional<object_record> replaced;
    auto& keys = index[bucket];
    auto current = keys.find(key);
    if (current == keys.end()) {
        keys.emplace(key, std::move(record));
        return replaced;  // no current version, so no older ones either
    }
    if (current->second.version_id == record.version_id) {
        replaced = std::move(current->second);
    } else {
        auto& older = history[bucket][key];
        replaced = take_older(&older, record.version_id);
        older.push_back(std::move(current->second));
    }
    current->second = std::move(record);
    return replaced;
}

std::optional<object_record> apply_remove(key_index& index, key_history& history,
                                          const std::string& bucket, const std::string& key,
                                          const std::string* version_id) {
    auto b = index.find(bucket);
    if (b == index.end()) return std::nullopt;
    auto current = b->second.find(key);
    if (current == b->second.end()) return std::nullopt;
    std::vector<object_record>* older = older_versions(history, bucket, key);
    std::optional<object_record> removed;
    if (version_id && current->second.version_id != *version_id) {
        removed = take_older(older, *version_id);
    } else {
        removed = std::move(current->second);
        if (older && !older->empty()) {
            current->second = std::move(older->back());
            older->pop_back();
        } else {
            b->second.erase(current);
            if (b->second.empty()) index.erase(b);
        }
    }
    forget_if_empty(history, bucket, key);
    return removed;
}

object_record* find_version(key_index& index, key_history& history, const std::string& bucket,
                            const std::string& key, const std::string* version_id) {
    auto b = index.find(bucket);
    if (b == index.end()) return nullptr;
    auto current = b->second.find(key);
    if (current == b->second.end()) return nullptr;
    if (!version_id || current->second.version_id == *version_id) return &current->second;
    std::vector<object_record>* older = older_versions(history, bucket, key);
    if (!older) return nullptr;
    for (auto& r : *older)
        if (r.version_id == *version_id) return &r;
    return nullptr;
}

bool apply_edit(key_index& index, key_history& history, const std::string& bucket,
                const std::string& key, object_record record) {
    object_record* slot = find_version(index, history, bucket, key, &record.version_id);
    if (!slot) return false;
    *slot = std::move(record);
    return true;
}

engine::versioning_state engine::versioning_of(const std::string& bucket) const {
    auto it = local().buckets.find(bucket);
    if (it == local().buckets.end()) return versioning_state::never;
    auto v = it->second.attributes.find(versioning_attribute);
    if (v == it->second.attributes.end()) return versioning_state::never;
    return v->second == "Enabled" ? versioning_state::enabled : versioning_state::suspended;
}

std::string engine::version_for_write(const std::string& bucket) {
    return versioning_of(bucket) == versioning_state::enabled ? new_object_id().hex()
                                                              : std::string();
}

// ---- one version ----

io::task<base::result<object_record>> engine::find(std::string bucket, std::string key,
                                                   std::optional<std::string> version_id) {
    unsigned shard_id = shard_of(bucket, key);
    auto call = [=, this] { return shard_find(shard_id, bucket, key, version_id); };
    co_return co_await io::invoke_on(owner_of(shard_id), std::move(call));
}

io::task<base::result<object_record>> engine::shard_find(unsigned shard_id, std::string bucket,
                                                         std::string key,
                                                         std::optional<std::string> version_id) {
    if (!bucket_exists(bucket)) co_return base::fail(base::errc::no_such_bucket, "no such bucket");
    shard& s = *_shards[shard_id];
    const object_record* found =
        find_version(s.index, s.history, bucket, key, version_id ? &*version_id : nullptr);
    if (!version_id) {
        if (found && !found->delete_marker) co_return *found;
        co_return base::fail(base::errc::no_such_key, "no such key");
    }
    if (!found)
        co_return base::fail(base::errc::no_such_version, "the specified version does not exist");
    if (found->delete_marker)
        co_return base::fail(base::errc::method_not_allowed,
                             "the specified version is a delete marker");
    co_return *found;
}

io::task<base::result<object_record>> engine::head_version(std::string bucket, std::string key,
                                                           std::string version_id) {
    co_return co_await find(std::move(bucket), std::move(key), std::move(version_id));
}

io::task<base::result<object_record>> engine::get_version(std::string bucket, std::string key,
                                                          std::string version_id, read_planner plan,
                                                          byte_sink& sink) {
    co_return co_await read(std::move(bucket), std::move(key), std::move(version_id),
                            std::move(plan), sink);
}

io::task<base::result<object_record>> engine::update_version(std::string bucket, std::string key,
                                                             std::string version_id,
                                                             record_editor editor) {
    co_return co_await edit(std::move(bucket), std::move(key), std::move(version_id),
                            std::move(editor), {});
}

io::task<base::result<std::optional<object_record>>> engine::remove_version(
    std::string bucket, std::string key, std::string version_id) {
    auto removed = co_await commit_remove_version(bucket, key, version_id);
    if (!removed)
        co_await free_space_after(removed.err());
    else if (*removed)
        co_await reclaim(**removed);
    co_return removed;
}

io::task<base::result<std::optional<object_record>>> engine::commit_remove_version(
    std::string bucket, std::string key, std::string version_id) {
    unsigned shard_id = shard_of(bucket, key);
    auto call = [=, this] { return shard_remove_version(shard_id, bucket, key, version_id); };
    co_return co_await io::invoke_on(owner_of(shard_id), std::move(call));
}

io::task<base::result<std::optional<object_record>>> engine::shard_remove_version(
    unsigned shard_id, std::string bucket, std::string key, std::string version_id) {
    shard& s = *_shards[shard_id];
    if (!bucket_exists(bucket)) co_return base::fail(base::errc::no_such_bucket, "no such bucket");
    std::string lock = lock_name(bucket, key);
    key_guard held = co_await lock_key(s.locks, lock);
    std::optional<object_record> removed;
    base::result<void> outcome = journal_usable(*s.log);
    if (outcome && find_version(s.index, s.history, bucket, key, &version_id)) {
        std::string payload;
        encoder e(payload);
        e.str(bucket);
        e.str(key);
        e.str(version_id);
        outcome = co_await s.log->append(record_delete_version, std::move(payload), {}, [&] {
            removed = apply_remove(s.index, s.history, bucket, key, &version_id);
        });
    }
    held.release();
    if (!outcome) co_return outcome.as_failure();
    co_return removed;
}

// ---- listing every version ----

namespace {
void add_version(const std::string& key, const object_record& r, bool latest,
                 std::vector<list_entry>& out) {
    list_entry e;
    e.name = key;
    e.size_bytes = r.size_bytes;
    e.etag = r.etag;
    e.modified_ms = r.modified_ms;
    e.version_id = r.version_id;
    e.is_latest = latest;
    e.delete_marker = r.delete_marker;
    out.push_back(std::move(e));
}

// A key's versions, newest first, into `out` (skipping those up to `after` when set).
void add_versions(const std::string& key, const object_record& current,
                  const std::vector<object_record>* older, const std::string* after,
                  std::size_t limit, std::vector<list_entry>& out) {
    bool skipping = after != nullptr;
    auto visit = [&](const object_record& r, bool latest) {
        if (!skipping && out.size() < limit) add_version(key, r, latest, out);
        if (skipping && r.version_id == *after) skipping = false;
    };
    visit(current, true);
    if (older)
        for (auto it = older->rbegin(); it != older->rend(); ++it) visit(*it, false);
}

}  // namespace

void list_shard_versions(const std::map<std::string, object_record>& keys,
                         const std::map<std::string, std::vector<object_record>>* history,
                         const list_request& req, std::size_t limit, std::vector<list_entry>& out) {
    const std::string& start = req.start_after;
    const bool within_start = !start.empty() && req.version_id_marker.has_value();
    auto it = start.empty() || start < req.prefix ? keys.lower_bound(req.prefix)
              : within_start                      ? keys.lower_bound(start)
                                                  : keys.upper_bound(start);
    while (it != keys.end() && out.size() < limit) {
        const std::string& key = it->first;
        if (!key.starts_with(req.prefix)) break;
        if (fold_common_prefix(keys, it, req, out)) continue;
        const std::vector<object_record>* older = nullptr;
        if (history)
            if (auto h = history->find(key); h != history->end()) older = &h->second;
        const std::string* after = within_start && key == start ? &*req.version_id_marker : nullptr;
        add_versions(key, it->second, older, after, limit, out);
        ++it;
    }
}

io::task<base::result<list_page>> engine::list_versions(list_request request) {
    co_return co_await list_all(std::move(request), true);
}

}  // namespace fjord::store
