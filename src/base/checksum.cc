#include "base/checksum.h"

#include <isa-l/crc.h>

#include <array>

namespace fjord::base {

std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t crc) {
    // ISA-L's crc32_iscsi takes and returns the raw (non-inverted) register.
    auto* bytes = reinterpret_cast<unsigned char*>(const_cast<std::byte*>(data.data()));
    return ~crc32_iscsi(bytes, static_cast<int>(data.size()), ~crc);
}

std::uint32_t crc32(std::span<const std::byte> data, std::uint32_t crc) {
    // crc32_gzip_refl inverts on entry and exit itself.
    auto* bytes = reinterpret_cast<const unsigned char*>(data.data());
    return crc32_gzip_refl(crc, bytes, data.size());
}

namespace {
// Reflected CRC-64/NVME polynomial (0xAD93D23594C93659 bit-reversed).
constexpr std::uint64_t crc64nvme_poly_reflected = 0x9A6C9329AC4BC9B5ULL;

using crc64_tables = std::array<std::array<std::uint64_t, 256>, 8>;

constexpr crc64_tables make_crc64_tables() {
    crc64_tables t{};
    for (std::uint64_t i = 0; i < 256; ++i) {
        std::uint64_t c = i;
        for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ crc64nvme_poly_reflected : c >> 1;
        t[0][i] = c;
    }
    for (std::size_t i = 0; i < 256; ++i)
        for (std::size_t s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
    return t;
}
constexpr crc64_tables g_crc64_tables = make_crc64_tables();
}  // namespace

std::uint64_t crc64nvme(std::span<const std::byte> data, std::uint64_t crc) {
    const auto& t = g_crc64_tables;
    std::uint64_t c = ~crc;
    const auto* p = reinterpret_cast<const unsigned char*>(data.data());
    std::size_t n = data.size();
    while (n >= 8) {
        std::uint64_t word;
        __builtin_memcpy(&word, p, 8);  // little-endian load
        c ^= word;
        c = t[7][c & 0xff] ^ t[6][(c >> 8) & 0xff] ^ t[5][(c >> 16) & 0xff] ^ t[4][(c >> 24) & 0xff] ^
            t[3][(c >> 32) & 0xff] ^ t[2][(c >> 40) & 0xff] ^ t[1][(c >> 48) & 0xff] ^ t[0][c >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) c = t[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return ~c;
}

namespace {
// GF(2) matrix method (as zlib's crc32_combine): applying len_b zero bytes to crc_a is a linear map,
// computed by repeated squaring of the one-zero-bit operator.
template <class Word, int Width>
Word gf2_times(const Word* matrix, Word vector) {
    Word sum = 0;
    for (int i = 0; vector != 0 && i < Width; ++i, vector >>= 1)
        if (vector & 1) sum ^= matrix[i];
    return sum;
}

template <class Word, int Width>
void gf2_square(Word* square, const Word* matrix) {
    for (int n = 0; n < Width; ++n) square[n] = gf2_times<Word, Width>(matrix, matrix[n]);
}

template <class Word, int Width>
Word crc_combine(Word crc_a, Word crc_b, std::uint64_t length_b, Word poly_reflected) {
    if (length_b == 0) return crc_a;
    Word even[Width], odd[Width];
    odd[0] = poly_reflected;
    Word row = 1;
    for (int n = 1; n < Width; ++n, row <<= 1) odd[n] = row;
    gf2_square<Word, Width>(even, odd);  // two zero bits
    gf2_square<Word, Width>(odd, even);  // four zero bits
    do {
        gf2_square<Word, Width>(even, odd);
        if (length_b & 1) crc_a = gf2_times<Word, Width>(even, crc_a);
        length_b >>= 1;
        if (length_b == 0) break;
        gf2_square<Word, Width>(odd, even);
        if (length_b & 1) crc_a = gf2_times<Word, Width>(odd, crc_a);
        length_b >>= 1;
    } while (length_b != 0);
    return crc_a ^ crc_b;
}
}  // namespace

std::uint32_t crc32_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t length_b) {
    return crc_combine<std::uint32_t, 32>(crc_a, crc_b, length_b, 0xEDB88320u);
}

std::uint32_t crc32c_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t length_b) {
    return crc_combine<std::uint32_t, 32>(crc_a, crc_b, length_b, 0x82F63B78u);
}

std::uint64_t crc64nvme_combine(std::uint64_t crc_a, std::uint64_t crc_b, std::uint64_t length_b) {
    return crc_combine<std::uint64_t, 64>(crc_a, crc_b, length_b, crc64nvme_poly_reflected);
}

}  // namespace fjord::base
