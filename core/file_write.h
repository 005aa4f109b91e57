/* file_write.h: writing a whole file so that it appears complete or not at all (the cubin of
 * `sparsejit gen --cubin`, cache exports). */
#ifndef SJ_CORE_FILE_WRITE_H
#define SJ_CORE_FILE_WRITE_H

#include <stddef.h>

#include "sparsejit.h"

/* Writes size bytes to path. They go to an unnamed file in path's directory (O_TMPFILE; where
 * the file system lacks it, a temporary name that every error path removes), are fsynced, and
 * only then take path's name, so a full disk, an error or a kill leaves no partial file: path
 * keeps its earlier content, or stays absent. With replace 0 an existing path is refused
 * (SJ_ERR_IO, "already exists"), atomically; with replace 1 a regular file is replaced, and a
 * path that is not a regular file (a device, a FIFO, /dev/stdout) is written in place. */
sj_status file_write_whole(const char *path, const void *data, size_t size, int replace);

/* The directory part of path ("." when it has none) into dir (len bytes); 0 when it does not fit. */
int file_dir_of(const char *path, char *dir, size_t len);

#endif
