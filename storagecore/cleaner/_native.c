/* Native fast path of the cleaner's per-record work: key digests, offset map probes, record
 * retention and the re-encoding of a batch's kept records.
 *
 * The reference is pure Python: storagecore/cleaner/offset_map.py (the map: MD5 via hashlib, Kafka's
 * probe sequence) and storagecore/cleaner/cleaner.py (Cleaner.build_offset_map and
 * Cleaner._filter_batch, which decode every record with storagecore.records.batch). These
 * functions take over only what that reference would do without raising, and produce the
 * same map contents, the same decisions and the same bytes; for anything else (a framing
 * problem, a non-ASCII header key, an offset or timestamp that overflows, offset deltas that
 * do not increase) they return None before changing anything, and the caller runs the
 * reference on that batch, which raises its usual error. tests/unit/storagecore/
 * test_offset_map_native.py checks the two paths against each other, byte for byte.
 *
 * The map is the SkimpyOffsetMap's bytearray: slots of 24 bytes (16-byte MD5 of the key, then
 * the offset as a big-endian int64), an all-zero slot is empty. Probing is Kafka's: attempt i
 * reads the big-endian int32 at byte min(i, 12) of the digest plus max(0, i - 12), wraps like a
 * Java int, Kafka's Utils.abs (MIN_VALUE -> 0), modulo the slot count.
 *
 * The GIL is released while records are walked, so cleaner threads run in parallel.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../records/_layout.h"

#define HASH_BYTES 16
#define ENTRY_BYTES 24
/* The smallest well-framed record: length, attributes, timestamp delta, offset delta, key
 * length, value length and header count, one byte each. */
#define MIN_RECORD_BYTES 7

/* ---- MD5 (RFC 1321) ---------------------------------------------------------------------- */

/* floor(abs(sin(i + 1)) * 2^32), RFC 1321 section 3.4. */
static const uint32_t MD5_K[64] = {
    0xd76aa478u, 0xe8c7b756u, 0x242070dbu, 0xc1bdceeeu,
    0xf57c0fafu, 0x4787c62au, 0xa8304613u, 0xfd469501u,
    0x698098d8u, 0x8b44f7afu, 0xffff5bb1u, 0x895cd7beu,
    0x6b901122u, 0xfd987193u, 0xa679438eu, 0x49b40821u,
    0xf61e2562u, 0xc040b340u, 0x265e5a51u, 0xe9b6c7aau,
    0xd62f105du, 0x02441453u, 0xd8a1e681u, 0xe7d3fbc8u,
    0x21e1cde6u, 0xc33707d6u, 0xf4d50d87u, 0x455a14edu,
    0xa9e3e905u, 0xfcefa3f8u, 0x676f02d9u, 0x8d2a4c8au,
    0xfffa3942u, 0x8771f681u, 0x6d9d6122u, 0xfde5380cu,
    0xa4beea44u, 0x4bdecfa9u, 0xf6bb4b60u, 0xbebfbc70u,
    0x289b7ec6u, 0xeaa127fau, 0xd4ef3085u, 0x04881d05u,
    0xd9d4d039u, 0xe6db99e5u, 0x1fa27cf8u, 0xc4ac5665u,
    0xf4292244u, 0x432aff97u, 0xab9423a7u, 0xfc93a039u,
    0x655b59c3u, 0x8f0ccc92u, 0xffeff47du, 0x85845dd1u,
    0x6fa87e4fu, 0xfe2ce6e0u, 0xa3014314u, 0x4e0811a1u,
    0xf7537e82u, 0xbd3af235u, 0x2ad7d2bbu, 0xeb86d391u,
};

/* Per-round left rotations, RFC 1321 section 3.4. */
static const uint8_t MD5_S[16] = {7, 12, 17, 22, 5, 9, 14, 20, 4, 11, 16, 23, 6, 10, 15, 21};

static inline uint32_t rotl32(uint32_t x, int c) { return (x << c) | (x >> (32 - c)); }

static inline uint32_t load_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void store_le32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static void md5_block(uint32_t state[4], const uint8_t block[64]) {
    uint32_t m[16];
    for (int i = 0; i < 16; i++) m[i] = load_le32(block + 4 * i);
    uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
#pragma GCC unroll 64
    for (int i = 0; i < 64; i++) {
        uint32_t f;
        int g;
        if (i < 16) {
            f = (b & c) | (~b & d);
            g = i;
        } else if (i < 32) {
            f = (d & b) | (~d & c);
            g = (5 * i + 1) & 15;
        } else if (i < 48) {
            f = b ^ c ^ d;
            g = (3 * i + 5) & 15;
        } else {
            f = c ^ (b | ~d);
            g = (7 * i) & 15;
        }
        uint32_t rotated = rotl32(a + f + MD5_K[i] + m[g], MD5_S[(i >> 4) * 4 + (i & 3)]);
        a = d;
        d = c;
        c = b;
        b = b + rotated;
    }
    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
}

