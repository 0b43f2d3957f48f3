/* The walk of a legacy (magic v0/v1) message set, shared by the records reader (_legacy.c,
 * whose comment is the contract) and the cleaner engine (storagecore/cleaner/_native.c). Each
 * including translation unit has its own CRC-32 table: call legacy_crc32_init() once.
 */
#ifndef STORAGECORE_RECORDS_LEGACY_H
#define STORAGECORE_RECORDS_LEGACY_H
#include <Python.h>
#include <stdint.h>
#include <stdio.h>

#include "_layout.h"

/* legacy.py's layout (test_legacy_native.py checks the copies agree via the module constants
 * added by storagecore_legacy_constants). */
#define LEGACY_CRC_POSITION LOG_OVERHEAD   /* after offset and size */
#define LEGACY_MAGIC_POSITION MAGIC_OFFSET /* where v2 readers dispatch on it too */
#define LEGACY_HEADER_BYTES (LEGACY_MAGIC_POSITION + 2) /* offset, size, crc, magic, attributes */
#define LEGACY_OVERHEAD_V0 14 /* crc, magic, attributes, key and value lengths */
#define LEGACY_OVERHEAD_V1 22 /* and the timestamp */

static uint32_t crc_table[256];

static void legacy_crc32_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[n] = c;
    }
}

