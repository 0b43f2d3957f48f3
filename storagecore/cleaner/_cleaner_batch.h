/* The cleaner's per-batch record work: the offset map's probes, key digests, and the two
 * passes over one batch's records (map_batch, filter_batch). Included by
 * storagecore/cleaner/_native.c only, which documents the contract with the Python reference.
 */
#ifndef STORAGECORE_CLEANER_BATCH_H
#define STORAGECORE_CLEANER_BATCH_H
#include "_cleaner_records.h"

#define ENTRY_BYTES 24
/* The smallest well-framed record: length, attributes, timestamp delta, offset delta, key
 * length, value length and header count, one byte each. */
#define MIN_RECORD_BYTES 7
/* The cleaner's instance of SipHash: one compression round, three finalization rounds. */
#define SIP_C_ROUNDS 1
#define SIP_D_ROUNDS 3

/* ---- the offset map ---------------------------------------------------------------------- */

/* Positions: per offset of the round's dirty range (offset - positions_start), where the map
 * pass left the key of the record at that offset: ((slot + 1) << POSITION_PROBE_BITS) | the
 * probes a lookup of that key takes (1 .. POSITION_PROBES_MAX); 0 when not known (no key, put
 * by another path, a probe path too long to note, an offset met twice). Entries never move
 * within a round (no deletes, no resize), and the slots on a key's probe path before its own
 * were occupied when it was put and stay so: the filter pass reads the slot and the probe count
 * from here instead of digesting the key again, and takes the same decision, lookup and probe
 * counts as the digest would give; a batch whose offsets' notes all point at later offsets is
 * dropped without its records being read (superseded_batch). The storage is the part of the
 * map's memory budget that the round's probed prefix leaves unused
 * (storagecore/cleaner/offset_map.py). */
#define POSITION_PROBE_BITS 5
#define POSITION_PROBES_MAX ((1u << POSITION_PROBE_BITS) - 1)
#define POSITION_SLOTS_MAX ((Py_ssize_t)(UINT32_MAX >> POSITION_PROBE_BITS) - 1)

typedef struct {
    uint8_t *table;
    Py_ssize_t slots;
    unsigned long long lookups, probes;
    uint32_t *positions; /* NULL: none this call */
    int64_t positions_start;
    Py_ssize_t positions_len;
} offset_map_t;

/* The positions entry of offset, or NULL when outside the noted range (positions_len is 0
 * when there are none; the unsigned difference wraps below positions_start). */
static inline uint32_t *position_entry(const offset_map_t *map, int64_t offset) {
    uint64_t index = (uint64_t)offset - (uint64_t)map->positions_start;
    if (index >= (uint64_t)map->positions_len) return NULL;
    return map->positions + index;
}

/* Note that the key of the record at offset sits at byte position of the table, found with
 * probes probes. An offset noted twice (only a log with repeated offsets) is unknown. */
static inline void note_position(offset_map_t *map, int64_t offset, Py_ssize_t position,
                                 unsigned long long probes) {
    uint32_t *entry = position_entry(map, offset);
    if (entry == NULL) return;
    Py_ssize_t slot = position / ENTRY_BYTES;
    if (*entry != 0 || probes > POSITION_PROBES_MAX || slot > POSITION_SLOTS_MAX) {
        *entry = UINT32_MAX; /* never a valid note: (slot + 1) <= POSITION_SLOTS_MAX + 1 */
        return;
    }
    *entry = (uint32_t)(slot + 1) << POSITION_PROBE_BITS | (uint32_t)probes;
}

static inline Py_ssize_t slot_of(const uint8_t *digest, Py_ssize_t slots, Py_ssize_t attempt) {
    Py_ssize_t window = attempt < HASH_BYTES - 4 ? attempt : HASH_BYTES - 4;
    uint32_t word = (uint32_t)digest[window] << 24 | (uint32_t)digest[window + 1] << 16 |
                    (uint32_t)digest[window + 2] << 8 | (uint32_t)digest[window + 3];
    uint32_t linear = attempt > HASH_BYTES - 4 ? (uint32_t)(attempt - (HASH_BYTES - 4)) : 0;
    int32_t probe = (int32_t)(word + linear); /* Java int arithmetic wraps */
    int64_t magnitude = probe == INT32_MIN ? 0 : (probe < 0 ? -(int64_t)probe : probe);
    return (Py_ssize_t)(magnitude % slots);
}

