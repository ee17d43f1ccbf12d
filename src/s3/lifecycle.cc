#include "s3/lifecycle.h"

#include <pugixml.hpp>

#include <algorithm>
#include <ctime>
#include <map>
#include <set>

#include "base/clock.h"
#include "base/encoding.h"
#include "base/log.h"
#include "io/ops.h"
#include "io/reactor.h"
#include "s3/xml.h"

namespace fjord::s3 {

namespace {
constexpr std::size_t max_rules = 1000;

base::failure malformed(std::string what) {
    return base::fail(base::errc::malformed_xml,
                      "The XML you provided was not well-formed or did not validate against our "
                      "published schema (" +
                          std::move(what) + ")");
}

base::failure invalid(std::string what) {
    return base::fail(base::errc::invalid_argument, std::move(what));
}

// A positive whole number of days (or versions, with zero allowed).
base::result<std::uint32_t> count_of(const pugi::xml_node& parent, const char* name,
                                     bool zero_allowed) {
    auto n = base::parse_u64(std::string(base::trim(xml_child_text(parent, name))));
    if (!n || *n > 1000000 || (*n == 0 && !zero_allowed))
        return invalid(std::string("'") + name + "' must be a positive integer");
    return static_cast<std::uint32_t>(*n);
}

// "2027-01-01T00:00:00Z" (fractions allowed, all zero): S3 takes only midnight UTC.
base::result<std::int64_t> midnight_of(std::string_view text) {
    std::tm tm{};
    char rest[32] = {0};
    std::string s(base::trim(text));
    if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%31s", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                    &tm.tm_hour, &tm.tm_min, &tm.tm_sec, rest) < 6)
        return invalid("'Date' must be in ISO 8601 format");
    std::string tail = rest;
    if (tm.tm_hour || tm.tm_min || tm.tm_sec ||
        (tail != "Z" && tail != ".000Z" && tail != "+00:00" && !tail.empty()))
        return invalid("'Date' must be at midnight GMT");
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return static_cast<std::int64_t>(timegm(&tm));
}

base::result<void> parse_tag(const pugi::xml_node& tag, lifecycle_filter& f) {
    std::string key = xml_child_text(tag, "Key");
    if (key.empty()) return malformed("a Tag without a Key");
    f.tags.emplace_back(std::move(key), xml_child_text(tag, "Value"));
    return {};
}

base::result<void> parse_sizes(const pugi::xml_node& node, lifecycle_filter& f) {
    for (const char* name : {"ObjectSizeGreaterThan", "ObjectSizeLessThan"}) {
        if (!node.child(name)) continue;
        auto n = base::parse_u64(std::string(base::trim(xml_child_text(node, name))));
        if (!n) return invalid(std::string("'") + name + "' must be a whole number of bytes");
        (std::string_view(name) == "ObjectSizeLessThan" ? f.size_less_than : f.size_greater_than) =
            *n;
    }
    return {};
}

base::result<lifecycle_filter> parse_filter(const pugi::xml_node& rule) {
    lifecycle_filter f;
    pugi::xml_node filter = rule.child("Filter");
    if (rule.child("Prefix")) {
        if (filter) return malformed("a Rule with both Prefix and Filter");
        f.prefix = xml_child_text(rule, "Prefix");
        f.legacy_prefix = true;
        return f;
    }
    if (!filter) return f;  // every object (S3 takes a rule without a filter as an empty one)
    int parts = 0;
    for (pugi::xml_node child : filter.children()) parts += child.type() == pugi::node_element;
    if (parts > 1) return malformed("a Filter may hold one of Prefix, Tag, And and object sizes");
    f.prefix = xml_child_text(filter, "Prefix");
    if (pugi::xml_node tag = filter.child("Tag")) FJORD_TRY(parse_tag(tag, f));
    FJORD_TRY(parse_sizes(filter, f));
    if (pugi::xml_node both = filter.child("And")) {
        f.prefix = xml_child_text(both, "Prefix");
        for (pugi::xml_node tag : both.children("Tag")) FJORD_TRY(parse_tag(tag, f));
        FJORD_TRY(parse_sizes(both, f));
    }
    return f;
}

base::result<void> parse_expiration(const pugi::xml_node& e, lifecycle_rule& r) {
    const bool days = bool(e.child("Days")), date = bool(e.child("Date"));
    const bool marker = bool(e.child("ExpiredObjectDeleteMarker"));
    if (days + date + marker != 1)
        return malformed("an Expiration holds one of Days, Date and ExpiredObjectDeleteMarker");
    if (days) {
        auto n = count_of(e, "Days", false);
        if (!n) return n.as_failure();
        r.expiration_days = *n;
    } else if (date) {
        auto at = midnight_of(xml_child_text(e, "Date"));
        if (!at) return at.as_failure();
        r.expiration_date_s = *at;
    } else {
        std::string text(base::trim(xml_child_text(e, "ExpiredObjectDeleteMarker")));
        if (text != "true" && text != "false")
            return malformed("ExpiredObjectDeleteMarker is true or false");
        r.expired_object_delete_marker = text == "true";
    }
    return {};
}

base::result<void> parse_actions(const pugi::xml_node& rule, lifecycle_rule& r) {
    if (rule.child("Transition") || rule.child("NoncurrentVersionTransition"))
        return base::fail(base::errc::not_implemented,
                          "Fjord has one storage class: transitions are not supported");
    if (pugi::xml_node e = rule.child("Expiration")) FJORD_TRY(parse_expiration(e, r));
    if (pugi::xml_node n = rule.child("NoncurrentVersionExpiration")) {
        auto days = count_of(n, "NoncurrentDays", false);
        if (!days) return days.as_failure();
        r.noncurrent_days = *days;
        if (n.child("NewerNoncurrentVersions")) {
            auto newer = count_of(n, "NewerNoncurrentVersions", false);
            if (!newer) return newer.as_failure();
            r.newer_noncurrent_versions = *newer;
        }
    }
    if (pugi::xml_node a = rule.child("AbortIncompleteMultipartUpload")) {
        auto days = count_of(a, "DaysAfterInitiation", false);
        if (!days) return days.as_failure();
        r.abort_upload_days = *days;
    }
    if (pugi::xml_node k = rule.child("FjordKeepNewest")) {
        auto count = count_of(k, "Count", false);
        if (!count) return count.as_failure();
        r.keep_newest = *count;
        r.keep_newest_delimiter = xml_child_text(k, "Delimiter");
    }
    if (!r.expiration_days && !r.expiration_date_s && !r.expired_object_delete_marker &&
        !r.noncurrent_days && !r.abort_upload_days && !r.keep_newest && !rule.child("Expiration"))
        return base::fail(base::errc::invalid_request,
                          "At least one action needs to be specified in a rule");
    return {};
}

base::result<lifecycle_rule> parse_rule(const pugi::xml_node& rule) {
    lifecycle_rule r;
    r.id = xml_child_text(rule, "ID");
    if (r.id.size() > 255) return invalid("ID length should not exceed allowed limit of 255");
    std::string status(base::trim(xml_child_text(rule, "Status")));
    if (status != "Enabled" && status != "Disabled")
        return malformed("Status is Enabled or Disabled");
    r.enabled = status == "Enabled";
    auto filter = parse_filter(rule);
    if (!filter) return filter.as_failure();
    r.filter = std::move(*filter);
    FJORD_TRY(parse_actions(rule, r));
    if ((r.expired_object_delete_marker || r.abort_upload_days) && !r.filter.tags.empty())
        return invalid(
            "ExpiredObjectDeleteMarker and AbortIncompleteMultipartUpload cannot be "
            "combined with a tag filter");
    return r;
}

void filter_xml(xml_writer& x, const lifecycle_filter& f) {
    if (f.legacy_prefix) {
        x.element("Prefix", f.prefix);
        return;
    }
    x.open("Filter");
    const int parts = !f.prefix.empty() + static_cast<int>(f.tags.size()) +
                      f.size_greater_than.has_value() + f.size_less_than.has_value();
    if (parts > 1) x.open("And");
    if (!f.prefix.empty() || parts == 0) x.element("Prefix", f.prefix);
    for (const auto& [key, value] : f.tags)
        x.open("Tag").element("Key", key).element("Value", value).close("Tag");
    if (f.size_greater_than) x.element("ObjectSizeGreaterThan", *f.size_greater_than);
    if (f.size_less_than) x.element("ObjectSizeLessThan", *f.size_less_than);
    if (parts > 1) x.close("And");
    x.close("Filter");
}

void actions_xml(xml_writer& x, const lifecycle_rule& r) {
    if (r.expiration_days || r.expiration_date_s || r.expired_object_delete_marker) {
        x.open("Expiration");
        if (r.expiration_days) x.element("Days", *r.expiration_days);
        if (r.expiration_date_s)
            x.element("Date", base::format_iso8601_ms(*r.expiration_date_s * 1000));
        if (r.expired_object_delete_marker) x.element_bool("ExpiredObjectDeleteMarker", true);
        x.close("Expiration");
    }
    if (r.noncurrent_days) {
        x.open("NoncurrentVersionExpiration").element("NoncurrentDays", *r.noncurrent_days);
        if (r.newer_noncurrent_versions)
            x.element("NewerNoncurrentVersions", *r.newer_noncurrent_versions);
        x.close("NoncurrentVersionExpiration");
    }
    if (r.abort_upload_days)
        x.open("AbortIncompleteMultipartUpload")
            .element("DaysAfterInitiation", *r.abort_upload_days)
            .close("AbortIncompleteMultipartUpload");
    if (r.keep_newest) {
        x.open("FjordKeepNewest").element("Count", *r.keep_newest);
        if (!r.keep_newest_delimiter.empty()) x.element("Delimiter", r.keep_newest_delimiter);
        x.close("FjordKeepNewest");
    }
}
}  // namespace

base::result<lifecycle_configuration> parse_lifecycle(std::string_view body) {
    pugi::xml_document doc;
    FJORD_TRY(load_request_xml(doc, body));
    pugi::xml_node root = doc.child("LifecycleConfiguration");
    if (!root) return malformed("expected a LifecycleConfiguration document");
    lifecycle_configuration config;
    std::set<std::string> ids;
    for (pugi::xml_node node : root.children("Rule")) {
        if (config.rules.size() == max_rules) return invalid("at most 1000 rules");
        auto rule = parse_rule(node);
        if (!rule) return rule.as_failure();
        if (!rule->id.empty() && !ids.insert(rule->id).second)
            return invalid("Rule ID must be unique. Found same ID for more than one rule");
        config.rules.push_back(std::move(*rule));
    }
    if (config.rules.empty()) return malformed("a LifecycleConfiguration holds at least one Rule");
    return config;
}

std::string lifecycle_xml(const lifecycle_configuration& config) {
    xml_writer x;
    x.open("LifecycleConfiguration", s3_xmlns);
    for (const auto& r : config.rules) {
        x.open("Rule");
        if (!r.id.empty()) x.element("ID", r.id);
        filter_xml(x, r.filter);
        x.element("Status", r.enabled ? "Enabled" : "Disabled");
        actions_xml(x, r);
        x.close("Rule");
    }
    x.close("LifecycleConfiguration");
    return x.take();
}

// ---- applying the rules ----

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
    bool stopping() const { return io::reactor::current().stopping(); }
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
    co_await st.pace.next();
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
        co_await st.pace.next();
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
        co_await st.pace.next();
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
            co_await st.pace.next();
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
