#include "cluster/healer.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "base/checksum.h"
#include "base/clock.h"
#include "base/log.h"
#include "cluster/placement.h"
#include "cluster/shard_service.h"
#include "io/ops.h"
#include "io/reactor.h"

namespace fjord::cluster {

namespace {

constexpr std::size_t queue_batch = 256;
constexpr std::size_t max_deferred = 100'000;
// Keys a scan reads records of in one request per set: a record can be large (a manifest of 10,000
// parts is about 240 KB), and the answer must stay within the data plane's 16 MiB.
constexpr std::uint32_t scan_page_keys = 48;
constexpr std::int64_t retry_ms = 1'000;
constexpr std::int64_t max_retry_ms = 60'000;
constexpr std::size_t max_set_aside = 100'000;

std::string deferred_name(const cluster_store::heal_item& item) {
    return item.bucket + '\0' + item.space + item.key;
}

bool unrepairable(const base::result<bool>& healed) {
    return !healed && healed.code() == base::errc::data_corrupted;
}

// Checks a shard's bytes, as the engine reads them back, against the CRC32C of each of its blocks.
class crc_check_sink final : public store::byte_sink {
public:
    explicit crc_check_sink(const shard_meta& meta) : _meta(meta), _layout(meta.layout()) {}
    io::task<base::result<void>> write(std::span<const std::byte> data) override {
        while (!data.empty()) {
            if (_stripe >= _layout.stripes())
                co_return base::fail(base::errc::data_corrupted, "a shard longer than its record");
            const std::size_t n =
                std::min<std::size_t>(data.size(), _layout.block_of(_stripe) - _in_block);
            _crc = base::crc32c(data.first(n), _crc);
            data = data.subspan(n);
            _in_block += n;
            if (_in_block == _layout.block_of(_stripe)) {
                if (_crc != _meta.block_crcs[_stripe])
                    co_return base::fail(base::errc::data_corrupted,
                                         "block " + std::to_string(_stripe) + " fails its CRC32C");
                ++_stripe;
                _in_block = 0;
                _crc = 0;
            }
        }
        co_return base::result<void>{};
    }
    bool complete() const { return _stripe == _layout.stripes(); }

private:
    const shard_meta& _meta;
    stripe_layout _layout;
    std::uint64_t _stripe = 0;
    std::uint64_t _in_block = 0;
    std::uint32_t _crc = 0;
};

bool stopping() { return io::reactor::current().stopping(); }

// Of the nodes holding the newest version (or, with none readable, any record), the one that scores
// highest for the key (rendezvous hashing), which heals it: the keys a lost node held are rebuilt by
// all the other nodes of its set, not all by one.
std::string choose_actor(const key_place& place, const read_decision& d,
                         const std::vector<node_report>& by_node) {
    std::string actor;
    std::uint64_t best = 0;
    for (unsigned i = 0; i < place.width(); ++i) {
        const bool counts = d.holders > 0 ? d.shards[i].has_value()
                                          : by_node[i].kind == node_report::state::present;
        const std::uint64_t score = object_hash(place.nodes[i], place.key);
        if (counts && (actor.empty() || score > best)) actor = place.nodes[i], best = score;
    }
    return actor;
}

}  // namespace

healer::healer(cluster_store& cluster, store::object_store& local, healer_options options)
    : _cluster(cluster), _local(local), _options(options), _node(cluster.options().node_id) {}

void healer::request_scan(std::int64_t id) {
    std::int64_t seen = _requested.load();
    while (id > seen && !_requested.compare_exchange_weak(seen, id)) {}
}

std::string healer::stats_json() const {
    nlohmann::json scan = {{"started_unix_ms", _scan_started_ms.load()},
                           {"finished_unix_ms", _scan_finished_ms.load()},
                           {"keys", _scan_keys.load()},
                           {"degraded", _scan_degraded.load()},
                           {"healed", _scan_healed.load()},
                           {"remaining", _scan_remaining.load()},
                           {"unrepairable", _scan_unrepairable.load()},
                           {"unreachable", _scan_unreachable.load()},
                           {"request", _completed_request.load()}};
    return nlohmann::json{{"queue", _cluster.heal_queue_length() + _deferred_size.load()},
                          {"queue_dropped", _cluster.heal_queue_dropped()},
                          {"healed", _healed.load()},
                          {"corrupt", _corrupt.load()},
                          {"unrepairable", _set_aside_size.load()},
                          {"scans", _scans.load()},
                          {"scan", scan}}
        .dump();
}

io::task<void> healer::run() {
    std::int64_t last_scan_ms = base::unix_now_ms();
    while (!stopping()) {
        for (std::int64_t waited = 0; waited < _options.queue_interval_ms && !stopping();
             waited += 100)
            co_await pause(100);
        if (stopping() || !_cluster.ready()) continue;
        co_await drain_queue(false);
        const std::int64_t now = base::unix_now_ms();
        if (_requested.load() > _completed_request.load() ||
            now - last_scan_ms >= _options.scan_interval_ms) {
            last_scan_ms = now;
            co_await scan();
            co_await drain_queue(true);  // what the scan healed leaves the queue at once
        }
    }
}

io::task<void> healer::drain_queue(bool everything_due) {
    std::vector<cluster_store::heal_item> items =
        _cluster.take_heal_queue(everything_due ? SIZE_MAX : queue_batch);
    const std::int64_t now = base::unix_now_ms();
    // Keys waiting for a retry stay in `_deferred` (one entry per key, its delay doubling up to
    // max_retry_ms); a key queued again meanwhile waits for its turn there instead of being tried now.
    std::vector<std::string> due;
    for (auto& item : items) {
        const std::string name = deferred_name(item);
        auto it = _deferred.find(name);
        if (it == _deferred.end())
            _deferred.emplace(name, deferred{now, retry_ms, std::move(item)});
    }
    for (auto& [name, d] : _deferred)
        if (everything_due || d.at_ms <= now) due.push_back(name);
    for (const auto& name : due) {
        if (stopping()) break;
        auto it = _deferred.find(name);
        if (it == _deferred.end()) continue;
        const cluster_store::heal_item& item = it->second.item;
        auto place = _cluster.place_in(item.space, item.bucket, item.object_key, item.key);
        bool done = !place;  // the bucket is gone
        if (place) {
            auto healed = co_await _cluster.heal_key(*place);
            done = healed && *healed;
            if (unrepairable(healed)) {
                set_aside(*place, healed.err().message);
                done = true;  // no retry can help: set aside, not tried every minute forever
            } else if (done) {
                take_back(*place);
            }
        }
        it = _deferred.find(name);  // (the map may have changed while healing)
        if (it == _deferred.end()) continue;
        if (done) {
            if (place) ++_healed;
            _deferred.erase(it);
        } else {
            it->second.at_ms = base::unix_now_ms() + it->second.delay_ms;
            it->second.delay_ms = std::min(it->second.delay_ms * 2, max_retry_ms);
        }
    }
    while (_deferred.size() > max_deferred) _deferred.erase(std::prev(_deferred.end()));
    _deferred_size = _deferred.size();
}

io::task<void> healer::scan() {
    const std::int64_t request = _requested.load();
    _scan_started_ms = base::unix_now_ms();
    _scan_finished_ms = 0;
    _scan_keys = _scan_degraded = _scan_healed = _scan_remaining = _scan_unreachable = 0;
    _scan_unrepairable = 0;
    _pace_started_ms = base::unix_now_ms();
    _paced_keys = 0;
    _verified_bytes = 0;
    auto snap = _cluster.snapshot();
    for (const auto& [name, b] : snap->buckets)
        for (char space : {'c', 'u', 'p'}) {  // objects, upload records, parts
            if (stopping()) co_return;
            co_await scan_bucket(name, space, shard_bucket(name, b.generation, space));
        }
    _scan_finished_ms = base::unix_now_ms();
    ++_scans;
    _completed_request = request;
    if (_scan_degraded.load() > 0 || _scan_unreachable.load() > 0)
        LOG_INFO(
            "cluster scan: %llu keys, %llu below full width, %llu healed, %llu remaining, "
            "%llu not decidable now, %llu unrepairable",
            static_cast<unsigned long long>(_scan_keys.load()),
            static_cast<unsigned long long>(_scan_degraded.load()),
            static_cast<unsigned long long>(_scan_healed.load()),
            static_cast<unsigned long long>(_scan_remaining.load()),
            static_cast<unsigned long long>(_scan_unreachable.load()),
            static_cast<unsigned long long>(_scan_unrepairable.load()));
}

io::task<void> healer::scan_bucket(std::string bucket, char space, std::string shard_bucket) {
    if (!_local.bucket_exists(shard_bucket)) co_return;
    std::string after;
    for (;;) {
        if (stopping()) co_return;
        store::list_request request;
        request.bucket = shard_bucket;
        request.start_after = after;
        request.max_keys = scan_page_keys;
        auto page = co_await _local.list(request);
        if (!page || page->entries.empty()) co_return;
        std::vector<std::string> keys;
        for (const auto& e : page->entries)
            if (!e.is_prefix) keys.push_back(e.name);
        after = page->entries.back().name;
        co_await scan_keys(bucket, space, std::move(keys));
        if (!page->truncated) co_return;
    }
}

io::task<void> healer::scan_keys(std::string bucket, char space, std::vector<std::string> keys) {
    // A key of the upload and part namespaces is "<object key>\0...": its set is the object key's.
    auto place_of = [&](const std::string& key) {
        return _cluster.place_in(space, bucket, key.substr(0, key.find('\0')), key);
    };
    // One batch of record reads per set.
    std::map<std::vector<std::string>, std::vector<std::string>> by_set;
    for (auto& key : keys) {
        auto place = place_of(key);
        if (!place) co_return;  // the bucket went away
        by_set[place->nodes].push_back(std::move(key));
    }
    for (auto& [nodes, set_keys] : by_set) {
        auto first = place_of(set_keys.front());
        if (!first) co_return;
        auto reports = co_await _cluster.read_records(*first, set_keys);
        for (std::size_t j = 0; j < set_keys.size(); ++j) {
            if (stopping()) co_return;
            ++_scan_keys;
            auto place = place_of(set_keys[j]);
            if (!place) co_return;
            for (unsigned i = 0; i < place->width(); ++i)  // marked when the read began, or now
                if (first->rebuilding[i]) place->rebuilding[i] = true;
            std::vector<node_report> by_node;
            for (auto& node : reports) by_node.push_back(std::move(node[j]));
            auto d = decide_version(*place, by_node);
            if (!d) {
                ++_scan_unreachable;
                continue;
            }
            const auto me = std::find(nodes.begin(), nodes.end(), _node) - nodes.begin();
            std::string actor = choose_actor(*place, *d, by_node);
            const bool old_tombstone = d->holders > 0 && d->meta.kind == shard_kind::deleted &&
                                       base::unix_now_ms() - d->meta.version.unix_ms() >
                                           _cluster.options().tombstone_age_ms;
            bool degraded = !d->full_width || d->others || old_tombstone;
            // Verification: this node's own shard of the newest version.
            if (static_cast<std::size_t>(me) < nodes.size() && d->shards[me] &&
                d->meta.kind == shard_kind::object &&
                !co_await verify_local(*place, *d->shards[me])) {
                ++_corrupt;
                degraded = true;
                actor = _node;  // its own shard: it rebuilds it
            }
            if (!degraded && !_set_aside.empty()) take_back(*place);  // written again since
            if (degraded && actor == _node) {
                ++_scan_degraded;
                auto healed = co_await _cluster.heal_key(*place);
                if (healed && *healed) {
                    ++_scan_healed;
                    ++_healed;
                    take_back(*place);
                } else if (unrepairable(healed)) {
                    ++_scan_unrepairable;
                    set_aside(*place, healed.err().message);
                } else {
                    ++_scan_remaining;
                }
            }
            co_await pace_keys(1);
        }
    }
}

void healer::set_aside(const key_place& place, const std::string& why) {
    std::string name = place.bucket + '\0' + place.space + place.key;
    if (_set_aside.count(name) > 0 || _set_aside.size() >= max_set_aside) return;
    _set_aside.insert(std::move(name));
    _set_aside_size = _set_aside.size();
    LOG_ERROR("%s/%s: %s; set aside (reported once; a new write of the key replaces it)",
              place.bucket.c_str(), place.key.c_str(), why.c_str());
}

void healer::take_back(const key_place& place) {
    if (_set_aside.erase(place.bucket + '\0' + place.space + place.key) > 0)
        _set_aside_size = _set_aside.size();
}

// Reads this node's shard back; false (after marking it damaged, so that healing rewrites it) when it
// is damaged.
io::task<bool> healer::verify_local(const key_place& place, const shard_meta& meta) {
    const std::uint64_t bytes = meta.layout().shard_bytes();
    if (bytes == 0) co_return true;
    const std::string version = meta.version.text();
    auto plan =
        [&](const store::object_record& r) -> base::result<std::optional<store::byte_range>> {
        if (!r.etag.starts_with(version))
            return base::fail(base::errc::precondition_failed, "replaced");
        return std::optional<store::byte_range>(store::byte_range{0, bytes});
    };
    crc_check_sink sink(meta);
    auto read = co_await local_versions(_local, place.shard_bucket)
                    .get_version(place.shard_bucket, place.key, version, plan, sink);
    _verified_bytes += bytes;
    if (read || read.code() == base::errc::precondition_failed ||
        read.code() == base::errc::no_such_key || read.code() == base::errc::no_such_version)
        co_return true;  // sound, or removed meanwhile
    if (read.code() != base::errc::data_corrupted && read.code() != base::errc::not_found)
        co_return true;  // not a verdict on the bytes (an I/O error is retried next scan)
    LOG_WARN("%s/%s: this node's shard %u of version %s is damaged (%s): marked, to be rebuilt",
             place.bucket.c_str(), place.key.c_str(), meta.index, version.c_str(),
             read.err().message.c_str());
    co_await mark_damaged(_local, place.shard_bucket, place.key, version);
    co_return false;
}

io::task<void> healer::pace_keys(std::size_t keys) {
    _paced_keys += keys;
    const std::int64_t elapsed = base::unix_now_ms() - _pace_started_ms;
    const std::int64_t by_keys = static_cast<std::int64_t>(
        _paced_keys * 1000 / std::max<std::uint64_t>(1, _options.scan_keys_per_second));
    const std::int64_t by_bytes = static_cast<std::int64_t>(
        _verified_bytes * 1000 / std::max<std::uint64_t>(1, _options.verify_bytes_per_second));
    const std::int64_t ahead = std::max(by_keys, by_bytes) - elapsed;
    if (ahead > 0) co_await pause(std::min<std::int64_t>(ahead, 1000));
}

io::task<void> healer::pause(std::int64_t ms) {
    if (_options.pause)
        co_await _options.pause(ms);
    else
        co_await io::sleep_for(ms);
}

}  // namespace fjord::cluster
