// Multipart uploads in the cluster (cluster_store.h, "multipart uploads").
//
// An upload's record is a small object of the bucket's 'u' namespace under "<key>\0<upload id>"; each
// attempt at a part an object of the 'p' namespace under "<key>\0<upload id>\0<part number, 5
// digits>\0<stamp>", written once and never replaced: an upload of a part again (or one still running
// when the upload completes) writes a new key, so a manifest's parts cannot change under it. The
// newest attempt of a number is the part. Both live in the set the object's key is placed in, so
// batches of record reads cover every part. Completing
// writes the key's new version as a manifest: the record the front end built and the parts it chose,
// each named by its version, whose objects then hold the bytes (no byte is copied). A read of a
// manifest reads its parts in turn. What the upload leaves (its record, the parts not chosen) is
// removed afterwards; what that misses the scanner finds.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <sys/random.h>

#include "base/clock.h"
#include "base/digest.h"
#include "base/encoding.h"
#include "base/log.h"
#include "cluster/byte_pipe.h"
#include "cluster/cluster_store.h"
#include "cluster/memory_source.h"
#include "cluster/stripe_writer.h"
#include "io/wait_group.h"
#include "store/codec.h"

namespace fjord::cluster {

namespace {

constexpr std::uint8_t upload_format = 1;
constexpr std::uint32_t page_keys = 1000;
constexpr std::size_t records_per_read = 100;  // part records read from the set in one request

// A claim refused because the upload's record is no longer the one it read: its condition failed
// (412), or a write crossed it (409).
bool refused_by_another(const base::error& e) {
    return e.code == base::errc::precondition_failed ||
           e.code == base::errc::conditional_request_conflict;
}

std::string upload_key(const std::string& key, const std::string& upload_id) {
    return key + '\0' + upload_id;
}

std::string part_prefix(const std::string& key, const std::string& upload_id) {
    return upload_key(key, upload_id) + '\0';
}

std::string part_key(const std::string& key, const std::string& upload_id, std::uint32_t number,
                     const stamp& version) {
    char digits[8];
    std::snprintf(digits, sizeof digits, "%05u", number);
    return part_prefix(key, upload_id) + digits + '\0' + version.text();
}

std::string new_upload_id() {
    std::uint64_t words[2] = {};
    if (getrandom(words, sizeof words, 0) != sizeof words)
        words[0] = static_cast<std::uint64_t>(base::monotonic_now_ns());
    char out[33];
    std::snprintf(out, sizeof out, "%016llx%016llx", static_cast<unsigned long long>(words[0]),
                  static_cast<unsigned long long>(words[1]));
    return out;
}

// An upload's record: its header, then (once a completion or an abort claimed it) the claim.
std::string encode_upload(const store::upload_record& u, const upload_claim& claim = {}) {
    std::string out, object;
    store::encoder oe(object);
    store::encode(oe, u.object);
    store::encoder e(out);
    e.u8(upload_format);
    e.i64(u.initiated_ms);
    e.str(u.checksum_type);
    e.str(object);
    if (claim.what != upload_claim::state::open) {
        e.u8(static_cast<std::uint8_t>(claim.what));
        e.str(claim.parts);
        e.i64(claim.at_ms);
    }
    return out;
}

base::result<void> decode_upload(std::string_view bytes, store::upload_record& u,
                                 upload_claim& claim) {
    store::decoder d(bytes);
    if (d.u8() != upload_format) return base::fail(base::errc::data_corrupted, "an upload record");
    u.initiated_ms = d.i64();
    u.checksum_type = d.str();
    const std::string object = d.str();
    store::decoder od(object);
    claim = {};
    if (d.ok() && !d.at_end()) {  // claimed
        const std::uint8_t what = d.u8();
        if (what < 1 || what > 2) return base::fail(base::errc::data_corrupted, "an upload claim");
        claim.what = static_cast<upload_claim::state>(what);
        claim.parts = d.str();
        claim.at_ms = d.i64();
    }
    if (!d.ok() || !d.at_end() || !store::decode(od, u.object))
        return base::fail(base::errc::data_corrupted, "an upload record");
    return {};
}

// The ETag of the record's version in each state: a claim's conditional write names the one it read.
std::string etag_of(upload_claim::state what) {
    switch (what) {
        case upload_claim::state::open: return "upload";
        case upload_claim::state::completing: return "completing";
        case upload_claim::state::aborting: return "aborting";
    }
    return "upload";
}

// The parts a completion chose, as a claim names them (a SHA-256 of their numbers and versions).
std::string chosen_text(const std::vector<manifest_part>& chosen) {
    std::string text;
    for (const auto& p : chosen) text += std::to_string(p.number) + ":" + p.version.text() + ",";
    return base::hex_encode(base::sha256(text));
}

// The bytes of a small object, collected.
class string_sink final : public store::byte_sink {
public:
    io::task<base::result<void>> write(std::span<const std::byte> data) override {
        bytes.append(reinterpret_cast<const char*>(data.data()), data.size());
        co_return base::result<void>{};
    }
    std::string bytes;
};

// A part's record as the front end sees it. Its data segment names the part's object: the part number
// and the version (a manifest lists them).
store::part_record part_of(std::uint32_t number, const shard_meta& meta) {
    store::part_record p;
    p.number = number;
    p.etag = meta.object.etag;
    p.checksum_value = meta.object.checksum_value;
    p.modified_ms = meta.object.modified_ms;
    p.data.size_bytes = meta.object.size_bytes;
    p.data.id = store::object_id{number, meta.version.time};
    p.data.drive = meta.version.node;
    return p;
}

struct part_attempt {
    std::uint32_t number = 0;
    stamp version;
};

// The number and the stamp of a part attempt's key ("...\0<number>\0<stamp>").
std::optional<part_attempt> attempt_of(std::string_view part_local_key) {
    const std::size_t at = part_local_key.rfind('\0');
    if (at == std::string_view::npos || at == 0) return std::nullopt;
    const std::size_t before = part_local_key.rfind('\0', at - 1);
    if (before == std::string_view::npos) return std::nullopt;
    auto n = base::parse_u64(part_local_key.substr(before + 1, at - before - 1));
    auto version = stamp::parse(part_local_key.substr(at + 1));
    if (!n || *n < 1 || *n > 10'000 || !version) return std::nullopt;
    return part_attempt{static_cast<std::uint32_t>(*n), *version};
}

// Of each part number's attempts, the newest durable one and the newest readable one: a part's writer
// may yet withdraw an attempt below W, so it is the part only when no durable attempt is there.
class part_choice {
public:
    void offer(const part_attempt& attempt, store::part_record part, bool durable) {
        keep(_readable, attempt, part);
        if (durable) keep(_durable, attempt, std::move(part));
    }
    void into(std::map<std::uint32_t, store::part_record>& parts) {
        for (auto& [number, newest] : _readable) {
            auto durable = _durable.find(number);
            parts[number] = durable != _durable.end() ? durable->second.second : newest.second;
        }
    }

private:
    using newest = std::map<std::uint32_t, std::pair<stamp, store::part_record>>;
    static void keep(newest& in, const part_attempt& attempt, store::part_record part) {
        auto& [seen, kept] = in[attempt.number];
        if (attempt.version < seen) return;
        seen = attempt.version;
        kept = std::move(part);
    }
    newest _readable, _durable;
};

// Turns a part finisher into the record finisher of the part's object, keeping what it built.
store::record_finisher part_record_finisher(const store::part_finisher& finish,
                                            store::part_record& built) {
    return [&finish, &built](const store::written_data& w) -> base::result<store::object_record> {
        auto part = finish(w);
        if (!part) return part.as_failure();
        built = *part;
        store::object_record r;
        r.etag = part->etag;
        r.checksum_value = part->checksum_value;
        r.modified_ms = part->modified_ms ? part->modified_ms : base::unix_now_ms();
        return r;
    };
}

}  // namespace

base::result<key_place> cluster_store::place_in(char space, const std::string& bucket,
                                                const std::string& object_key,
                                                std::string local_key) const {
    auto where = place(bucket, object_key);
    if (!where) return where;
    if (space != 'c') {
        const auto b = snapshot()->buckets.find(bucket);
        where->shard_bucket = shard_bucket(bucket, b->second.generation, space);
    }
    where->space = space;
    where->key = std::move(local_key);
    return where;
}

io::task<base::result<std::optional<std::string>>> cluster_store::read_small(key_place place) {
    auto decision = co_await quorum_read(place);
    if (!decision) co_return decision.as_failure();
    if (!decision->found) co_return std::optional<std::string>{};
    string_sink sink;
    if (decision->meta.object.size_bytes > 0)
        FJORD_CO_TRY(
            co_await read_object(place, *decision, 0, decision->meta.object.size_bytes, sink));
    co_return std::optional<std::string>(std::move(sink.bytes));
}

io::task<void> cluster_store::purge(key_place place) {
    // A tombstone over every version: healing carries it to the nodes the purge did not reach (down,
    // or passed over as suspect) instead of copying back the version they still hold (on k of them,
    // a readable one). Its write trims the versions before it from the nodes that took it. Where no
    // tombstone can be written (fewer than W nodes take it), every version goes where it can.
    auto version = co_await version_for_write(place, {});
    if (version) {
        auto written = co_await write_version(place, nullptr, 0, {}, shard_kind::deleted,
                                              version->first, version->second);
        if (written) co_return;
    }
    co_await trim(this, place.shard_bucket, place.key, place.nodes, stamp{~0ULL, ~0U});
}

io::task<base::result<void>> cluster_store::read_object(const key_place& place,
                                                        const read_decision& decision,
                                                        std::uint64_t first, std::uint64_t length,
                                                        store::byte_sink& sink) {
    if (decision.meta.kind != shard_kind::manifest)
        co_return co_await read_range(place, decision, first, length, sink);
    std::uint64_t at = 0;
    for (const manifest_part& part : decision.meta.parts) {
        const std::uint64_t from = std::max(at, first);
        const std::uint64_t to = std::min(at + part.size_bytes, first + length);
        if (from < to) {
            auto where = place_in(
                'p', place.bucket, place.object_key,
                part_key(place.object_key, decision.meta.upload_id, part.number, part.version));
            if (!where) co_return where.as_failure();
            auto d = co_await quorum_read(*where);
            if (!d) co_return d.as_failure();
            if (!d->found || d->meta.version != part.version)
                co_return base::fail(
                    base::errc::data_corrupted,
                    "part " + std::to_string(part.number) + " of the object is gone");
            FJORD_CO_TRY(co_await read_range(*where, *d, from - at, to - from, sink));
        }
        at += part.size_bytes;
        if (at >= first + length) break;
    }
    co_return base::result<void>{};
}

io::task<base::result<store::upload_record>> cluster_store::load_upload(
    std::string bucket, std::string key, std::string upload_id, bool with_parts,
    std::vector<std::string>* attempts, upload_claim* claim) {
    auto where = place_in('u', bucket, key, upload_key(key, upload_id));
    if (!where) co_return where.as_failure();
    auto bytes = co_await read_small(*where);
    if (!bytes) co_return bytes.as_failure();
    if (!*bytes) co_return base::fail(base::errc::no_such_upload, "no such upload");
    store::upload_record u;
    u.bucket = bucket;
    u.key = key;
    u.upload_id = upload_id;
    upload_claim found;
    FJORD_CO_TRY(decode_upload(**bytes, u, found));
    if (claim) *claim = found;
    if (!with_parts) co_return u;
    auto parts_place = place_in('p', bucket, key, std::string());
    if (!parts_place) co_return parts_place.as_failure();
    part_choice chosen;
    store::list_request request;
    request.bucket = bucket;
    request.prefix = part_prefix(key, upload_id);
    request.max_keys = page_keys;
    for (;;) {
        auto page = co_await list_shards('p', request);
        if (!page) co_return page.as_failure();
        std::vector<std::string> keys;
        for (const auto& e : page->entries) keys.push_back(e.name);
        if (keys.empty()) break;
        request.start_after = keys.back();
        if (attempts) attempts->insert(attempts->end(), keys.begin(), keys.end());
        for (std::size_t from = 0; from < keys.size(); from += records_per_read) {
            std::vector<std::string> batch(
                keys.begin() + static_cast<std::ptrdiff_t>(from),
                keys.begin() +
                    static_cast<std::ptrdiff_t>(std::min(keys.size(), from + records_per_read)));
            auto reports = co_await read_records(*parts_place, batch);
            refresh_marks(*parts_place);
            for (std::size_t j = 0; j < batch.size(); ++j) {
                std::vector<node_report> by_node;
                for (auto& node : reports) by_node.push_back(std::move(node[j]));
                auto d = decide_version(*parts_place, by_node);
                if (!d) co_return d.as_failure();
                auto attempt = attempt_of(batch[j]);
                if (!d->found || !attempt || d->meta.version != attempt->version) continue;
                // Durable: on W nodes, or older than the leftover age (decided by its writer, or by
                // healing). A younger one below W may be a retried UploadPart still waiting on hung
                // nodes, which its writer may withdraw: chosen over the acknowledged attempt before
                // it, that one would be purged for it.
                const bool durable = d->holders >= parts_place->write_quorum() ||
                                     base::unix_now_ms() - std::max(attempt->version.unix_ms(),
                                                                    d->meta.object.modified_ms) >=
                                         leftover_age_ms();
                chosen.offer(*attempt, part_of(attempt->number, d->meta), durable);
            }
        }
        if (!page->truncated) break;
    }
    chosen.into(u.parts);
    co_return u;
}

io::task<base::result<std::string>> cluster_store::create_upload(std::string bucket,
                                                                 std::string key,
                                                                 store::object_record metadata,
                                                                 std::string checksum_type) {
    store::upload_record u;
    u.upload_id = new_upload_id();
    u.initiated_ms = base::unix_now_ms();
    u.checksum_type = std::move(checksum_type);
    u.object = std::move(metadata);
    auto where = place_in('u', bucket, key, upload_key(key, u.upload_id));
    if (!where) co_return where.as_failure();
    memory_source body(encode_upload(u));
    store::record_finisher finish =
        [&u](const store::written_data&) -> base::result<store::object_record> {
        store::object_record r;
        r.etag = "upload";
        r.modified_ms = u.initiated_ms;
        return r;
    };
    auto written = co_await write_version(*where, &body, body.size(), finish, shard_kind::object,
                                          acceptance{}, _clock.next());
    if (!written) co_return written.as_failure();
    co_return u.upload_id;
}

io::task<base::result<store::upload_record>> cluster_store::get_upload(std::string bucket,
                                                                       std::string key,
                                                                       std::string upload_id) {
    co_return co_await load_upload(std::move(bucket), std::move(key), std::move(upload_id), true);
}

io::task<base::result<void>> cluster_store::require_open_upload(const std::string& bucket,
                                                                const std::string& key,
                                                                const std::string& upload_id) {
    upload_claim claim;
    FJORD_CO_TRY(co_await load_upload(bucket, key, upload_id, false, nullptr, &claim));
    if (claim.what != upload_claim::state::open)
        co_return base::fail(base::errc::no_such_upload,
                             "the upload is being completed or aborted");
    co_return base::result<void>{};
}

io::task<base::result<store::part_record>> cluster_store::upload_part(store::part_request request,
                                                                      store::byte_source& body,
                                                                      store::part_finisher finish) {
    if (!request.size_bytes)
        co_return base::fail(base::errc::length_required, "a part's length must be declared");
    if (*request.size_bytes > request.max_size_bytes)
        co_return base::fail(base::errc::entity_too_large, "the part is too large");
    FJORD_CO_TRY(co_await require_open_upload(request.bucket, request.key, request.upload_id));
    const stamp version = _clock.next();
    auto where = place_in('p', request.bucket, request.key,
                          part_key(request.key, request.upload_id, request.number, version));
    if (!where) co_return where.as_failure();
    co_await operations().acquire();
    io::semaphore::permit admitted(operations());
    store::part_record built;
    auto written = co_await write_version(*where, &body, *request.size_bytes,
                                          part_record_finisher(finish, built), shard_kind::object,
                                          acceptance{}, version);
    if (!written) co_return written.as_failure();
    shard_meta meta;
    meta.version = version;
    meta.object = *written;
    co_return part_of(request.number, meta);
}

io::task<base::result<store::part_record>> cluster_store::copy_part(
    store::part_copy_request request, store::part_copy_planner plan) {
    auto from = place(request.source_bucket, request.source_key);
    if (!from) co_return from.as_failure();
    auto decision = co_await quorum_read(*from);
    if (!decision) co_return decision.as_failure();
    if (!decision->found) co_return base::fail(base::errc::no_such_key, "no such key");
    if (request.source_version_id && !request.source_version_id->empty())
        co_return base::fail(base::errc::no_such_version, "no such version");
    auto planned = plan(decision->meta.object);
    if (!planned) co_return planned.as_failure();
    FJORD_CO_TRY(co_await require_open_upload(request.bucket, request.key, request.upload_id));
    const stamp version = _clock.next();
    auto where = place_in('p', request.bucket, request.key,
                          part_key(request.key, request.upload_id, request.number, version));
    if (!where) co_return where.as_failure();
    co_await operations().acquire();
    io::semaphore::permit admitted(operations());
    store::part_record built;
    byte_pipe pipe;
    io::wait_group reading(1);
    co_await reading.spawn(read_into(*from, *decision, planned->range, &pipe, &planned->observe));
    auto written = co_await write_version(*where, &pipe, planned->range.length,
                                          part_record_finisher(planned->finish, built),
                                          shard_kind::object, acceptance{}, version);
    pipe.close();
    co_await reading.wait();
    if (!written) co_return written.as_failure();
    shard_meta meta;
    meta.version = version;
    meta.object = *written;
    co_return part_of(request.number, meta);
}

io::task<base::result<store::object_record>> cluster_store::complete_upload(
    std::string bucket, std::string key, std::string upload_id, store::upload_finalizer finalize,
    store::write_conditions conditions) {
    std::vector<std::string> attempts;
    upload_claim claim;
    auto upload = co_await load_upload(bucket, key, upload_id, true, &attempts, &claim);
    if (!upload) co_return upload.as_failure();
    if (claim.what == upload_claim::state::aborting)
        co_return base::fail(base::errc::no_such_upload, "the upload is being aborted");
    auto chosen = finalize(*upload);
    if (!chosen) co_return chosen.as_failure();
    auto record = store::assemble_upload(*upload, std::move(*chosen));
    if (!record) co_return record.as_failure();
    std::vector<manifest_part> parts;
    for (const auto& s : record->segments)
        parts.push_back(
            {static_cast<std::uint32_t>(s.id.hi), stamp{s.id.lo, s.drive}, s.size_bytes});
    auto where = place(bucket, key);
    if (!where) co_return where.as_failure();
    // The request's conditions, then the claim: an abort (or a completion choosing other parts)
    // cannot purge what this one chose once it stands, nor this one write a manifest over parts they
    // purge. A manifest refused outright (nothing stored) gives the claim back.
    auto version = co_await version_for_write(*where, conditions);
    if (!version) co_return version.as_failure();
    upload_claim mine;
    FJORD_CO_TRY(co_await claim_for_completion(bucket, key, *upload, claim, parts, mine));
    store::record_finisher finish =
        [&record](const store::written_data&) -> base::result<store::object_record> {
        return *record;
    };
    auto written =
        co_await write_version(*where, nullptr, record->size_bytes, finish, shard_kind::manifest,
                               version->first, version->second, upload_id, parts);
    if (!written && written.code() == base::errc::conditional_request_conflict)
        (void)co_await claim_upload(bucket, key, *upload, mine, upload_claim{});
    if (!written) co_return written.as_failure();
    purge_completed(bucket, key, upload_id, attempts, parts);
    co_return written;
}

void cluster_store::purge_completed(const std::string& bucket, const std::string& key,
                                    const std::string& upload_id,
                                    const std::vector<std::string>& attempts,
                                    const std::vector<manifest_part>& chosen) {
    if (auto u = place_in('u', bucket, key, upload_key(key, upload_id))) io::spawn(purge(*u));
    for (const std::string& attempt_key : attempts) {
        const auto attempt = attempt_of(attempt_key);
        const bool kept =
            attempt &&
            std::any_of(chosen.begin(), chosen.end(), [&attempt](const manifest_part& p) {
                return p.number == attempt->number && p.version == attempt->version;
            });
        if (kept) continue;
        if (auto p = place_in('p', bucket, key, attempt_key)) io::spawn(purge(*p));
    }
}

io::task<base::result<void>> cluster_store::claim_upload(const std::string& bucket,
                                                         const std::string& key,
                                                         const store::upload_record& u,
                                                         const upload_claim& was,
                                                         const upload_claim& now) {
    auto where = place_in('u', bucket, key, upload_key(key, u.upload_id));
    if (!where) co_return where.as_failure();
    store::write_conditions only_if_unchanged;
    only_if_unchanged.if_match_etag = etag_of(was.what);
    auto version = co_await version_for_write(*where, only_if_unchanged);
    if (!version && version.code() == base::errc::no_such_key)
        co_return base::fail(base::errc::no_such_upload, "no such upload");
    if (!version) co_return version.as_failure();
    memory_source body(encode_upload(u, now));
    const std::string etag = etag_of(now.what);
    store::record_finisher finish =
        [&etag, &now](const store::written_data&) -> base::result<store::object_record> {
        store::object_record r;
        r.etag = etag;
        r.modified_ms = now.at_ms;
        return r;
    };
    auto written = co_await write_version(*where, &body, body.size(), finish, shard_kind::object,
                                          version->first, version->second);
    if (!written) co_return written.as_failure();
    co_return base::result<void>{};
}

io::task<base::result<void>> cluster_store::claim_for_completion(
    const std::string& bucket, const std::string& key, const store::upload_record& u,
    const upload_claim& found, const std::vector<manifest_part>& chosen, upload_claim& mine) {
    mine = upload_claim{upload_claim::state::completing, chosen_text(chosen), base::unix_now_ms()};
    // A retry of the completion that claimed it (the same parts) claims it again, afresh: an abort
    // then waits the leftover age from now, past any commit of this one's manifest.
    if (found.what == upload_claim::state::completing && found.parts != mine.parts) {
        // Another completion's: it stands, or it may still land until the leftover age has passed
        // since its claim; after that, with no manifest of it standing, this one takes over.
        std::vector<manifest_part> theirs;
        auto completed = co_await completed_meanwhile(bucket, key, u.upload_id, theirs);
        if (!completed) co_return completed.as_failure();
        if (*completed || base::unix_now_ms() - found.at_ms < leftover_age_ms())
            co_return base::fail(base::errc::slow_down,
                                 "another completion of the upload is in progress: try again");
    }
    auto claimed = co_await claim_upload(bucket, key, u, found, mine);
    if (!claimed && refused_by_another(claimed.err()))
        co_return base::fail(base::errc::slow_down,
                             "an abort or another completion of the upload came first: try again");
    co_return claimed;
}

// Every node of the parts' set is asked (a part on k nodes, some silent, is not gone); a part is gone
// only when its sound shards found plus the silent nodes stay below k. A rebuilding node (marked, or
// saying so) counts as silent: what it lacks proves nothing.
io::task<base::result<bool>> cluster_store::parts_readable(const key_place& place,
                                                           const shard_meta& manifest) {
    auto parts_place = place_in('p', place.bucket, place.object_key, std::string());
    if (!parts_place) co_return parts_place.as_failure();
    const auto& parts = manifest.parts;
    for (std::size_t from = 0; from < parts.size(); from += records_per_read) {
        const std::size_t n = std::min(parts.size() - from, records_per_read);
        std::vector<std::string> keys;
        for (std::size_t j = from; j < from + n; ++j)
            keys.push_back(
                part_key(place.object_key, manifest.upload_id, parts[j].number, parts[j].version));
        auto reports = co_await read_records(*parts_place, keys, true);
        refresh_marks(*parts_place);
        for (std::size_t j = 0; j < n; ++j) {
            std::size_t sound = 0, silent = 0;
            for (unsigned i = 0; i < reports.size(); ++i) {
                const node_report& r = reports[i][j];
                if ((r.kind != node_report::state::present &&
                     r.kind != node_report::state::absent) ||
                    r.rebuilding || parts_place->rebuilding[i])
                    ++silent;
                for (const shard_meta& v : r.versions)
                    if (v.version == parts[from + j].version && v.index == i &&
                        v.k == parts_place->k && v.m == parts_place->m && !v.damaged)
                        ++sound;
            }
            if (sound >= parts_place->k) continue;
            if (sound + silent >= parts_place->k)
                co_return base::fail(base::errc::service_unavailable,
                                     "a part of the manifest cannot be judged now");
            co_return false;
        }
    }
    co_return true;
}

// A completion that answered 503 may have left its manifest on W nodes (answers lost) or more: healing
// then takes it up, and it needs its parts. Until the manifest is decided either way, an abort waits.
io::task<base::result<bool>> cluster_store::completed_meanwhile(
    const std::string& bucket, const std::string& key, const std::string& upload_id,
    std::vector<manifest_part>& chosen) {
    auto where = place(bucket, key);
    if (!where) co_return where.as_failure();
    auto reports = co_await read_records(*where, {key}, true);
    std::vector<node_report> by_node;
    bool anywhere = false;
    for (auto& node : reports) {
        for (const shard_meta& v : node[0].versions)
            if (v.kind == shard_kind::manifest && v.upload_id == upload_id) anywhere = true;
        by_node.push_back(std::move(node[0]));
    }
    if (!anywhere) co_return false;
    refresh_marks(*where);
    auto d = decide_version(*where, by_node);
    if (d && d->found && d->meta.kind == shard_kind::manifest && d->meta.upload_id == upload_id &&
        d->holders >= where->write_quorum()) {
        chosen = d->meta.parts;
        co_return true;
    }
    queue_heal(*where);
    co_return base::fail(base::errc::slow_down,
                         "a completion of the upload is not decided yet: try again");
}

io::task<base::result<void>> cluster_store::abort_upload(std::string bucket, std::string key,
                                                         std::string upload_id) {
    std::vector<std::string> attempts;
    upload_claim claim;
    auto upload = co_await load_upload(bucket, key, upload_id, true, &attempts, &claim);
    if (!upload) co_return upload.as_failure();
    std::vector<manifest_part> chosen;
    auto completed = co_await completed_meanwhile(bucket, key, upload_id, chosen);
    if (!completed) co_return completed.as_failure();
    if (*completed) {  // as the completion would have, had its answer come back
        purge_completed(bucket, key, upload_id, attempts, chosen);
        co_return base::fail(base::errc::no_such_upload, "the upload was completed");
    }
    // A completion claimed it and wrote no manifest anywhere yet: it may still, until the leftover
    // age has passed since its claim (its manifest's commits are refused after that).
    if (claim.what == upload_claim::state::completing &&
        base::unix_now_ms() - claim.at_ms < leftover_age_ms())
        co_return base::fail(base::errc::slow_down,
                             "a completion of the upload is in progress: try again");
    if (claim.what != upload_claim::state::aborting) {
        upload_claim aborting{upload_claim::state::aborting, {}, base::unix_now_ms()};
        auto claimed = co_await claim_upload(bucket, key, *upload, claim, aborting);
        if (!claimed && refused_by_another(claimed.err()))
            co_return base::fail(base::errc::slow_down,
                                 "a completion of the upload came first: try again");
        if (!claimed) co_return claimed.as_failure();
    }
    auto u = place_in('u', bucket, key, upload_key(key, upload_id));
    if (!u) co_return u.as_failure();
    co_await purge(*u);
    for (const std::string& attempt_key : attempts)
        if (auto p = place_in('p', bucket, key, attempt_key)) co_await purge(*p);
    co_return base::result<void>{};
}

io::task<base::result<std::vector<store::upload_record>>> cluster_store::list_uploads(
    std::string bucket, std::string prefix, std::string key_marker, std::string upload_id_marker,
    std::uint32_t max_uploads) {
    store::list_request request;
    request.bucket = bucket;
    request.prefix = prefix;
    // Records are "<key>\0<upload id>": after every upload of the marker's key, or after one of them.
    if (!key_marker.empty())
        request.start_after = upload_id_marker.empty() ? key_marker + '\x01'
                                                       : upload_key(key_marker, upload_id_marker);
    request.max_keys = std::min<std::uint32_t>(max_uploads, page_keys - 1) + 1;
    auto page = co_await list_shards('u', request);
    if (!page) co_return page.as_failure();
    std::vector<store::upload_record> out;
    for (const auto& e : page->entries) {
        const std::size_t at = e.name.find('\0');
        if (e.is_prefix || at == std::string::npos) continue;
        store::upload_record u;
        u.bucket = bucket;
        u.key = e.name.substr(0, at);
        u.upload_id = e.name.substr(at + 1);
        u.initiated_ms = e.modified_ms;
        out.push_back(std::move(u));
    }
    co_return out;
}

}  // namespace fjord::cluster
