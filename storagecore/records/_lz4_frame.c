/* The LZ4 frames of Kafka batches, decompressed in one pass (compiled into
 * storagecore.records._native, see _native.c):
 *
 * lz4_frame_decompress(data, max_output_bytes) -> bytes | None
 *
 *   The content of the LZ4 frame at the start of `data` (bytes after the frame are ignored, as
 *   lz4.frame.decompress ignores them), decompressed block by block with liblz4's
 *   LZ4_decompress_safe into a buffer the thread keeps (up to SCRATCH_BYTES of output; larger
 *   output straight into the bytes object), then copied once into the bytes returned.
 *   lz4.frame.decompress, the reference, grows a buffer of unknown size, decompresses through
 *   liblz4's frame API (which copies blocks through its own buffer) and copies the result into
 *   a new bytes (callgrind, an lz4 append of 37 KB batches: as many memcpy instructions as
 *   LZ4_decompress_safe's own; in time, 60-62 us against 67-88 a 215 KB batch).
 *
 *   Only the common frame is taken: independent blocks (Kafka's producers and lz4-java write
 *   nothing else, and Kafka refuses linked ones), no block or content checksum, no dictionary
 *   id, with or without a content size. Anything else returns None, and so does anything
 *   invalid (a wrong magic, version or header checksum, reserved bits set, a block longer than
 *   the frame's block size or than the data, a block liblz4 cannot decode, a content size not
 *   met) and any output over max_output_bytes: the caller then decompresses with lz4.frame,
 *   which words the error. So this never accepts what the reference refuses, and returns the
 *   reference's bytes for what it accepts, as long as both use the same liblz4 (lz4_version()
 *   is compared with the lz4 package's by storagecore/records/codecs.py).
 *
 * lz4_version() -> int: LZ4_versionNumber() of the liblz4 loaded, 0 when none could be.
 *
 * lz4_matches_package(flag): codecs.py says whether this liblz4 is the lz4 package's (it finds
 * out on its first lz4 batch, without importing lz4 before: a process that meets no lz4 batch
 * never imports it).
 *
 * storagecore_lz4_frame_decode (C only): the same decode into the thread's buffer, for the
 * native append's validation of lz4 batches (_append.c), which declines what this declines,
 * and everything until lz4_matches_package(True).
 *
 * liblz4 is Debian's liblz4-1 (a dependency of systemd and apt, so on every machine and image
 * of this project), loaded with dlopen at import: no headers, nothing at build time, and
 * without it the function returns None (the lz4 package, which bundles its own liblz4, does
 * the work as before).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LZ4F_MAGIC 0x184D2204u
#define FLG_VERSION_MASK 0xC0
#define FLG_VERSION_01 0x40
#define FLG_INDEPENDENT 0x20
#define FLG_BLOCK_CHECKSUM 0x10
#define FLG_CONTENT_SIZE 0x08
#define FLG_CONTENT_CHECKSUM 0x04
#define FLG_RESERVED 0x02
#define FLG_DICT_ID 0x01
#define BLOCK_UNCOMPRESSED 0x80000000u
/* Decompression this size and larger runs without the GIL (as the lz4 package's does). */
#define RELEASE_GIL_BYTES (64 * 1024)
/* Output up to this size is decoded into a buffer each thread keeps, then copied into the bytes
 * returned; larger output straight into the bytes. */
#define SCRATCH_BYTES (1024 * 1024)

typedef int (*decompress_safe_t)(const char *src, char *dst, int compressed, int capacity);
static decompress_safe_t lz4_decompress_safe;
static int lz4_version_number;
/* Set by storagecore/records/codecs.py once it has found this liblz4 to be the lz4 package's
 * (lz4_matches_package): only then does the native append decode lz4 batches itself. */
static int lz4_matches_package;

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint32_t rotl32(uint32_t x, int r) { return x << r | x >> (32 - r); }

