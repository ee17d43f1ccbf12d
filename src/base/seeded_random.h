#pragma once

// The simulations' random numbers (tests/sim, store::sim_file_system): a seeded generator whose every
// draw is defined here, so a seed replays the same run with any standard library. std's engines are
// specified, but its distributions (uniform_real_distribution, uniform_int_distribution) and
// std::shuffle are not: the same seed could take another path on another libstdc++ or on libc++.
// xoshiro256** (Blackman and Vigna), seeded through splitmix64: fast, small state, and good enough
// statistically for choosing faults and interleavings. Not for anything secret.

#include <cstdint>
#include <iterator>
#include <limits>
#include <utility>

namespace fjord::base {

class seeded_random {
public:
    using result_type = std::uint64_t;
    explicit seeded_random(std::uint64_t seed = 0) { reseed(seed); }

    void reseed(std::uint64_t seed) {
        for (auto& word : _s) {  // splitmix64: never leaves the state all zero
            seed += 0x9e3779b97f4a7c15ULL;
            std::uint64_t z = seed;
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
            word = z ^ (z >> 31);
        }
    }

    static constexpr result_type min() { return 0; }
    static constexpr result_type max() { return std::numeric_limits<result_type>::max(); }

    result_type operator()() {
        const std::uint64_t out = rotl(_s[1] * 5, 7) * 9;
        const std::uint64_t t = _s[1] << 17;
        _s[2] ^= _s[0];
        _s[3] ^= _s[1];
        _s[1] ^= _s[2];
        _s[0] ^= _s[3];
        _s[2] ^= t;
        _s[3] = rotl(_s[3], 45);
        return out;
    }

    // Uniform in [0, 1), from the top 53 bits.
    double unit() { return static_cast<double>((*this)() >> 11) * 0x1.0p-53; }
    bool chance(double p) { return unit() < p; }

    // Uniform in [0, n) for n > 0, without modulo bias (rejection of the short last interval).
    std::uint64_t below(std::uint64_t n) {
        const std::uint64_t limit = max() - max() % n;
        std::uint64_t x;
        do x = (*this)();
        while (x >= limit);
        return x % n;
    }

    // Fisher-Yates, drawing with below().
    template <class RandomIt>
    void shuffle(RandomIt first, RandomIt last) {
        const auto n = static_cast<std::uint64_t>(std::distance(first, last));
        for (std::uint64_t i = n; i > 1; --i)
            std::swap(first[static_cast<std::ptrdiff_t>(i - 1)],
                      first[static_cast<std::ptrdiff_t>(below(i))]);
    }

private:
    static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    std::uint64_t _s[4];
};

}  // namespace fjord::base
