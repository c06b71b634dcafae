/* LD_PRELOAD shim: shifts this process's wall clock (CLOCK_REALTIME, gettimeofday, time) by
 * REDIS_LEASE_SKEW_MS milliseconds (may be negative). Monotonic clocks are untouched. Built by
 * the cluster torture run with gcc and preloaded into one master only. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static long long skew_ns(void) {
    static long long v = 0;
    static int read = 0;
    if (!read) {
        const char *s = getenv("REDIS_LEASE_SKEW_MS");
        v = s ? atoll(s) * 1000000LL : 0;
        read = 1;
    }
    return v;
}

static void shift(struct timespec *ts) {
    long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + skew_ns();
    ts->tv_sec = (time_t)(ns / 1000000000LL);
    ts->tv_nsec = (long)(ns % 1000000000LL);
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    static int (*real)(clockid_t, struct timespec *) = 0;
    if (!real) real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    int r = real(id, ts);
    if (r == 0 && ts && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) shift(ts);
    return r;
}

int gettimeofday(struct timeval *tv, void *tz) {
    struct timespec ts;
    int r = clock_gettime(CLOCK_REALTIME, &ts);
    (void)tz;
    if (r == 0 && tv) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return r;
}

time_t time(time_t *t) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (t) *t = ts.tv_sec;
    return ts.tv_sec;
}
