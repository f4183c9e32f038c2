/* test_util.h: helpers shared by the model / engine tests: a tiny random
 * checkpoint built in memory (any supported architecture, optional MTP
 * head), with the stories260K tokenizer borrowed for its vocabulary. */
#ifndef MTPLX_TEST_UTIL_H
#define MTPLX_TEST_UTIL_H

#pragma GCC diagnostic ignored "-Wunused-function"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "engine/engine.h"
#include "formats/formats.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STORIES MTPLX_SHARED_DIR "/models/stories260K/stories260K.bin"

static uint64_t tu_rng = 88172645463325252ull;
/* >= 0: tu_random_model builds the bigram trunk + matching head (see there) */
static float tu_bigram_noise = -1.0f;
static float tu_randn(void) {
    /* xorshift + Box-Muller: reproducible across runs */
    double u[2];
    for (int i = 0; i < 2; i++) {
        tu_rng ^= tu_rng << 13;
        tu_rng ^= tu_rng >> 7;
        tu_rng ^= tu_rng << 17;
        u[i] = ((tu_rng >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    }
    return (float)(sqrt(-2 * log(u[0])) * cos(6.283185307179586 * u[1]));
}

static void tu_tensor(mtplx_gguf *g, const char *name, int64_t ne0, int64_t ne1, float scale,
                      float mean) {
    int64_t n = ne0 * ne1;
    float *d = malloc((size_t)n * sizeof(float));
    assert_non_null(d);
    for (int64_t i = 0; i < n; i++) d[i] = mean + scale * tu_randn();
    int64_t ne[2] = {ne0, ne1};
    assert_int_equal(mtplx_gguf_add_tensor(g, name, MTPLX_TYPE_F32, ne1 > 1 ? 2 : 1, ne, d, true),
                     MTPLX_OK);
}

static void tu_layer(mtplx_gguf *g, int b, int e, int nh, int nkv, int hd, int ff) {
    char n[96];
#define T(s, a, c, sc, mu) (snprintf(n, sizeof n, "blk.%d." s, b), tu_tensor(g, n, a, c, sc, mu))
    T("attn_norm.weight", e, 1, 0.1f, 1.0f);
    T("attn_q.weight", e, nh * hd, 1.0f / sqrtf((float)e), 0);
    T("attn_k.weight", e, nkv * hd, 1.0f / sqrtf((float)e), 0);
    T("attn_v.weight", e, nkv * hd, 1.0f / sqrtf((float)e), 0);
    T("attn_output.weight", nh * hd, e, 1.0f / sqrtf((float)(nh * hd)), 0);
    T("attn_q_norm.weight", hd, 1, 0.1f, 1.0f);
    T("attn_k_norm.weight", hd, 1, 0.1f, 1.0f);
    T("ffn_norm.weight", e, 1, 0.1f, 1.0f);
    T("ffn_gate.weight", e, ff, 1.0f / sqrtf((float)e), 0);
    T("ffn_up.weight", e, ff, 1.0f / sqrtf((float)e), 0);
    T("ffn_down.weight", ff, e, 1.0f / sqrtf((float)ff), 0);
#undef T
}

/* A random qwen3 model (dim 64, 2 layers, 4 heads, 2 KV heads, FFN 128) over
 * the stories260K vocabulary (512), with n_mtp heads. */
static mtplx_model *tu_random_model(int n_mtp, float logit_scale) {
    tu_rng = 88172645463325252ull; /* the same model whatever ran before */
    mtplx_gguf *src = NULL;
    assert_int_equal(mtplx_checkpoint_load(STORIES, NULL, &src), MTPLX_OK);
    mtplx_gguf *g = mtplx_gguf_new();
    assert_non_null(g);
    for (int64_t i = 0; i < src->n_kv; i++)
        if (!strncmp(src->kv[i].key, "tokenizer.", 10))
            assert_int_equal(mtplx_gguf_copy_kv(g, &src->kv[i]), MTPLX_OK);
    mtplx_gguf_free(src);
    const int e = 64, L = 2, nh = 4, nkv = 2, hd = 16, ff = 128, V = 512;
    mtplx_gguf_set_str(g, "general.architecture", "qwen3");
    mtplx_gguf_set_str(g, "general.name", "random-qwen3");
    mtplx_gguf_set_u32(g, "qwen3.embedding_length", e);
    mtplx_gguf_set_u32(g, "qwen3.block_count", L + n_mtp);
    mtplx_gguf_set_u32(g, "qwen3.nextn_predict_layers", n_mtp);
    mtplx_gguf_set_u32(g, "qwen3.attention.head_count", nh);
    mtplx_gguf_set_u32(g, "qwen3.attention.head_count_kv", nkv);
    mtplx_gguf_set_u32(g, "qwen3.attention.key_length", hd);
    mtplx_gguf_set_u32(g, "qwen3.feed_forward_length", ff);
    mtplx_gguf_set_u32(g, "qwen3.context_length", 512);
    mtplx_gguf_set_f32(g, "qwen3.rope.freq_base", 10000.0f);
    mtplx_gguf_set_f32(g, "qwen3.attention.layer_norm_rms_epsilon", 1e-6f);
    tu_tensor(g, "token_embd.weight", e, V, 1.0f, 0);
    tu_tensor(g, "output_norm.weight", e, 1, 0.1f * logit_scale, logit_scale);
    for (int b = 0; b < L + n_mtp; b++) tu_layer(g, b, e, nh, nkv, hd, ff);
    for (int i = 0; i < n_mtp; i++) {
        char n[96];
        int b = L + i;
        snprintf(n, sizeof n, "blk.%d.nextn.enorm.weight", b);
        tu_tensor(g, n, e, 1, 0.1f, 1.0f);
        snprintf(n, sizeof n, "blk.%d.nextn.hnorm.weight", b);
        tu_tensor(g, n, e, 1, 0.1f, 1.0f);
        snprintf(n, sizeof n, "blk.%d.nextn.eh_proj.weight", b);
        tu_tensor(g, n, 2 * e, e, 1.0f / sqrtf(2.0f * e), 0);
        snprintf(n, sizeof n, "blk.%d.nextn.shared_head_norm.weight", b);
        tu_tensor(g, n, e, 1, 0.1f * logit_scale, logit_scale);
    }
    if (tu_bigram_noise >= 0) {
        /* a "bigram" trunk (attention and FFN outputs zeroed: logits depend on
         * the current token only) and a head that computes the same function
         * of its input token (up to noise): q ~ p, so drafts are mostly
         * accepted and the accept / bonus paths run often */
        char n[96];
        for (int b = 0; b < L + n_mtp; b++) {
            const char *zero[] = {"attn_output", "ffn_down"};
            for (int z = 0; z < 2; z++) {
                snprintf(n, sizeof n, "blk.%d.%s.weight", b, zero[z]);
                mtplx_gguf_tensor *t = mtplx_gguf_find_tensor(g, n);
                memset(t->data, 0, t->nbytes);
            }
        }
        const float *on = mtplx_gguf_find_tensor(g, "output_norm.weight")->data;
        for (int i = 0; i < n_mtp; i++) {
            int b = L + i;
            snprintf(n, sizeof n, "blk.%d.nextn.eh_proj.weight", b);
            float *w = mtplx_gguf_find_tensor(g, n)->data; /* [e rows][2e]: out r <- emb part */
            for (int r = 0; r < e; r++)
                for (int k = 0; k < 2 * e; k++)
                    w[r * 2 * e + k] = (k == r ? 1.0f : 0.0f) + (k < e ? tu_bigram_noise * tu_randn() / sqrtf((float)e) : 0.0f);
            snprintf(n, sizeof n, "blk.%d.nextn.enorm.weight", b);
            float *en = mtplx_gguf_find_tensor(g, n)->data;
            for (int k = 0; k < e; k++) en[k] = 1.0f;
            snprintf(n, sizeof n, "blk.%d.nextn.shared_head_norm.weight", b);
            memcpy(mtplx_gguf_find_tensor(g, n)->data, on, (size_t)e * sizeof(float));
        }
    }
    mtplx_model *m = NULL;
    mtplx_status st = mtplx_model_from_gguf(g, "random-qwen3", "gguf", NULL, &m);
    if (st != MTPLX_OK) fprintf(stderr, "tu_random_model: %s\n", mtplx_last_error());
    assert_int_equal(st, MTPLX_OK);
    return m;
}

typedef struct {
    int32_t ids[4096];
    int n;
    int by_src[3];
} tu_collect;

static int tu_collect_cb(const mtplx_token_event *ev, void *user) {
    tu_collect *c = user;
    if (ev->id >= 0 && c->n < 4096) {
        c->ids[c->n++] = ev->id;
        c->by_src[ev->source]++;
    }
    return 0;
}

/* MTP's text must equal AR's token for token: the same count, the same ids;
 * what names the run in the failure message ("depth 3", ...). */
static void tu_assert_same_ids(const tu_collect *ar, const tu_collect *mtp, const char *what) {
    assert_int_equal(mtp->n, ar->n);
    for (int i = 0; i < ar->n; i++)
        if (ar->ids[i] != mtp->ids[i])
            fail_msg("%s: token %d differs: AR %d, MTP %d", what, i, ar->ids[i], mtp->ids[i]);
}

#endif
