// Listing a cluster bucket: every node's shards of it, merged by key.
#include <algorithm>
#include <map>
#include <set>

#include "base/encoding.h"
#include "cluster/cluster_store.h"
#include "cluster/fan_out.h"

namespace fjord::cluster {

namespace {

constexpr std::uint32_t page_keys = 1000;
constexpr int max_rounds = 100'000;

struct list_fan final : fan_out {
    std::vector<std::optional<shard_listing>> pages;  // by node
    std::vector<bool> rebuilding;  // by node: it said its drive is being rebuilt (rpc.h)
};

io::task<void> ask_listing(cluster_store* self, std::shared_ptr<list_fan> fan, std::size_t i,
                           std::string node, std::string path, std::string query) {
    peer_pool* pool = self->usable(node) ? self->pool_for(node) : nullptr;
    if (pool) {
        auto link = co_await pool->acquire();
        auto answer = co_await link->call("GET", path, query, {}, "");
        link.reset();
        if (!answer) {
            if (answer.err().code != base::errc::invalid_argument) self->suspect(node);
        } else if (answer->ok()) {
            if (auto listing = decode_listing(answer->body)) fan->pages[i] = std::move(*listing);
            fan->rebuilding[i] = answer->header(rebuilding_header) == "1";
        }
    }
    fan->finish_one();
}

// What the nodes that answered say of one key: the newest version that can be read.
struct key_reports {
    std::map<stamp, std::pair<std::size_t, listed_shard>, std::greater<>> versions;
};

// As decide_version (cluster_read.cc) judges a key: newest first, a version on k nodes (or a
// tombstone) stands; one that may have reached W nodes counting those that did not answer is listed as
// it is; only one that cannot have is passed over.
std::optional<listed_shard> settle(const key_reports& reports, unsigned k, unsigned write_quorum,
                                   unsigned unanswered) {
    for (const auto& [version, held] : reports.versions) {
        if (held.second.summary.kind == shard_kind::deleted) return std::nullopt;
        if (held.second.summary.kind == shard_kind::manifest) return held.second;  // no bytes here
        if (held.first >= k || held.first + unanswered >= write_quorum) return held.second;
    }
    return std::nullopt;
}

std::string query_of(const store::list_request& r, const std::string& after) {
    std::string q = "after=" + base::uri_encode(after, false) + "&max=" + std::to_string(page_keys);
    if (!r.prefix.empty()) q += "&prefix=" + base::uri_encode(r.prefix, false);
    return q;
}

}  // namespace

namespace {

// A listing being built from rounds of the nodes' pages.
class listing_merge {
public:
    listing_merge(const store::list_request& request, unsigned k, unsigned write_quorum)
        : cursor(request.start_after),
          _request(request),
          _k(k),
          _write_quorum(write_quorum),
          _full(request.max_keys == 0) {}

    // Takes one round's pages; true once the listing is complete (every node's listing is done,
    // or one more result than the page holds was found: it is truncated).
    // `unanswered`: the fewest nodes of any set that gave no page this round.
    bool take(const std::vector<std::optional<shard_listing>>& pages, unsigned unanswered) {
        _unanswered = unanswered;
        // Keys up to the horizon are complete: past the last key of a node's truncated page, that
        // node may hold more.
        std::optional<std::string> horizon;
        for (const auto& p : pages)
            if (p && p->truncated && p->entries.empty()) stalled = true;
        for (const auto& p : pages)
            if (p && p->truncated && !p->entries.empty() &&
                (!horizon || p->entries.back().key < *horizon))
                horizon = p->entries.back().key;
        std::map<std::string, key_reports> merged;
        for (const auto& p : pages) {
            if (!p) continue;
            for (const auto& e : p->entries) {
                if (horizon && e.key > *horizon) break;
                auto& slot = merged[e.key].versions[e.summary.version];
                if (slot.first++ == 0) slot.second = e;
            }
        }
        for (const auto& [key, reports] : merged)
            if (add(key, reports)) return true;
        return !horizon;
    }

