#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""Plots of a `make bench` run, from results.json (natrix bench report):

  throughput_vs_size.png          Mpps and Gbit/s against frame size, per gateway
  throughput_vs_connections.png   Mpps against concurrent connections (log scale)
  setup_rate.png                  new connections per second, UDP and TCP SYN
  cost_vs_sessions.png            ns per packet in BPF_PROG_TEST_RUN against live sessions
  alloc_curve.png                 new-flow cost against the mappings one subscriber holds
  capture.png                     natrix capture under load: the fast path by filter, rate and
                                  loss by frame size, loss by burst length (when measured)

Usage: plot.py RESULTS_JSON OUT_DIR. Needs Debian's python3-matplotlib (/usr/bin/python3).
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt  # noqa: E402

NAMES = {
    "natrix": "natrix",
    "nft": "nftables snat (conntrack)",
    "kernel": "kernel forwarding, no NAT",
    "xdpfwd": "minimal XDP forwarder",
    "setupfloor": "setup floor\n(forwarder + 1 table line)",
    "direct": "no gateway (generator → sink)",
}
STYLE = {
    "natrix": dict(color="#1f77b4", marker="o", lw=2),
    "nft": dict(color="#d62728", marker="s"),
    "kernel": dict(color="#7f7f7f", marker="^"),
    "xdpfwd": dict(color="#2ca02c", marker="D"),
    "setupfloor": dict(color="#9467bd", marker="v"),
    "direct": dict(color="#000000", marker="", ls=":"),
}
ORDER = ["natrix", "xdpfwd", "kernel", "nft", "setupfloor", "direct"]


def human(n):
    if n >= 1_000_000:
        return "%gM" % (n / 1e6)
    if n >= 1000:
        return "%gk" % (n / 1e3)
    return str(n)


def size_plot(e2e, out):
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for gw in ORDER:
        pts = sorted((r["size"], r["pps"], r["gbps"]) for r in e2e if r["gateway"] == gw and r["case"] == "size")
        if not pts:
            continue
        xs = [p[0] for p in pts]
        a1.plot(xs, [p[1] / 1e6 for p in pts], label=NAMES[gw], **STYLE[gw])
        a2.plot(xs, [p[2] for p in pts], label=NAMES[gw], **STYLE[gw])
    a1.set_ylabel("Mpps at the sink")
    a2.set_ylabel("Gbit/s at the sink (frames, no FCS)")
    for a in (a1, a2):
        a.set_xlabel("frame size (bytes)")
        a.grid(alpha=0.3)
        a.set_ylim(bottom=0)
    a1.legend(fontsize=8)
    fig.suptitle("Throughput vs packet size: 1 UDP flow; generator, gateway and sink on one CPU")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "throughput_vs_size.png"), dpi=110)
    plt.close(fig)


def scale_plot(e2e, out):
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    any_pts = False
    for gw in ORDER:
        pts = sorted((r["flows"], r["pps"]) for r in e2e if r["gateway"] == gw and r["case"] == "scale")
        if not pts:
            continue
        any_pts = True
        ax.plot([p[0] for p in pts], [p[1] / 1e6 for p in pts], label=NAMES[gw], **STYLE[gw])
    if any_pts:
        ax.set_xscale("log")
    ax.set_xlabel("concurrent connections (each packet a random one of them)")
    ax.set_ylabel("Mpps at the sink (64 B)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    ax.set_title("Throughput vs number of connections")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "throughput_vs_connections.png"), dpi=110)
    plt.close(fig)


def setup_plot(e2e, out):
    gws = [g for g in ORDER if any(r["gateway"] == g and r["case"] == "newflow" for r in e2e)]
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    width = 0.38
    for i, proto in enumerate(["udp", "tcp"]):
        vals = []
        for g in gws:
            r = next((r for r in e2e if r["gateway"] == g and r["case"] == "newflow" and r["proto"] == proto), None)
            vals.append(r["pps"] / 1e3 if r else 0)
        xs = [j + (i - 0.5) * width for j in range(len(gws))]
        bars = ax.bar(xs, vals, width, label="UDP" if proto == "udp" else "TCP SYN",
                      color="#1f77b4" if proto == "udp" else "#ff7f0e")
        for b, v in zip(bars, vals):
            if v:
                ax.annotate("%.0fk" % v, (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(gws)))
    ax.set_xticklabels([NAMES[g] for g in gws], fontsize=8)
    ax.set_ylabel("new connections per second (thousands)")
    ax.set_title("Connection setup rate: every packet a new flow (64 B)")
    ax.legend()
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "setup_rate.png"), dpi=110)
    plt.close(fig)


