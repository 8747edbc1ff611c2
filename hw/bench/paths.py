#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""A rough static timing estimate over a placed ECP5 netlist (nextpnr-ecp5 --write), for
when nextpnr's own report has no paths: with --no-route it gives the Fmax estimate and a
slack histogram but no critical path.

    paths.py PLACED.json [N] [PERIOD_NS] [REPORT.json | ROUTED.sdf]

Prints the N longest register-to-register paths (default 15) with their cells, places and
delays, and which blocks the endpoints that miss PERIOD_NS (default 6.4: 156.25 MHz) sit in.
With REPORT.json (nextpnr's --report of a routed run with --detailed-timing-report: the
routed arrival time at every register input), the endpoints and their times are the routed
ones, so the listing covers every failing endpoint of the routed design where nextpnr
prints one path; the steps printed under each are still traced with the estimate below
(the report has no delays inside a path), so they name where the path comes from. With
ROUTED.sdf (nextpnr's --sdf of a routed run: every routed connection's delay) each net's
delay is the routed one, so the paths themselves, step by step, are the routed design's.

The model, so its output can be weighed:
- a net's delay between two placed cells is nextpnr-ecp5's own placement estimate
  (Arch::predictDelay at speed grade 6: 80 ps per unit, 6 units plus 2 a tile for the first
  five tiles in x and in y, 1 a tile beyond; 0 for the carry chain, the LUT-to-mux inputs,
  a LUT into its own flip-flop, and most LUT-to-LUT hops inside a tile);
- cell delays are Project Trellis' speed grade 6 figures (prjtrellis-db,
  ECP5/timing/cell_timing_6.html, maximum column): LUT4 input to F 236 ps, to the LUT5 mux
  output 401, mux inputs 242; carry input to carry output 71, LUT input to carry out 447,
  carry in to F 443; flip-flop clock to Q 525, setup 0 (LSR 424); distributed RAM read
  236, its write clock to F 929; block RAM (DP16KD) clock to data out 5,609 ps without
  the output register (what Yosys 0.23 maps: REGMODE NOREG) and 938 with it, setup 251.
