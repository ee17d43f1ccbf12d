// The cluster's writes: a version of a key (data or a tombstone) striped over its set's nodes.
#include <algorithm>
#include <cstring>

#include "base/assert.h"
#include "base/checksum.h"
#include "base/clock.h"
#include "base/log.h"
#include "cluster/cluster_store.h"
#include "cluster/memory_source.h"
#include "cluster/stripe_writer.h"

namespace fjord::cluster {

namespace {

// Reads exactly `len` bytes of the body (fewer only at its end).
io::task<base::result<std::size_t>> read_full(store::byte_source& body, std::uint8_t* dst,
                                              std::size_t len) {
    std::size_t got = 0;
    while (got < len) {
        auto n = co_await body.read(reinterpret_cast<std::byte*>(dst + got), len - got);
        if (!n) co_return n;
        if (*n == 0) break;
        got += *n;
    }
    co_return got;
}

// The body must end here.
io::task<base::result<void>> expect_end(store::byte_source& body) {
    std::uint8_t extra = 0;
    auto more = co_await read_full(body, &extra, 1);
    if (!more) co_return more.as_failure();
    if (*more != 0)
        co_return base::fail(base::errc::incomplete_body, "the body is longer than declared");
    co_return base::result<void>{};
}

// The stripes of a write: read from the body and encoded; the data blocks' CRCs are what the front
// end derives its entity tag from.
class body_feed final : public stripe_feed {
public:
    body_feed(store::byte_source& body, const stripe_layout& layout, const erasure_code& code)
        : _body(body), _layout(layout), _code(code) {
        if (layout.stripes() > 0)
            _stripe.resize(std::size_t{layout.k + layout.m} * layout.block_of(0));
    }
    io::task<base::result<void>> next(std::uint64_t s,
                                      std::vector<const std::uint8_t*>& blocks) override {
        const std::uint32_t bl = _layout.block_of(s);
        const std::size_t data = _layout.data_in(s);
        auto got = co_await read_full(_body, _stripe.data(), data);
        if (!got) co_return got.as_failure();
        if (*got != data)
            co_return base::fail(base::errc::incomplete_body,
                                 "the body ended after " +
                                     std::to_string(_layout.data_offset(s) + *got) + " of " +
                                     std::to_string(_layout.object_bytes) + " bytes");
        if (s + 1 == _layout.stripes()) FJORD_CO_TRY(co_await expect_end(_body));
        std::memset(_stripe.data() + data, 0, std::size_t{_layout.k} * bl - data);
        std::vector<const std::uint8_t*> in(_layout.k);
        std::vector<std::uint8_t*> out(_layout.m);
        for (unsigned j = 0; j < _layout.k; ++j) in[j] = _stripe.data() + std::size_t{j} * bl;
        for (unsigned j = 0; j < _layout.m; ++j)
            out[j] = _stripe.data() + std::size_t{_layout.k + j} * bl;
        _code.encode(in, out, bl);
        for (unsigned i = 0; i < _layout.k + _layout.m; ++i)
            blocks[i] = _stripe.data() + std::size_t{i} * bl;
        for (unsigned j = 0; j < _layout.k; ++j)
            data_crcs.push_back(
                base::crc32c(std::span(reinterpret_cast<const std::byte*>(in[j]), bl)));
        co_return base::result<void>{};
    }
    std::vector<std::uint32_t> data_crcs;

private:
    store::byte_source& _body;
    const stripe_layout& _layout;
    const erasure_code& _code;
    std::vector<std::uint8_t> _stripe;
};

// A body of undeclared length, read whole (the stripes need the length first).
io::task<base::result<std::string>> read_unsized(store::byte_source& body, std::uint64_t limit) {
    std::string bytes;
    constexpr std::size_t step = 256 * 1024;
    for (;;) {
        const std::size_t old = bytes.size();
        if (old > limit)
            co_return base::fail(
                base::errc::entity_too_large,
                "a body of unknown length over " + std::to_string(limit) + " bytes");
        bytes.resize(old + step);
        auto n = co_await body.read(reinterpret_cast<std::byte*>(bytes.data() + old), step);
        if (!n) co_return n.as_failure();
        bytes.resize(old + *n);
        if (*n == 0) break;
    }
    if (bytes.size() > limit) co_return base::fail(base::errc::entity_too_large, "too large");
    co_return bytes;
}

// The debug log's account of a write: how many nodes stored it, and why each other one did not.
void log_write(const key_place& place, const stamp& version, shard_kind kind,
               const std::vector<upload>& ups) {
    if (base::current_log_level() > base::log_level::debug) return;
    LOG_DEBUG("write %s/%s version %s (%c): %zu of %u nodes stored it", place.bucket.c_str(),
              place.key.c_str(), version.text().c_str(), static_cast<char>(kind),
              count_in(ups, upload::state::stored), place.width());
    for (const upload& u : ups) {
        if (u.kind == upload::state::stored) continue;
        const bool refused = u.kind == upload::state::refused;
        LOG_DEBUG("write %s/%s version %s: not on %s (%s%s)", place.bucket.c_str(),
                  place.key.c_str(), version.text().c_str(), u.node.c_str(),
                  refused ? "refused, it holds " : "",
                  refused ? u.held.c_str() : u.failure.message.c_str());
    }
}

}  // namespace

io::task<base::result<store::object_record>> cluster_store::write_version(
    const key_place& place, store::byte_source* body, std::uint64_t size_bytes,
    const store::record_finisher& finish, shard_kind kind, acceptance accept, stamp version,
    std::string upload_id, std::vector<manifest_part> parts) {
    const unsigned n = place.width();
    auto code = erasure_code::make(place.k, place.m);
    if (!code) co_return code.as_failure();
    shard_meta meta;
    meta.version = version;
    meta.kind = kind;
    meta.k = place.k;
    meta.m = place.m;
    meta.block_bytes = place.block_bytes;
    meta.object.size_bytes = size_bytes;
    meta.upload_id = std::move(upload_id);
    meta.parts = std::move(parts);
    const stripe_layout layout = meta.layout();
    if (body && size_bytes == 0) FJORD_CO_TRY(co_await expect_end(*body));
    std::optional<body_feed> feed;
    if (body) feed.emplace(*body, layout, *code);
    // Once the last stripe is sent, the front end builds the record.
    auto complete = [&](shard_meta& m) -> base::result<void> {
        if (kind != shard_kind::deleted) {
            auto built = finish(store::written_data{
                size_bytes, feed ? std::span<const std::uint32_t>(feed->data_crcs)
                                 : std::span<const std::uint32_t>()});
            if (!built) return built.as_failure();
            m.object = std::move(*built);
        }
        m.object.size_bytes = size_bytes;
        m.object.segments.clear();
        m.object.inline_data.clear();
        // When the write completes, which is also what healing ages a failed write's leftovers
        // from (a long upload's stamp is as old as its first byte).
        m.object.modified_ms = base::unix_now_ms();
        return {};
    };
    std::vector<unsigned> all(n);
    for (unsigned i = 0; i < n; ++i) all[i] = i;
    auto streamed =
        co_await stream_version(*this, place, std::move(all), meta, accept, feed ? &*feed : nullptr,
                                place.write_quorum(), complete, leftover_age_ms() / 2);
    if (!streamed) co_return streamed.as_failure();
    const std::vector<upload>& ups = streamed->uploads;
    const std::size_t stored = count_in(ups, upload::state::stored);
    log_write(place, version, kind, ups);
    // The write is decided, acknowledged or withdrawn, within half the leftover age of its last byte;
    // healing takes up a version below its quorum only after the whole age.
    const std::int64_t decide_by = streamed->meta.object.modified_ms + leftover_age_ms() / 2;
    const bool in_time = base::unix_now_ms() < decide_by;
    if (stored >= place.write_quorum() && in_time) {
        // Acknowledged: the versions before it go from the nodes that have it (the others keep theirs
        // until healing brings this one there).
        std::vector<std::string> holders;
        for (const auto& u : ups)
            if (u.kind == upload::state::stored) holders.push_back(u.node);
        // Versions below this one are trimmed only where it is stored, and only once it is on a
        // write quorum: a read quorum then always finds it, so nothing older is needed.
        FJORD_ASSERT(holders.size() == stored && holders.size() >= place.write_quorum() &&
                     holders.size() <= place.width());
        io::spawn(trim(this, place.shard_bucket, place.key, std::move(holders), version));
        if (stored < n) queue_heal(place);
        co_return streamed->meta.object;
    }
    co_return write_failed(place, ups, accept, version, in_time ? decide_by : 0);
}

// A write not acknowledged: withdrawn from the nodes that may hold it when it cannot have reached its
// quorum; the answer says why.
base::failure cluster_store::write_failed(const key_place& place, const std::vector<upload>& ups,
                                          acceptance accept, stamp version,
                                          std::int64_t withdraw_by) {
    const std::size_t stored = count_in(ups, upload::state::stored);
    std::vector<std::string> holders;
    for (const auto& u : ups)
        if (u.kind == upload::state::stored || u.maybe_stored) holders.push_back(u.node);
    const bool anywhere = !holders.empty();
    // On W nodes or more (some answers lost), it may be what a reader saw and what healing is copying
    // to the rest (and trimming older versions after): withdrawn from some of them, it could leave
    // neither it nor the version before it readable. Healing decides it.
    if (anywhere && holders.size() < place.write_quorum() && withdraw_by > 0)
        io::spawn(withdraw(this, place.shard_bucket, place.key, std::move(holders), version,
                           withdraw_by));
    else if (anywhere)
        queue_heal(place);
    if (count_in(ups, upload::state::refused) > 0) {
        for (const auto& u : ups)  // a retry is then ordered after what refused this one
            if (auto held = stamp::parse(u.held)) {
                _clock.observe(*held);
                if (accept.kind == acceptance::rule::newer) remember_held(place, *held);
            }
        // A conditional write refused by a version that came after the one it read: 409
        // ConditionalRequestConflict says it did not happen, as S3 answers a conflicting concurrent
        // write, but only when no node stored it (a write that some nodes took was visible to a
        // reader that caught them; its outcome is unknown: 503, retry). Not 412: the version that
        // refused it may be a write still under way that fails, so the condition may never have
        // been false for anyone (the linearizability check found such a 412 for a create whose
        // key stayed absent).
        if (accept.kind == acceptance::rule::at_most && !anywhere)
            return base::fail(base::errc::conditional_request_conflict,
                              "another write to the key came first: try again");
        return base::fail(base::errc::slow_down,
                          "a newer write to the key crossed this one: try again");
    }
    if (stored >= place.write_quorum())
        return base::fail(base::errc::service_unavailable,
                          "the nodes stored the write too late for it to be acknowledged");
    return base::fail(base::errc::service_unavailable,
                      "only " + std::to_string(stored) + " of " + std::to_string(place.width()) +
                          " nodes of the set stored the write (" +
                          std::to_string(place.write_quorum()) + " needed): " + first_failure(ups));
}

// The version a conditional write must not have been preceded by (nullopt: the key is absent), or the
// condition's failure.
io::task<base::result<std::optional<stamp>>> cluster_store::current_for_condition(
    const key_place& place, const store::write_conditions& conditions) {
    auto decision = co_await quorum_read(place);
    if (!decision) co_return decision.as_failure();
    const bool exists = decision->found;
    if (conditions.if_none_match_any && exists)
        co_return base::fail(base::errc::precondition_failed, "a write condition does not hold");
    if (conditions.if_match_etag) {
        if (!exists) co_return base::fail(base::errc::no_such_key, "no such key");
        if (*conditions.if_match_etag != "*" &&
            *conditions.if_match_etag != decision->meta.object.etag)
            co_return base::fail(base::errc::precondition_failed,
                                 "a write condition does not hold");
    }
    // A tombstone is a version to follow too.
    if (decision->holders == 0) co_return std::optional<stamp>{};
    co_return std::optional<stamp>(decision->meta.version);
}

// A version this node's clock does not follow (stamped more than max_skew_ms ahead of it, by a node
// whose clock runs ahead) refused an unconditional write of the key: remembered, so that the next one
// goes past it instead of being refused until real time catches up.
void cluster_store::remember_held(const key_place& place, const stamp& held) {
    constexpr std::size_t max_held_ahead = 4096;
    if (held.unix_ms() - base::unix_now_ms() <= stamp_clock::max_skew_ms) return;  // followed
    auto& remembered = local_held_ahead();
    if (remembered.size() >= max_held_ahead) remembered.clear();
    stamp& at = remembered[place.shard_bucket + '\0' + place.key];
    at = std::max(at, held);
}

// An unconditional write's version: the clock's next, past a version held ahead of it if one is known.
stamp cluster_store::unconditional_version(const key_place& place) {
    const stamp next = _clock.next();
    auto& remembered = local_held_ahead();
    auto it = remembered.find(place.shard_bucket + '\0' + place.key);
    if (it == remembered.end()) return next;
    if (it->second < next) {  // real time has caught up
        remembered.erase(it);
        return next;
    }
    it->second = stamp{it->second.time + 1, _clock.node()};
    FJORD_ASSERT(next < it->second);
    return it->second;
}

io::task<base::result<std::pair<acceptance, stamp>>> cluster_store::version_for_write(
    const key_place& place, const store::write_conditions& conditions) {
    if (!conditions.if_none_match_any && !conditions.if_match_etag)
        co_return std::pair<acceptance, stamp>{acceptance{}, unconditional_version(place)};
    auto current = co_await current_for_condition(place, conditions);
    if (!current) co_return current.as_failure();
    acceptance accept{acceptance::rule::at_most, current->value_or(stamp{})};
    co_return std::pair<acceptance, stamp>{accept, _clock.next_after(accept.bound)};
}

io::task<base::result<store::object_record>> cluster_store::put(store::put_request request,
                                                                store::byte_source& body,
                                                                store::record_finisher finish) {
    auto where = place(request.bucket, request.key);
    if (!where) co_return where.as_failure();
    co_await operations().acquire();
    io::semaphore::permit admitted(operations());
    std::optional<memory_source> buffered;
    store::byte_source* source = &body;
    std::uint64_t size = request.size_bytes.value_or(0);
    if (!request.size_bytes) {
        auto bytes = co_await read_unsized(
            body, std::min(request.max_size_bytes, _options.max_unsized_put_bytes));
        if (!bytes) co_return bytes.as_failure();
        size = bytes->size();
        buffered.emplace(std::move(*bytes));
        source = &*buffered;
    }
    if (size > request.max_size_bytes)
        co_return base::fail(base::errc::entity_too_large,
                             "the declared size is larger than the maximum");
    auto version = co_await version_for_write(*where, request.conditions);
    if (!version) co_return version.as_failure();
    co_return co_await write_version(*where, source, size, finish, shard_kind::object,
                                     version->first, version->second);
}

io::task<base::result<std::optional<store::object_record>>> cluster_store::remove(
    std::string bucket, std::string key, store::write_conditions conditions) {
    auto where = place(bucket, key);
    if (!where) co_return where.as_failure();
    auto version = co_await version_for_write(*where, conditions);
    if (!version) co_return version.as_failure();
    auto written = co_await write_version(*where, nullptr, 0, {}, shard_kind::deleted,
                                          version->first, version->second);
    if (!written) co_return written.as_failure();
    co_return std::optional<store::object_record>{};
}

}  // namespace fjord::cluster
