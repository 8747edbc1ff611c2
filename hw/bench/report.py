#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""make bench-hw, report part: report.py BENCHDIR. Reads BENCHDIR/sim.json (bench.py),
Yosys' stat and nextpnr's log (synth.sh, pnr.sh) and tools.txt, draws
docs/img/hw_throughput_vs_size.png and docs/img/hw_throughput_vs_occupancy.png and writes
the "Numbers" section of docs/HARDWARE.md (between its bench-hw markers, appended when
absent). Needs Debian's python3-matplotlib (/usr/bin/python3), like scripts/plot.py."""
import glob
import json
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CLK = 156.25e6     # Hz: 64 bits a cycle = 10 Gb/s
WIRE = 4 + 20      # FCS (not on the stream) + preamble, SFD and inter-frame gap
BEGIN, END = "<!-- bench-hw begin -->", "<!-- bench-hw end -->"
SIZE = {8: "1k", 10: "4k", 12: "16k"}


def line_cycles(s):
    return (s + WIRE) * 8 / 64.0


def pass_cycles(s):
    return (s + 7) // 8


def stat(path):
    cells = {}
    if not os.path.exists(path):
        return None
    text = open(path).read()
    if "=== design hierarchy ===" in text:  # not flattened (synth_xilinx): the totals only
        text = text[text.index("=== design hierarchy ==="):]
    for l in text.splitlines():
        m = re.match(r"^\s+(\S+)\s+(\d+)\s*$", l)
        if m and not m.group(1).startswith(("Number", "$")):
            cells[m.group(1)] = cells.get(m.group(1), 0) + int(m.group(2))
    return cells


def summary(fam, c):
    if c is None:
        return None
    if fam == "ecp5":
        return (c.get("LUT4", 0), c.get("TRELLIS_FF", 0), "%d DP16KD" % c.get("DP16KD", 0),
                "%d CCU2C, %d TRELLIS_DPR16X4" % (c.get("CCU2C", 0), c.get("TRELLIS_DPR16X4", 0)))
    if fam == "ice40":
        ff = sum(v for k, v in c.items() if k.startswith("SB_DFF"))
        return (c.get("SB_LUT4", 0), ff, "%d SB_RAM40_4K" % c.get("SB_RAM40_4K", 0), "%d SB_CARRY" % c.get("SB_CARRY", 0))
    lut = sum(v for k, v in c.items() if re.match(r"^LUT[1-6]$", k))
    ff = sum(v for k, v in c.items() if k in ("FDRE", "FDSE", "FDCE", "FDPE"))
    b36, b18 = c.get("RAMB36E2", 0), c.get("RAMB18E2", 0)
    lram = sum(v for k, v in c.items() if k.startswith("RAM") and not k.startswith("RAMB"))
    return (lut, ff, "%g RAMB36 (%d RAMB36E2, %d RAMB18E2)" % (b36 + b18 / 2, b36, b18),
            "%d LUTRAM cells, %d SRL16E, %d CARRY4/8, %d MUXF7/8/9, %d DSP48E2" % (
                lram, c.get("SRL16E", 0), c.get("CARRY4", 0) + c.get("CARRY8", 0),
                sum(c.get(k, 0) for k in ("MUXF7", "MUXF8", "MUXF9")), c.get("DSP48E2", 0)))


def mhz(text):
    """a nextpnr log's figures: (the placement estimate, the routed Fmax or None)"""
    got = [float(x) for x in re.findall(r"Max frequency for clock\s+'[^']*': ([0-9.]+) MHz", text)]
    if not got:
        return None, None
    return got[0], got[-1] if "Routing complete" in text and len(got) >= 2 else None


def floorplanned(d, blog2):
    fp = os.path.join(d, "floorplan_%d.txt" % blog2)  # pnr.sh: floorplan.py before nextpnr
    return os.path.exists(fp) and "placed" in open(fp).read()


