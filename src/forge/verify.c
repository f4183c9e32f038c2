/* verify.c: `forge verify`: does a model's MTP head pay off, and is MTP
 * decoding exact? For each prompt, greedy AR and greedy MTP generation of the
 * same length from a fresh cache: acceptance per draft position, tokens per
 * target forward, decode tok/s of both, and whether the texts are identical
 * (they must be: at temperature 0 MTP commits exactly the trunk's argmax).
 * With a temperature, the same for sampled decoding (acceptance is then the
 * rejection test's; the texts are independent samples, and exactness is
 * test_mtp's distribution test).
 * Prompts come from a text file (evenly spaced slices) or a built-in list. */
#include "forge/forge.h"

#include "engine/engine.h"

#include <string.h>

mtplx_verify_params mtplx_verify_default_params(void) {
    return (mtplx_verify_params){.depth = 0, .n_tokens = 128, .n_prompts = 4, .prompt_len = 48,
                                 .temperature = 0.0f, .seed = 1};
}

static const char *builtin_prompts[] = {
    "It was a dark and stormy night; the rain fell in torrents",
    "The old man looked at the sea and said",
    "Once upon a time there was a little girl who",
    "In the beginning of the year the king called his ministers and",
    "She opened the letter slowly, and as she read it",
    "The village lay at the foot of the mountain, where",
};

typedef struct run_out {
    int32_t ids[4096];
    int32_t n;
} run_out;

static int collect(const mtplx_token_event *ev, void *user) {
    run_out *o = user;
    if (o->n < 4096) o->ids[o->n++] = ev->id;
    return 0;
}

mtplx_status mtplx_forge_verify(const char *model_path, const mtplx_verify_params *vp,
                                mtplx_verify_result *r) {
    memset(r, 0, sizeof *r);
    mtplx_verify_params p = vp ? *vp : mtplx_verify_default_params();
    if (p.n_tokens <= 0 || p.n_tokens > 4096 || p.n_prompts <= 0 || p.prompt_len <= 0 ||
        !(p.temperature >= 0.0f && p.temperature <= 100.0f))
        return mtplx_fail(MTPLX_ERR_ARG,
                          "verify: n_tokens 1..4096, n_prompts >= 1, prompt_len >= 1, temperature 0..100");
    r->temperature = p.temperature;
    mtplx_model *m = NULL;
    MTPLX_TRY(mtplx_model_load(model_path, NULL, &m));
    r->has_mtp = m->n_mtp > 0;
    int32_t depth = p.depth > 0 ? p.depth : 3;
    if (depth > MTPLX_MAX_DRAFT) depth = MTPLX_MAX_DRAFT;
    r->depth = r->has_mtp ? depth : 0;
    int32_t *all = NULL;
    size_t n_all = 0;
    mtplx_status st = MTPLX_OK;
    if (p.data_path) {
        char *text = NULL;
        size_t len = 0;
        st = mtplx_read_file(p.data_path, &text, &len);
        if (st == MTPLX_OK) st = mtplx_tokenize(m->tok, text, len, false, false, &all, &n_all);
        free(text);
        if (st == MTPLX_OK && n_all < (size_t)p.prompt_len)
            st = mtplx_fail(MTPLX_ERR_ARG, "%s: only %zu tokens, a prompt needs %d", p.data_path,
                            n_all, p.prompt_len);
    } else if (p.n_prompts > (int32_t)(sizeof builtin_prompts / sizeof *builtin_prompts)) {
        p.n_prompts = (int32_t)(sizeof builtin_prompts / sizeof *builtin_prompts);
    }
    mtplx_ctx *ctx = NULL;
    mtplx_ctx_params cp = mtplx_ctx_default_params();
    cp.n_threads = p.n_threads;
    cp.device = p.device;
    int32_t need = p.prompt_len + p.n_tokens + MTPLX_MAX_DRAFT + 2;
    if (!p.data_path) need = 64 + p.n_tokens + MTPLX_MAX_DRAFT + 2;
    cp.n_ctx = need < m->hp.n_ctx_train ? need : m->hp.n_ctx_train;
    if (st == MTPLX_OK) st = mtplx_ctx_new(m, &cp, &ctx);
    run_out *ar = malloc(sizeof *ar), *mt = malloc(sizeof *mt);
    if (st == MTPLX_OK && (!ar || !mt)) st = mtplx_fail(MTPLX_ERR_NOMEM, "out of memory");
    double t_ar = 0, t_mtp = 0;
    int64_t fwd = 0;
    for (int32_t i = 0; st == MTPLX_OK && i < p.n_prompts; i++) {
        int32_t *prompt = NULL;
        size_t n_prompt = 0;
        if (all) {
            size_t span = n_all - (size_t)p.prompt_len;
            size_t at = p.n_prompts > 1 ? span * (size_t)i / (size_t)(p.n_prompts - 1) : 0;
            prompt = malloc((size_t)p.prompt_len * sizeof(int32_t));
            if (!prompt) st = mtplx_fail(MTPLX_ERR_NOMEM, "out of memory");
            else memcpy(prompt, all + at, (size_t)p.prompt_len * sizeof(int32_t));
            n_prompt = (size_t)p.prompt_len;
        } else {
            const char *s = builtin_prompts[i];
            st = mtplx_tokenize(m->tok, s, strlen(s), true, false, &prompt, &n_prompt);
        }
        if (st != MTPLX_OK) break;
        mtplx_gen_params gp = mtplx_gen_default_params();
        gp.no_event_logits = true; /* ids only: picks and draws may stay on a GPU */
        gp.sampling.temperature = p.temperature;
        gp.sampling.seed = p.seed + (uint64_t)i;
        gp.draft_vocab = p.draft_vocab;
        gp.max_tokens = p.n_tokens;
        gp.ignore_eos = true;
        mtplx_gen_stats sa, sm;
        ar->n = mt->n = 0;
        gp.draft_depth = 0;
        st = mtplx_ctx_truncate(ctx, 0);
        if (st == MTPLX_OK) st = mtplx_generate(ctx, prompt, (int32_t)n_prompt, &gp, collect, ar, &sa);
        gp.draft_depth = r->depth;
        if (st == MTPLX_OK) st = mtplx_ctx_truncate(ctx, 0);
        if (st == MTPLX_OK) st = mtplx_generate(ctx, prompt, (int32_t)n_prompt, &gp, collect, mt, &sm);
        free(prompt);
        if (st != MTPLX_OK) break;
        r->n_prompts++;
        r->n_gen_ar += sa.n_gen;
        r->n_gen_mtp += sm.n_gen;
        t_ar += sa.t_decode_ms;
        t_mtp += sm.t_decode_ms;
        fwd += sm.n_forward;
        for (int d = 0; d < MTPLX_MAX_DRAFT; d++) {
            r->drafted[d] += sm.drafted[d];
            r->accepted[d] += sm.accepted[d];
        }
        if (ar->n == mt->n && !memcmp(ar->ids, mt->ids, (size_t)ar->n * sizeof(int32_t))) r->identical++;
    }
    if (st == MTPLX_OK) {
        r->ar_tok_s = t_ar > 0 ? (double)r->n_gen_ar / (t_ar / 1e3) : 0;
        r->mtp_tok_s = t_mtp > 0 ? (double)r->n_gen_mtp / (t_mtp / 1e3) : 0;
        r->tokens_per_forward = fwd > 0 ? (double)r->n_gen_mtp / (double)fwd : 0;
    }
    free(ar);
    free(mt);
    free(all);
    mtplx_ctx_free(ctx);
    mtplx_model_free(m);
    return st;
}
