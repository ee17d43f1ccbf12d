// Recovery refuses damage instead of dropping acknowledged records: a damaged snapshot header, a journal
// that does not continue where the snapshot before it ends, damage in a journal that a later one follows.
// Each case is made on disk by hand after a real engine wrote the files.

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "store/codec.h"
#include "store/engine.h"
#include "store/engine_internal.h"
#include "store/journal.h"
#include "engine_test_util.h"
#include "store_test_util.h"

namespace fjord::store {
namespace {

using base::errc;
using namespace engine_testing;
using testing::temp_dir;

std::size_t data_file_count(const std::string& drive) {
    std::size_t n = 0;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(drive + "/objects"))
        if (entry.is_regular_file()) ++n;
    return n;
}

// Objects in journal 1, a snapshot, more objects in journal 2.
void objects_across_a_snapshot(engine& e) {
    run_engine(
        e,
        [](engine* en) -> io::task<void> {
            CO_ASSERT_TRUE(co_await en->create_bucket("kept"));
            for (int i = 0; i < 4; ++i)
                CO_ASSERT_TRUE(co_await put_object(en, "kept", "before-" + std::to_string(i),
                                                   "data " + std::to_string(i),
                                                   "b" + std::to_string(i), no_conditions));
            co_await en->snapshot_local_shards();
            for (int i = 0; i < 4; ++i)
                CO_ASSERT_TRUE(co_await put_object(en, "kept", "after-" + std::to_string(i),
                                                   "more " + std::to_string(i),
                                                   "a" + std::to_string(i), no_conditions));
        },
        1);
}

engine_options one_core(const std::string& dir) {
    engine_options o = test_options(dir);
    o.cores = 1;
    return o;
}

TEST(engine_recovery, a_damaged_snapshot_header_is_refused_and_no_data_is_removed) {
    temp_dir dir;
    {
        auto e = open_engine(one_core(dir.path()));
        ASSERT_NE(e, nullptr);
        objects_across_a_snapshot(*e);
    }
    const std::string snapshot = dir.path() + "/meta/shard-0/snapshot-00000002.snap";
    const std::string journal = dir.path() + "/meta/shard-0/journal-00000002.log";
    ASSERT_TRUE(testing::file_exists(snapshot));
    const std::size_t files = data_file_count(dir.path());
    ASSERT_EQ(files, 8u);
    const std::uint64_t journal_bytes = testing::file_size(journal);
    // One bit of last_seq (bytes 8..15 of the header).
    std::string image = testing::read_file(snapshot);
    image[9] = static_cast<char>(image[9] ^ 0x04);
    testing::write_file(snapshot, image);
    auto opened = engine::open(one_core(dir.path()));
    ASSERT_FALSE(opened.has_value()) << "opened with a damaged snapshot header";
    EXPECT_EQ(opened.code(), errc::data_corrupted);
    EXPECT_NE(opened.err().message.find("snapshot-00000002.snap"), std::string::npos)
        << opened.err().message;
    EXPECT_EQ(data_file_count(dir.path()), files) << "data files were removed";
    EXPECT_EQ(testing::file_size(journal), journal_bytes) << "the journal was truncated";
}

TEST(engine_recovery, a_journal_whose_first_record_has_the_wrong_sequence_number_is_refused) {
    temp_dir dir;
    {
        auto e = open_engine(one_core(dir.path()));
        ASSERT_NE(e, nullptr);
        objects_across_a_snapshot(*e);
    }
    // A well-formed record numbered one past what the snapshot says comes next: not a torn write.
    const std::string journal = dir.path() + "/meta/shard-0/journal-00000002.log";
    std::string image = testing::read_file(journal);
    journal_scan scan =
        scan_journal(image, 0, [](std::uint64_t, std::uint8_t, std::string_view) {});
    ASSERT_GT(scan.records, 0u);
    std::string renumbered;
    std::uint64_t seq = scan.last_seq - scan.records + 2;
    scan_journal(image, 0, [&](std::uint64_t, std::uint8_t type, std::string_view payload) {
        frame_record(renumbered, seq++, type, payload);
    });
    testing::write_file(journal, renumbered);
    const std::size_t files = data_file_count(dir.path());
    auto opened = engine::open(one_core(dir.path()));
    ASSERT_FALSE(opened.has_value());
    EXPECT_EQ(opened.code(), errc::data_corrupted);
    EXPECT_EQ(data_file_count(dir.path()), files);
    EXPECT_EQ(testing::file_size(journal), renumbered.size());
}

// One bucket and one object, in journal 1.
void one_object(const std::string& dir) {
    auto e = open_engine(one_core(dir));
    ASSERT_NE(e, nullptr);
    run_engine(
        *e,
        [](engine* en) -> io::task<void> {
            CO_ASSERT_TRUE(co_await en->create_bucket("kept"));
            CO_ASSERT_TRUE(co_await put_object(en, "kept", "k", "data", "e", no_conditions));
        },
        1);
}

// Journal 1 with a damaged tail, then a journal 2 that continues the sequence: journal 1 was complete
// when journal 2 was started, so its tail is damage, not a torn write.
void add_second_journal(const std::string& shard_dir, bool with_record) {
    const std::string first = shard_dir + "/journal-00000001.log";
    std::string image = testing::read_file(first);
    journal_scan scan =
        scan_journal(image, 1, [](std::uint64_t, std::uint8_t, std::string_view) {});
    ASSERT_GT(scan.records, 0u);
    std::string second;
    if (with_record) {
        std::string payload;
        encoder e(payload);
        e.str("later-bucket");
        e.i64(1700000000000);
        frame_record(second, scan.last_seq + 1, record_create_bucket, payload);
    }
    testing::write_file(shard_dir + "/journal-00000002.log", second);
    testing::append_file(first, testing::pattern_bytes(100, 9));
}

TEST(engine_recovery, damage_in_a_journal_that_a_later_one_follows_is_refused) {
    temp_dir dir;
    one_object(dir.path());
    const std::string shard = dir.path() + "/meta/shard-0";
    add_second_journal(shard, true);
    const std::uint64_t first_bytes = testing::file_size(shard + "/journal-00000001.log");
    auto opened = engine::open(one_core(dir.path()));
    ASSERT_FALSE(opened.has_value())
        << "a damaged tail in a journal followed by another was dropped";
    EXPECT_EQ(opened.code(), errc::data_corrupted);
    EXPECT_EQ(testing::file_size(shard + "/journal-00000001.log"), first_bytes);
}

TEST(engine_recovery, an_empty_later_journal_leaves_a_torn_tail_a_torn_tail) {
    temp_dir dir;
    one_object(dir.path());
    // A failed rotation may leave an empty next journal behind while writes go on in the current one.
    add_second_journal(dir.path() + "/meta/shard-0", false);
    auto e = open_engine(one_core(dir.path()));
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->recovery().torn_tails, 1u);
    EXPECT_EQ(e->recovery().objects, 1u);
}

}  // namespace
}  // namespace fjord::store
