// Engine races found by review, each with its interleaving forced: a spawned coroutine runs until its
// journal append suspends (io_uring answers only after the caller goes on), so "A's record is queued,
// then B runs" is exact, without sleeps.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
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

// Writes a durable data file holding `data` on this core, not committed anywhere.
io::task<base::result<segment>> write_data(engine* e, std::string data) {
    object_writer writer(e->drives(), e->pool(), steps(e).new_object_id(), e->data_file_settings(),
                         &steps(e).writes(), &e->spares());
    auto opened = co_await writer.open(data.size());
    if (opened) {
        const std::uint64_t size = data.size();
        testing::string_source source(std::move(data), size + 5);
        auto written = co_await writer.write_from(source, max_data_file_bytes);
        if (!written) opened = written.as_failure();
    }
    if (opened) {
        auto sealed = co_await writer.seal();
        if (sealed) co_return *sealed;
        opened = sealed.as_failure();
    }
    co_await writer.discard();
    co_return opened.as_failure();
}

bool same_file(const segment& a, const segment& b) { return a.id == b.id; }

// Builds the object from every part the upload holds, as they are when the completion chooses them.
base::result<upload_completion> assemble_all_parts(const upload_record& u) {
    upload_completion chosen{u.object, {}};
    chosen.record.etag = "assembled";
    for (const auto& entry : u.parts) chosen.parts.push_back(entry.first);
    return chosen;
}

// Runs a scenario on a one-core engine over a fresh directory: every request then runs on the core that
// owns every shard, so a spawned request runs inline up to its journal append.
void run_on_one_core(const std::function<io::task<void>(engine*)>& scenario) {
    temp_dir dir;
    engine_options options = test_options(dir.path());
    options.cores = 1;
    auto e = open_engine(options);
    ASSERT_NE(e, nullptr);
    run_engine(*e, scenario, 1);
}

struct part_outcome {
    std::optional<base::result<std::optional<part_record>>> result;
};

io::task<void> commit_part_into(engine* e, std::string upload_id, part_record part,
                                part_outcome* out, testing::local_latch* done) {
    out->result = co_await steps(e).commit_part("mp", "object", upload_id, part);
    done->count_down();
}

// CompleteMultipartUpload while a second upload of part 1 is being committed (a retried or straggling
// part): whichever way they are ordered, no data the object uses may be handed back for reclaiming.
io::task<void> complete_races_part_scenario(engine* e) {
    CO_ASSERT_TRUE(co_await e->create_bucket("mp"));
    auto upload = co_await e->create_upload("mp", "object", metadata_only("meta"), "");
    CO_ASSERT_TRUE(upload.has_value());
    const std::string first_bytes = testing::pattern_bytes(300 * 1024, 1),
                      second_bytes = testing::pattern_bytes(200 * 1024, 2);
    auto first = co_await write_data(e, first_bytes);
    auto second = co_await write_data(e, second_bytes);
    CO_ASSERT_TRUE(first.has_value() && second.has_value());
    part_record p1{1, *first, "etag-1", "", 1};
    auto committed = co_await steps(e).commit_part("mp", "object", *upload, p1);
    CO_ASSERT_TRUE(committed.has_value() && !committed->has_value());

    // The second upload of part 1 is in the journal's queue (not yet durable) when the completion runs.
    part_record p2{1, *second, "etag-2", "", 2};
    part_outcome retried;
    testing::local_latch latch(1);
    io::spawn(commit_part_into(e, *upload, p2, &retried, &latch));
    auto completed = co_await steps(e).commit_complete("mp", "object", *upload, assemble_all_parts,
                                                       no_conditions);
    co_await latch.wait();
    CO_ASSERT_TRUE(completed.has_value());
    CO_ASSERT_TRUE(retried.result.has_value());

    // What the callers would reclaim: the part the retry replaced, and the parts the object left unused.
    std::vector<segment> handed_back = completed->unused_parts;
    if (*retried.result && **retried.result) handed_back.push_back((**retried.result)->data);
    for (const segment& freed : handed_back)
        for (const segment& used : completed->object.segments)
            EXPECT_FALSE(same_file(freed, used))
                << "the object's own data was handed back for reclaiming";
    co_await steps(e).reclaim_segments(handed_back);

    auto found = co_await e->head("mp", "object");
    CO_ASSERT_TRUE(found.has_value());
    auto bytes = co_await read_back(e, *found);
    CO_ASSERT_TRUE(bytes.has_value());
    // The retry was committed first (a completion waits for part commits in flight), so it won.
    EXPECT_TRUE(*bytes == second_bytes) << "read " << bytes->size() << " bytes";
}