static void md5(const uint8_t *data, size_t length, uint8_t digest[HASH_BYTES]) {
    uint32_t state[4] = {0x67452301u, 0xefcdab89u, 0x98badcfeu, 0x10325476u};
    size_t full = length & ~(size_t)63;
    for (size_t i = 0; i < full; i += 64) md5_block(state, data + i);
    /* The tail, the 0x80 byte, zero padding and the bit length: one or two blocks. */
    uint8_t tail[128] = {0};
    size_t rest = length - full;
    memcpy(tail, data + full, rest);
    tail[rest] = 0x80;
    size_t tail_bytes = rest < 56 ? 64 : 128;
    uint64_t bits = (uint64_t)length << 3;
    for (int i = 0; i < 8; i++) tail[tail_bytes - 8 + i] = (uint8_t)(bits >> (8 * i));
    md5_block(state, tail);
    if (tail_bytes == 128) md5_block(state, tail + 64);
    for (int i = 0; i < 4; i++) store_le32(digest + 4 * i, state[i]);
}

#define MD5_LANES 8
#define MD5_ONE_BLOCK_BYTES 55

/* MD5_LANES messages of at most MD5_ONE_BLOCK_BYTES each (one padded block), hashed side by
 * side: MD5 is one long dependency chain per message, so independent lanes fill the pipeline
 * and the compiler vectorises them (about three times the throughput of one at a time). */
static void md5_lanes(const uint8_t *const data[MD5_LANES], const size_t length[MD5_LANES],
                      uint8_t digest[MD5_LANES][HASH_BYTES]) {
    uint32_t m[16][MD5_LANES];
    for (int l = 0; l < MD5_LANES; l++) {
        uint8_t block[64] = {0};
        memcpy(block, data[l], length[l]);
        block[length[l]] = 0x80;
        uint64_t bits = (uint64_t)length[l] << 3;
        for (int i = 0; i < 8; i++) block[56 + i] = (uint8_t)(bits >> (8 * i));
        for (int w = 0; w < 16; w++) m[w][l] = load_le32(block + 4 * w);
    }
    uint32_t a[MD5_LANES], b[MD5_LANES], c[MD5_LANES], d[MD5_LANES];
    for (int l = 0; l < MD5_LANES; l++) {
        a[l] = 0x67452301u;
        b[l] = 0xefcdab89u;
        c[l] = 0x98badcfeu;
        d[l] = 0x10325476u;
    }
#pragma GCC unroll 64
    for (int i = 0; i < 64; i++) {
        int g = i < 16 ? i : i < 32 ? (5 * i + 1) & 15 : i < 48 ? (3 * i + 5) & 15 : (7 * i) & 15;
        int s = MD5_S[(i >> 4) * 4 + (i & 3)];
        for (int l = 0; l < MD5_LANES; l++) {
            uint32_t f = i < 16 ? (b[l] & c[l]) | (~b[l] & d[l])
                       : i < 32 ? (d[l] & b[l]) | (~d[l] & c[l])
                       : i < 48 ? b[l] ^ c[l] ^ d[l]
                                : c[l] ^ (b[l] | ~d[l]);
            uint32_t x = a[l] + f + MD5_K[i] + m[g][l];
            uint32_t rotated = (x << s) | (x >> (32 - s));
            a[l] = d[l];
            d[l] = c[l];
            c[l] = b[l];
            b[l] = b[l] + rotated;
        }
    }
    for (int l = 0; l < MD5_LANES; l++) {
        store_le32(digest[l], a[l] + 0x67452301u);
        store_le32(digest[l] + 4, b[l] + 0xefcdab89u);
        store_le32(digest[l] + 8, c[l] + 0x98badcfeu);
        store_le32(digest[l] + 12, d[l] + 0x10325476u);
    }
}
/* ---- the offset map ---------------------------------------------------------------------- */

typedef struct {
    uint8_t *table;
    Py_ssize_t slots;
    unsigned long long lookups, probes;
} offset_map_t;

