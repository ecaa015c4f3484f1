/*
 * A slower disk for the durable-ingest benchmarks (bench/README.md, "A slower disk"): preloaded into a process, it
 * makes every fsync and fdatasync take SLOW_SYNC_US microseconds longer than the disk's own, as an SD card, an
 * eMMC or an SSD without power-loss protection does (milliseconds per flush). Only the flush is slowed; reads and
 * writes are the machine's. Build and use:
 *   cc -O2 -shared -fPIC -o /tmp/slow-sync.so bench/slow-sync.c -ldl
 *   SLOW_SYNC_US=5000 LD_PRELOAD=/tmp/slow-sync.so node dist/bench/persistence.js --scenarios throughput
 * (the preload is inherited by the brokers the bench starts, and the `store` row runs in the bench process itself).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

static void wait_like_a_slow_disk(void) {
  static long us = -1;
  if (us < 0) {
    const char *s = getenv("SLOW_SYNC_US");
    us = s ? atol(s) : 0;
  }
  if (us <= 0) return;
  struct timespec t = { us / 1000000, (us % 1000000) * 1000 };
  while (nanosleep(&t, &t) != 0) {}
}

/* Calls the C library's `name` (looked up once into `*real`), then waits. */
static int flush_then_wait(const char *name, int (**real)(int), int fd) {
  if (!*real) *real = (int (*)(int))dlsym(RTLD_NEXT, name);
  int r = (*real)(fd);
  wait_like_a_slow_disk();
  return r;
}

int fdatasync(int fd) {
  static int (*real)(int);
  return flush_then_wait("fdatasync", &real, fd);
}

int fsync(int fd) {
  static int (*real)(int);
  return flush_then_wait("fsync", &real, fd);
}
