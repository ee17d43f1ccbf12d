#include "base/checksum.h"

#include <isa-l/crc.h>

#include <immintrin.h>

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

std::uint64_t crc64nvme_table(const unsigned char* p, std::size_t n, std::uint64_t reg) {
    const auto& t = g_crc64_tables;
    std::uint64_t c = reg;
    while (n >= 8) {
        std::uint64_t word;
        __builtin_memcpy(&word, p, 8);  // little-endian load
        c ^= word;
        c = t[7][c & 0xff] ^ t[6][(c >> 8) & 0xff] ^ t[5][(c >> 16) & 0xff] ^
            t[4][(c >> 24) & 0xff] ^ t[3][(c >> 32) & 0xff] ^ t[2][(c >> 40) & 0xff] ^
            t[1][(c >> 48) & 0xff] ^ t[0][c >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) c = t[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return c;
}

// Carry-less multiplication folding (the method of Intel's "Fast CRC Computation for Generic Polynomials
// Using PCLMULQDQ"): eight 128-bit accumulators each move 1024 bits ahead per step; a 64-bit lane at bit
// distance d from the end is multiplied by x^d mod P. For this reflected CRC the lanes need x^(d-1): the
// constants are reflect(x^1087 mod P), reflect(x^1023 mod P) for the 8-way step and x^191, x^127 for
// folding one accumulator into the next (found and checked against the table version in the unit tests).
// The last 16 bytes and the tail go through the table.
std::uint64_t reflect64(std::uint64_t v) {
    std::uint64_t r = 0;
    for (int i = 0; i < 64; ++i)
        if (v >> i & 1) r |= 1ULL << (63 - i);
    return r;
}

std::uint64_t x_pow_mod_p(unsigned n) {
    std::uint64_t r = 1;
    for (unsigned i = 0; i < n; ++i) {
        std::uint64_t carry = r >> 63;
        r <<= 1;
        if (carry) r ^= 0xAD93D23594C93659ULL;
    }
    return r;
}

struct fold_constants {
    std::uint64_t step_lo, step_hi, one_lo, one_hi;
};
const fold_constants g_fold = {reflect64(x_pow_mod_p(1087)), reflect64(x_pow_mod_p(1023)),
                               reflect64(x_pow_mod_p(191)), reflect64(x_pow_mod_p(127))};
const bool g_has_pclmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");

__attribute__((target("pclmul,sse4.1"))) inline __m128i fold_128(__m128i a, __m128i k,
                                                                 __m128i next) {
    return _mm_xor_si128(
        _mm_xor_si128(_mm_clmulepi64_si128(a, k, 0x00), _mm_clmulepi64_si128(a, k, 0x11)), next);
}

__attribute__((target("pclmul,sse4.1"))) std::uint64_t crc64nvme_fold(const unsigned char* p,
                                                                      std::size_t n,
                                                                      std::uint64_t reg) {
    const __m128i step = _mm_set_epi64x(static_cast<long long>(g_fold.step_hi),
                                        static_cast<long long>(g_fold.step_lo));
    const __m128i one = _mm_set_epi64x(static_cast<long long>(g_fold.one_hi),
                                       static_cast<long long>(g_fold.one_lo));
    __m128i a[8];
    for (int i = 0; i < 8; ++i)
        a[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * i));
    a[0] = _mm_xor_si128(a[0], _mm_set_epi64x(0, static_cast<long long>(reg)));
    p += 128;
    n -= 128;
    while (n >= 128) {
        for (int i = 0; i < 8; ++i)
            a[i] =
                fold_128(a[i], step, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * i)));
        p += 128;
        n -= 128;
    }
    for (int i = 1; i < 8; ++i) a[i] = fold_128(a[i - 1], one, a[i]);
    __m128i last = a[7];
    while (n >= 16) {
        last = fold_128(last, one, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        p += 16;
        n -= 16;
    }
    unsigned char folded[16];
    _mm_storeu_si128(reinterpret_cast<__m128i*>(folded), last);
    return crc64nvme_table(p, n, crc64nvme_table(folded, 16, 0));
}
}  // namespace

std::uint64_t crc64nvme(std::span<const std::byte> data, std::uint64_t crc) {
    const auto* p = reinterpret_cast<const unsigned char*>(data.data());
    if (g_has_pclmul && data.size() >= 256) return ~crc64nvme_fold(p, data.size(), ~crc);
    return ~crc64nvme_table(p, data.size(), ~crc);
}

std::uint64_t crc64nvme_reference(std::span<const std::byte> data, std::uint64_t crc) {
    std::uint64_t c = ~crc;
    for (std::byte b : data) {
        c ^= static_cast<std::uint64_t>(b);
        for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ crc64nvme_poly_reflected : c >> 1;
    }
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