/* XXH32 with seed 0 of fewer than 16 bytes (a frame descriptor: 2 or 10 here), the header
 * checksum's hash. */
static uint32_t xxh32_short(const uint8_t *p, size_t n) {
    const uint32_t prime1 = 2654435761u, prime2 = 2246822519u, prime3 = 3266489917u,
                   prime4 = 668265263u, prime5 = 374761393u;
    uint32_t h = prime5 + (uint32_t)n;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) h = rotl32(h + le32(p + i) * prime3, 17) * prime4;
    for (; i < n; i++) h = rotl32(h + p[i] * prime5, 11) * prime1;
    h ^= h >> 15;
    h *= prime2;
    h ^= h >> 13;
    h *= prime3;
    h ^= h >> 16;
    return h;
}

/* One block to decode: where its bytes are, how many, whether stored uncompressed. */
typedef struct {
    const uint8_t *data;
    uint32_t size;
    int stored;
} block_t;

/* The frame's blocks, checked against the data's length and the block size (no decoding):
 * their number, or -1 when the frame is not the common one or not whole. *bound: the most
 * output they can make; *block_bytes: the frame's block size (the most one block decodes to). */
static Py_ssize_t frame_blocks(const uint8_t *p, Py_ssize_t n, block_t *blocks, Py_ssize_t room,
                               long long *content_size, long long *bound,
                               uint32_t *block_bytes) {
    if (n < 7 || le32(p) != LZ4F_MAGIC) return -1;
    uint8_t flg = p[4], bd = p[5];
    if ((flg & FLG_VERSION_MASK) != FLG_VERSION_01 || !(flg & FLG_INDEPENDENT) ||
        (flg & (FLG_BLOCK_CHECKSUM | FLG_CONTENT_CHECKSUM | FLG_RESERVED | FLG_DICT_ID)))
        return -1;
    int size_id = bd >> 4 & 0x07;
    if ((bd & 0x8F) || size_id < 4) return -1;
    uint32_t block_max = 1u << (8 + 2 * size_id); /* 4: 64 KiB ... 7: 4 MiB */
    Py_ssize_t descriptor = flg & FLG_CONTENT_SIZE ? 10 : 2;
    if (n < 4 + descriptor + 1) return -1;
    *content_size = -1;
    if (flg & FLG_CONTENT_SIZE) {
        uint64_t size = (uint64_t)le32(p + 6) | (uint64_t)le32(p + 10) << 32;
        if (size == 0 || size > (uint64_t)PY_SSIZE_T_MAX) return -1; /* 0: "unknown" to liblz4 */
        *content_size = (long long)size;
    }
    if ((uint8_t)(xxh32_short(p + 4, (size_t)descriptor) >> 8) != p[4 + descriptor]) return -1;
    Py_ssize_t pos = 4 + descriptor + 1, count = 0;
    *block_bytes = block_max;
    *bound = 0;
    for (;;) {
        if (n - pos < 4) return -1;
        uint32_t word = le32(p + pos);
        pos += 4;
        if (word == 0) return count; /* the end mark */
        uint32_t size = word & ~BLOCK_UNCOMPRESSED;
        if (size == 0 || size > block_max || (Py_ssize_t)size > n - pos || count == room) return -1;
        int stored = (word & BLOCK_UNCOMPRESSED) != 0;
        blocks[count++] = (block_t){p + pos, size, stored};
        /* A compressed block expands at most about 255-fold (each match length byte of 255). */
        uint64_t most = stored ? size : (uint64_t)size * 256 + 64;
        *bound += (long long)(most < block_max ? most : block_max);
        pos += size;
    }
}

/* Decode the blocks into out (capacity bytes); the bytes written, or -1 when a block does not
 * decode, decodes to more than block_bytes (liblz4's frame API refuses that too) or does not
 * fit. */
