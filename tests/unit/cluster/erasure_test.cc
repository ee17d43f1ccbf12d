// Reed-Solomon through ISA-L: every pattern of up to m lost shards rebuilds byte-exact, and the limits.
#include "cluster/erasure.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

namespace fjord::cluster {
namespace {

struct stripe {
    std::vector<std::vector<std::uint8_t>> shards;
    std::vector<std::uint8_t*> pointers;

    stripe(unsigned width, std::size_t len) : shards(width, std::vector<std::uint8_t>(len)) {
        for (auto& s : shards) pointers.push_back(s.data());
    }
};

stripe encoded(const erasure_code& code, std::size_t len, unsigned seed) {
    stripe s(code.width(), len);
    std::mt19937 random(seed);
    for (unsigned i = 0; i < code.k(); ++i)
        for (auto& b : s.shards[i]) b = static_cast<std::uint8_t>(random());
    std::vector<const std::uint8_t*> data(s.pointers.begin(), s.pointers.begin() + code.k());
    code.encode(data, std::span(s.pointers).subspan(code.k()), len);
    return s;
}

// Every subset of lost shards of size 1..m, for small geometries: rebuilt equal to the original.
void check_every_loss(unsigned k, unsigned m, std::size_t len) {
    auto code = erasure_code::make(k, m);
    ASSERT_TRUE(code);
    const stripe original = encoded(*code, len, k * 100 + m);
    const unsigned n = k + m;
    for (unsigned mask = 1; mask < (1u << n); ++mask) {
        if (static_cast<unsigned>(__builtin_popcount(mask)) > m) continue;
        stripe damaged = original;
        for (unsigned i = 0; i < n; ++i) damaged.pointers[i] = damaged.shards[i].data();
        std::vector<bool> present(n, true);
        std::vector<unsigned> wanted;
        for (unsigned i = 0; i < n; ++i)
            if (mask & (1u << i)) {
                present[i] = false;
                wanted.push_back(i);
                std::fill(damaged.shards[i].begin(), damaged.shards[i].end(), 0xEE);
            }
        std::unique_ptr<bool[]> flags(new bool[n]);
        for (unsigned i = 0; i < n; ++i) flags[i] = present[i];
        ASSERT_TRUE(
            code->reconstruct(damaged.pointers, std::span<const bool>(flags.get(), n), wanted, len))
            << k << "+" << m << " mask " << mask;
        for (unsigned i = 0; i < n; ++i)
            ASSERT_EQ(damaged.shards[i], original.shards[i]) << k << "+" << m << " mask " << mask;
    }
}

TEST(ErasureCode, EveryLossOfUpToMShardsRebuilds) {
    check_every_loss(2, 2, 4096);
    check_every_loss(4, 2, 1000);  // not a multiple of ISA-L's vector width
    check_every_loss(3, 3, 64);
    check_every_loss(5, 3, 4096);
    check_every_loss(1, 1, 7);
}

TEST(ErasureCode, WideStripesRebuildTheirWorstCase) {
    // 12+4 and 28+4: the first m shards lost (all data, hardest inversion) and the last m (all parity).
    for (auto [k, m] : {std::pair{12u, 4u}, std::pair{28u, 4u}}) {
        auto code = erasure_code::make(k, m);
        ASSERT_TRUE(code);
        const stripe original = encoded(*code, 8192, k);
        for (unsigned first : {0u, k}) {
            stripe damaged = original;
            for (unsigned i = 0; i < k + m; ++i) damaged.pointers[i] = damaged.shards[i].data();
            std::unique_ptr<bool[]> present(new bool[k + m]);
            std::vector<unsigned> wanted;
            for (unsigned i = 0; i < k + m; ++i) {
                present[i] = i < first || i >= first + m;
                if (!present[i]) {
                    wanted.push_back(i);
                    std::fill(damaged.shards[i].begin(), damaged.shards[i].end(), 0);
                }
            }
            ASSERT_TRUE(code->reconstruct(
                damaged.pointers, std::span<const bool>(present.get(), k + m), wanted, 8192));
            for (unsigned i = 0; i < k + m; ++i) ASSERT_EQ(damaged.shards[i], original.shards[i]);
        }
    }
}

TEST(ErasureCode, DataShardsAreTheDataItself) {
    auto code = erasure_code::make(4, 2);
    ASSERT_TRUE(code);
    stripe s = encoded(*code, 512, 9);
    stripe again = encoded(*code, 512, 9);
    EXPECT_EQ(s.shards, again.shards);  // deterministic
    EXPECT_NE(s.shards[4], s.shards[0]);
}

TEST(ErasureCode, LimitsAndMisuseAreRefused) {
    EXPECT_FALSE(erasure_code::make(0, 2));
    EXPECT_FALSE(erasure_code::make(4, 0));
    EXPECT_FALSE(erasure_code::make(29, 4));
    EXPECT_TRUE(erasure_code::make(28, 4));

    auto code = erasure_code::make(2, 2);
    stripe s = encoded(*code, 64, 1);
    bool three_lost[] = {true, false, false, false};
    std::vector<unsigned> wanted = {1, 2, 3};
    auto failed = code->reconstruct(s.pointers, three_lost, wanted, 64);
    ASSERT_FALSE(failed);
    EXPECT_NE(failed.err().message.find("1 shards present, 2 needed"), std::string::npos);
    bool all[] = {true, true, true, true};
    std::vector<unsigned> present_one = {0};
    EXPECT_FALSE(code->reconstruct(s.pointers, all, present_one, 64));
    std::vector<unsigned> out_of_range = {4};
    EXPECT_FALSE(code->reconstruct(s.pointers, all, out_of_range, 64));
    std::vector<std::uint8_t*> short_list(s.pointers.begin(), s.pointers.begin() + 3);
    EXPECT_FALSE(code->reconstruct(short_list, std::span<const bool>(all, 3), {}, 64));
}

}  // namespace
}  // namespace fjord::cluster
