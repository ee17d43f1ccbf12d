#pragma once
// Reed-Solomon erasure coding over GF(2^8) (ISA-L): k data shards and m parity shards of equal length,
// from which any k rebuild the others.
//
// The code is systematic (the data shards are the data itself) with a Cauchy generator matrix, whose
// every k x k submatrix is invertible, so any k of the k + m shards decode; ISA-L's plain Vandermonde
// matrix ("rs") does not guarantee that beyond small m. The encode and decode tables are computed once per
// geometry (encode) and once per set of missing shards (decode); the arithmetic runs in ISA-L's SIMD
// kernels.
//
// Thread-safety: an erasure_code is immutable after make(); any thread may use it at once.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/result.h"

namespace fjord::cluster {

// The widest stripe accepted: 32 shards (ISA-L allows up to 255; wider sets only lengthen the tail of
// every read and the repair traffic of every lost drive).
constexpr unsigned max_stripe_width = 32;

class erasure_code {
public:
    // 1 <= k, 1 <= m, k + m <= max_stripe_width.
    static base::result<erasure_code> make(unsigned k, unsigned m);

    unsigned k() const { return _k; }
    unsigned m() const { return _m; }
    unsigned width() const { return _k + _m; }

    // Computes the m parity shards from the k data shards, each `len` bytes.
    void encode(std::span<const std::uint8_t* const> data, std::span<std::uint8_t* const> parity,
                std::size_t len) const;

    // shards: all k + m buffers of `len` bytes; present[i]: shard i holds good bytes. Rebuilds each shard
    // in `wanted` (any of the absent ones) into its buffer from k of the present ones. Fails
    // (invalid_argument) with fewer than k present or a wanted shard that is present or out of range.
    base::result<void> reconstruct(std::span<std::uint8_t* const> shards,
                                   std::span<const bool> present, std::span<const unsigned> wanted,
                                   std::size_t len) const;

private:
    erasure_code(unsigned k, unsigned m);

    unsigned _k = 0;
    unsigned _m = 0;
    std::vector<std::uint8_t> _matrix;  // (k + m) x k generator, the identity on top
    std::vector<std::uint8_t> _tables;  // ISA-L's expanded tables of its m parity rows
};

}  // namespace fjord::cluster
