#include "store/engine.h"

#include <dirent.h>
#include <sys/stat.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/units.h"
#include "io/cross_core.h"
#include "io/reactor.h"
#include "io/task.h"
#include "engine_test_util.h"
#include "store_test_util.h"

namespace fjord::store {
namespace {

using base::errc;
using base::KiB;
using base::MiB;
using testing::temp_dir;
using namespace engine_testing;

std::vector<std::string> bucket_names(const std::vector<bucket_info>& infos) {
    std::vector<std::string> names;
    for (const auto& b : infos) names.push_back(b.name);
    return names;
}

// ---- buckets and single objects ----

io::task<bool> work_on_core_one(engine* e, std::string expected_data) {
    bool ok = io::reactor::current().core() == 1;
    ok = ok && e->bucket_exists("alpha");
    auto put =
        co_await put_object(e, "alpha", "from-core-1", "written on core one", "c1e", no_conditions);
    ok = ok && put.has_value() && !put->has_value();
    auto found = co_await e->head("alpha", "k1");
    ok = ok && found.has_value() && found->etag == "b1";
    if (found) {
        auto bytes = co_await read_back(e, *found);
        ok = ok && bytes.has_value() && *bytes == expected_data;
    }
    co_return ok;
}

// A write of `etag` in bucket alpha, ordered by the front end (write_order): it takes the key only
// when the current version's tag sorts below `below`.
io::task<errc> put_below(engine* e, std::string key, std::string etag, std::string below) {
    const std::string data = "ordered";
    testing::string_source source(data, data.size());
    put_request request{"alpha", std::move(key), data.size(), 1ULL << 20, {}};
    record_finisher finish = [etag](const written_data&) -> base::result<object_record> {
        object_record r;
        r.etag = etag;
        return r;
    };
    auto stored =
        co_await e->put_ordered(request, write_order{"", std::move(below)}, source, finish);
    co_return stored.code();
}

io::task<void> buckets_and_objects_scenario(engine* e) {
    CO_ASSERT_TRUE(co_await e->create_bucket("alpha"));
    auto again = co_await e->create_bucket("alpha");
    EXPECT_EQ(again.code(), errc::bucket_already_owned_by_you);
    EXPECT_TRUE(e->bucket_exists("alpha"));
    EXPECT_FALSE(e->bucket_exists("beta"));

    EXPECT_EQ((co_await e->head("alpha", "k1")).code(), errc::no_such_key);
    EXPECT_EQ((co_await e->head("beta", "k1")).code(), errc::no_such_bucket);
    EXPECT_EQ((co_await put_object(e, "beta", "k1", "x", "x", no_conditions)).code(),
              errc::no_such_bucket);

    const std::string a = testing::pattern_bytes(100000, 1), b = testing::pattern_bytes(70000, 2);
    object_record first;
    auto put_a = co_await put_object(e, "alpha", "k1", a, "a1", no_conditions, &first);
    CO_ASSERT_TRUE(put_a.has_value());
    EXPECT_FALSE(put_a->has_value()) << "a new key replaces nothing";
    auto found = co_await e->head("alpha", "k1");
    CO_ASSERT_TRUE(found.has_value());
    EXPECT_EQ(found->etag, "a1");
    EXPECT_EQ(found->size_bytes, a.size());
    EXPECT_EQ(found->content_type, "text/plain");
    EXPECT_EQ(found->checksum_algorithm, "CRC32C");
    auto bytes = co_await read_back(e, *found);
    CO_ASSERT_TRUE(bytes.has_value());
    EXPECT_TRUE(*bytes == a);

    // Overwrite: the replaced record comes back, and its data file is gone once reclaimed.
    auto put_b = co_await put_object(e, "alpha", "k1", b, "b1", no_conditions);
    CO_ASSERT_TRUE(put_b.has_value());
    CO_ASSERT_TRUE(put_b->has_value());
    EXPECT_EQ((*put_b)->etag, "a1");
    EXPECT_EQ((*put_b)->size_bytes, a.size());
    CO_ASSERT_TRUE((*put_b)->segments.size() == 1);
    EXPECT_EQ((*put_b)->segments[0].id, first.segments[0].id);
    EXPECT_FALSE(testing::file_exists(
        testing::data_file_path(e->drives().at(0).path, first.segments[0].id)));
    found = co_await e->head("alpha", "k1");
    CO_ASSERT_TRUE(found.has_value());
    EXPECT_EQ(found->etag, "b1");
    bytes = co_await read_back(e, *found);
    CO_ASSERT_TRUE(bytes.has_value());
    EXPECT_TRUE(*bytes == b);

    // Conditional writes.
    write_conditions none_match;
    none_match.if_none_match_any = true;
    EXPECT_EQ((co_await put_object(e, "alpha", "k1", "nope", "n1", none_match)).code(),
              errc::precondition_failed);
    EXPECT_EQ((co_await put_object(e, "alpha", "k2", "new", "k2e", none_match)).code(), errc::ok);
    write_conditions match_wrong;
    match_wrong.if_match_etag = "not-b1";
    EXPECT_EQ((co_await put_object(e, "alpha", "k1", "nope", "n2", match_wrong)).code(),
              errc::precondition_failed);
    EXPECT_EQ((co_await put_object(e, "alpha", "missing", "nope", "n3", match_wrong)).code(),
              errc::no_such_key);
    found = co_await e->head("alpha", "k1");
    CO_ASSERT_TRUE(found.has_value());
    EXPECT_EQ(found->etag, "b1") << "a failed condition must not change the object";
    EXPECT_EQ((co_await e->head("alpha", "missing")).code(), errc::no_such_key);

    // An ordered write (write_order): it replaces only a current version whose tag sorts below the
    // bound.
    EXPECT_EQ(co_await put_below(e, "k1", "a9", "b0"), errc::precondition_failed);
    EXPECT_EQ(co_await put_below(e, "k1", "b1", "b1"), errc::precondition_failed)
        << "an equal tag is not below";
    EXPECT_EQ(co_await put_below(e, "ordered", "m1", "z"), errc::ok)
        << "an absent key takes any write";
    EXPECT_EQ(co_await put_below(e, "ordered", "m2", "z"), errc::ok);
    found = co_await e->head("alpha", "ordered");
    CO_ASSERT_TRUE(found.has_value());
    EXPECT_EQ(found->etag, "m2");
    auto ordered_gone = co_await steps(e).commit_remove("alpha", "ordered", no_conditions);
    CO_ASSERT_TRUE(ordered_gone.has_value() && ordered_gone->has_value());
    co_await steps(e).reclaim(**ordered_gone);
    found = co_await e->head("alpha", "k1");
    CO_ASSERT_TRUE(found.has_value());
    EXPECT_EQ(found->etag, "b1");

    // Work issued from core 1 reaches shards on both cores.
    auto on_core_one = [e, b] { return work_on_core_one(e, b); };
    bool core_one_ok = co_await io::invoke_on(1, std::move(on_core_one));
    EXPECT_TRUE(core_one_ok);
    found = co_await e->head("alpha", "from-core-1");
    CO_ASSERT_TRUE(found.has_value());
    EXPECT_EQ(found->etag, "c1e");

    write_conditions match_b1;
    match_b1.if_match_etag = "b1";
    EXPECT_EQ((co_await steps(e).commit_remove("alpha", "k1", match_wrong)).code(),
              errc::precondition_failed);
    auto removed = co_await steps(e).commit_remove("alpha", "k1", match_b1);
    CO_ASSERT_TRUE(removed.has_value());
    CO_ASSERT_TRUE(removed->has_value());
    EXPECT_EQ((*removed)->etag, "b1");
    co_await steps(e).reclaim(**removed);
    EXPECT_EQ((co_await e->head("alpha", "k1")).code(), errc::no_such_key);
    auto removed_again = co_await steps(e).commit_remove("alpha", "k1", no_conditions);
    CO_ASSERT_TRUE(removed_again.has_value());
    EXPECT_FALSE(removed_again->has_value())
        << "deleting a missing key succeeds with nothing removed";

    // A non-empty bucket cannot be deleted and stays usable; an empty one can.
    EXPECT_EQ((co_await e->delete_bucket("alpha")).code(), errc::bucket_not_empty);
    EXPECT_TRUE(e->bucket_exists("alpha"));
    EXPECT_EQ(
        (co_await put_object(e, "alpha", "after-failed-delete", "x", "x1", no_conditions)).code(),
        errc::ok);
    for (const char* key : {"k2", "from-core-1", "after-failed-delete"}) {
        auto r = co_await steps(e).commit_remove("alpha", key, no_conditions);
        CO_ASSERT_TRUE(r.has_value() && r->has_value());
        co_await steps(e).reclaim(**r);
    }
    EXPECT_EQ((co_await e->delete_bucket("alpha")).code(), errc::ok);
    EXPECT_FALSE(e->bucket_exists("alpha"));
    EXPECT_EQ((co_await e->delete_bucket("alpha")).code(), errc::no_such_bucket);
    EXPECT_EQ((co_await e->head("alpha", "k2")).code(), errc::no_such_bucket);
    bool core_one_sees_it_gone = co_await io::invoke_on(1, [e] {
        return [](engine* en) -> io::task<bool> { co_return !en->bucket_exists("alpha"); }(e);
    });
    EXPECT_TRUE(core_one_sees_it_gone);
}

TEST(engine, buckets_objects_overwrite_remove_and_conditions) {
    temp_dir dir;
    auto e = open_engine(test_options(dir.path()));
    ASSERT_NE(e, nullptr);
    run_engine(*e, buckets_and_objects_scenario);
}

// Many concurrent conditional creates of one key, from both cores: exactly one wins.
struct race_state {
    int won = 0;
    int refused = 0;
    int other = 0;
};

io::task<void> try_create(engine* e, int i, race_state* st, testing::local_latch* latch) {
    write_conditions c;
    c.if_none_match_any = true;
    auto r = co_await put_object(e, "race", "the-key", "attempt " + std::to_string(i),
                                 "e" + std::to_string(i), c);
    if (r)
        ++st->won;
    else if (r.code() == errc::precondition_failed)
        ++st->refused;
    else
        ++st->other;
    latch->count_down();
}

io::task<race_state> race_on_this_core(engine* e, int first, int count) {
    race_state st;
    testing::local_latch latch(static_cast<std::size_t>(count));
    for (int i = first; i < first + count; ++i) io::spawn(try_create(e, i, &st, &latch));
    co_await latch.wait();
    co_return st;
}

io::task<void> race_scenario(engine* e) {
    CO_ASSERT_TRUE(co_await e->create_bucket("race"));
    // Both cores race at the same time: core 1's batch is started and core 0's runs while it is in flight.
    race_state here;
    testing::local_latch latch(8);
    for (int i = 0; i < 8; ++i) io::spawn(try_create(e, i, &here, &latch));
    race_state there = co_await io::invoke_on(1, [e] { return race_on_this_core(e, 100, 8); });
    co_await latch.wait();
    EXPECT_EQ(here.won + there.won, 1);
    EXPECT_EQ(here.refused + there.refused, 15);
    EXPECT_EQ(here.other + there.other, 0);
}

TEST(engine, conditional_create_race_has_exactly_one_winner) {
    temp_dir dir;
    auto e = open_engine(test_options(dir.path()));
    ASSERT_NE(e, nullptr);
    run_engine(*e, race_scenario);
}

// ---- listing ----

std::string list_key(int i) {
    char buf[64];
    switch (i % 6) {
        case 0: std::snprintf(buf, sizeof buf, "top-%03d", i); break;
        case 1: std::snprintf(buf, sizeof buf, "dir%d/file-%03d", i % 4, i); break;
        case 2: std::snprintf(buf, sizeof buf, "dir%d/sub%d/file-%03d", i % 4, i % 3, i); break;
        case 3: std::snprintf(buf, sizeof buf, "photos/2024/%02d/img-%03d", i % 12, i); break;
        case 4: std::snprintf(buf, sizeof buf, "a/b/c/d-%03d", i); break;
        default:
            std::snprintf(buf, sizeof buf, "dir%d/%03d/", i % 4, i);
            break;  // keys ending in the delimiter
    }
    return buf;
}

struct expected_entry {
    std::string name;
    bool is_prefix;
    bool operator==(const expected_entry&) const = default;
};

// What a listing must return, computed from the full key set.
std::vector<expected_entry> model_list(const std::set<std::string>& keys, const list_request& req,
                                       bool* truncated) {
    std::set<std::pair<std::string, bool>> names;
    for (const auto& k : keys) {
        if (!k.starts_with(req.prefix) || k <= req.start_after) continue;
        std::string name = k;
        bool is_prefix = false;
        if (!req.delimiter.empty()) {
            auto pos = k.find(req.delimiter, req.prefix.size());
            if (pos != std::string::npos) {
                name = k.substr(0, pos + req.delimiter.size());
                is_prefix = true;
            }
        }
        if (name > req.start_after) names.insert({name, is_prefix});
    }
    std::vector<expected_entry> out;
    for (const auto& [name, is_prefix] : names) out.push_back({name, is_prefix});
    *truncated = out.size() > req.max_keys;
    if (*truncated) out.resize(req.max_keys);
    return out;
}

io::task<int> commit_keys_here(engine* e, std::vector<std::string> keys) {
    int ok = 0;
    testing::local_latch latch(keys.size());
    auto one = [](engine* en, std::string key, int* okp,
                  testing::local_latch* l) -> io::task<void> {
        auto r =
            co_await steps(en).commit_put("list", key, metadata_only("e-" + key), no_conditions);
        if (r && !r->has_value()) ++*okp;
        l->count_down();
    };
    for (auto& k : keys) io::spawn(one(e, k, &ok, &latch));
    co_await latch.wait();
    co_return ok;
}

struct list_case {
    std::string prefix, delimiter;
};

io::task<void> listing_scenario(engine* e, const std::set<std::string>* keys) {
    CO_ASSERT_TRUE(co_await e->create_bucket("list"));
    std::vector<std::string> on_zero, on_one;
    int i = 0;
    for (const auto& k : *keys) (i++ % 2 ? on_one : on_zero).push_back(k);
    int committed_here = co_await commit_keys_here(e, on_zero);
    auto commit_there = [e, on_one] { return commit_keys_here(e, on_one); };
    int committed_there = co_await io::invoke_on(1, std::move(commit_there));
    EXPECT_EQ(committed_here + committed_there, static_cast<int>(keys->size()));

    list_request missing;
    missing.bucket = "no-such-bucket";
    EXPECT_EQ((co_await e->list(missing)).code(), errc::no_such_bucket);

    const std::vector<list_case> cases = {
        {"", ""},         {"", "/"},        {"dir", "/"},          {"dir1/", "/"},
        {"dir1/", ""},    {"photos/", "/"}, {"photos/2024/", "/"}, {"a/", "/"},
        {"a/b/c/", "/"},  {"nomatch", "/"}, {"top-1", ""},         {"", "-"},
        {"dir2/", "sub"}, {"", "/2024/"},
    };
    for (const auto& c : cases) {
        for (std::uint32_t max_keys : {1u, 7u, 64u, 1000u}) {
            SCOPED_TRACE("prefix '" + c.prefix + "' delimiter '" + c.delimiter + "' max_keys " +
                         std::to_string(max_keys));
            list_request full{"list", c.prefix, c.delimiter, "", 100000};
            bool unused;
            std::vector<expected_entry> everything = model_list(*keys, full, &unused);
            // Page through with start_after = the last name returned: every entry exactly once, in order.
            std::vector<expected_entry> seen;
            list_request req{"list", c.prefix, c.delimiter, "", max_keys};
            bool ok = true;
            for (std::size_t page_no = 0; page_no <= keys->size() + 1; ++page_no) {
                auto page = co_await e->list(req);
                if (!page) {
                    ADD_FAILURE() << "list failed: " << page.err().message;
                    ok = false;
                    break;
                }
                bool expected_truncated;
                auto expected = model_list(*keys, req, &expected_truncated);
                std::vector<expected_entry> got;
                for (const auto& entry : page->entries) {
                    got.push_back({entry.name, entry.is_prefix});
                    if (!entry.is_prefix && entry.etag != "e-" + entry.name) {
                        ADD_FAILURE() << "wrong etag for " << entry.name << ": " << entry.etag;
                        ok = false;
                    }
                }
                if (got != expected || page->truncated != expected_truncated) {
                    ADD_FAILURE() << "page after '" << req.start_after
                                  << "' differs from the model (" << got.size()
                                  << " entries, expected " << expected.size() << ")";
                    ok = false;
                    break;
                }
                seen.insert(seen.end(), got.begin(), got.end());
                if (!page->truncated) break;
                if (got.empty()) {
                    ADD_FAILURE() << "truncated page without entries";
                    ok = false;
                    break;
                }
                req.start_after = got.back().name;
            }
            if (ok) {
                EXPECT_TRUE(seen == everything) << "paged listing is not the full listing";
            }
        }
    }
    // A start_after inside a rolled-up prefix skips the rest of that prefix.
    list_request inside{"list", "", "/", "dir1/file-", 1000};
    auto page = co_await e->list(inside);
    CO_ASSERT_TRUE(page.has_value());
    for (const auto& entry : page->entries) EXPECT_GT(entry.name, "dir1/file-");
    for (const auto& entry : page->entries) EXPECT_NE(entry.name, "dir1/");
}

TEST(engine, list_with_prefix_delimiter_and_pagination_over_both_shards) {
    temp_dir dir;
    std::set<std::string> keys;
    for (int i = 0; i < 300; ++i) keys.insert(list_key(i));
    ASSERT_EQ(keys.size(), 300u);
    {
        auto e = open_engine(test_options(dir.path()));
        ASSERT_NE(e, nullptr);
        run_engine(*e, [&](engine* en) { return listing_scenario(en, &keys); });
    }
    // Both shards received commits (each shard journal holds its own keys' records).
    EXPECT_GT(testing::file_size(dir.path() + "/meta/shard-0/journal-00000001.log"), 2000u);
    EXPECT_GT(testing::file_size(dir.path() + "/meta/shard-1/journal-00000001.log"), 2000u);
}

// ---- recovery ----

struct stored_object {
    std::string data;
    std::string etag;
};

struct recovery_model {
    std::map<std::string, std::map<std::string, stored_object>> buckets;
    std::vector<object_id> reclaimed;  // data files that must be gone
};

io::task<void> populate_scenario(engine* e, recovery_model* m) {
    for (const char* b : {"b1", "b2", "gone"}) CO_ASSERT_TRUE(co_await e->create_bucket(b));
    CO_ASSERT_TRUE(co_await e->delete_bucket("gone"));
    m->buckets["b1"];
    m->buckets["b2"];
    const std::vector<std::uint64_t> sizes = {0, 1, 4095, 100000, 1 * MiB + 3, 3 * MiB + 5};
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        std::string key = "obj-" + std::to_string(i);
        std::string data = testing::pattern_bytes(sizes[i], 500 + i);
        std::string etag = "etag-" + std::to_string(i);
        CO_ASSERT_TRUE(co_await put_object(e, "b1", key, data, etag, no_conditions));
        m->buckets["b1"][key] = stored_object{data, etag};
    }
    // An overwrite (whose first data file is reclaimed) and a removal.
    object_record old;
    CO_ASSERT_TRUE(
        co_await put_object(e, "b1", "rewritten", "version one", "v1", no_conditions, &old));
    CO_ASSERT_TRUE(co_await put_object(e, "b1", "rewritten", "version two!", "v2", no_conditions));
    m->reclaimed.push_back(old.segments[0].id);
    m->buckets["b1"]["rewritten"] = stored_object{"version two!", "v2"};
    object_record doomed;
    CO_ASSERT_TRUE(
        co_await put_object(e, "b1", "removed", "short-lived", "r1", no_conditions, &doomed));
    auto removed = co_await steps(e).commit_remove("b1", "removed", no_conditions);
    CO_ASSERT_TRUE(removed.has_value() && removed->has_value());
    co_await steps(e).reclaim(**removed);
    m->reclaimed.push_back(doomed.segments[0].id);
    for (int i = 0; i < 20; ++i) {
        std::string key = "dir/" + std::to_string(i);
        std::string data = "small object " + std::to_string(i);
        CO_ASSERT_TRUE(
            co_await put_object(e, "b2", key, data, "s" + std::to_string(i), no_conditions));
        m->buckets["b2"][key] = stored_object{data, "s" + std::to_string(i)};
    }
}

io::task<bool> buckets_match_on_this_core(engine* e, std::vector<std::string> expected) {
    co_return bucket_names(e->list_buckets()) == expected;
}

io::task<void> verify_scenario(engine* e, const recovery_model* m) {
    std::vector<std::string> expected_buckets;
    for (const auto& [b, keys] : m->buckets) expected_buckets.push_back(b);
    EXPECT_EQ(bucket_names(e->list_buckets()), expected_buckets);
    auto check_there = [e, expected_buckets] {
        return buckets_match_on_this_core(e, expected_buckets);
    };
    bool match_there = co_await io::invoke_on(1, std::move(check_there));
    EXPECT_TRUE(match_there) << "core 1's bucket list differs";
    EXPECT_FALSE(e->bucket_exists("gone"));
    for (const auto& [bucket, keys] : m->buckets) {
        for (const auto& [key, obj] : keys) {
            SCOPED_TRACE(bucket + "/" + key);
            auto found = co_await e->head(bucket, key);
            if (!found) {
                ADD_FAILURE() << "lost after reopen: " << found.err().message;
                continue;
            }
            EXPECT_EQ(found->etag, obj.etag);
            EXPECT_EQ(found->size_bytes, obj.data.size());
            auto bytes = co_await read_back(e, *found);
            EXPECT_TRUE(bytes.has_value() && *bytes == obj.data);
        }
        list_request req{bucket, "", "", "", 1000};
        auto page = co_await e->list(req);
        CO_ASSERT_TRUE(page.has_value());
        EXPECT_EQ(page->entries.size(), keys.size());
    }
    EXPECT_EQ((co_await e->head("b1", "removed")).code(), errc::no_such_key);
    for (const auto& id : m->reclaimed)
        EXPECT_FALSE(testing::file_exists(testing::data_file_path(e->drives().at(0).path, id)));
}

std::uint64_t object_count(const recovery_model& m) {
    std::uint64_t n = 0;
    for (const auto& [b, keys] : m.buckets) n += keys.size();
    return n;
}

TEST(engine, reopen_recovers_buckets_records_and_data) {
    temp_dir dir;
    recovery_model model;
    {
        auto e = open_engine(test_options(dir.path()));
        ASSERT_NE(e, nullptr);
        run_engine(*e, [&](engine* en) { return populate_scenario(en, &model); });
    }
    auto e = open_engine(test_options(dir.path()));
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->recovery().objects, object_count(model));
    EXPECT_EQ(e->recovery().torn_tails, 0u);
    EXPECT_EQ(e->recovery().orphans_removed, 0u);
    EXPECT_GT(e->recovery().journal_records, 0u);
    run_engine(*e, [&](engine* en) { return verify_scenario(en, &model); });
}

