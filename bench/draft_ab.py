#!/usr/bin/env python3
"""draft_ab.py: greedy decode speed of mtplx builds, interleaved.

Each repetition runs, for each prompt, each config (AR, MTP depth 1..3) and
each build in turn, `mtplx run --temp 0 -t 1 --ignore-eos` and reads its
stats line: gen tok/s, tokens per forward and the draft share of the time.
From these, per run: the step time (ms per verify forward) and the cost of
one head step (draft ms per step / depth), also as a fraction of a plain AR
step (the median AR run of the same build). Prints the median of each cell,
so load drifting during the run hits every build alike, and checks that all
greedy texts are identical. "best" columns: per prompt the fastest of the
repetitions (the least disturbed run), then the median over prompts. On a shared machine wall-clock tok/s counts the
time other processes held the core; "cpu tok/s" is (n - 1) tokens over the
run's CPU time (rusage) less that of a 1-token run of the same build and
prompt (load, prefill, first token): preemption is not counted, the other
processes' memory traffic still is. A benchmark, not a test.

  bench/draft_ab.py BUILD [BUILD ...] [--reps 5] [-n 128] [--prompts 3] [--depths 1,2,3]
  BUILD: a path to an mtplx binary, optionally followed by ':' and more
         `mtplx run` arguments, e.g. build/mtplx:--draft-q8
"""
import argparse, json, os, re, resource, statistics, subprocess

PROMPTS_FILE = os.path.join(os.path.dirname(__file__), "suites", "throughput.json")
STATS = re.compile(r"gen (\d+) tok ([\d.]+) tok/s(?:.*?([\d.]+) tok/forward, draft (\d+)% verify (\d+)%)?")


def run(build, prompt, n, depth):
    binary, _, extra = build.partition(":")
    args = [binary, "run", "-p", prompt, "-n", str(n), "--temp", "0", "-t", "1", "--ignore-eos"]
    args += ["--no-mtp"] if depth == 0 else ["--draft-depth", str(depth)]
    args += extra.split()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(args, capture_output=True, text=True, check=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    out, err = r.stdout, r.stderr
    m = STATS.search(err)
    if n == 1:
        return {"cpu": cpu}, out
    tps = float(m.group(2))
    fwd = float(m.group(3)) if m.group(3) else 1.0
    draft = int(m.group(4)) / 100 if m.group(4) else 0.0
    step = 1000 * fwd / tps
    return {"tps": tps, "fwd": fwd, "draft": draft, "step": step, "cpu": cpu,
            "head": draft * step / depth if depth else 0.0}, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("builds", nargs="+")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--depths", default="1,2,3")
    a = ap.parse_args()
    prompts = [p["text"] for p in json.load(open(PROMPTS_FILE))["prompts"]][: a.prompts]
    configs = [0] + [int(d) for d in a.depths.split(",")]
    cells, texts = {}, {}
    os.system("uptime")
    base = {}
    for _ in range(a.reps):
        for pi, p in enumerate(prompts):
            for bi, b in enumerate(a.builds):
                base.setdefault((bi, pi), []).append(run(b, p, 1, 0)[0]["cpu"])
            for d in configs:
                for bi, b in enumerate(a.builds):
                    res, out = run(b, p, a.n, d)
                    res["pi"] = pi
                    cells.setdefault((bi, d), []).append(res)
                    texts[(pi, bi, d)] = out
    os.system("uptime")
    same = all(texts[(pi, bi, d)] == texts[(pi, 0, 0)] for pi in range(len(prompts))
               for bi in range(len(a.builds)) for d in configs)
    print(f"greedy text identical across builds and depths: {same}")
    for (bi, d), v in cells.items():
        for x in v:
            x["ctps"] = (a.n - 1) / max(1e-6, x["cpu"] - statistics.median(base[(bi, x["pi"])]))
    med = lambda v, key: statistics.median(x[key] for x in v)
    def best(v, key, pick=max):
        return statistics.median(pick(x[key] for x in v if x["pi"] == pi) for pi in range(len(prompts)))
    for bi, b in enumerate(a.builds):
        ar_step = med(cells[(bi, 0)], "step")
        print(f"\n{b}")
        print(f"{'config':8} {'tok/s':>7} {'vs AR':>6} {'cpu tok/s':>9} {'vs AR':>6} {'tok/fwd':>7} "
              f"{'step ms':>7} {'draft%':>6} {'head ms':>7} {'head/AR':>7} {'best':>7} {'vs AR':>6} "
              f"{'head':>5}")
        bar = best(cells[(bi, 0)], "tps")
        ar, car = med(cells[(bi, 0)], "tps"), med(cells[(bi, 0)], "ctps")
        for d in configs:
            v = cells[(bi, d)]
            head = med(v, "head")
            print(f"{'AR' if d == 0 else 'depth %d' % d:8} {med(v, 'tps'):7.1f} {med(v, 'tps') / ar:6.2f} "
                  f"{med(v, 'ctps'):9.1f} {med(v, 'ctps') / car:6.2f} "
                  f"{med(v, 'fwd'):7.2f} {med(v, 'step'):7.2f} {100 * med(v, 'draft'):6.0f} "
                  f"{head:7.2f} {head / ar_step:7.2f} {best(v, 'tps'):7.1f} {best(v, 'tps') / bar:6.2f} "
                  f"{best(v, 'head', min):5.2f}")


if __name__ == "__main__":
    main()
