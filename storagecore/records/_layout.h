/* The v2 record batch layout and the record varints, for the C speed-ups.
 *
 * One copy of storagecore/records/layout.py's positions for both extensions
 * (storagecore.records._native and storagecore._offset_map_native); each module exports them and
 * tests/unit/storagecore/records/test_native_layout.py checks every exported value against
 * layout.py. Also CRC-32C (hardware on x86-64 with SSE 4.2, a table otherwise), checked against
 * the crc32c package.
 */
#ifndef STORAGECORE_RECORDS_LAYOUT_H
#define STORAGECORE_RECORDS_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define MAX_VARINT_BYTES 5
#define MAX_VARLONG_BYTES 10

#define LOG_OVERHEAD 12
#define RECORD_BATCH_OVERHEAD 61
#define BASE_OFFSET_OFFSET 0
#define LENGTH_OFFSET 8
#define PARTITION_LEADER_EPOCH_OFFSET 12
#define MAGIC_OFFSET 16
#define CRC_OFFSET 17
#define ATTRIBUTES_OFFSET 21
#define LAST_OFFSET_DELTA_OFFSET 23
#define BASE_TIMESTAMP_OFFSET 27
#define MAX_TIMESTAMP_OFFSET 35
#define PRODUCER_ID_OFFSET 43
#define PRODUCER_EPOCH_OFFSET 51
#define BASE_SEQUENCE_OFFSET 53
#define RECORDS_COUNT_OFFSET 57
#define CURRENT_MAGIC 2
#define CODEC_MASK 0x07
#define TIMESTAMP_TYPE_MASK 0x08
#define TRANSACTIONAL_FLAG_MASK 0x10
#define CONTROL_FLAG_MASK 0x20
#define DELETE_HORIZON_FLAG_MASK 0x40
#define MIN_DECLARED_BATCH_LENGTH 14

static inline int64_t get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}
static inline int32_t get32(const uint8_t *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
                     p[3]);
}
static inline int16_t get16(const uint8_t *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }
static inline void put64(uint8_t *p, int64_t value) {
    uint64_t v = (uint64_t)value;
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}
static inline void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}
static inline void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

/* Kafka's ByteUtils.readVarint / readVarlong: at most 5 / 10 bytes, bits beyond 32 / 64
 * dropped; 0 on success, -1 on a truncated or overlong encoding (also when *pos >= limit). The
 * same rules as storagecore/records/varint.py. Most varints in a record are one or two bytes:
 * those cases return early (the first byte of a two-byte one has its high bit set, or the
 * one-byte case would have taken it). */
static inline __attribute__((always_inline)) int read_varint(const uint8_t *buf,
                                                             ptrdiff_t *pos, ptrdiff_t limit,
                                                             int64_t *out) {
    if (*pos < limit && !(buf[*pos] & 0x80)) {
        uint32_t b = buf[(*pos)++];
        *out = (int64_t)(int32_t)((b >> 1) ^ (uint32_t)(-(int32_t)(b & 1)));
        return 0;
    }
    if (limit - *pos >= 2 && !(buf[*pos + 1] & 0x80)) { /* two bytes: a record's length */
        uint32_t v = (uint32_t)(buf[*pos] & 0x7F) | ((uint32_t)buf[*pos + 1] << 7);
        *pos += 2;
        *out = (int64_t)(int32_t)((v >> 1) ^ (uint32_t)(-(int32_t)(v & 1)));
        return 0;
    }
    uint32_t value = 0;
    int shift = 0;
    ptrdiff_t start = *pos;
    for (;;) {
        if (*pos >= limit) return -1;
        uint8_t b = buf[(*pos)++];
        value |= (uint32_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) break;
        shift += 7;
        if (*pos - start >= MAX_VARINT_BYTES) return -1;
    }
    *out = (int64_t)(int32_t)((value >> 1) ^ (uint32_t)(-(int32_t)(value & 1)));
    return 0;
}

static inline __attribute__((always_inline)) int read_varlong(const uint8_t *buf,
                                                              ptrdiff_t *pos, ptrdiff_t limit,
                                                              int64_t *out) {
    if (*pos < limit && !(buf[*pos] & 0x80)) {
        uint64_t b = buf[(*pos)++];
        *out = (int64_t)((b >> 1) ^ (uint64_t)(-(int64_t)(b & 1)));
        return 0;
    }
    if (limit - *pos >= 2 && !(buf[*pos + 1] & 0x80)) { /* two bytes: a timestamp delta */
        uint64_t v = (uint64_t)(buf[*pos] & 0x7F) | ((uint64_t)buf[*pos + 1] << 7);
        *pos += 2;
        *out = (int64_t)((v >> 1) ^ (uint64_t)(-(int64_t)(v & 1)));
        return 0;
    }
    uint64_t value = 0;
    int shift = 0;
    ptrdiff_t start = *pos;
    for (;;) {
        if (*pos >= limit) return -1;
        uint8_t b = buf[(*pos)++];
        value |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) break;
        shift += 7;
        if (*pos - start >= MAX_VARLONG_BYTES) return -1;
    }
    *out = (int64_t)((value >> 1) ^ (uint64_t)(-(int64_t)(value & 1)));
    return 0;
}