io::task<void> add_one_more(engine* e, recovery_model* m) {
    std::string bucket = "b2", key = "after-torn-tail", data = "appended after recovery",
                etag = "att";
    auto put = co_await put_object(e, bucket, key, data, etag, no_conditions);
    CO_ASSERT_TRUE(put.has_value());
    m->buckets[bucket][key] = stored_object{data, etag};
}

TEST(engine, torn_journal_tail_is_dropped_at_reopen_and_objects_survive) {
    temp_dir dir;
    recovery_model model;
    {
        auto e = open_engine(test_options(dir.path()));
        ASSERT_NE(e, nullptr);
        run_engine(*e, [&](engine* en) { return populate_scenario(en, &model); });
    }
    const std::string journal0 = dir.path() + "/meta/shard-0/journal-00000001.log";
    const std::string journal1 = dir.path() + "/meta/shard-1/journal-00000001.log";
    const std::uint64_t size0 = testing::file_size(journal0), size1 = testing::file_size(journal1);
    ASSERT_GT(size0, 0u);
    ASSERT_GT(size1, 0u);
    testing::append_file(journal0,
                         std::string("\x2a\x00\x00\x00\xde\xad\xbe", 7));  // shorter than a header
    testing::append_file(journal1, testing::pattern_bytes(45, 3));         // a whole bogus header
    {
        auto e = open_engine(test_options(dir.path()));
        ASSERT_NE(e, nullptr);
        EXPECT_EQ(e->recovery().torn_tails, 2u);
        EXPECT_EQ(e->recovery().objects, object_count(model));
        EXPECT_EQ(testing::file_size(journal0), size0);
        EXPECT_EQ(testing::file_size(journal1), size1);
        run_engine(*e, [&](engine* en) { return verify_scenario(en, &model); });
        // The journal continues right after the last valid record.
        run_engine(*e, [&](engine* en) { return add_one_more(en, &model); });
    }
    auto e = open_engine(test_options(dir.path()));
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->recovery().torn_tails, 0u);
    EXPECT_EQ(e->recovery().objects, object_count(model));
    run_engine(*e, [&](engine* en) { return verify_scenario(en, &model); });
}

