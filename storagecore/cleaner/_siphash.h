/* SipHash-c-d with a 128-bit output (Aumasson and Bernstein, "SipHash: a fast short-input PRF",
 * and the reference implementation's 128-bit variant), for the offset map's key digests.
 *
 * The cleaner uses SipHash-1-3-128 keyed with a secret drawn for each clean (one per job in
 * Spark): docs/offset-map.md says why a keyed PRF and not MD5. The round counts are parameters
 * so that the test suite can check the 2-4 instance against the reference vectors; the
 * pure-Python reference is storagecore/cleaner/siphash.py.
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
    uint64_t b = (uint64_t)length << 56;
    switch (length & 7) {
    case 7: b |= (uint64_t)data[6] << 48; /* fall through */
    case 6: b |= (uint64_t)data[5] << 40; /* fall through */
    case 5: b |= (uint64_t)data[4] << 32; /* fall through */
    case 4: b |= (uint64_t)data[3] << 24; /* fall through */
    case 3: b |= (uint64_t)data[2] << 16; /* fall through */
    case 2: b |= (uint64_t)data[1] << 8;  /* fall through */
    case 1: b |= (uint64_t)data[0]; break;
    default: break;
    }
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

#endif
