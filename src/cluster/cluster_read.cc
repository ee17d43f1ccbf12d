// The cluster's reads: the quorum read of a key's records, and the stripes of a version read from k of
// its shards with checks, rebuilds and hedging.
#include <algorithm>
#include <cstring>
#include <map>
#include <span>

#include "base/checksum.h"
#include "base/clock.h"
#include "base/log.h"
#include "cluster/byte_pipe.h"
#include "cluster/cluster_store.h"
#include "cluster/fan_out.h"
#include "cluster/stripe_reader.h"
#include "cluster/stripe_writer.h"
#include "io/wait_group.h"

namespace fjord::cluster {

// One shard a read takes blocks from. Shared with its read task, which may outlive the read when the
// read gave up waiting on it.
struct shard_source {
    unsigned index = 0;
    std::string node;
    peer_pool::lease link;
    std::vector<std::uint8_t> buf;  // a block and its CRC
    bool open = false;
    bool done = false;  // its read of the current stripe ended
    bool good = false;  // ... with a sound block
    bool slow = false;  // still reading when the hedge came
    base::error failure;
};

namespace {

struct records_fan final : fan_out {
    std::vector<std::vector<node_report>> reports;  // by node, then key
};

// One node's records of `keys`: asked again in halves when the answer is longer than a peer's answer
// may be (keys with many versions, or long manifests), so that large records cost one more request,
// not the node's whole answer.
io::task<base::result<std::vector<meta_reply>>> fetch_records(peer_pool* pool,
                                                              const std::string& node,
                                                              const std::string& shard_bucket,
                                                              std::span<const std::string> keys,
                                                              std::string body, bool& rebuilding) {
    auto link = co_await pool->acquire();
    auto answer = co_await link->call("POST", rpc_path("meta", shard_bucket), "", {}, body);
    link.reset();
    if (!answer && answer.code() == base::errc::entity_too_large && keys.size() > 1) {
        const auto first = keys.first(keys.size() / 2), rest = keys.subspan(keys.size() / 2);
        auto replies = co_await fetch_records(pool, node, shard_bucket, first,
                                              encode_key_list(first), rebuilding);
        if (!replies) co_return replies;
        auto more = co_await fetch_records(pool, node, shard_bucket, rest, encode_key_list(rest),
                                           rebuilding);
        if (!more) co_return more;
        for (auto& r : *more) replies->push_back(std::move(r));
        co_return replies;
    }
    if (!answer) co_return answer.as_failure();
    if (!answer->ok())
        co_return base::fail(base::errc::internal,
                             "node " + node + " answered " + std::to_string(answer->status));
    if (answer->header(rebuilding_header) == "1") rebuilding = true;
    co_return decode_meta_replies(answer->body, keys.size());
}

// `insist`: ask even a node that is down in etcd's view or suspect (a second round, when too few
// answered without it).
io::task<void> ask_records(cluster_store* self, std::shared_ptr<records_fan> fan, unsigned i,
                           std::string node, std::string shard_bucket,
                           std::shared_ptr<const std::vector<std::string>> keys, std::string body,
                           bool insist) {
    auto fail_all = [&](base::error e) {
        for (auto& r : fan->reports[i]) r = node_report{node_report::state::failed, {}, e};
    };
    peer_pool* pool = insist || self->usable(node) ? self->pool_for(node) : nullptr;
    if (!pool) {
        fail_all(base::error{base::errc::service_unavailable, "node " + node + " is down"});
        fan->finish_one();
        co_return;
    }
    bool rebuilding = false;
    auto replies =
        co_await fetch_records(pool, node, shard_bucket, *keys, std::move(body), rebuilding);
    if (!replies) {
        if (transport_failure(replies.err())) self->suspect(node);
        fail_all(replies.err());
    } else {
        for (std::size_t j = 0; j < keys->size(); ++j) {
            auto& reply = (*replies)[j];
            node_report& r = fan->reports[i][j];
            r.rebuilding = rebuilding;
            if (reply.kind == meta_reply::state::present) {
                r.kind = node_report::state::present;
                r.versions = std::move(reply.versions);
            } else {
                r.kind = reply.kind == meta_reply::state::absent ? node_report::state::absent
                                                                 : node_report::state::failed;
            }
        }
    }
    fan->finish_one();
}

struct stripe_fan final : fan_out {};

io::task<void> read_block(cluster_store* self, std::shared_ptr<shard_source> src,
                          std::shared_ptr<stripe_fan> fan, std::uint32_t len,
                          std::uint32_t expected_crc) {
    src->good = false;
    src->done = false;
    src->slow = false;
    src->buf.resize(std::size_t{len} + 4);
    auto got = co_await src->link->read_exact(reinterpret_cast<std::byte*>(src->buf.data()),
                                              src->buf.size());
    if (!got) {
        src->good = false;
        src->failure = got.err();
        // A node that closes in the middle of a download is up: it found its shard damaged.
        if (transport_failure(got.err()) && got.code() != base::errc::closed)
            self->suspect(src->node);
        src->link.reset();
    } else {
        std::uint32_t sent = 0;
        std::memcpy(&sent, src->buf.data() + len, 4);
        const std::uint32_t crc =
            base::crc32c(std::span(reinterpret_cast<const std::byte*>(src->buf.data()), len));
        src->good = crc == sent && crc == expected_crc;
        if (!src->good) {
            src->failure = base::error{base::errc::data_corrupted,
                                       "a block of shard " + std::to_string(src->index) +
                                           " on node " + src->node + " fails its CRC32C"};
            src->link.reset();
        }
    }
    src->done = true;
    fan->finish_one();
}

// Opens a download of stripes [from, last] of one shard of the version.
// `insist`: even from a node down in etcd's view or suspect (when no other shard is left).
io::task<std::shared_ptr<shard_source>> open_shard_source(
    cluster_store* self, const key_place& place, unsigned index, const std::string& path,
    const std::string& version, std::uint64_t from, std::uint64_t last, bool insist) {
    auto src = std::make_shared<shard_source>();
    src->index = index;
    src->node = place.nodes[index];
    peer_pool* pool = insist || self->usable(src->node) ? self->pool_for(src->node) : nullptr;
    if (!pool) {
        src->failure = base::error{base::errc::service_unavailable, "node is down"};
        co_return src;
    }
    src->link = co_await pool->acquire();
    auto answer = co_await src->link->begin_download(path,
                                                     "count=" + std::to_string(last - from + 1) +
                                                         "&first=" + std::to_string(from) +
                                                         "&stamp=" + version,
                                                     {});
    if (!answer || !answer->ok()) {
        src->failure = answer
                           ? base::error{base::errc::internal, "node " + src->node + " answered " +
                                                                   std::to_string(answer->status)}
                           : answer.err();
        if (!answer && transport_failure(answer.err())) self->suspect(src->node);
        src->link.reset();
        co_return src;
    }
    src->open = true;
    co_return src;
}

}  // namespace

std::int64_t written_ms(const shard_meta& v) {
    return std::max(v.version.unix_ms(), v.object.modified_ms);
}

namespace {

// The nodes holding each version, newest first. A version is its stamp and its object's ETag: one
// stamp may name two writes (a clock stepped back across a restart, two nodes' tags alike), whose
// shards must never be decoded together.
struct held {
    std::vector<unsigned> sound, damaged;
};
using version_key = std::pair<stamp, std::string>;
using holders_by_version = std::map<version_key, held, std::greater<>>;

// Who holds what, and how many nodes answered (a rebuilding node's answer is not one).
holders_by_version gather_versions(const key_place& place, const std::vector<node_report>& by_node,
                                   read_decision& d) {
    holders_by_version versions;
    for (unsigned i = 0; i < by_node.size(); ++i) {
        const node_report& r = by_node[i];
        const bool rebuilding =
            r.rebuilding || (i < place.rebuilding.size() && place.rebuilding[i]);
        if (!rebuilding &&
            (r.kind == node_report::state::absent || r.kind == node_report::state::present))
            ++d.answered;
        if (r.kind != node_report::state::present) continue;
        for (const shard_meta& meta : r.versions)
            // A shard the placement does not put on this node (another topology's) does not count.
            if (meta.index == i && meta.k == place.k && meta.m == place.m) {
                held& h = versions[{meta.version, meta.object.etag}];
                (meta.damaged ? h.damaged : h.sound).push_back(i);
            }
    }
    return versions;
}

// Newest first; two writes under one stamp: the one on more nodes first (an acknowledged one is on W).
std::vector<std::pair<version_key, held>> newest_first(const holders_by_version& versions) {
    std::vector<std::pair<version_key, held>> ordered(versions.begin(), versions.end());
    std::stable_sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) {
        if (a.first.first != b.first.first) return a.first.first > b.first.first;
        return a.second.sound.size() + a.second.damaged.size() >
               b.second.sound.size() + b.second.damaged.size();
    });
    return ordered;
}

}  // namespace