// ---- snapshots and journal rotation ----

struct rotation_model {
    std::set<std::string> buckets;
    std::map<std::string, std::string> keys;  // in bucket "bkt-001": key -> etag
};

std::string bucket_name(int i) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "bkt-%03d", i);
    return buf;
}

io::task<void> rotation_scenario(engine* e, rotation_model* m) {
    // Shard 0's journal holds only bucket records at first, so some create and some delete passes the
    // rotation threshold itself.
    for (int i = 0; i < 200; ++i) {
        CO_ASSERT_TRUE(co_await e->create_bucket(bucket_name(i)));
        m->buckets.insert(bucket_name(i));
    }
    for (int i = 2; i < 200; i += 2) {
        CO_ASSERT_TRUE(co_await e->delete_bucket(bucket_name(i)));
        m->buckets.erase(bucket_name(i));
    }
    // Objects on both shards, committed several at a time so batches and rotations interleave.
    for (int round = 0; round < 3; ++round) {
        testing::local_latch latch(100);
        for (int i = 0; i < 100; ++i) {
            std::string key = "key-" + std::to_string(i);
            std::string etag = "r" + std::to_string(round) + "-" + std::to_string(i);
            io::spawn([](engine* en, std::string k, std::string t,
                         testing::local_latch* l) -> io::task<void> {
                auto r =
                    co_await steps(en).commit_put("bkt-001", k, metadata_only(t), no_conditions);
                EXPECT_TRUE(r.has_value());
                l->count_down();
            }(e, key, etag, &latch));
            m->keys[key] = etag;
        }
        co_await latch.wait();
    }
    for (int i = 0; i < 100; i += 3) {
        CO_ASSERT_TRUE(co_await e->remove("bkt-001", "key-" + std::to_string(i), no_conditions));
        m->keys.erase("key-" + std::to_string(i));
    }
}

