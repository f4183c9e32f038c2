#!/usr/bin/env python3
"""forge_ab.py REPS PROMPTS 'LABEL=[ENV=V ...] BINARY [forge verify args]' ...

Greedy MTP against AR on held-out text, several builds or settings in turn:
each repetition runs `BINARY forge verify models/default.gguf --data
/tmp/ho1.txt --depth 3 -n 128 --prompts PROMPTS -j 1 [args]` for every
variant (later args override, e.g. --depth 4), and prints per variant the
medians of AR tok/s, MTP tok/s and their ratio, and the median over
repetitions of its ratio divided by the first variant's in the same
repetition (paired: the load of that minute hits both). ho1.txt: bytes
200k-1.2M of ../shared/data/gutenberg/valid.txt (xz -dc ... | head -c
1200000 | tail -c 1000000). A benchmark, not a test."""
import sys, subprocess, re, statistics, os, shlex
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
reps, prompts = int(sys.argv[1]), int(sys.argv[2])
variants = sys.argv[3:]
res = {v: [] for v in variants}
for r in range(reps):
    for v in variants:
        label, cmd = v.split('=', 1)
        parts = shlex.split(cmd)
        env = dict(os.environ)
        while parts and re.match(r'^[A-Z0-9_]+=', parts[0]):
            k, val = parts.pop(0).split('=', 1); env[k] = val
        args = parts[:1] + ['forge', 'verify', 'models/default.gguf', '--data', '/tmp/ho1.txt', '--depth', '3', '-n', '128',
                            '--prompts', str(prompts), '-j', '1'] + parts[1:]
        out = subprocess.run(args, capture_output=True, text=True, env=env, cwd=ROOT).stdout
        out += ''
        m = re.search(r'AR ([\d.]+) tok/s, MTP ([\d.]+) tok/s', out)
        t = re.search(r'tokens per forward: ([\d.]+)', out)
        ident = re.search(r'greedy identity:\s+(\d+)/(\d+)', out)
        if not m:
            print('FAILED', label, out[-500:]); continue
        ar, mtp = float(m.group(1)), float(m.group(2))
        res[v].append((ar, mtp, mtp / ar, float(t.group(1)), ident.group(0) if ident else '?'))
        print(f'rep {r} {label:10s} AR {ar:6.1f} MTP {mtp:6.1f} ratio {mtp/ar:.3f} tpf {t.group(1)} {ident.group(1)}/{ident.group(2)}', flush=True)
base = variants[0]
print('\nvariant      AR med   MTP med  ratio med  ratio/base (paired median)  tpf')
for v in variants:
    a = res[v]
    if not a: continue
    pr = [x[2] / y[2] for x, y in zip(a, res[base])]
    print(f'{v.split("=")[0]:10s} {statistics.median(x[0] for x in a):8.1f} {statistics.median(x[1] for x in a):8.1f} '
          f'{statistics.median(x[2] for x in a):9.3f}  {statistics.median(pr):9.3f} (min {min(pr):.3f} max {max(pr):.3f})  {a[0][3]}')