TEST(engine_races, complete_multipart_upload_waits_for_a_part_commit_in_flight) {
    run_on_one_core(complete_races_part_scenario);
}

// A part that arrives while a completion holds the upload waits, then finds the upload gone.
io::task<void> part_after_completion_scenario(engine* e) {
    CO_ASSERT_TRUE(co_await e->create_bucket("mp"));
    auto upload = co_await e->create_upload("mp", "object", metadata_only("meta"), "");
    CO_ASSERT_TRUE(upload.has_value());
    const std::string bytes = testing::pattern_bytes(100 * 1024, 3);
    auto first = co_await write_data(e, bytes);
    auto late = co_await write_data(e, testing::pattern_bytes(100 * 1024, 4));
    CO_ASSERT_TRUE(first.has_value() && late.has_value());
    part_record p1{1, *first, "e1", "", 1}, p2{1, *late, "e2", "", 2};
    CO_ASSERT_TRUE(co_await steps(e).commit_part("mp", "object", *upload, p1));

    struct completion {
        std::optional<base::result<completed_upload>> result;
    } done;
    testing::local_latch latch(1);
    io::spawn(
        [](engine* en, std::string id, completion* out, testing::local_latch* l) -> io::task<void> {
            out->result = co_await steps(en).commit_complete("mp", "object", id, assemble_all_parts,
                                                             no_conditions);
            l->count_down();
        }(e, *upload, &done, &latch));
    auto part = co_await steps(e).commit_part("mp", "object", *upload, p2);
    co_await latch.wait();
    CO_ASSERT_TRUE(done.result.has_value() && done.result->has_value());
    EXPECT_EQ(part.code(), errc::no_such_upload);
    std::vector<segment> unused{*late};
    co_await steps(e).reclaim_segments(unused);
    auto found = co_await e->head("mp", "object");
    CO_ASSERT_TRUE(found.has_value());
    auto read = co_await read_back(e, *found);
    CO_ASSERT_TRUE(read.has_value());
    EXPECT_TRUE(*read == bytes);
}

TEST(engine_races, a_part_committed_during_a_completion_finds_the_upload_gone) {
    temp_dir dir;
    engine_options options = test_options(dir.path());
    options.cores = 1;
    {
        auto e = open_engine(options);
        ASSERT_NE(e, nullptr);
        run_engine(*e, part_after_completion_scenario, 1);
    }
    // The late part waited for the completion instead of writing a record for an upload being completed:
    // the journal holds the bucket, the upload, part 1 and the completion, nothing more.
    auto e = open_engine(options);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->recovery().journal_records, 4u);
}

// A completion or abort that names an upload under another key (a client's mistake, or an attacker's
// probe) is NoSuchUpload, even while the upload's own completion holds it: it must not touch the upload.
io::task<void> mismatched_key_scenario(engine* e) {
    CO_ASSERT_TRUE(co_await e->create_bucket("mp"));
    auto upload = co_await e->create_upload("mp", "object", metadata_only("meta"), "");
    CO_ASSERT_TRUE(upload.has_value());
    auto data = co_await write_data(e, testing::pattern_bytes(64 * 1024, 5));
    CO_ASSERT_TRUE(data.has_value());
    part_record p1{1, *data, "e1", "", 1};
    CO_ASSERT_TRUE(co_await steps(e).commit_part("mp", "object", *upload, p1));
    struct completion {
        std::optional<base::result<completed_upload>> result;
    } done;
    testing::local_latch latch(1);
    io::spawn(
        [](engine* en, std::string id, completion* out, testing::local_latch* l) -> io::task<void> {
            out->result = co_await steps(en).commit_complete("mp", "object", id, assemble_all_parts,
                                                             no_conditions);
            l->count_down();
        }(e, *upload, &done, &latch));
    auto elsewhere = co_await steps(e).commit_complete("mp", "other-key", *upload,
                                                       assemble_all_parts, no_conditions);
    EXPECT_EQ(elsewhere.code(), errc::no_such_upload);
    auto aborted_elsewhere = co_await steps(e).commit_abort("mp", "other-key", *upload);
    EXPECT_EQ(aborted_elsewhere.code(), errc::no_such_upload);
    co_await latch.wait();
    CO_ASSERT_TRUE(done.result.has_value());
    EXPECT_TRUE(done.result->has_value());
    EXPECT_EQ((co_await e->head("mp", "other-key")).code(), errc::no_such_key);
}

