/* The validated append shared by _append.c (validation, write, index entries) and
 * _segment_append.c (the active segment's append in one call). Include Python.h first. */
#ifndef STORAGECORE_RECORDS_APPEND_H
#define STORAGECORE_RECORDS_APPEND_H

#include <stdint.h>

typedef struct {
    Py_ssize_t pos, size;
    long long assigned, batch_max;
    int fix_max; /* max timestamp or timestamp type rewritten: the CRC is computed again */
} planned_batch_t;

typedef struct {
    long long next_offset, now_ms, before_max_ms, after_max_ms;
    int client, replication, compact, leader_epoch;
    int lz4; /* lz4 batches are validated here too (decoded by _lz4_frame.c); else declined */
    Py_ssize_t max_message_bytes;
} validate_params_t;

typedef struct {
    planned_batch_t one; /* the common request holds one batch: no allocation */
    planned_batch_t *batches;
    Py_ssize_t count, capacity;
    long long first_offset, last_offset, max_timestamp, offset_of_max, record_count;
    int has_producer;
} plan_t;

/* Entry sizes of storagecore/index/ (OffsetIndex.entry, TimeIndex.entry; test_native_layout.py
 * checks the exported copies). */
#define OFFSET_INDEX_ENTRY_BYTES 8
#define TIME_INDEX_ENTRY_BYTES 12

/* The index entries of an append (LogSegment.record_appended's rule), written by the native
 * append into the segment's memory-mapped indexes (or the one-entry buffers of unmapped ones). */
typedef struct {
    PyObject *offset_index, *time_index; /* borrowed: the mappings (mmap objects), or None */
    Py_ssize_t offset_entries, time_entries;
    long long time_last_timestamp; /* the time index's last timestamp, -1 when it is empty */
    long long bytes_since, interval, max_so_far, offset_of_max_so_far;
    /* Decided before the write: */
    int offset_entry, time_entry;
    long long time_timestamp, time_offset;
    Py_buffer offset_view, time_view;
} index_update_t;

/* _lz4_frame.c: a frame decoded into the thread's buffer (*out), its length, or -1 (declined:
 * anything but the common valid frame, or more than 1 MiB of records). */
Py_ssize_t storagecore_lz4_frame_decode(const uint8_t *data, Py_ssize_t n, const uint8_t **out);
#define LZ4_CODEC 3 /* Compression.LZ4's id */

/* 1: every batch valid (plan filled); 0: hand the request to Python; -1: an exception is set.
 * plan_release frees what the plan holds, whatever the result. */
int plan_uncompressed(const uint8_t *buf, Py_ssize_t end, const validate_params_t *p,
                      plan_t *plan);
void plan_release(plan_t *plan);
/* The plan's rewrites applied to a copy of the whole request. */
void apply_plan(uint8_t *buf, const plan_t *plan, const validate_params_t *p);
/* 1: the entries the append is due have room in the targets (whose buffers are then held until
 * index_release); 0: not. */
int index_prepare(index_update_t *ix, const plan_t *plan);
void index_release(index_update_t *ix);
/* The prepared entries written: 0 none, 1 the offset entry, 2 both. */
int index_write(index_update_t *ix, const plan_t *plan, long long base_offset, long long position);
/* The planned batches written at `position` of `fd`: 0, or -1 with an exception set (nothing
 * written then, or the write cut back). */
int append_planned(const uint8_t *data, int fd, long long position, const plan_t *plan,
                   const validate_params_t *p);
/* `size` bytes of `data`, already rewritten, written at `position` of `fd` the same way: 0, or
 * -1 with an exception set. */
int append_bytes(const uint8_t *data, Py_ssize_t size, int fd, long long position);

#endif