version_judgement judge_version(unsigned k, unsigned write_quorum, const version_evidence& v,
                                std::int64_t undecided_young_ms, std::int64_t now_ms) {
    const std::size_t w = write_quorum;
    // Young and not known to be on W nodes: its writer may still withdraw it. Below W for sure, it
    // is passed over; possibly on W (a node did not answer), it can be neither returned nor passed
    // over now. (A version stamped past the skew this node's clock follows has no age it can tell:
    // the clocks are outside what the rules assume, and it is judged as before.)
    const std::int64_t age_ms = now_ms - v.written_ms;
    if (undecided_young_ms > 0 && v.held < w && age_ms < undecided_young_ms &&
        age_ms >= -stamp_clock::max_skew_ms)
        return v.held + v.unanswered < w ? version_judgement::pass_over : version_judgement::young;
    // A tombstone or a manifest has no bytes here: one sound record of it is enough, on W nodes.
    // Below W among the answers, a client's read takes any version only from k sound records, and
    // passes one over only when the nodes that did not answer cannot make up k (then no read can
    // return it): otherwise one read could return it and the next, which misses a holder, go back
    // to the version before.
    const bool client_read = undecided_young_ms > 0;
    const bool from_k = v.kind == shard_kind::object || (client_read && v.held < w);
    if (!from_k || v.sound >= k) return version_judgement::take;
    if (v.held + v.unanswered >= w || (client_read && v.sound + v.unanswered >= k))
        return version_judgement::unreadable;
    return version_judgement::pass_over;
}

