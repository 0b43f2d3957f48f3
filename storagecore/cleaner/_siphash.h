/* SipHash-c-d with a 128-bit output (Aumasson and Bernstein, "SipHash: a fast short-input PRF",
 * and the reference implementation's 128-bit variant), for the offset map's key digests.
 *
 * The cleaner uses SipHash-1-3-128 keyed with a secret drawn for each clean (one per job in
 * Spark): docs/offset-map.md says why a keyed PRF and not MD5. The round counts are parameters
 * so that the test suite can check the 2-4 instance against the reference vectors; the
 * pure-Python reference is storagecore/cleaner/siphash.py. siphash128_x4 digests four keys of
 * one length at once, a lane each of AVX2 registers where the CPU has them (the batch loops group
 * a topic's same-length keys so: half the instructions of four single digests).
 */
#ifndef STORAGECORE_CLEANER_SIPHASH_H
#define STORAGECORE_CLEANER_SIPHASH_H
#include <stddef.h>
#include <stdint.h>

#define SIPHASH_KEY_BYTES 16
#define SIPHASH_OUT_BYTES 16

static inline uint64_t sip_load_le64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static inline void sip_store_le64(uint8_t *p, uint64_t v) {
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    memcpy(p, &v, 8);
}

static inline uint64_t sip_rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

typedef struct {
    uint64_t k0, k1;
} sip_key_t;

static inline sip_key_t sip_key(const uint8_t secret[SIPHASH_KEY_BYTES]) {
    sip_key_t key = {sip_load_le64(secret), sip_load_le64(secret + 8)};
    return key;
}

#define SIP_ROUND                                                                              \
    do {                                                                                       \
        v0 += v1;                                                                              \
        v1 = sip_rotl(v1, 13);                                                                 \
        v1 ^= v0;                                                                              \
        v0 = sip_rotl(v0, 32);                                                                 \
        v2 += v3;                                                                              \
        v3 = sip_rotl(v3, 16);                                                                 \
        v3 ^= v2;                                                                              \
        v0 += v3;                                                                              \
        v3 = sip_rotl(v3, 21);                                                                 \
        v3 ^= v0;                                                                              \
        v2 += v1;                                                                              \
        v1 = sip_rotl(v1, 17);                                                                 \
        v1 ^= v2;                                                                              \
        v2 = sip_rotl(v2, 32);                                                                 \
    } while (0)

/* The last message word: the length in the top byte over the (length % 8) bytes after the
 * whole words, which start at `rest`. */
static inline uint64_t sip_last_word(const uint8_t *rest, size_t length) {
    uint64_t b = (uint64_t)length << 56;
    switch (length & 7) {
    case 7: b |= (uint64_t)rest[6] << 48; /* fall through */
    case 6: b |= (uint64_t)rest[5] << 40; /* fall through */
    case 5: b |= (uint64_t)rest[4] << 32; /* fall through */
    case 4: b |= (uint64_t)rest[3] << 24; /* fall through */
    case 3: b |= (uint64_t)rest[2] << 16; /* fall through */
    case 2: b |= (uint64_t)rest[1] << 8;  /* fall through */
    case 1: b |= (uint64_t)rest[0]; break;
    default: break;
    }
    return b;
}

/* SipHash-c-d-128 of data[0..length) under key, written to out (16 bytes: the two 64-bit
 * halves little-endian, as the reference implementation writes them). */
static inline __attribute__((always_inline)) void siphash128(const uint8_t *data, size_t length,
                                                             sip_key_t key, int c_rounds,
                                                             int d_rounds, uint8_t *out) {
    uint64_t v0 = 0x736f6d6570736575ULL ^ key.k0;
    uint64_t v1 = 0x646f72616e646f6dULL ^ key.k1 ^ 0xee;
    uint64_t v2 = 0x6c7967656e657261ULL ^ key.k0;
    uint64_t v3 = 0x7465646279746573ULL ^ key.k1;
    const uint8_t *end = data + length - (length % 8);
    for (; data != end; data += 8) {
        uint64_t m = sip_load_le64(data);
        v3 ^= m;
        for (int i = 0; i < c_rounds; i++) SIP_ROUND;
        v0 ^= m;
    }
    uint64_t b = sip_last_word(data, length);
    v3 ^= b;
    for (int i = 0; i < c_rounds; i++) SIP_ROUND;
    v0 ^= b;
    v2 ^= 0xee;
    for (int i = 0; i < d_rounds; i++) SIP_ROUND;
    sip_store_le64(out, v0 ^ v1 ^ v2 ^ v3);
    v1 ^= 0xdd;
    for (int i = 0; i < d_rounds; i++) SIP_ROUND;
    sip_store_le64(out + 8, v0 ^ v1 ^ v2 ^ v3);
}

/* ---- four keys at once ------------------------------------------------------------------- */

/* Whether siphash128_x4 runs its AVX2 path (set once by siphash_init; the scalar function four
 * times otherwise). Valgrind's CPU reports AVX2 too, so callgrind counts this path. */
static int sip_avx2;

static inline void siphash_init(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    sip_avx2 = __builtin_cpu_supports("avx2");
#endif
}

#if defined(__x86_64__)
#include <immintrin.h>
#define SIP_VROTL(x, b) \
    _mm256_or_si256(_mm256_slli_epi64((x), (b)), _mm256_srli_epi64((x), 64 - (b)))
