/* A slow disk for the tests (scripts/test, "the store's tests on a slow disk"): preloaded with
 * LD_PRELOAD, every fsync and fdatasync of the process first sleeps SLOW_SYNC_US microseconds
 * (10,000 by default), then syncs. The official CI's disk was slow enough to fail a test that
 * passed on every fast one (a quiet spell its commits never ended); with this, such a test
 * fails on any machine. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

static void slow(void) {
    const char *us = getenv("SLOW_SYNC_US");
    usleep(us ? (useconds_t)atoi(us) : 10000);
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    slow();
    return real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    slow();
    return real(fd);
}