static Py_ssize_t decode_blocks(const block_t *blocks, Py_ssize_t count, uint32_t block_bytes,
                                char *out, Py_ssize_t capacity) {
    Py_ssize_t written = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t room = capacity - written;
        if (blocks[i].stored) {
            if ((Py_ssize_t)blocks[i].size > room) return -1;
            memcpy(out + written, blocks[i].data, blocks[i].size);
            written += blocks[i].size;
            continue;
        }
        int limit = room > (Py_ssize_t)block_bytes ? (int)block_bytes : (int)room;
        int done = lz4_decompress_safe((const char *)blocks[i].data, out + written,
                                       (int)blocks[i].size, limit);
        if (done < 0) return -1;
        written += done;
    }
    return written;
}

/* Each thread's decode buffer (freed when the thread ends). Decoding into a new bytes object
 * instead cost more than the copies it saves: a fresh allocation of a few hundred KiB is often
 * fresh pages from the kernel (glibc trims the heap's top and maps large blocks), faulted in
 * one by one as the decoder writes them: 155-185 us a 215 KB batch against 44 us, between
 * appends and writes (the lz4 package's last step is a copy into a bytes of the exact size
 * too). */
typedef struct {
    char *data; /* SCRATCH_BYTES, allocated on first use */
} scratch_t;

static pthread_key_t scratch_key;
static int scratch_key_made;

static void scratch_free(void *pointer) {
    scratch_t *scratch = (scratch_t *)pointer;
    free(scratch->data);
    free(scratch);
}

/* This thread's buffer of SCRATCH_BYTES, or NULL when memory is short. */
static char *scratch_buffer(void) {
    if (!scratch_key_made) return NULL;
    scratch_t *scratch = (scratch_t *)pthread_getspecific(scratch_key);
    if (scratch == NULL) {
        scratch = (scratch_t *)calloc(1, sizeof *scratch);
        if (scratch == NULL) return NULL;
        if (pthread_setspecific(scratch_key, scratch) != 0) {
            free(scratch);
            return NULL;
        }
    }
    if (scratch->data == NULL) scratch->data = (char *)malloc(SCRATCH_BYTES);
    return scratch->data;
}

/* Decode into out (capacity bytes), without the GIL when the output may be large. */
static Py_ssize_t decode_unlocked(const block_t *blocks, Py_ssize_t count, uint32_t block_bytes,
                                  char *out, Py_ssize_t capacity) {
    Py_ssize_t written;
    if (capacity >= RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        written = decode_blocks(blocks, count, block_bytes, out, capacity);
        Py_END_ALLOW_THREADS
    } else {
        written = decode_blocks(blocks, count, block_bytes, out, capacity);
    }
    return written;
}

/* A frame ready to decode: its blocks, its declared content size (-1: none) and the bytes to
 * decode into (the content size, else the blocks' bound capped at the caller's maximum). A
 * batch's frame has a few blocks (a 16 KiB producer batch one, 1 MiB of records 16); more than
 * fit here are declined (the reference takes them). */
#define PLAN_BLOCKS 256
typedef struct {
    block_t blocks[PLAN_BLOCKS];
    Py_ssize_t count;
    long long content_size;
    uint32_t block_bytes;
    Py_ssize_t capacity;
} frame_plan_t;

/* 0 with *plan filled for the frame at data[0..n) when its output fits in max_output bytes;
 * -1 for what lz4_frame_decompress declines. */
static int plan_frame(const uint8_t *data, Py_ssize_t n, Py_ssize_t max_output,
                      frame_plan_t *plan) {
    long long bound;
    plan->count = frame_blocks(data, n, plan->blocks, PLAN_BLOCKS, &plan->content_size, &bound,
                               &plan->block_bytes);
    if (plan->count < 0 || plan->content_size > bound) return -1;
    plan->capacity = plan->content_size >= 0         ? (Py_ssize_t)plan->content_size
                     : bound < (long long)max_output ? (Py_ssize_t)bound
                                                     : max_output;
    return plan->capacity > max_output ? -1 : 0;
}

