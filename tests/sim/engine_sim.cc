// Deterministic simulation of the storage engine.
//
// For each seed: the engine runs on a simulated file system (store::sim_file_system) through several
// "lives". In each life concurrent workers drive random PUTs (plain and If-None-Match), multipart uploads
// (completed or aborted, parts sometimes uploaded twice), copies that share data files (hard links),
// deletes, GETs, listings and snapshots, while the
// file system injects faults (EIO, ENOSPC, short reads and writes, bit flips in reads and at rest, latency
// that reorders requests). Most lives end in a power cut at a random operation; then the file system is
// crashed (unsynced data dropped, kept or torn), the engine recovers, and every key is checked against a
// reference model:
//   - an acknowledged write is there, byte for byte, until it is replaced by a later one;
//   - a key shows exactly one of the values it may have (the last acknowledged one, or one written by a
//     request that failed or was cut off): never a mix, never bytes of no write at all;
//   - a read returns the right bytes or an error; a checksum error is reported only for damaged data;
//   - after recovery no data file is left that no object or upload refers to (space is reclaimed).
// Every choice comes from the seed, so a failure replays exactly: `engine_sim --seed N`.

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <coroutine>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include "base/seeded_random.h"
#include <set>
#include <string>
#include <vector>

#include "base/log.h"
#include "io/ops.h"
#include "io/reactor.h"
#include "io/task.h"
#include "io/wait_group.h"
#include "store/data_file.h"
#include "store/engine.h"
#include "store/sim_file_system.h"
#include "seed_runner.h"

namespace fjord::store::sim {
namespace {

using base::errc;

struct run_options {
    std::uint64_t first_seed = 1;
    std::uint64_t seeds = 1;
    unsigned lives = 6;
    unsigned operations_per_life = 40;
    unsigned workers = 4;
    unsigned keys = 10;
    bool verbose = false;
};

constexpr const char* bucket = "b";
constexpr std::size_t max_value_bytes = 600 * 1024;

// ---- the reference model ----

struct key_state {
    std::set<std::uint32_t> candidates{0};  // value ids the key may hold; 0 = absent
    bool busy = false;          // one request per key at a time, so outcomes are unambiguous
    std::uint64_t changes = 0;  // bumped by every request on the key (for listing checks)
    std::string name;
};

struct simulation {
    simulation(std::uint64_t s, const run_options& o)
        : seed(s), options(o), rng(s * 0x9E3779B97F4A7C15ULL + 1), fs(s) {}

    std::uint64_t seed;
    run_options options;
    base::seeded_random rng;
    sim_file_system fs;
    std::deque<std::string> values{
        std::string()};  // value id -> bytes (stable references); 0 is "absent"
    std::map<std::string, key_state> keys;
    std::uint64_t damaged_files =
        0;  // data files with a bit flipped at rest (the file system knows which)
    std::vector<std::string> drive_paths;
    engine* store = nullptr;
    bool faults_on = false;
    std::string failure;
    unsigned life = 0;
    // Counters for the summary line.
    std::uint64_t requests = 0, acknowledged = 0, failed = 0, reads_checked = 0, recoveries = 0,
                  spares_reused = 0;

