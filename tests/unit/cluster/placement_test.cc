// Geometry defaults, set layout over nodes, and rendezvous placement: balance and minimal movement.
#include "cluster/placement.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace fjord::cluster {
namespace {

std::vector<std::string> node_ids(unsigned n) {
    std::vector<std::string> out;
    for (unsigned i = 1; i <= n; ++i) out.push_back("n" + std::to_string(i));
    return out;
}

TEST(Placement, DefaultGeometries) {
    auto g = [](unsigned nodes, unsigned drives) {
        auto got = default_geometry(nodes, drives);
        return got ? std::to_string(got->k) + "+" + std::to_string(got->m) : got.err().message;
    };
    EXPECT_EQ(g(4, 1), "2+2");  // one node down: 3 shards, the write quorum of k + 1
    EXPECT_EQ(g(5, 1), "3+2");
    EXPECT_EQ(g(6, 1), "4+2");
    EXPECT_EQ(g(8, 1), "5+3");
    EXPECT_EQ(g(16, 1), "12+4");
    EXPECT_EQ(g(4, 4), "2+2");  // 4 sets, one shard per node
    EXPECT_EQ(g(96, 8), "12+4");
    EXPECT_EQ(g(3, 1), "2+1");
    EXPECT_EQ(g(2, 4), "4+4");  // 4 shards per node
    EXPECT_EQ(g(3, 4), "7+5");
    EXPECT_NE(g(1, 2).find("3 drives or more"), std::string::npos);
    EXPECT_NE(g(17, 1).find("do not divide"), std::string::npos);
}

TEST(Placement, SetsSpanDistinctNodesWhenTheyCan) {
    auto nodes = node_ids(6);
    auto sets = layout_sets(nodes, 4, geometry{4, 2});
    ASSERT_TRUE(sets);
    ASSERT_EQ(sets->size(), 4u);
    std::set<std::pair<std::string, unsigned>> every;
    for (const erasure_set& s : *sets) {
        ASSERT_EQ(s.drives.size(), 6u);
        std::set<std::string> on;
        for (const drive_ref& d : s.drives) {
            on.insert(d.node_id);
            every.insert({d.node_id, d.drive});
        }
        EXPECT_EQ(on.size(), 6u) << "set " << s.id;
    }
    EXPECT_EQ(every.size(), 24u);                         // every drive in exactly one set
    auto uneven = layout_sets(nodes, 1, geometry{3, 1});  // 6 drives into sets of 4
    ASSERT_FALSE(uneven);
    EXPECT_NE(uneven.err().message.find("6 drives do not divide into sets of 3+1"),
              std::string::npos);
}

TEST(Placement, FewerNodesThanShardsShareThemOut) {
    auto sets = layout_sets(node_ids(2), 4, geometry{4, 4});  // 8 drives, one set of 8 on 2 nodes
    ASSERT_TRUE(sets);
    ASSERT_EQ(sets->size(), 1u);
    std::map<std::string, int> per_node;
    for (const drive_ref& d : (*sets)[0].drives) per_node[d.node_id]++;
    EXPECT_EQ(per_node, (std::map<std::string, int>{{"n1", 4}, {"n2", 4}}));
}

TEST(Placement, KeysSpreadEvenlyAndMoveOnlyToAddedSets) {
    auto before = layout_sets(node_ids(8), 4, geometry{5, 3});  // 4 sets
    auto after = layout_sets(node_ids(8), 5, geometry{5, 3});   // 5 sets: set 4 added
    ASSERT_TRUE(before && after);
    ASSERT_EQ(before->size(), 4u);
    ASSERT_EQ(after->size(), 5u);
    constexpr int keys = 50000;
    std::map<std::size_t, int> per_set;
    int moved = 0;
    for (int i = 0; i < keys; ++i) {
        std::uint64_t h = object_hash("ckpt", "step-" + std::to_string(i) + "/rank-0.pt");
        std::size_t was = choose_set(h, *before), now = choose_set(h, *after);
        EXPECT_EQ(was, choose_set(h, *before));  // deterministic
        per_set[was]++;
        if (now != was) {
            ++moved;
            EXPECT_EQ((*after)[now].id, 4u) << "a key moved between two old sets";
        }
    }
    for (auto [set, count] : per_set) EXPECT_NEAR(count, keys / 4, keys / 4 / 20) << "set " << set;
    EXPECT_NEAR(moved, keys / 5, keys / 5 / 10);  // about a fifth move, all to the new set
}

TEST(Placement, ShardOrderRotatesOverTheSet) {
    std::map<unsigned, int> parity_on;
    for (int i = 0; i < 6000; ++i) {
        std::uint64_t h = object_hash("b", std::to_string(i));
        std::set<unsigned> used;
        for (unsigned shard = 0; shard < 6; ++shard) used.insert(shard_drive(h, shard, 6));
        ASSERT_EQ(used.size(), 6u);
        parity_on[shard_drive(h, 4, 6)]++;
    }
    for (auto [drive, count] : parity_on) EXPECT_NEAR(count, 1000, 150) << "drive " << drive;
    EXPECT_NE(object_hash("ab", "c"), object_hash("a", "bc"));
}

}  // namespace
}  // namespace fjord::cluster
