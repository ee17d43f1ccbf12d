// Listing a cluster bucket: every node's shards of it, merged by key.
#include <algorithm>
#include <map>
#include <set>

#include "base/clock.h"
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

// `insist`: ask the node even when it is down in the view or suspect.
io::task<void> ask_listing(cluster_store* self, std::shared_ptr<list_fan> fan, std::size_t i,
                           std::string node, std::string path, std::string query, bool insist) {
    peer_pool* pool = insist || self->usable(node) ? self->pool_for(node) : nullptr;
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

// The version of a key a GET would return (judge_version, decide_version's rule), newest first. A
// version a GET can neither return nor pass over now (503: young, or too few holders answered) is
// listed as it is, as its write may have been acknowledged; a tombstone hides the key.
// `undecided` is set when that is such a version.
std::optional<listed_shard> settle(const key_reports& reports, unsigned k, unsigned write_quorum,
                                   unsigned unanswered, std::int64_t young_ms, std::int64_t now_ms,
                                   bool& undecided) {
    for (const auto& [version, held] : reports.versions) {
        const listed_shard& shard = held.second;
        const version_evidence evidence{shard.summary.kind,
                                        std::max(version.unix_ms(), shard.modified_ms), held.first,
                                        held.first, unanswered};
        const version_judgement judged = judge_version(k, write_quorum, evidence, young_ms, now_ms);
        if (judged == version_judgement::pass_over) continue;
        if (judged != version_judgement::take) undecided = true;
        if (shard.summary.kind == shard_kind::deleted) return std::nullopt;
        return shard;
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
    // `sets`: the snapshot's, which place each key (in `space`) as cluster_store::place_in does.
    listing_merge(const store::list_request& request, unsigned k, unsigned write_quorum,
                  std::int64_t young_ms, const std::vector<erasure_set>& sets, char space)
        : cursor(request.start_after),
          _request(&request),
          _k(k),
          _write_quorum(write_quorum),
          _young_ms(young_ms),
          _sets(&sets),
          _space(space),
          _full(request.max_keys == 0) {}

    // Takes one round's pages: `complete` once the listing is (every node's listing is done, or
    // one more result than the page holds was found: it is truncated). `unanswered`: by set, the
    // nodes that gave no page this round; a key is judged by its own set's.
    void take_round(const std::vector<std::optional<shard_listing>>& pages,
                    const std::vector<unsigned>& unanswered) {
        undecided = false;
        _now_ms = base::unix_now_ms();
        _unanswered = &unanswered;
        complete = take(pages);
        _unanswered = nullptr;
    }

    store::list_page page;
    std::string cursor;      // where the next round starts (exclusive)
    bool complete = false;   // the last round's take() finished the listing
    bool stalled = false;    // a node's page was cut before any entry: no progress can be made
    bool undecided = false;  // this round listed a key's version that a GET cannot decide now

private:
    bool take(const std::vector<std::optional<shard_listing>>& pages) {
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

    // One key of the merge; true when it shows that the page is truncated.
    bool add(const std::string& key, const key_reports& reports) {
        if (!_last_prefix.empty() && key.starts_with(_last_prefix)) return false;
        cursor = key;
        auto live =
            settle(reports, _k, _write_quorum, unanswered_for(key), _young_ms, _now_ms, undecided);
        if (!live) return false;
        store::list_entry entry;
        if (!_request->delimiter.empty()) {
            const std::size_t at = key.find(_request->delimiter, _request->prefix.size());
            if (at != std::string::npos) {
                entry.is_prefix = true;
                entry.name = key.substr(0, at + _request->delimiter.size());
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
        _full = page.entries.size() >= _request->max_keys;
        return false;
    }

    // The nodes of the key's set that gave no page (an upload's or part's key is placed by the
    // object key before its first NUL, as place_in does).
    unsigned unanswered_for(const std::string& key) const {
        const std::string_view object =
            _space == 'c' ? std::string_view(key) : std::string_view(key).substr(0, key.find('\0'));
        const std::size_t set = choose_set(object_hash(_request->bucket, object), *_sets);
        return set < _unanswered->size() ? (*_unanswered)[set] : 0;
    }

    const store::list_request* _request;
    unsigned _k;
    unsigned _write_quorum;
    std::int64_t _young_ms;
    std::int64_t _now_ms = 0;
    const std::vector<erasure_set>* _sets;
    char _space;
    const std::vector<unsigned>* _unanswered = nullptr;  // during take_round
    std::string _last_prefix;
    bool _full;
};

// What every round of one listing asks.
struct listing_scope {
    std::shared_ptr<const cluster_snapshot> snap;
    std::string path;
    std::vector<std::string> nodes;                           // every node of every set, once
    std::map<std::string, std::vector<std::size_t>> sets_of;  // node -> the sets it is in
};

struct round_pages {
    std::vector<std::optional<shard_listing>> pages;  // by node
    std::vector<unsigned> unanswered;                 // by set
};

// One round: every node's page after the cursor. Every set must answer with a read quorum, or a key's
// newest version may be missed. A rebuilding node's page is merged but is not an answer
// (decide_version), marked when the listing began or now (refresh_marks), or said by the node itself.
io::task<base::result<round_pages>> list_round(cluster_store* self, const listing_scope& scope,
                                               std::string query, bool insist) {
    const auto& nodes = scope.nodes;
    auto fan = std::make_shared<list_fan>();
    fan->pages.resize(nodes.size());
    fan->rebuilding.assign(nodes.size(), false);
    for (std::size_t i = 0; i < nodes.size(); ++i)
        io::spawn(ask_listing(self, fan, i, nodes[i], scope.path, query, insist));
    const auto& peers = self->options().peers;
    (void)co_await fan->wait_for(nodes.size(), peers.io_timeout_ms + peers.connect_timeout_ms);
    const topology& layout = *scope.snap->layout;
    const auto marks = self->snapshot();
    auto rebuilding = [&](std::size_t i) {
        return fan->rebuilding[i] || layout.is_rebuilding(nodes[i]) ||
               (marks->layout && marks->layout->is_rebuilding(nodes[i]));
    };
    std::vector<unsigned> answered(layout.sets.size(), 0);
    for (std::size_t i = 0; i < nodes.size(); ++i)
        if (fan->pages[i] && !rebuilding(i))
            for (std::size_t s : scope.sets_of.at(nodes[i])) ++answered[s];
    const unsigned width = layout.shape.width();
    const unsigned write_quorum = layout.shape.m == 0 ? layout.shape.k : layout.shape.k + 1;
    round_pages out;
    for (unsigned a : answered) {
        if (a < width - write_quorum + 1)
            co_return base::fail(base::errc::service_unavailable,
                                 "too few nodes answered to list the bucket");
        out.unanswered.push_back(width - a);
    }
    out.pages = std::move(fan->pages);
    co_return out;
}

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
    listing_scope scope{
        snap, rpc_path("list", shard_bucket(request.bucket, b->second.generation, space))};
    for (std::size_t s = 0; s < snap->layout->sets.size(); ++s)
        for (const auto& node : snap->layout->sets[s]) {
            if (std::find(scope.nodes.begin(), scope.nodes.end(), node) == scope.nodes.end())
                scope.nodes.push_back(node);
            scope.sets_of[node].push_back(s);
        }
    const unsigned k = snap->layout->shape.k;
    listing_merge merge(request, k, snap->layout->shape.m == 0 ? k : k + 1, client_read_young_ms(),
                        snap->sets, space);
    for (int round = 0; round < max_rounds; ++round) {
        // As a GET: once more asking every node when the nodes that looked usable leave a key
        // undecided or too few of them answered (a suspect may be back, and the view lags).
        std::optional<listing_merge> tried;
        base::error short_of;
        for (bool insist : {false, true}) {
            auto pages = co_await list_round(this, scope, query_of(request, merge.cursor), insist);
            if (!pages) {
                short_of = pages.err();
                continue;
            }
            tried.emplace(merge);
            tried->take_round(pages->pages, pages->unanswered);
            const bool all_heard = std::all_of(pages->unanswered.begin(), pages->unanswered.end(),
                                               [](unsigned n) { return n == 0; });
            if (!tried->undecided || all_heard) break;
        }
        if (!tried) co_return base::fail(short_of);
        merge = std::move(*tried);
        if (merge.stalled)
            co_return base::fail(base::errc::internal, "a node's listing made no progress");
        if (merge.complete) co_return std::move(merge.page);
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
