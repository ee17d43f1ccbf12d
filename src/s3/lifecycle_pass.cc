// Applying a bucket's lifecycle rules (lifecycle.h): the pass over every bucket that has them.
#include "s3/lifecycle.h"

#include <algorithm>
#include <set>

#include "base/clock.h"
#include "base/log.h"
#include "io/ops.h"
#include "io/reactor.h"

namespace fjord::s3 {

namespace {

// Paces the pass's deletes and aborts to options.actions_per_second.
class pacer {
public:
    explicit pacer(std::uint32_t per_second)
        : _per_second(std::max<std::uint32_t>(per_second, 1)) {}
    io::task<void> next() {
        const std::int64_t now = base::monotonic_now_ns() / 1'000'000;
        if (now - _window_ms >= 1000) {
            _window_ms = now;
            _used = 0;
        }
        if (_used == _per_second) {
            co_await io::sleep_for(std::max<std::int64_t>(1, 1000 - (now - _window_ms)));
            _window_ms = base::monotonic_now_ns() / 1'000'000;
            _used = 0;
        }
        ++_used;
    }

private:
    std::uint32_t _per_second;
    std::uint32_t _used = 0;
    std::int64_t _window_ms = 0;
};

struct pass_state {
    store::object_store& store;
    lifecycle_options options;
    std::int64_t now_s;
    pacer pace;
    lifecycle_pass_totals totals;
    // Stopping, or no longer the server that applies the rules
    bool stopping() const {
        return io::reactor::current().stopping() || (options.may_act && !options.may_act());
    }
    // Waits for the pace; false when the action must not be taken.
    io::task<bool> next_action() {
        co_await pace.next();
        co_return !stopping();
    }
    // Whether an action due `days` after `since_s` is due now (S3: at the next midnight UTC after).
    bool due(std::int64_t since_s, std::uint32_t days) const {
        const std::int64_t day = options.day_seconds;
        const std::int64_t at = since_s + static_cast<std::int64_t>(days) * day;
        return now_s >= (at + day - 1) / day * day;
    }
};

bool size_matches(const lifecycle_filter& f, std::uint64_t size) {
    return (!f.size_greater_than || size > *f.size_greater_than) &&
           (!f.size_less_than || size < *f.size_less_than);
}

// The tag filter, for a version whose tags must be looked up.
io::task<bool> tags_match(pass_state& st, const std::string& bucket, const lifecycle_filter& f,
                          const std::string& key, const std::string* version_id) {
    if (f.tags.empty()) co_return true;
    base::result<store::object_record> found = base::fail(base::errc::internal);
    store::version_store* versions = st.store.versions_of(bucket);
    if (version_id && versions)
        found = co_await versions->head_version(bucket, key, *version_id);
    else if (!version_id)
        found = co_await st.store.head(bucket, key);
    if (!found) co_return false;
    for (const auto& tag : f.tags)
        if (std::find(found->tags.begin(), found->tags.end(), tag) == found->tags.end())
            co_return false;
    co_return true;
}

io::task<void> expire_current(pass_state& st, const std::string& bucket, const std::string& key,
                              const std::string& etag) {
    if (!co_await st.next_action()) co_return;
    store::write_conditions unchanged;  // an object written since the listing is not this one
    unchanged.if_match_etag = etag;
    if (co_await st.store.remove(bucket, key, unchanged)) ++st.totals.expired;
}

// Every current object the rule's filter takes (keys, sizes and times), in key order.
io::task<std::vector<store::list_entry>> current_objects(pass_state& st, const std::string& bucket,
                                                         const lifecycle_rule& r) {
    std::vector<store::list_entry> out;
    store::list_request request;
    request.bucket = bucket;
    request.prefix = r.filter.prefix;
    for (;;) {
        auto page = co_await st.store.list(request);
        if (!page || st.stopping()) break;
        for (auto& e : page->entries)
            if (size_matches(r.filter, e.size_bytes) &&
                co_await tags_match(st, bucket, r.filter, e.name, nullptr))
                out.push_back(std::move(e));
        if (!page->truncated || page->entries.empty()) break;
        request.start_after = page->entries.back().name;
    }
    co_return out;
}

// Keep the newest N objects (or folders, with a delimiter) under the prefix; expire the others.
io::task<void> keep_newest(pass_state& st, const std::string& bucket, const lifecycle_rule& r,
                           const std::vector<store::list_entry>& objects) {
    const std::string& delimiter = r.keep_newest_delimiter;
    std::map<std::string, std::int64_t> newest;  // folder (or key) -> its newest object's time
    auto group_of = [&](const std::string& key) -> std::string {
        if (delimiter.empty()) return key;
        auto at = key.find(delimiter, r.filter.prefix.size());
        return at == std::string::npos ? std::string() : key.substr(0, at + delimiter.size());
    };
    for (const auto& e : objects) {
        std::string group = group_of(e.name);
        if (group.empty()) continue;  // not in a folder: this rule leaves it alone
        newest[group] = std::max(newest[group], e.modified_ms);
    }
    std::vector<std::pair<std::int64_t, std::string>> order;
    for (const auto& [group, ms] : newest) order.emplace_back(ms, group);
    std::sort(order.begin(), order.end(), std::greater<>());
    std::set<std::string> kept;
    for (std::size_t i = 0; i < order.size() && i < *r.keep_newest; ++i)
        kept.insert(order[i].second);
    for (const auto& e : objects) {
        std::string group = group_of(e.name);
        if (group.empty() || kept.count(group) || st.stopping()) continue;
        co_await expire_current(st, bucket, e.name, e.etag);
    }
}

io::task<void> apply_to_current(pass_state& st, const std::string& bucket,
                                const lifecycle_rule& r) {
    if (!r.expiration_days && !r.expiration_date_s && !r.keep_newest) co_return;
    auto objects = co_await current_objects(st, bucket, r);
    if (r.keep_newest) co_await keep_newest(st, bucket, r, objects);
    if (!r.expiration_days && !r.expiration_date_s) co_return;
    for (const auto& e : objects) {
        if (st.stopping()) break;
        const bool due = r.expiration_days ? st.due(e.modified_ms / 1000, *r.expiration_days)
                                           : st.now_s >= *r.expiration_date_s;
        if (due) co_await expire_current(st, bucket, e.name, e.etag);
    }
}

// One key's versions, newest first: noncurrent ones past their days (beyond the newest ones the rule
// keeps), and a delete marker that is the key's only version.
io::task<void> apply_to_key_versions(pass_state& st, const std::string& bucket,
                                     const lifecycle_rule& r,
                                     const std::vector<store::list_entry>& versions) {
    store::version_store* store = st.store.versions_of(bucket);
    if (versions.empty() || !store) co_return;
    if (r.expired_object_delete_marker && versions.size() == 1 && versions[0].delete_marker) {
        if (!co_await st.next_action()) co_return;
        if (co_await store->remove_version(bucket, versions[0].name, versions[0].version_id))
            ++st.totals.markers_removed;
    }
    if (!r.noncurrent_days) co_return;
    std::uint32_t noncurrent = 0;
    for (std::size_t i = 1; i < versions.size() && !st.stopping(); ++i) {
        const store::list_entry& v = versions[i];
        ++noncurrent;  // the newest noncurrent version is 1
        if (r.newer_noncurrent_versions && noncurrent <= *r.newer_noncurrent_versions) continue;
        // Noncurrent since the next newer version was made
        if (!st.due(versions[i - 1].modified_ms / 1000, *r.noncurrent_days)) continue;
        if (!v.delete_marker && !size_matches(r.filter, v.size_bytes)) continue;
        if (!co_await tags_match(st, bucket, r.filter, v.name, &v.version_id)) continue;
        if (!co_await st.next_action()) co_return;
        if (co_await store->remove_version(bucket, v.name, v.version_id))
            ++st.totals.noncurrent_removed;
    }
}

io::task<void> apply_to_versions(pass_state& st, const std::string& bucket,
                                 const lifecycle_rule& r) {
    store::version_store* store = st.store.versions_of(bucket);
    if ((!r.noncurrent_days && !r.expired_object_delete_marker) || !store) co_return;
    store::list_request request;
    request.bucket = bucket;
    request.prefix = r.filter.prefix;
    std::vector<store::list_entry> key_versions;  // the key being gathered (it may span pages)
    for (;;) {
        auto page = co_await store->list_versions(request);
        if (!page || st.stopping()) co_return;
        for (auto& e : page->entries) {
            if (!key_versions.empty() && key_versions.front().name != e.name) {
                co_await apply_to_key_versions(st, bucket, r, key_versions);
                key_versions.clear();
            }
            key_versions.push_back(std::move(e));
        }
        if (!page->truncated || key_versions.empty()) break;
        request.start_after = key_versions.back().name;
        request.version_id_marker = key_versions.back().version_id;
    }
    co_await apply_to_key_versions(st, bucket, r, key_versions);
}

io::task<void> abort_uploads(pass_state& st, const std::string& bucket, const lifecycle_rule& r) {
    store::upload_store* store = st.store.uploads_of(bucket);
    if (!r.abort_upload_days || !store) co_return;
    std::string key_marker, id_marker;
    for (;;) {
        auto uploads =
            co_await store->list_uploads(bucket, r.filter.prefix, key_marker, id_marker, 1000);
        if (!uploads || uploads->empty() || st.stopping()) co_return;
        for (const auto& u : *uploads) {
            if (!st.due(u.initiated_ms / 1000, *r.abort_upload_days)) continue;
            if (!co_await st.next_action()) co_return;
            if (co_await store->abort_upload(bucket, u.key, u.upload_id))
                ++st.totals.uploads_aborted;
        }
        if (uploads->size() <= 1000) co_return;
        key_marker = uploads->back().key;
        id_marker = uploads->back().upload_id;
    }
}

}  // namespace

io::task<lifecycle_pass_totals> run_lifecycle_pass(store::object_store& store,
                                                   lifecycle_options options, std::int64_t now_s) {
    pass_state st{store, options, now_s, pacer(options.actions_per_second), {}};
    for (const auto& bucket : store.list_buckets()) {
        auto it = bucket.attributes.find(lifecycle_attribute);
        if (it == bucket.attributes.end()) continue;
        auto config = parse_lifecycle(it->second);
        if (!config) {
            LOG_WARN("bucket %s: its lifecycle configuration no longer parses: %s",
                     bucket.name.c_str(), config.err().message.c_str());
            continue;
        }
        for (const auto& rule : config->rules) {
            if (!rule.enabled || st.stopping()) continue;
            co_await apply_to_current(st, bucket.name, rule);
            co_await apply_to_versions(st, bucket.name, rule);
            co_await abort_uploads(st, bucket.name, rule);
        }
    }
    co_return st.totals;
}

io::task<void> run_lifecycle(store::object_store& store, lifecycle_options options) {
    while (!io::reactor::current().stopping()) {
        co_await io::sleep_for(options.interval_s * 1000);
        if (io::reactor::current().stopping()) break;
        if (options.may_act && !options.may_act()) continue;
        auto t = co_await run_lifecycle_pass(store, options, base::unix_now_ms() / 1000);
        if (t.expired || t.noncurrent_removed || t.markers_removed || t.uploads_aborted)
            LOG_INFO(
                "lifecycle: %llu objects expired, %llu noncurrent versions and %llu delete "
                "markers removed, %llu uploads aborted",
                static_cast<unsigned long long>(t.expired),
                static_cast<unsigned long long>(t.noncurrent_removed),
                static_cast<unsigned long long>(t.markers_removed),
                static_cast<unsigned long long>(t.uploads_aborted));
    }
}

}  // namespace fjord::s3
