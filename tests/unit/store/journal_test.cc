#include "store/journal.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "io/reactor.h"
#include "io/task.h"
#include "store_test_util.h"

namespace fjord::store {
namespace {

using testing::temp_dir;

struct visited {
    std::uint64_t seq;
    std::uint8_t type;
    std::string payload;
    bool operator==(const visited&) const = default;
};

std::string payload_for(std::uint64_t i) {
    // Varying lengths, including empty payloads, so record boundaries are not regular.
    return std::string(static_cast<std::size_t>((i * 37) % 101), static_cast<char>('a' + i % 26)) +
           std::to_string(i);
}

// Frames records first_seq .. first_seq + count - 1; returns the offset where each record starts.
std::vector<std::size_t> frame_many(std::string& image, std::uint64_t first_seq,
                                    std::uint64_t count) {
    std::vector<std::size_t> starts;
    for (std::uint64_t i = 0; i < count; ++i) {
        starts.push_back(image.size());
        frame_record(image, first_seq + i, static_cast<std::uint8_t>(i % 7 + 1),
                     payload_for(first_seq + i));
    }
    return starts;
}

std::vector<visited> scan_all(std::string_view image, std::uint64_t first_seq,
                              journal_scan* scan_out) {
    std::vector<visited> out;
    *scan_out = scan_journal(image, first_seq,
                             [&](std::uint64_t seq, std::uint8_t type, std::string_view p) {
                                 out.push_back({seq, type, std::string(p)});
                             });
    return out;
}

TEST(journal, frame_and_scan_round_trip_many_records) {
    std::string image;
    const std::uint64_t count = 1000;
    frame_many(image, 1, count);
    journal_scan scan;
    auto records = scan_all(image, 1, &scan);
    ASSERT_EQ(records.size(), count);
    for (std::uint64_t i = 0; i < count; ++i) {
        EXPECT_EQ(records[i].seq, i + 1);
        EXPECT_EQ(records[i].type, static_cast<std::uint8_t>(i % 7 + 1));
        EXPECT_EQ(records[i].payload, payload_for(i + 1));
    }
    EXPECT_EQ(scan.records, count);
    EXPECT_EQ(scan.last_seq, count);
    EXPECT_EQ(scan.valid_bytes, image.size());
    EXPECT_FALSE(scan.torn_tail);
}

TEST(journal, empty_image_has_no_records_and_no_torn_tail) {
    journal_scan scan;
    auto records = scan_all("", 1, &scan);
    EXPECT_TRUE(records.empty());
    EXPECT_EQ(scan.valid_bytes, 0u);
    EXPECT_EQ(scan.last_seq, 0u);
    EXPECT_FALSE(scan.torn_tail);
}

TEST(journal, torn_tail_at_every_length_of_last_record_is_detected) {
    std::string image;
    auto starts = frame_many(image, 1, 5);
    const std::size_t last_start = starts.back();
    ASSERT_GT(image.size() - last_start, journal_record_header_bytes);
    for (std::size_t kept = 1; kept < image.size() - last_start; ++kept) {
        SCOPED_TRACE("bytes of the last record kept: " + std::to_string(kept));
        journal_scan scan;
        auto records = scan_all(std::string_view(image).substr(0, last_start + kept), 1, &scan);
        EXPECT_EQ(records.size(), 4u);
        EXPECT_EQ(scan.records, 4u);
        EXPECT_EQ(scan.last_seq, 4u);
        EXPECT_EQ(scan.valid_bytes, last_start);
        EXPECT_TRUE(scan.torn_tail);
    }
}

TEST(journal, read_journal_truncates_every_torn_tail_length) {
    temp_dir dir;
    std::string image;
    auto starts = frame_many(image, 1, 5);
    const std::size_t last_start = starts.back();
    const std::string path = dir.path() + "/journal.log";
    for (std::size_t kept = 1; kept < image.size() - last_start; ++kept) {
        SCOPED_TRACE("bytes of the last record kept: " + std::to_string(kept));
        testing::write_file(path, image.substr(0, last_start + kept));
        std::uint64_t visits = 0;
        auto scan = read_journal(posix_file_system(), path, 1,
                                 [&](std::uint64_t, std::uint8_t, std::string_view) { ++visits; });
        ASSERT_TRUE(scan.has_value()) << scan.err().message;
        EXPECT_EQ(visits, 4u);
        EXPECT_TRUE(scan->torn_tail);
        EXPECT_EQ(scan->valid_bytes, last_start);
        EXPECT_EQ(testing::file_size(path), last_start);
        EXPECT_EQ(testing::read_file(path), image.substr(0, last_start));
    }
    // A complete journal is left alone.
    testing::write_file(path, image);
    auto scan = read_journal(posix_file_system(), path, 1,
                             [](std::uint64_t, std::uint8_t, std::string_view) {});
    ASSERT_TRUE(scan.has_value());
    EXPECT_FALSE(scan->torn_tail);
    EXPECT_EQ(scan->records, 5u);
    EXPECT_EQ(testing::file_size(path), image.size());
}

TEST(journal, damage_followed_by_more_than_a_batch_of_valid_records_refuses_recovery) {
    temp_dir dir;
    std::string image;
    auto starts =
        frame_many(image, 1, 40000);  // about 2.6 MiB: valid records reach far past one batch
    ASSERT_GT(image.size(), starts[100] + 2 * max_batch_bytes);
    image[starts[100] + 10] ^= 0x04;  // bit rot in record 101 (its sequence number, under the CRC)
    journal_scan scan;
    auto seen = scan_all(image, 1, &scan);
    EXPECT_EQ(seen.size(), 100u);
    EXPECT_TRUE(scan.corrupt_before_valid_records);
    const std::string path = dir.path() + "/journal.log";
    testing::write_file(path, image);
    auto read = read_journal(posix_file_system(), path, 1,
                             [](std::uint64_t, std::uint8_t, std::string_view) {});
    ASSERT_FALSE(read.has_value());
    EXPECT_EQ(read.code(), base::errc::data_corrupted);
    EXPECT_EQ(testing::file_size(path), image.size()) << "a damaged journal must not be truncated";
}

TEST(journal, damage_within_the_last_batch_is_a_torn_tail) {
    std::string image;
    auto starts = frame_many(image, 1, 2000);
    ASSERT_LT(image.size() - starts[1500], max_batch_bytes);
    image[starts[1500] + 10] ^= 0x04;
    journal_scan scan;
    auto seen = scan_all(image, 1, &scan);
    EXPECT_EQ(seen.size(), 1500u);
    EXPECT_TRUE(scan.torn_tail);
    EXPECT_FALSE(scan.corrupt_before_valid_records);
}

TEST(journal, read_journal_of_missing_file_is_io_error) {
    temp_dir dir;
    auto scan = read_journal(posix_file_system(), dir.path() + "/absent.log", 1,
                             [](std::uint64_t, std::uint8_t, std::string_view) {});
    ASSERT_FALSE(scan.has_value());
    EXPECT_EQ(scan.code(), base::errc::io_error);
}

TEST(journal, flipped_bit_anywhere_in_a_middle_record_stops_the_scan_there) {
    std::string image;
    auto starts = frame_many(image, 1, 9);
    const std::size_t middle = 4;
    const std::size_t begin = starts[middle], end = starts[middle + 1];
    for (std::size_t byte = begin; byte < end; ++byte) {
        for (int bit = 0; bit < 8; ++bit) {
            SCOPED_TRACE("byte " + std::to_string(byte - begin) + " bit " + std::to_string(bit));
            std::string damaged = image;
            damaged[byte] = static_cast<char>(damaged[byte] ^ (1 << bit));
            journal_scan scan;
            auto records = scan_all(damaged, 1, &scan);
            ASSERT_EQ(records.size(), middle);
            EXPECT_EQ(scan.valid_bytes, begin);
            EXPECT_EQ(scan.last_seq, middle);
            EXPECT_TRUE(scan.torn_tail);
        }
    }
}

TEST(journal, sequence_gap_stops_the_scan) {
    std::string image;
    frame_many(image, 1, 3);  // seqs 1, 2, 3
    std::size_t before_gap = image.size();
    frame_many(image, 5, 3);  // seqs 5, 6, 7: 4 is missing
    journal_scan scan;
    auto records = scan_all(image, 1, &scan);
    EXPECT_EQ(records.size(), 3u);
    EXPECT_EQ(scan.last_seq, 3u);
    EXPECT_EQ(scan.valid_bytes, before_gap);
    EXPECT_TRUE(scan.torn_tail);
}

TEST(journal, repeated_sequence_number_stops_the_scan) {
    std::string image;
    frame_many(image, 1, 3);
    std::size_t before = image.size();
    frame_record(image, 3, 1, "again");
    journal_scan scan;
    auto records = scan_all(image, 1, &scan);
    EXPECT_EQ(records.size(), 3u);
    EXPECT_EQ(scan.valid_bytes, before);
    EXPECT_TRUE(scan.torn_tail);
}

TEST(journal, first_seq_mismatch_stops_at_once) {
    std::string image;
    frame_many(image, 10, 4);
    journal_scan scan;
    auto records = scan_all(image, 11, &scan);
    EXPECT_TRUE(records.empty());
    EXPECT_EQ(scan.records, 0u);
    EXPECT_EQ(scan.valid_bytes, 0u);
    EXPECT_TRUE(scan.torn_tail);

    // first_seq 0 accepts any start; the exact first_seq accepts everything.
    records = scan_all(image, 0, &scan);
    EXPECT_EQ(records.size(), 4u);
    EXPECT_EQ(scan.last_seq, 13u);
    records = scan_all(image, 10, &scan);
    EXPECT_EQ(records.size(), 4u);
    EXPECT_FALSE(scan.torn_tail);
}

TEST(journal, a_whole_record_with_an_unexpected_sequence_number_is_a_sequence_break) {
    // A torn write leaves a record with a bad checksum or cut short; a whole one with a good checksum and
    // the wrong number at the start means the file and what came before it disagree.
    std::string image;
    frame_many(image, 5, 3);
    journal_scan scan;
    scan_all(image, 1, &scan);
    EXPECT_TRUE(scan.sequence_break);
    // Further in, with more than a batch after it: damage in the middle, not a torn tail.
    std::string middle;
    frame_many(middle, 1, 3);
    frame_record(middle, 9, 1, std::string(max_batch_bytes, 'm'));
    scan_all(middle, 1, &scan);
    EXPECT_TRUE(scan.sequence_break);
    // In the last batch (a crash may expose old bytes there): dropped as a torn tail.
    std::string tail;
    frame_many(tail, 1, 3);
    frame_many(tail, 5, 2);
    scan_all(tail, 1, &scan);
    EXPECT_TRUE(scan.torn_tail);
    EXPECT_FALSE(scan.sequence_break);
    std::string torn;
    frame_many(torn, 1, 3);
    torn += std::string(journal_record_header_bytes + 4, '\x5a');
    scan_all(torn, 1, &scan);
    EXPECT_TRUE(scan.torn_tail);
    EXPECT_FALSE(scan.sequence_break);
}

TEST(journal, read_journal_refuses_a_sequence_break_and_leaves_the_file_alone) {
    temp_dir dir;
    const std::string path = dir.path() + "/journal.log";
    std::string image;
    frame_many(image, 7,
               5);  // starts at 7 where 3 is expected: the snapshot before it says otherwise
    testing::write_file(path, image);
    auto scan = read_journal(posix_file_system(), path, 3,
                             [](std::uint64_t, std::uint8_t, std::string_view) {});
    ASSERT_FALSE(scan.has_value());
    EXPECT_EQ(scan.code(), base::errc::data_corrupted);
    EXPECT_EQ(testing::read_file(path), image) << "the journal was truncated";
}

TEST(journal, read_journal_refuses_any_damage_in_a_journal_that_is_not_the_last) {
    temp_dir dir;
    const std::string path = dir.path() + "/journal.log";
    std::string image;
    frame_many(image, 1, 4);
    image += "garbage tail";
    testing::write_file(path, image);
    auto visit = [](std::uint64_t, std::uint8_t, std::string_view) {};
    auto earlier = read_journal(posix_file_system(), path, 1, visit, false);
    ASSERT_FALSE(earlier.has_value());
    EXPECT_EQ(earlier.code(), base::errc::data_corrupted);
    EXPECT_EQ(testing::read_file(path), image);
    auto last = read_journal(posix_file_system(), path, 1, visit, true);
    ASSERT_TRUE(last.has_value());
    EXPECT_TRUE(last->torn_tail);
}

TEST(journal, oversized_length_field_is_a_torn_tail_not_a_crash) {
    std::string image;
    frame_many(image, 1, 2);
    std::size_t valid = image.size();
    std::string bogus(journal_record_header_bytes, '\0');
    std::uint32_t huge = journal_max_payload_bytes + 1;
    std::memcpy(bogus.data(), &huge, 4);
    image += bogus;
    journal_scan scan;
    auto records = scan_all(image, 1, &scan);
    EXPECT_EQ(records.size(), 2u);
    EXPECT_EQ(scan.valid_bytes, valid);
    EXPECT_TRUE(scan.torn_tail);
}

// ---- journal::append on a reactor ----

struct append_state {
    journal* log = nullptr;
    std::vector<int> durable_order;  // indices, in on_durable order
    std::vector<int> resumed_order;  // indices, in the order appenders resumed
    int failures = 0;
    int durable_before_resume_violations = 0;
};

io::task<void> append_one(append_state* st, int index, testing::local_latch* latch) {
    std::string payload =
        "record-" + std::to_string(index) + std::string(static_cast<std::size_t>(index % 13), 'x');
    auto outcome =
        co_await st->log->append(static_cast<std::uint8_t>(1 + index % 3), std::move(payload), {},
                                 [st, index] { st->durable_order.push_back(index); });
    if (!outcome) ++st->failures;
    // The callback must have run before this appender resumed.
    bool seen = false;
    for (int d : st->durable_order) seen = seen || d == index;
    if (!seen) ++st->durable_before_resume_violations;
    st->resumed_order.push_back(index);
    latch->count_down();
}

io::task<void> append_many(append_state* st, int count) {
    testing::local_latch latch(static_cast<std::size_t>(count));
    for (int i = 0; i < count; ++i) io::spawn(append_one(st, i, &latch));
    co_await latch.wait();
    // A second wave after the first has drained: the journal continues at the right offset and seq.
    testing::local_latch second(static_cast<std::size_t>(count));
    for (int i = count; i < 2 * count; ++i) io::spawn(append_one(st, i, &second));
    co_await second.wait();
    EXPECT_TRUE(st->log->idle());
}

TEST(journal, concurrent_appends_become_durable_in_append_order) {
    temp_dir dir;
    const std::string path = dir.path() + "/journal-00000001.log";
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    const std::uint64_t first_seq = 42;
    journal log(posix_file_system(), fd, path, 0, first_seq);
    append_state st;
    st.log = &log;
    const int count = 64;
    io::reactor_group group(1);
    group.run(
        [&](unsigned) { io::spawn(testing::run_then_stop(append_many(&st, count), &group)); });

    EXPECT_EQ(st.failures, 0);
    EXPECT_EQ(st.durable_before_resume_violations, 0);
    ASSERT_EQ(st.durable_order.size(), static_cast<std::size_t>(2 * count));
    for (int i = 0; i < 2 * count; ++i) EXPECT_EQ(st.durable_order[i], i);
    EXPECT_EQ(st.resumed_order.size(), static_cast<std::size_t>(2 * count));
    EXPECT_EQ(log.next_seq(), first_seq + 2 * count);
    EXPECT_EQ(log.durable_seq(), first_seq + 2 * count - 1);

    std::string image = testing::read_file(path);
    EXPECT_EQ(image.size(), log.size_bytes());
    journal_scan scan;
    auto records = scan_all(image, first_seq, &scan);
    ASSERT_EQ(records.size(), static_cast<std::size_t>(2 * count));
    for (int i = 0; i < 2 * count; ++i) {
        EXPECT_EQ(records[i].seq, first_seq + static_cast<std::uint64_t>(i));
        EXPECT_EQ(records[i].type, static_cast<std::uint8_t>(1 + i % 3));
        EXPECT_EQ(records[i].payload, "record-" + std::to_string(i) +
                                          std::string(static_cast<std::size_t>(i % 13), 'x'));
    }
    EXPECT_FALSE(scan.torn_tail);
}

io::task<void> count_attempt(int* attempts) {
    ++*attempts;  // and fails: the journal keeps its file
    co_return;
}

io::task<void> append_batches(append_state* st, int batches) {
    for (int b = 0; b < batches; ++b) {
        testing::local_latch latch(1);
        io::spawn(append_one(st, b, &latch));
        co_await latch.wait();
    }
}

TEST(journal, a_failing_rotation_is_tried_again_after_another_threshold_not_at_every_batch) {
    temp_dir dir;
    const std::string path = dir.path() + "/journal-00000001.log";
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    journal log(posix_file_system(), fd, path, 0, 1);
    int attempts = 0;
    log.set_rotation(1024, [&attempts] { return count_attempt(&attempts); });
    append_state st;
    st.log = &log;
    io::reactor_group group(1);
    group.run(
        [&](unsigned) { io::spawn(testing::run_then_stop(append_batches(&st, 400), &group)); });
    EXPECT_EQ(st.failures, 0);
    // 400 batches of 17-60 bytes: about 14 KiB, past the 1 KiB threshold after some 30 batches. Tried
    // at every batch from there, that is some 370 attempts; once per 1 KiB of growth, about 13.
    EXPECT_GE(attempts, 5);
    EXPECT_LE(attempts, static_cast<int>(log.size_bytes() / 1024) + 1);
}

TEST(journal, append_continues_after_recovered_offset) {
    temp_dir dir;
    const std::string path = dir.path() + "/journal.log";
    std::string image;
    frame_many(image, 1, 3);
    std::size_t valid = image.size();
    image += "garbage tail";
    testing::write_file(path, image);
    auto scan = read_journal(posix_file_system(), path, 1,
                             [](std::uint64_t, std::uint8_t, std::string_view) {});
    ASSERT_TRUE(scan.has_value());
    ASSERT_EQ(scan->valid_bytes, valid);

    int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    journal log(posix_file_system(), fd, path, scan->valid_bytes, scan->last_seq + 1);
    append_state st;
    st.log = &log;
    io::reactor_group group(1);
    group.run([&](unsigned) {
        io::spawn(testing::run_then_stop(
            [](append_state* s) -> io::task<void> {
                testing::local_latch latch(1);
                io::spawn(append_one(s, 0, &latch));
                co_await latch.wait();
            }(&st),
            &group));
    });
    EXPECT_EQ(st.failures, 0);
    journal_scan after;
    auto records = scan_all(testing::read_file(path), 1, &after);
    ASSERT_EQ(records.size(), 4u);
    EXPECT_EQ(records[3].seq, 4u);
    EXPECT_EQ(records[3].payload, "record-0");
    EXPECT_FALSE(after.torn_tail);
}

// ---- a failed fsync of a data directory ----

struct shared_failure_run {
    journal* a = nullptr;
    journal* b = nullptr;
    int dir_fd = -1;
    base::result<void> before, failed, after;
};

io::task<void> append_syncing(journal* log, int dir_fd, base::result<void>* out) {
    *out = co_await log->append(1, "record", {dir_fd}, [] {});
}

io::task<void> fail_one_directory_sync(shared_failure_run* r) {
    co_await append_syncing(r->b, r->dir_fd, &r->before);
    // A descriptor that is not open: its fsync fails, as a directory's does after a writeback error.
    co_await append_syncing(r->a, -1, &r->failed);
    co_await append_syncing(r->b, r->dir_fd, &r->after);
}

// After a failed fsync the directory entries that were not durable may be lost for good, whichever
// journal's shard made them: no journal of the engine may commit a record that could name them.
void run_shared_failure(bool share, shared_failure_run& r) {
    temp_dir dir;
    std::string path_a = dir.path() + "/journal-a.log", path_b = dir.path() + "/journal-b.log";
    int fd_a = ::open(path_a.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    int fd_b = ::open(path_b.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    r.dir_fd = ::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(fd_a, 0);
    ASSERT_GE(fd_b, 0);
    ASSERT_GE(r.dir_fd, 0);
    journal a(posix_file_system(), fd_a, path_a, 0, 1);
    journal b(posix_file_system(), fd_b, path_b, 0, 1);
    std::atomic<bool> failed{false};
    if (share) {
        a.share_data_dir_failure(&failed);
        b.share_data_dir_failure(&failed);
    }
    r.a = &a;
    r.b = &b;
    io::reactor_group group(1);
    group.run(
        [&](unsigned) { io::spawn(testing::run_then_stop(fail_one_directory_sync(&r), &group)); });
    ::close(r.dir_fd);
}

TEST(journal, a_failed_data_directory_fsync_stops_every_journal_that_shares_the_flag) {
    shared_failure_run r;
    run_shared_failure(true, r);
    EXPECT_TRUE(r.before.has_value());
    ASSERT_FALSE(r.failed.has_value());
    EXPECT_NE(r.failed.err().message.find("fsync data directory"), std::string::npos);
    ASSERT_FALSE(r.after.has_value());
    EXPECT_NE(r.after.err().message.find("restart the server"), std::string::npos);
}

TEST(journal, without_the_shared_flag_another_journal_would_go_on_committing) {
    shared_failure_run r;  // the control: what the engine did before journals shared the flag
    run_shared_failure(false, r);
    EXPECT_TRUE(r.before.has_value());
    EXPECT_FALSE(r.failed.has_value());
    EXPECT_TRUE(r.after.has_value());
}

}  // namespace
}  // namespace fjord::store
