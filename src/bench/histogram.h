#pragma once

// A log-linear latency histogram: exact below 16 µs, then 16 sub-buckets per power of two (a relative
// error of at most 1/16 = 6.25%, reported at the bucket middle, so about 3%). Fixed size, no
// allocation per sample, mergeable: each core records into its own and the totals are merged at the end.

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>

namespace fjord::bench {

class latency_histogram {
public:
    void record(std::uint64_t value_us) {
        ++_counts[index_of(value_us)];
        ++_count;
        _sum_us += value_us;
        _max_us = std::max(_max_us, value_us);
    }

    void merge(const latency_histogram& other) {
        for (std::size_t i = 0; i < bucket_count; ++i) _counts[i] += other._counts[i];
        _count += other._count;
        _sum_us += other._sum_us;
        _max_us = std::max(_max_us, other._max_us);
    }

    std::uint64_t count() const { return _count; }
    std::uint64_t max_us() const { return _max_us; }
    double mean_us() const {
        return _count ? static_cast<double>(_sum_us) / static_cast<double>(_count) : 0.0;
    }

    // The value below which `fraction` (0..1) of the samples lie, as the middle of its bucket (never
    // more than the largest sample).
    double percentile_us(double fraction) const {
        if (_count == 0) return 0.0;
        auto rank = static_cast<std::uint64_t>(fraction * static_cast<double>(_count));
        rank = std::min(std::max<std::uint64_t>(rank, 1), _count);
        std::uint64_t seen = 0;
        for (std::size_t i = 0; i < bucket_count; ++i) {
            seen += _counts[i];
            if (seen >= rank) return std::min(middle_of(i), static_cast<double>(_max_us));
        }
        return static_cast<double>(_max_us);
    }

private:
    static constexpr unsigned sub_bits = 4;  // 16 sub-buckets per power of two
    static constexpr std::uint64_t linear_limit = 1u << sub_bits;
    static constexpr std::size_t bucket_count = linear_limit + (64 - sub_bits) * linear_limit;

    static std::size_t index_of(std::uint64_t v) {
        if (v < linear_limit) return static_cast<std::size_t>(v);
        unsigned exponent = 63 - static_cast<unsigned>(std::countl_zero(v));  // >= sub_bits
        std::uint64_t sub = (v >> (exponent - sub_bits)) & (linear_limit - 1);
        return static_cast<std::size_t>(linear_limit + (exponent - sub_bits) * linear_limit + sub);
    }
    static double middle_of(std::size_t index) {
        if (index < linear_limit) return static_cast<double>(index);
        std::size_t exponent = (index - linear_limit) / linear_limit + sub_bits;
        std::uint64_t sub = (index - linear_limit) % linear_limit;
        std::uint64_t width = std::uint64_t{1} << (exponent - sub_bits);
        std::uint64_t low = (std::uint64_t{1} << exponent) + sub * width;
        return static_cast<double>(low) + static_cast<double>(width) / 2.0;
    }

    std::array<std::uint64_t, bucket_count> _counts{};
    std::uint64_t _count = 0;
    std::uint64_t _sum_us = 0;
    std::uint64_t _max_us = 0;
};

}  // namespace fjord::bench