io::task<void> verify_rotation_scenario(engine* e, const rotation_model* m) {
    auto names = bucket_names(e->list_buckets());
    EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), m->buckets);
    for (int i = 0; i < 100; ++i) {
        std::string key = "key-" + std::to_string(i);
        auto found = co_await e->head("bkt-001", key);
        auto it = m->keys.find(key);
        if (it == m->keys.end()) {
            EXPECT_EQ(found.code(), errc::no_such_key) << key;
        } else if (!found) {
            ADD_FAILURE() << key << " lost: " << found.err().message;
        } else {
            EXPECT_EQ(found->etag, it->second) << key;
            EXPECT_EQ(found->headers.size(), 1u);
        }
    }
}

std::vector<std::string> files_in(const std::string& dir) {
    std::vector<std::string> names;
    DIR* d = ::opendir(dir.c_str());
    if (!d) return names;
    while (dirent* entry = ::readdir(d)) {
        std::string name = entry->d_name;
        if (name != "." && name != "..") names.push_back(name);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    return names;
}

TEST(engine, journal_rotation_writes_snapshots_and_reopen_restores_everything) {
    temp_dir dir;
    engine_options options = test_options(dir.path());
    options.journal_rotate_bytes = 4096;
    rotation_model model;
    {
        auto e = open_engine(options);
        ASSERT_NE(e, nullptr);
        run_engine(*e, [&](engine* en) { return rotation_scenario(en, &model); });
    }
    // Each shard rotated: the first journal is gone, and one journal and one snapshot of the same
    // generation remain.
    for (int shard = 0; shard < 2; ++shard) {
        std::string shard_dir = dir.path() + "/meta/shard-" + std::to_string(shard);
        auto names = files_in(shard_dir);
        SCOPED_TRACE(shard_dir);
        EXPECT_FALSE(testing::file_exists(shard_dir + "/journal-00000001.log"));
        std::vector<std::string> journals, snapshots, others;
        for (const auto& n : names) {
            if (n.starts_with("journal-") && n.ends_with(".log"))
                journals.push_back(n);
            else if (n.starts_with("snapshot-") && n.ends_with(".snap"))
                snapshots.push_back(n);
            else
                others.push_back(n);
        }
        ASSERT_EQ(journals.size(), 1u);
        ASSERT_EQ(snapshots.size(), 1u);
        EXPECT_TRUE(others.empty()) << others.front();
        EXPECT_EQ(journals[0].substr(8, 8), snapshots[0].substr(9, 8))
            << "journal and snapshot generations differ";
        EXPECT_GT(journals[0], "journal-00000002.log") << "expected several rotations";
    }
    auto e = open_engine(options);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->recovery().objects, model.keys.size());
    run_engine(*e, [&](engine* en) { return verify_rotation_scenario(en, &model); });
}