def cost_plot(cost, out):
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    if cost:
        xs = [c["sessions"] for c in cost]
        series = [
            ("est_out", "random", "natrix established outbound, random flow", dict(color="#1f77b4", marker="o", lw=2)),
            ("est_in", "random", "natrix established inbound, random flow", dict(color="#9467bd", marker="o")),
            ("fwd_mem", "random", "memory floor: forwarder + one random line", dict(color="#7f7f7f", marker="x", ls=":")),
            ("est_out", "hot", "natrix established outbound, repeat mode (one flow)", dict(color="#1f77b4", marker="o", ls="--")),
            ("est_in", "hot", "natrix established inbound, repeat mode (one flow)", dict(color="#9467bd", marker="o", ls="--")),
            ("new_flow", "at_n", "natrix new flow (setup)", dict(color="#ff7f0e", marker="s")),
            ("fwd", "hot", "minimal XDP forwarder, repeat mode", dict(color="#2ca02c", marker="D")),
        ]
        for k, m, label, st in series:
            ys = [c["ns"].get(k, {}).get(m) for c in cost]
            if all(isinstance(y, (int, float)) for y in ys):
                ax.plot(xs, ys, label=label, **st)
        ax.set_xscale("log")
        ax.set_xticks(xs)
        ax.set_xticklabels([human(x) for x in xs])
    ax.set_xlabel("live sessions in the tables")
    ax.set_ylabel("ns per packet (BPF_PROG_TEST_RUN)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    ax.set_title("Per-packet cost vs live sessions")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "cost_vs_sessions.png"), dpi=110)
    plt.close(fig)


def alloc_plot(alloc, out):
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    if alloc:
        pts = alloc["points"]
        ax.plot([p[0] for p in pts], [p[1] / 1000 for p in pts], color="#ff7f0e", marker=".", lw=1.5)
        bs = alloc["block_size"]
        for b in range(bs, pts[-1][0] + 1, bs):
            ax.axvline(b, color="#999999", lw=0.8, ls=":")
        ax.set_title("natrix new-flow cost vs mappings one subscriber holds\n(dotted: block boundaries, %d ports)" % bs)
    ax.set_xlabel("mappings the subscriber holds already")
    ax.set_ylabel("µs per new flow (BPF_PROG_TEST_RUN)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "alloc_curve.png"), dpi=110)
    plt.close(fig)


CAP_LABEL = {"none": "no capture", "narrow": "filter matches\nnothing",
             "one_flow": "filter matches\none flow", "all": "everything\n(empty filter)"}


def capture_plot(cap, out):
    fig, ((a1, a2), (a3, a4)) = plt.subplots(2, 2, figsize=(11, 8))
    tp = cap.get("throughput", [])
    if tp:
        xs = range(len(tp))
        vals = [t.get("path_ns") or 0 for t in tp]
        bars = a1.bar(xs, vals, color=["#7f7f7f"] + ["#1f77b4"] * (len(tp) - 1))
        for b, t in zip(bars, tp):
            lab = "%.0f ns" % (t.get("path_ns") or 0)
            if t.get("prog_ns"):
                lab += "\n(natrix %.0f)" % t["prog_ns"]
            if t["variant"] != "none" and t.get("ratio") is not None:
                lab += "\n%.2f× the rate" % t["ratio"]
            a1.annotate(lab, (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom", fontsize=7)
        a1.set_xticks(list(xs))
        a1.set_xticklabels([CAP_LABEL.get(t["variant"], t["variant"]) for t in tp], fontsize=8)
        a1.margins(y=0.3)
    a1.set_ylabel("CPU 0 time per packet (ns): generator, natrix, sink")
    a1.set_title("Fast path while capturing (64 B); natrix's program in brackets", fontsize=10)
    a1.grid(alpha=0.3, axis="y")
    sz = cap.get("size", [])
    series = [(0, "none", "no capture", dict(color="#7f7f7f", marker="o", ls=":")),
              (0, "all", "capturing everything, whole packets", dict(color="#1f77b4", marker="o", lw=2)),
              (128, "all", "capturing everything, -s 128", dict(color="#ff7f0e", marker="s"))]
    for snap, variant, label, st in series:
        pts = sorted((s["size"], s) for s in sz if s["variant"] == variant and s.get("snap", 0) == snap)
        if not pts:
            continue
        xs = [p[0] for p in pts]
        a2.plot(xs, [p[1]["pps"] / 1e6 for p in pts], label=label + ": packets", **st)
        if variant == "all":
            a2.plot(xs, [p[1]["written_per_sec"] / 2e6 for p in pts], label=label + ": packets written",
                    color=st["color"], marker="x", ls="--")
            a3.plot(xs, [100 * p[1]["lost_frac"] for p in pts], label=label, **st)
    a2.set_ylabel("million packets per second")
    a2.set_title("Capturing everything: packets through natrix, and written", fontsize=10)
    a3.set_ylabel("records lost (%)")
    a3.set_title("Capturing everything: records the ring could not take", fontsize=10)
    for a in (a2, a3):
        a.set_xlabel("frame size (bytes)")
        a.grid(alpha=0.3)
        a.set_ylim(bottom=0)
        a.legend(fontsize=7)
    bu = cap.get("burst", [])
    keys = sorted({(b["size"], b["snap"]) for b in bu})
    colors = ["#1f77b4", "#d62728", "#ff7f0e", "#2ca02c", "#9467bd"]
    for i, (size, snap) in enumerate(keys):
        pts = sorted((b["burst"], b) for b in bu if b["size"] == size and b["snap"] == snap)
        lab = "%d B, %s" % (size, "whole" if snap == 0 else "-s %d" % snap)
        c = colors[i % len(colors)]
        a4.plot([p[0] for p in pts], [100 * p[1]["lost_frac"] for p in pts], marker="o", color=c, label=lab)
        a4.axvline(pts[0][1]["ring_packets"], color=c, ls=":", lw=1)
    if keys:
        a4.set_xscale("log", base=2)
        lens = sorted({b["burst"] for b in bu})
        a4.set_xticks(lens)
        a4.set_xticklabels(["%dk" % (n // 1024) if n >= 1024 and n % 1024 == 0 else str(n) for n in lens])
        a4.minorticks_off()
        a4.legend(fontsize=7, title="dotted: what 8 MiB holds", title_fontsize=7)
    a4.set_xlabel("burst length (packets, as fast as the generator goes)")
    a4.set_ylabel("records lost (%)")
    a4.set_title("Bursts into an 8 MiB ring", fontsize=10)
    a4.set_ylim(bottom=0)
    a4.grid(alpha=0.3, which="both")
    fig.suptitle("natrix capture under load: generator, natrix and sink on CPU 0, the capture on CPU 1")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "capture.png"), dpi=110)
    plt.close(fig)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        res = json.load(f)
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    e2e = res.get("e2e", [])
    # a run of one part (BENCH_ONLY=capture) draws only what it measured
    only_capture = not e2e and not res.get("cost") and not res.get("alloc") and res.get("capture")
    if not only_capture:
        size_plot(e2e, out)
        scale_plot(e2e, out)
        setup_plot(e2e, out)
        cost_plot(res.get("cost", []), out)
        alloc_plot(res.get("alloc"), out)
    if res.get("capture"):
        capture_plot(res["capture"], out)


if __name__ == "__main__":
    main()
