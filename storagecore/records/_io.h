/* Positional reads for the C speed-ups that read a .log file themselves (_headers.c's producer
 * walk, _fetch.c's read by offset), written once. Call without the GIL.
 *
 * Include Python.h (or stdint.h and sys/types.h) before this header.
 */
#ifndef STORAGECORE_RECORDS_IO_H
#define STORAGECORE_RECORDS_IO_H

#include <errno.h>
#include <stdint.h>
#include <unistd.h>

/* Bytes read at `position` into buf (fewer only at the end of the file); -1 with errno. */
static Py_ssize_t pread_full(int fd, uint8_t *buf, Py_ssize_t want, int64_t position) {
    Py_ssize_t got = 0;
    while (got < want) {
        ssize_t n = pread(fd, buf + got, (size_t)(want - got), (off_t)(position + got));
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (n == 0) break;
        got += n;
    }
    return got;
}

#endif
