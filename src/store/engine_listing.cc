// Listings: each core lists its shards, and the pages are merged.
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

bool fold_common_prefix(const std::map<std::string, object_record>& keys,
                        std::map<std::string, object_record>::const_iterator& it,
                        const list_request& req, std::vector<list_entry>& out) {
    if (req.delimiter.empty()) return false;
    const std::string& key = it->first;
    auto pos = key.find(req.delimiter, req.prefix.size());
    if (pos == std::string::npos) return false;
    std::string common = key.substr(0, pos + req.delimiter.size());
    // A common prefix at or before the marker was returned on an earlier page.
    if (common > req.start_after) {
        list_entry e;
        e.name = common;
        e.is_prefix = true;
        out.push_back(std::move(e));
    }
    std::string next = prefix_successor(common);
    it = next.empty() ? keys.end() : keys.lower_bound(next);
    return true;
}

namespace {
// Lists one shard's keys of a bucket into `out` (at most `limit` entries, sorted).
void list_shard(const std::map<std::string, object_record>& keys, const list_request& req,
                std::size_t limit, std::vector<list_entry>& out) {
    const std::string& start = req.start_after;
    auto it = start.empty() || start < req.prefix ? keys.lower_bound(req.prefix)
                                                  : keys.upper_bound(start);
    while (it != keys.end() && out.size() < limit) {
        const std::string& key = it->first;
        if (!key.starts_with(req.prefix)) break;
        if (it->second
                .delete_marker) {  // deleted: neither listed nor the reason for a common prefix
            ++it;
            continue;
        }
        if (fold_common_prefix(keys, it, req, out)) continue;
        list_entry e;
        e.name = key;
        e.size_bytes = it->second.size_bytes;
        e.etag = it->second.etag;
        e.modified_ms = it->second.modified_ms;
        out.push_back(std::move(e));
        ++it;
    }
}
}  // namespace

io::task<base::result<list_page>> engine::core_list(list_request request, bool versions) {
    if (!bucket_exists(request.bucket))
        co_return base::fail(base::errc::no_such_bucket, "no such bucket");
    unsigned core = io::reactor::current().core();
    std::size_t limit = static_cast<std::size_t>(request.max_keys) + 1;
    list_page page;
    for (auto& s : _shards) {
        if (owner_of(s->id) != core) continue;
        auto it = s->index.find(request.bucket);
        if (it == s->index.end()) continue;
        // Each shard up to the limit on its own (a core may own several: the shard count is the
        // first start's core count); the merge keeps the first max_keys of them all.
        std::vector<list_entry> part;
        if (versions) {
            auto h = s->history.find(request.bucket);
            list_shard_versions(it->second, h == s->history.end() ? nullptr : &h->second, request,
                                limit, part);
        } else {
            list_shard(it->second, request, limit, part);
        }
        for (auto& e : part) page.entries.push_back(std::move(e));
    }
    co_return page;
}

io::task<base::result<list_page>> engine::list(list_request request) {
    co_return co_await list_all(std::move(request), false);
}

io::task<base::result<list_page>> engine::list_all(list_request request, bool versions) {
    std::vector<list_entry> all;
    for (unsigned c = 0; c < _options.cores; ++c) {
        auto call = [=, this] { return core_list(request, versions); };
        auto part = co_await io::invoke_on(c, std::move(call));
        if (!part) co_return part.as_failure();
        for (auto& e : part->entries) all.push_back(std::move(e));
    }
    co_return merge_listing(std::move(all), request.max_keys);
}

list_page merge_listing(std::vector<list_entry> all, std::uint32_t max_keys) {
    std::stable_sort(all.begin(), all.end(),
                     [](const list_entry& a, const list_entry& b) { return a.name < b.name; });
    all.erase(std::unique(all.begin(), all.end(),
                          [](const list_entry& a, const list_entry& b) {
                              return a.is_prefix && b.is_prefix && a.name == b.name;
                          }),
              all.end());
    list_page page;
    page.truncated = all.size() > max_keys;
    if (page.truncated) all.resize(max_keys);
    page.entries = std::move(all);
    return page;
}

}  // namespace fjord::store
