#include "cluster/placement.h"

#include "base/assert.h"

#include <algorithm>

namespace fjord::cluster {

namespace {

// splitmix64's finalizer: every input bit moves about half of the output bits.
std::uint64_t mix64(std::uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

unsigned parity_for(unsigned width) {
    if (width <= 3) return 1;
    if (width <= 7) return 2;
    if (width <= 11) return 3;
    return 4;
}

}  // namespace

base::result<geometry> default_geometry(unsigned nodes, unsigned drives_per_node) {
    const unsigned drives = nodes * drives_per_node;
    if (nodes == 0 || drives_per_node == 0 || drives < 3)
        return base::fail(
            base::errc::invalid_argument,
            "an erasure-coded cluster needs 3 drives or more (got " + std::to_string(drives) + ")");
    auto widest = [&](unsigned most) -> unsigned {
        for (unsigned w = std::min(most, 16u); w >= 3; --w)
            if (drives % w == 0) return w;
        return 0;
    };
    unsigned width = widest(nodes);  // one shard per node
    if (width < 4) width = std::max(width, widest(16));
    if (width == 0)
        return base::fail(
            base::errc::invalid_argument,
            std::to_string(drives) +
                " drives do not divide into sets of 3 to 16: give each node a number of "
                "drives that does");
    // A node with s shards of each set takes s shards down with it: parity enough that writes (k + 1)
    // go on with one node down, but never more parity than data.
    const unsigned per_node = (width + nodes - 1) / nodes;
    unsigned m = per_node > 1 ? std::min(per_node + 1, width / 2) : parity_for(width);
    return geometry{width - m, m};
}

base::result<std::vector<erasure_set>> layout_sets(std::span<const std::string> nodes,
                                                   unsigned drives_per_node, geometry g) {
    const std::size_t drives = nodes.size() * drives_per_node;
    if (g.k == 0 || g.m == 0 || drives == 0 || drives % g.width() != 0)
        return base::fail(base::errc::invalid_argument,
                          std::to_string(drives) + " drives do not divide into sets of " +
                              std::to_string(g.k) + "+" + std::to_string(g.m));
    std::vector<erasure_set> sets(drives / g.width());
    for (std::size_t i = 0; i < drives; ++i) {
        erasure_set& set = sets[i / g.width()];
        set.id = static_cast<unsigned>(i / g.width());
        set.drives.push_back({nodes[i % nodes.size()], static_cast<unsigned>(i / nodes.size())});
    }
    return sets;
}

std::uint64_t object_hash(std::string_view bucket, std::string_view key) {
    // FNV-1a over "bucket/key" (a bucket name has no '/'), then mixed: FNV alone leaves the high bits
    // weak for short names.
    std::uint64_t h = 0xcbf29ce484222325ULL;
    auto feed = [&h](std::string_view text) {
        for (unsigned char c : text) {
            h ^= c;
            h *= 0x100000001b3ULL;
        }
    };
    feed(bucket);
    feed("/");
    feed(key);
    return mix64(h);
}

std::size_t choose_set(std::uint64_t object, std::span<const erasure_set> sets) {
    FJORD_ASSERT(!sets.empty(), "an object is placed among one set at least");
    std::size_t best = 0;
    std::uint64_t best_score = 0;
    for (std::size_t i = 0; i < sets.size(); ++i) {
        std::uint64_t score = mix64(object ^ mix64(0x9e3779b97f4a7c15ULL + sets[i].id));
        if (i == 0 || score > best_score) {
            best = i;
            best_score = score;
        }
    }
    FJORD_ASSERT(best < sets.size());
    return best;
}

unsigned shard_drive(std::uint64_t object, unsigned shard, unsigned width) {
    FJORD_ASSERT(width > 0 && shard < width, "a shard of the stripe");
    const auto drive = static_cast<unsigned>((object % width + shard) % width);
    FJORD_ASSERT(drive < width);
    return drive;
}

}  // namespace fjord::cluster
