/* llama2c.c: karpathy/llama2.c checkpoints (version 0 "legacy" export) and
 * their tokenizer.bin, loaded as an arch "llama" container.
 *
 * Checkpoint: 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads,
 * vocab_size, seq_len; vocab_size < 0 means an unshared classifier), then fp32
 * weights in run.c's order, then the unused RoPE tables and the classifier
 * if unshared. The file size must match the header exactly, which is our only
 * guard against reading a random .bin as a model. Weights are exported from
 * Meta's layout, already in GGUF's interleaved-RoPE order: no permutation.
 * tokenizer.bin: int32 max_token_length, then per token: f32 score, int32 len,
 * len bytes; stored as a SentencePiece vocabulary (spaces back to U+2581,
 * BOS / EOS named <s> / </s>). The v1/v2 exports (magic "ak42") are not
 * supported. */
#include "formats/formats.h"
#include "formats/formats_internal.h"
#include "kernels/kernels.h"

#include <dirent.h>
#include <libgen.h>
#include <limits.h>
#include <string.h>

typedef struct l2c_hdr {
    int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
} l2c_hdr;

/* Expected file size in floats after the header; false if the header is nonsense. */
static bool l2c_expected(const l2c_hdr *h, uint64_t *n_floats, char *why, size_t cap) {
    if (h->dim <= 0 || h->hidden_dim <= 0 || h->n_layers <= 0 || h->n_heads <= 0 ||
        h->n_kv_heads <= 0 || h->vocab_size == 0 || h->vocab_size == INT32_MIN ||
        h->seq_len <= 0) {
        snprintf(why, cap, "header has a non-positive field (dim %d, hidden_dim %d, n_layers %d, "
                 "n_heads %d, n_kv_heads %d, vocab_size %d, seq_len %d)", h->dim, h->hidden_dim,
                 h->n_layers, h->n_heads, h->n_kv_heads, h->vocab_size, h->seq_len);
        return false;
    }
    if (h->dim % h->n_heads || h->n_heads % h->n_kv_heads || (h->dim / h->n_heads) % 2) {
        snprintf(why, cap, "header: dim %d / n_heads %d / n_kv_heads %d do not give an even head "
                 "size shared by whole kv groups", h->dim, h->n_heads, h->n_kv_heads);
        return false;
    }
    if (h->dim > (1 << 20) || h->hidden_dim > (1 << 22) || h->n_layers > 4096 ||
        h->seq_len > (1 << 24) || h->vocab_size > (1 << 24) || h->vocab_size < -(1 << 24)) {
        snprintf(why, cap, "header values are implausibly large");
        return false;
    }
    uint64_t dim = (uint64_t)h->dim, hid = (uint64_t)h->hidden_dim, L = (uint64_t)h->n_layers;
    uint64_t vocab = (uint64_t)(h->vocab_size < 0 ? -(int64_t)h->vocab_size : h->vocab_size);
    uint64_t head = dim / (uint64_t)h->n_heads, kv_dim = head * (uint64_t)h->n_kv_heads;
    uint64_t n = vocab * dim                  /* token_embedding */
                 + L * dim                    /* rms_att */
                 + L * dim * dim * 2          /* wq, wo */
                 + L * kv_dim * dim * 2       /* wk, wv */
                 + L * dim                    /* rms_ffn */
                 + L * hid * dim * 3          /* w1, w2, w3 */
                 + dim                        /* rms_final */
                 + (uint64_t)h->seq_len * head; /* freq_cis real + imag */
    if (h->vocab_size < 0) n += vocab * dim;
    *n_floats = n;
    return true;
}

static mtplx_status l2c_tensor(mtplx_gguf *g, const char *name, const float **p, int64_t ne0,
                               int64_t ne1) {
    int64_t ne[2] = {ne0, ne1};
    mtplx_status st = mtplx_gguf_add_tensor(g, name, MTPLX_TYPE_F32, ne1 > 1 ? 2 : 1, ne,
                                            (void *)*p, false);
    *p += ne0 * ne1;
    return st;
}