It ignores clock skew (the clock is ideal, as in nextpnr's out-of-context estimate) and
fan-out. Its longest path lands near nextpnr's figure for the same placement; the order
of the paths is what it is for.
"""
import collections
import json
import re
import sys

PS_UNIT = 80  # (80 - 9 * speed) with speed grade 6 = 0


def loc_of(cell):
    m = re.match(r"X(\d+)/Y(\d+)/(\w+)(?:\.(\w+))?", cell["attributes"].get("NEXTPNR_BEL", ""))
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), m.group(3), m.group(4) or ""


def net_delay(src, sport, dst, dport):
    if (sport == "FCO" and dport == "FCI") or dport in ("FXA", "FXB") or (sport == "F" and dport == "DI"):
        return 0
    if src is None or dst is None:
        return 6 * PS_UNIT
    if src[:2] == dst[:2]:
        if dport in ("A", "B", "C", "D") and sport in ("Q", "F", "OFX"):
            return 0 if src[2] == dst[2] else 3 * PS_UNIT  # same slice: direct; same tile: local
    dx, dy = abs(src[0] - dst[0]), abs(src[1] - dst[1])
    return PS_UNIT * (6 + max(dx - 5, 0) + max(dy - 5, 0) + 2 * (min(dx, 5) + min(dy, 5)))


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    period = float(sys.argv[3]) * 1000 if len(sys.argv) > 3 else 6400.0
    nshow = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    j = json.load(open(sys.argv[1]))
    routed = {}  # (register cell, input port) -> routed arrival in ps, from a routed run's report
    sdf = {}     # (driver cell, port, sink cell, port) -> routed net delay in ps, from its SDF
    if len(sys.argv) > 4 and sys.argv[4].endswith(".sdf"):
        unesc = lambda x: re.sub(r"\\(.)", r"\1", x)
        for m in re.finditer(r"\(INTERCONNECT (\S+) (\S+) \((\d+):(\d+):(\d+)\)", open(sys.argv[4]).read()):
            a, b = unesc(m.group(1)).rsplit("/", 1), unesc(m.group(2)).rsplit("/", 1)
            sdf[(a[0], a[1], b[0], b[1])] = int(m.group(5))
        if not sdf:
            print("paths.py: %s has no INTERCONNECT delays" % sys.argv[4])
            return 2
    elif len(sys.argv) > 4:
        for n in json.load(open(sys.argv[4])).get("detailed_net_timings", []):
            for e in n["endpoints"]:
                routed[(e["cell"], e["port"])] = int(round(max(e["delay"]) * 1000))
        if not routed:
            print("paths.py: %s has no detailed_net_timings (run nextpnr with --detailed-timing-report)" % sys.argv[4])
            return 2
    mod = next(m for m in j["modules"].values() if len(m.get("cells", {})) > 100)
    cells = mod["cells"]
    drivers = {}   # net bit -> (cell, port)
    sinks = collections.defaultdict(list)
    for name, c in cells.items():
        for p, bits in c["connections"].items():
            d = c["port_directions"].get(p)
            for b in bits:
                if not isinstance(b, int):
                    continue
                if d == "output":
                    drivers[b] = (name, p)
                elif d == "input":
                    sinks[b].append((name, p))
    locs = {n: loc_of(c) for n, c in cells.items()}

    def arcs(name, c, port):
        """combinational arcs from input `port` of cell c: [(output port, ps)]"""
        t = c["type"]
        mode = c["parameters"].get("MODE", "LOGIC")
        if t == "TRELLIS_COMB":
            if mode == "CCU2":
                if port == "FCI":
                    return [("F", 443), ("FCO", 71)]
                if port in ("A", "B", "C", "D"):
                    return [("F", 236), ("FCO", 447)]
                return []
            if port in ("A", "B", "C", "D"):
                return [("F", 236), ("OFX", 401)]
            if port in ("FXA", "FXB", "F1"):
                return [("OFX", 242)]
            if port == "M":
                return [("OFX", 256)]
            return []
        if t == "TRELLIS_RAMW":  # write data and address pass through to the RAM's LUTs
            return [(o, 0) for o in ("WDO0", "WDO1", "WDO2", "WDO3", "WADO0", "WADO1", "WADO2", "WADO3")
                    if c["connections"].get(o)]
        return []

    def start_delay(c, port):
        t = c["type"]
        if t == "TRELLIS_FF" and port == "Q":
            return 525
        if t == "DP16KD" and port.startswith("DO"):
            reg = c["parameters"].get("REGMODE_" + port[2], "NOREG").strip()
            return 938 if reg == "OUTREG" else (5609 if port[2] == "A" else 5830)
        return None

    def setup(c, port):
        t = c["type"]
        if t == "TRELLIS_FF":
            return 424 if port == "LSR" else 0 if port in ("M", "DI", "CE") else None
        if t == "DP16KD":
            return 251 if re.match(r"(AD|DI|CE|WE|OCE|RST|CS)", port) else None
        if t == "TRELLIS_COMB" and c["parameters"].get("MODE") == "DPRAM" and port.startswith(("WD", "WAD", "WRE")):
            return 323 if port.startswith("WRE") else 0
        return None

    # longest arrival at every (cell, output port), by memoised depth-first search backwards
    sys.setrecursionlimit(100000)
    arr = {}
    prev = {}
    inputs_of = collections.defaultdict(list)  # (cell, out port) -> [(in port, ps)]
    for name, c in cells.items():
        for p, d in c["port_directions"].items():
            if d != "input":
                continue
            for o, ps in arcs(name, c, p):
                inputs_of[(name, o)].append((p, ps))

    def net_of(name, port):
        bits = cells[name]["connections"].get(port, [])
        return bits[0] if bits and isinstance(bits[0], int) else None

    def arrival_in(name, port):
        """arrival at an input pin: its driver's output plus the net"""
        b = net_of(name, port)
        if b is None or b not in drivers:
            return None, None
        dn, dp = drivers[b]
        a = arrival_out(dn, dp)
        if a is None:
            return None, None
        if sdf:
            d = sdf.get((dn, dp, name, port))
            if d is None:  # a connection the router did not route (none expected)
                d = net_delay(locs[dn], dp, locs[name], port)
        else:
            d = net_delay(locs[dn], dp, locs[name], port)
        return a + d, (dn, dp)

    def arrival_out(name, port):
        k = (name, port)
        if k in arr:
            return arr[k]
        arr[k] = None  # a loop through logic (none expected) ends here
        sd = start_delay(cells[name], port)
        if sd is not None:
            arr[k] = sd
            prev[k] = None
            return sd
        best, bp = None, None
        for ip, ps in inputs_of.get(k, []):
            a, _ = arrival_in(name, ip)
            if a is not None and (best is None or a + ps > best):
                best, bp = a + ps, ip
        arr[k] = best
        prev[k] = bp
        return best

    ends = []
    for name, c in cells.items():
        for p, d in c["port_directions"].items():
            if d != "input":
                continue
            su = setup(c, p)
            if su is None:
                continue
            if routed:
                a = routed.get((name, p))
            else:
                a, drv = arrival_in(name, p)
            if a is None:
                continue
            ends.append((a + su, name, p))
    ends.sort(reverse=True)

    def trace(name, port):
        """the path into input (name, port), from its start"""
        steps = []
        a, drv = arrival_in(name, port)
        while drv is not None:
            dn, dp = drv
            steps.append((dn, dp, arr[(dn, dp)], locs[dn]))
            ip = prev.get((dn, dp))
            if ip is None:
                break
            _, drv = arrival_in(dn, ip)
        return list(reversed(steps))

    def block(name):
        """the instance path and the signal's name, without what synthesis added"""
        base = re.split(r"_TRELLIS_|_LUT4|_CCU2C|_PFUMX|_L6MUX|\$|_DP16KD|_DPR16X4", name)[0]
        base = re.sub(r"_\d+$", "", base)
        return base

    worst = ends[0][0] if ends else 0
    print("%s: longest path %.2f ns (%.1f MHz); %d of %d endpoints miss %.2f ns" % (
        "routed (arrival times from nextpnr's report)" if routed else
        "routed (net delays from nextpnr's SDF)" if sdf else "estimate", worst / 1000, 1e6 / worst if worst else 0, sum(1 for e in ends if e[0] > period), len(ends), period / 1000))
    seen = set()
    shown = 0
    for t, name, p in ends:
        if shown >= nshow:
            break
        steps = trace(name, p)
        key = (steps[0][0] if steps else "", name)
        if key in seen:
            continue
        seen.add(key)
        shown += 1
        print("\n%.2f ns -> %s.%s at %s" % (t / 1000, name, p, locs[name][:2] if locs[name] else "?"))
        for dn, dp, a, l in steps:
            print("   %7.2f  %-60s %-4s %s" % (a / 1000, dn[-60:], dp, l[:2] if l else "?"))
    missed = [n for t, n, p in ends if t > period]
    inst = collections.Counter(n.split(".")[0] if n.startswith(("u_i2o.", "u_o2i.")) else "(nx_core)" for n in missed)
    print("\nendpoints missing %.2f ns, by direction: %s" % (period / 1000, ", ".join(
        "%s %d" % kv for kv in inst.most_common())))
    print("by signal or block (the endpoint's name as synthesis left it):")
    for b, n in collections.Counter(block(n) for n in missed).most_common(30):
        print("   %6d  %s" % (n, b))
    return 0


if __name__ == "__main__":
    sys.exit(main())
