/* cuda_checks.h: what test_cuda's three files share (test_cuda.c: op
 * checks, host checks, main; cuda_sample_checks.c: the GPU's greedy picks
 * and sampling; cuda_model_checks.c: whole-model checks). */
#ifndef MTPLX_TEST_CUDA_CHECKS_H
#define MTPLX_TEST_CUDA_CHECKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One check's line ("  ok  " or "  FAIL", then the message), counted for
 * the summary. */
void report(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* max |a - b| / max(max |b|, floor); NaN counts as an error */
double rel_err(const float *a, const float *b, int64_t n, double floor);

/* test_cuda.c's: the backend under test, random data (one seeded stream,
 * so every run draws the same), and a host array copied into a fresh
 * device buffer */
typedef struct mtplx_backend mtplx_backend;
extern mtplx_backend *gpu;
double urand(void);
float grand(void);
float *rand_vec(int64_t n, float sigma);
void *to_dev(const void *h, size_t bytes);

/* the token picks (cuda_sample_checks.c): argmax_rows and sample_rows
 * against the CPU sampler; test_sample_case one setting of it for V ids */
struct mtplx_sampler_params;
void test_argmax(void);
void test_sample(void);
void test_sample_case(const struct mtplx_sampler_params *sp, int64_t V, int trials);

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
