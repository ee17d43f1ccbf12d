#pragma once

// One shard of a KV bucket: its index (key -> where the block is) and its log on NVMe, a sequence of
// segment files of `segment_bytes` each, preallocated, written append-only with O_DIRECT, each record
// a header and the block (record.h). The newest segment takes the appends; when it is full the oldest
// is reclaimed first if the shard holds its limit of segments: its blocks that were read since they
// were written are written again at the head of the log (second chance), the others leave the index,
// and its file is removed. So the shard never uses more than its capacity, eviction is FIFO with
// reinsertion of blocks in use (docs/kv.md, "Eviction"), and compaction happens as part of it.
//
// Recovery (open_blocking) rebuilds the index from the records' headers, newest record of a key last
// (a tombstone removes it). Every segment is searched to its end past a header that does not verify (a
// torn or failed write leaves a hole; what follows it stays), so a start reads the shard's segments
// once; recovered segments take no more appends. A block whose bytes fail their CRC32C when read is
// dropped and reads as absent.
//
// Owned by one core: every method runs there. Reads from a segment pin it, so reclaiming it waits for
// them before its file descriptor closes.

#include <coroutine>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/result.h"
#include "io/task.h"
#include "io/semaphore.h"
#include "kv/dram_cache.h"
#include "store/file_system.h"
#include "store/object_store.h"

namespace fjord::kv {

struct cache_entry {
    std::uint64_t segment_seq = 0;
    std::uint64_t offset = 0;
    std::uint64_t value_bytes = 0;
    std::uint32_t value_crc = 0;
    std::int64_t created_ms = 0;
    store::object_record meta;
    bool referenced = false;  // read since written: kept when its segment is reclaimed
    bool on_disk = false;     // false while a DRAM-acknowledged write is in flight
    std::shared_ptr<store::block_buffer> dram;  // the DRAM tier's copy, or null
    std::optional<dram_cache::position> lru;    // set while in the DRAM tier
};

struct shard_options {
    std::string directory;  // this shard's segment files
    std::uint64_t capacity_bytes = 0;
    std::uint64_t segment_bytes = 0;
    store::kv_write_ack ack = store::kv_write_ack::nvme;
    std::int64_t ttl_ms = 0;  // 0: none
    store::file_system* fs = nullptr;
    // Bytes of NVMe reads in flight on this core, shared by its shards (kv/README.md says why); null:
    // no bound.
    io::semaphore* read_budget = nullptr;
    // How long a reclaim waits for a segment's readers and writes (counted in 1 ms sleeps, so at
    // least this long) before it goes on and leaves the segment to them: the last closes and removes it.
    std::int64_t release_wait_ms = 600'000;
};

struct shard_stats {
    std::uint64_t blocks = 0;
    std::uint64_t disk_bytes = 0;  // segment files, allocated
    std::uint64_t reclaimed_segments = 0;
    std::uint64_t reinserted_blocks = 0;
    std::uint64_t evicted_blocks = 0;
    std::uint64_t corrupt_blocks = 0;
};

class shard_log : public std::enable_shared_from_this<shard_log> {
public:
    // Recovers the index from `options.directory` (created when missing). Blocking: at startup. Held
    // by shared pointers: background tasks (write-backs, the next segment) keep it alive.
    static base::result<std::shared_ptr<shard_log>> open_blocking(shard_options options,
                                                                  dram_cache* dram);
    ~shard_log();