    store::list_page page;
    std::string cursor;    // where the next round starts (exclusive)
    bool stalled = false;  // a node's page was cut before any entry: no progress can be made

private:
    // One key of the merge; true when it shows that the page is truncated.
    bool add(const std::string& key, const key_reports& reports) {
        if (!_last_prefix.empty() && key.starts_with(_last_prefix)) return false;
        cursor = key;
        auto live = settle(reports, _k, _write_quorum, _unanswered);
        if (!live) return false;
        store::list_entry entry;
        if (!_request.delimiter.empty()) {
            const std::size_t at = key.find(_request.delimiter, _request.prefix.size());
            if (at != std::string::npos) {
                entry.is_prefix = true;
                entry.name = key.substr(0, at + _request.delimiter.size());
                _last_prefix = entry.name;
                // Past every key under it (0xff never occurs in UTF-8, which keys are).
                cursor = entry.name + '\xff';
            }
        }
        if (_full) {  // one more result exists
            page.truncated = true;
            return true;
        }
        if (!entry.is_prefix) {
            entry.name = key;
            entry.size_bytes = live->summary.object_bytes;
            entry.etag = live->summary.object_etag;
            entry.modified_ms = live->modified_ms;
        }
        page.entries.push_back(std::move(entry));
        _full = page.entries.size() >= _request.max_keys;
        return false;
    }

    const store::list_request& _request;
    unsigned _k;
    unsigned _write_quorum;
    unsigned _unanswered = 0;
    std::string _last_prefix;
    bool _full;
};

}  // namespace

io::task<base::result<store::list_page>> cluster_store::list(store::list_request request) {
    co_return co_await list_shards('c', std::move(request));
}

io::task<base::result<store::list_page>> cluster_store::list_shards(char space,
                                                                    store::list_request request) {
    auto snap = snapshot();
    if (!snap->layout)
        co_return base::fail(base::errc::service_unavailable,
                             "the cluster has no topology yet (fjord cluster init)");
    auto b = snap->buckets.find(request.bucket);
    if (b == snap->buckets.end())
        co_return base::fail(base::errc::no_such_bucket, "no such bucket");
    const std::string path =
        rpc_path("list", shard_bucket(request.bucket, b->second.generation, space));
    std::vector<std::string> nodes;
    std::map<std::string, std::vector<std::size_t>> sets_of;  // node -> the sets it is in
    for (std::size_t s = 0; s < snap->layout->sets.size(); ++s)
        for (const auto& node : snap->layout->sets[s]) {
            if (std::find(nodes.begin(), nodes.end(), node) == nodes.end()) nodes.push_back(node);
            sets_of[node].push_back(s);
        }
    const unsigned k = snap->layout->shape.k, width = snap->layout->shape.width();
    const unsigned read_quorum = width - (k + 1) + 1;
    listing_merge merge(request, k, k + 1);
    for (int round = 0; round < max_rounds; ++round) {
        auto fan = std::make_shared<list_fan>();
        fan->pages.resize(nodes.size());
        fan->rebuilding.assign(nodes.size(), false);
        for (std::size_t i = 0; i < nodes.size(); ++i)
            io::spawn(ask_listing(this, fan, i, nodes[i], path, query_of(request, merge.cursor)));
        (void)co_await fan->wait_for(
            nodes.size(), _options.peers.io_timeout_ms + _options.peers.connect_timeout_ms);
        // Every set must have answered with a read quorum, or a key's newest version may be missed.
        // A rebuilding node's page is merged but is not an answer (decide_version), marked when the
        // listing began or now (refresh_marks), or said by the node itself.
        const auto marks = snapshot();
        auto rebuilding = [&](std::size_t i) {
            return fan->rebuilding[i] || snap->layout->is_rebuilding(nodes[i]) ||
                   (marks->layout && marks->layout->is_rebuilding(nodes[i]));
        };
        std::vector<unsigned> answered(snap->layout->sets.size(), 0);
        for (std::size_t i = 0; i < nodes.size(); ++i)
            if (fan->pages[i] && !rebuilding(i))
                for (std::size_t s : sets_of[nodes[i]]) ++answered[s];
        unsigned unanswered = 0;
        for (unsigned a : answered) {
            if (a < read_quorum)
                co_return base::fail(base::errc::service_unavailable,
                                     "too few nodes answered to list the bucket");
            unanswered = std::max(unanswered, width - a);
        }
        const bool complete = merge.take(fan->pages, unanswered);
        if (merge.stalled)
            co_return base::fail(base::errc::internal, "a node's listing made no progress");
        if (complete) co_return std::move(merge.page);
    }
    // Rounds without end (more than max_rounds of 1000 keys, none of them listable): what was merged,
    // marked as cut short. Nothing merged is an error, never an empty page: that would call a bucket
    // that holds objects empty (and DeleteBucket would delete it).
    if (merge.page.entries.empty())
        co_return base::fail(base::errc::service_unavailable,
                             "the listing of " + request.bucket + " could not finish");
    merge.page.truncated = true;
    co_return std::move(merge.page);
}

}  // namespace fjord::cluster