/* The bytes p[0..8) as a machine word: equality of words is equality of bytes, whatever the
 * byte order, and the compiler turns the memcpy into one load (a memcmp of a digest or an entry
 * was a call into libc, twice per probe). */
static inline uint64_t word_at(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* The offset of the entry at byte position `position`: big-endian after the digest (the layout
 * the Python reference reads), loaded as one word and byte-swapped (get64 assembles it a byte
 * at a time, once per record of both passes). */
static inline int64_t entry_offset(const offset_map_t *map, Py_ssize_t position) {
    uint64_t v = word_at(map->table + position + HASH_BYTES);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return (int64_t)v;
}

static inline void set_entry_offset(offset_map_t *map, Py_ssize_t position, int64_t offset) {
    uint64_t v = (uint64_t)offset;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    memcpy(map->table + position + HASH_BYTES, &v, 8);
}

/* Make the notes of offsets [from, from + count) unknown for good (see note_position). */
static void poison_positions(offset_map_t *map, int64_t from, Py_ssize_t count) {
    for (Py_ssize_t i = 0; i < count; i++) {
        uint32_t *entry = position_entry(map, from + i);
        if (entry != NULL) *entry = UINT32_MAX;
    }
}

/* Whether the records of the batch at b are the offsets base .. base + last offset delta, one
 * each, every one of them put by this round's map pass with a note (at most latest_offset),
 * and every note's entry holding a later offset: then filter_batch would keep none of them,
 * and the filter pass takes the batch without reading its records (the notes of a batch
 * whose offset deltas are not 0, 1, ..., count - 1 were made unknown by map_batch, and an
 * offset met twice has none). *probes: the probes of their lookups (filter_batch's counts). */
static int superseded_batch(const offset_map_t *map, const uint8_t *b, int64_t latest_offset,
                            unsigned long long *probes) {
    int64_t base = get64(b + BASE_OFFSET_OFFSET);
    int32_t count = get32(b + RECORDS_COUNT_OFFSET);
    int64_t last = base + get32(b + LAST_OFFSET_DELTA_OFFSET);
    if (count <= 0 || last - base != (int64_t)count - 1 || last > latest_offset) return 0;
    const uint32_t *notes = position_entry(map, base);
    if (notes == NULL || position_entry(map, last) == NULL) return 0;
    for (int32_t i = 0; i < count; i++) {
        uint32_t noted = notes[i];
        if (noted == 0 || noted == UINT32_MAX) return 0;
        __builtin_prefetch(map->table + ((noted >> POSITION_PROBE_BITS) - 1) * ENTRY_BYTES +
                           HASH_BYTES);
    }
    unsigned long long taken = 0;
    for (int32_t i = 0; i < count; i++) {
        Py_ssize_t position = (Py_ssize_t)((notes[i] >> POSITION_PROBE_BITS) - 1) * ENTRY_BYTES;
        if (entry_offset(map, position) <= base + i) return 0; /* the latest of its key: kept */
        taken += notes[i] & POSITION_PROBES_MAX;
    }
    *probes = taken;
    return 1;
}

/* The probes of one lookup from the byte position of the digest's first slot (slot_of(digest,
 * slots, 0)), which the batch loops compute once, when they prefetch it: the position found
 * (see map_find), and in *probes the probes taken (the caller counts them and the lookup). */
static inline Py_ssize_t probe_from(const offset_map_t *map, const uint8_t *digest,
                                    Py_ssize_t first_position, int *found,
                                    unsigned long long *probes) {
    const uint64_t d0 = word_at(digest), d1 = word_at(digest + 8);
    Py_ssize_t attempts = map->slots + HASH_BYTES;
    Py_ssize_t position = first_position;
    for (Py_ssize_t attempt = 0; attempt < attempts; attempt++) {
        if (attempt > 0) position = slot_of(digest, map->slots, attempt) * ENTRY_BYTES;
        const uint8_t *entry = map->table + position;
        const uint64_t e0 = word_at(entry), e1 = word_at(entry + 8);
        if (e0 == d0 && e1 == d1) {
            *found = 1;
            *probes = (unsigned long long)attempt + 1;
            return position;
        }
        if ((e0 | e1 | word_at(entry + 16)) == 0) { /* all ENTRY_BYTES zero: empty */
            *found = 0;
            *probes = (unsigned long long)attempt + 1;
            return position;
        }
    }
    *found = 0;
    *probes = (unsigned long long)attempts;
    return -1;
}

/* probe_from, counted in the map's lookups and probes. */
static inline Py_ssize_t map_find_from(offset_map_t *map, const uint8_t *digest,
                                       Py_ssize_t first_position, int *found) {
    unsigned long long probes;
    Py_ssize_t position = probe_from(map, digest, first_position, found, &probes);
    map->lookups++;
    map->probes += probes;
    return position;
}

/* Byte position of digest's slot (*found = 1) or of the first empty slot on its probe path
 * (*found = 0); -1 when neither exists (a full map). Same bound as the reference. */
static Py_ssize_t map_find(offset_map_t *map, const uint8_t *digest, int *found) {
    return map_find_from(map, digest, slot_of(digest, map->slots, 0) * ENTRY_BYTES, found);
}

static int64_t map_get(offset_map_t *map, const uint8_t *digest) {
    int found;
    Py_ssize_t position = map_find(map, digest, &found);
    return found ? entry_offset(map, position) : -1;
}
/* ---- the entry points' arguments ------------------------------------------------------- */

/* Shared argument checks; 0 on success, -1 with an exception set. */
static int open_map(Py_buffer *table, Py_ssize_t slots, Py_buffer *secret, offset_map_t *map,
                    sip_key_t *key) {
    if (slots < 1 || table->len != slots * ENTRY_BYTES) {
        PyErr_Format(PyExc_ValueError, "offset map table of %zd bytes does not hold %zd slots",
                     table->len, slots);
        return -1;
    }
    if (secret->len != SIPHASH_KEY_BYTES) {
        PyErr_Format(PyExc_ValueError, "offset map secret of %zd bytes (expected %d)",
                     secret->len, SIPHASH_KEY_BYTES);
        return -1;
    }
    map->table = (uint8_t *)table->buf;
    map->slots = slots;
    map->lookups = 0;
    map->probes = 0;
    map->positions = NULL;
    map->positions_start = 0;
    map->positions_len = 0;
    *key = sip_key((const uint8_t *)secret->buf);
    return 0;
}

/* The region calls' positions (see offset_map_t in _cleaner_batch.h): native uint32 per offset
 * from start; an empty buffer for none. 0 on success, -1 with an exception set. */
static int open_positions(Py_buffer *positions, long long start, offset_map_t *map) {
    if (positions->len % (Py_ssize_t)sizeof(uint32_t) != 0 ||
        ((uintptr_t)positions->buf % sizeof(uint32_t)) != 0) {
        PyErr_Format(PyExc_ValueError, "offset map positions of %zd bytes are not uint32s",
                     positions->len);
        return -1;
    }
    if (positions->len > 0) {
        map->positions = (uint32_t *)positions->buf;
        map->positions_start = start;
        map->positions_len = positions->len / (Py_ssize_t)sizeof(uint32_t);
    }
    return 0;
}

/* ---- digests and probes, a batch at a time ----------------------------------------------- */

/* The filter pass's notes: each record it looks up (mapped in this round, with a key) whose
 * offset the map pass noted takes its slot and probe count from there (no digest needed, see
 * offset_map_t), and that slot is prefetched; the others are listed in todo[0..return) for
 * digest_keys_of. */
static Py_ssize_t take_notes(const offset_map_t *map, record_t *records, Py_ssize_t count,
                             int64_t latest_offset, Py_ssize_t *todo) {
    Py_ssize_t m = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        record_t *r = &records[i];
        r->known = 0;
        if (r->offset > latest_offset || r->key_length < 0) continue;
        const uint32_t *noted = position_entry(map, r->offset);
        if (noted != NULL && *noted != 0 && *noted != UINT32_MAX) {
            r->known = 1;
            r->known_probes = (int)(*noted & POSITION_PROBES_MAX);
            r->first_position = (Py_ssize_t)((*noted >> POSITION_PROBE_BITS) - 1) * ENTRY_BYTES;
            __builtin_prefetch(map->table + r->first_position + HASH_BYTES);
        } else {
            todo[m++] = i;
        }
    }
    return m;
}

