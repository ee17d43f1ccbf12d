#include "kv/shard_log.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>

#include "base/assert.h"
#include "base/checksum.h"
#include "base/clock.h"
#include "base/log.h"
#include "io/ops.h"
#include "io/semaphore.h"
#include "kv/record.h"

namespace fjord::kv {

namespace {

// Write-backs of a DRAM-acknowledged bucket in flight on one shard; past this, writes wait for NVMe.
constexpr unsigned max_write_backs = 64;
// Bytes read at a time while recovering a segment.
constexpr std::size_t recovery_read_bytes = 1024 * 1024;

std::uint64_t random_nonce() {
    static thread_local std::mt19937_64 gen{std::random_device{}()};
    return gen() | 1;  // never 0
}

base::failure io_failure(std::string what, int rc) {
    if (rc == -ENOSPC || rc == -EDQUOT)
        return base::fail(base::errc::storage_full, what + ": no space left on the KV drive");
    return base::fail(base::errc::io_error, what + ": " + std::strerror(-rc));
}

}  // namespace

std::string segment_file_name(std::uint64_t seq, std::uint64_t nonce) {
    char name[64];
    std::snprintf(name, sizeof name, "%016" PRIx64 "-%016" PRIx64 ".seg", seq, nonce);
    return name;
}

bool parse_segment_file_name(const std::string& name, std::uint64_t& seq, std::uint64_t& nonce) {
    if (name.size() != 37 || name.substr(33) != ".seg" || name[16] != '-') return false;
    char* end = nullptr;
    seq = std::strtoull(name.substr(0, 16).c_str(), &end, 16);
    if (*end != '\0') return false;
    nonce = std::strtoull(name.substr(17, 16).c_str(), &end, 16);
    return *end == '\0' && seq > 0;
}

shard_log::shard_log(shard_options options, dram_cache* dram)
    : _options(std::move(options)), _dram(dram) {
    // One segment of the capacity is the next one, opened ahead; one is the oldest while it is reclaimed.
    _max_segments = _options.capacity_bytes / _options.segment_bytes - 2;
}

shard_log::~shard_log() {
    for (auto& [key, e] : _index)
        if (e.lru) _dram->remove(&e);
    for (auto* list : {&_segments, &_retired})
        for (auto& s : *list)
            if (s->fd >= 0) _options.fs->close_blocking(s->fd);
    if (_next && _next->fd >= 0) _options.fs->close_blocking(_next->fd);
}

base::result<std::shared_ptr<shard_log>> shard_log::open_blocking(shard_options options,
                                                                  dram_cache* dram) {
    FJORD_ASSERT(options.fs != nullptr && options.segment_bytes % 4096 == 0);
    if (options.capacity_bytes / options.segment_bytes < 4)
        return base::fail(base::errc::invalid_argument,
                          "a KV shard needs room for at least 4 segments");
    int rc = options.fs->mkdir_blocking(options.directory);
    if (rc < 0 && rc != -EEXIST) return io_failure("mkdir " + options.directory, rc);
    std::shared_ptr<shard_log> log(new shard_log(std::move(options), dram));
    FJORD_TRY(log->recover_blocking());
    return log;
}

base::result<void> shard_log::recover_blocking() {
    auto names = _options.fs->list_blocking(_options.directory);
    if (!names) return names.as_failure();
    std::vector<std::pair<std::uint64_t, std::uint64_t>> found;
    for (const auto& name : *names) {
        std::uint64_t seq = 0, nonce = 0;
        if (parse_segment_file_name(name, seq, nonce)) found.emplace_back(seq, nonce);
    }
    std::sort(found.begin(), found.end());
    for (const auto& [seq, nonce] : found) {
        auto s = std::make_unique<segment>();
        s->seq = seq;
        s->nonce = nonce;
        std::string path = _options.directory + "/" + segment_file_name(s->seq, s->nonce);
        s->fd = _options.fs->open_blocking(path, O_RDWR | O_DIRECT);
        if (s->fd < 0) return io_failure("open " + path, s->fd);
        // Every segment is searched to its end: a failed or torn write leaves a hole that records
        // written after it (acknowledged) must not be lost behind. Fallocated space reads as zeros.
        FJORD_TRY(recover_segment_blocking(*s));
        _next_seq = s->seq + 1;
        if (s->records == 0) {  // no records (a segment opened ahead): not worth a slot
            _options.fs->close_blocking(s->fd);
            _options.fs->unlink_blocking(path);
            continue;
        }
        // Recovered segments take no more appends (they were opened without O_DSYNC and may hold a
        // hole): the first write after a start opens a fresh segment.
        s->used_bytes = _options.segment_bytes;
        _segments.push_back(std::move(s));
    }
    // More segments than this capacity allows (the capacity was lowered): the oldest go.
    while (_segments.size() > _max_segments) {
        auto& s = *_segments.front();
        for (const auto& key : s.keys)
            if (auto it = _index.find(key); it != _index.end() && it->second.segment_seq == s.seq)
                drop(it);
        _options.fs->close_blocking(s.fd);
        _options.fs->unlink_blocking(_options.directory + "/" + segment_file_name(s.seq, s.nonce));
        _segments.pop_front();
    }
    return base::result<void>{};
}

base::result<void> shard_log::recover_segment_blocking(segment& s) {
    auto chunk = store::block_buffer::allocate(recovery_read_bytes - record_header_bytes);
    std::span<std::byte> buf = chunk->record();
    std::uint64_t chunk_start = 0, chunk_bytes = 0;
    std::uint64_t offset = 0;
    while (offset + record_header_bytes <= _options.segment_bytes) {
        if (offset < chunk_start || offset + record_header_bytes > chunk_start + chunk_bytes) {
            chunk_start = offset;
            auto want = std::min<std::uint64_t>(buf.size(), _options.segment_bytes - offset);
            auto got = _options.fs->pread_blocking(s.fd, buf.data(), want, offset);
            if (got < 0) return io_failure("read segment", static_cast<int>(got));
            chunk_bytes = static_cast<std::uint64_t>(got);
            if (chunk_bytes < record_header_bytes) break;
        }
        auto h = decode_header(buf.subspan(offset - chunk_start, record_header_bytes), s.nonce);
        std::uint64_t end = h ? offset + record_bytes(h->value_bytes) : 0;
        if (h && end <= _options.segment_bytes) {
            apply_recovered(s, offset, *h);
            offset = end;
            continue;
        }
        offset += record_header_bytes;
    }
    return base::result<void>{};
}

void shard_log::apply_recovered(segment& s, std::uint64_t offset, record_header& h) {
    ++s.records;  // tombstones count: their segment must stay, or a deleted key would come back
    if (h.flags & record_flag_tombstone) {
        if (auto it = _index.find(h.key); it != _index.end()) drop(it);
        return;
    }
    cache_entry e;
    e.segment_seq = s.seq;
    e.offset = offset;
    e.value_bytes = h.value_bytes;
    e.value_crc = h.value_crc;
    e.created_ms = h.created_ms;
    e.meta = std::move(h.meta);
    e.on_disk = true;
    if (expired(e)) return;
    s.keys.push_back(h.key);
    index(h.key, std::move(e));
}

void shard_log::index(const std::string& key, cache_entry e) {
    auto it = _index.find(key);
    // Two writes of one key in flight: the one recovery would keep (the later record on disk) wins in
    // memory too, whichever finished last.
    if (it != _index.end() && it->second.on_disk && e.on_disk &&
        std::pair(it->second.segment_seq, it->second.offset) > std::pair(e.segment_seq, e.offset))
        return;
    if (it != _index.end()) drop(it);
    auto [at, inserted] = _index.emplace(key, std::move(e));
    FJORD_ASSERT(inserted);
    if (at->second.dram) _dram->insert(&at->second);
}

void shard_log::drop(std::unordered_map<std::string, cache_entry>::iterator it) {
    if (it->second.lru) _dram->remove(&it->second);
    _index.erase(it);
}

bool shard_log::expired(const cache_entry& e) const {
    return _options.ttl_ms > 0 && base::unix_now_ms() - e.created_ms > _options.ttl_ms;
}

bool shard_log::is_live(std::uint64_t seq) const {
    return std::any_of(_segments.begin(), _segments.end(),
                       [seq](const auto& s) { return s->seq == seq; });
}

shard_log::segment* shard_log::find_segment(std::uint64_t seq) {
    for (auto* list : {&_segments, &_retired})
        for (auto& s : *list)
            if (s->seq == seq) return s.get();
    return nullptr;
}

std::uint64_t shard_log::max_value_bytes() const { return _options.segment_bytes / 2; }

const cache_entry* shard_log::find(const std::string& key) {
    auto it = _index.find(key);
    if (it == _index.end()) return nullptr;
    if (expired(it->second)) {
        if (it->second.on_disk) drop(it);
        return nullptr;
    }
    return &it->second;
}

io::task<base::result<std::unique_ptr<shard_log::segment>>> shard_log::create_segment() {
    auto s = std::make_unique<segment>();
    s->seq = _next_seq++;
    s->nonce = random_nonce();
    std::string path = _options.directory + "/" + segment_file_name(s->seq, s->nonce);
    int flags = O_RDWR | O_CREAT | O_EXCL | O_DIRECT;
    if (_options.ack == store::kv_write_ack::nvme) flags |= O_DSYNC;
    s->fd = co_await _options.fs->openat(AT_FDCWD, path, flags, 0600);
    if (s->fd < 0) co_return io_failure("create " + path, s->fd);
    int rc = co_await _options.fs->allocate(s->fd, 0, _options.segment_bytes);
    if (rc < 0) {
        co_await _options.fs->close(s->fd);
        co_await _options.fs->unlinkat(AT_FDCWD, path);
        co_return io_failure("allocate " + path, rc);
    }
    // The new name must survive a crash before records in it are acknowledged.
    if (_options.ack == store::kv_write_ack::nvme) {
        int dir =
            co_await _options.fs->openat(AT_FDCWD, _options.directory, O_RDONLY | O_DIRECTORY);
        rc = dir < 0 ? dir : co_await _options.fs->fsync(dir, false);
        if (dir >= 0) co_await _options.fs->close(dir);
        if (rc < 0) {
            co_await _options.fs->close(s->fd);
            co_await _options.fs->unlinkat(AT_FDCWD, path);
            co_return io_failure("fsync " + _options.directory, rc);
        }
    }
    co_return s;
}

// Opens the segment after the newest one while the newest fills, so that a write that finds the newest
// full does not wait for a file to be made and allocated.
io::task<void> shard_log::prepare_next(std::shared_ptr<shard_log> keep) {
    (void)keep;  // the shard lives until this ends (a bucket may be deleted meanwhile)
    _preparing = true;
    auto made = co_await create_segment();
    _preparing = false;
    if (made)
        _next = std::move(*made);
    else
        LOG_WARN("cannot open the next KV segment in %s: %s", _options.directory.c_str(),
                 made.err().message.c_str());
    wake_roll_waiters();
}

void shard_log::wake_roll_waiters() {
    for (auto h : _roll_waiters) io::reactor::current().schedule(h);
    _roll_waiters.clear();
}

io::task<base::result<std::pair<std::uint64_t, std::uint64_t>>> shard_log::reserve(
    std::uint64_t value_bytes, bool may_roll) {
    const std::uint64_t need = record_bytes(value_bytes);
    FJORD_ASSERT(need <= _options.segment_bytes);
    // Each round either reserves, waits for a roll-over in progress, or rolls over. Under contention
    // other writes may take a fresh segment first many times over, so the bound is time, not rounds.
    const std::int64_t deadline_ns = base::monotonic_now_ns() + 30'000'000'000LL;
    while (base::monotonic_now_ns() < deadline_ns) {
        if (!_segments.empty()) {
            segment& cur = *_segments.back();
            if (cur.used_bytes + need <= _options.segment_bytes) {
                std::uint64_t offset = cur.used_bytes;
                cur.used_bytes += need;
                if (cur.used_bytes > _options.segment_bytes / 2 && !_next && !_preparing)
                    io::spawn(prepare_next(shared_from_this()));
                co_return std::pair{cur.seq, offset};
            }
        }
        if (!may_roll)
            co_return base::fail(base::errc::slow_down, "no room left in the newest KV segment");
        if (_rolling || _preparing) {
            co_await roll_waiter{this};  // woken when the roll-over or the next segment is done
            continue;
        }
        _rolling = true;
        auto rolled = co_await roll_over();
        _rolling = false;
        wake_roll_waiters();
        if (!rolled) co_return rolled.as_failure();
    }
    co_return base::fail(base::errc::slow_down, "the KV shard is rolling over its segments");
}

io::task<base::result<void>> shard_log::roll_over() {
    if (!_next) {
        _preparing = true;  // no write starts another one meanwhile
        auto made = co_await create_segment();
        _preparing = false;
        if (!made) co_return made.as_failure();
        _next = std::move(*made);
    }
    _segments.push_back(std::move(_next));
    if (_segments.size() > _max_segments) co_await reclaim_oldest();
    co_return base::result<void>{};
}

// FIFO with reinsertion: the oldest segment's blocks that were read since they were written (up to half
// a segment of them, so they fit the fresh segment) move to the head of the log; the rest leave.
io::task<void> shard_log::reclaim_oldest() {
    _retired.push_back(std::move(_segments.front()));
    _segments.pop_front();
    segment& victim = *_retired.back();
    const std::uint64_t victim_seq = victim.seq;
    std::uint64_t budget = _options.segment_bytes / 2 + record_header_bytes;
    std::vector<std::string> keep;
    for (const auto& key : victim.keys) {
        auto it = _index.find(key);
        if (it == _index.end() || it->second.segment_seq != victim_seq || !it->second.on_disk)
            continue;
        std::uint64_t need = record_bytes(it->second.value_bytes);
        // A key with a write in flight is not moved: the move could land after the new version on
        // disk and bring the old one back at the next start.
        if (it->second.referenced && !expired(it->second) && need <= budget &&
            !_writing.contains(key)) {
            budget -= need;
            keep.push_back(key);
            continue;
        }
        drop(it);
        ++_stats.evicted_blocks;
    }
    victim.keys.clear();
    for (const auto& key : keep) {
        auto it = _index.find(key);
        if (it == _index.end() || it->second.segment_seq != victim_seq) continue;
        cache_entry e = it->second;  // a copy: the entry may change while we wait
        std::shared_ptr<store::block_buffer> bytes = e.dram;
        if (!bytes) {
            auto got =
                co_await read_record(e.segment_seq, e.offset, key, e.value_bytes, e.value_crc,
                                     /*queued=*/false);
            if (got) bytes = std::move(*got);
        }
        it = _index.find(key);
        if (it == _index.end() || it->second.segment_seq != victim_seq) continue;
        std::uint64_t seq = 0, offset = 0;
        // Writes that came in meanwhile may have filled the fresh segment: then the block leaves.
        // A write of the key that started meanwhile makes the move pointless (and unsafe: see above).
        if (!bytes || _writing.contains(key) ||
            !co_await append(key, *bytes, e.meta, e.created_ms, 0, seq, offset,
                             /*may_roll=*/false)) {
            it = _index.find(key);
            if (it != _index.end() && it->second.segment_seq == victim_seq) drop(it);
            ++_stats.evicted_blocks;
            continue;
        }
        it = _index.find(key);
        if (it == _index.end() || it->second.segment_seq != victim_seq) continue;
        it->second.segment_seq = seq;
        it->second.offset = offset;
        it->second.referenced = false;
        ++_stats.reinserted_blocks;
    }
    ++_stats.reclaimed_segments;
    co_await release_segment(victim_seq);
}

io::task<void> shard_log::release_segment(std::uint64_t seq) {
    segment* s = find_segment(seq);
    FJORD_ASSERT(s != nullptr);
    // Readers and writes in flight finish first; both are short and bounded by the connections.
    for (std::int64_t waited_ms = 0;
         (s->readers > 0 || s->writes_in_flight > 0) && waited_ms < _options.release_wait_ms;
         ++waited_ms)
        co_await io::sleep_for(1);
    if (s->readers > 0 || s->writes_in_flight > 0) {
        LOG_ERROR("KV segment %016llx in %s still in use after %lld ms: its last user removes it",
                  static_cast<unsigned long long>(seq), _options.directory.c_str(),
                  static_cast<long long>(_options.release_wait_ms));
        s->left_open = true;
        co_return;
    }
    co_await close_retired(shared_from_this(), seq);
}

void shard_log::user_done(segment& s) {
    if (!s.left_open || s.readers > 0 || s.writes_in_flight > 0) return;
    s.left_open = false;
    io::spawn(close_retired(shared_from_this(), s.seq));  // takes the fd before it returns
}

io::task<void> shard_log::close_retired(std::shared_ptr<shard_log> keep, std::uint64_t seq) {
    segment* s = find_segment(seq);
    FJORD_ASSERT(s != nullptr && s->readers == 0 && s->writes_in_flight == 0);
    std::string path = _options.directory + "/" + segment_file_name(s->seq, s->nonce);
    // fd -1 first: a read that looks the segment up while it closes finds it gone, not a closed fd.
    const int fd = std::exchange(s->fd, -1);
    co_await _options.fs->close(fd);
    // ENOENT: gone already, as when the bucket was removed (its directory with it) while a reader held
    // the segment open; nothing is left to remove.
    if (int rc = co_await _options.fs->unlinkat(AT_FDCWD, path); rc < 0 && rc != -ENOENT)
        LOG_WARN("cannot remove KV segment %s: %s", path.c_str(), std::strerror(-rc));
    FJORD_ASSERT(s->readers == 0 && s->writes_in_flight == 0,
                 "a released KV segment gained a user");
    auto it = std::find_if(_retired.begin(), _retired.end(),
                           [seq](const auto& r) { return r->seq == seq; });
    _retired.erase(it);
}

io::task<base::result<void>> shard_log::append(const std::string& key, store::block_buffer& bytes,
                                               const store::object_record& meta,
                                               std::int64_t created_ms, std::uint32_t flags,
                                               std::uint64_t& seq_out, std::uint64_t& offset_out,
                                               bool may_roll) {
    // Checked before space is reserved: a reservation never written would be a hole in the segment.
    if (!header_fits(key, meta))
        co_return base::fail(base::errc::metadata_too_large,
                             "the key and metadata of a KV block must fit in 4 KiB");
    auto at = co_await reserve(bytes.value().size(), may_roll);
    if (!at) co_return at.as_failure();
    segment* s = find_segment(at->first);
    FJORD_ASSERT(s != nullptr);
    record_header h;
    h.value_bytes = bytes.value().size();
    h.value_crc = bytes.value_crc;
    h.flags = flags;
    h.created_ms = created_ms;
    h.key = key;
    h.meta = meta;
    auto record = bytes.record();
    if (!encode_header(record.subspan(0, record_header_bytes), h, s->nonce))
        co_return base::fail(base::errc::metadata_too_large,
                             "the key and metadata of a KV block must fit in 4 KiB");
    ++s->writes_in_flight;
    int rc = co_await _options.fs->write(s->fd, record.data(), static_cast<unsigned>(record.size()),
                                         at->second);
    --s->writes_in_flight;
    const bool written = static_cast<std::size_t>(rc) == record.size();
    if (written) s->keys.push_back(key);
    user_done(*s);
    if (rc < 0) co_return io_failure("write KV segment", rc);
    if (!written) co_return base::fail(base::errc::io_error, "short write to a KV segment");
    seq_out = at->first;
    offset_out = at->second;
    co_return base::result<void>{};
}

io::task<base::result<std::shared_ptr<store::block_buffer>>> shard_log::read_record(
    std::uint64_t seq, std::uint64_t offset, const std::string& key, std::uint64_t value_bytes,
    std::uint32_t value_crc, bool queued) {
    segment* s = find_segment(seq);
    if (s == nullptr || s->fd < 0)
        co_return base::fail(base::errc::not_found, "the block's segment was reclaimed");
    // Counted as the segment's reader before it waits its turn for the drive (FIFO), so that the
    // segment is not released while the read is queued. The memory is taken once admitted, so that
    // queued reads hold none.
    ++s->readers;
    const std::size_t record_bytes = store::block_buffer::record_bytes_for(value_bytes);
    std::optional<io::semaphore::permit> admitted;
    if (queued && _options.read_budget != nullptr) {
        co_await _options.read_budget->acquire(record_bytes);
        admitted.emplace(*_options.read_budget, record_bytes);
    }
    auto bytes = store::block_buffer::allocate(value_bytes);  // (bad_alloc ends the process)
    auto record = bytes->record();
    const std::uint64_t nonce = s->nonce;
    int rc = co_await _options.fs->read(s->fd, record.data(), static_cast<unsigned>(record.size()),
                                        offset);
    --s->readers;
    user_done(*s);
    admitted.reset();  // the drive is free for the next read; the checks below are CPU only
    if (rc < 0) co_return io_failure("read KV segment", rc);
    auto h = static_cast<std::size_t>(rc) == record.size()
                 ? decode_header(record.subspan(0, record_header_bytes), nonce)
                 : std::nullopt;
    if (!h || h->key != key || h->value_bytes != value_bytes || h->flags != 0 ||
        h->value_crc != value_crc || base::crc32c(bytes->value()) != value_crc)
        co_return base::fail(base::errc::data_corrupted,
                             "a KV block failed its checks (header or CRC32C)");
    bytes->value_crc = value_crc;
    co_return bytes;
}

io::task<base::result<std::pair<store::block_ref, store::object_record>>> shard_log::read(
    std::string key) {
    const cache_entry* found = find(key);
    if (found == nullptr) co_return base::fail(base::errc::no_such_key, "no such KV block");
    auto it = _index.find(key);
    it->second.referenced = true;
    if (it->second.dram) {
        _dram->touch(&it->second);
        co_return std::pair<store::block_ref, store::object_record>{it->second.dram,
                                                                    it->second.meta};
    }
    const cache_entry e = it->second;
    auto got = co_await read_record(e.segment_seq, e.offset, key, e.value_bytes, e.value_crc);
    it = _index.find(key);
    const bool same = it != _index.end() && it->second.segment_seq == e.segment_seq &&
                      it->second.offset == e.offset;
    if (!got) {
        if (got.err().code == base::errc::data_corrupted) {
            LOG_WARN("KV block %s in %s failed its CRC32C: dropped", key.c_str(),
                     _options.directory.c_str());
            ++_stats.corrupt_blocks;
            if (same) drop(it);
            co_return base::fail(base::errc::no_such_key, "the KV block was corrupt and dropped");
        }
        if (got.err().code == base::errc::not_found) {
            if (same) drop(it);
            co_return base::fail(base::errc::no_such_key, "the KV block was evicted");
        }
        co_return got.as_failure();
    }
    if (same && !it->second.dram) {
        it->second.dram = *got;
        _dram->insert(&it->second);
    }
    co_return std::pair<store::block_ref, store::object_record>{std::move(*got), e.meta};
}

io::task<base::result<bool>> shard_log::write(std::string key,
                                              std::shared_ptr<store::block_buffer> bytes,
                                              store::object_record meta,
                                              store::write_conditions conditions) {
    const cache_entry* existing = find(key);
    if (conditions.if_none_match_any && (existing != nullptr || _writing.contains(key)))
        co_return false;
    if (conditions.if_match_etag &&
        (existing == nullptr || existing->meta.etag != *conditions.if_match_etag))
        co_return base::fail(base::errc::precondition_failed,
                             "At least one of the pre-conditions you specified did not hold");
    if (bytes->value().size() > max_value_bytes())
        co_return base::fail(base::errc::entity_too_large, "a KV block may be at most " +
                                                               std::to_string(max_value_bytes()) +
                                                               " bytes in this bucket");
    meta.size_bytes = bytes->value().size();
    cache_entry e;
    e.value_bytes = meta.size_bytes;
    e.value_crc = bytes->value_crc;
    e.created_ms = base::unix_now_ms();
    e.meta = meta;
    e.dram = bytes;
    const std::int64_t created_ms = e.created_ms;
    if (_options.ack == store::kv_write_ack::dram && _write_backs < max_write_backs) {
        index(key, std::move(e));
        ++_write_backs;
        io::spawn(
            write_back(shared_from_this(), key, std::move(bytes), std::move(meta), created_ms));
        co_return true;
    }
    ++_writing[key];
    std::uint64_t seq = 0, offset = 0;
    auto appended = co_await append(key, *bytes, meta, created_ms, 0, seq, offset);
    if (--_writing[key] == 0) _writing.erase(key);
    if (!appended) co_return appended.as_failure();
    if (!is_live(seq)) co_return true;  // its segment was reclaimed while it was written: evicted
    e.segment_seq = seq;
    e.offset = offset;
    e.on_disk = true;
    index(key, std::move(e));
    co_return true;
}

io::task<void> shard_log::write_back(std::shared_ptr<shard_log> keep, std::string key,
                                     std::shared_ptr<store::block_buffer> bytes,
                                     store::object_record meta, std::int64_t created_ms) {
    (void)keep;  // the shard lives until this ends (a bucket may be deleted meanwhile)
    std::uint64_t seq = 0, offset = 0;
    auto appended = co_await append(key, *bytes, meta, created_ms, 0, seq, offset);
    --_write_backs;
    auto it = _index.find(key);
    if (it == _index.end() || it->second.dram != bytes || it->second.on_disk) co_return;
    if (!appended || !is_live(seq)) {
        // It is a cache: a block that cannot reach NVMe leaves rather than pin DRAM for good.
        if (!appended)
            LOG_WARN("KV write-back of %s failed: %s (the block is dropped)", key.c_str(),
                     appended.err().message.c_str());
        drop(it);
        co_return;
    }
    it->second.segment_seq = seq;
    it->second.offset = offset;
    it->second.on_disk = true;
    _dram->trim();
}

io::task<base::result<std::optional<store::object_record>>> shard_log::remove(
    std::string key, store::write_conditions conditions) {
    const cache_entry* existing = find(key);
    if (conditions.if_match_etag &&
        (existing == nullptr || existing->meta.etag != *conditions.if_match_etag))
        co_return base::fail(base::errc::precondition_failed,
                             "At least one of the pre-conditions you specified did not hold");
    if (existing == nullptr) co_return std::optional<store::object_record>{};
    store::object_record removed = existing->meta;
    drop(_index.find(key));
    // The tombstone keeps the key absent after a restart (the older record is still in its segment).
    auto tombstone = store::block_buffer::allocate(0);
    tombstone->value_crc = base::crc32c({});
    std::uint64_t seq = 0, offset = 0;
    FJORD_CO_TRY(co_await append(key, *tombstone, {}, base::unix_now_ms(), record_flag_tombstone,
                                 seq, offset));
    co_return std::optional<store::object_record>{std::move(removed)};
}

std::vector<std::pair<std::string, store::object_record>> shard_log::scan(
    const std::string& prefix, const std::string& start_after, std::size_t limit) {
    std::vector<std::pair<std::string, store::object_record>> out;
    for (auto& [key, e] : _index) {
        if (key.compare(0, prefix.size(), prefix) != 0 || key <= start_after || expired(e))
            continue;
        out.emplace_back(key, e.meta);
    }
    std::sort(out.begin(), out.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    if (out.size() > limit) out.resize(limit);
    return out;
}

shard_stats shard_log::stats() const {
    shard_stats s = _stats;
    s.blocks = _index.size();
    s.disk_bytes = (_segments.size() + _retired.size() + (_next ? 1 : 0)) * _options.segment_bytes;
    return s;
}

}  // namespace fjord::kv
