#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""make bench-hw, simulation part: drives the core's Verilator testbench (hw/tb) with
stimulus built by hw/tb/vectors.py's helpers and counts cycles.

- cycles per frame and throughput against frame size, both directions loaded back to back
  (every output frame checked byte for byte against the reference translation);
- 64-byte throughput against table occupancy (0.25 .. 0.95);
- latency of isolated frames (first beat in to last beat out), per size; the steady-state
  cycles per frame are (run cycles - one frame's latency) / (frames - 1).

Writes sim.json into NX_HW_BENCH_OUT (default hw/build/bench). Usage: NX_HW_SIM=.../Vtb_core NX_HW_BLOG2=8 bench.py"""

import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tb"))
import vectors as V  # noqa: E402

QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")
SIZES = [60, 64, 128, 256, 512, 1024, 1514, 4096, 9000]
LOADS = [0.25, 0.5, 0.75, 0.95] if QUICK else [0.25, 0.4, 0.55, 0.7, 0.85, 0.95]


def run(cases):
    script = []
    for c, tab in cases:
        script.append("mark %s" % c.name)
        script.extend(c.lines)
    script.append("mark end")
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as t:
        t.write("\n".join(script) + "\n")
        path = t.name
    res = subprocess.run([os.environ["NX_HW_SIM"], path], stdout=subprocess.PIPE, text=True)
    os.unlink(path)
    if res.returncode != 0:
        sys.exit("simulator exited with %d" % res.returncode)
    outs, cur = {}, None
    for l in res.stdout.splitlines():
        if l.startswith("mark "):
            cur = l[5:]
            outs[cur] = []
        elif cur is not None:
            outs[cur].append(l)
    got = []
    for c, tab in cases:
        out = outs.get(c.name, ["err no output"])
        fails = V.check(c, out, tab)
        syncs = [int(l.split()[1]) for l in out if l.startswith("sync")]
        got.append((fails, syncs))
    return got


def main():
    rnd = random.Random(int(os.environ.get("NX_HW_SEED", "33")))
    res = {"blog2": V.BLOG2, "entries_per_direction": V.WAYS << V.BLOG2, "quick": QUICK}
    # latency: isolated frames, one at a time, random flows, both directions
    lat = {}
    for s in SIZES:
        c, tab = V.own_case("lat_%d" % s, rnd, 0, 0, 0, False, [s])
        fl = V.flows(rnd, 48)
        nf = 100 if s in (60, 64, 1514) else 10
        for k in range(nf):
            f = rnd.choice(fl)
            d = k & 1
            fr = (f.out_frame if d == 0 else f.in_frame)(rnd, s, ident=k)
            c.frame(d, fr, ("xlate", (f.out_x if d == 0 else f.in_x)(fr)))
            c.lines.append("sync")
        fails, syncs = run([(c, tab)])[0]
        v = sorted(syncs[1:])  # the first sync: configuration only
        lat[s] = {"n": len(v), "min": v[0], "median": v[len(v) // 2],
                  "p99": v[min(len(v) - 1, int(0.99 * len(v)))], "max": v[-1], "mismatches": len(fails)}
        print("latency %d B: %s" % (s, lat[s]), flush=True)
    res["latency"] = lat
    # throughput against size
    cases = []
    for s in SIZES:
        beats = (s + 7) // 8
        n = max(12, min(600 if QUICK else 1500, (40000 if QUICK else 150000) // beats))
        c, tab = V.own_case("size_%d" % s, rnd, n, 0, 0, False, [s])
        c.n = n
        cases.append((c, tab))
    rows = []
    for (c, tab), (fails, syncs) in zip(cases, run(cases)):
        s = int(c.name.split("_")[-1])
        cyc = syncs[-1]
        # the run's cycles = one frame's latency + (n - 1) frame periods: the steady state
        steady = (cyc - lat[s]["max"]) / (c.n - 1)
        rows.append({"size": s, "frames_per_dir": c.n, "cycles": cyc, "cycles_per_frame_run": cyc / c.n,
                     "cycles_per_frame": steady, "mismatches": len(fails)})
        for f in fails[:3]:
            print("  FAIL %s: %s" % (c.name, f))
        print("size %5d B: %4d frames each way, %8d cycles, %.3f cycles/frame/direction steady (%.3f run average), %d failures"
              % (s, c.n, cyc, steady, cyc / c.n, len(fails)), flush=True)
    res["size"] = rows
    # throughput against occupancy
    cases = [V.line_rate_full_table(rnd, load=l, n_frames=400 if QUICK else 1500) for l in LOADS]
    rows = []
    for (c, tab), (fails, syncs) in zip(cases, run(cases)):
        n = c.perf[0]
        steady = (syncs[-1] - lat[64]["max"]) / (n - 1)
        rows.append({"load": c.occupancy, "frames_per_dir": n, "cycles": syncs[-1], "cycles_per_frame_run": syncs[-1] / n,
                     "cycles_per_frame": steady, "mismatches": len(fails)})
        print("occupancy %.3f: %.3f cycles/64-byte frame/direction steady (%.3f run average), %d failures"
              % (c.occupancy, steady, syncs[-1] / n, len(fails)), flush=True)
    res["load"] = rows
    out = os.environ.get("NX_HW_BENCH_OUT", os.path.join(V.ROOT, "hw", "build", "bench"))
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "sim.json"), "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