/* The digest of each key of records[todo[0..m)]: four at a time (siphash128_x4) where four in
 * a row have keys of the same length (a topic's keys often do), else one at a time. */
static void digest_keys_of(record_t *records, const Py_ssize_t *todo, Py_ssize_t m,
                           sip_key_t key) {
    Py_ssize_t k = 0;
    while (k < m) {
        record_t *r = &records[todo[k]];
        if (k + 4 <= m) {
            record_t *r1 = &records[todo[k + 1]], *r2 = &records[todo[k + 2]],
                     *r3 = &records[todo[k + 3]];
            if (r1->key_length == r->key_length && r2->key_length == r->key_length &&
                r3->key_length == r->key_length) {
                const uint8_t *const data[4] = {r->key, r1->key, r2->key, r3->key};
                uint8_t *const out[4] = {r->digest, r1->digest, r2->digest, r3->digest};
                siphash128_x4(data, (size_t)r->key_length, key, SIP_C_ROUNDS, SIP_D_ROUNDS, out);
                k += 4;
                continue;
            }
        }
        siphash128(r->key, (size_t)r->key_length, key, SIP_C_ROUNDS, SIP_D_ROUNDS, r->digest);
        k++;
    }
}

/* Prefetch the slot a record's lookup reads first: from its note (the offset of the
 * entry is what the filter reads), else from its digest (first_position set here). */
