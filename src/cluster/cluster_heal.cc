// Healing one key: the version a quorum read settles on, copied onto the nodes of its set that lack it.
#include <algorithm>

#include "base/clock.h"
#include "base/log.h"
#include "cluster/cluster_store.h"
#include "cluster/stripe_reader.h"
#include "cluster/stripe_writer.h"

namespace fjord::cluster {

namespace {

// The stripes a heal sends: read back from k shards, the targets' blocks rebuilt.
class heal_feed final : public stripe_feed {
public:
    heal_feed(stripe_reader& reader, const std::vector<unsigned>& targets, unsigned width)
        : _reader(reader), _targets(targets), _width(width) {}
    io::task<base::result<void>> next(std::uint64_t s,
                                      std::vector<const std::uint8_t*>& blocks) override {
        FJORD_CO_TRY(co_await _reader.read(s, _targets));
        for (unsigned i = 0; i < _width; ++i) blocks[i] = _reader.block(i);
        co_return base::result<void>{};
    }

private:
    stripe_reader& _reader;
    const std::vector<unsigned>& _targets;
    unsigned _width;
};

// The nodes of the set that lack the decided version (`targets`), after withdrawing what failed
// writes left there long enough ago; `unreachable` when a node could not be judged now.
io::task<std::vector<unsigned>> heal_targets(cluster_store* self, const key_place& place,
                                             const std::vector<node_report>& by_node,
                                             const read_decision& d, bool& unreachable) {
    const std::int64_t now_ms = base::unix_now_ms();
    const stamp decided = d.holders > 0 ? d.meta.version : stamp{};
    // A leftover is withdrawn only when no view can find k sound shards of it: those this read found
    // and one on each node that did not answer stay below k. Otherwise another heal, which heard those
    // nodes, may be taking it up and trimming the versions before it. After the leftover age no write
    // adds a shard (a late commit is refused), and healing copies only what it can read.
    std::size_t silent = 0;
    for (const node_report& r : by_node)
        if (r.kind != node_report::state::present && r.kind != node_report::state::absent) ++silent;
    auto unreadable_anywhere = [&](const stamp& version) {
        std::size_t sound = 0;
        for (unsigned i = 0; i < by_node.size(); ++i)
            for (const shard_meta& v : by_node[i].versions)
                if (v.version == version && v.index == i && v.k == place.k && v.m == place.m &&
                    !v.damaged)
                    ++sound;
        return sound + silent < place.k;
    };
    std::vector<unsigned> targets;
    for (unsigned i = 0; i < place.width(); ++i) {
        const node_report& r = by_node[i];
        if (r.kind == node_report::state::failed || r.kind == node_report::state::pending) {
            unreachable = true;  // healed once it answers
            continue;
        }
        // Versions newer than the readable one (or any, with none readable) are writes that never
        // reached their quorum, or are still going; old enough, they are withdrawn.
        bool settled = true;
        for (const shard_meta& v : r.versions) {
            if (d.holders > 0 && v.version <= decided) continue;
            if (now_ms - written_ms(v) < self->leftover_age_ms() ||
                !unreadable_anywhere(v.version)) {
                settled = false;
                continue;
            }
            LOG_INFO(
                "%s/%s: withdrawing version %s from node %s (a write that never reached its "
                "quorum)",
                place.bucket.c_str(), place.key.c_str(), v.version.text().c_str(),
                place.nodes[i].c_str());
            co_await withdraw(self, place.shard_bucket, place.key, {place.nodes[i]}, v.version);
        }
        if (!settled) {
            unreachable = true;  // this node would refuse the older version now
            continue;
        }
        // Lacking the version, or holding it damaged: it is written there (again).
        if (d.holders > 0 && !d.shards[i]) targets.push_back(i);
    }
    co_return targets;
}

}  // namespace

// Whether healing may take up the decided version now (copy it, trim before it): not a young one below
// W, nor a young manifest or one whose parts are gone. `changes`: the heal would copy or trim.
io::task<base::result<bool>> cluster_store::may_take_up(const key_place& place,
                                                        const read_decision& d, bool changes) {
    const std::int64_t age_ms = base::unix_now_ms() - written_ms(d.meta);
    // Readable but on fewer than W nodes, and young: a write that failed (or is still going) whose
    // writer may yet withdraw it. Copied to the rest now, with the versions before it trimmed, it
    // could be withdrawn from its first nodes after, leaving neither it nor its predecessor readable.
    // It waits for the leftover age, by which its writer has decided it (cluster_write.cc).
    const std::size_t held =
        d.holders + static_cast<std::size_t>(std::count(d.damaged.begin(), d.damaged.end(), true));
    if (held < place.write_quorum() && age_ms < leftover_age_ms()) {
        LOG_DEBUG("heal %s/%s: version %s is on %zu nodes and young: left to its writer for now",
                  place.bucket.c_str(), place.key.c_str(), d.meta.version.text().c_str(), held);
        co_return false;
    }
    if (d.meta.kind != shard_kind::manifest || !changes) co_return true;
    // A manifest is taken up only once it is L old (an abort's removal of the parts, sent when it saw
    // no manifest, has landed by then) and while its parts are all readable. One whose parts are gone
    // (an abort that crossed its completion's commits) is left as it is, its reads failing, and the
    // versions before it stay: withdrawing it could bring back what an acknowledged completion
    // replaced. No heal can repair it, so it is answered as such (the healer sets it aside).
    if (age_ms < leftover_age_ms()) co_return false;
    auto parts = co_await parts_readable(place, d.meta);
    if (parts && !*parts)
        co_return base::fail(base::errc::data_corrupted,
                             "version " + d.meta.version.text() +
                                 " is a manifest whose parts are gone: unrepairable");
    co_return parts && *parts;
}

io::task<base::result<bool>> cluster_store::heal_key(key_place place) {
    auto reports = co_await read_records(place, {place.key}, true);
    std::vector<node_report> by_node;
    for (auto& node : reports) by_node.push_back(std::move(node[0]));
    refresh_marks(place);
    auto d = decide_version(place, by_node);
    if (!d) co_return d.as_failure();
    const std::int64_t now_ms = base::unix_now_ms();
    const stamp decided = d->holders > 0 ? d->meta.version : stamp{};
    bool unreachable = false;
    std::vector<unsigned> targets = co_await heal_targets(this, place, by_node, *d, unreachable);
    LOG_DEBUG("heal %s/%s (%c): version %s, %zu sound holders of %u, %zu targets%s",
              place.bucket.c_str(), place.key.c_str(), place.space, decided.text().c_str(),
              d->holders, place.width(), targets.size(), unreachable ? ", a node not settled" : "");
    if (d->holders == 0) co_return !unreachable;
    auto may = co_await may_take_up(place, *d, !targets.empty() || d->others);
    if (!may) co_return may.as_failure();
    if (!*may) co_return false;
    if (d->meta.kind == shard_kind::deleted && d->full_width && !unreachable &&
        now_ms - decided.unix_ms() > _options.tombstone_age_ms) {
        // Every node has had the deletion for long: the tombstones go too, and what they hid. Only
        // once every node confirmed the trim: a tombstone withdrawn from a node whose trim was
        // skipped (suspect) or failed would leave what it hid there, readable again.
        auto trimmed =
            co_await trim_where(this, place.shard_bucket, place.key, place.nodes, decided);
        if (trimmed.size() != place.nodes.size()) co_return false;
        co_await withdraw(this, place.shard_bucket, place.key, place.nodes, decided);
        co_return true;
    }
    // Healing brings the decided version to the nodes that lack it; it never trims past it.
    FJORD_ASSERT(d->holders <= place.width() && targets.size() + d->holders <= place.width());
    if (targets.empty()) {
        if (!unreachable && d->others)  // full width: the older versions go
            co_await trim(this, place.shard_bucket, place.key, place.nodes, decided);
        co_return !unreachable;
    }
    const stripe_layout layout = d->meta.layout();
    std::optional<stripe_reader> reader;
    std::optional<heal_feed> feed;
    if (d->meta.kind == shard_kind::object && layout.stripes() > 0) {
        reader.emplace(*this, place, *d, 0, layout.stripes() - 1);
        feed.emplace(*reader, targets, place.width());
    }
    const std::size_t wanted = targets.size();
    // "At most the decided version": a node that lacks it takes it over an older one, and one that
    // holds it damaged takes it in place of that copy (the same version id).
    auto streamed = co_await stream_version(
        *this, place, targets, d->meta, acceptance{acceptance::rule::at_most, decided},
        feed ? &*feed : nullptr, 1, [](shard_meta&) -> base::result<void> { return {}; });
    if (!streamed) {
        LOG_WARN("%s/%s: healing version %s failed: %s", place.bucket.c_str(), place.key.c_str(),
                 decided.text().c_str(), streamed.err().message.c_str());
        co_return streamed.as_failure();
    }
    for (const auto& u : streamed->uploads)
        if (u.kind != upload::state::stored)
            LOG_WARN("%s/%s: healing version %s onto node %s failed: %s%s", place.bucket.c_str(),
                     place.key.c_str(), decided.text().c_str(), u.node.c_str(),
                     u.failure.message.c_str(),
                     u.held.empty() ? "" : (" (it holds " + u.held + ")").c_str());
    const std::size_t stored = count_in(streamed->uploads, upload::state::stored);
    if (stored > 0)
        LOG_INFO("%s/%s: healed %zu shard(s) of version %s", place.bucket.c_str(),
                 place.key.c_str(), stored, decided.text().c_str());
    FJORD_ASSERT(stored <= wanted && wanted == targets.size());
    const bool complete = !unreachable && stored == wanted;
    if (complete) co_await trim(this, place.shard_bucket, place.key, place.nodes, decided);
    co_return complete;
}

}  // namespace fjord::cluster