static inline Py_ssize_t slot_of(const uint8_t *digest, Py_ssize_t slots, Py_ssize_t attempt) {
    Py_ssize_t window = attempt < HASH_BYTES - 4 ? attempt : HASH_BYTES - 4;
    uint32_t word = (uint32_t)digest[window] << 24 | (uint32_t)digest[window + 1] << 16 |
                    (uint32_t)digest[window + 2] << 8 | (uint32_t)digest[window + 3];
    uint32_t linear = attempt > HASH_BYTES - 4 ? (uint32_t)(attempt - (HASH_BYTES - 4)) : 0;
    int32_t probe = (int32_t)(word + linear); /* Java int arithmetic wraps */
    int64_t magnitude = probe == INT32_MIN ? 0 : (probe < 0 ? -(int64_t)probe : probe);
    return (Py_ssize_t)(magnitude % slots);
}

static const uint8_t EMPTY_ENTRY[ENTRY_BYTES] = {0};

/* Byte position of digest's slot (*found = 1) or of the first empty slot on its probe path
 * (*found = 0); -1 when neither exists (a full map). Same bound as the reference. */
static Py_ssize_t map_find(offset_map_t *map, const uint8_t *digest, int *found) {
    map->lookups++;
    Py_ssize_t attempts = map->slots + HASH_BYTES;
    for (Py_ssize_t attempt = 0; attempt < attempts; attempt++) {
        Py_ssize_t position = slot_of(digest, map->slots, attempt) * ENTRY_BYTES;
        map->probes++;
        const uint8_t *entry = map->table + position;
        if (memcmp(entry, digest, HASH_BYTES) == 0) {
            *found = 1;
            return position;
        }
        if (memcmp(entry, EMPTY_ENTRY, ENTRY_BYTES) == 0) {
            *found = 0;
            return position;
        }
    }
    *found = 0;
    return -1;
}

static int64_t map_get(offset_map_t *map, const uint8_t *digest) {
    int found;
    Py_ssize_t position = map_find(map, digest, &found);
    return found ? get64(map->table + position + HASH_BYTES) : -1;
}

/* ---- record framing ---------------------------------------------------------------------- */

/* One record of a payload, as the reference decoder would see it. */
typedef struct {
    int64_t offset_delta;
    int64_t offset;    /* base offset + offset delta */
    int64_t timestamp; /* resolved: base timestamp + delta, or the LogAppendTime */
    const uint8_t *key;
    int64_t key_length; /* < 0: null key */
    const uint8_t *value;
    int64_t value_length; /* < 0: null value (a tombstone) */
    const uint8_t *headers; /* just after the header count */
    int64_t header_count;
    Py_ssize_t headers_bytes;
    int wanted; /* whether the pass needs the key's digest */
    uint8_t digest[HASH_BYTES];
} record_t;

typedef struct {
    int64_t base_offset, base_timestamp;
    int log_append; /* LogAppendTime batch: every record's timestamp is log_append_time */
    int64_t log_append_time;
} batch_info_t;

/* Fill records[0..count) from an uncompressed payload. 0 when the reference decoder would
 * accept it (and every header key is ASCII, so that its str round trip is byte-exact); -1
 * otherwise. */
static int parse_records(const uint8_t *buf, Py_ssize_t end, Py_ssize_t count,
                         const batch_info_t *info, record_t *records) {
    Py_ssize_t pos = 0;
    for (Py_ssize_t index = 0; index < count; index++) {
        record_t *r = &records[index];
        int64_t length, ts_delta;
        if (read_varint(buf, &pos, end, &length) < 0) return -1;
        if (length < 0 || length > end - pos) return -1;
        Py_ssize_t body_end = pos + (Py_ssize_t)length;
        pos += 1; /* attributes, unused; read_varlong fails if this passed body_end */
        if (read_varlong(buf, &pos, body_end, &ts_delta) < 0) return -1;
        if (read_varint(buf, &pos, body_end, &r->offset_delta) < 0) return -1;
        if (__builtin_add_overflow(info->base_offset, r->offset_delta, &r->offset)) return -1;
        if (info->log_append) {
            r->timestamp = info->log_append_time;
        } else if (__builtin_add_overflow(info->base_timestamp, ts_delta, &r->timestamp)) {
            return -1;
        }
        if (read_varint(buf, &pos, body_end, &r->key_length) < 0) return -1;
        r->key = buf + pos;
        if (r->key_length >= 0) {
            if (r->key_length > body_end - pos) return -1;
            pos += (Py_ssize_t)r->key_length;
        }
        if (read_varint(buf, &pos, body_end, &r->value_length) < 0) return -1;
        r->value = buf + pos;
        if (r->value_length >= 0) {
            if (r->value_length > body_end - pos) return -1;
            pos += (Py_ssize_t)r->value_length;
        }
        if (read_varint(buf, &pos, body_end, &r->header_count) < 0) return -1;
        if (r->header_count < 0) return -1;
        r->headers = buf + pos;
        Py_ssize_t headers_start = pos;
        for (int64_t h = 0; h < r->header_count; h++) {
            int64_t key_length, value_length;
            if (read_varint(buf, &pos, body_end, &key_length) < 0) return -1;
            if (key_length < 0 || key_length > body_end - pos) return -1;
            for (Py_ssize_t i = 0; i < (Py_ssize_t)key_length; i++) {
                if (buf[pos + i] & 0x80) return -1;
            }
            pos += (Py_ssize_t)key_length;
            if (read_varint(buf, &pos, body_end, &value_length) < 0) return -1;
            if (value_length >= 0) {
                if (value_length > body_end - pos) return -1;
                pos += (Py_ssize_t)value_length;
            }
        }
        r->headers_bytes = pos - headers_start;
        if (pos != body_end) return -1;
    }
    return pos == end ? 0 : -1;
}