// The newest version the reports allow reading: a tombstone, or data on k shards at least.
base::result<read_decision> decide_version(const key_place& place,
                                           const std::vector<node_report>& by_node,
                                           std::int64_t undecided_young_ms) {
    FJORD_ASSERT(place.k >= 1 && by_node.size() == place.width(), "one report per shard's node");
    // Read and write quorums intersect: an acknowledged write has a holder among any read's answers.
    FJORD_ASSERT(place.read_quorum() + place.write_quorum() > place.width() &&
                 place.write_quorum() >= place.k && place.write_quorum() <= place.width());
    read_decision d;
    d.shards.resize(place.width());
    d.damaged.assign(place.width(), false);
    const holders_by_version versions = gather_versions(place, by_node, d);
    FJORD_ASSERT(d.answered <= place.width());
    if (d.answered < place.read_quorum())
        return base::fail(base::errc::service_unavailable,
                          "only " + std::to_string(d.answered) + " of " +
                              std::to_string(place.width()) + " nodes of the set answered (" +
                              std::to_string(place.read_quorum()) + " needed)");
    auto meta_on = [&by_node](unsigned node, const version_key& version) -> const shard_meta& {
        for (const auto& meta : by_node[node].versions)
            if (meta.version == version.first && meta.object.etag == version.second) return meta;
        FJORD_ASSERT(false, "a holder without its version");
        return by_node[node].versions.front();
    };
    // Newest first. A version on fewer than k sound shards among the nodes that answered cannot be
    // read now; it may still be an acknowledged write whose other holders did not answer (it reached
    // W nodes), and then no older version may stand in for it. Only a version that cannot have reached
    // W is passed over: a write that failed (or is still going), whose outcome its writer does not know.
    const std::size_t unanswered = place.width() - d.answered;
    const std::int64_t now_ms = undecided_young_ms > 0 ? base::unix_now_ms() : 0;
    for (const auto& [version, holders] : newest_first(versions)) {
        const unsigned any_node =
            holders.sound.empty() ? holders.damaged.front() : holders.sound.front();
        const shard_meta& any = meta_on(any_node, version);
        const bool tombstone = any.kind == shard_kind::deleted;
        const std::size_t held = holders.sound.size() + holders.damaged.size();
        const version_evidence evidence{any.kind, written_ms(any), holders.sound.size(), held,
                                        unanswered};
        switch (
            judge_version(place.k, place.write_quorum(), evidence, undecided_young_ms, now_ms)) {
            case version_judgement::pass_over: continue;
            case version_judgement::young:
                return base::fail(base::errc::service_unavailable,
                                  "the key's newest version is still being written: try again");
            case version_judgement::unreadable:
                return base::fail(base::errc::service_unavailable,
                                  "the key's newest version cannot be read from the nodes that "
                                  "answered now");
            case version_judgement::take: break;
        }
        // What is returned is readable: a tombstone or manifest from one sound record, an object's
        // bytes from k sound shards.
        FJORD_ASSERT(any.kind != shard_kind::object || holders.sound.size() >= place.k);
        d.found = !tombstone;
        d.meta = any;
        d.meta.damaged = false;
        d.holders = holders.sound.size();
        d.full_width = holders.sound.size() == place.width();
        for (unsigned i : holders.sound) d.shards[i] = meta_on(i, version);
        for (unsigned i : holders.damaged) d.damaged[i] = true;
        break;
    }
    d.others = versions.size() > (d.holders > 0 ? 1u : 0u);
    return d;
}