/* ---- CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) -------------------------------- */

static uint32_t crc32c_table[256];
static int crc32c_hardware;

/* The hardware path runs three streams at once (the crc32 instruction's latency is three times
 * its throughput) over three consecutive blocks and joins their registers: the register after
 * A then B is shift(register after A) ^ (register after B from zero), where shift appends as
 * many zero bytes as B has, a linear map of the 32-bit register kept as four byte tables. */
#define CRC32C_SHORT_BLOCK 256
#define CRC32C_LONG_BLOCK 8192
static uint32_t crc32c_short_shift[4][256];
static uint32_t crc32c_long_shift[4][256];

/* The raw register after `bytes` zero bytes from v (table method, no pre/post inversion). */
static uint32_t crc32c_zeros(uint32_t v, size_t bytes) {
    while (bytes--) v = crc32c_table[v & 0xFF] ^ (v >> 8);
    return v;
}

static inline uint32_t crc32c_shift(const uint32_t tables[4][256], uint32_t v);

/* The tables of the shift by `bytes` zero bytes, from the register after that many zeros from
 * each single bit: by the table method (`shorter` NULL), or (a multiple of the shorter block)
 * by applying the shorter block's shift again and again, since appending zeros composes
 * (bytes / CRC32C_SHORT_BLOCK applications instead of `bytes` table steps per bit: the long
 * tables cost 1.3M instructions at every import of the extension otherwise). */
static void crc32c_shift_tables(size_t bytes, uint32_t tables[4][256],
                                const uint32_t shorter[4][256], size_t shorter_bytes) {
    uint32_t basis[32];
    for (int bit = 0; bit < 32; bit++) {
        if (shorter == NULL) {
            basis[bit] = crc32c_zeros(1u << bit, bytes);
        } else {
            uint32_t v = 1u << bit;
            for (size_t done = 0; done < bytes; done += shorter_bytes) v = crc32c_shift(shorter, v);
            basis[bit] = v;
        }
    }
    for (int k = 0; k < 4; k++) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t v = 0;
            for (int bit = 0; bit < 8; bit++) {
                if (i >> bit & 1) v ^= basis[8 * k + bit];
            }
            tables[k][i] = v;
        }
    }
}

static inline uint32_t crc32c_shift(const uint32_t tables[4][256], uint32_t v) {
    return tables[0][v & 0xFF] ^ tables[1][(v >> 8) & 0xFF] ^ tables[2][(v >> 16) & 0xFF] ^
           tables[3][v >> 24];
}

static inline void crc32c_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc32c_table[i] = c;
    }
    crc32c_shift_tables(CRC32C_SHORT_BLOCK, crc32c_short_shift, NULL, 0);
    _Static_assert(CRC32C_LONG_BLOCK % CRC32C_SHORT_BLOCK == 0, "long = short blocks");
    crc32c_shift_tables(CRC32C_LONG_BLOCK, crc32c_long_shift, crc32c_short_shift,
                        CRC32C_SHORT_BLOCK);
#if defined(__x86_64__)
    __builtin_cpu_init();
    crc32c_hardware = __builtin_cpu_supports("sse4.2");
#endif
}

#if defined(__x86_64__)
#include <nmmintrin.h>
/* Three streams over three consecutive blocks of `block` bytes (a multiple of 8) from *p,
 * joined into crc; *p moves past them. */
__attribute__((target("sse4.2"))) static inline uint64_t crc32c_sse42_triple(
    uint64_t crc, const uint8_t **p, size_t block, const uint32_t shift[4][256]) {
    const uint8_t *a = *p, *end = a + block;
    uint64_t crc1 = 0, crc2 = 0;
    /* Four steps per loop: the loop's own add, compare and branch were a third of its
     * instructions (a block is a multiple of 32 bytes: CRC32C_SHORT_BLOCK and _LONG_BLOCK). */
#pragma GCC unroll 4
    do {
        uint64_t w0, w1, w2;
        memcpy(&w0, a, 8);
        memcpy(&w1, a + block, 8);
        memcpy(&w2, a + 2 * block, 8);
        crc = _mm_crc32_u64(crc, w0);
        crc1 = _mm_crc32_u64(crc1, w1);
        crc2 = _mm_crc32_u64(crc2, w2);
        a += 8;
    } while (a < end);
    crc = crc32c_shift(shift, (uint32_t)crc) ^ (uint32_t)crc1;
    crc = crc32c_shift(shift, (uint32_t)crc) ^ (uint32_t)crc2;
    *p += 3 * block;
    return crc;
}

