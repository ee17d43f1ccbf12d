// Versions of keys (object_store.h, "Versioning"): the one rule by which writes and removals change a
// key's versions, and versions kept through a reopen (journal), a snapshot and orphan removal.

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "io/cross_core.h"
#include "io/task.h"
#include "store/engine.h"
#include "store/engine_internal.h"
#include "engine_test_util.h"
#include "store_test_util.h"

namespace fjord::store {
namespace {

using base::errc;
using testing::temp_dir;
using namespace engine_testing;

object_record version(std::string id, std::string etag) {
    object_record r;
    r.version_id = std::move(id);
    r.etag = std::move(etag);
    return r;
}

std::vector<std::string> ids_of(const key_index& index, const key_history& history) {
    std::vector<std::string> out;
    const auto& current = index.at("b").at("k");
    out.push_back(current.version_id + "=" + current.etag);
    if (auto b = history.find("b"); b != history.end())
        for (auto it = b->second.at("k").rbegin(); it != b->second.at("k").rend(); ++it)
            out.push_back(it->version_id + "=" + it->etag);
    return out;
}

TEST(versions, a_write_replaces_only_the_version_with_its_id) {
    key_index index;
    key_history history;
    EXPECT_FALSE(apply_put(index, history, "b", "k", version("", "a")));  // never versioned
    EXPECT_EQ(apply_put(index, history, "b", "k", version("", "b"))->etag, "a");
    EXPECT_TRUE(history.empty());
    EXPECT_FALSE(apply_put(index, history, "b", "k", version("v1", "c")));  // enabled
    EXPECT_FALSE(apply_put(index, history, "b", "k", version("v2", "d")));
    EXPECT_EQ(ids_of(index, history), (std::vector<std::string>{"v2=d", "v1=c", "=b"}));
    // Suspended: the null version is replaced wherever it is; the others stay
    EXPECT_EQ(apply_put(index, history, "b", "k", version("", "e"))->etag, "b");
    EXPECT_EQ(ids_of(index, history), (std::vector<std::string>{"=e", "v2=d", "v1=c"}));
    EXPECT_EQ(apply_put(index, history, "b", "k", version("", "f"))->etag, "e");
    EXPECT_EQ(ids_of(index, history), (std::vector<std::string>{"=f", "v2=d", "v1=c"}));
}

TEST(versions, removing_the_current_version_brings_the_newest_older_one_back) {
    key_index index;
    key_history history;
    apply_put(index, history, "b", "k", version("v1", "a"));
    apply_put(index, history, "b", "k", version("v2", "b"));
    apply_put(index, history, "b", "k", version("v3", "c"));
    const std::string v2 = "v2", missing = "v9";
    EXPECT_FALSE(apply_remove(index, history, "b", "k", &missing));
    EXPECT_EQ(apply_remove(index, history, "b", "k", &v2)->etag, "b");
    EXPECT_EQ(ids_of(index, history), (std::vector<std::string>{"v3=c", "v1=a"}));
    EXPECT_EQ(apply_remove(index, history, "b", "k", nullptr)->etag, "c");
    EXPECT_EQ(ids_of(index, history), (std::vector<std::string>{"v1=a"}));
    EXPECT_TRUE(history.empty()) << "no empty history is kept";
    EXPECT_EQ(apply_remove(index, history, "b", "k", nullptr)->etag, "a");
    EXPECT_TRUE(index.empty());
    EXPECT_FALSE(apply_remove(index, history, "b", "k", nullptr));
}

io::task<base::result<object_record>> put_bytes(engine* e, std::string key, std::string data) {
    const std::uint64_t size = data.size();
    testing::string_source source(std::move(data), size);
    put_request request{"v", key, size, 1ULL << 30, {}};
    record_finisher finish = [](const written_data&) -> base::result<object_record> {
        object_record r;
        r.etag = "etag";
        return r;
    };
    co_return co_await e->put(request, source, finish);
}

io::task<std::string> bytes_of(engine* e, std::string key, std::string version_id) {
    testing::string_sink sink;
    read_planner whole = [](const object_record& r) -> base::result<std::optional<byte_range>> {
        return std::optional<byte_range>(byte_range{0, r.size_bytes});
    };
    auto got = co_await e->get_version("v", key, version_id, whole, sink);
    EXPECT_TRUE(got.has_value()) << (got ? "" : got.err().message);
    co_return sink.out;
}

// "key:version[*]" for each listed version (* a delete marker), in order.
io::task<std::vector<std::string>> listed(engine* e) {
    list_request request;
    request.bucket = "v";
    auto page = co_await e->list_versions(request);
    std::vector<std::string> out;
    EXPECT_TRUE(page.has_value());
    if (page)
        for (const auto& entry : page->entries)
            out.push_back(entry.name + ":" + entry.version_id + (entry.delete_marker ? "*" : ""));
    co_return out;
}

struct versions_model {
    std::string big = std::string(64 * 1024, 'x');  // in a data file (above inline_max_bytes)
    std::vector<std::string> k;                     // versions of "k", oldest first
    std::string marker, small;
};

io::task<void> write_versions(engine* e, versions_model* m) {
    CO_ASSERT_TRUE(co_await e->create_bucket("v"));
    CO_ASSERT_TRUE(co_await e->set_bucket_attribute("v", versioning_attribute, "Enabled"));
    for (int i = 0; i < 3; ++i) {
        auto put = co_await put_bytes(e, "k", m->big + std::to_string(i));
        CO_ASSERT_TRUE(put);
        EXPECT_EQ(put->version_id.size(), 32u);
        m->k.push_back(put->version_id);
    }
    auto marker = co_await e->remove("v", "k", no_conditions);
    CO_ASSERT_TRUE(marker && *marker && (*marker)->delete_marker);
    m->marker = (*marker)->version_id;
    auto small = co_await put_bytes(e, "small", "tiny");  // inline in its record
    CO_ASSERT_TRUE(small);
    m->small = small->version_id;
    auto removed = co_await e->remove_version("v", "k", m->k[1]);
    CO_ASSERT_TRUE(removed && *removed);
    m->k.erase(m->k.begin() + 1);
    auto head = co_await e->head("v", "k");
    EXPECT_EQ(head.code(), errc::no_such_key) << "a delete marker is current";
    auto at_marker = co_await e->head_version("v", "k", m->marker);
    EXPECT_EQ(at_marker.code(), errc::method_not_allowed);
    auto gone = co_await e->head_version("v", "k", std::string(32, '0'));
    EXPECT_EQ(gone.code(), errc::no_such_version);
}

io::task<void> check_versions(engine* e, const versions_model* m, bool snapshot_then_write) {
    EXPECT_EQ(co_await listed(e), (std::vector<std::string>{"k:" + m->marker + "*", "k:" + m->k[1],
                                                            "k:" + m->k[0], "small:" + m->small}));
    EXPECT_EQ(co_await bytes_of(e, "k", m->k[0]), m->big + "0");
    EXPECT_EQ(co_await bytes_of(e, "k", m->k[1]), m->big + "2");
    EXPECT_EQ(co_await bytes_of(e, "small", m->small), "tiny");
    if (!snapshot_then_write) co_return;
    co_await e->snapshot_local_shards();
    auto on_core_one = [e] {
        return [](engine* x) -> io::task<bool> {
            co_await x->snapshot_local_shards();
            co_return true;
        }(e);
    };
    EXPECT_TRUE(co_await io::invoke_on(1, std::move(on_core_one)));
    // Removing the marker brings the newest version back
    auto removed = co_await e->remove_version("v", "k", m->marker);
    CO_ASSERT_TRUE(removed && *removed);
}

io::task<void> named_versions_scenario(engine* e) {
    CO_ASSERT_TRUE(co_await e->create_bucket("v"));
    // Without versioning a named version is the null one.
    testing::string_source plain("p", 1);
    put_request unversioned{"v", "k", 1, 1ULL << 30, {}};
    record_finisher finish = [](const written_data&) -> base::result<object_record> {
        object_record r;
        r.etag = "e";
        return r;
    };
    auto null_version =
        co_await e->put_ordered(unversioned, {"named-1", std::nullopt}, plain, finish);
    CO_ASSERT_TRUE(null_version);
    EXPECT_EQ(null_version->version_id, "");
    CO_ASSERT_TRUE(co_await e->set_bucket_attribute("v", versioning_attribute, "Enabled"));
    for (std::string name : {"named-2", "named-3", "named-2"}) {
        const std::string data = std::string(70 * 1024, 'x') + name;
        testing::string_source source(data, data.size());
        put_request request{"v", "k", data.size(), 1ULL << 30, {}};
        auto put = co_await e->put_ordered(request, {name, std::nullopt}, source, finish);
        CO_ASSERT_TRUE(put);
        EXPECT_EQ(put->version_id, name);
    }
    // Writing a version's id again replaces that version, which becomes current.
    EXPECT_EQ(co_await listed(e), (std::vector<std::string>{"k:named-2", "k:named-3", "k:"}));
    EXPECT_EQ((co_await bytes_of(e, "k", "named-2")).substr(70 * 1024), "named-2");
}

TEST(versions, a_write_may_name_its_version) {
    temp_dir dir;
    auto e = open_engine(test_options(dir.path()));
    ASSERT_NE(e, nullptr);
    run_engine(*e, named_versions_scenario);
}

TEST(versions, survive_reopen_snapshot_and_orphan_removal) {
    temp_dir dir;
    versions_model model;
    engine_options options = test_options(dir.path());
    for (int pass = 0; pass < 3; ++pass) {
        auto e = open_engine(options);
        ASSERT_NE(e, nullptr);
        EXPECT_EQ(e->recovery().orphans_removed, 0u) << "older versions' data files are kept";
        run_engine(*e, [&](engine* en) -> io::task<void> {
            if (pass == 0) return write_versions(en, &model);
            if (pass == 1) return check_versions(en, &model, true);
            return [](engine* x, const versions_model* m) -> io::task<void> {
                EXPECT_EQ(co_await listed(x),
                          (std::vector<std::string>{"k:" + m->k[1], "k:" + m->k[0],
                                                    "small:" + m->small}));
                auto head = co_await x->head("v", "k");
                EXPECT_TRUE(head && head->version_id == m->k[1]);
                EXPECT_EQ(co_await bytes_of(x, "k", m->k[0]), m->big + "0");
            }(en, &model);
        });
    }
}

// Pages through every key (or version) with max_keys 2.
io::task<std::vector<std::string>> page_through(engine* e, bool versions) {
    std::vector<std::string> out;
    list_request request;
    request.bucket = "v";
    request.max_keys = 2;
    for (;;) {
        auto page = versions ? co_await e->list_versions(request) : co_await e->list(request);
        EXPECT_TRUE(page.has_value());
        if (!page) break;
        for (const auto& entry : page->entries) out.push_back(entry.name);
        if (!page->truncated) break;
        request.start_after = page->entries.back().name;
        if (versions) request.version_id_marker = page->entries.back().version_id;
    }
    co_return out;
}

TEST(versions, listings_page_through_every_key_when_a_core_owns_several_shards) {
    temp_dir dir;
    engine_options options = test_options(dir.path());
    options.cores = 4;  // four shards, fixed at the first start
    std::vector<std::string> keys;
    for (int i = 0; i < 40; ++i) keys.push_back("key-" + std::to_string((i + 1) * 2654435761ULL));
    std::sort(keys.begin(), keys.end());
    {
        auto e = open_engine(options);
        ASSERT_NE(e, nullptr);
        run_engine(
            *e,
            [&](engine* en) -> io::task<void> {
                return [](engine* x, const std::vector<std::string>* names) -> io::task<void> {
                    CO_ASSERT_TRUE(co_await x->create_bucket("v"));
                    for (const auto& k : *names) CO_ASSERT_TRUE(co_await put_bytes(x, k, "x"));
                }(en, &keys);
            },
            4);
    }
    options.cores = 2;  // now each core owns two shards
    auto e = open_engine(options);
    ASSERT_NE(e, nullptr);
    run_engine(*e, [&](engine* en) -> io::task<void> {
        return [](engine* x, const std::vector<std::string>* names) -> io::task<void> {
            EXPECT_EQ(co_await page_through(x, false), *names);
            EXPECT_EQ(co_await page_through(x, true), *names);
        }(en, &keys);
    });
}

}  // namespace
}  // namespace fjord::store