// Small objects inline make a shard's snapshot larger than the rotation threshold: the journal then
// grows to the snapshot's size before the next rotation, so the snapshot is not rewritten at every
// rotate_bytes of journal (each journal byte pays for at most one snapshot byte).
io::task<void> large_state_scenario(engine* e, std::map<std::string, std::string>* keys) {
    CO_ASSERT_TRUE(co_await e->create_bucket("state"));
    for (int round = 0; round < 4; ++round) {
        for (int i = 0; i < 40; ++i) {
            std::string key = "inline-" + std::to_string(i);
            object_record r = metadata_only("r" + std::to_string(round) + "-" + key);
            r.inline_data.assign(2000, static_cast<char>('a' + round));
            r.size_bytes = r.inline_data.size();
            CO_ASSERT_TRUE(co_await steps(e).commit_put("state", key, r, no_conditions));
            (*keys)[key] = r.etag;
        }
    }
}

TEST(engine, rotation_waits_for_the_journal_to_outgrow_a_large_snapshot) {
    temp_dir dir;
    engine_options options = test_options(dir.path());
    options.cores = 1;
    options.journal_rotate_bytes = 4096;
    std::map<std::string, std::string> keys;
    {
        auto e = open_engine(options);
        ASSERT_NE(e, nullptr);
        run_engine(*e, [&](engine* en) { return large_state_scenario(en, &keys); }, 1);
    }
    // 160 records of ~2 KiB (~330 KiB of journal) over a state of ~85 KiB. At one rotation per 4 KiB
    // there would be some 80 generations; growing with the snapshot (4, 8, 16, ... KiB, then the
    // state's size), about ten.
    std::uint64_t generation = 0;
    for (const auto& n : files_in(dir.path() + "/meta/shard-0"))
        if (n.starts_with("journal-") && n.ends_with(".log"))
            generation = std::max<std::uint64_t>(generation, std::stoull(n.substr(8, 8)));
    EXPECT_GE(generation, 2u) << "never rotated";
    EXPECT_LE(generation, 16u) << "the snapshot was rewritten at every rotate_bytes of journal";
    auto e = open_engine(options);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->recovery().objects, keys.size());
    run_engine(
        *e,
        [&](engine* en) -> io::task<void> {
            for (const auto& [key, etag] : keys) {
                auto found = co_await en->head("state", key);
                EXPECT_TRUE(found && found->etag == etag) << key;
            }
        },
        1);
}