__attribute__((target("sse4.2"))) static inline uint32_t crc32c_sse42(const uint8_t *p, size_t n) {
    uint64_t crc = 0xFFFFFFFFu;
    for (; n >= 3 * CRC32C_LONG_BLOCK; n -= 3 * CRC32C_LONG_BLOCK) {
        crc = crc32c_sse42_triple(crc, &p, CRC32C_LONG_BLOCK, crc32c_long_shift);
    }
    for (; n >= 3 * CRC32C_SHORT_BLOCK; n -= 3 * CRC32C_SHORT_BLOCK) {
        crc = crc32c_sse42_triple(crc, &p, CRC32C_SHORT_BLOCK, crc32c_short_shift);
    }
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        crc = _mm_crc32_u64(crc, word);
    }
    uint32_t c = (uint32_t)crc;
    for (; n > 0; n--) c = _mm_crc32_u8(c, *p++);
    return ~c;
}
#endif

/* CRC-32C of p[0..n), the checksum of a v2 batch (attributes to end). */
static inline uint32_t crc32c(const uint8_t *p, size_t n) {
#if defined(__x86_64__)
    if (crc32c_hardware) return crc32c_sse42(p, n);
#endif
    uint32_t c = 0xFFFFFFFFu;
    while (n--) c = crc32c_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return ~c;
}

/* Export every constant above under layout.py's name, for the test that compares them.
 * Include Python.h before this header. */
static inline int add_layout_constants(PyObject *m) {
    static const struct {
        const char *name;
        long value;
    } constants[] = {
        {"MAX_VARINT_BYTES", MAX_VARINT_BYTES},
        {"MAX_VARLONG_BYTES", MAX_VARLONG_BYTES},
        {"LOG_OVERHEAD", LOG_OVERHEAD},
        {"RECORD_BATCH_OVERHEAD", RECORD_BATCH_OVERHEAD},
        {"BASE_OFFSET_OFFSET", BASE_OFFSET_OFFSET},
        {"LENGTH_OFFSET", LENGTH_OFFSET},
        {"PARTITION_LEADER_EPOCH_OFFSET", PARTITION_LEADER_EPOCH_OFFSET},
        {"MAGIC_OFFSET", MAGIC_OFFSET},
        {"CRC_OFFSET", CRC_OFFSET},
        {"ATTRIBUTES_OFFSET", ATTRIBUTES_OFFSET},
        {"LAST_OFFSET_DELTA_OFFSET", LAST_OFFSET_DELTA_OFFSET},
        {"BASE_TIMESTAMP_OFFSET", BASE_TIMESTAMP_OFFSET},
        {"MAX_TIMESTAMP_OFFSET", MAX_TIMESTAMP_OFFSET},
        {"PRODUCER_ID_OFFSET", PRODUCER_ID_OFFSET},
        {"PRODUCER_EPOCH_OFFSET", PRODUCER_EPOCH_OFFSET},
        {"BASE_SEQUENCE_OFFSET", BASE_SEQUENCE_OFFSET},
        {"RECORDS_COUNT_OFFSET", RECORDS_COUNT_OFFSET},
        {"CURRENT_MAGIC", CURRENT_MAGIC},
        {"COMPRESSION_CODEC_MASK", CODEC_MASK},
        {"TIMESTAMP_TYPE_MASK", TIMESTAMP_TYPE_MASK},
        {"TRANSACTIONAL_FLAG_MASK", TRANSACTIONAL_FLAG_MASK},
        {"CONTROL_FLAG_MASK", CONTROL_FLAG_MASK},
        {"DELETE_HORIZON_FLAG_MASK", DELETE_HORIZON_FLAG_MASK},
        {"MIN_DECLARED_BATCH_LENGTH", MIN_DECLARED_BATCH_LENGTH},
    };
    for (size_t i = 0; i < sizeof(constants) / sizeof(constants[0]); i++) {
        if (PyModule_AddIntConstant(m, constants[i].name, constants[i].value) < 0) return -1;
    }
    return 0;
}

#endif