/* ---- digests and probes, a batch at a time ----------------------------------------------- */

/* The digest of every wanted record's key: short keys MD5_LANES at a time, the rest (and a
 * remainder too small to be worth a lane set) one by one. Returns the number of wanted
 * records, whose indexes are written to wanted[]. */
static Py_ssize_t digest_keys(record_t *records, Py_ssize_t count, Py_ssize_t *wanted) {
    const uint8_t *data[MD5_LANES];
    size_t length[MD5_LANES];
    record_t *owner[MD5_LANES];
    uint8_t out[MD5_LANES][HASH_BYTES];
    int lanes = 0;
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        record_t *r = &records[i];
        if (!r->wanted) continue;
        wanted[n++] = i;
        if (r->key_length > MD5_ONE_BLOCK_BYTES) {
            md5(r->key, (size_t)r->key_length, r->digest);
            continue;
        }
        data[lanes] = r->key;
        length[lanes] = (size_t)r->key_length;
        owner[lanes++] = r;
        if (lanes == MD5_LANES) {
            md5_lanes(data, length, out);
            for (int l = 0; l < MD5_LANES; l++) memcpy(owner[l]->digest, out[l], HASH_BYTES);
            lanes = 0;
        }
    }
    if (lanes > 2) {
        for (int l = lanes; l < MD5_LANES; l++) {
            data[l] = data[0];
            length[l] = length[0];
        }
        md5_lanes(data, length, out);
        for (int l = 0; l < lanes; l++) memcpy(owner[l]->digest, out[l], HASH_BYTES);
    } else {
        for (int l = 0; l < lanes; l++) md5(data[l], length[l], owner[l]->digest);
    }
    return n;
}

/* How many wanted records ahead the first slot is prefetched: the map is large and its slots
 * are visited at random, so each probe would otherwise wait for memory. */
#define PREFETCH_DISTANCE 16

static inline void prefetch_slot(const offset_map_t *map, const record_t *records,
                                 const Py_ssize_t *wanted, Py_ssize_t n, Py_ssize_t k) {
    if (k < n) {
        const uint8_t *digest = records[wanted[k]].digest;
        __builtin_prefetch(map->table + slot_of(digest, map->slots, 0) * ENTRY_BYTES);
    }
}

/* ---- encoding kept records --------------------------------------------------------------- */

static inline Py_ssize_t unsigned_varint_size(uint64_t n) {
    Py_ssize_t size = 1;
    while (n >= 0x80) {
        n >>= 7;
        size++;
    }
    return size;
}

static inline uint64_t zigzag32(int64_t v) {
    int32_t x = (int32_t)v;
    return (uint32_t)(((uint32_t)x << 1) ^ (uint32_t)(x >> 31));
}

static inline uint64_t zigzag64(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }

static inline uint8_t *put_unsigned(uint8_t *out, uint64_t n) {
    while (n >= 0x80) {
        *out++ = (uint8_t)((n & 0x7F) | 0x80);
        n >>= 7;
    }
    *out++ = (uint8_t)n;
    return out;
}

/* Bytes of a field written as a length (-1 for null) and the bytes themselves. */
static inline Py_ssize_t field_size(int64_t length) {
    return length < 0 ? 1 : unsigned_varint_size(zigzag32(length)) + (Py_ssize_t)length;
}

static inline uint8_t *put_field(uint8_t *out, const uint8_t *data, int64_t length) {
    if (length < 0) return put_unsigned(out, zigzag32(-1));
    out = put_unsigned(out, zigzag32(length));
    memcpy(out, data, (size_t)length);
    return out + length;
}