/* Find the tokenizer beside the checkpoint: tokenizer.bin, else the only tok*.bin. */
static mtplx_status find_tokenizer(const char *bin, char *out, size_t cap) {
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", bin);
    const char *dir = dirname(tmp);
    MTPLX_TRY(mtplx_path_join(out, cap, dir, "tokenizer.bin"));
    if (mtplx_file_exists(out)) return MTPLX_OK;
    DIR *d = opendir(dir);
    int found = 0;
    char name[256] = "";
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            size_t n = strlen(e->d_name);
            if (n > 7 && !strncmp(e->d_name, "tok", 3) && !strcmp(e->d_name + n - 4, ".bin")) {
                if (!found) snprintf(name, sizeof name, "%s", e->d_name);
                found++;
            }
        }
        closedir(d);
    }
    if (found == 1) return mtplx_path_join(out, cap, dir, name);
    if (found > 1)
        return mtplx_fail(MTPLX_ERR_ARG, "%s: %d tok*.bin files beside it (e.g. %s): name the "
                          "tokenizer explicitly", bin, found, name);
    return mtplx_fail(MTPLX_ERR_IO, "%s: no tokenizer: neither tokenizer.bin nor a tok*.bin file "
                      "is beside it (name one explicitly)", bin);
}

static bool is_byte_piece(const char *s, uint32_t len) {
    if (len != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return false;
    for (int i = 3; i < 5; i++)
        if (!strchr("0123456789ABCDEFabcdef", s[i])) return false;
    return true;
}

mtplx_status mtplx_llama2c_tokenizer_load(const char *path, int32_t n_vocab, mtplx_gguf *g) {
    char *buf;
    size_t size;
    MTPLX_TRY(mtplx_read_file(path, &buf, &size));
    if (n_vocab <= 0) { /* count the entries */
        size_t o = 4;
        n_vocab = 0;
        while (size >= 4 && size - o >= 8 && n_vocab < (1 << 24)) {
            int32_t len;
            memcpy(&len, buf + o + 4, 4);
            if (len < 0 || (size_t)len > size - o - 8) break;
            o += 8 + (size_t)len;
            n_vocab++;
        }
        if (n_vocab == 0) n_vocab = 1; /* the loop below reports what is wrong */
    }
    mtplx_status st = MTPLX_OK;
    mtplx_gguf_str *tokens = calloc((size_t)n_vocab, sizeof *tokens);
    float *scores = calloc((size_t)n_vocab, sizeof *scores);
    int32_t *types = calloc((size_t)n_vocab, sizeof *types);
    size_t off = 4;
    int32_t i = 0;
    if (!tokens || !scores || !types) st = mtplx_fail(MTPLX_ERR_NOMEM, "%s: out of memory", path);
    else if (size < 4)
        st = mtplx_fail(MTPLX_ERR_FORMAT, "%s: %zu bytes, too short for max_token_length", path,
                        size);
    for (; st == MTPLX_OK && i < n_vocab; i++) {
        int32_t len;
        if (size - off < 8) {
            st = mtplx_fail(MTPLX_ERR_FORMAT, "%s: token %d: score and length at offset %zu are "
                            "past the end of the file (%zu bytes; the model has %d tokens)", path,
                            i, off, size, n_vocab);
            break;
        }
        memcpy(&scores[i], buf + off, 4);
        memcpy(&len, buf + off + 4, 4);
        off += 8;
        if (len < 0 || (size_t)len > size - off) {
            st = mtplx_fail(MTPLX_ERR_FORMAT, "%s: token %d: length %d at offset %zu is past the "
                            "end of the file (%zu bytes)", path, i, len, off - 4, size);
            break;
        }
        /* llama2.c's export stores BOS / EOS as "\n<s>\n" / "\n</s>\n"; name
         * them as SentencePiece does (llama.cpp's llama2c converter does too). */
        const char *piece = buf + off;
        size_t plen = (size_t)len;
        if (i == 1 || i == 2) {
            piece = i == 1 ? "<s>" : "</s>";
            plen = strlen(piece);
        }
        /* llama2.c's export also turned SentencePiece's U+2581 into spaces;
         * turn them back so the pieces mean what a GGUF "llama" vocab means. */
        size_t n_sp = 0;
        for (size_t k = 0; k < plen; k++) n_sp += piece[k] == ' ';
        char *t = malloc(plen + 2 * n_sp + 1);
        if (!t) {
            st = mtplx_fail(MTPLX_ERR_NOMEM, "%s: out of memory", path);
            break;
        }
        size_t m = 0;
        for (size_t k = 0; k < plen; k++) {
            if (piece[k] == ' ') {
                memcpy(t + m, "\xe2\x96\x81", 3);
                m += 3;
            } else {
                t[m++] = piece[k];
            }
        }
        t[m] = 0;
        tokens[i].len = (uint64_t)m;
        tokens[i].data = t;
        off += (size_t)len;
        types[i] = i == 0 ? 2 : (i == 1 || i == 2) ? 3 : is_byte_piece(buf + off - len, (uint32_t)len) ? 6 : 1;
    }
    if (st == MTPLX_OK && off != size)
        st = mtplx_fail(MTPLX_ERR_FORMAT, "%s: %zu trailing bytes after %d tokens: the tokenizer "
                        "does not match the model's vocab_size", path, size - off, n_vocab);
    free(buf);
    if (st != MTPLX_OK) {
        for (int32_t j = 0; j < n_vocab && tokens; j++) free(tokens[j].data);
        free(tokens);
        free(scores);
        free(types);
        return st;
    }
    /* set_arr_owned takes the arrays over even when it fails */
    st = mtplx_gguf_set_str(g, "tokenizer.ggml.model", "llama");
    if (st == MTPLX_OK)
        st = mtplx_gguf_set_arr_owned(g, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, tokens,
                                      (uint64_t)n_vocab);
    else free(tokens);
    if (st == MTPLX_OK)
        st = mtplx_gguf_set_arr_owned(g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores,
                                      (uint64_t)n_vocab);
    else free(scores);
    if (st == MTPLX_OK)
        st = mtplx_gguf_set_arr_owned(g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types,
                                      (uint64_t)n_vocab);
    else free(types);
    if (st == MTPLX_OK) st = mtplx_gguf_set_u32(g, "tokenizer.ggml.bos_token_id", 1);
    if (st == MTPLX_OK) st = mtplx_gguf_set_u32(g, "tokenizer.ggml.eos_token_id", 2);
    if (st == MTPLX_OK) st = mtplx_gguf_set_u32(g, "tokenizer.ggml.unknown_token_id", 0);
    if (st == MTPLX_OK) st = mtplx_gguf_set_bool(g, "tokenizer.ggml.add_bos_token", true);
    if (st == MTPLX_OK) st = mtplx_gguf_set_bool(g, "tokenizer.ggml.add_eos_token", false);
    return st;
}

static mtplx_status build(mtplx_gguf *g, const char *bin, const char *tokenizer_path) {
    const char *path = bin;
    if (g->map.size < sizeof(l2c_hdr))
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: %zu bytes, too short for the 28-byte llama2.c "
                          "header", path, g->map.size);
    l2c_hdr h;
    memcpy(&h, g->map.data, sizeof h);
    uint64_t n_floats;
    char why[256];
    if (!l2c_expected(&h, &n_floats, why, sizeof why))
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: not a llama2.c checkpoint: %s", path, why);
    uint64_t want = sizeof h + n_floats * 4;
    if (g->map.size < want)
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: truncated: the header (dim %d, %d layers, vocab "
                          "%d, seq_len %d) needs %llu bytes, the file has %zu", path, h.dim,
                          h.n_layers, h.vocab_size, h.seq_len, (unsigned long long)want,
                          g->map.size);
    if (g->map.size > want)
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: %llu trailing bytes: the header (dim %d, %d "
                          "layers, vocab %d, seq_len %d) needs exactly %llu bytes (a v1/v2 export "
                          "or not a llama2.c checkpoint?)", path,
                          (unsigned long long)(g->map.size - want), h.dim, h.n_layers,
                          h.vocab_size, h.seq_len, (unsigned long long)want);

    bool shared = h.vocab_size > 0;
    int64_t vocab = shared ? h.vocab_size : -(int64_t)h.vocab_size;
    int64_t dim = h.dim, hid = h.hidden_dim, L = h.n_layers, head = dim / h.n_heads;
    int64_t kv_dim = head * h.n_kv_heads;

    char tok[PATH_MAX];
    if (tokenizer_path) snprintf(tok, sizeof tok, "%s", tokenizer_path);
    else MTPLX_TRY(find_tokenizer(bin, tok, sizeof tok));

    const char *base = strrchr(bin, '/') ? strrchr(bin, '/') + 1 : bin;
    size_t bl = strlen(base);
    if (bl > 4 && !strcmp(base + bl - 4, ".bin")) bl -= 4;
    MTPLX_TRY(mtplx_gguf_set_str(g, "general.architecture", "llama"));
    MTPLX_TRY(mtplx_gguf_set_strn(g, "general.name", base, bl));
    MTPLX_TRY(mtplx_gguf_set_u32(g, "llama.context_length", (uint32_t)h.seq_len));
    MTPLX_TRY(mtplx_gguf_set_u32(g, "llama.embedding_length", (uint32_t)dim));
    MTPLX_TRY(mtplx_gguf_set_u32(g, "llama.block_count", (uint32_t)L));
    MTPLX_TRY(mtplx_gguf_set_u32(g, "llama.feed_forward_length", (uint32_t)hid));
    MTPLX_TRY(mtplx_gguf_set_u32(g, "llama.attention.head_count", (uint32_t)h.n_heads));
    MTPLX_TRY(mtplx_gguf_set_u32(g, "llama.attention.head_count_kv", (uint32_t)h.n_kv_heads));
    MTPLX_TRY(mtplx_gguf_set_u32(g, "llama.attention.key_length", (uint32_t)head));
    MTPLX_TRY(mtplx_gguf_set_u32(g, "llama.attention.value_length", (uint32_t)head));
    MTPLX_TRY(mtplx_gguf_set_u32(g, "llama.rope.dimension_count", (uint32_t)head));
    MTPLX_TRY(mtplx_gguf_set_f32(g, "llama.rope.freq_base", 10000.0f));
    MTPLX_TRY(mtplx_gguf_set_f32(g, "llama.attention.layer_norm_rms_epsilon", 1e-5f));
    MTPLX_TRY(mtplx_gguf_set_u32(g, "llama.vocab_size", (uint32_t)vocab));
    MTPLX_TRY(mtplx_gguf_set_u32(g, "general.file_type", 0)); /* all F32 */

    /* Weights in run.c's order: each array holds all layers back to back. */
    const float *p = (const float *)((const uint8_t *)g->map.data + sizeof h);
    char name[96];
    MTPLX_TRY(l2c_tensor(g, "token_embd.weight", &p, dim, vocab)); /* [vocab][dim] */
    struct { const char *fmt; int64_t ne0, ne1; } per_layer[] = {
        {"blk.%d.attn_norm.weight", dim, 1},      /* rms_att [L][dim] */
        {"blk.%d.attn_q.weight", dim, dim},       /* wq [L][dim][dim] */
        {"blk.%d.attn_k.weight", dim, kv_dim},    /* wk [L][kv_dim][dim] */
        {"blk.%d.attn_v.weight", dim, kv_dim},    /* wv [L][kv_dim][dim] */
        {"blk.%d.attn_output.weight", dim, dim},  /* wo [L][dim][dim] */
        {"blk.%d.ffn_norm.weight", dim, 1},       /* rms_ffn [L][dim] */
        {"blk.%d.ffn_gate.weight", dim, hid},     /* w1 [L][hidden][dim] */
        {"blk.%d.ffn_down.weight", hid, dim},     /* w2 [L][dim][hidden] */
        {"blk.%d.ffn_up.weight", dim, hid},       /* w3 [L][hidden][dim] */
    };
    for (size_t k = 0; k < sizeof per_layer / sizeof per_layer[0]; k++)
        for (int64_t l = 0; l < L; l++) {
            snprintf(name, sizeof name, per_layer[k].fmt, (int)l);
            MTPLX_TRY(l2c_tensor(g, name, &p, per_layer[k].ne0, per_layer[k].ne1));
        }
    MTPLX_TRY(l2c_tensor(g, "output_norm.weight", &p, dim, 1));
    p += (int64_t)h.seq_len * head; /* freq_cis_real, freq_cis_imag: seq_len * head/2 each */
    if (!shared) MTPLX_TRY(l2c_tensor(g, "output.weight", &p, dim, vocab));

    mtplx_status st = mtplx_llama2c_tokenizer_load(tok, (int32_t)vocab, g);
    if (st != MTPLX_OK) return st;
    return MTPLX_OK;
}

mtplx_status mtplx_llama2c_load(const char *bin, const char *tokenizer_path, mtplx_gguf **out) {
    *out = NULL;
    mtplx_gguf *g = mtplx_gguf_new();
    if (!g || !(g->path = mtplx_strdup(bin))) {
        mtplx_gguf_free(g);
        return mtplx_fail(MTPLX_ERR_NOMEM, "out of memory");
    }
    mtplx_status st = mtplx_mmap_open(bin, &g->map);
    if (st == MTPLX_OK) st = build(g, bin, tokenizer_path);
    if (st != MTPLX_OK) {
        mtplx_gguf_free(g);
        return st;
    }
    *out = g;
    return MTPLX_OK;
}