static inline void prefetch_slot(const offset_map_t *map, record_t *r) {
    if (r->known) {
        __builtin_prefetch(map->table + r->first_position + HASH_BYTES);
        return;
    }
    r->first_position = slot_of(r->digest, map->slots, 0) * ENTRY_BYTES;
    __builtin_prefetch(map->table + r->first_position);
}

/* ---- one batch --------------------------------------------------------------------------- */

/* Scratch arrays sized for the largest batch seen, reused across the batches of a region. */
typedef struct {
    record_t *records;
    Py_ssize_t *wanted; /* the records whose keys a pass digests */
    char *kept;
    Py_ssize_t capacity;
} scratch_t;

static void scratch_free(scratch_t *s) {
    PyMem_RawFree(s->records);
    PyMem_RawFree(s->wanted);
    PyMem_RawFree(s->kept);
    memset(s, 0, sizeof(*s));
}

/* 0 when room for count records is held; -1 on out of memory (no exception: the GIL may be
 * released). */
static int scratch_reserve(scratch_t *s, Py_ssize_t count) {
    if (count <= s->capacity && s->records != NULL) return 0;
    Py_ssize_t capacity = count > 64 ? count : 64;
    scratch_free(s);
    s->records = (record_t *)PyMem_RawMalloc((size_t)capacity * sizeof(record_t));
    s->wanted = (Py_ssize_t *)PyMem_RawMalloc((size_t)capacity * sizeof(Py_ssize_t));
    s->kept = (char *)PyMem_RawMalloc((size_t)capacity);
    if (s->records == NULL || s->wanted == NULL || s->kept == NULL) {
        scratch_free(s);
        return -1;
    }
    s->capacity = capacity;
    return 0;
}