/* The planned frame decoded into out (plan->capacity bytes): the bytes written, or -1 when a
 * block does not decode or the declared content size is not met. */
static Py_ssize_t decode_planned(const frame_plan_t *plan, char *out) {
    Py_ssize_t written = decode_unlocked(plan->blocks, plan->count, plan->block_bytes, out,
                                         plan->capacity);
    if (written < 0 || (plan->content_size >= 0 && written != plan->content_size)) return -1;
    return written;
}

PyObject *storagecore_lz4_frame_decompress(PyObject *self, PyObject *const *args,
                                           Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "lz4_frame_decompress takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    Py_ssize_t max_output = PyLong_AsSsize_t(args[1]);
    if (max_output == -1 && PyErr_Occurred()) return NULL;
    if (lz4_decompress_safe == NULL) Py_RETURN_NONE;
    Py_buffer data;
    if (PyObject_GetBuffer(args[0], &data, PyBUF_SIMPLE) < 0) return NULL;
    frame_plan_t plan;
    PyObject *result = NULL;
    if (plan_frame((const uint8_t *)data.buf, data.len, max_output, &plan) < 0) goto decline;
    Py_ssize_t written;
    char *scratch = plan.capacity <= SCRATCH_BYTES ? scratch_buffer() : NULL;
    if (scratch != NULL) {
        written = decode_planned(&plan, scratch);
        if (written < 0) goto decline;
        result = PyBytes_FromStringAndSize(scratch, written);
        goto done;
    }
    result = PyBytes_FromStringAndSize(NULL, plan.capacity);
    if (result == NULL) goto done;
    written = decode_planned(&plan, PyBytes_AS_STRING(result));
    if (written < 0) {
        Py_CLEAR(result);
        goto decline;
    }
    /* On failure the resize leaves result NULL with the error set. */
    if (written != plan.capacity) _PyBytes_Resize(&result, written);
    goto done;
decline:
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&data);
    return result;
}

/* The frame at data[0..n) decoded into this thread's buffer, for the native append's
 * validation (_append.c): its length, with *out set (valid until this thread's next decode),
 * or -1 for anything lz4_frame_decompress would return None for, and for output past the
 * buffer (SCRATCH_BYTES, far below the Python path's bound): the caller then leaves the
 * request to the Python path. Call with the GIL; it is released while large output decodes. */
Py_ssize_t storagecore_lz4_frame_decode(const uint8_t *data, Py_ssize_t n, const uint8_t **out) {
    if (lz4_decompress_safe == NULL || !lz4_matches_package) return -1;
    frame_plan_t plan;
    if (plan_frame(data, n, SCRATCH_BYTES, &plan) < 0) return -1;
    char *scratch = scratch_buffer();
    if (scratch == NULL) return -1;
    Py_ssize_t written = decode_planned(&plan, scratch);
    if (written >= 0) *out = (const uint8_t *)scratch;
    return written;
}

PyObject *storagecore_lz4_matches_package(PyObject *self, PyObject *flag) {
    int matches = PyObject_IsTrue(flag);
    if (matches < 0) return NULL;
    lz4_matches_package = matches && lz4_decompress_safe != NULL;
    Py_RETURN_NONE;
}

PyObject *storagecore_lz4_version(PyObject *self, PyObject *unused) {
    return PyLong_FromLong(lz4_version_number);
}

/* Load liblz4 (once, at import); without it lz4_frame_decompress returns None. */
void storagecore_lz4_frame_init(void) {
    scratch_key_made = pthread_key_create(&scratch_key, scratch_free) == 0;
    void *library = dlopen("liblz4.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) return;
    int (*version)(void) = (int (*)(void))dlsym(library, "LZ4_versionNumber");
    decompress_safe_t decompress = (decompress_safe_t)dlsym(library, "LZ4_decompress_safe");
    if (version == NULL || decompress == NULL) {
        dlclose(library);
        return;
    }
    lz4_version_number = version();
    lz4_decompress_safe = decompress;
}
