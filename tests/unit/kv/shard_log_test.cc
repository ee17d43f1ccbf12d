// The KV tier's NVMe log (kv/shard_log.h) on real files: round trips, restart, capacity and the
// eviction order (FIFO by segment, reinsertion of blocks read since written), corruption detected and
// reported as a miss, a torn record in the newest segment skipped, and the DRAM tier's budget.

#include "kv/shard_log.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>

#include "base/checksum.h"
#include "io/reactor.h"
#include "io/semaphore.h"
#include "io/task.h"
#include "io/wait_group.h"
#include "kv/record.h"
#include "store/file_system.h"
#include "../store/store_test_util.h"

namespace fjord::kv {
namespace {

using store::testing::temp_dir;
constexpr std::uint64_t MiB = 1024 * 1024;

io::task<void> run_body(std::function<io::task<void>()> body, io::reactor_group* group) {
    co_await body();
    group->stop();
}

void run(std::function<io::task<void>()> body) {
    io::reactor_group group(1);
    group.run([&](unsigned core) {
        if (core == 0) io::spawn(run_body(body, &group));
    });
}

shard_options options_for(const std::string& dir, std::uint64_t capacity, std::uint64_t segment) {
    shard_options o;
    o.directory = dir + "/shard";
    o.capacity_bytes = capacity;
    o.segment_bytes = segment;
    o.fs = &store::posix_file_system();
    return o;
}

std::shared_ptr<store::block_buffer> block_of(std::size_t size, std::uint8_t seed) {
    auto b = store::block_buffer::allocate(size);
    auto v = b->value();
    for (std::size_t i = 0; i < v.size(); ++i)
        v[i] = static_cast<std::byte>((i * 31 + seed) & 0xff);
    b->value_crc = base::crc32c(v);
    return b;
}

store::object_record meta(std::string etag) {
    store::object_record r;
    r.etag = std::move(etag);
    r.content_type = "application/octet-stream";
    return r;
}

// The segment file with the lowest sequence number (file names sort by it).
std::string oldest_segment(const std::string& dir) {
    std::string oldest;
    for (const auto& f : std::filesystem::directory_iterator(dir))
        if (oldest.empty() || f.path().string() < oldest) oldest = f.path();
    return oldest;
}

// Overwrites bytes inside the header of the record at `offset`, as a torn write would.
void tear_header(const std::string& segment_path, std::uint64_t offset) {
    int fd = ::open(segment_path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0) << segment_path;
    const char junk[16] = "torn torn torn ";
    ASSERT_EQ(::pwrite(fd, junk, sizeof junk, static_cast<off_t>(offset + 20)), 16);
    ::close(fd);
}

std::shared_ptr<shard_log> open_log(const shard_options& o, dram_cache* dram) {
    auto opened = shard_log::open_blocking(o, dram);
    EXPECT_TRUE(opened) << (opened ? "" : opened.err().message);
    return opened ? std::move(*opened) : nullptr;
}

TEST(ShardLog, RoundTripAndRestartKeepBlocksAndDeletes) {
    temp_dir dir;
    auto o = options_for(dir.path(), 16 * MiB, 4 * MiB);
    {
        dram_cache dram(64 * MiB);
        auto log = open_log(o, &dram);
        run([&]() -> io::task<void> {
            for (int i = 0; i < 20; ++i) {
                auto w = co_await log->write("k" + std::to_string(i), block_of(100'000 + i, i),
                                             meta("e" + std::to_string(i)), {});
                EXPECT_TRUE(w && *w);
            }
            store::write_conditions if_absent;
            if_absent.if_none_match_any = true;
            auto again = co_await log->write("k3", block_of(10, 9), meta("x"), if_absent);
            EXPECT_TRUE(again && !*again) << "an existing key is kept under If-None-Match";
            auto removed = co_await log->remove("k7", {});
            EXPECT_TRUE(removed && removed->has_value());
        });
    }
    dram_cache dram(64 * MiB);
    auto log = open_log(o, &dram);
    EXPECT_EQ(log->stats().blocks, 19u);
    EXPECT_EQ(log->find("k7"), nullptr) << "the tombstone survives the restart";
    run([&]() -> io::task<void> {
        for (int i = 0; i < 20; ++i) {
            if (i == 7) continue;
            auto r = co_await log->read("k" + std::to_string(i));
            EXPECT_TRUE(r) << i;
            if (!r) continue;
            auto expected = block_of(100'000 + i, i);
            EXPECT_EQ(r->first->value().size(), expected->value().size());
            EXPECT_TRUE(std::equal(r->first->value().begin(), r->first->value().end(),
                                   expected->value().begin()));
            EXPECT_EQ(r->second.etag, "e" + std::to_string(i));
        }
    });
}

TEST(ShardLog, CapacityIsNeverExceededAndEvictionIsFifoWithReinsertion) {
    temp_dir dir;
    const std::uint64_t capacity = 8 * MiB, segment = 1 * MiB;
    auto o = options_for(dir.path(), capacity, segment);
    dram_cache dram(0);  // no DRAM tier: every read comes from NVMe
    auto log = open_log(o, &dram);
    run([&]() -> io::task<void> {
        // 200 KiB blocks: five to a segment. Block "hot" is read after every write.
        auto w = co_await log->write("hot", block_of(200 * 1024, 1), meta("h"), {});
        EXPECT_TRUE(w && *w);
        for (int i = 0; i < 200; ++i) {
            auto put = co_await log->write("b" + std::to_string(i), block_of(200 * 1024, i),
                                           meta("b"), {});
            EXPECT_TRUE(put && *put) << i;
            EXPECT_LE(log->stats().disk_bytes, capacity);
            auto hot = co_await log->read("hot");
            EXPECT_TRUE(hot) << "a block in use is reinserted, not evicted (write " << i << ")";
        }
    });
    auto s = log->stats();
    // 201 blocks of five to a segment, seven segments kept: about 33 reclaimed; "hot" moved forward
    // each time its segment came up (every seventh).
    EXPECT_GE(s.reclaimed_segments, 30u);
    EXPECT_GE(s.reinserted_blocks, 4u);
    EXPECT_GT(s.evicted_blocks, 150u);
    // FIFO: the newest blocks are all there, the oldest gone.
    for (int i = 190; i < 200; ++i) EXPECT_NE(log->find("b" + std::to_string(i)), nullptr) << i;
    for (int i = 0; i < 150; ++i) EXPECT_EQ(log->find("b" + std::to_string(i)), nullptr) << i;
    std::uint64_t files = 0;
    for (const auto& f : std::filesystem::directory_iterator(o.directory)) {
        (void)f;
        ++files;
    }
    EXPECT_LE(files * segment, capacity);
}

io::task<void> write_one(shard_log* log, std::string key, std::uint8_t seed, int* ok) {
    auto w = co_await log->write(std::move(key), block_of(300 * 1024, seed), meta("c"), {});
    if (w && *w) ++*ok;
}

// Writes that find the newest segment full while another write is opening the next one wait for it,
// however long it takes, instead of failing (a roll-over of a large segment takes milliseconds).
TEST(ShardLog, ConcurrentWritesAcrossRollOversAllSucceed) {
    temp_dir dir;
    auto o = options_for(dir.path(), 64 * MiB, 1 * MiB);
    dram_cache dram(0);
    auto log = open_log(o, &dram);
    int ok = 0;
    run([&]() -> io::task<void> {
        io::wait_group writes(64);
        for (int i = 0; i < 150; ++i)
            co_await writes.spawn(write_one(log.get(), "c" + std::to_string(i), i & 0xff, &ok));
        co_await writes.wait();
    });
    EXPECT_EQ(ok, 150);
    EXPECT_LE(log->stats().disk_bytes, 64 * MiB);
}

io::task<void> write_and_read(shard_log* log, int i, int* ok) {
    std::string key = "r" + std::to_string(i);
    auto w = co_await log->write(key, block_of(150 * 1024, i & 0xff), meta("r"), {});
    EXPECT_TRUE(w && *w) << key << ": " << (w ? "kept" : w.err().message);
    if (!w || !*w) co_return;
    ++*ok;
    // Sets its reference bit, a candidate for reinsertion (or a miss: the churn may evict it first).
    auto r = co_await log->read(key);
    (void)r;
}

// A reclaim reinserts blocks while other writes fill the fresh segment: a reinsertion that finds no
// room drops its block rather than wait for the roll-over it runs inside (which deadlocked).
TEST(ShardLog, ReinsertionUnderConcurrentWritesNeverWaitsForItself) {
    temp_dir dir;
    auto o = options_for(dir.path(), 8 * MiB, 1 * MiB);
    dram_cache dram(0);
    auto log = open_log(o, &dram);
    int ok = 0;
    run([&]() -> io::task<void> {
        io::wait_group writes(48);
        for (int i = 0; i < 400; ++i) co_await writes.spawn(write_and_read(log.get(), i, &ok));
        co_await writes.wait();
    });
    EXPECT_EQ(ok, 400);
    EXPECT_GT(log->stats().reclaimed_segments, 20u);
    EXPECT_LE(log->stats().disk_bytes, 8 * MiB);
}

TEST(ShardLog, CorruptBlockIsReportedAsMissAndDropped) {
    temp_dir dir;
    auto o = options_for(dir.path(), 16 * MiB, 4 * MiB);
    dram_cache dram(0);
    auto log = open_log(o, &dram);
    run([&]() -> io::task<void> {
        auto w = co_await log->write("victim", block_of(50'000, 3), meta("v"), {});
        EXPECT_TRUE(w && *w);
    });
    // Flip one byte of the block's value on disk (the first record: header, then the value).
    std::string seg = oldest_segment(o.directory);
    int fd = ::open(seg.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    unsigned char byte = 0;
    ASSERT_EQ(::pread(fd, &byte, 1, record_header_bytes + 1234), 1);
    byte ^= 0x40;
    ASSERT_EQ(::pwrite(fd, &byte, 1, record_header_bytes + 1234), 1);
    ::close(fd);
    run([&]() -> io::task<void> {
        auto r = co_await log->read("victim");
        EXPECT_FALSE(r);
        if (!r) EXPECT_EQ(r.err().code, base::errc::no_such_key);
    });
    EXPECT_EQ(log->stats().corrupt_blocks, 1u);
    EXPECT_EQ(log->find("victim"), nullptr);
}

TEST(ShardLog, TornRecordInTheNewestSegmentIsSkippedAndLaterRecordsKept) {
    temp_dir dir;
    auto o = options_for(dir.path(), 16 * MiB, 4 * MiB);
    {
        dram_cache dram(0);
        auto log = open_log(o, &dram);
        run([&]() -> io::task<void> {
            for (const char* k : {"a", "b", "c"}) {
                auto w = co_await log->write(k, block_of(8192, 1), meta(k), {});
                EXPECT_TRUE(w && *w);
            }
        });
    }
    // Tear the header of "b" (the second record: 4 KiB header + 8 KiB value each).
    tear_header(oldest_segment(o.directory), record_bytes(8192));
    dram_cache dram(0);
    auto log = open_log(o, &dram);
    EXPECT_NE(log->find("a"), nullptr);
    EXPECT_EQ(log->find("b"), nullptr);
    EXPECT_NE(log->find("c"), nullptr) << "a record after a torn one in the newest segment is kept";
}

// A hole in an older segment (a torn or failed write) does not hide the records after it: every
// segment is searched to its end. And metadata too large for a header is refused before any space is
// reserved, so it leaves no hole.
TEST(ShardLog, RecordsAfterAHoleInAnOlderSegmentAreKept) {
    temp_dir dir;
    auto o = options_for(dir.path(), 16 * MiB, 1 * MiB);
    {
        dram_cache dram(0);
        auto log = open_log(o, &dram);
        run([&]() -> io::task<void> {
            for (int i = 0; i < 3; ++i) {
                auto w = co_await log->write("first" + std::to_string(i), block_of(8192, i),
                                             meta("f"), {});
                EXPECT_TRUE(w && *w);
            }
            store::object_record huge = meta("h");
            huge.content_type.assign(5000, 'x');
            auto refused = co_await log->write("huge", block_of(100, 1), huge, {});
            EXPECT_FALSE(refused);
            if (!refused) EXPECT_EQ(refused.err().code, base::errc::metadata_too_large);
            for (int i = 0; i < 20; ++i) {  // several more segments after the first
                auto w = co_await log->write("more" + std::to_string(i), block_of(300 * 1024, i),
                                             meta("m"), {});
                EXPECT_TRUE(w && *w);
            }
        });
    }
    // Tear the second record of the oldest segment.
    tear_header(oldest_segment(o.directory), record_bytes(8192));
    dram_cache dram(0);
    auto log = open_log(o, &dram);
    EXPECT_NE(log->find("first0"), nullptr);
    EXPECT_EQ(log->find("first1"), nullptr);
    EXPECT_NE(log->find("first2"), nullptr)
        << "the record after the hole in an old segment is kept";
    EXPECT_NE(log->find("more19"), nullptr);
}

TEST(ShardLog, DramTierKeepsToItsBudget) {
    temp_dir dir;
    auto o = options_for(dir.path(), 64 * MiB, 8 * MiB);
    dram_cache dram(1 * MiB);
    auto log = open_log(o, &dram);
    run([&]() -> io::task<void> {
        for (int i = 0; i < 40; ++i) {
            auto w =
                co_await log->write("k" + std::to_string(i), block_of(100'000, i), meta("m"), {});
            EXPECT_TRUE(w && *w);
            EXPECT_LE(dram.used_bytes(), dram.budget_bytes());
        }
        for (int i = 0; i < 40; ++i) {
            auto r = co_await log->read("k" + std::to_string(i));
            EXPECT_TRUE(r) << i;
            EXPECT_LE(dram.used_bytes(), dram.budget_bytes());
        }
    });
    EXPECT_GT(dram.evictions(), 30u);
}

io::task<void> read_and_mark(shard_log* log, std::string key, bool* done) {
    auto r = co_await log->read(std::move(key));
    EXPECT_TRUE(r) << (r ? "" : r.err().message);
    *done = true;
}

// A log whose NVMe reads wait in a read queue of `budget_bytes`, with no DRAM tier: every read goes to
// the drive.
struct queued_log {
    temp_dir dir;
    io::semaphore budget;
    dram_cache dram{0};
    shard_options options;
    std::shared_ptr<shard_log> log;
    queued_log(std::uint64_t capacity, std::uint64_t segment, std::size_t budget_bytes,
               std::int64_t release_wait_ms = 600'000)
        : budget(budget_bytes), options(options_for(dir.path(), capacity, segment)) {
        options.read_budget = &budget;
        options.release_wait_ms = release_wait_ms;
        log = open_log(options, &dram);
    }
};

// NVMe reads take their record's bytes from the core's read budget before they go to the drive: while
// the budget is held, a read waits; once it is free, the read runs. A block larger than the whole budget
// is read alone rather than never, and every read gives its bytes back.
TEST(ShardLog, NvmeReadsWaitForTheReadBudget) {
    constexpr std::size_t budget_bytes = 256 * 1024;
    queued_log q(16 * MiB, 4 * MiB, budget_bytes);
    auto& log = q.log;
    auto& budget = q.budget;
    run([&]() -> io::task<void> {
        EXPECT_TRUE(co_await log->write("small", block_of(100'000, 1), meta("m"), {}));
        EXPECT_TRUE(co_await log->write("big", block_of(1 * MiB, 2), meta("m"), {}));
        co_await budget.acquire(budget_bytes);
        bool done = false;
        io::spawn(read_and_mark(log.get(), "small", &done));
        for (int i = 0; i < 20; ++i) co_await io::sleep_for(1);
        EXPECT_FALSE(done) << "a read waits while the budget is taken";
        budget.release(budget_bytes);
        for (int i = 0; i < 10'000 && !done; ++i) co_await io::sleep_for(1);
        EXPECT_TRUE(done);
        auto big = co_await log->read("big");
        EXPECT_TRUE(big) << "a block larger than the budget is still read";
        if (big) EXPECT_EQ(big->first->value().size(), 1 * MiB);
        EXPECT_EQ(budget.available(), budget_bytes);
    });
}

io::task<void> write_many(shard_log* log, int count, bool* done) {
    for (int i = 0; i < count; ++i) {
        auto w =
            co_await log->write("fill" + std::to_string(i), block_of(200'000, i), meta("m"), {});
        EXPECT_TRUE(w && *w) << i;
    }
    *done = true;
}

// A read queued for the drive keeps its segment: the segment is reclaimed (its key written again
// elsewhere, then enough writes to roll past the capacity), but not released before the read ran, and
// the read answers with the block it looked up, not "no such key".
TEST(ShardLog, AQueuedReadKeepsItsSegmentUntilItRan) {
    constexpr std::size_t budget_bytes = 1 * MiB;
    queued_log q(8 * MiB, 1 * MiB, budget_bytes);
    auto& log = q.log;
    auto& budget = q.budget;
    run([&]() -> io::task<void> {
        EXPECT_TRUE(co_await log->write("k", block_of(100'000, 1), meta("old"), {}));
        co_await budget.acquire(budget_bytes);
        bool read_done = false, writes_done = false;
        io::spawn(read_and_mark(log.get(), "k", &read_done));  // queued at once
        EXPECT_TRUE(co_await log->write("k", block_of(100'000, 2), meta("new"), {}));
        io::spawn(write_many(log.get(), 60, &writes_done));
        for (int i = 0; i < 50; ++i) co_await io::sleep_for(1);
        EXPECT_FALSE(read_done);
        EXPECT_FALSE(writes_done) << "the reclaim waits for the queued read";
        budget.release(budget_bytes);
        for (int i = 0; i < 20'000 && !(read_done && writes_done); ++i) co_await io::sleep_for(1);
        EXPECT_TRUE(read_done && writes_done);
        EXPECT_GT(log->stats().reclaimed_segments, 0u);
    });
}

// The reclaim's moves of blocks read since written skip the read queue: writers wait for the reclaim, so
// a queue full of client reads must not hold them up.
TEST(ShardLog, ReclaimMovesDoNotWaitInTheReadQueue) {
    constexpr std::size_t budget_bytes = 1 * MiB;
    queued_log q(8 * MiB, 1 * MiB, budget_bytes);  // no DRAM: the move reads from the drive
    auto& log = q.log;
    auto& budget = q.budget;
    run([&]() -> io::task<void> {
        EXPECT_TRUE(co_await log->write("hot", block_of(100'000, 1), meta("m"), {}));
        EXPECT_TRUE(co_await log->read("hot"));  // read since written: moved, not evicted
        co_await budget.acquire(budget_bytes);   // client reads hold the whole queue
        bool writes_done = false;
        io::spawn(write_many(log.get(), 40, &writes_done));
        for (int i = 0; i < 10'000 && !writes_done; ++i) co_await io::sleep_for(1);
        EXPECT_TRUE(writes_done) << "writes waited for the read queue";
        budget.release(budget_bytes);
        for (int i = 0; i < 20'000 && !writes_done; ++i) co_await io::sleep_for(1);
        EXPECT_GT(log->stats().reinserted_blocks, 0u);
        auto hot = co_await log->read("hot");
        EXPECT_TRUE(hot);
        if (hot) EXPECT_EQ(hot->first->value().size(), 100'000u);
    });
}

// A segment still in use when the reclaim gives up waiting for it is left open, and the reclaim goes on
// (writers do not wait for it); the segment's last user then closes and removes it.
TEST(ShardLog, ASegmentLeftOpenIsRemovedByItsLastReader) {
    constexpr std::size_t budget_bytes = 1 * MiB;
    queued_log q(8 * MiB, 1 * MiB, budget_bytes, /*release_wait_ms=*/20);
    auto& log = q.log;
    run([&]() -> io::task<void> {
        EXPECT_TRUE(co_await log->write("k", block_of(100'000, 1), meta("old"), {}));
        const std::string first_segment = oldest_segment(q.options.directory);
        co_await q.budget.acquire(budget_bytes);
        bool read_done = false, writes_done = false;
        io::spawn(read_and_mark(log.get(), "k", &read_done));  // queued at once: holds the segment
        io::spawn(write_many(log.get(), 60, &writes_done));    // rolls past the first segment
        for (int i = 0; i < 20'000 && !writes_done; ++i) co_await io::sleep_for(1);
        EXPECT_TRUE(writes_done) << "the reclaim gave up waiting and went on";
        EXPECT_FALSE(read_done);
        EXPECT_GT(log->stats().reclaimed_segments, 0u);
        EXPECT_TRUE(std::filesystem::exists(first_segment)) << "left open for its reader";
        q.budget.release(budget_bytes);
        for (int i = 0; i < 10'000 && !read_done; ++i) co_await io::sleep_for(1);
        EXPECT_TRUE(read_done);
        for (int i = 0; i < 10'000 && std::filesystem::exists(first_segment); ++i)
            co_await io::sleep_for(1);
        EXPECT_FALSE(std::filesystem::exists(first_segment)) << "removed by its last reader";
    });
}

TEST(ShardLog, DramAcknowledgedWritesReachNvme) {
    temp_dir dir;
    auto o = options_for(dir.path(), 16 * MiB, 4 * MiB);
    o.ack = store::kv_write_ack::dram;
    {
        dram_cache dram(64 * MiB);
        auto log = open_log(o, &dram);
        run([&]() -> io::task<void> {
            for (int i = 0; i < 10; ++i) {
                auto w = co_await log->write("k" + std::to_string(i), block_of(30'000, i),
                                             meta("m"), {});
                EXPECT_TRUE(w && *w);
            }
            EXPECT_GT(log->write_backs_in_flight(), 0u) << "acknowledged before NVMe";
            // The write-backs run on; wait (bounded) until they have landed.
            for (int i = 0; i < 10'000 && log->write_backs_in_flight() > 0; ++i)
                co_await io::sleep_for(1);
            EXPECT_EQ(log->write_backs_in_flight(), 0u);
        });
    }
    dram_cache dram(64 * MiB);
    auto log = open_log(o, &dram);
    EXPECT_EQ(log->stats().blocks, 10u);
}

}  // namespace
}  // namespace fjord::kv
