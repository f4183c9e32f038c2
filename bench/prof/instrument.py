#!/usr/bin/env python3
"""instrument.py TREE: add bench/prof/prof.h's per-op timers to a scratch copy
of the source tree (mkprof.sh calls it): every CPU backend op, labelled by
its kind (a matmul by its shape, type and rows) and by the head stream d it
ran for; the phases of a decode step (draft, verify forward, accept / sample,
AR step, prefill) and each head forward. Text substitutions on the files as
of branch cpu-mtp: an edit that moves them fails loudly (assert)."""
import sys
root = sys.argv[1]
def sub(p, old, new, cnt=1):
    p = root + '/' + p
    s = open(p).read()
    assert s.count(old) >= 1, (p, old)
    s = s.replace(old, new, cnt)
    open(p, 'w').write(s)
p = 'src/model/backend_cpu.c'
sub(p, '#include "model/backend.h"\n', '#include "model/backend.h"\n#include "core/prof.h"\n#include <stdio.h>\n#include <stdlib.h>\n#define PROF_BEGIN double pt0_ = mtplx_prof_on ? mtplx_prof_now() : 0\n#define PROF_END(l) if (mtplx_prof_on) mtplx_prof_add(l, mtplx_prof_now() - pt0_)\n')
s = open(root + '/' + p).read()
def wrap(fn, label):
    global s
    if ('static void ' + fn + '(') not in s:
        return  # an older tree without this op
    i = s.index('static void ' + fn + '(')
    j = s.index('{', i) + 1
    eol = s.index('\n', j)
    if s[j:eol].rstrip().endswith('}'):  # a one-line body: give it its own lines
        body = s[j:eol].rstrip()[:-1].strip()
        s = s[:j] + '\n    ' + body + '\n}' + s[eol:]
    k = s.index('\n}\n', j)
    s = s[:j] + '\n    PROF_BEGIN;' + s[j:k] + '\n    ' + label + s[k:]
wrap('cpu_matmul', 'if (mtplx_prof_on) { char l[64]; snprintf(l, sizeof l, "d%d mm %lldx%lld t%d n%lld", mtplx_prof_tag, (long long)w->m, (long long)w->k, w->type, (long long)n); PROF_END(l); }')
for fn, l in [('cpu_rmsnorm', 'rmsnorm'), ('cpu_rope', 'rope'), ('cpu_silu_mul', 'silu_mul'), ('cpu_add', 'add'), ('cpu_kv_store', 'kv_store'), ('cpu_get_row', 'get_row'), ('cpu_argmax_rows', 'argmax_rows')]:
    wrap(fn, 'PROF_END("%s");' % l)
wrap('cpu_attention', 'char l_[32]; snprintf(l_, sizeof l_, "d%d attention", mtplx_prof_tag); PROF_END(l_);')
s = s.replace('    cpu_backend *c = calloc(1, sizeof *c);\n    if (!c) return mtplx_fail(MTPLX_ERR_NOMEM, "cpu backend: out of memory");',
              '    cpu_backend *c = calloc(1, sizeof *c);\n    if (!c) return mtplx_fail(MTPLX_ERR_NOMEM, "cpu backend: out of memory");\n    if (mtplx_prof_on < 0) mtplx_prof_on = getenv("MTPLX_PROF") != NULL;')
open(root + '/' + p, 'w').write(s)
p = 'src/engine/generate.c'
sub(p, '#include "engine/engine.h"\n', '#include "engine/engine.h"\n#include "core/prof.h"\n')
sub(p, '''    bool go = true;
    bool full = false;
    s = decode_prepare(g, &full);''', '''    bool go = true;
    bool full = false;
    mtplx_prof_phase = 1;
    double pq0 = mtplx_prof_on ? mtplx_prof_now() : 0;
    s = decode_prepare(g, &full);
    if (mtplx_prof_on && g->k > 0) mtplx_prof_add("TOTAL draft", mtplx_prof_now() - pq0);''')
sub(p, '''        double t1 = mtplx_time_ms();
        s = mtplx_ctx_decode(c, g->batch, g->k + 1, g->k > 0);
        if (s != MTPLX_OK) goto fail;
        if (g->k > 0) g->st.t_verify_ms += mtplx_time_ms() - t1;
        go = decode_finish(g);''', '''        double t1 = mtplx_time_ms();
        mtplx_prof_phase = g->k > 0 ? 2 : 0;
        s = mtplx_ctx_decode(c, g->batch, g->k + 1, g->k > 0);
        if (mtplx_prof_on) mtplx_prof_add("TOTAL forward", mtplx_time_ms() - t1);
        if (s != MTPLX_OK) goto fail;
        if (g->k > 0) g->st.t_verify_ms += mtplx_time_ms() - t1;
        double t2 = mtplx_time_ms();
        go = decode_finish(g);
        if (mtplx_prof_on) mtplx_prof_add("TOTAL accept/sample", mtplx_time_ms() - t2);
        mtplx_prof_phase = 4;''')
sub(p, '''    if (g->phase == PH_PREFILL) {
        int32_t left''', '''    if (g->phase == PH_PREFILL) {
        mtplx_prof_phase = 3;
        int32_t left''')
p = 'src/engine/context.c'
sub(p, '#include "engine/engine.h"\n', '#include "engine/engine.h"\n#include "core/prof.h"\n#include <stdio.h>\n')
sub(p, '''            mtplx_mtp_forward_vocab(m, 0, c->be, &c->mtp_kv[d - 1], &c->mtp_acts, c->stage_tok,
                                    c->stage, rows, a, c->draft_n_out);''', '''            double pq = mtplx_prof_on ? mtplx_prof_now() : 0;
            mtplx_prof_tag = d;
            mtplx_mtp_forward_vocab(m, 0, c->be, &c->mtp_kv[d - 1], &c->mtp_acts, c->stage_tok,
                                    c->stage, rows, a, c->draft_n_out);
            if (mtplx_prof_on) {
                char l[48];
                snprintf(l, sizeof l, "head fwd d%d rows%d", d, rows);
                mtplx_prof_add(l, mtplx_prof_now() - pq);
            }
            mtplx_prof_tag = 0;''')
