#!/usr/bin/env python3
"""profsum.py PROF.txt [PROF2.txt ...]: a profiling build's tables (mkprof.sh)
as microseconds per step, side by side: an AR step's forward and sample, a
depth-k MTP step's draft (per head stream: matmuls, the lm_head, attention),
verify forward and acceptance. Head rows catching up on the prompt (the
first draft of a generation, n = prompt length) count in "draft (all)" but
not in the per-stream lines. Step counts come from the TOTAL lines."""
import sys, re, collections
def parse(path):
    ph = None; d = collections.defaultdict(dict)
    for line in open(path):
        m = re.match(r'== phase (\w+) total', line)
        if m: ph = m.group(1); continue
        m = re.match(r'  (.+?)\s+([\d.]+) ms\s+(\d+) calls', line)
        if m and ph: d[ph][m.group(1).strip()] = (float(m.group(2)), int(m.group(3)))
    return d
def summary(d):
    out = collections.OrderedDict()
    nar = d['ar']['TOTAL forward'][1]; nv = d['verify']['TOTAL forward'][1]
    per = lambda ph, key, n: d[ph].get(key, (0, 0))[0] * 1e3 / n
    out['AR forward'] = per('ar', 'TOTAL forward', nar)
    out['AR sample'] = per('ar', 'TOTAL accept/sample', nar)
    cat = lambda ph, pred, n: sum(v[0] for k, v in d[ph].items() if pred(k)) * 1e3 / n
    for name, pred in [('AR matmul (no lm)', lambda k: ' mm ' in k and '8192' not in k), ('AR lm_head', lambda k: ' mm 8192' in k),
                       ('AR attention', lambda k: 'attention' in k), ('AR rope', lambda k: k == 'rope')]:
        out[name] = cat('ar', pred, nar)
    # head: only steady state calls (exclude rows48 prefill catch-up)
    out['MTP draft (all)'] = per('head', 'TOTAL draft', nv)
    for dd in (1, 2, 3):
        out['  d%d matmul (no lm)' % dd] = cat('head', lambda k: k.startswith('d%d mm' % dd) and '8192' not in k and not re.search(r' n(\d\d+)$', k), nv)
        out['  d%d lm_head' % dd] = cat('head', lambda k: k.startswith('d%d mm 8192' % dd), nv)
        out['  d%d attention' % dd] = cat('head', lambda k: k == 'd%d attention' % dd, nv)
    out['  head rope'] = per('head', 'rope', nv)
    out['  head argmax'] = per('head', 'argmax_rows', nv)
    out['MTP verify forward'] = per('verify', 'TOTAL forward', nv)
    for name, pred in [('  verify matmul (no lm)', lambda k: ' mm ' in k and '8192' not in k), ('  verify lm_head', lambda k: ' mm 8192' in k),
                       ('  verify attention', lambda k: 'attention' in k), ('  verify rope', lambda k: k == 'rope')]:
        out[name] = cat('verify', pred, nv)
    out['MTP accept'] = per('verify', 'TOTAL accept/sample', nv)
    out['MTP step'] = out['MTP draft (all)'] + out['MTP verify forward'] + out['MTP accept']
    out['AR step'] = out['AR forward'] + out['AR sample']
    out['step / AR step'] = out['MTP step'] / out['AR step']
    return out
sums = [summary(parse(p)) for p in sys.argv[1:]]
print('%-28s' % 'us per step' + ''.join('%12s' % p.split('/')[-1][:11] for p in sys.argv[1:]))
for k in sums[0]:
    print('%-28s' % k + ''.join(('%12.3f' if 'AR step' in k and '/' in k else '%12.1f') % s.get(k, 0) for s in sums))