TEST(engine, explicit_snapshot_then_reopen) {
    temp_dir dir;
    rotation_model model;
    {
        auto e = open_engine(test_options(dir.path()));
        ASSERT_NE(e, nullptr);
        run_engine(*e, [&](engine* en) -> io::task<void> {
            return [](engine* x, rotation_model* m) -> io::task<void> {
                CO_ASSERT_TRUE(co_await x->create_bucket("bkt-001"));
                m->buckets.insert("bkt-001");
                for (int i = 0; i < 10; ++i) {
                    CO_ASSERT_TRUE(co_await steps(x).commit_put(
                        "bkt-001", "key-" + std::to_string(i),
                        metadata_only("s" + std::to_string(i)), no_conditions));
                    m->keys["key-" + std::to_string(i)] = "s" + std::to_string(i);
                }
                co_await x->snapshot_local_shards();
                co_await io::invoke_on(1, [x] {
                    return [](engine* y) -> io::task<int> {
                        co_await y->snapshot_local_shards();
                        co_return 0;
                    }(x);
                });
                // Records after the snapshot land in the new journal.
                CO_ASSERT_TRUE(co_await steps(x).commit_put("bkt-001", "key-50",
                                                            metadata_only("late"), no_conditions));
                m->keys["key-50"] = "late";
            }(en, &model);
        });
    }
    for (int shard = 0; shard < 2; ++shard) {
        std::string shard_dir = dir.path() + "/meta/shard-" + std::to_string(shard);
        EXPECT_TRUE(testing::file_exists(shard_dir + "/snapshot-00000002.snap")) << shard_dir;
        EXPECT_TRUE(testing::file_exists(shard_dir + "/journal-00000002.log")) << shard_dir;
        EXPECT_FALSE(testing::file_exists(shard_dir + "/journal-00000001.log")) << shard_dir;
    }
    auto e = open_engine(test_options(dir.path()));
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->recovery().objects, model.keys.size());
    run_engine(*e, [&](engine* en) { return verify_rotation_scenario(en, &model); });
}

// A bucket record whose batch itself triggers the rotation must be in the snapshot: the old journal that
// holds the record is deleted by that rotation. Stops right after shard 0 rotates, so no later snapshot can
// repair the state.
struct bucket_rotation_state {
    std::string shard0_dir;
    std::string stop_when_exists;   // journal file that proves the rotation happened
    std::set<std::string> buckets;  // expected after the run
    int next = 0;
    bool deleting = false;
    bool rotated = false;
};

io::task<void> change_buckets_until_rotation(engine* e, bucket_rotation_state* st) {
    for (int step = 0; step < 2000 && !st->rotated; ++step) {
        if (st->deleting) {
            CO_ASSERT_TRUE(!st->buckets.empty());
            std::string name = *st->buckets.begin();
            CO_ASSERT_TRUE(co_await e->delete_bucket(name));
            st->buckets.erase(name);
        } else {
            std::string name = bucket_name(st->next++);
            CO_ASSERT_TRUE(co_await e->create_bucket(name));
            st->buckets.insert(name);
        }
        st->rotated = testing::file_exists(st->shard0_dir + "/" + st->stop_when_exists);
    }
    // One more change lands in the new journal (the rotation may finish only during this one).
    if (st->deleting) {
        std::string name = *st->buckets.begin();
        CO_ASSERT_TRUE(co_await e->delete_bucket(name));
        st->buckets.erase(name);
    }
}

io::task<void> expect_buckets(engine* e, const std::set<std::string>* expected) {
    auto names = bucket_names(e->list_buckets());
    EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), *expected);
    co_return;
}

TEST(engine, bucket_change_that_triggers_rotation_survives_reopen) {
    temp_dir dir;
    engine_options options = test_options(dir.path());
    options.journal_rotate_bytes = 4096;
    bucket_rotation_state st;
    st.shard0_dir = dir.path() + "/meta/shard-0";
    st.stop_when_exists = "journal-00000002.log";
    {
        // Twice the threshold while creating, so that enough buckets exist to delete past 4096 bytes later.
        engine_options creating = options;
        creating.journal_rotate_bytes = 8192;
        auto e = open_engine(creating);
        ASSERT_NE(e, nullptr);
        run_engine(*e, [&](engine* en) { return change_buckets_until_rotation(en, &st); });
    }
    ASSERT_TRUE(st.rotated);
    {
        auto e = open_engine(options);
        ASSERT_NE(e, nullptr);
        run_engine(*e, [&](engine* en) { return expect_buckets(en, &st.buckets); });
        // Now delete until the next rotation.
        st.deleting = true;
        st.rotated = false;
        st.stop_when_exists = "journal-00000003.log";
        run_engine(*e, [&](engine* en) { return change_buckets_until_rotation(en, &st); });
    }
    ASSERT_TRUE(st.rotated);
    auto e = open_engine(options);
    ASSERT_NE(e, nullptr);
    run_engine(*e, [&](engine* en) { return expect_buckets(en, &st.buckets); });
}

// ---- orphans ----

TEST(engine, orphaned_data_files_are_removed_at_open) {
    temp_dir dir;
    recovery_model model;
    {
        auto e = open_engine(test_options(dir.path()));
        ASSERT_NE(e, nullptr);
        run_engine(*e, [&](engine* en) { return populate_scenario(en, &model); });
    }
    const std::string orphan = dir.path() + "/objects/ab/0123456789abcdef0123456789abcdef";
    const std::string unrelated = dir.path() + "/objects/ab/not-a-data-file";
    testing::write_file(orphan, "left behind by a crash during upload");
    testing::write_file(unrelated, "keep me");
    auto e = open_engine(test_options(dir.path()));
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->recovery().orphans_removed, 1u);
    EXPECT_FALSE(testing::file_exists(orphan));
    EXPECT_TRUE(testing::file_exists(unrelated)) << "only 32-hex-character names are data files";
    run_engine(*e, [&](engine* en) { return verify_scenario(en, &model); });
}

TEST(engine, reopen_with_fresh_directory_is_empty) {
    temp_dir dir;
    auto e = open_engine(test_options(dir.path()));
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->recovery().objects, 0u);
    EXPECT_EQ(e->recovery().journal_records, 0u);
    EXPECT_TRUE(testing::file_exists(dir.path() + "/meta/FORMAT"));
    EXPECT_TRUE(testing::file_exists(dir.path() + "/FJORD_DRIVE"));
}

// ---- spare data files (spare_files.h) ----

std::uint64_t inode_of(const std::string& path) {
    struct stat st{};
    if (::stat(path.c_str(), &st) != 0) return 0;
    return st.st_ino;
}