    // The entry of a live key (not expired), or nullptr.
    const cache_entry* find(const std::string& key);
    io::task<base::result<std::pair<store::block_ref, store::object_record>>> read(std::string key);
    io::task<base::result<bool>> write(std::string key, std::shared_ptr<store::block_buffer> bytes,
                                       store::object_record meta,
                                       store::write_conditions conditions);
    io::task<base::result<std::optional<store::object_record>>> remove(
        std::string key, store::write_conditions conditions);
    // Keys with `prefix` after `start_after`, sorted, at most `limit`.
    std::vector<std::pair<std::string, store::object_record>> scan(const std::string& prefix,
                                                                   const std::string& start_after,
                                                                   std::size_t limit);
    shard_stats stats() const;
    // DRAM-acknowledged writes not yet on NVMe.
    unsigned write_backs_in_flight() const { return _write_backs; }
    std::uint64_t max_value_bytes() const;

private:
    struct segment {
        std::uint64_t seq = 0;
        std::uint64_t nonce = 0;
        int fd = -1;
        std::uint64_t used_bytes = 0;  // appends reserved so far
        unsigned writes_in_flight = 0;
        unsigned readers = 0;
        bool left_open = false;         // reclaimed while in use: its last user releases it
        std::uint64_t records = 0;      // found by recovery, tombstones included
        std::vector<std::string> keys;  // written here (some may have moved on since)
    };
    shard_log(shard_options options, dram_cache* dram);
    base::result<void> recover_blocking();
    base::result<void> recover_segment_blocking(segment& s);
    void apply_recovered(segment& s, std::uint64_t offset, struct record_header& h);
    segment* find_segment(std::uint64_t seq);
    bool expired(const cache_entry& e) const;
    // Reserves space for a record of `value_bytes` in the newest segment, rolling over (and reclaiming)
    // when it is full. Returns the segment and the offset. With may_roll false (the reinsertions of a
    // reclaim, which runs inside a roll-over), a full newest segment fails at once instead of waiting
    // for the roll-over in progress, which would be waiting for it.
    io::task<base::result<std::pair<std::uint64_t, std::uint64_t>>> reserve(
        std::uint64_t value_bytes, bool may_roll);
    io::task<base::result<void>> roll_over();
    io::task<base::result<std::unique_ptr<segment>>> create_segment();
    io::task<void> prepare_next(std::shared_ptr<shard_log> keep);
    void wake_roll_waiters();
    struct roll_waiter {
        shard_log* log;
        bool await_ready() const noexcept { return !log->_rolling && !log->_preparing; }
        void await_suspend(std::coroutine_handle<> h) { log->_roll_waiters.push_back(h); }
        void await_resume() const noexcept {}
    };
    io::task<void> reclaim_oldest();
    io::task<base::result<void>> append(const std::string& key, store::block_buffer& bytes,
                                        const store::object_record& meta, std::int64_t created_ms,
                                        std::uint32_t flags, std::uint64_t& seq_out,
                                        std::uint64_t& offset_out, bool may_roll = true);
    // queued: waits its turn in the core's read queue (client reads); the reclaim's moves do not, as
    // writers wait for them. A queued read counts as its segment's reader while it waits, so the
    // reclaim of that segment (and the writers behind it) waits for the reads queued ahead of it:
    // bounded by the queue, and what keeps the shard within its capacity.
    io::task<base::result<std::shared_ptr<store::block_buffer>>> read_record(
        std::uint64_t seq, std::uint64_t offset, const std::string& key, std::uint64_t value_bytes,
        std::uint32_t value_crc, bool queued = true);
    io::task<void> write_back(std::shared_ptr<shard_log> keep, std::string key,
                              std::shared_ptr<store::block_buffer> bytes, store::object_record meta,
                              std::int64_t created_ms);
    // The segment takes part in the log (not reclaimed).
    bool is_live(std::uint64_t seq) const;
    void index(const std::string& key, cache_entry e);
    void drop(std::unordered_map<std::string, cache_entry>::iterator it);
    io::task<void> release_segment(std::uint64_t seq);
    // Closes and removes a retired segment that has no users; the last user of a segment left open
    // starts it.
    io::task<void> close_retired(std::shared_ptr<shard_log> keep, std::uint64_t seq);
    void user_done(segment& s);

    shard_options _options;
    dram_cache* _dram;
    std::uint64_t _max_segments = 0;
    std::unordered_map<std::string, cache_entry> _index;
    std::deque<std::unique_ptr<segment>> _segments;  // oldest first; the last takes appends
    std::deque<std::unique_ptr<segment>>
        _retired;  // reclaimed, waiting for readers before their files close
    std::uint64_t _next_seq = 1;
    bool _rolling = false;           // a roll-over is in progress; others wait for it
    bool _preparing = false;         // the next segment is being made
    std::unique_ptr<segment> _next;  // made ahead; takes appends once the newest is full
    std::vector<std::coroutine_handle<>> _roll_waiters;
    unsigned _write_backs = 0;  // DRAM-acknowledged writes on their way to NVMe
    std::unordered_map<std::string, unsigned> _writing;  // keys with writes to NVMe in flight
    shard_stats _stats;
};

// The segment file name for a sequence number and nonce, and back.
std::string segment_file_name(std::uint64_t seq, std::uint64_t nonce);
bool parse_segment_file_name(const std::string& name, std::uint64_t& seq, std::uint64_t& nonce);

}  // namespace fjord::kv
