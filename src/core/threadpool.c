/* threadpool.c: a fork-join pool for the forward pass.
 *
 * Each run() publishes (fn, arg) under a new generation number; workers spin
 * on the generation for a while before sleeping on a condition variable, so a
 * decode step that issues a few hundred small ops pays no futex wake-up per op.
 * The caller does the share of thread 0 and waits for the others to finish. */
#include "core/core.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>

#define SPIN_ITERS 100000

struct mtplx_threadpool {
    int n;
    pthread_t *threads;
    mtplx_task_fn fn;
    void *arg;
    atomic_uint gen;     /* bumped per run */
    atomic_int pending;  /* workers still busy in this run */
    atomic_int n_sleeping;
    atomic_bool stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

typedef struct {
    mtplx_threadpool *tp;
    int ith;
} worker_arg;

static inline void cpu_relax(void) { __builtin_ia32_pause(); }

static void *worker(void *p) {
    worker_arg *wa = p;
    mtplx_threadpool *tp = wa->tp;
    int ith = wa->ith;
    free(wa);
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&tp->gen, memory_order_acquire)) == seen &&
               !atomic_load(&tp->stop)) {
            if (++spins < SPIN_ITERS) {
                /* yield now and then: on an oversubscribed machine the thread
                 * we wait for may need this core */
                if (spins % 1024 == 0) sched_yield();
                else cpu_relax();
                continue;
            }
            pthread_mutex_lock(&tp->mu);
            atomic_fetch_add(&tp->n_sleeping, 1);
            while (atomic_load(&tp->gen) == seen && !atomic_load(&tp->stop))
                pthread_cond_wait(&tp->cv, &tp->mu);
            atomic_fetch_sub(&tp->n_sleeping, 1);
            pthread_mutex_unlock(&tp->mu);
            spins = 0;
        }
        if (atomic_load(&tp->stop)) return NULL;
        seen = g;
        tp->fn(tp->arg, ith, tp->n);
        atomic_fetch_sub_explicit(&tp->pending, 1, memory_order_release);
    }
}

mtplx_status mtplx_threadpool_new(int n_threads, mtplx_threadpool **out) {
    *out = NULL;
    if (n_threads < 1) n_threads = 1;
    mtplx_threadpool *tp = calloc(1, sizeof *tp);
    if (!tp) return mtplx_fail(MTPLX_ERR_NOMEM, "thread pool: out of memory");
    tp->n = n_threads;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv, NULL);
    tp->threads = calloc((size_t)n_threads, sizeof(pthread_t));
    if (!tp->threads) {
        free(tp);
        return mtplx_fail(MTPLX_ERR_NOMEM, "thread pool: out of memory");
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) {
            tp->n = i;
            mtplx_threadpool_free(tp);
            return mtplx_fail(MTPLX_ERR_NOMEM, "thread pool: out of memory");
        }
        wa->tp = tp;
        wa->ith = i;
        if (mtplx_thread_create(&tp->threads[i], worker, wa) != 0) {
            free(wa);
            tp->n = i;
            mtplx_threadpool_free(tp);
            return mtplx_fail(MTPLX_ERR_INTERNAL, "thread pool: cannot start thread %d", i);
        }
    }
    *out = tp;
    return MTPLX_OK;
}

int mtplx_thread_create(pthread_t *th, void *(*fn)(void *), void *arg) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(th, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

void mtplx_threadpool_free(mtplx_threadpool *tp) {
    if (!tp) return;
    pthread_mutex_lock(&tp->mu);
    atomic_store(&tp->stop, true);
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 1; i < tp->n; i++) pthread_join(tp->threads[i], NULL);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->cv);
    free(tp->threads);
    free(tp);
}

int mtplx_threadpool_size(const mtplx_threadpool *tp) { return tp ? tp->n : 1; }

void mtplx_threadpool_run(mtplx_threadpool *tp, mtplx_task_fn fn, void *arg) {
    if (!tp || tp->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    tp->fn = fn;
    tp->arg = arg;
    atomic_store_explicit(&tp->pending, tp->n - 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&tp->gen, 1, memory_order_release);
    if (atomic_load(&tp->n_sleeping) > 0) {
        pthread_mutex_lock(&tp->mu);
        pthread_cond_broadcast(&tp->cv);
        pthread_mutex_unlock(&tp->mu);
    }
    fn(arg, 0, tp->n);
    for (unsigned spins = 1; atomic_load_explicit(&tp->pending, memory_order_acquire) > 0; spins++) {
        if (spins % 256 == 0) sched_yield(); /* a worker may be waiting for a core */
        else cpu_relax();
    }
}