/* The header fields the record work reads. The records are `payload` when given (a compressed
 * batch, decompressed by the caller), else the bytes after the header. */
typedef struct {
    batch_info_t info;
    const uint8_t *batch;
    Py_ssize_t size;
    int attributes, has_horizon;
    Py_ssize_t count;
    int64_t last_offset_delta, max_timestamp, producer_id;
    const uint8_t *records;
    Py_ssize_t records_bytes;
} batch_view_t;

static void view_batch(const uint8_t *b, Py_ssize_t size, const uint8_t *payload,
                       Py_ssize_t payload_bytes, batch_view_t *view) {
    view->batch = b;
    view->size = size;
    view->attributes = get16(b + ATTRIBUTES_OFFSET);
    view->has_horizon = (view->attributes & DELETE_HORIZON_FLAG_MASK) != 0;
    view->info.base_offset = get64(b + BASE_OFFSET_OFFSET);
    view->info.base_timestamp = get64(b + BASE_TIMESTAMP_OFFSET);
    view->max_timestamp = get64(b + MAX_TIMESTAMP_OFFSET);
    view->producer_id = get64(b + PRODUCER_ID_OFFSET);
    view->info.log_append = (view->attributes & TIMESTAMP_TYPE_MASK) != 0;
    view->info.log_append_time = view->max_timestamp;
    view->count = get32(b + RECORDS_COUNT_OFFSET);
    view->last_offset_delta = get32(b + LAST_OFFSET_DELTA_OFFSET);
    if (payload != NULL) {
        view->records = payload;
        view->records_bytes = payload_bytes;
    } else {
        view->records = b + RECORD_BATCH_OVERHEAD;
        view->records_bytes = size - RECORD_BATCH_OVERHEAD;
    }
}

/* Whether `count` records could fill `bytes` (each takes at least MIN_RECORD_BYTES). */
static inline int plausible_count(Py_ssize_t count, Py_ssize_t bytes) {
    return count >= 0 && count <= bytes / MIN_RECORD_BYTES + 1;
}

/* What a map pass has done so far. */
typedef struct {
    Py_ssize_t size, capacity, puts, walked;
    int64_t last_put;
    int full, overfull;
} map_progress_t;

/* Cleaner.build_offset_map's loop over one data batch: every record with a key and an offset
 * >= start is put (digest -> offset), but first, when size has reached capacity, the walk
 * stops with full set; walked counts the records walked before that. -1 (declined) before
 * changing anything when the records do not parse. */
static int map_batch(offset_map_t *map, sip_key_t key, const batch_view_t *view, int64_t start,
                     scratch_t *s, map_progress_t *p) {
    Py_ssize_t count = view->count;
    record_t *records = s->records;
    if (parse_record_keys(view->records, view->records_bytes, count, &view->info, records) < 0) {
        return -1;
    }
    /* The records with a key at offsets from start, their keys digested, and the first slot
     * of each asked for before the first probe. */
    Py_ssize_t *wanted = s->wanted;
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        records[i].known = 0;
        wanted[n] = i; /* kept only when wanted: no branch */
        n += records[i].key_length >= 0 && records[i].offset >= start;
    }
    digest_keys_of(records, wanted, n, key);
    for (Py_ssize_t q = 0; q < n; q++) prefetch_slot(map, &records[wanted[q]]);
    /* The loop's state in locals (the table's stores could alias it through the pointers). */
    Py_ssize_t size = p->size, puts = 0;
    const Py_ssize_t capacity = p->capacity;
    int64_t last_put = p->last_put;
    unsigned long long probes = 0;
    Py_ssize_t walked = count, k = 0;
    for (; k < n; k++) {
        const record_t *r = &records[wanted[k]];
        if (size >= capacity) { /* full before this put: the records before it were walked */
            p->full = 1;
            walked = wanted[k];
            break;
        }
        int found;
        unsigned long long taken;
        Py_ssize_t position = probe_from(map, r->digest, r->first_position, &found, &taken);
        probes += taken;
        if (!found) {
            if (position < 0 || size >= map->slots) {
                p->overfull = 1;
                k++; /* its lookup was counted */
                break;
            }
            memcpy(map->table + position, r->digest, HASH_BYTES);
            size++;
        }
        set_entry_offset(map, position, r->offset);
        note_position(map, r->offset, position, taken);
        puts++;
        last_put = r->offset;
    }
    map->lookups += (unsigned long long)k; /* the records looked up */
    map->probes += probes;
    if (map->positions != NULL) {
        for (Py_ssize_t i = 0; i < count; i++) {
            if (records[i].offset_delta != i) { /* never a producer's: see superseded_batch */
                poison_positions(map, view->info.base_offset, count);
                break;
            }
        }
    }
    p->size = size;
    p->puts += puts;
    p->last_put = last_put;
    p->walked += walked;
    return 0;
}

