#!/usr/bin/env python3
"""bench/summary.py OUTDIR: table of medians over rounds from bench/run.sh's
mtplx.jsonl, llama.jsonl and bw.json; also writes OUTDIR/summary.json."""
import json, os, statistics, sys

out = sys.argv[1]
def lines(name):
    p, res = os.path.join(out, name), []
    if os.path.exists(p):
        for l in open(p):
            try:
                res.append(json.loads(l))
            except ValueError:  # a run still writing, or a tool's chatter
                pass
    return res

bw = json.load(open(os.path.join(out, 'bw.json')))
med = statistics.median
def spread(v):
    return (max(v) - min(v)) / med(v) if len(v) > 1 and med(v) else 0.0

rows = {}
for r in lines('mtplx.jsonl'):
    k = (r['size'], r['type'].lower(), r['threads'])
    rows.setdefault(k, {'m': [], 'l': []})['m'].append(r)
for r in lines('llama.jsonl'):
    k = (r['size'], r['qtype'], r['n_threads'])
    rows.setdefault(k, {'m': [], 'l': []})['l'].append(r)

summary, spreads = [], []
pp = max([r.get('prefill_n', 512) for r in lines('mtplx.jsonl')] or [512])
hdr = ('| model | type | thr | mtplx tg | llama tg | mtplx pp%d | llama pp%d | mtplx GB/s (%% bw) ' % (pp, pp) +
       '| llama GB/s (% bw) | mtplx n=2/4/8 | llama n=2/4/8 |')
print(hdr)
print('|---|---|---|---|---|---|---|---|---|---|---|')
for k in sorted(rows):
    size, ty, t = k
    m, l = rows[k]['m'], rows[k]['l']
    b = bw.get('gbps_t%d' % t, bw['gbps_t1'])
    e = {'size': size, 'type': ty, 'threads': t, 'bw_gbps': b}
    if m:
        dec = [x['decode_tok_s'] for x in m]
        spreads.append(spread(dec))
        e['mtplx'] = {
            'decode_tok_s': med(dec), 'prefill_tok_s': med([x['prefill_tok_s'] for x in m]),
            'gbps': med([x['decode_gbps'] for x in m]),
            'ratio': {n: med([x['verify_ratio'][n] for x in m]) for n in ('2', '4', '8')},
            'rounds': len(m), 'decode_spread': spread(dec)}
        e['weight_bytes'] = m[0]['weight_bytes']
    if l:
        def ts(pred):
            v = [x['avg_ts'] for x in l if pred(x)]
            return med(v) if v else 0.0
        tg = ts(lambda x: x['n_gen'] > 0)
        t1 = 1 / ts(lambda x: x['n_prompt'] == 1 and x['n_gen'] == 0)
        e['llama'] = {
            'decode_tok_s': tg, 'prefill_tok_s': ts(lambda x: x['n_prompt'] >= 64),
            'gbps': l[0]['model_size'] * tg / 1e9,
            'ratio': {str(n): (n / ts(lambda x, n=n: x['n_prompt'] == n and x['n_gen'] == 0)) / t1
                      for n in (2, 4, 8)}}
    summary.append(e)
    M, L = e.get('mtplx'), e.get('llama')
    f = lambda d, key, fmt='%.1f': (fmt % d[key]) if d else '-'
    g = lambda d: '%.1f (%.0f%%)' % (d['gbps'], 100 * d['gbps'] / b) if d else '-'
    r = lambda d: '/'.join('%.2f' % d['ratio'][n] for n in ('2', '4', '8')) if d else '-'
    print('| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |' % (
        size, ty, t, f(M, 'decode_tok_s'), f(L, 'decode_tok_s'), f(M, 'prefill_tok_s'),
        f(L, 'prefill_tok_s'), g(M), g(L), r(M), r(L)))
print('\nbandwidth: %.1f GB/s (1 thread), %.1f GB/s (2 threads), medians of %s; '
      'decode tok/s spread over rounds (max-min)/median: median %.0f%%, max %.0f%%' % (
          bw['gbps_t1'], bw['gbps_t2'], 'runs',
          100 * med(spreads) if spreads else 0, 100 * max(spreads) if spreads else 0))
json.dump({'bw': bw, 'rows': summary}, open(os.path.join(out, 'summary.json'), 'w'), indent=1)