def seeds(d, blog2):
    """every seed pnr.sh ran (BENCH_HW_SEEDS), the first's log pnr_ecp5_B.log, the others'
    pnr_ecp5_B_seedS.log: [(seed, routed MHz or None)], the first seed first"""
    p = os.path.join(d, "pnr_ecp5_%d.log" % blog2)
    if not os.path.exists(p):
        return []
    sp = os.path.join(d, "seed_pnr_%d.txt" % blog2)
    out = [(int(open(sp).read().strip()) if os.path.exists(sp) else 1, mhz(open(p).read())[1])]
    more = []
    for q in glob.glob(os.path.join(d, "pnr_ecp5_%d_seed*.log" % blog2)):
        sd = re.search(r"_seed(\d+)\.log$", q)
        if sd:
            more.append((int(sd.group(1)), mhz(open(q).read())[1]))
    return out + sorted(more)


def fmax(d, blog2):
    """the Fmax cell: each seed's routed figure, or the first's placement estimate"""
    p = os.path.join(d, "pnr_ecp5_%d.log" % blog2)
    if not os.path.exists(p):
        return None
    text = open(p).read()
    est, routed = mhz(text)
    if est is None:
        return None
    if routed is None:
        if not re.search(r"Info: Routing|Setting up routing queue", text):  # pnr.sh with BENCH_HW_PNR_ARGS=--no-route
            return "%.1f (placement estimate, `--no-route`)" % est
        return "%.1f (placement estimate: routing not finished)" % est
    runs = seeds(d, blog2)
    more = "".join("; %.1f with seed %d" % (v, sd) if v is not None else "; seed %d not routed" % sd
                   for sd, v in runs[1:])
    return "%.1f (routed,%s seed %d%s)" % (routed, " block RAMs floorplanned," if floorplanned(d, blog2) else "",
                                           runs[0][0], more)


def util(d, blog2):
    p = os.path.join(d, "pnr_ecp5_%d.log" % blog2)
    if not os.path.exists(p):
        return None
    got = dict(re.findall(r"Info:\s+(TRELLIS_COMB|TRELLIS_FF|DP16KD):\s+\d+/\s*\d+\s+(\d+)%", open(p).read()))
    if not got:
        return None
    return "; ECP5-85: %s%% COMB, %s%% FF, %s%% DP16KD" % (got.get("TRELLIS_COMB", "?"), got.get("TRELLIS_FF", "?"), got.get("DP16KD", "?"))


def secs(d, name):
    p = os.path.join(d, "time_%s.txt" % name)
    return int(open(p).read()) if os.path.exists(p) else None


def plots(sim, img):
    rows = sorted(sim["size"], key=lambda r: r["size"])
    xs = [r["size"] for r in rows]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    a1.plot(xs, [r["cycles_per_frame"] for r in rows], label="natrix core (simulated, both directions loaded)", color="#1f77b4", marker="o", lw=2)
    a1.plot(xs, [pass_cycles(s) for s in xs], label="no-NAT passthrough, 64 bit (1 beat a cycle)", color="#7f7f7f", marker="^", ls="--")
    a1.plot(xs, [line_cycles(s) for s in xs], label="10G line rate budget", color="#000000", ls=":")
    a1.set_xscale("log")
    a1.set_yscale("log")
    a1.set_xlabel("frame size on the stream (bytes, no FCS)")
    a1.set_ylabel("cycles per frame per direction")
    a1.legend(fontsize=8)
    a1.grid(True, which="both", alpha=0.3)
    gb = lambda s, c: (s + WIRE) * 8 * CLK / c / 1e9  # noqa: E731
    a2.plot(xs, [gb(r["size"], r["cycles_per_frame"]) for r in rows], label="natrix core at 156.25 MHz", color="#1f77b4", marker="o", lw=2)
    a2.plot(xs, [gb(s, pass_cycles(s)) for s in xs], label="no-NAT passthrough", color="#7f7f7f", marker="^", ls="--")
    a2.axhline(10, color="#000000", ls=":", label="10G line rate")
    a2.set_xscale("log")
    a2.set_xlabel("frame size on the stream (bytes, no FCS)")
    a2.set_ylabel("Gb/s per direction (wire equivalent)")
    a2.set_ylim(0, None)
    a2.legend(fontsize=8)
    a2.grid(True, alpha=0.3)
    fig.suptitle("NAT core: throughput and cycles per frame against frame size (Verilator)")
    fig.tight_layout()
    fig.savefig(os.path.join(img, "hw_throughput_vs_size.png"), dpi=110)
    plt.close(fig)
    rows = sorted(sim["load"], key=lambda r: r["load"])
    fig, a = plt.subplots(figsize=(6.5, 4.2))
    a.plot([100 * r["load"] for r in rows], [CLK / r["cycles_per_frame"] / 1e6 for r in rows], label="natrix core, 64-byte frames, each direction", color="#1f77b4", marker="o", lw=2)
    a.axhline(10e9 / ((64 + WIRE) * 8) / 1e6, color="#000000", ls=":", label="10G line rate (64-byte stream frames)")
    a.set_xlabel("table occupancy (% of entries per direction)")
    a.set_ylabel("Mpps per direction")
    a.set_ylim(0, 1.2 * max(CLK / r["cycles_per_frame"] / 1e6 for r in rows))
    a.legend(fontsize=8, loc="lower right")
    a.grid(True, alpha=0.3)
    a.set_title("NAT core: throughput against table occupancy (Verilator)")
    fig.tight_layout()
    fig.savefig(os.path.join(img, "hw_throughput_vs_occupancy.png"), dpi=110)
    plt.close(fig)