/* Room filter_batch may write for one batch: the header and every record re-encoded. */
static inline size_t filter_room(const batch_view_t *view) {
    return RECORD_BATCH_OVERHEAD + (size_t)view->records_bytes +
           (size_t)view->count * REENCODE_SLACK_BYTES + 1;
}

typedef struct {
    Py_ssize_t kept, invalid;
    int tombstones, set_horizon;
    Py_ssize_t out_bytes; /* 0: nothing to write, or the batch is kept verbatim */
    int64_t max_timestamp, new_base;
} filtered_t;

/* rebuild_batch's framing (_assemble_batch) of the `size` bytes at out, whose records (or, for
 * a compressed batch, compressed records) follow the header room: the original header with the
 * new length, attributes (codec, timestamp type, transactional and control bits kept; the
 * horizon bit as decided), base and max timestamps, record count, then the CRC. */
static void frame_batch(uint8_t *out, const batch_view_t *view, const filtered_t *f,
                        Py_ssize_t size) {
    memcpy(out, view->batch, RECORD_BATCH_OVERHEAD);
    int attributes = view->attributes & (CODEC_MASK | TIMESTAMP_TYPE_MASK |
                                         TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK);
    if (view->has_horizon || f->set_horizon) attributes |= DELETE_HORIZON_FLAG_MASK;
    put32(out + LENGTH_OFFSET, (uint32_t)(size - LOG_OVERHEAD));
    put16(out + ATTRIBUTES_OFFSET, (uint16_t)attributes);
    put64(out + BASE_TIMESTAMP_OFFSET, f->new_base);
    put64(out + MAX_TIMESTAMP_OFFSET, f->max_timestamp);
    put32(out + RECORDS_COUNT_OFFSET, (uint32_t)f->kept);
    put32(out + CRC_OFFSET, crc32c(out + ATTRIBUTES_OFFSET, (size_t)(size - ATTRIBUTES_OFFSET)));
}

/* Cleaner._retain_record over every record of one data batch, then what rebuild_batch would
 * write into out (filter_room bytes): for an uncompressed batch (frame) the whole rebuilt
 * batch, header and CRC included; for a compressed one the uncompressed kept records encoded
 * against new_base, for the caller to compress and frame. Nothing is written when nothing was
 * kept or when the batch is copied verbatim (all kept and no horizon to stamp). A tombstone
 * survives while now_ms is below the batch's delete horizon; a batch without one that keeps a
 * tombstone gets new_horizon_ms. -1 when declined. parsed_before: the map pass's parse_records
 * accepted these very records (reparse_records then reads them again without the checks). */