io::task<std::vector<std::vector<node_report>>> cluster_store::read_records(
    key_place place, std::vector<std::string> keys, bool insist) {
    auto fan = std::make_shared<records_fan>();
    const unsigned n = place.width();
    fan->reports.assign(n, std::vector<node_report>(keys.size()));
    const std::string body = encode_key_list(keys);
    auto shared_keys = std::make_shared<const std::vector<std::string>>(keys);
    std::vector<bool> skipped(n, false);
    for (unsigned i = 0; i < n; ++i) {
        skipped[i] = !insist && !usable(place.nodes[i]);
        io::spawn(ask_records(this, fan, i, place.nodes[i], place.shard_bucket, shared_keys, body,
                              insist));
    }
    // A quorum within the data plane's own time limits, then the rest for a short grace.
    const std::int64_t limit_ms = _options.peers.io_timeout_ms + _options.peers.connect_timeout_ms;
    (void)co_await fan->wait_for(place.read_quorum(), limit_ms);
    (void)co_await fan->wait_for(n, _options.straggler_ms);
    std::size_t answered = 0;
    for (const auto& node : fan->reports)  // (a rebuilding node's answer is not one)
        if (!node.empty() && !node[0].rebuilding &&
            (node[0].kind == node_report::state::present ||
             node[0].kind == node_report::state::absent))
            ++answered;
    if (answered < place.read_quorum()) {
        // Too few: the nodes passed over as down or suspect are asked after all (the view lags).
        auto second = std::make_shared<records_fan>();
        second->reports = fan->reports;
        std::size_t asked = 0;
        for (unsigned i = 0; i < n; ++i)
            if (skipped[i]) {
                ++asked;
                io::spawn(ask_records(this, second, i, place.nodes[i], place.shard_bucket,
                                      shared_keys, body, true));
            }
        (void)co_await second->wait_for(asked, limit_ms);
        fan = second;
    }
    std::vector<std::vector<node_report>> out = fan->reports;
    for (auto& node : out)
        for (auto& r : node)
            if (r.kind == node_report::state::pending)
                r = node_report{node_report::state::failed,
                                {},
                                base::error{base::errc::timed_out, "no answer in time"}};
    co_return out;
}

io::task<base::result<read_decision>> cluster_store::quorum_read(key_place place) {
    base::result<read_decision> decision = base::fail(base::errc::internal, "not read");
    // Undecided with the nodes that looked usable: once more, asking every node (a suspect may be
    // back, and etcd's view lags behind restarts).
    for (bool insist : {false, true}) {
        auto reports = co_await read_records(place, {place.key}, insist);
        std::vector<node_report> by_node;
        for (auto& node : reports) by_node.push_back(std::move(node[0]));
        refresh_marks(place);
        decision = decide_version(place, by_node, client_read_young_ms());
        if (decision || decision.code() != base::errc::service_unavailable) break;
    }
    if (decision)
        LOG_DEBUG("read %s/%s: version %s, %zu sound holders, %zu of %u nodes answered",
                  place.bucket.c_str(), place.key.c_str(),
                  decision->holders > 0 ? decision->meta.version.text().c_str() : "none",
                  decision->holders, decision->answered, place.width());
    if (decision && decision->holders > 0) _clock.observe(decision->meta.version);
    // Below full width, or with versions to trim or leftovers to withdraw (which hold back conditional
    // writes): for the healer.
    if (decision && decision->holders > 0 && (!decision->full_width || decision->others))
        queue_heal(place);
    co_return decision;
}