std::string data_path(const std::string& dir, const segment& seg) {
    char fan[4];
    std::snprintf(fan, sizeof fan, "%02llx", static_cast<unsigned long long>(seg.id.lo & 0xff));
    return dir + "/objects/" + fan + "/" + drive_set::file_name(seg.id);
}

std::size_t spare_count(const std::string& dir) {
    std::size_t n = 0;
    if (DIR* d = ::opendir((dir + "/spare").c_str())) {
        while (dirent* entry = ::readdir(d))
            if (entry->d_name[0] != '.') ++n;
        ::closedir(d);
    }
    return n;
}

io::task<object_record> put_and_get(engine* e, std::string key, std::string data) {
    object_record committed;
    auto put = co_await put_object(e, "b", key, std::move(data), "e", no_conditions, &committed);
    EXPECT_TRUE(put.has_value()) << put.err().message;
    co_return committed;
}

TEST(spare_files, a_replaced_file_is_reused_by_a_write_of_its_size_and_reads_stay_exact) {
    temp_dir dir;
    auto e = open_engine(test_options(dir.path()));
    ASSERT_NE(e, nullptr);
    const std::string a = testing::pattern_bytes(3 * MiB + 5, 1),
                      b = testing::pattern_bytes(3 * MiB + 5, 2),
                      c = testing::pattern_bytes(3 * MiB, 3),
                      small = testing::pattern_bytes(100 * KiB, 4);
    run_engine(*e, [&](engine* en) -> io::task<void> {
        EXPECT_TRUE(co_await en->create_bucket("b"));
        object_record first = co_await put_and_get(en, "k", a);
        const std::uint64_t first_inode = inode_of(data_path(dir.path(), first.segments[0]));
        CO_ASSERT_TRUE(first_inode != 0u);
        co_await put_and_get(en, "k", b);  // frees a's file: kept as a spare
        EXPECT_EQ(en->spares().stats().kept, 1u);
        EXPECT_EQ(spare_count(dir.path()), 1u);
        EXPECT_FALSE(testing::file_exists(data_path(dir.path(), first.segments[0])));
        // Too small for the spare (it would waste more than the slack), and too large: fresh files.
        co_await put_and_get(en, "small", small);
        co_await put_and_get(en, "large", testing::pattern_bytes(5 * MiB, 5));
        EXPECT_EQ(en->spares().stats().reused, 0u);
        object_record third = co_await put_and_get(en, "k2", c);  // 5 bytes smaller: fits the spare
        EXPECT_EQ(en->spares().stats().reused, 1u);
        EXPECT_EQ(spare_count(dir.path()), 0u);
        EXPECT_EQ(inode_of(data_path(dir.path(), third.segments[0])), first_inode)
            << "the same file, overwritten";
        auto k = co_await en->head("b", "k");
        auto k2 = co_await en->head("b", "k2");
        auto small_record = co_await en->head("b", "small");
        EXPECT_TRUE(k && k2 && small_record);
        EXPECT_EQ(*co_await read_back(en, *k), b);
        EXPECT_EQ(*co_await read_back(en, *k2), c);
        EXPECT_EQ(*co_await read_back(en, *small_record), small);
        co_await put_and_get(en, "small", small);  // a small replaced file is removed, not kept
        EXPECT_EQ(en->spares().stats().kept, 1u);
    });
}

// Blocks the first write until released, after telling that it got there.
class gated_sink final : public byte_sink {
public:
    io::task<base::result<void>> write(std::span<const std::byte> data) override {
        if (out.empty()) {
            reached.count_down();
            co_await gate.wait();
        }
        out.append(reinterpret_cast<const char*>(data.data()), data.size());
        co_return base::result<void>{};
    }
    testing::local_latch reached{1}, gate{1};
    std::string out;
};

io::task<void> read_into(engine* e, object_record record, gated_sink* sink, bool* ok) {
    auto r = co_await read_object(e->drives(), e->pool(), record, 0, record.size_bytes, *sink,
                                  e->data_file_settings());
    *ok = r.has_value();
}

TEST(spare_files, a_file_being_read_is_not_reused) {
    temp_dir dir;
    auto e = open_engine(test_options(dir.path()));
    ASSERT_NE(e, nullptr);
    // Larger than the reader's read-ahead (4 buffers of 1 MiB), so it reads most of the file after the gate.
    const std::string a = testing::pattern_bytes(9 * MiB, 1),
                      b = testing::pattern_bytes(9 * MiB, 2);
    run_engine(*e, [&](engine* en) -> io::task<void> {
        EXPECT_TRUE(co_await en->create_bucket("b"));
        object_record first = co_await put_and_get(en, "k", a);
        gated_sink sink;
        bool read_ok = false;
        testing::local_latch read_done(1);
        io::spawn([](engine* x, object_record r, gated_sink* s, bool* ok,
                     testing::local_latch* done) -> io::task<void> {
            co_await read_into(x, std::move(r), s, ok);
            done->count_down();
        }(en, first, &sink, &read_ok, &read_done));
        co_await sink.reached
            .wait();  // the reader has the file open and is sending its first chunk
        co_await put_and_get(en, "k", b);  // frees the file the reader has open: removed, not kept
        EXPECT_EQ(en->spares().stats().kept, 0u);
        co_await put_and_get(en, "k2", b);  // would have overwritten it
        EXPECT_EQ(en->spares().stats().reused, 0u);
        sink.gate.count_down();
        co_await read_done.wait();
        EXPECT_TRUE(read_ok);
        EXPECT_TRUE(sink.out == a) << "the reader saw bytes of a later object";
    });
}

TEST(spare_files, a_file_another_object_shares_is_not_reused) {
    temp_dir dir;
    auto e = open_engine(test_options(dir.path()));
    ASSERT_NE(e, nullptr);
    const std::string a = testing::pattern_bytes(3 * MiB, 1),
                      b = testing::pattern_bytes(3 * MiB, 2);
    run_engine(*e, [&](engine* en) -> io::task<void> {
        EXPECT_TRUE(co_await en->create_bucket("b"));
        object_record first = co_await put_and_get(en, "k", a);
        auto shared = co_await steps(en).share_segments(first.segments);
        CO_ASSERT_TRUE(shared.has_value());
        object_record copy = first;
        copy.segments = *shared;
        auto committed = co_await steps(en).commit_put("b", "copy", copy, no_conditions);
        CO_ASSERT_TRUE(committed.has_value());
        co_await put_and_get(en, "k", b);  // frees one of two names
        EXPECT_EQ(en->spares().stats().kept, 0u);
        co_await put_and_get(en, "k2", b);
        auto found = co_await en->head("b", "copy");
        CO_ASSERT_TRUE(found.has_value());
        EXPECT_TRUE(*co_await read_back(en, *found) == a);
        auto removed =
            co_await steps(en).commit_remove("b", "copy",
                                             no_conditions);  // the last name: now it is kept
        CO_ASSERT_TRUE(removed.has_value() && removed->has_value());
        co_await steps(en).reclaim(**removed);
        EXPECT_EQ(en->spares().stats().kept, 1u);
    });
}