static uint32_t crc32_of(const uint8_t *data, Py_ssize_t len) {
    uint32_t c = 0xFFFFFFFFu;
    for (Py_ssize_t i = 0; i < len; i++) c = crc_table[(c ^ data[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

typedef struct {
    int64_t offset, timestamp;
    Py_ssize_t key, value; /* positions in data */
    int32_t key_length, value_length;
    int magic;
} legacy_msg_t;

/* One field: its length at pos, then the bytes. 0, or -1 with the problem written. */
static int field(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, const char *where,
                 const char *name, Py_ssize_t *at, int32_t *length, char *problem, size_t room) {
    if (end - *pos < 4) {
        snprintf(problem, room, "%s: %s length runs past the message", where, name);
        return -1;
    }
    int32_t n = get32(b + *pos);
    *pos += 4;
    *at = *pos;
    *length = n;
    if (n < 0) return 0;
    if (n > end - *pos) {
        snprintf(problem, room, "%s: %s of %d bytes runs past the message", where, name, n);
        return -1;
    }
    *pos += n;
    return 0;
}

/* Walks data; fills msgs (room for count_max) and returns the count, or -1 with problem. */
/* where_fixed: the prefix of every problem (NULL: "message <index> at byte <position>");
 * allow_compressed: a wrapper is walked as a message (its codec id must be 0..3). */
static Py_ssize_t legacy_walk_entries(const uint8_t *b, Py_ssize_t len, int wrapper_magic,
                                      legacy_msg_t *msgs, Py_ssize_t count_max, char *problem,
                                      size_t room, const char *where_fixed,
                                      int allow_compressed) {
    Py_ssize_t pos = 0, count = 0;
    char where[96];
    while (pos < len) {
        if (where_fixed != NULL) {
            snprintf(where, sizeof where, "%s", where_fixed);
        } else {
            snprintf(where, sizeof where, "message %zd at byte %zd", count, pos);
        }
        if (len - pos < LEGACY_HEADER_BYTES) {
            snprintf(problem, room, "%s: %zd bytes left, less than a message's %d-byte header",
                     where, len - pos, LEGACY_HEADER_BYTES);
            return -1;
        }
        int64_t offset = get64(b + pos);
        int32_t size = get32(b + pos + 8);
        uint32_t crc = (uint32_t)get32(b + pos + LEGACY_CRC_POSITION);
        int magic = (int8_t)b[pos + LEGACY_MAGIC_POSITION];
        int attributes = (int8_t)b[pos + LEGACY_MAGIC_POSITION + 1];
        if (magic != 0 && magic != 1) {
            snprintf(problem, room, "%s: magic %d in a legacy message set", where, magic);
            return -1;
        }
        int minimum = magic == 0 ? LEGACY_OVERHEAD_V0 : LEGACY_OVERHEAD_V1;
        if (size < minimum) {
            snprintf(problem, room, "%s: message of %d bytes is below the v%d minimum of %d bytes",
                     where, size, magic, minimum);
            return -1;
        }
        Py_ssize_t entry_end = pos + LOG_OVERHEAD + (Py_ssize_t)size;
        if (entry_end > len) {
            snprintf(problem, room, "%s: message of %d bytes runs past its message set", where,
                     size);
            return -1;
        }
        uint32_t computed = crc32_of(b + pos + LEGACY_MAGIC_POSITION,
                                     entry_end - pos - LEGACY_MAGIC_POSITION);
        if (computed != crc) {
            snprintf(problem, room, "%s: CRC-32 mismatch (stored 0x%08x, computed 0x%08x)", where,
                     crc, computed);
            return -1;
        }
        legacy_msg_t m;
        m.magic = magic;
        m.offset = offset;
        Py_ssize_t p = pos + LEGACY_HEADER_BYTES;
        m.timestamp = -1;
        if (magic == 1) {
            m.timestamp = get64(b + p);
            p += 8;
        }
        if (field(b, &p, entry_end, where, "key", &m.key, &m.key_length, problem, room) < 0 ||
            field(b, &p, entry_end, where, "value", &m.value, &m.value_length, problem, room) < 0)
            return -1;
        if (p != entry_end) {
            snprintf(problem, room, "%s: message declares %d bytes, its fields take %zd", where,
                     size, p - pos - LOG_OVERHEAD);
            return -1;
        }
        if (allow_compressed) {
            if ((attributes & CODEC_MASK) > 3) {
                snprintf(problem, room, "%s: codec id %d in a legacy message (0..3 only)", where,
                         attributes & CODEC_MASK);
                return -1;
            }
        } else if (attributes & CODEC_MASK) {
            snprintf(problem, room, "%s: %s", where,
                     wrapper_magic >= 0 ? "inner messages must not be compressed"
                                        : "a compressed wrapper, not a plain message");
            return -1;
        }
        if (count < count_max) msgs[count] = m;
        count++;
        pos = entry_end;
    }
    return count;
}


static Py_ssize_t legacy_walk(const uint8_t *b, Py_ssize_t len, int wrapper_magic,
                              legacy_msg_t *msgs, Py_ssize_t count_max, char *problem,
                              size_t room) {
    return legacy_walk_entries(b, len, wrapper_magic, msgs, count_max, problem, room, NULL, 0);
}

/* The messages of data with offsets absolute and timestamps resolved (see _legacy.c), in an
 * array from PyMem_RawMalloc (the caller frees it; no GIL needed) and their count; NULL with
 * problem set when the set is refused, NULL with problem[0] == 0 when out of memory. */
static legacy_msg_t *legacy_resolve(const uint8_t *b, Py_ssize_t len, int wrapper_magic,
                                    int64_t wrapper_offset, int log_append,
                                    int64_t log_append_time, Py_ssize_t *count_out,
                                    char *problem, size_t room) {
    problem[0] = 0;
    Py_ssize_t count = legacy_walk(b, len, wrapper_magic, NULL, 0, problem, room);
    if (count < 0) return NULL;
    if (wrapper_magic >= 0 && count == 0) {
        snprintf(problem, room, "compressed message set with no inner messages");
        return NULL;
    }
    legacy_msg_t *msgs = PyMem_RawMalloc(sizeof(legacy_msg_t) * (size_t)(count ? count : 1));
    if (msgs == NULL) return NULL;
    legacy_walk(b, len, wrapper_magic, msgs, count, problem, room);
    if (wrapper_magic == 1 && wrapper_offset != 0) {
        int64_t last_inner = msgs[count - 1].offset;
        if (wrapper_offset < last_inner) {
            snprintf(problem, room,
                     "wrapper offset %lld is less than the last inner message offset %lld and "
                     "it is not zero",
                     (long long)wrapper_offset, (long long)last_inner);
            PyMem_RawFree(msgs);
            return NULL;
        }
        for (Py_ssize_t i = 0; i < count; i++) msgs[i].offset += wrapper_offset - last_inner;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (msgs[i].magic == 1 && log_append) msgs[i].timestamp = log_append_time;
    }
    *count_out = count;
    return msgs;
}

#endif