io::task<base::result<store::object_record>> cluster_store::head(std::string bucket,
                                                                 std::string key) {
    auto where = place(bucket, key);
    if (!where) co_return where.as_failure();
    auto decision = co_await quorum_read(*where);
    if (!decision) co_return decision.as_failure();
    if (!decision->found) co_return base::fail(base::errc::no_such_key, "no such key");
    co_return decision->meta.object;
}

io::task<base::result<store::object_record>> cluster_store::get(std::string bucket, std::string key,
                                                                store::read_planner plan,
                                                                store::byte_sink& sink) {
    auto where = place(bucket, key);
    if (!where) co_return where.as_failure();
    auto decision = co_await quorum_read(*where);
    if (!decision) co_return decision.as_failure();
    if (!decision->found) co_return base::fail(base::errc::no_such_key, "no such key");
    auto range = plan(decision->meta.object);
    if (!range) co_return range.as_failure();
    if (*range && (*range)->length > 0) {
        co_await operations().acquire();
        io::semaphore::permit admitted(operations());
        FJORD_CO_TRY(
            co_await read_object(*where, *decision, (*range)->first, (*range)->length, sink));
    }
    co_return decision->meta.object;
}

stripe_reader::stripe_reader(cluster_store& store, const key_place& place,
                             const read_decision& decision, std::uint64_t first, std::uint64_t last)
    : _store(store),
      _place(place),
      _decision(decision),
      _layout(decision.meta.layout()),
      _last(last),
      _code(*erasure_code::make(place.k, place.m)),
      _path(rpc_path("shard", place.shard_bucket, place.key)),
      _version(decision.meta.version.text()),
      _blocks(place.width(), nullptr) {
    (void)first;
    for (unsigned i = 0; i < place.width(); ++i)
        if (decision.shards[i]) _candidates.push_back(i);
}

stripe_reader::~stripe_reader() = default;

// Opens the next shard to read from stripe s on; false when none is left.
io::task<bool> stripe_reader::open_next(std::uint64_t s) {
    for (;;) {
        if (_next_candidate == _candidates.size()) {
            // Out of shards: those passed over as down or suspect are tried after all.
            if (_insisting || _passed_over.empty()) co_return false;
            _insisting = true;
            _candidates = std::move(_passed_over);
            _passed_over.clear();
            _next_candidate = 0;
        }
        const unsigned candidate = _candidates[_next_candidate++];
        auto src = co_await open_shard_source(&_store, _place, candidate, _path, _version, s, _last,
                                              _insisting);
        if (src->open) {
            _active.push_back(std::move(src));
            co_return true;
        }
        _saw_damage = true;
        if (!_insisting) _passed_over.push_back(candidate);
    }
}