TEST(spare_files, spares_no_write_takes_expire) {
    temp_dir dir;
    for (std::int64_t idle_ms : {600'000, 0}) {
        engine_options options = test_options(dir.path());
        options.spares.idle_ms = idle_ms;
        auto e = open_engine(options);
        ASSERT_NE(e, nullptr);
        run_engine(*e, [&](engine* en) -> io::task<void> {
            (void)co_await en->create_bucket("b");
            co_await put_and_get(en, "k", testing::pattern_bytes(2 * MiB, 1));
            co_await put_and_get(en, "k", testing::pattern_bytes(2 * MiB, 2));
            EXPECT_EQ(spare_count(dir.path()), 1u);
            EXPECT_EQ(co_await en->spares().expire_idle(), idle_ms == 0 ? 1u : 0u);
            EXPECT_EQ(spare_count(dir.path()), idle_ms == 0 ? 0u : 1u);
        });
    }
}

TEST(spare_files, spares_are_bounded_released_and_gone_after_a_restart) {
    temp_dir dir;
    engine_options options = test_options(dir.path());
    options.spares.bytes_per_drive = 4 * MiB;  // room for one 3 MiB file
    {
        auto e = open_engine(options);
        ASSERT_NE(e, nullptr);
        run_engine(*e, [&](engine* en) -> io::task<void> {
            EXPECT_TRUE(co_await en->create_bucket("b"));
            for (int i = 0; i < 3; ++i)
                co_await put_and_get(en, "k" + std::to_string(i),
                                     testing::pattern_bytes(3 * MiB, i));
            for (int i = 0; i < 3; ++i)  // each frees a file: kept, the older ones evicted
                co_await put_and_get(en, "k" + std::to_string(i),
                                     testing::pattern_bytes(3 * MiB + 400 * KiB, i));
            EXPECT_EQ(en->spares().stats().kept, 3u);
            EXPECT_LE(en->spares().bytes_held(0), 4 * MiB);
            EXPECT_EQ(spare_count(dir.path()), 1u) << "the oldest spares make room for newer ones";
            EXPECT_TRUE(co_await en->spares().release(0));  // the drive is full
            EXPECT_EQ(spare_count(dir.path()), 0u);
            EXPECT_EQ(en->spares().bytes_held(0), 0u);
            co_await put_and_get(en, "k0", testing::pattern_bytes(3 * MiB, 7));
            EXPECT_EQ(spare_count(dir.path()), 0u)
                << "a drive that was full keeps no spares for a while";
            EXPECT_EQ(en->spares().stats().kept, 3u);
        });
    }
    auto e = open_engine(options);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(spare_count(dir.path()), 0u) << "spares do not outlive a restart";
    run_engine(*e, [&](engine* en) -> io::task<void> {
        auto k0 = co_await en->head("b", "k0");
        auto k2 = co_await en->head("b", "k2");
        CO_ASSERT_TRUE(k0 && k2);
        EXPECT_TRUE(*co_await read_back(en, *k0) == testing::pattern_bytes(3 * MiB, 7));
        EXPECT_TRUE(*co_await read_back(en, *k2) == testing::pattern_bytes(3 * MiB + 400 * KiB, 2));
    });
}

}  // namespace
}  // namespace fjord::store

namespace fjord::store {
namespace {

// Bucket attributes are as durable as the bucket: in the journal, in a snapshot, seen on every core,
// removed with the bucket.
TEST(engine, bucket_attributes_survive_reopen_and_snapshots_and_go_with_the_bucket) {
    temp_dir dir;
    engine_options options = test_options(dir.path());
    for (int pass = 0; pass < 3; ++pass) {
        auto e = open_engine(options);
        ASSERT_NE(e, nullptr);
        run_engine(*e, [&](engine* en) -> io::task<void> {
            return [](engine* x, int pass) -> io::task<void> {
                if (pass == 0) {
                    CO_ASSERT_TRUE(co_await x->create_bucket("attrs"));
                    CO_ASSERT_TRUE(co_await x->create_bucket("gone"));
                    CO_ASSERT_TRUE(co_await x->set_bucket_attribute("attrs", "a", "1"));
                    CO_ASSERT_TRUE(co_await x->set_bucket_attribute("attrs", "b", "two"));
                    CO_ASSERT_TRUE(co_await x->set_bucket_attribute("attrs", "a", "one"));
                    CO_ASSERT_TRUE(co_await x->set_bucket_attribute("gone", "a", "x"));
                    CO_ASSERT_TRUE(co_await x->delete_bucket("gone"));
                    auto missing = co_await x->set_bucket_attribute("nope", "a", "x");
                    EXPECT_EQ(missing.code(), base::errc::no_such_bucket);
                    // Seen on the other core at once.
                    auto other = co_await io::invoke_on(1, [x] {
                        return [](engine* y) -> io::task<std::map<std::string, std::string>> {
                            co_return y->find_bucket("attrs")->attributes;
                        }(x);
                    });
                    EXPECT_EQ(other,
                              (std::map<std::string, std::string>{{"a", "one"}, {"b", "two"}}));
                } else if (pass == 1) {
                    // Replayed from the journal; then into a snapshot, with one more change after it.
                    EXPECT_EQ(x->find_bucket("attrs")->attributes,
                              (std::map<std::string, std::string>{{"a", "one"}, {"b", "two"}}));
                    co_await x->snapshot_local_shards();
                    CO_ASSERT_TRUE(co_await x->set_bucket_attribute("attrs", "b", std::nullopt));
                } else {
                    EXPECT_EQ(x->find_bucket("attrs")->attributes,
                              (std::map<std::string, std::string>{{"a", "one"}}));
                    EXPECT_FALSE(x->find_bucket("gone").has_value());
                    CO_ASSERT_TRUE(co_await x->create_bucket("gone"));
                    EXPECT_TRUE(x->find_bucket("gone")->attributes.empty());
                }
            }(en, pass);
        });
    }
}

}  // namespace
}  // namespace fjord::store