    std::uint64_t draw(std::uint64_t n) { return n == 0 ? 0 : rng() % n; }
    bool chance(double p) { return rng.unit() < p; }
    bool failed_already() const { return !failure.empty(); }
    void violation(const std::string& what) {
        if (failure.empty()) failure = "life " + std::to_string(life) + ": " + what;
    }
    // An error is acceptable only when something was injected or the power is off.
    bool errors_expected() const { return faults_on || !fs.powered(); }
};

std::string etag_of(std::uint32_t value_id) { return "v" + std::to_string(value_id); }

std::optional<std::uint32_t> value_of_etag(const std::string& etag) {
    if (etag.size() < 2 || etag[0] != 'v') return std::nullopt;
    return static_cast<std::uint32_t>(std::strtoul(etag.c_str() + 1, nullptr, 10));
}

std::uint32_t new_value(simulation& sim) {
    static constexpr std::size_t sizes[] = {0,     1,     4095,   4096,   65535,
                                            65536, 65537, 131072, 200001, max_value_bytes};
    std::size_t size = sizes[sim.draw(std::size(sizes))];
    if (sim.chance(0.3)) size = sim.draw(max_value_bytes);
    std::string bytes(size, '\0');
    std::uint64_t x = sim.rng();
    for (std::size_t i = 0; i < size; i += 8) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        std::memcpy(bytes.data() + i, &x, std::min<std::size_t>(8, size - i));
    }
    sim.values.push_back(std::move(bytes));
    return static_cast<std::uint32_t>(sim.values.size() - 1);
}

std::string describe(const std::set<std::uint32_t>& candidates) {
    std::string out = "{";
    for (auto v : candidates)
        out += (out.size() > 1 ? "," : "") + (v ? etag_of(v) : std::string("absent"));
    return out + "}";
}

// ---- byte sources and sinks ----

class bytes_source final : public byte_source {
public:
    bytes_source(const std::string& bytes, std::uint64_t seed) : _bytes(bytes), _rng(seed) {}
    io::task<base::result<std::size_t>> read(std::byte* dst, std::size_t max) override {
        std::size_t n =
            std::min({max, _bytes.size() - _pos, 1 + static_cast<std::size_t>(_rng() % 150000)});
        std::memcpy(dst, _bytes.data() + _pos, n);
        _pos += n;
        co_return n;
    }

private:
    const std::string& _bytes;
    std::size_t _pos = 0;
    base::seeded_random _rng;
};

class bytes_sink final : public byte_sink {
public:
    io::task<base::result<void>> write(std::span<const std::byte> data) override {
        out.append(reinterpret_cast<const char*>(data.data()), data.size());
        co_return base::result<void>{};
    }
    std::string out;
};

// ---- requests, through the object-store interface (the operations the S3 layer calls) ----

// The declared size of a simulated body: usually known, sometimes not (aws-chunked without a decoded
// length: no preallocation).
std::optional<std::uint64_t> declared_size(simulation& sim, const std::string& bytes) {
    if (sim.chance(0.8)) return bytes.size();
    return std::nullopt;
}

object_record record_for(std::uint32_t value_id, std::uint64_t size_bytes,
                         std::vector<segment> segments) {
    object_record r;
    r.size_bytes = size_bytes;
    r.modified_ms = 1700000000000;
    r.etag = etag_of(value_id);
    r.content_type = "application/octet-stream";
    r.segments = std::move(segments);
    return r;
}

// Records the outcome of a write request on the model. `definite_no_change`: the answer means that the
// write did not happen (the store promises that for every failure but commit_outcome_unknown).
void settle_write(simulation& sim, key_state& k, std::uint32_t value_id,
                  const base::result<void>& outcome, bool definite_no_change, const char* what) {
    if (sim.options.verbose)
        std::printf("  life %u op %llu: %s %s %s -> %s%s\n", sim.life,
                    static_cast<unsigned long long>(sim.fs.stats().operations), k.name.c_str(),
                    what, value_id ? etag_of(value_id).c_str() : "(delete)",
                    outcome ? "ok" : outcome.err().message.c_str(),
                    definite_no_change ? " (no change)" : "");
    if (outcome) {
        ++sim.acknowledged;
        k.candidates = {value_id};
        return;
    }
    ++sim.failed;
    if (outcome.err().code != errc::precondition_failed && !sim.errors_expected())
        sim.violation(std::string(what) +
                      " failed without any injected fault: " + outcome.err().message);
    if (definite_no_change) return;
    k.candidates.insert(value_id);  // the outcome is unknown: it may or may not have happened
}

bool surely_unchanged(const base::result<void>& outcome) {
    return !outcome && outcome.err().code != errc::commit_outcome_unknown;
}

io::task<void> put_op(simulation& sim, std::string key, bool if_none_match) {
    key_state& k = sim.keys[key];
    std::uint32_t value_id = new_value(sim);
    const std::string& bytes = sim.values[value_id];
    put_request request{bucket, key, declared_size(sim, bytes), max_data_file_bytes, {}};
    request.conditions.if_none_match_any = if_none_match;
    bytes_source source(bytes, sim.rng());
    record_finisher finish = [value_id](const written_data&) -> base::result<object_record> {
        return record_for(value_id, 0, {});
    };
    auto stored = co_await sim.store->put(request, source, finish);
    base::result<void> outcome;
    if (!stored) outcome = stored.as_failure();
    if (!stored && stored.code() == errc::precondition_failed &&
        k.candidates == std::set<std::uint32_t>{0})
        sim.violation("If-None-Match PUT of " + key + " refused although the key is absent");
    if (stored && (stored->size_bytes != bytes.size() || stored->etag != etag_of(value_id)))
        sim.violation("PUT of " + key + " answered a record of " +
                      std::to_string(stored->size_bytes) + " bytes");
    settle_write(sim, k, value_id, outcome, surely_unchanged(outcome),
                 if_none_match ? "conditional PUT" : "PUT");
}

io::task<void> delete_op(simulation& sim, std::string key) {
    key_state& k = sim.keys[key];
    auto removed = co_await sim.store->remove(bucket, key, write_conditions{});
    base::result<void> outcome;
    if (!removed) outcome = removed.as_failure();
    settle_write(sim, k, 0, outcome, false, "DELETE");
}

std::string segment_path(const simulation& sim, const segment& seg) {
    char fan[4];
    std::snprintf(fan, sizeof fan, "%02x", static_cast<unsigned>(seg.id.lo & 0xff));
    return sim.drive_paths.at(seg.drive) + "/objects/" + fan + "/" + seg.id.hex();
}

// Reads a key through the store (a whole object or a random range) and checks what comes back against
// the model. Returns the value id seen, if it read.
io::task<std::optional<std::uint32_t>> check_key(simulation& sim, const std::string& what,
                                                 const std::string& key,
                                                 const std::set<std::uint32_t>& candidates,
                                                 bool whole) {
    std::optional<object_record> seen;
    std::optional<std::uint32_t> value_id;
    byte_range range;
    read_planner plan = [&](const object_record& r) -> base::result<std::optional<byte_range>> {
        seen = r;
        value_id = value_of_etag(r.etag);
        if (!value_id || !candidates.count(*value_id))
            return base::fail(
                errc::internal,
                "holds " + r.etag + ", which it cannot hold: possible " + describe(candidates));
        const std::string& expected = sim.values[*value_id];
        if (r.size_bytes != expected.size())
            return base::fail(errc::internal, "record size " + std::to_string(r.size_bytes) +
                                                  ", written " + std::to_string(expected.size()));
        range = byte_range{0, expected.size()};
        if (!whole && range.length > 0) {
            range.first = sim.draw(range.length);
            range.length = 1 + sim.draw(range.length - range.first);
        }
        return std::optional<byte_range>{range};
    };
    bytes_sink sink;
    auto read = co_await sim.store->get(bucket, key, plan, sink);
    ++sim.reads_checked;
    if (!read) {
        if (read.code() == errc::no_such_key) {
            if (!candidates.count(0))
                sim.violation(what + ": missing, but it must hold " + describe(candidates));
            co_return std::nullopt;
        }
        if (read.code() == errc::internal) {
            sim.violation(what + " " + read.err().message);
            co_return std::nullopt;
        }
        bool damaged = false;
        if (seen)
            for (const auto& seg : seen->segments)
                damaged = damaged || sim.fs.damaged(segment_path(sim, seg));
        bool corrupt = read.code() == errc::data_corrupted;
        if (corrupt && !damaged && !sim.faults_on)
            sim.violation(what +
                          ": checksum error reported for undamaged data: " + read.err().message);
        else if (!corrupt && !sim.errors_expected())
            sim.violation(what + ": read failed without a fault: " + read.err().message);
        co_return std::nullopt;
    }
    const std::string& expected = sim.values[*value_id];
    if (sink.out.size() != range.length ||
        sink.out != std::string_view(expected).substr(range.first, range.length))
        sim.violation(what + ": read returned wrong bytes (" + read->etag + ", offset " +
                      std::to_string(range.first) + ", length " + std::to_string(range.length) +
                      ")");
    co_return value_id;
}

io::task<void> get_op(simulation& sim, std::string key) {
    key_state& k = sim.keys[key];
    (void)co_await check_key(sim, "GET " + key, key, k.candidates, sim.chance(0.5));
}

io::task<base::result<void>> upload_part(simulation& sim, const std::string& key,
                                         const std::string& upload_id, std::uint32_t number,
                                         const std::string& bytes) {
    part_request request{
        bucket, key, upload_id, number, declared_size(sim, bytes), max_data_file_bytes};
    bytes_source source(bytes, sim.rng());
    part_finisher finish = [number](const written_data&) -> base::result<part_record> {
        part_record part;
        part.etag = "p" + std::to_string(number);
        return part;
    };
    auto committed = co_await sim.store->upload_part(request, source, finish);
    if (!committed) co_return committed.as_failure();
    co_return base::result<void>{};
}

io::task<void> abort_upload(simulation& sim, const std::string& key, const std::string& upload_id) {
    auto aborted = co_await sim.store->abort_upload(bucket, key, upload_id);
    if (!aborted && !sim.errors_expected())
        sim.violation("abort of an upload of " + key + " failed: " + aborted.err().message);
}

io::task<void> multipart_op(simulation& sim, std::string key) {
    key_state& k = sim.keys[key];
    object_record metadata = record_for(0, 0, {});
    auto created = co_await sim.store->create_upload(bucket, key, metadata, "");
    if (!created) {
        ++sim.failed;
        if (!sim.errors_expected()) sim.violation("create upload failed: " + created.err().message);
        co_return;
    }
    std::string upload_id = *created;
    unsigned count = 1 + static_cast<unsigned>(sim.draw(3));
    std::map<std::uint32_t, std::string> parts;  // what each part number holds once acknowledged
    bool ok = true;
    unsigned uploads = count + (sim.chance(0.3) ? 1 : 0);  // one more: a part number uploaded twice
    for (std::uint32_t n = 1; n <= uploads && ok; ++n) {
        std::uint32_t number =
            n > count ? 1 + static_cast<std::uint32_t>(sim.draw(count)) : n;  // a re-upload
        std::string bytes = sim.values[new_value(sim)];
        auto uploaded = co_await upload_part(sim, key, upload_id, number, bytes);
        if (uploaded)
            parts[number] = std::move(bytes);
        else
            ok = false;
        if (!uploaded && !sim.errors_expected())
            sim.violation("upload part failed: " + uploaded.err().message);
    }
    if (!ok || sim.chance(0.2)) {
        co_await abort_upload(sim, key, upload_id);
        ++sim.failed;
        co_return;
    }
    std::string whole;
    for (auto& [number, bytes] : parts) whole += bytes;
    sim.values.push_back(whole);
    std::uint32_t value_id = static_cast<std::uint32_t>(sim.values.size() - 1);
    upload_finalizer finalize =
        [value_id](const upload_record& u) -> base::result<upload_completion> {
        upload_completion chosen{record_for(value_id, 0, {}), {}};
        for (const auto& entry : u.parts) chosen.parts.push_back(entry.first);
        return chosen;
    };
    auto done =
        co_await sim.store->complete_upload(bucket, key, upload_id, finalize, write_conditions{});
    base::result<void> outcome;
    if (!done) {
        outcome = done.as_failure();
        co_await abort_upload(sim, key, upload_id);  // as a client does after a failed completion
    }
    settle_write(sim, k, value_id, outcome, false, "complete multipart upload");
}

// A server-side copy: the store shares the source's data files, or (when the plan says so) rewrites them.
io::task<void> copy_op(simulation& sim, std::string key) {
    std::vector<std::string> sources;
    for (auto& [name, k] : sim.keys)
        if (!k.busy) sources.push_back(name);
    if (sources.empty()) co_return;
    key_state& source = sim.keys[sources[sim.draw(sources.size())]];
    key_state& target = sim.keys[key];
    source.busy = true;
    std::optional<std::uint32_t> value_id;
    std::vector<segment> source_data;
    const bool share = sim.chance(0.7);
    copy_planner plan = [&](const object_record& found) -> base::result<copy_plan> {
        value_id = value_of_etag(found.etag);
        source_data = found.segments;
        if (!value_id || !source.candidates.count(*value_id))
            sim.violation("copy source " + source.name + " holds " + found.etag + ", possible " +
                          describe(source.candidates));
        copy_plan planned;
        planned.record = record_for(value_id.value_or(0), 0, {});
        planned.may_share = share;
        planned.finish = [r = planned.record](const written_data&) -> base::result<object_record> {
            return r;
        };
        return planned;
    };
    copy_request request{bucket, source.name, bucket, key, {}};
    auto copied = co_await sim.store->copy(request, plan);
    base::result<void> outcome;
    if (!copied) outcome = copied.as_failure();
    bool source_damaged = false;
    for (const auto& seg : source_data)
        source_damaged = source_damaged || sim.fs.damaged(segment_path(sim, seg));
    if (!copied && copied.code() == errc::no_such_key) {
        // The source is absent: nothing was planned or done.
    } else if (!copied && copied.code() == errc::data_corrupted && source_damaged) {
        ++sim.failed;  // a rewrite read the source's damaged bytes and refused them: nothing was done
    } else if (value_id) {
        settle_write(sim, target, *value_id, outcome, surely_unchanged(outcome),
                     share ? "copy" : "copy (rewrite)");
    } else if (!copied && !sim.errors_expected()) {
        sim.violation("copy: lookup failed: " + copied.err().message);
    }
    source.busy = false;
}

// Lists the bucket page by page and checks the keys nobody touched meanwhile.
io::task<void> list_op(simulation& sim) {
    std::map<std::string, std::uint64_t> quiet;  // keys idle at the start, with their change counts
    for (auto& [key, k] : sim.keys)
        if (!k.busy) quiet[key] = k.changes;
    std::map<std::string, std::string> listed;  // key -> etag
    list_request request;
    request.bucket = bucket;
    request.max_keys = 1 + static_cast<std::uint32_t>(sim.draw(6));
    for (int page = 0; page < 100; ++page) {
        auto got = co_await sim.store->list(request);
        if (!got) {
            if (!sim.errors_expected()) sim.violation("list failed: " + got.err().message);
            co_return;
        }
        for (auto& e : got->entries) listed[e.name] = e.etag;
        if (!got->truncated || got->entries.empty()) break;
        request.start_after = got->entries.back().name;
    }
    for (auto& [key, changes] : quiet) {
        const key_state& k = sim.keys[key];
        if (k.busy || k.changes != changes) continue;
        auto it = listed.find(key);
        if (it == listed.end()) {
            if (!k.candidates.count(0))
                sim.violation("list: " + key + " missing, it must hold " + describe(k.candidates));
        } else {
            auto v = value_of_etag(it->second);
            if (!v || !k.candidates.count(*v))
                sim.violation("list: " + key + " shows " + it->second + ", possible " +
                              describe(k.candidates));
        }
    }
}

void damage_a_data_file(simulation& sim) {
    const std::string& drive = sim.drive_paths[sim.draw(sim.drive_paths.size())];
    for (int attempt = 0; attempt < 8; ++attempt) {
        char fan[4];
        std::snprintf(fan, sizeof fan, "%02x", static_cast<unsigned>(sim.draw(256)));
        if (auto name = sim.fs.flip_bit_at_rest(drive + "/objects/" + fan)) {
            ++sim.damaged_files;
            return;
        }
    }
}

// ---- workers and lives ----

io::task<void> one_request(simulation& sim, std::string key) {
    key_state& k = sim.keys[key];
    k.busy = true;
    ++k.changes;
    ++sim.requests;
    std::uint64_t pick = sim.draw(100);
    if (pick < 30)
        co_await put_op(sim, key, false);
    else if (pick < 36)
        co_await put_op(sim, key, true);
    else if (pick < 56)
        co_await get_op(sim, key);
    else if (pick < 68)
        co_await delete_op(sim, key);
    else if (pick < 80)
        co_await multipart_op(sim, key);
    else if (pick < 87)
        co_await copy_op(sim, key);
    else if (pick < 93)
        co_await list_op(sim);
    else if (pick < 96)
        co_await sim.store->snapshot_local_shards();
    else if (sim.faults_on)
        damage_a_data_file(sim);
    ++k.changes;
    k.busy = false;
}

io::task<void> worker(simulation& sim, unsigned* budget) {
    while (*budget > 0 && !sim.failed_already() && sim.fs.powered()) {
        --*budget;
        std::vector<std::string> idle;
        for (auto& [key, k] : sim.keys)
            if (!k.busy) idle.push_back(key);
        if (idle.empty()) {
            co_await io::yield_now{};
            continue;
        }
        co_await one_request(sim, idle[sim.draw(idle.size())]);
    }
}

// After a restart: every key holds one of its possible values, readable and intact; leftover uploads are
// intact and are aborted; no unreferenced data file remains.
io::task<void> verify_after_recovery(simulation& sim) {
    std::set<std::string> referenced;
    for (auto& [key, k] : sim.keys) {
        auto found = co_await sim.store->head(bucket, key);
        if (!found) {
            if (found.err().code != errc::no_such_key)
                sim.violation("lookup " + key + ": " + found.err().message);
            else if (!k.candidates.count(0))
                sim.violation(key + " lost after recovery: it must hold " + describe(k.candidates));
            k.candidates = {0};
            continue;
        }
        for (const auto& seg : found->segments) referenced.insert(seg.id.hex());
        auto seen = co_await check_key(sim, key + " after recovery", key, k.candidates, true);
        if (auto v = value_of_etag(found->etag)) k.candidates = {seen.value_or(*v)};
    }
    auto uploads = co_await sim.store->list_uploads(bucket, "", "", "", 10000);
    if (!uploads) {
        sim.violation("list uploads after recovery: " + uploads.err().message);
        co_return;
    }
    for (const auto& listed : *uploads) {
        auto full = co_await sim.store->get_upload(bucket, listed.key,
                                                   listed.upload_id);  // listings omit parts
        if (!full) {
            sim.violation("get upload after recovery: " + full.err().message);
            co_return;
        }
        const upload_record& u = *full;
        for (const auto& [number, part] : u.parts) {
            object_record r = record_for(0, part.data.size_bytes, {part.data});
            bytes_sink sink;
            auto read = co_await read_object(sim.store->drives(), sim.store->pool(), r, 0,
                                             r.size_bytes, sink, sim.store->data_file_settings());
            if (!read && !sim.fs.damaged(segment_path(sim, part.data)))
                sim.violation("part " + std::to_string(number) + " of a surviving upload of " +
                              u.key + " is unreadable: " + read.err().message);
            referenced.insert(part.data.id.hex());
        }
    }
    std::uint64_t unreferenced = 0;
    std::string example;
    for (const std::string& drive : sim.drive_paths)
        for (int b = 0; b < 256; ++b) {
            char fan[4];
            std::snprintf(fan, sizeof fan, "%02x", b);
            for (const std::string& name : sim.fs.files_in(drive + "/objects/" + fan))
                if (!referenced.count(name)) {
                    ++unreferenced;
                    example = name;
                }
        }
    // Orphans whose removal failed (injected errors during recovery) are tried again at the next start.
    if (unreferenced > sim.store->recovery().orphans_kept)
        sim.violation(std::to_string(unreferenced) + " data files (e.g. " + example +
                      ") survive recovery unreferenced");
    for (const auto& u : *uploads) co_await abort_upload(sim, u.key, u.upload_id);
}

sim_faults random_faults(simulation& sim) {
    sim_faults f;
    f.latency = 0.3;
    if (sim.chance(0.4)) return f;
    static constexpr double rates[] = {0.002, 0.01, 0.03};
    f.eio = rates[sim.draw(3)];
    f.enospc = rates[sim.draw(3)] / 2;
    f.short_io = rates[sim.draw(3)] / 2;
    f.read_bit_flip = rates[sim.draw(3)] / 2;
    return f;
}

io::task<void> live(simulation& sim, bool first) {
    sim.faults_on = false;
    sim.fs.set_faults(sim_faults{});
    if (first) {
        auto created = co_await sim.store->create_bucket(bucket);
        if (!created) sim.violation("create bucket: " + created.err().message);
    } else {
        co_await verify_after_recovery(sim);
    }
    if (sim.failed_already()) co_return;
    sim_faults faults = random_faults(sim);
    sim.fs.set_faults(faults);
    sim.faults_on = faults.eio > 0;
    if (sim.chance(0.75))
        sim.fs.power_off_after(1 + sim.draw(150 * sim.options.operations_per_life / 10));
    unsigned budget = sim.options.operations_per_life;
    io::wait_group workers(sim.options.workers);
    for (unsigned w = 0; w < sim.options.workers; ++w) co_await workers.spawn(worker(sim, &budget));
    co_await workers.wait();
    sim.fs.set_faults(sim_faults{});
    sim.faults_on = false;
}

io::task<void> run_then_stop(simulation& sim, bool first, io::reactor_group* group) {
    co_await live(sim, first);
    sim.spares_reused += sim.store->spares().stats().reused;
    group->stop();
}

engine_options options_for(simulation& sim) {
    engine_options o;
    o.data_dirs = sim.drive_paths;
    o.cores = 1;
    o.buffers = io::buffer_pool_options{128 * 1024, 12};
    o.journal_rotate_bytes = 16 * 1024;      // rotate (snapshot) often
    o.spares.min_segment_bytes = 64 * 1024;  // reuse the data files of most values, and evict often
    o.spares.bytes_per_drive = 2 * 1024 * 1024;
    o.spares.full_cooldown_ms =
        0;  // an injected ENOSPC would otherwise end reuse for the rest of the life
    o.fs = &sim.fs;
    o.boot_nonce = sim.seed * 1000003 + sim.life + 1;
    return o;
}

// Opens the engine after a crash, sometimes with faults during recovery; a failed recovery is retried
// without faults, as an operator restarts a server that failed to start.
std::unique_ptr<engine> recover(simulation& sim) {
    sim_faults during;
    if (sim.life > 0 && sim.chance(0.3)) during.eio = 0.01;
    sim.fs.set_faults(during);
    auto opened = engine::open(options_for(sim));
    sim.fs.set_faults(sim_faults{});
    if (!opened && during.eio > 0) {
        sim.fs.crash_and_restart();  // the failed start's process died
        opened = engine::open(options_for(sim));
    }
    if (!opened) {
        sim.violation("recovery failed: " + opened.err().message);
        return nullptr;
    }
    ++sim.recoveries;
    return std::move(*opened);
}

// What a run did, for one seed or summed over all.
struct totals {
    std::uint64_t requests = 0, acknowledged = 0, failed = 0, reads = 0, recoveries = 0,
                  fs_operations = 0, faults = 0, damaged = 0, torn = 0, dropped = 0,
                  spares_reused = 0;
    totals& operator+=(const totals& o) {
        requests += o.requests, acknowledged += o.acknowledged, failed += o.failed,
            reads += o.reads;
        recoveries += o.recoveries, fs_operations += o.fs_operations, faults += o.faults;
        damaged += o.damaged, torn += o.torn, dropped += o.dropped,
            spares_reused += o.spares_reused;
        return *this;
    }
    std::string describe() const {
        char line[512];
        std::snprintf(
            line, sizeof line,
            "%llu requests (%llu acknowledged, %llu failed), %llu reads checked, %llu recoveries, %llu "
            "file-system operations, %llu injected faults, %llu files damaged at rest, %llu torn writes, "
            "%llu unsynced changes lost, %llu data files reused",
            static_cast<unsigned long long>(requests),
            static_cast<unsigned long long>(acknowledged), static_cast<unsigned long long>(failed),
            static_cast<unsigned long long>(reads), static_cast<unsigned long long>(recoveries),
            static_cast<unsigned long long>(fs_operations), static_cast<unsigned long long>(faults),
            static_cast<unsigned long long>(damaged), static_cast<unsigned long long>(torn),
            static_cast<unsigned long long>(dropped),
            static_cast<unsigned long long>(spares_reused));
        return line;
    }
};

// Runs one seed; returns the first violation (empty if none).
std::string run_seed(std::uint64_t seed, const run_options& options, totals* done) {
    simulation sim(seed, options);
    unsigned drives = 1 + static_cast<unsigned>(sim.draw(2));
    for (unsigned d = 0; d < drives; ++d) sim.drive_paths.push_back("/drive" + std::to_string(d));
    for (unsigned i = 0; i < options.keys; ++i)
        sim.keys["key-" + std::to_string(i)].name = "key-" + std::to_string(i);
    for (sim.life = 0; sim.life <= options.lives && !sim.failed_already(); ++sim.life) {
        std::unique_ptr<engine> store = recover(sim);
        if (!store) break;
        sim.store = store.get();
        io::reactor_group group(1);
        bool first = sim.life == 0;
        if (sim.life == options.lives) {
            // The last life only verifies what the previous crash left.
            group.run([&](unsigned core) {
                store->attach_core(core, io::reactor::current().ring());
                io::spawn([](simulation& s, io::reactor_group* g) -> io::task<void> {
                    co_await verify_after_recovery(s);
                    g->stop();
                }(sim, &group));
            });
        } else {
            group.run([&](unsigned core) {
                store->attach_core(core, io::reactor::current().ring());
                io::spawn(run_then_stop(sim, first, &group));
            });
        }
        sim.store = nullptr;
        store.reset();
        if (sim.fs.open_descriptors() > 0)
            sim.violation(std::to_string(sim.fs.open_descriptors()) + " descriptors left open");
        if (options.verbose) std::printf("  life %u ends: crash\n", sim.life);
        sim.fs.crash_and_restart();
    }
    const sim_stats& st = sim.fs.stats();
    done->requests = sim.requests;
    done->acknowledged = sim.acknowledged;
    done->failed = sim.failed;
    done->reads = sim.reads_checked;
    done->recoveries = sim.recoveries;
    done->fs_operations = st.operations;
    done->faults = st.injected_eio + st.injected_enospc + st.injected_short + st.injected_bit_flips;
    done->damaged = sim.damaged_files;
    done->torn = st.torn_writes;
    done->dropped = st.dropped_changes;
    done->spares_reused = sim.spares_reused;
    return sim.failure;
}

int usage() {
    std::fprintf(
        stderr,
        "usage: engine_sim [--seed N] [--seeds COUNT] [--lives N] [--ops N] [--workers N] [--verbose]\n"
        "  runs COUNT seeds starting at N (default: seed 1, 1 seed); a failure prints its seed\n");
    return 64;
}

}  // namespace
}  // namespace fjord::store::sim

int main(int argc, char** argv) {
    using namespace fjord::store::sim;
    run_options options;
    fjord::sim::seed_args args;
    if (!fjord::sim::parse_seed_args(argc, argv, args,
                                     {{"lives", &options.lives},
                                      {"ops", &options.operations_per_life},
                                      {"workers", &options.workers}}) ||
        options.workers == 0)
        return usage();
    options.first_seed = args.first_seed;
    options.seeds = args.seeds;
    options.verbose = args.verbose;
    fjord::base::set_log_level(options.verbose ? fjord::base::log_level::info
                                               : fjord::base::log_level::off);
    totals sum;
    auto one = [&](std::uint64_t seed) {
        totals done;
        fjord::sim::seed_outcome out;
        out.failure = run_seed(seed, options, &done);
        out.summary = done.describe();
        sum += done;
        return out;
    };
    return fjord::sim::run_seeds("engine_sim", options.first_seed, options.seeds, options.verbose,
                                 one, [&] { return sum.describe(); });
}