/* The headers of a parsed record re-encoded with minimal varints, as encode_record does. */
static Py_ssize_t headers_size(const record_t *r) {
    Py_ssize_t size = unsigned_varint_size(zigzag32(r->header_count));
    Py_ssize_t pos = 0;
    int64_t length = 0;
    for (int64_t h = 0; h < r->header_count; h++) {
        for (int field = 0; field < 2; field++) {
            read_varint(r->headers, &pos, r->headers_bytes, &length); /* parsed before */
            size += field_size(length);
            if (length > 0) pos += (Py_ssize_t)length;
        }
    }
    return size;
}

static uint8_t *put_headers(uint8_t *out, const record_t *r) {
    out = put_unsigned(out, zigzag32(r->header_count));
    Py_ssize_t pos = 0;
    int64_t length = 0;
    for (int64_t h = 0; h < r->header_count; h++) {
        for (int field = 0; field < 2; field++) {
            read_varint(r->headers, &pos, r->headers_bytes, &length);
            out = put_field(out, r->headers + pos, length);
            if (length > 0) pos += (Py_ssize_t)length;
        }
    }
    return out;
}

/* Upper bound of one record's re-encoding: minimal varints never exceed the originals, except
 * the timestamp delta (up to 10 bytes) and the length prefix (up to 5). */
#define REENCODE_SLACK_BYTES 16

/* encode_record(offset_delta, timestamp_delta, key, value, headers) with its length prefix. */
static uint8_t *put_record(uint8_t *out, const record_t *r, int64_t timestamp_delta) {
    uint64_t ts = zigzag64(timestamp_delta), od = zigzag32(r->offset_delta);
    Py_ssize_t body = 1 + unsigned_varint_size(ts) + unsigned_varint_size(od) +
                      field_size(r->key_length) + field_size(r->value_length) + headers_size(r);
    out = put_unsigned(out, zigzag32(body));
    *out++ = 0; /* attributes */
    out = put_unsigned(out, ts);
    out = put_unsigned(out, od);
    out = put_field(out, r->key, r->key_length);
    out = put_field(out, r->value, r->value_length);
    return put_headers(out, r);
}

/* ---- Python entry points ----------------------------------------------------------------- */

static PyObject *md5_digest(PyObject *self, PyObject *args) {
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "y*", &data)) return NULL;
    uint8_t digest[HASH_BYTES];
    md5((const uint8_t *)data.buf, (size_t)data.len, digest);
    PyBuffer_Release(&data);
    return PyBytes_FromStringAndSize((const char *)digest, HASH_BYTES);
}

/* Shared argument checks; 0 on success with both buffers held, -1 with an exception set. */
static int open_map(Py_buffer *table, Py_ssize_t slots, offset_map_t *map) {
    if (slots < 1 || table->len != slots * ENTRY_BYTES) {
        PyErr_Format(PyExc_ValueError, "offset map table of %zd bytes does not hold %zd slots",
                     table->len, slots);
        return -1;
    }
    map->table = (uint8_t *)table->buf;
    map->slots = slots;
    map->lookups = 0;
    map->probes = 0;
    return 0;
}

static record_t *alloc_records(Py_ssize_t count) {
    return (record_t *)PyMem_RawMalloc((size_t)(count > 0 ? count : 1) * sizeof(record_t));
}

static Py_ssize_t *alloc_indexes(Py_ssize_t count) {
    return (Py_ssize_t *)PyMem_RawMalloc((size_t)(count > 0 ? count : 1) * sizeof(Py_ssize_t));
}

/* The header fields the cleaner's record work reads, from a batch the caller validated (size,
 * magic, CRC: RecordBatch.validate). The records are `payload` when given (a compressed batch,
 * decompressed by the caller), else the bytes after the header. -1 (with an exception) when the
 * buffer cannot be a batch. */
typedef struct {
    batch_info_t info;
    int attributes, has_horizon;
    Py_ssize_t count;
    int64_t last_offset_delta, max_timestamp;
    const uint8_t *records;
    Py_ssize_t records_bytes;
} batch_view_t;

