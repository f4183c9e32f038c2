/* cuda_checks.h: what test_cuda's two files share (test_cuda.c: op checks,
 * host checks, main; cuda_model_checks.c: whole-model checks). */
#ifndef MTPLX_TEST_CUDA_CHECKS_H
#define MTPLX_TEST_CUDA_CHECKS_H

#include <stdbool.h>
#include <stdint.h>

/* One check's line ("  ok  " or "  FAIL", then the message), counted for
 * the summary. */
void report(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* max |a - b| / max(max |b|, floor); NaN counts as an error */
double rel_err(const float *a, const float *b, int64_t n, double floor);

/* the whole-model checks (cuda_model_checks.c), each on a model file:
 * logits against the CPU within tol (mtp: greedy MTP == AR as well;
 * plain_prefill: one prefill of the whole prompt; i8: a context without a
 * head, so Q8_0 / Q4_K on the int8 GEMV), sampled generation, graphs and
 * PDL on == off (i8 as before), and a model too big refused */
void test_model(const char *path, double tol, bool mtp, bool plain_prefill, bool i8);
void test_sampled_gen(const char *path);
void test_graphs(const char *path, bool i8, int64_t from);
void test_fit(const char *path);

#endif