// Until k blocks of stripe s are good. Shards read side by side; when they are not all in by the hedge,
// more are opened, and the slow ones are still waited for: whichever k come first win. A shard that
// fails or is corrupt is replaced at once.
io::task<base::result<void>> stripe_reader::gather(
    std::uint64_t s, std::vector<std::shared_ptr<shard_source>>& good) {
    const std::uint32_t bl = _layout.block_of(s);
    auto fan = std::make_shared<stripe_fan>();
    std::vector<std::shared_ptr<shard_source>> reading = std::move(_active);
    _active.clear();
    auto launch = [&](std::shared_ptr<shard_source> src) {
        io::spawn(read_block(&_store, src, fan, bl, _decision.shards[src->index]->block_crcs[s]));
        reading.push_back(std::move(src));
    };
    for (auto& src : reading)
        io::spawn(read_block(&_store, src, fan, bl, _decision.shards[src->index]->block_crcs[s]));
    const std::int64_t give_up_ns =
        base::monotonic_now_ns() + _store.options().peers.io_timeout_ms * 1'000'000;
    bool hedged = false;
    for (;;) {
        // Taken with the counts: a read launched below can finish before it yields (its answer
        // already buffered), and waiting for one more than finished() after that would wait for a
        // read that does not exist, until the hedge timer (2 s on every small GET).
        const std::size_t seen = fan->finished();
        std::size_t n_good = 0, n_slow = 0, n_in_flight = 0;
        for (const auto& src : reading) {
            if (src->done && src->good) ++n_good;
            if (!src->done) ++n_in_flight, n_slow += src->slow ? 1 : 0;
        }
        if (n_good >= _place.k) break;
        // Enough in flight to make k, not counting the slow ones once the hedge came.
        while (n_in_flight - n_slow < _place.k - n_good && co_await open_next(s)) {
            launch(std::move(_active.back()));
            _active.pop_back();
            ++n_in_flight;
        }
        if (n_in_flight == 0) break;
        const std::int64_t left_ms = (give_up_ns - base::monotonic_now_ns()) / 1'000'000;
        if (left_ms <= 0) break;
        const bool progressed = co_await fan->wait_for(
            seen + 1, hedged ? left_ms : std::min(left_ms, _store.options().hedge_ms));
        if (!progressed && !hedged) {
            hedged = true;  // the shards still reading are slow: others join them
            for (auto& src : reading)
                if (!src->done) src->slow = true;
            LOG_INFO("%s/%s: shard reads slower than the %lld ms hedge; reading other shards too",
                     _place.bucket.c_str(), _place.key.c_str(),
                     static_cast<long long>(_store.options().hedge_ms));
        }
    }
    for (auto& src : reading) {
        if (src->done && src->good && good.size() < _place.k) {
            good.push_back(src);
            continue;
        }
        if (src->done && src->good) {  // more than k in: kept for the next stripe
            _active.push_back(src);
            continue;
        }
        _saw_damage = true;
        if (!src->done) {
            _store.suspect(src->node);          // too slow: left to finish on its own
            _candidates.push_back(src->index);  // it may be read again from a later stripe
        } else {
            LOG_WARN("%s/%s: %s; reading another shard", _place.bucket.c_str(), _place.key.c_str(),
                     src->failure.message.c_str());
        }
    }
    if (good.size() < _place.k)
        co_return base::fail(
            base::errc::service_unavailable,
            "fewer than " + std::to_string(_place.k) + " shards of the object can be read now");
    co_return base::result<void>{};
}

io::task<base::result<void>> stripe_reader::read(std::uint64_t s,
                                                 std::span<const unsigned> rebuild) {
    const std::uint32_t bl = _layout.block_of(s);
    for (auto& src : _good) _active.push_back(std::move(src));  // open for this stripe too
    _good.clear();
    FJORD_CO_TRY(co_await gather(s, _good));
    std::fill(_blocks.begin(), _blocks.end(), nullptr);
    bool present[max_stripe_width] = {};
    for (auto& src : _good) {
        _blocks[src->index] = src->buf.data();
        present[src->index] = true;
    }
    std::vector<unsigned> wanted;
    for (unsigned j = 0; j < _place.k; ++j)
        if (!present[j]) wanted.push_back(j);
    for (unsigned j : rebuild)
        if (!present[j] && std::find(wanted.begin(), wanted.end(), j) == wanted.end())
            wanted.push_back(j);
    if (wanted.empty()) co_return base::result<void>{};
    _rebuilt.resize(std::size_t{_place.width()} * bl);
    for (unsigned i = 0; i < _place.width(); ++i)
        if (!_blocks[i]) _blocks[i] = _rebuilt.data() + std::size_t{i} * bl;
    co_return _code.reconstruct(_blocks, std::span<const bool>(present, _place.width()), wanted,
                                bl);
}

namespace {

// The holders of one version as every node of the set reports them now: a read that ran out of shards
// (the decision heard only a quorum, and a shard it chose failed) goes on from these.
io::task<base::result<read_decision>> holders_now(cluster_store& store, const key_place& place,
                                                  const read_decision& decision) {
    auto reports = co_await store.read_records(place, {place.key}, true);
    read_decision d = decision;
    d.holders = 0;
    d.shards.assign(place.width(), std::nullopt);
    for (unsigned i = 0; i < place.width(); ++i)
        for (const shard_meta& meta : reports[i][0].versions)
            if (meta.version == decision.meta.version &&
                meta.object.etag == decision.meta.object.etag && meta.index == i &&
                meta.k == place.k && meta.m == place.m && !meta.damaged) {
                d.shards[i] = meta;
                ++d.holders;
            }
    if (d.holders < place.k)
        co_return base::fail(
            base::errc::service_unavailable,
            "fewer than " + std::to_string(place.k) + " shards of the object can be read now");
    co_return d;
}

}  // namespace