static int view_batch(const Py_buffer *batch, const Py_buffer *payload, batch_view_t *view) {
    const uint8_t *b = (const uint8_t *)batch->buf;
    if (batch->len < RECORD_BATCH_OVERHEAD) {
        PyErr_Format(PyExc_ValueError, "record batch of %zd bytes is smaller than its header",
                     batch->len);
        return -1;
    }
    view->attributes = get16(b + ATTRIBUTES_OFFSET);
    view->has_horizon = (view->attributes & DELETE_HORIZON_FLAG_MASK) != 0;
    view->info.base_offset = get64(b + BASE_OFFSET_OFFSET);
    view->info.base_timestamp = get64(b + BASE_TIMESTAMP_OFFSET);
    view->max_timestamp = get64(b + MAX_TIMESTAMP_OFFSET);
    view->info.log_append = (view->attributes & TIMESTAMP_TYPE_MASK) != 0;
    view->info.log_append_time = view->max_timestamp;
    view->count = get32(b + RECORDS_COUNT_OFFSET);
    view->last_offset_delta = get32(b + LAST_OFFSET_DELTA_OFFSET);
    if (payload->buf != NULL) {
        view->records = (const uint8_t *)payload->buf;
        view->records_bytes = payload->len;
    } else {
        view->records = b + RECORD_BATCH_OVERHEAD;
        view->records_bytes = batch->len - RECORD_BATCH_OVERHEAD;
    }
    return 0;
}

/* Whether `count` records could fill `bytes` (each takes at least MIN_RECORD_BYTES). */
static inline int plausible_count(Py_ssize_t count, Py_ssize_t bytes) {
    return count >= 0 && count <= bytes / MIN_RECORD_BYTES + 1;
}

/* put_keys(table, slots, size, capacity, batch, payload, start)
 *   -> (size, puts, last_put_offset, walked, full, lookups, probes) | None
 *
 * Cleaner.build_offset_map's loop over one data batch (payload: its decompressed records, or
 * None when it is uncompressed): every record with a key and an offset >= start is put
 * (digest -> offset), but first, when size has reached capacity, the walk stops with full =
 * True; walked counts the records walked before that. Nothing is changed when the records are
 * declined (None). */
