#include "cluster/erasure.h"

#include <isa-l/erasure_code.h>

#include <string>

namespace fjord::cluster {

base::result<erasure_code> erasure_code::make(unsigned k, unsigned m) {
    if (k < 1 || m < 1 || k + m > max_stripe_width)
        return base::fail(
            base::errc::invalid_argument,
            "an erasure code needs 1 or more data shards and 1 or more parity shards, " +
                std::to_string(max_stripe_width) + " at most together (got " + std::to_string(k) +
                "+" + std::to_string(m) + ")");
    return erasure_code(k, m);
}

erasure_code::erasure_code(unsigned k, unsigned m)
    : _k(k), _m(m), _matrix((k + m) * k), _tables(32 * k * m) {
    gf_gen_cauchy1_matrix(_matrix.data(), static_cast<int>(k + m), static_cast<int>(k));
    ec_init_tables(static_cast<int>(k), static_cast<int>(m), _matrix.data() + k * k,
                   _tables.data());
}

void erasure_code::encode(std::span<const std::uint8_t* const> data,
                          std::span<std::uint8_t* const> parity, std::size_t len) const {
    // ISA-L takes non-const pointers; it only reads the sources.
    std::vector<std::uint8_t*> sources(_k), outputs(_m);
    for (unsigned i = 0; i < _k; ++i) sources[i] = const_cast<std::uint8_t*>(data[i]);
    for (unsigned i = 0; i < _m; ++i) outputs[i] = parity[i];
    ec_encode_data(static_cast<int>(len), static_cast<int>(_k), static_cast<int>(_m),
                   const_cast<std::uint8_t*>(_tables.data()), sources.data(), outputs.data());
}

base::result<void> erasure_code::reconstruct(std::span<std::uint8_t* const> shards,
                                             std::span<const bool> present,
                                             std::span<const unsigned> wanted,
                                             std::size_t len) const {
    const unsigned n = width();
    if (shards.size() != n || present.size() != n)
        return base::fail(base::errc::invalid_argument,
                          "reconstruct takes every shard of the stripe");
    for (unsigned w : wanted)
        if (w >= n || present[w])
            return base::fail(base::errc::invalid_argument,
                              "shard " + std::to_string(w) + " is not one that is missing");
    // The first k shards present are the sources: the decode matrix is the inverse of their rows.
    std::vector<unsigned> rows;
    for (unsigned i = 0; i < n && rows.size() < _k; ++i)
        if (present[i]) rows.push_back(i);
    if (rows.size() < _k)
        return base::fail(base::errc::invalid_argument,
                          std::to_string(rows.size()) + " shards present, " + std::to_string(_k) +
                              " needed to rebuild");
    if (wanted.empty()) return {};
    std::vector<std::uint8_t> chosen(_k * _k), inverse(_k * _k);
    for (unsigned r = 0; r < _k; ++r)
        for (unsigned c = 0; c < _k; ++c) chosen[r * _k + c] = _matrix[rows[r] * _k + c];
    if (gf_invert_matrix(chosen.data(), inverse.data(), static_cast<int>(_k)) != 0)
        return base::fail(base::errc::internal, "the erasure code's submatrix is singular");
    // A data shard's row is its row of the inverse; a parity shard's is its generator row times it.
    std::vector<std::uint8_t> decode(wanted.size() * _k);
    for (std::size_t j = 0; j < wanted.size(); ++j) {
        unsigned w = wanted[j];
        for (unsigned c = 0; c < _k; ++c) {
            if (w < _k) {
                decode[j * _k + c] = inverse[w * _k + c];
                continue;
            }
            std::uint8_t sum = 0;
            for (unsigned i = 0; i < _k; ++i)
                sum ^= gf_mul(_matrix[w * _k + i], inverse[i * _k + c]);
            decode[j * _k + c] = sum;
        }
    }
    std::vector<std::uint8_t> tables(32 * _k * wanted.size());
    ec_init_tables(static_cast<int>(_k), static_cast<int>(wanted.size()), decode.data(),
                   tables.data());
    std::vector<std::uint8_t*> sources(_k), outputs(wanted.size());
    for (unsigned r = 0; r < _k; ++r) sources[r] = shards[rows[r]];
    for (std::size_t j = 0; j < wanted.size(); ++j) outputs[j] = shards[wanted[j]];
    ec_encode_data(static_cast<int>(len), static_cast<int>(_k), static_cast<int>(wanted.size()),
                   tables.data(), sources.data(), outputs.data());
    return {};
}

}  // namespace fjord::cluster
