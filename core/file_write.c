/* file_write.c: whole-file writes that never leave a truncated or partial file (file_write.h).
 * The data goes to an O_TMPFILE file, which has no name until linkat gives it one, so even a
 * kill -9 mid-write leaves nothing; a replacing write links it under a temporary name and
 * renames that over the destination (a kill between the two leaves a complete temporary file,
 * never a partial one). The directory is fsynced after the name changes. */
#include "core/file_write.h"
#include "core/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TEMP_NAME_TRIES 100

int file_dir_of(const char *path, char *dir, size_t len)
{
    const char *slash = strrchr(path, '/');
    int n = !slash ? snprintf(dir, len, ".") : slash == path ? snprintf(dir, len, "/")
                                                             : snprintf(dir, len, "%.*s", (int)(slash - path), path);
    return n >= 0 && (size_t)n < len;
}

static sj_status io_error(const char *what, const char *path)
{
    return error_set(SJ_ERR_IO, "cannot %s %s: %s", what, path, strerror(errno));
}

static sj_status write_all(int fd, const char *path, const void *data, size_t size)
{
    const char *p = data;
    while (size) {
        ssize_t n = write(fd, p, size);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            if (n == 0) errno = EIO;
            return io_error("write", path);
        }
        p += n;
        size -= (size_t)n;
    }
    return SJ_OK;
}

/* A device or FIFO cannot be renamed over: its own bytes are what the caller asked for. */
static sj_status write_in_place(const char *path, const void *data, size_t size)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return io_error("open", path);
    sj_status st = write_all(fd, path, data, size);
    if (close(fd) != 0 && st == SJ_OK) st = io_error("close", path);
    return st;
}

/* A name for path's temporary: ".BASE.tmp-PID-N" (with XXXXXX for mkstemp when mkstemp). */
static int temp_name(const char *dir, const char *path, int attempt, int mkstemp_form, char *buf, size_t len)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    int n = mkstemp_form ? snprintf(buf, len, "%s/.%s.tmp-XXXXXX", dir, base)
                         : snprintf(buf, len, "%s/.%s.tmp-%ld-%d-%ld", dir, base, (long)getpid(), attempt,
                                    (long)(clock() ^ time(NULL)));
    return n >= 0 && (size_t)n < len;
}

/* Gives the unnamed file open as fd the name dst; -1 with errno on failure (EEXIST included). */
static int link_unnamed(int fd, const char *dst)
{
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    if (linkat(AT_FDCWD, proc, AT_FDCWD, dst, AT_SYMLINK_FOLLOW) == 0) return 0;
    if (errno != ENOENT || access("/proc/self/fd", F_OK) == 0) return -1;
    return linkat(fd, "", AT_FDCWD, dst, AT_EMPTY_PATH); /* no /proc: needs CAP_DAC_READ_SEARCH */
}

/* Names the complete file (unnamed as fd, or at tmp) path; on failure tmp, when set, is left
 * for the caller to remove. */
static sj_status publish(int fd, char *tmp, size_t tmp_len, const char *dir, const char *path, int replace)
{
    if (!tmp[0] && !replace) {
        if (link_unnamed(fd, path) == 0) return SJ_OK;
        return errno == EEXIST ? error_set(SJ_ERR_IO, "%s already exists; refusing to overwrite it", path)
                               : io_error("create", path);
    }
    if (!tmp[0]) { /* replace: a temporary name first, then rename over path */
        int linked = -1;
        for (int i = 0; i < TEMP_NAME_TRIES && linked != 0; i++) {
            if (!temp_name(dir, path, i, 0, tmp, tmp_len))
                return error_set(SJ_ERR_INVALID_ARGUMENT, "path '%s' is too long", path);
            linked = link_unnamed(fd, tmp);
            if (linked != 0 && errno != EEXIST) break;
        }
        if (linked != 0) {
            sj_status st = io_error("create a temporary file next to", path);
            tmp[0] = 0;
            return st;
        }
    }
    if (replace) return rename(tmp, path) == 0 ? SJ_OK : io_error("rename a temporary file onto", path);
    /* no replace, a named temporary: link() refuses an existing path atomically; a file system
     * without hard links gets a checked rename (a race with another writer is then possible) */
    if (link(tmp, path) == 0) return unlink(tmp) == 0 ? SJ_OK : io_error("remove temporary", tmp);
    if (errno == EEXIST) return error_set(SJ_ERR_IO, "%s already exists; refusing to overwrite it", path);
    if (errno != EPERM && errno != ENOTSUP && errno != EOPNOTSUPP && errno != EMLINK) return io_error("create", path);
    if (access(path, F_OK) == 0) return error_set(SJ_ERR_IO, "%s already exists; refusing to overwrite it", path);
    return rename(tmp, path) == 0 ? SJ_OK : io_error("rename a temporary file onto", path);
}

static sj_status sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return io_error("open directory", dir);
    int bad = fsync(fd) != 0 && errno != EINVAL; /* some file systems cannot sync a directory */
    sj_status st = bad ? io_error("fsync directory", dir) : SJ_OK;
    close(fd);
    return st;
}

sj_status file_write_whole(const char *path, const void *data, size_t size, int replace)
{
    if (!path || !*path) return error_set(SJ_ERR_INVALID_ARGUMENT, "file path is %s", path ? "\"\"" : "NULL");
    if (size && !data) return error_set(SJ_ERR_INVALID_ARGUMENT, "writing %s: data is NULL", path);
    struct stat sb;
    if (stat(path, &sb) == 0) {
        if (!replace) return error_set(SJ_ERR_IO, "%s already exists; refusing to overwrite it", path);
        if (!S_ISREG(sb.st_mode)) return write_in_place(path, data, size);
    }
    char dir[1024], tmp[1200] = "";
    if (!file_dir_of(path, dir, sizeof dir)) return error_set(SJ_ERR_INVALID_ARGUMENT, "path '%s' is too long", path);
    int fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
        return io_error("create a file in", dir);
    if (fd < 0) { /* no O_TMPFILE here: a temporary name */
        if (!temp_name(dir, path, 0, 1, tmp, sizeof tmp))
            return error_set(SJ_ERR_INVALID_ARGUMENT, "path '%s' is too long", path);
        if ((fd = mkstemp(tmp)) < 0) return io_error("create a temporary file next to", path);
    }
    sj_status st = write_all(fd, path, data, size);
    if (st == SJ_OK && fsync(fd) != 0) st = io_error("fsync", path);
    if (st == SJ_OK) st = publish(fd, tmp, sizeof tmp, dir, path, replace);
    if (close(fd) != 0 && st == SJ_OK) st = io_error("close", path);
    if (st != SJ_OK && tmp[0]) unlink(tmp); /* best effort: the error reported is the one that matters */
    if (st == SJ_OK) st = sync_dir(dir);
    return st;
}