static PyObject *put_keys(PyObject *self, PyObject *args) {
    Py_buffer table, batch, payload = {0};
    Py_ssize_t slots, size, capacity;
    long long start;
    if (!PyArg_ParseTuple(args, "w*nnny*z*L", &table, &slots, &size, &capacity, &batch,
                          &payload, &start))
        return NULL;
    PyObject *result = NULL;
    record_t *records = NULL;
    Py_ssize_t *wanted = NULL;
    offset_map_t map;
    batch_view_t view;
    if (open_map(&table, slots, &map) < 0 || view_batch(&batch, &payload, &view) < 0) goto done;
    Py_ssize_t count = view.count;
    if (!plausible_count(count, view.records_bytes)) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    records = alloc_records(count);
    wanted = alloc_indexes(count);
    if (records == NULL || wanted == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int parsed, full = 0, overfull = 0;
    Py_ssize_t walked = 0, puts = 0;
    int64_t last_put = -1;
    Py_BEGIN_ALLOW_THREADS
    parsed = parse_records(view.records, view.records_bytes, count, &view.info, records);
    if (parsed == 0) {
        for (Py_ssize_t i = 0; i < count; i++) {
            records[i].wanted = records[i].key_length >= 0 && records[i].offset >= start;
        }
        Py_ssize_t n = digest_keys(records, count, wanted), k = 0;
        for (Py_ssize_t p = 0; p < PREFETCH_DISTANCE; p++) prefetch_slot(&map, records, wanted, n, p);
        for (Py_ssize_t i = 0; i < count; i++) {
            const record_t *r = &records[i];
            if (r->wanted) {
                prefetch_slot(&map, records, wanted, n, k++ + PREFETCH_DISTANCE);
                if (size >= capacity) {
                    full = 1;
                    break;
                }
                int found;
                Py_ssize_t position = map_find(&map, r->digest, &found);
                if (!found) {
                    if (position < 0 || size >= slots) {
                        overfull = 1;
                        break;
                    }
                    memcpy(map.table + position, r->digest, HASH_BYTES);
                    size++;
                }
                put64(map.table + position + HASH_BYTES, r->offset);
                puts++;
                last_put = r->offset;
            }
            walked++;
        }
    }
    Py_END_ALLOW_THREADS
    if (overfull) {
        PyErr_SetString(PyExc_AssertionError, "put into a full offset map");
    } else if (parsed < 0) {
        result = Py_NewRef(Py_None);
    } else {
        result = Py_BuildValue("nnLnOKK", size, puts, (long long)last_put, walked,
                               full ? Py_True : Py_False, map.lookups, map.probes);
    }
done:
    PyMem_RawFree(records);
    PyMem_RawFree(wanted);
    PyBuffer_Release(&table);
    PyBuffer_Release(&batch);
    if (payload.buf != NULL) PyBuffer_Release(&payload);
    return result;
}

/* filter_records(table, slots, latest_offset, batch, payload, now_ms, new_horizon_ms)
 *   -> (kept, invalid, contains_tombstones, rebuilt, max_timestamp, base_timestamp, lookups,
 *       probes) | None
 *
 * Cleaner._retain_record over every record of one data batch that is not discarded as a
 * whole, then what rebuild_batch would write. rebuilt is None when nothing was kept or when
 * the batch is copied verbatim (all kept and no horizon to stamp); otherwise, for an
 * uncompressed batch (payload None), the whole rebuilt batch, header and CRC included; for a
 * compressed one, the uncompressed kept records encoded against base_timestamp, for the caller
 * to compress and frame. A tombstone survives while now_ms is below the batch's delete horizon;
 * a batch without one that keeps a tombstone gets new_horizon_ms. */
static PyObject *filter_records(PyObject *self, PyObject *args) {
    Py_buffer table, batch, payload = {0};
    Py_ssize_t slots;
    long long latest_offset, now_ms, new_horizon_ms;
    if (!PyArg_ParseTuple(args, "y*nLy*z*LL", &table, &slots, &latest_offset, &batch, &payload,
                          &now_ms, &new_horizon_ms))
        return NULL;
    PyObject *result = NULL;
    record_t *records = NULL;
    Py_ssize_t *wanted = NULL;
    char *kept_flags = NULL;
    uint8_t *out = NULL;
    offset_map_t map;
    batch_view_t view;
    if (open_map(&table, slots, &map) < 0 || view_batch(&batch, &payload, &view) < 0) goto done;
    Py_ssize_t count = view.count;
    int frame = payload.buf == NULL; /* write the whole batch, not just its records */
    if (!plausible_count(count, view.records_bytes)) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    records = alloc_records(count);
    wanted = alloc_indexes(count);
    kept_flags = (char *)PyMem_RawMalloc((size_t)(count > 0 ? count : 1));
    /* Room for the header and every record re-encoded, whatever is kept. */
    size_t out_capacity = RECORD_BATCH_OVERHEAD + (size_t)view.records_bytes +
                          (size_t)count * REENCODE_SLACK_BYTES + 1;
    out = (uint8_t *)PyMem_RawMalloc(out_capacity);
    if (records == NULL || wanted == NULL || kept_flags == NULL || out == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const int has_horizon = view.has_horizon;
    const int64_t old_horizon = view.info.base_timestamp;
    int declined = 0, contains_tombstones = 0;
    Py_ssize_t kept = 0, invalid = 0, out_bytes = 0;
    int64_t new_base = 0, max_timestamp = 0;
    Py_BEGIN_ALLOW_THREADS
    declined = parse_records(view.records, view.records_bytes, count, &view.info, records);
    Py_ssize_t n = 0, k = 0;
    if (!declined) {
        for (Py_ssize_t i = 0; i < count; i++) {
            records[i].wanted = records[i].offset <= latest_offset && records[i].key_length >= 0;
        }
        n = digest_keys(records, count, wanted);
        for (Py_ssize_t p = 0; p < PREFETCH_DISTANCE; p++) prefetch_slot(&map, records, wanted, n, p);
    }
    for (Py_ssize_t i = 0; !declined && i < count; i++) {
        const record_t *r = &records[i];
        int keep;
        if (r->offset > latest_offset) {
            keep = 1; /* not mapped in this round */
        } else if (r->key_length < 0) {
            invalid++;
            keep = 0;
        } else {
            prefetch_slot(&map, records, wanted, n, k++ + PREFETCH_DISTANCE);
            if (r->offset < map_get(&map, r->digest)) {
                keep = 0; /* a later record has this key */
            } else if (r->value_length >= 0) {
                keep = 1;
            } else {
                keep = !has_horizon || now_ms < old_horizon;
            }
        }
        kept_flags[i] = (char)keep;
        if (keep) {
            kept++;
            if (r->value_length < 0) contains_tombstones = 1;
        }
    }
    int set_horizon = !has_horizon && contains_tombstones;
    if (!declined && kept > 0 && (kept < count || set_horizon)) {
        /* rebuild_batch -> build_batch: offset deltas must increase and stay within the last
         * offset delta; the base timestamp is the horizon if there is one, else the first
         * kept record's timestamp; the max timestamp is over the kept records. */
        int64_t previous_delta = 0, first_timestamp = 0;
        int first = 1;
        max_timestamp = INT64_MIN;
        for (Py_ssize_t i = 0; i < count; i++) {
            if (!kept_flags[i]) continue;
            const record_t *r = &records[i];
            if (!first && r->offset_delta <= previous_delta) declined = 1;
            if (first) first_timestamp = r->timestamp;
            first = 0;
            previous_delta = r->offset_delta;
            if (r->timestamp > max_timestamp) max_timestamp = r->timestamp;
        }
        if (previous_delta > view.last_offset_delta) declined = 1;
        if (view.info.log_append) max_timestamp = view.info.log_append_time;
        new_base = set_horizon ? new_horizon_ms : (has_horizon ? old_horizon : first_timestamp);
        uint8_t *cursor = frame ? out + RECORD_BATCH_OVERHEAD : out;
        for (Py_ssize_t i = 0; !declined && i < count; i++) {
            if (!kept_flags[i]) continue;
            /* LogAppendTime records carry the batch time, encoded against the base. */
            int64_t timestamp = view.info.log_append ? first_timestamp : records[i].timestamp;
            int64_t delta;
            if (__builtin_sub_overflow(timestamp, new_base, &delta)) {
                declined = 1;
                break;
            }
            cursor = put_record(cursor, &records[i], delta);
        }
        out_bytes = cursor - out;
        if (!declined && frame) {
            /* _assemble_batch: the original header with the new length, attributes (codec,
             * timestamp type, transactional and control bits kept; the horizon bit as
             * decided), base and max timestamps, record count, then the CRC. */
            memcpy(out, batch.buf, RECORD_BATCH_OVERHEAD);
            int attributes = view.attributes & (CODEC_MASK | TIMESTAMP_TYPE_MASK |
                                                TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK);
            if (has_horizon || set_horizon) attributes |= DELETE_HORIZON_FLAG_MASK;
            put32(out + LENGTH_OFFSET, (uint32_t)(out_bytes - LOG_OVERHEAD));
            put16(out + ATTRIBUTES_OFFSET, (uint16_t)attributes);
            put64(out + BASE_TIMESTAMP_OFFSET, new_base);
            put64(out + MAX_TIMESTAMP_OFFSET, max_timestamp);
            put32(out + RECORDS_COUNT_OFFSET, (uint32_t)kept);
            put32(out + CRC_OFFSET,
                  crc32c(out + ATTRIBUTES_OFFSET, (size_t)(out_bytes - ATTRIBUTES_OFFSET)));
        }
    }
    Py_END_ALLOW_THREADS
    if (declined) {
        result = Py_NewRef(Py_None);
    } else {
        PyObject *rebuilt = out_bytes > 0
                                ? PyBytes_FromStringAndSize((const char *)out, out_bytes)
                                : Py_NewRef(Py_None);
        if (rebuilt != NULL) {
            result = Py_BuildValue("nnONLLKK", kept, invalid,
                                   contains_tombstones ? Py_True : Py_False, rebuilt,
                                   (long long)max_timestamp, (long long)new_base, map.lookups,
                                   map.probes);
        }
    }
done:
    PyMem_RawFree(records);
    PyMem_RawFree(wanted);
    PyMem_RawFree(kept_flags);
    PyMem_RawFree(out);
    PyBuffer_Release(&table);
    PyBuffer_Release(&batch);
    if (payload.buf != NULL) PyBuffer_Release(&payload);
    return result;
}

/* crc32c(data) -> int: the extension's CRC-32C, for the test that checks it. */
static PyObject *crc32c_of(PyObject *self, PyObject *args) {
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "y*", &data)) return NULL;
    uint32_t crc = crc32c((const uint8_t *)data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(crc);
}

static PyMethodDef methods[] = {
    {"md5", md5_digest, METH_VARARGS, "MD5 digest of a bytes-like object (16 bytes)."},
    {"crc32c", crc32c_of, METH_VARARGS, "CRC-32C of a bytes-like object."},
    {"put_keys", put_keys, METH_VARARGS, "Map the keys of one data batch."},
    {"filter_records", filter_records, METH_VARARGS,
     "Retention decisions and the rebuilt batch (or records) of one data batch."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "storagecore.cleaner._native",
    "Native fast path of the cleaner (see _offset_map_native.c).", -1, methods,
};

PyMODINIT_FUNC PyInit__native(void) {
    crc32c_init();
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (add_layout_constants(m) < 0 || PyModule_AddIntConstant(m, "HASH_BYTES", HASH_BYTES) < 0 ||
        PyModule_AddIntConstant(m, "ENTRY_BYTES", ENTRY_BYTES) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