// Streams [first, first + length) of the decided version into `sink`, stripe by stripe.
io::task<base::result<void>> cluster_store::read_range(const key_place& place,
                                                       const read_decision& decision,
                                                       std::uint64_t first, std::uint64_t length,
                                                       store::byte_sink& sink) {
    const stripe_layout layout = decision.meta.layout();
    const std::uint64_t per = layout.stripe_data_bytes();
    const std::uint64_t s0 = first / per, s1 = (first + length - 1) / per;
    std::optional<stripe_reader> reader;
    reader.emplace(*this, place, decision, s0, s1);
    std::optional<read_decision> asked_again;  // once, when the decision's shards ran out
    for (std::uint64_t s = s0; s <= s1; ++s) {
        auto read = co_await reader->read(s);
        if (!read && read.code() == base::errc::service_unavailable && !asked_again) {
            queue_heal(place);
            auto again = co_await holders_now(*this, place, decision);
            if (!again) co_return again.as_failure();
            asked_again = std::move(*again);
            reader.emplace(*this, place, *asked_again, s, s1);
            read = co_await reader->read(s);
        }
        if (!read) {
            if (reader->saw_damage()) queue_heal(place);
            co_return read;
        }
        const std::uint32_t bl = layout.block_of(s);
        for (unsigned j = 0; j < place.k; ++j) {
            const std::uint64_t at = layout.data_offset(s) + std::uint64_t{j} * bl;
            const std::uint64_t from = std::max(at, first);
            const std::uint64_t to = std::min({at + bl, first + length, layout.object_bytes});
            if (from < to)
                FJORD_CO_TRY(co_await sink.write(
                    std::span(reinterpret_cast<const std::byte*>(reader->block(j) + (from - at)),
                              to - from)));
        }
    }
    if (reader->saw_damage()) queue_heal(place);
    co_return base::result<void>{};
}

namespace {

// Shows every byte read to a copy plan's observer on the way into the pipe.
class observing_sink final : public store::byte_sink {
public:
    observing_sink(store::byte_sink& next,
                   const std::function<void(std::span<const std::byte>)>& observe)
        : _next(next), _observe(observe) {}
    io::task<base::result<void>> write(std::span<const std::byte> data) override {
        if (_observe) _observe(data);
        co_return co_await _next.write(data);
    }

private:
    store::byte_sink& _next;
    const std::function<void(std::span<const std::byte>)>& _observe;
};

}  // namespace

io::task<void> cluster_store::read_into(
    key_place place, read_decision decision, store::byte_range range, byte_pipe* pipe,
    const std::function<void(std::span<const std::byte>)>* observe) {
    base::result<void> outcome;
    if (range.length > 0) {
        observing_sink sink(*pipe, *observe);
        outcome = co_await read_object(place, decision, range.first, range.length, sink);
    }
    pipe->finish(std::move(outcome));
}

io::task<base::result<store::object_record>> cluster_store::copy(store::copy_request request,
                                                                 store::copy_planner plan) {
    auto from = place(request.source_bucket, request.source_key);
    if (!from) co_return from.as_failure();
    auto to = place(request.bucket, request.key);
    if (!to) co_return to.as_failure();
    auto decision = co_await quorum_read(*from);
    if (!decision) co_return decision.as_failure();
    if (!decision->found) co_return base::fail(base::errc::no_such_key, "no such key");
    if (request.source_version_id && !request.source_version_id->empty())
        co_return base::fail(base::errc::no_such_version, "no such version");
    auto planned = plan(decision->meta.object);
    if (!planned) co_return planned.as_failure();
    co_await operations().acquire();
    io::semaphore::permit admitted(operations());
    auto version = co_await version_for_write(*to, request.conditions);
    if (!version) co_return version.as_failure();
    // The copy's record: the plan's, completed from the bytes written when it asks to be.
    store::record_finisher finish =
        [&planned](const store::written_data& written) -> base::result<store::object_record> {
        if (planned->finish) return planned->finish(written);
        return planned->record;
    };
    byte_pipe pipe;
    io::wait_group reading(1);
    co_await reading.spawn(read_into(*from, *decision,
                                     store::byte_range{0, decision->meta.object.size_bytes}, &pipe,
                                     &planned->observe));
    auto written = co_await write_version(*to, &pipe, decision->meta.object.size_bytes, finish,
                                          shard_kind::object, version->first, version->second);
    pipe.close();
    co_await reading.wait();
    co_return written;
}

}  // namespace fjord::cluster
