/* Core-to-core round trip, for dlas.measure.placement.
 *
 * Two threads pinned to CPUs a and b pass one cache line back and forth `iters` times;
 * the result is nanoseconds per round trip. On the 2-vCPU cloud VMs dlas runs on it tells
 * where the hypervisor has placed the vCPUs right now: about 60-110 ns when they share a
 * core complex ("near"), 300-400 ns when they do not ("far"), and it flips every few
 * seconds to minutes. Every multi-threaded batch-1 inference pays this round trip at each
 * operator, so its timing moves with it (../../docs/timing.md).
 *
 * Returns -1 when a thread cannot be pinned (a CPU outside the allowed set) and -2 when
 * the partner thread cannot be started. The caller's own affinity is restored.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

static _Atomic int flag __attribute__((aligned(64)));
static _Atomic int ready __attribute__((aligned(64)));

static int pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

/* Compute speed on two CPUs at once: each of two threads, pinned to cpu_a and cpu_b,
 * runs a dependent multiply-add chain of `iters` steps; the result is the slower
 * thread's nanoseconds. A vCPU whose physical core is shared with another guest's busy
 * thread (or was preempted) runs it slower; the ping-pong cannot see that. */
struct worker { int cpu; long iters; double ns; unsigned long sink; };

static void *work_main(void *arg) {
  struct worker *w = arg;
  if (!pin(w->cpu)) { w->ns = -1.0; return 0; }
  unsigned long x = 88172645463325252UL;
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (long i = 0; i < w->iters; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
  clock_gettime(CLOCK_MONOTONIC, &b);
  w->sink = x;
  w->ns = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
  return 0;
}

double dlas_work_ns(int cpu_a, int cpu_b, long iters) {
  struct worker wa = {cpu_a, iters, 0, 0}, wb = {cpu_b, iters, 0, 0};
  pthread_t ta, tb;
  if (pthread_create(&ta, 0, work_main, &wa) != 0) return -2.0;
  if (pthread_create(&tb, 0, work_main, &wb) != 0) { pthread_join(ta, 0); return -2.0; }
  pthread_join(ta, 0);
  pthread_join(tb, 0);
  if (wa.ns < 0 || wb.ns < 0) return -1.0;
  return wa.ns > wb.ns ? wa.ns : wb.ns;
}

/* Cache contention on one CPU: nanoseconds per KiB of streaming reads over a buffer
 * sized like a recent core's L2 (768 KiB), best of `passes` passes, the caller pinned
 * to `cpu` meanwhile (its affinity restored). Measured on a 2-vCPU Zen 5 VM: in spells
 * when something else uses that vCPU's core caches (most likely another guest on its SMT
 * sibling), one-thread ONNX Runtime runs 25-45% slower and this reading rises 15-45% with
 * it (about 9 ns per KiB usually), while a dependent multiply-add chain (the clock) and
 * FMA throughput do not move: neither the ping-pong nor a compute probe can see it.
 * Returns -1 when the CPU cannot be used. */
#define STREAM_BYTES (768 * 1024)
typedef long long stream_vec __attribute__((vector_size(16)));
static stream_vec stream_buf[STREAM_BYTES / sizeof(stream_vec)];
static volatile long long stream_sink;

static double stream_ns(int passes) {
  const long n = STREAM_BYTES / sizeof(stream_vec);
  static int filled;
  if (!filled) { /* written once at run time, so the compiler cannot assume its content */
    for (long i = 0; i < n; i++) stream_buf[i] = (stream_vec){i, i + 1};
    filled = 1;
  }
  double best = -1.0;
  stream_vec acc = {0, 0};
  for (int p = 0; p <= passes; p++) { /* pass 0 brings the buffer into the caches */
    stream_vec s0 = acc, s1 = acc, s2 = acc, s3 = acc;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i += 4) {
      s0 += stream_buf[i]; s1 += stream_buf[i + 1]; s2 += stream_buf[i + 2]; s3 += stream_buf[i + 3];
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    acc = s0 + s1 + s2 + s3;
    double ns = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / (STREAM_BYTES / 1024.0);
    if (p > 0 && (best < 0 || ns < best)) best = ns;
  }
  stream_sink = acc[0] + acc[1];
  return best;
}

double dlas_cache_stream_ns(int cpu, int passes) {
  cpu_set_t saved;
  pthread_getaffinity_np(pthread_self(), sizeof saved, &saved);
  if (!pin(cpu)) return -1.0;
  double best = stream_ns(passes);
  pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
  return best;
}

/* A whole placement reading in one call: `bursts` round trips of `iters` between
 * cpu_a and cpu_b (rt_out[k], ns per round trip), then the cache reading of cpu_a by the
 * caller and of cpu_b by the partner, in that order (cache_out[0], cache_out[1]; passes
 * 0: not read). Returns `bursts`, or -1 / -2 (the file's head).
 *
 * Why one call: on these VMs every wake of an idle vCPU costs about one 4 ms scheduler
 * tick (the hypervisor), and a reading made of separate calls woke the other vCPU for
 * each burst's partner thread, for each join and for each migration of the caller to
 * read a cache: 12 ms a reading, two readings around every chunk, more than a small
 * model's chunk itself. Here the partner is started once, reads its own CPU's cache, and
 * the caller waits for it by spinning, not by joining: one wake per reading. */
static _Atomic int turn __attribute__((aligned(64)));
static _Atomic int done __attribute__((aligned(64)));

struct prober { int cpu; long iters; int passes; double cache; };

static void *prober_main(void *arg) {
  struct prober *p = arg;
  int ok = pin(p->cpu);
  atomic_store_explicit(&ready, ok ? 1 : -1, memory_order_release);
  if (!ok) return 0;
  for (long i = 0; i < p->iters; i++) {
    while (atomic_load_explicit(&flag, memory_order_acquire) != 1) {}
    atomic_store_explicit(&flag, 0, memory_order_release);
  }
  while (atomic_load_explicit(&turn, memory_order_acquire) != 1) {}
  p->cache = p->passes > 0 ? stream_ns(p->passes) : -1.0;
  atomic_store_explicit(&done, 1, memory_order_release); /* its last touch of *p */
  return 0;
}

int dlas_probe_ns(int cpu_a, int cpu_b, long iters, int bursts, int passes,
                  double *rt_out, double *cache_out) {
  cpu_set_t saved;
  pthread_getaffinity_np(pthread_self(), sizeof saved, &saved);
  if (!pin(cpu_a)) return -1;
  atomic_store(&flag, 0);
  atomic_store(&ready, 0);
  atomic_store(&turn, 0);
  atomic_store(&done, 0);
  struct prober p = {cpu_b, iters * bursts, passes, -1.0};
  pthread_t t;
  if (pthread_create(&t, 0, prober_main, &p) != 0) {
    pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
    return -2;
  }
  pthread_detach(t);
  while (atomic_load_explicit(&ready, memory_order_acquire) == 0) {}
  if (atomic_load(&ready) < 0) {
    pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
    return -1;
  }
  for (int k = 0; k < bursts; k++) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < iters; i++) {
      atomic_store_explicit(&flag, 1, memory_order_release);
      while (atomic_load_explicit(&flag, memory_order_acquire) != 0) {}
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    rt_out[k] = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / (double)iters;
  }
  cache_out[0] = passes > 0 ? stream_ns(passes) : -1.0;
  atomic_store_explicit(&turn, 1, memory_order_release);
  while (atomic_load_explicit(&done, memory_order_acquire) == 0) {}
  cache_out[1] = p.cache;
  pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
  return bursts;
}

/* One burst of `iters` round trips, no cache reading; -1 / -2 as the file's head says. */
double dlas_pingpong_ns(int cpu_a, int cpu_b, long iters) {
  double rt, cache[2];
  int got = dlas_probe_ns(cpu_a, cpu_b, iters, 1, 0, &rt, cache);
  return got == 1 ? rt : (double)got;
}