def main():
    d = sys.argv[1]
    sim = json.load(open(os.path.join(d, "sim.json")))
    img = os.path.join(ROOT, "docs", "img")
    os.makedirs(img, exist_ok=True)
    plots(sim, img)
    tools = open(os.path.join(d, "tools.txt")).read().strip() if os.path.exists(os.path.join(d, "tools.txt")) else "?"
    L = [BEGIN, "", "## Numbers (`make bench-hw`)", ""]
    L.append("Written by `make bench-hw` (hw/bench/: bench.py drives the Verilator testbench, "
             "synth.sh and pnr.sh run Yosys and nextpnr, pnr.sh after floorplan.py has fixed the 1k core's block RAM sites, report.py writes this section and the plots)%s. "
             "Tools: %s." % (" with BENCH_QUICK=1" if sim.get("quick") else "", tools))
    L += ["", "### Throughput against frame size", "",
          "Both inputs fed back to back (tvalid always high, tready always high), one random installed "
          "flow of 48 per frame, %s entries per direction; every output frame checked byte for byte against the "
          "reference translation. The testbench counts the run's cycles from the first input beat to the last "
          "output beat; that is one frame's latency plus (frames − 1) frame periods, so the steady-state cycles "
          "per frame are (run cycles − isolated latency of that size) / (frames − 1); the plain run average "
          "(run cycles / frames, the fill included) is shown too. Sizes are bytes on the AXI4-Stream (the MAC has stripped the FCS): 60 is a minimum "
          "Ethernet frame (64 on the wire). Line rate: (size + 4 FCS + 20 preamble and gap) × 8 bits at 10 Gb/s, "
          "i.e. (size + 24) / 8 cycles at 156.25 MHz; 60 → 10.5 cycles. The no-NAT passthrough is the "
          "ideal 64-bit stream of the same clock, one beat a cycle, ⌈size / 8⌉ cycles: computed, "
          "not a simulated RTL." % SIZE.get(sim["blog2"], "?"), "",
          "![throughput and cycles per frame against size](img/hw_throughput_vs_size.png)", "",
          "| size (B) | frames each way | cycles per frame per direction (steady) | run average | passthrough | line-rate budget | Mpps per direction at 156.25 MHz | Gb/s wire equivalent | mismatches |",
          "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(sim["size"], key=lambda r: r["size"]):
        s, c = r["size"], r["cycles_per_frame"]
        L.append("| %d | %d | %.3f | %.3f | %d | %.1f | %.2f | %.2f | %d |" % (
            s, r["frames_per_dir"], c, r["cycles_per_frame_run"], pass_cycles(s), line_cycles(s), CLK / c / 1e6,
            (s + WIRE) * 8 * CLK / c / 1e9, r["mismatches"]))
    r60 = [r for r in sim["size"] if r["size"] == 60]
    if r60:
        c = r60[0]["cycles_per_frame"]
        L += ["", "Target (≤ 10.5 cycles per minimum frame per direction, both directions at once): "
              "**%.3f cycles, %s**." % (c, "met" if c <= 10.5 else "NOT met")]
    L += ["", "### Throughput against table occupancy", "",
          "The tables filled to the load (a flow whose bucket is full stays in software, so the achieved "
          "occupancy is shown), then 64-byte frames back to back both ways over random installed flows.", "",
          "![throughput against occupancy](img/hw_throughput_vs_occupancy.png)", "",
          "| occupancy | frames each way | cycles per frame per direction (steady) | run average | Mpps per direction | mismatches |",
          "|---|---|---|---|---|---|"]
    for r in sorted(sim["load"], key=lambda r: r["load"]):
        L.append("| %.3f | %d | %.3f | %.3f | %.2f | %d |" % (r["load"], r["frames_per_dir"], r["cycles_per_frame"], r["cycles_per_frame_run"],
                                                     CLK / r["cycles_per_frame"] / 1e6, r["mismatches"]))
    cs = [r["cycles_per_frame"] for r in sim["load"]]
    L += ["", "Target (flat): spread %.3f cycles (%.2f %%) between the lowest and the highest occupancy." % (
        max(cs) - min(cs), 100 * (max(cs) - min(cs)) / min(cs))]
    L += ["", "### Latency", "",
          "Isolated frames (one in flight, random flows, alternating directions), first beat in to last beat "
          "out. The testbench counts cycles per `sync`, not per frame, so latency under load (queueing "
          "behind the other frames) is not measured; the core is store and forward with a fixed pipeline, "
          "so isolated latency has no spread.", "",
          "| size (B) | frames | min | median | p99 | max | ns at 156.25 MHz (median) |", "|---|---|---|---|---|---|---|"]
    for s, v in sorted(sim["latency"].items(), key=lambda x: int(x[0])):
        L.append("| %s | %d | %d | %d | %d | %d | %.0f |" % (s, v["n"], v["min"], v["median"], v["p99"], v["max"], v["median"] / CLK * 1e9))
    L += ["", "### Size and Fmax", "",
          "Yosys, the whole core (both directions, 16 next hops, 16 KiB data FIFO per direction), "
          "before place and route (ECP5: Yosys' count, before absorb.py moves the registers after a block RAM's read data into its output register; ECP5 and iCE40 flattened; UltraScale+ the design hierarchy's totals; "
          "its LUT column leaves out the SRL16E shift registers, which also sit in LUTs); entries are per direction (4 ways × 2^BLOG2 buckets). "
          "Fmax: nextpnr-ecp5 on an ECP5-85 (LFE5U-85F) speed grade 6, out of context (no IO buffers, "
          "no global clock network: the AXI signals are not pins), one run per seed (its cell names them), the 1k "
          "core's block RAMs on fixed sites (`hw/bench/floorplan.py`) unless its cell says otherwise. A missing cell was not run "
          "or did not finish (see the seconds column). Rows with a commit in their name are earlier "
          "measurements, kept for comparison.", "",
          "| family | entries | LUT | FF | block RAM | other | Yosys s | Fmax (MHz) | nextpnr s |",
          "|---|---|---|---|---|---|---|---|---|"]
    for fam, name in (("ecp5", "ECP5 (`synth_ecp5`)"), ("ice40", "iCE40 (`synth_ice40`)"), ("xcup", "UltraScale+ (`synth_xilinx -family xcup`)")):
        for b in (8, 10, 12):
            s = summary(fam, stat(os.path.join(d, "stat_%s_%d.txt" % (fam, b))))
            t = secs(d, "%s_%d" % (fam, b))
            fm = fmax(d, b) if fam == "ecp5" else None
            tp = secs(d, "pnr_%d" % b) if fam == "ecp5" else None
            u = util(d, b) if fam == "ecp5" else None
            if s and u:
                s = s[:3] + (s[3] + u,)
            ab = os.path.join(d, "absorb_%d.txt" % b)
            if s and fam == "ecp5" and os.path.exists(ab):  # synth.sh: absorb.py after Yosys
                m = re.search(r"(\d+) flip-flops moved into (\d+) block RAM", open(ab).read())
                if m and m.group(1) != "0":
                    s = s[:3] + (s[3] + "; %s of the FF are block RAM output registers in nextpnr's netlist "
                                 "(absorb.py, %s read ports)" % m.groups(),)
                elif m:
                    s = s[:3] + (s[3] + "; absorb.py: no block RAM read port qualifies (the read data goes "
                                 "through logic first, e.g. the mux between block RAMs stacked in depth)",)
            if s is None and t is None:
                continue
            L.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                name, SIZE[b], s[0] if s else "–", s[1] if s else "–", s[2] if s else "–", s[3] if s else "not finished (cut at the timeout or failed)",
                t if t is not None else "–", fm or "–", tp if tp is not None else "–"))
    rows = os.path.join(d, "rows.txt")  # earlier measurements kept for comparison (written by hand)
    if os.path.exists(rows):
        L += [l for l in open(rows).read().splitlines() if l.startswith("|")]
    runs = seeds(d, 8)
    ok = False
    if runs and runs[0][1] is None and fmax(d, 8):  # the first seed not routed: its estimate
        est = float(fmax(d, 8).split()[0])
        L += ["", "Fmax target (≥ 156.25 MHz for the whole core on ECP5-85 speed 6): **%s** at 1k entries "
              "(%s; %.0f %% of the target)." % ("met" if est >= 156.25 else "NOT met", fmax(d, 8), 100 * est / 156.25)]
    if runs and runs[0][1] is not None:
        vals = [v for _, v in runs if v is not None]
        lo = min(vals)
        ok = lo >= 156.25 and len(vals) == len(runs)
        fp = "block RAMs floorplanned" if floorplanned(d, 8) else "no floorplan"
        if len(runs) == 1:
            how = "(%.1f MHz, routed, %s, seed %d; %.0f %% of the target)" % (lo, fp, runs[0][0], 100 * lo / 156.25)
        elif ok:
            how = "with each of the %d placement seeds run (%s; routed, %s; the lowest %.1f %% of the target)" % (
                len(runs), ", ".join("seed %d: %.1f%s" % (sd, v, " MHz" if k == 0 else "")
                                     for k, (sd, v) in enumerate(runs)), fp, 100 * lo / 156.25)
        else:
            how = "over the placement seeds run, %s: the lowest %.1f %% of the target" % (fmax(d, 8), 100 * lo / 156.25)
        L += ["", "Fmax target (≥ 156.25 MHz for the whole core on ECP5-85 speed 6): **%s** at 1k entries %s. "
              "At %.1f MHz%s the 8 cycles of a minimum frame take %.0f ns: "
              "%.2f Mpps per direction, %s the 14.88 Mpps of 10G line rate; a 64-bit stream at %.1f MHz "
              "carries %.1f Gb/s, %s the 10 Gb/s that long frames need (the interface is sized for 156.25 MHz)." % (
                  "met" if ok else ("NOT met" if len(runs) == 1 or runs[0][1] < 156.25 else "NOT met with every seed"), how,
                  lo, " (the lowest)" if len(runs) > 1 else "", 8e3 / lo, lo / 8, "above" if lo / 8 >= 14.88 else "below",
                  lo, lo * 64 / 1000, "at or above" if lo * 64 >= 10000 else "below")]
    pth = os.path.join(d, "paths_8.txt")  # pnr.sh: paths.py over the placed netlist
    if os.path.exists(pth):
        txt = open(pth).read().splitlines()
        first = txt[0] if txt else ""
        base = lambda n: re.split(r"_TRELLIS_|_LUT4|_CCU2C|_PFUMX|\$", n)[0]
        tops, seen = [], set()
        for i, l in enumerate(txt):
            m = re.match(r"^(\d+\.\d+) ns -> (\S+?)\.(\w+) at ", l)
            if not m or i + 1 >= len(txt) or (base(m.group(2)), m.group(3)) in seen:
                continue
            seen.add((base(m.group(2)), m.group(3)))
            st = txt[i + 1].split()
            tops.append("%s ns from `%s` to `%s` (%s)" % (m.group(1), base(st[1]) if len(st) > 1 else "?",
                                                            base(m.group(2)), m.group(3)))
        if first.startswith("routed (net delays"):
            L += ["", "Where the time goes at 1k entries (`hw/bench/paths.py` over the routed design: nextpnr's "
                  "SDF, every routed connection's delay, and Project Trellis' speed-6 cell delays, register to "
                  "register): %s. Longest paths: %s." % (first.split(": ", 1)[1], "; ".join(tops[:4]))]
        elif first.startswith("routed"):
            L += ["", "Where the time goes at 1k entries (`hw/bench/paths.py` over nextpnr's report of the routed "
                  "design: the routed arrival time at every register input; each path's start is traced over the "
                  "placed netlist with nextpnr's placement delay formula, so it names where the path comes from, "
                  "not its routed steps): %s. Longest: %s." % (first.split(": ", 1)[1], "; ".join(tops[:4]))]
        if first.startswith("estimate:"):
            L += ["", "Where the time goes at 1k entries (`hw/bench/paths.py` over nextpnr's placed netlist: its placement "
                  "delay formula and Project Trellis' speed-6 cell delays; a rough estimate, not nextpnr's report): %s. "
                  "Longest paths: %s." % (first[len("estimate: "):], "; ".join(tops[:4]))]
    L += ["", "Beside the source document's Table 1 (Zynq UltraScale+ ZCU102, Vivado, table size 1024, "
          "whole design with the 10/25G Ethernet subsystem): 33,373 LUT, 47,067 FF, 142 BRAM, of which "
          "the NAT's delta over the Ethernet example is 14,464 LUT, 13,252 FF, 2.5 BRAM; at the "
          "MAC's 156 MHz. The UltraScale+ row above is Yosys' generic mapping of this core alone, "
          "not Vivado's: a different synthesiser, no place and route, so it is a size class, not a like-for-like count.", "",
          "Beside natrix's XDP data plane (docs/PERFORMANCE.md, `make bench`): an established packet costs "
          "218 ns (one hot flow) to 498–606 ns (random flow among 1M–10M connections) of one CPU core "
          "end to end, i.e. 1.6–4.6 Mpps per core. The core takes a minimum frame every ~8 cycles per "
          "direction (~19.5 Mpps per direction, ~51 ns per frame per direction %s 156.25 MHz, both "
          "directions at once), bounded by the 10G line (14.88 Mpps); but it holds 1k–16k entries, "
          "not millions: the XDP program stays the path for everything the daemon does not install." % (
              "at" if ok else "if it closed timing at"), "",
          "What an open-FPGA Fmax does and does not tell about a 16 nm part: the ECP5 is a 40 nm "
          "LUT4 family; nextpnr's figure says whether the pipeline's longest register-to-register "
          "path closes at 156.25 MHz on a slow, small-LUT fabric with open tools, and which path is critical. It does not predict a Zynq "
          "UltraScale+ (16 nm, LUT6, faster carry chains and block RAM, Vivado's placer and timing "
          "models): that part usually runs the same RTL markedly faster, but only Vivado's timing "
          "report on that part says by how much. It also leaves out IO and clock-network timing "
          "(out of context here) and routing congestion at larger tables.", "", END, ""]
    notes = os.path.join(d, "notes.txt")  # what the run itself cannot know (written by hand)
    if os.path.exists(notes):
        L[-3:-3] = ["", "Run notes: " + open(notes).read().strip()]
    p = os.path.join(ROOT, "docs", "HARDWARE.md")
    doc = open(p).read()
    sec = "\n".join(L)
    if BEGIN in doc and END in doc:
        doc = doc[:doc.index(BEGIN)] + sec + doc[doc.index(END) + len(END) + 1:]
    else:
        doc = doc.rstrip("\n") + "\n\n" + sec
    open(p, "w").write(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