TEST(engine_races, completing_or_aborting_an_upload_under_another_key_is_no_such_upload) {
    run_on_one_core(mismatched_key_scenario);
}

// DeleteBucket while a CreateMultipartUpload of that bucket waits for its journal append: the bucket
// must not be deleted from under the upload.
struct create_outcome {
    std::optional<base::result<std::string>> result;
};

io::task<void> delete_bucket_races_create_upload_scenario(engine* e) {
    CO_ASSERT_TRUE(co_await e->create_bucket("brief"));
    create_outcome created;
    testing::local_latch latch(1);
    io::spawn([](engine* en, create_outcome* out, testing::local_latch* l) -> io::task<void> {
        out->result = co_await en->create_upload("brief", "key", metadata_only("m"), "");
        l->count_down();
    }(e, &created, &latch));
    auto deleted = co_await e->delete_bucket("brief");
    co_await latch.wait();
    CO_ASSERT_TRUE(created.result.has_value());
    EXPECT_FALSE(deleted.has_value() && created.result->has_value())
        << "the bucket was deleted while an upload was created in it";
    EXPECT_EQ(deleted.code(), errc::bucket_not_empty);
    EXPECT_TRUE(e->bucket_exists("brief"));
    if (*created.result) {
        auto listed = co_await e->list_uploads("brief", "", "", "", 10);
        CO_ASSERT_TRUE(listed.has_value());
        EXPECT_EQ(listed->size(), 1u);
    }
}

TEST(engine_races, delete_bucket_does_not_delete_a_bucket_an_upload_is_being_created_in) {
    temp_dir dir;
    engine_options options = test_options(dir.path());
    options.cores = 1;
    {
        auto e = open_engine(options);
        ASSERT_NE(e, nullptr);
        run_engine(*e, delete_bucket_races_create_upload_scenario, 1);
    }
    // And after a restart the upload is still in a bucket that exists.
    auto e = open_engine(options);
    ASSERT_NE(e, nullptr);
    run_engine(
        *e,
        [](engine* en) -> io::task<void> {
            EXPECT_TRUE(en->bucket_exists("brief"));
            auto listed = co_await en->list_uploads("brief", "", "", "", 10);
            EXPECT_TRUE(listed.has_value() && listed->size() == 1u);
        },
        1);
}

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
        if (name.starts_with("journal-") && name.ends_with(".log"))
            bytes = std::max<std::uint64_t>(bytes, entry.file_size());
    }
    return bytes;
}

io::task<void> committer(engine* e, int id, steady_load* load, testing::local_latch* done) {
    for (int round = 0; round < load->rounds; ++round) {
        std::string key = "k" + std::to_string(id) + "-" + std::to_string(round % 7);
        std::string etag = "e" + std::to_string(id) + "-" + std::to_string(round);
        auto r = co_await steps(e).commit_put("steady", key, metadata_only(etag), no_conditions);
        EXPECT_TRUE(r.has_value());
        if (r) load->last_etag[key] = etag;
        load->largest_journal_bytes =
            std::max(load->largest_journal_bytes, active_journal_bytes(load->journal_path));
    }
    done->count_down();
}

// Committers whose records always land in alternate batches, so that the journal's queue is never empty
// between batches: the first committer's append starts the flush loop inline, which takes its batch of one
// record; the other eleven fill the next batch while it is written; from then on each group resumes and
// fills a batch while the other group's is written ({1} and {11} alternating). The test tells the old
// rotation rule from the new by the largest journal seen, not by the file names at the end (the queue
// does empty once, when the last commits finish).
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
    EXPECT_FALSE(testing::file_exists(load.journal_path + "/journal-00000001.log"))
        << "never rotated";
    EXPECT_LT(load.largest_journal_bytes, 2 * options.journal_rotate_bytes);
    auto e = open_engine(options);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->recovery().objects, load.last_etag.size());
    run_engine(
        *e,
        [&](engine* en) -> io::task<void> {
            for (const auto& [key, etag] : load.last_etag) {
                auto found = co_await en->head("steady", key);
                EXPECT_TRUE(found.has_value() && found->etag == etag) << key;
            }
        },
        1);
}

}  // namespace
}  // namespace fjord::store