/* A rotation by 32 swaps the halves of each 64-bit lane. */
#define SIP_VROT32(x) _mm256_shuffle_epi32((x), _MM_SHUFFLE(2, 3, 0, 1))
#define SIP_VROUND                                                                             \
    do {                                                                                       \
        v0 = _mm256_add_epi64(v0, v1);                                                         \
        v1 = SIP_VROTL(v1, 13);                                                                \
        v1 = _mm256_xor_si256(v1, v0);                                                         \
        v0 = SIP_VROT32(v0);                                                                   \
        v2 = _mm256_add_epi64(v2, v3);                                                         \
        v3 = SIP_VROTL(v3, 16);                                                                \
        v3 = _mm256_xor_si256(v3, v2);                                                         \
        v0 = _mm256_add_epi64(v0, v3);                                                         \
        v3 = SIP_VROTL(v3, 21);                                                                \
        v3 = _mm256_xor_si256(v3, v0);                                                         \
        v2 = _mm256_add_epi64(v2, v1);                                                         \
        v1 = SIP_VROTL(v1, 17);                                                                \
        v1 = _mm256_xor_si256(v1, v2);                                                         \
        v2 = SIP_VROT32(v2);                                                                   \
    } while (0)

/* siphash128 of four messages of the same length, one per 64-bit lane of the AVX2 registers:
 * the same operations in the same order on each lane, so the same digests. */
__attribute__((target("avx2"))) static void siphash128_x4_avx2(
    const uint8_t *const data[4], size_t length, sip_key_t key, int c_rounds, int d_rounds,
    uint8_t *const out[4]) {
    __m256i v0 = _mm256_set1_epi64x((long long)(0x736f6d6570736575ULL ^ key.k0));
    __m256i v1 = _mm256_set1_epi64x((long long)(0x646f72616e646f6dULL ^ key.k1 ^ 0xee));
    __m256i v2 = _mm256_set1_epi64x((long long)(0x6c7967656e657261ULL ^ key.k0));
    __m256i v3 = _mm256_set1_epi64x((long long)(0x7465646279746573ULL ^ key.k1));
    size_t whole = length - (length % 8);
    for (size_t at = 0; at < whole; at += 8) {
        __m256i m = _mm256_set_epi64x(
            (long long)sip_load_le64(data[3] + at), (long long)sip_load_le64(data[2] + at),
            (long long)sip_load_le64(data[1] + at), (long long)sip_load_le64(data[0] + at));
        v3 = _mm256_xor_si256(v3, m);
        for (int i = 0; i < c_rounds; i++) SIP_VROUND;
        v0 = _mm256_xor_si256(v0, m);
    }
    __m256i b = length % 8 == 0 /* the last word is the length alone, in every lane */
                    ? _mm256_set1_epi64x((long long)((uint64_t)length << 56))
                    : _mm256_set_epi64x((long long)sip_last_word(data[3] + whole, length),
                                        (long long)sip_last_word(data[2] + whole, length),
                                        (long long)sip_last_word(data[1] + whole, length),
                                        (long long)sip_last_word(data[0] + whole, length));
    v3 = _mm256_xor_si256(v3, b);
    for (int i = 0; i < c_rounds; i++) SIP_VROUND;
    v0 = _mm256_xor_si256(v0, b);
    v2 = _mm256_xor_si256(v2, _mm256_set1_epi64x(0xee));
    for (int i = 0; i < d_rounds; i++) SIP_VROUND;
    __m256i lo = _mm256_xor_si256(_mm256_xor_si256(v0, v1), _mm256_xor_si256(v2, v3));
    v1 = _mm256_xor_si256(v1, _mm256_set1_epi64x(0xdd));
    for (int i = 0; i < d_rounds; i++) SIP_VROUND;
    __m256i hi = _mm256_xor_si256(_mm256_xor_si256(v0, v1), _mm256_xor_si256(v2, v3));
    /* Each lane's digest is its low then its high half (little-endian words, as
     * sip_store_le64 writes them): lanes 0 and 2, then 1 and 3, paired by the unpacks. */
    __m256i even = _mm256_unpacklo_epi64(lo, hi), odd = _mm256_unpackhi_epi64(lo, hi);
    _mm_storeu_si128((__m128i *)out[0], _mm256_castsi256_si128(even));
    _mm_storeu_si128((__m128i *)out[1], _mm256_castsi256_si128(odd));
    _mm_storeu_si128((__m128i *)out[2], _mm256_extracti128_si256(even, 1));
    _mm_storeu_si128((__m128i *)out[3], _mm256_extracti128_si256(odd, 1));
}
#endif

/* siphash128 of four messages of the same length (data[i] -> out[i]). */
static inline void siphash128_x4(const uint8_t *const data[4], size_t length, sip_key_t key,
                                 int c_rounds, int d_rounds, uint8_t *const out[4]) {
#if defined(__x86_64__)
    if (sip_avx2) {
        siphash128_x4_avx2(data, length, key, c_rounds, d_rounds, out);
        return;
    }
#endif
    for (int lane = 0; lane < 4; lane++) {
        siphash128(data[lane], length, key, c_rounds, d_rounds, out[lane]);
    }
}

#endif
