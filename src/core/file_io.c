/* Opening files for reading (regular files only, never blocking on a FIFO) and writing
 * them atomically (temporary file beside the target, renamed over it): see file_io.h. */
#define _XOPEN_SOURCE 700 /* realpath */
#include "stride/file_io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *st_file_kind_name(unsigned int st_mode) {
    const mode_t m = (mode_t)st_mode;
    if (S_ISREG(m)) return "a regular file";
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISLNK(m)) return "a symbolic link";
    return "a special file";
}

st_status st_file_open_read(const char *path, const char *what, int *fd, uint64_t *size, st_error *err) {
    *fd = -1;
    if (size) *size = 0;
    /* O_NONBLOCK: opening a FIFO without a writer (or a device that waits for carrier)
     * returns at once, so that fstat can refuse it instead of hanging in open(). */
    int d = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (d < 0) return st_error_set(err, ST_ERROR_IO, "cannot open %s %s: %s", what, path, strerror(errno));
    struct stat st;
    if (fstat(d, &st) != 0) {
        int e = errno;
        close(d);
        return st_error_set(err, ST_ERROR_IO, "cannot stat %s %s: %s", what, path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(d);
        return st_error_set(err, ST_ERROR_IO, "%s %s is %s, not a regular file", what, path,
                            st_file_kind_name((unsigned)st.st_mode));
    }
    int flags = fcntl(d, F_GETFL);
    if (flags < 0 || fcntl(d, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(d);
        return st_error_set(err, ST_ERROR_IO, "cannot read %s %s: %s", what, path, strerror(e));
    }
    *fd = d;
    if (size) *size = st.st_size > 0 ? (uint64_t)st.st_size : 0;
    return ST_OK;
}

st_status st_file_fopen_read(const char *path, const char *what, FILE **out, uint64_t *size, st_error *err) {
    *out = NULL;
    int fd;
    st_status s = st_file_open_read(path, what, &fd, size, err);
    if (s != ST_OK) return s;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        return st_error_set(err, ST_ERROR_IO, "cannot read %s %s: %s", what, path, strerror(e));
    }
    *out = f;
    return ST_OK;
}

/* ---- atomic writes -------------------------------------------------------------------- */

struct st_atomic_file {
    char *path;   /* as given */
    char *target; /* what the rename replaces: path, or the file a symbolic link names */
    char *temp;   /* beside target */
    FILE *fp;
};

static void atomic_free(st_atomic_file *a) {
    free(a->path);
    free(a->target);
    free(a->temp);
    free(a);
}

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

/* "<dir>/.<base>.tmp-<pid>-<n>" for target "<dir>/<base>" ("." + base when target has no
 * directory part). */
static char *temp_name(const char *target, unsigned long n) {
    const char *slash = strrchr(target, '/');
    size_t dir_len = slash ? (size_t)(slash - target) + 1 : 0;
    const char *base = slash ? slash + 1 : target;
    size_t cap = dir_len + strlen(base) + 64;
    char *t = malloc(cap);
    if (!t) return NULL;
    memcpy(t, target, dir_len);
    snprintf(t + dir_len, cap - dir_len, ".%s.tmp-%ld-%lu", base, (long)getpid(), n);
    return t;
}

/* Where the rename goes, after checking what is there now: absent (new file), a regular
 * file (*had_mode its mode), or a symbolic link to a regular file (*target its path). */
static st_status check_target(st_atomic_file *a, bool *existed, mode_t *mode, st_error *err) {
    struct stat st;
    *existed = false;
    if (lstat(a->path, &st) != 0) {
        if (errno == ENOENT) {
            a->target = dup_str(a->path);
            return a->target ? ST_OK : st_error_set(err, ST_ERROR_NOMEM, "out of memory");
        }
        return st_error_set(err, ST_ERROR_IO, "cannot write %s: %s", a->path, strerror(errno));
    }
    if (S_ISLNK(st.st_mode)) {
        char *resolved = realpath(a->path, NULL);
        if (!resolved) {
            if (errno == ENOENT)
                return st_error_set(err, ST_ERROR_IO,
                                    "cannot write %s: it is a symbolic link to a file that does not exist (stride "
                                    "replaces the file a link names, and creates none through a dangling link)",
                                    a->path);
            return st_error_set(err, ST_ERROR_IO, "cannot write %s: resolving the symbolic link: %s", a->path,
                                strerror(errno));
        }
        if (stat(resolved, &st) != 0 || !S_ISREG(st.st_mode)) {
            st_status s = st_error_set(err, ST_ERROR_IO,
                                       "cannot write %s: it is a symbolic link to %s, which is %s, not a regular file",
                                       a->path, resolved, st_file_kind_name((unsigned)st.st_mode));
            free(resolved);
            return s;
        }
        a->target = resolved;
    } else if (!S_ISREG(st.st_mode)) {
        return st_error_set(err, ST_ERROR_IO, "cannot write %s: it is %s, not a regular file (stride writes and "
                            "replaces only regular files)", a->path, st_file_kind_name((unsigned)st.st_mode));
    } else {
        a->target = dup_str(a->path);
        if (!a->target) return st_error_set(err, ST_ERROR_NOMEM, "out of memory");
    }
    *existed = true;
    *mode = st.st_mode & 07777;
    return ST_OK;
}

st_status st_atomic_file_check(const char *path, st_error *err) {
    if (!path || !*path) return st_error_set(err, ST_ERROR_INVALID, "no output path given");
    st_atomic_file a = {.path = dup_str(path)};
    if (!a.path) return st_error_set(err, ST_ERROR_NOMEM, "out of memory");
    bool existed;
    mode_t mode;
    st_status s = check_target(&a, &existed, &mode, err);
    if (s == ST_OK) {
        /* the temporary file is created beside the target: its directory must take a new file */
        const char *slash = strrchr(a.target, '/');
        char *dir = slash ? dup_str(a.target) : NULL;
        if (dir) dir[slash == a.target ? 1 : slash - a.target] = '\0';
        if (slash && !dir) s = st_error_set(err, ST_ERROR_NOMEM, "out of memory");
        else if (access(dir ? dir : ".", W_OK | X_OK) != 0)
            s = st_error_set(err, ST_ERROR_IO, "cannot write %s: the directory %s: %s", path, dir ? dir : ".",
                             strerror(errno));
        free(dir);
    }
    free(a.path);
    free(a.target);
    return s;
}

st_status st_atomic_file_open(const char *path, st_atomic_file **out, st_error *err) {
    *out = NULL;
    if (!path || !*path) return st_error_set(err, ST_ERROR_INVALID, "no output path given");
    st_atomic_file *a = calloc(1, sizeof(*a));
    if (!a || !(a->path = dup_str(path))) {
        free(a);
        return st_error_set(err, ST_ERROR_NOMEM, "out of memory opening %s", path);
    }
    bool existed;
    mode_t mode = 0;
    st_status s = check_target(a, &existed, &mode, err);
    if (s != ST_OK) {
        atomic_free(a);
        return s;
    }
    /* a name nobody else uses: pid, the clock and the attempt, created exclusively */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int fd = -1, e = 0;
    for (unsigned long attempt = 0; attempt < 64 && fd < 0; attempt++) {
        free(a->temp);
        a->temp = temp_name(a->target, ((unsigned long)ts.tv_nsec ^ ((unsigned long)ts.tv_sec << 20)) + attempt * 7919);
        if (!a->temp) {
            atomic_free(a);
            return st_error_set(err, ST_ERROR_NOMEM, "out of memory opening %s", path);
        }
        fd = open(a->temp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        e = errno;
        if (fd < 0 && e != EEXIST) break;
    }
    if (fd < 0) {
        const char *slash = strrchr(a->target, '/');
        int dir_len = slash ? (int)(slash - a->target) : 1;
        s = st_error_set(err, ST_ERROR_IO,
                         "cannot write %s: cannot create a file in %.*s: %s (does the directory exist and is it "
                         "writable?)",
                         path, dir_len > 0 ? dir_len : 1, slash ? (dir_len > 0 ? a->target : "/") : ".", strerror(e));
        atomic_free(a);
        return s;
    }
    if (existed) (void)fchmod(fd, mode); /* the replacement keeps the file's permissions */
    a->fp = fdopen(fd, "wb");
    if (!a->fp) {
        e = errno;
        close(fd);
        unlink(a->temp);
        atomic_free(a);
        return st_error_set(err, ST_ERROR_IO, "cannot write %s: %s", path, strerror(e));
    }
    *out = a;
    return ST_OK;
}

FILE *st_atomic_file_stream(st_atomic_file *a) { return a->fp; }
const char *st_atomic_file_path(const st_atomic_file *a) { return a->path; }
const char *st_atomic_file_temp_path(const st_atomic_file *a) { return a->temp; }

st_status st_atomic_file_commit(st_atomic_file *a, st_error *err) {
    int e = 0;
    if (ferror(a->fp)) e = errno ? errno : EIO;
    if (!e && fflush(a->fp) != 0) e = errno ? errno : EIO;
    /* the rename must not publish a file whose bytes are not on disk yet */
    if (!e && fsync(fileno(a->fp)) != 0 && errno != EINVAL) e = errno;
    if (fclose(a->fp) != 0 && !e) e = errno ? errno : EIO;
    a->fp = NULL;
    if (!e && rename(a->temp, a->target) != 0) e = errno;
    st_status s = ST_OK;
    if (e) {
        unlink(a->temp);
        s = st_error_set(err, ST_ERROR_IO, "cannot write %s: %s (%s is unchanged)", a->path, strerror(e), a->path);
    }
    atomic_free(a);
    return s;
}

void st_atomic_file_abort(st_atomic_file *a) {
    if (!a) return;
    if (a->fp) fclose(a->fp);
    unlink(a->temp);
    atomic_free(a);
}
