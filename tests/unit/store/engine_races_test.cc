// Engine races found by review, each with its interleaving forced: a spawned coroutine runs until its
// journal append suspends (io_uring answers only after the caller goes on), so "A's record is queued,
// then B runs" is exact, without sleeps.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "store/engine.h"
#include "engine_test_util.h"
#include "store_test_util.h"

namespace fjord::store {
namespace {

using base::errc;
using namespace engine_testing;
using testing::temp_dir;

// ---- journal rotation under steady load ----

struct steady_load {
    int rounds = 0;
    std::map<std::string, std::string> last_etag;  // key -> etag of its last acknowledged write
    std::uint64_t largest_journal_bytes = 0;
    std::string journal_path;
};

std::uint64_t active_journal_bytes(const std::string& shard_dir) {
    std::uint64_t bytes = 0;
    for (const auto& entry : std::filesystem::directory_iterator(shard_dir)) {
        std::string name = entry.path().filename();
        if (name.starts_with("journal-") && name.ends_with(".log")) bytes = std::max<std::uint64_t>(bytes, entry.file_size());
    }
    return bytes;
}

io::task<void> committer(engine* e, int id, steady_load* load, testing::local_latch* done) {
    for (int round = 0; round < load->rounds; ++round) {
        std::string key = "k" + std::to_string(id) + "-" + std::to_string(round % 7);
        std::string etag = "e" + std::to_string(id) + "-" + std::to_string(round);
        auto r = co_await e->commit_put("steady", key, metadata_only(etag), no_conditions);
        EXPECT_TRUE(r.has_value());
        if (r) load->last_etag[key] = etag;
        load->largest_journal_bytes = std::max(load->largest_journal_bytes, active_journal_bytes(load->journal_path));
    }
    done->count_down();
}

// Two groups of committers whose records always land in alternate batches: while one batch is written the
// other group fills the next, so the journal's queue is never empty between batches.
io::task<void> steady_load_scenario(engine* e, steady_load* load) {
    CO_ASSERT_TRUE(co_await e->create_bucket("steady"));
    constexpr int per_group = 6;
    testing::local_latch latch(2 * per_group);
    for (int i = 0; i < per_group; ++i) io::spawn(committer(e, i, load, &latch));
    for (int i = per_group; i < 2 * per_group; ++i) io::spawn(committer(e, i, load, &latch));
    co_await latch.wait();
}

TEST(engine_races, journal_rotation_is_not_starved_by_steady_load) {
    temp_dir dir;
    engine_options options = test_options(dir.path());
    options.cores = 1;
    options.journal_rotate_bytes = 32 * 1024;
    steady_load load;
    load.rounds = 150;
    load.journal_path = dir.path() + "/meta/shard-0";
    {
        auto e = open_engine(options);
        ASSERT_NE(e, nullptr);
        run_engine(*e, [&](engine* en) { return steady_load_scenario(en, &load); }, 1);
    }
    // Some 1,800 records of ~100 bytes: several rotations' worth. The journal stays near the threshold
    // (plus the batches queued while a rotation runs) instead of holding every record.
    EXPECT_FALSE(testing::file_exists(load.journal_path + "/journal-00000001.log")) << "never rotated";
    EXPECT_LT(load.largest_journal_bytes, 2 * options.journal_rotate_bytes);
    auto e = open_engine(options);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->recovery().objects, load.last_etag.size());
    run_engine(*e, [&](engine* en) -> io::task<void> {
        for (const auto& [key, etag] : load.last_etag) {
            auto found = co_await en->lookup("steady", key);
            EXPECT_TRUE(found.has_value() && found->etag == etag) << key;
        }
    }, 1);
}

}  // namespace
}  // namespace fjord::store
