/* util.c: logging, allocation, time and file helpers. */
#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int log_level = -1;

void mtplx_log_set_level(int level) { log_level = level; }

void mtplx_log(int level, const char *fmt, ...) {
    if (log_level < 0) {
        const char *e = getenv("MTPLX_LOG");
        log_level = MTPLX_LOG_WARN;
        if (e) {
            if (!strcmp(e, "debug")) log_level = MTPLX_LOG_DEBUG;
            else if (!strcmp(e, "info")) log_level = MTPLX_LOG_INFO;
            else if (!strcmp(e, "error")) log_level = MTPLX_LOG_ERROR;
        }
    }
    if (level < log_level) return;
    static const char *names[] = {"debug", "info", "warn", "error"};
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mtplx %s: ", names[level & 3]);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void *mtplx_aligned_alloc(size_t align, size_t size) {
    void *p = NULL;
    if (size == 0) size = align;
    if (posix_memalign(&p, align, size) != 0) return NULL;
    return p;
}

char *mtplx_strdup(const char *s) { return s ? mtplx_strndup(s, strlen(s)) : NULL; }

char *mtplx_strndup(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

double mtplx_time_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

mtplx_status mtplx_mmap_open(const char *path, mtplx_mmap *out) {
    out->data = NULL;
    out->size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return mtplx_fail(MTPLX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return mtplx_fail(MTPLX_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return mtplx_fail(MTPLX_ERR_IO, "%s: is a directory, expected a file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: file is empty", path);
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return mtplx_fail(MTPLX_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
    out->data = p;
    out->size = (size_t)st.st_size;
    return MTPLX_OK;
}

void mtplx_mmap_close(mtplx_mmap *m) {
    if (m && m->data) munmap(m->data, m->size);
    if (m) {
        m->data = NULL;
        m->size = 0;
    }
}

mtplx_status mtplx_read_file(const char *path, char **out, size_t *len) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return mtplx_fail(MTPLX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf) {
        fclose(f);
        return mtplx_fail(MTPLX_ERR_NOMEM, "%s: out of memory", path);
    }
    for (;;) {
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                fclose(f);
                return mtplx_fail(MTPLX_ERR_NOMEM, "%s: out of memory", path);
            }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return mtplx_fail(MTPLX_ERR_IO, "%s: read error", path);
    }
    buf[n] = 0;
    *out = buf;
    if (len) *len = n;
    return MTPLX_OK;
}

bool mtplx_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

bool mtplx_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

mtplx_status mtplx_path_join(char *buf, size_t cap, const char *dir, const char *name) {
    size_t dl = strlen(dir);
    int n = snprintf(buf, cap, "%s%s%s", dir, (dl && dir[dl - 1] == '/') ? "" : "/", name);
    if (n < 0 || (size_t)n >= cap) return mtplx_fail(MTPLX_ERR_ARG, "path too long: %s/%s", dir, name);
    return MTPLX_OK;
}