static int filter_batch(offset_map_t *map, sip_key_t key, int64_t latest_offset,
                        const batch_view_t *view, int frame, int64_t now_ms,
                        int64_t new_horizon_ms, int parsed_before, scratch_t *s, uint8_t *out,
                        filtered_t *f) {
    Py_ssize_t count = view->count;
    record_t *records = s->records;
    char *kept_flags = s->kept;
    const int has_horizon = view->has_horizon;
    const int64_t old_horizon = view->info.base_timestamp;
    memset(f, 0, sizeof(*f));
    if (parsed_before) {
        reparse_records(view->records, count, &view->info, records);
    } else if (parse_records(view->records, view->records_bytes, count, &view->info, records) <
               0) {
        return -1;
    }
    /* Every slot the decisions read, asked for before the first decision: a noted one at
     * once, the others once their keys are digested. */
    Py_ssize_t m = take_notes(map, records, count, latest_offset, s->wanted);
    digest_keys_of(records, s->wanted, m, key);
    for (Py_ssize_t q = 0; q < m; q++) prefetch_slot(map, &records[s->wanted[q]]);
    /* The loop's counters in locals (stores to kept_flags could alias them otherwise). */
    Py_ssize_t kept = 0, invalid = 0;
    int tombstones = 0;
    unsigned long long lookups = 0, probes = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        const record_t *r = &records[i];
        int keep;
        if (r->offset > latest_offset) {
            keep = 1; /* not mapped in this round */
        } else if (r->key_length < 0) {
            invalid++;
            keep = 0;
        } else {
            int found;
            Py_ssize_t position;
            lookups++;
            if (r->known) { /* the key's slot, as its digest would find it (see offset_map_t) */
                probes += (unsigned long long)r->known_probes;
                position = r->first_position;
                found = 1;
            } else {
                unsigned long long taken;
                position = probe_from(map, r->digest, r->first_position, &found, &taken);
                probes += taken;
            }
            int64_t mapped = found ? entry_offset(map, position) : -1; /* map_get */
            if (r->offset < mapped) {
                keep = 0; /* a later record has this key */
            } else if (r->value_length >= 0) {
                keep = 1;
            } else {
                keep = !has_horizon || now_ms < old_horizon;
            }
        }
        kept_flags[i] = (char)keep;
        kept += keep;
        tombstones |= keep & (r->value_length < 0);
    }
    map->lookups += lookups;
    map->probes += probes;
    f->kept = kept;
    f->invalid = invalid;
    f->tombstones = tombstones;
    f->set_horizon = !has_horizon && f->tombstones;
    if (f->kept == 0 || (f->kept == count && !f->set_horizon)) return 0;
    if (parsed_before) { /* the rebuild reads the kept records' timestamps and headers */
        for (Py_ssize_t i = 0; i < count; i++) {
            if (kept_flags[i]) complete_record(&records[i], &view->info);
        }
    }
    /* rebuild_batch -> build_batch: offset deltas must increase and stay within the last
     * offset delta; the base timestamp is the horizon if there is one, else the first kept
     * record's timestamp; the max timestamp is over the kept records. */
    int64_t previous_delta = 0, first_timestamp = 0, max_timestamp = INT64_MIN;
    int first = 1;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!kept_flags[i]) continue;
        const record_t *r = &records[i];
        if (!first && r->offset_delta <= previous_delta) return -1;
        if (first) first_timestamp = r->timestamp;
        first = 0;
        previous_delta = r->offset_delta;
        if (r->timestamp > max_timestamp) max_timestamp = r->timestamp;
    }
    if (previous_delta > view->last_offset_delta) return -1;
    if (view->info.log_append) max_timestamp = view->info.log_append_time;
    int64_t new_base =
        f->set_horizon ? new_horizon_ms : (has_horizon ? old_horizon : first_timestamp);
    uint8_t *cursor = frame ? out + RECORD_BATCH_OVERHEAD : out;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!kept_flags[i]) continue;
        /* LogAppendTime records carry the batch time, encoded against the base. */
        int64_t timestamp = view->info.log_append ? first_timestamp : records[i].timestamp;
        int64_t delta;
        if (__builtin_sub_overflow(timestamp, new_base, &delta)) return -1;
        cursor = put_record(cursor, &records[i], delta);
    }
    Py_ssize_t out_bytes = cursor - out;
    f->max_timestamp = max_timestamp;
    f->new_base = new_base;
    if (frame) frame_batch(out, view, f, out_bytes);
    f->out_bytes = out_bytes;
    return 0;
}

#endif
