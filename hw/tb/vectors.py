#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""Replays natrix's packet test vectors (tests/vectors/*.json) and the core's own stress
cases through the RTL (hw/tb/tb_core.cpp, Verilator), and checks every frame that comes out.

For a vector: the core is configured as the daemon would for the vectors' topology
(tests/vectors/README.md: MACs, pool, next hops, exclusions, MTUs, the vector's tab_seed as
the hash seed); the setup frames go through the core with an empty table (each must come
out of the CPU port unchanged: the core translates nothing it has no entry for); then the
entries the daemon would install for what the setup established (model below) are written
through AXI4-Lite; the setup frames XDP translated whose flow now has an entry go through
again and must now be translated, equal to their XDP outputs byte for byte; then the
packet. The rule for the packet:

  - the XDP program translated the packet in the same direction (translated_out inside,
    translated_in outside), an installed entry matches it and it is no TCP SYN/FIN/RST:
    the core must translate it, the output equal to the vector's byte for byte;
  - anything else: the frame must come out of the CPU port unchanged with a reason from
    ALLOWED[the XDP reason] (the core never translates what XDP did not, and never drops).

Then the counters (every reason, both directions) must equal what came out, the entry that
translated must have its activity bit set (and its word read 0 after the snapshot), every
entry must read back as written, and the entries are removed again (one read back: zeros).

The core's own cases (back-to-back minimum frames with the throughput measured, tvalid gaps,
tready stalls, jumbo frames, table writes during traffic, CTRL.enable, latency) take their
expected outputs from nxmodel.xlate, which is checked against every XDP output above.
Environment: NX_HW_SIM (the simulator binary), NX_HW_BLOG2 (the table size it was built
with), NX_HW_SEED (the own cases' random seed).

The daemon model (what would be offloaded after the setup steps): a UDP or ICMP echo
mapping seen translated outbound gets an outbound entry for any remote (EIM) and, under
endpoint-independent filtering, an inbound entry for any remote; under address(-and-port)
dependent filtering one remote-bound inbound entry per session seen. A TCP session gets
remote-bound entries both ways once the setup has seen it both ways (established; its
SYN/FIN/RST still go to the CPU).

Prints one line per failure, per-file totals, and "N passed, M failed"; exits 1 on any
failure or when it cannot run."""

import glob
import json
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nxmodel import *  # noqa: E402,F403

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
WAYS = 4
BLOG2 = int(os.environ.get("NX_HW_BLOG2", "8"))

MAC_IN0 = mac2i("02:4e:58:00:00:01")
MAC_OUT0 = mac2i("02:4e:58:00:00:02")

ALLOWED = {
    "pass_not_ipv4": {"not_ipv4"},
    "malformed_ip": {"bad_ip"},
    "malformed_l4": {"bad_l4"},
    "unsupported_proto": {"proto", "icmp"},  # icmp: an ICMP error quoting such a packet
    "unsupported_icmp": {"icmp"},
    "icmp_malformed": {"icmp"},
    "icmp_bad_checksum": {"icmp"},
    "icmp_errors_in": {"icmp"},
    "icmp_errors_out": {"icmp", "hairpin"},  # hairpin: an error to another subscriber
    "no_mapping": {"miss", "icmp", "hairpin", "tcp_ctrl"},
    "filtered": {"miss", "tcp_ctrl"},
    "tcp_no_syn": {"miss", "tcp_ctrl"},
    "not_subscriber": {"miss", "icmp", "tcp_ctrl"},
    "hairpin_disabled": {"hairpin"},
    "pass_excluded": {"route_cpu"},
    "pass_local": {"no_route", "not_pool"},
    "pass_ttl": {"ttl"},
    "pass_no_neigh": {"no_route"},
    "mtu_exceeded": {"mtu"},
    "session_quota": {"miss"},
    # translated by XDP but not by the core: no entry (a new mapping or session, a
    # hairpin) or a TCP segment that changes state
    "translated_out": {"miss", "tcp_ctrl", "hairpin"},
    "translated_in": {"miss", "tcp_ctrl", "hairpin"},
}


def topology_next_hops(config):
    """The next-hop entries the daemon writes for the vectors' namespace: exclusions first
    (to the CPU), then the neighbours of in0 and out0."""
    nh = []
    for e in config.get("exclude", []):
        a, l = e["prefix"].split("/")
        mask = (M32 << (32 - int(l))) & M32
        nh.append((ip2i(a) & mask, mask, 0, 0, False, True))
    for h in range(2, 10):
        nh.append((ip2i("100.64.0.%d" % h), M32, mac2i("02:00:00:00:10:%02x" % h), MAC_IN0, True, False))
    for h in (2, 3):
        nh.append((ip2i("198.51.100.%d" % h), M32, mac2i("02:00:00:00:20:%02x" % h), MAC_OUT0, False, False))
    return nh


class Case:
    def __init__(self, name, group):
        self.name, self.group = name, group
        self.lines = []
        self.frames = []     # (dir, expectation)
        self.checks = []     # post-run checks: ("act", dir, idx)
        self.perf = None     # (frames per direction, max cycles per frame)
        self.fail = []
        self.rbexp = []      # read backs in order: ((dir, bucket, way), the seven RB_* words)

    def read_back(self, slot, want):
        """E_READ of slot (dir, bucket, way), then RB_KADDR .. RB_CTL, which must hold want"""
        d, b, way = slot
        self.w(REG_E_READ, d << 31 | way << 24 | b)
        for a in range(0x64, 0x80, 4):
            self.r(a)
        self.rbexp.append((slot, want))

    def read_back_table(self, tab):
        """every entry of tab read back, each as written"""
        for slot, (penc, kaddr, kport, rbound, raddr, rport, xaddr, xport) in sorted(tab.slots.items()):
            self.read_back(slot, [kaddr, kport, raddr, rport, xaddr, xport, 1 | int(rbound) << 1 | penc << 2])

    def w(self, a, d):
        self.lines.append("w %x %x" % (a, d & M32))

    def r(self, a):
        self.lines.append("r %x" % a)

    def frame(self, d, f, exp):
        """exp: ("xlate", bytes) | ("cpu", allowed set or None) | ("either", bytes, allowed)"""
        self.lines.append("f %d %s" % (d, f.hex()))
        self.frames.append((d, f, exp))


class Table:
    """The daemon's view of the core's tables: placement by the documented hash."""

    def __init__(self, seed):
        self.seed = seed
        self.slots = {}  # (dir, bucket, way) -> entry

    def place(self, case, d, penc, kaddr, kport, rbound, raddr, rport, xaddr, xport):
        b = nx_hash(kaddr, kport, penc, self.seed) & ((1 << BLOG2) - 1)
        for way in range(WAYS):
            e = self.slots.get((d, b, way))
            if e and e[:6] == (penc, kaddr, kport, rbound, raddr, rport):
                return (d, b, way)
        for way in range(WAYS):
            if (d, b, way) not in self.slots:
                self.slots[(d, b, way)] = (penc, kaddr, kport, rbound, raddr, rport, xaddr, xport)
                write_entry(case, d, b, way, True, penc, kaddr, kport, rbound, raddr, rport, xaddr, xport)
                return (d, b, way)
        return None  # bucket full: the flow stays in software

    def remove(self, case, slot):
        d, b, way = slot
        del self.slots[slot]
        write_entry(case, d, b, way, False, 0, 0, 0, False, 0, 0, 0, 0)

    def clear(self, case):
        for s in list(self.slots):
            self.remove(case, s)

    def lookup(self, d, p):
        ep = endpoints(p)
        if ep is None:
            return None
        penc, sa, sp, da, dp = ep
        if d == 0:
            key, rem = (penc, sa, sp), (da, 0 if penc == P_ICMP else dp)
        else:
            key, rem = (penc, da, dp), (sa, 0 if penc == P_ICMP else sp)
        b = nx_hash(key[1], key[2], penc, self.seed) & ((1 << BLOG2) - 1)
        for way in range(WAYS):
            e = self.slots.get((d, b, way))
            if e and e[:3] == key and (not e[3] or e[4:6] == rem):
                return (d, b, way), e
        return None


def write_entry(case, d, b, way, valid, penc, kaddr, kport, rbound, raddr, rport, xaddr, xport):
    case.w(REG_E_KADDR, kaddr)
    case.w(REG_E_KPORT, kport)
    case.w(REG_E_RADDR, raddr)
    case.w(REG_E_RPORT, rport)
    case.w(REG_E_XADDR, xaddr)
    case.w(REG_E_XPORT, xport)
    case.w(REG_E_CTL, int(valid) | int(rbound) << 1 | penc << 2)
    case.w(REG_E_COMMIT, d << 31 | way << 24 | b)


def configure(case, config, seed, mtu):
    pool = config["pool"]["addresses"]
    if len(pool) != 1:
        raise ValueError("the core takes one pool prefix")
    a, l = pool[0].split("/")
    mask = (M32 << (32 - int(l))) & M32
    case.w(REG_POOL_BASE, ip2i(a) & mask)
    case.w(REG_POOL_MASK, mask)
    case.w(REG_MAC_IN_HI, MAC_IN0 >> 32)
    case.w(REG_MAC_IN_LO, MAC_IN0)
    case.w(REG_MAC_OUT_HI, MAC_OUT0 >> 32)
    case.w(REG_MAC_OUT_LO, MAC_OUT0)
    case.w(REG_MTU_OUT, (mtu or {}).get("out0", 1500))
    case.w(REG_MTU_IN, (mtu or {}).get("in0", 1500))
    case.w(REG_SEED, seed)
    for i, (addr, m, dmac, smac, inside, punt) in enumerate(topology_next_hops(config)):
        case.w(REG_NH_ADDR, addr)
        case.w(REG_NH_MASK, m)
        case.w(REG_NH_DMAC_HI, dmac >> 32)
        case.w(REG_NH_DMAC_LO, dmac)
        case.w(REG_NH_SMAC_HI, smac >> 32)
        case.w(REG_NH_SMAC_LO, smac)
        case.w(REG_NH_CTL, 1 | int(inside) << 1 | int(punt) << 2)
        case.w(REG_NH_COMMIT, i)
    case.w(REG_CTRL, 1)
    return ip2i(a) & mask, mask


def vector_case(fname, v):
    c = Case("%s/%s" % (fname, v["name"]), fname)
    cfg = v["config"]
    c.lines.append("reset")
    pbase, pmask = configure(c, cfg, v["tab_seed"], v.get("mtu"))
    in_pool = lambda a: (a & pmask) == pbase
    for s in v["setup"]:
        c.frame(0 if s["program"] == "inside" else 1, bytes.fromhex(s["input"]), ("cpu", None))
    c.lines.append("sync")

    # the daemon model
    maps, sess = {}, {}
    for s in v["setup"]:
        if s["verdict"] != "XDP_REDIRECT" or s["reason"] not in ("translated_out", "translated_in"):
            continue
        pi, po = parse(bytes.fromhex(s["input"])), parse(bytes.fromhex(s["output"]))
        ei, eo = endpoints(pi), endpoints(po)
        if ei is None or eo is None:
            continue
        pe = ei[0]
        if s["program"] == "inside" and in_pool(po["sa"]) and not in_pool(pi["sa"]):
            mk = (pe, pi["sa"], ei[2])
            maps[mk] = (po["sa"], eo[2])
            if not in_pool(pi["da"]):
                sk = mk + (pi["da"], 0 if pe == P_ICMP else ei[4])
                sess.setdefault(sk, set()).add("out")
        elif s["program"] == "outside" and in_pool(pi["da"]):
            mk = (pe, po["da"], eo[2] if pe == P_ICMP else eo[4])
            maps[mk] = (pi["da"], ei[2] if pe == P_ICMP else ei[4])
            sk = mk + (pi["sa"], 0 if pe == P_ICMP else ei[2])
            sess.setdefault(sk, set()).add("in")
    filtering = cfg.get("nat", {}).get("filtering", "endpoint-independent")
    tab = Table(v["tab_seed"])
    for (pe, iip, iport), (oip, oport) in maps.items():
        if pe == P_TCP:
            continue
        tab.place(c, 0, pe, iip, iport, False, 0, 0, oip, oport)
        if filtering == "endpoint-independent":
            tab.place(c, 1, pe, oip, oport, False, 0, 0, iip, iport)
        else:
            for sk in sess:
                if sk[:3] == (pe, iip, iport):
                    tab.place(c, 1, pe, oip, oport, True, sk[3], sk[4], iip, iport)
    for sk, seen in sess.items():
        pe, iip, iport, rip, rport = sk
        if pe == P_TCP and seen == {"out", "in"} and (pe, iip, iport) in maps:
            oip, oport = maps[(pe, iip, iport)]
            tab.place(c, 0, pe, iip, iport, True, rip, rport, oip, oport)
            tab.place(c, 1, pe, oip, oport, True, rip, rport, iip, iport)

    # the setup frames again, now that their flows are installed: every one XDP translated
    # whose flow has an entry must now be translated by the core, to the same bytes
    c.replays = 0
    for s in v["setup"]:
        sd = 0 if s["program"] == "inside" else 1
        sp = parse(bytes.fromhex(s["input"]))
        if (s["verdict"] == "XDP_REDIRECT" and s["reason"] == ("translated_out" if sd == 0 else "translated_in")
                and tab.lookup(sd, sp) and not (sp.get("proto") == 6 and (sp.get("flags", 0) & 7))
                and not (sd == 0 and in_pool(sp["da"]))):  # a hairpin is the CPU's
            c.frame(sd, bytes.fromhex(s["input"]), ("xlate", bytes.fromhex(s["output"])))
            c.replays += 1

    pk = v["packet"]
    d = 0 if pk["program"] == "inside" else 1
    inp = bytes.fromhex(pk["input"])
    p = parse(inp)
    hit = tab.lookup(d, p)
    xdp_xlate = pk["verdict"] == "XDP_REDIRECT" and pk["reason"] == ("translated_out" if d == 0 else "translated_in")
    tcp_ctrl = p.get("proto") == 6 and (p.get("flags", 0) & 7) != 0
    if xdp_xlate and hit and not tcp_ctrl:
        out = bytes.fromhex(pk["output"])
        # the reference translation the stress cases use must agree with XDP
        nh = [n for n in topology_next_hops(cfg) if ((hit[1][6] if d == 1 else p["da"]) & n[1]) == n[0]][0]
        if xlate(inp, d, hit[1][6], hit[1][7], nh[2], nh[3]) != out:
            c.fail.append("nxmodel.xlate differs from the vector's output")
        c.frame(d, inp, ("xlate", out))
        c.checks.append(("act", hit[0]))
    else:
        if pk["reason"] not in ALLOWED:
            c.fail.append("no rule for the XDP reason %s" % pk["reason"])
        c.frame(d, inp, ("cpu", ALLOWED.get(pk["reason"], set())))
    c.lines.append("sync")
    return c, tab


# ---------------- the core's own cases ----------------

SUBS = [ip2i("100.64.0.%d" % h) for h in range(2, 10)]
SERVERS = [ip2i("198.51.100.2"), ip2i("198.51.100.3")]
POOL = ip2i("203.0.113.16")
BASE_CFG = {"pool": {"addresses": ["203.0.113.16/29"]}}


def sub_mac(a):
    return mac2i("02:00:00:00:10:%02x" % (a & 255))


def srv_mac(a):
    return mac2i("02:00:00:00:20:%02x" % (a & 255))


class Flow:
    def __init__(self, proto, sub, iport, srv, rport, oip, oport):
        self.proto, self.sub, self.iport, self.srv, self.rport = proto, sub, iport, srv, rport
        self.oip, self.oport = oip, oport
        self.pe = PENC[proto]

    def install(self, case, tab):
        rb = self.proto == 6
        rp = 0 if self.proto == 1 else self.rport
        s0 = tab.place(case, 0, self.pe, self.sub, self.iport, rb, self.srv, rp, self.oip, self.oport)
        s1 = tab.place(case, 1, self.pe, self.oip, self.oport, rb, self.srv, rp, self.sub, self.iport)
        return s0, s1

    def install_whole(self, case, tab):
        """Both entries, or neither (a full bucket leaves the flow in software, as the daemon
        would): the two slots, or None."""
        s0, s1 = self.install(case, tab)
        if s0 is None or s1 is None:
            for sl in (s0, s1):
                if sl is not None:
                    tab.remove(case, sl)
            return None
        return s0, s1

    def out_frame(self, rnd, size=64, ttl=64, flags=0x10, ihl=5, ident=0):
        pl = bytes(rnd.randrange(256) for _ in range(max(0, size - 14 - 4 * ihl - (8 if self.proto != 6 else 20))))
        return build(MAC_IN0, sub_mac(self.sub), self.sub, self.srv, self.proto, self.iport, self.rport,
                     pl, ttl=ttl, ihl=ihl, flags=flags, icmp_type=8, pad_to=size, ident=ident)

    def in_frame(self, rnd, size=64, ttl=64, flags=0x10, ihl=5, ident=0):
        pl = bytes(rnd.randrange(256) for _ in range(max(0, size - 14 - 4 * ihl - (8 if self.proto != 6 else 20))))
        if self.proto == 1:
            return build(MAC_OUT0, srv_mac(self.srv), self.srv, self.oip, 1, self.oport, 0, pl, ttl=ttl,
                         ihl=ihl, icmp_type=0, pad_to=size, ident=ident)
        return build(MAC_OUT0, srv_mac(self.srv), self.srv, self.oip, self.proto, self.rport, self.oport,
                     pl, ttl=ttl, ihl=ihl, flags=flags, pad_to=size, ident=ident)

    def out_x(self, f):
        return xlate(f, 0, self.oip, self.oport, srv_mac(self.srv), MAC_OUT0)

    def in_x(self, f):
        return xlate(f, 1, self.sub, self.iport, sub_mac(self.sub), MAC_IN0)


def flows(rnd, n):
    fl = []
    for i in range(n):
        proto = (17, 6, 1)[i % 3]
        fl.append(Flow(proto, SUBS[i % 8], 20000 + i, SERVERS[i % 2], 53 if proto == 17 else 443,
                       POOL + (i % 8), 1024 + 7 * i))
    return fl


def own_case(name, rnd, n_frames, gap, stall, mixed, sizes, perf=None):
    c = Case("own/" + name, "own")
    c.lines.append("reset")
    seed = rnd.getrandbits(32)
    mtu = max(1500, max(sizes) - 14)
    configure(c, BASE_CFG, seed, {"in0": mtu, "out0": mtu})
    tab = Table(seed)
    fl = flows(rnd, 48)
    for f in fl:
        f.install(c, tab)
    c.lines.append("mode %d %d %x" % (gap, stall, rnd.getrandbits(31) | 1))
    for k in range(n_frames):
        for d in (0, 1):
            f = rnd.choice(fl)
            size = rnd.choice(sizes)
            ihl = rnd.choice((5, 5, 5, 6, 15)) if mixed else 5
            kind = rnd.randrange(10) if mixed else 0
            mk = f.out_frame if d == 0 else f.in_frame
            mx = f.out_x if d == 0 else f.in_x
            if kind == 1:   # TTL 1: to the CPU
                c.frame(d, mk(rnd, size, ttl=1, ihl=ihl, ident=k), ("cpu", {"ttl"}))
            elif kind == 2 and f.proto == 6:   # FIN: to the CPU
                c.frame(d, mk(rnd, size, flags=0x11, ihl=ihl, ident=k), ("cpu", {"tcp_ctrl"}))
            elif kind == 3:  # an unknown flow
                g = Flow(17, SUBS[0], 9, SERVERS[0], 53, POOL + 7, 9)
                c.frame(d, (g.out_frame if d == 0 else g.in_frame)(rnd, size, ident=k), ("cpu", {"miss"}))
            elif kind == 5 and f.proto == 17:  # no UDP checksum: stays 0
                pl = bytes(rnd.randrange(256) for _ in range(max(0, size - 42)))
                if d == 0:
                    fr = build(MAC_IN0, sub_mac(f.sub), f.sub, f.srv, 17, f.iport, f.rport, pl,
                               ihl=5, pad_to=size, ident=k, udp_zero_csum=True)
                else:
                    fr = build(MAC_OUT0, srv_mac(f.srv), f.srv, f.oip, 17, f.rport, f.oport, pl,
                               ihl=5, pad_to=size, ident=k, udp_zero_csum=True)
                assert fr[40:42] == b"\0\0"
                c.frame(d, fr, ("xlate", mx(fr)))
            elif kind == 4:  # a tiny frame, not IPv4
                fr = bytes([0xff] * 6) + b"\x02\0\0\0\0\x01" + b"\x08\x06" + bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 40)))
                c.frame(d, fr, ("cpu", {"not_for_us", "not_ipv4"}))
            else:
                fr = mk(rnd, size, ihl=ihl, ident=k)
                c.frame(d, fr, ("xlate", mx(fr)))
    c.lines.append("sync")
    c.perf = perf
    c.tabs = tab
    return c, tab


def disabled_then_enabled(rnd):
    """CTRL.enable 0 (after reset): every frame to the CPU with reason disabled; the same
    flow's frames translated once enabled; the CPU port carries both directions."""
    c = Case("own/disabled_then_enabled", "own")
    c.lines.append("reset")
    seed = rnd.getrandbits(32)
    configure(c, BASE_CFG, seed, None)
    c.w(REG_CTRL, 0)
    tab = Table(seed)
    fl = flows(rnd, 6)
    for f in fl:
        f.install(c, tab)
    c.lines.append("mode 0 20 %x" % (rnd.getrandbits(31) | 1))
    for k in range(30):
        for d in (0, 1):
            f = fl[k % len(fl)]
            c.frame(d, (f.out_frame if d == 0 else f.in_frame)(rnd, 64, ident=k), ("cpu", {"disabled"}))
    c.lines.append("sync")
    c.w(REG_CTRL, 1)
    for k in range(30):
        for d in (0, 1):
            f = fl[k % len(fl)]
            fr = (f.out_frame if d == 0 else f.in_frame)(rnd, 64, ident=k)
            c.frame(d, fr, ("xlate", (f.out_x if d == 0 else f.in_x)(fr)))
    c.lines.append("sync")
    return c, tab


def line_rate_full_table(rnd, load=0.95, n_frames=1500):
    """The tables filled to `load` of their entries (a flow whose bucket is full stays in
    software, as the daemon would leave it), then 64-byte frames back to back both ways over
    random installed flows: every frame translated right, the throughput measured (the
    lookup is one bucket read whatever the load)."""
    c = Case("own/line_rate_64B_tables_%d_percent_full" % int(load * 100), "own")
    c.lines.append("reset")
    seed = rnd.getrandbits(32)
    configure(c, BASE_CFG, seed, None)
    tab = Table(seed)
    entries = WAYS << BLOG2
    fl = []
    i = 0
    while len(fl) < int(load * entries) and i < 40 * entries:
        proto = (17, 6, 1)[i % 3]
        f = Flow(proto, SUBS[i % 8], 1024 + i, SERVERS[i % 2], 53 if proto == 17 else 443,
                 POOL + (i % 8), 1024 + i)
        i += 1
        if f.install_whole(c, tab) is None:
            continue
        fl.append(f)
    c.lines.append("mode 0 0 1")
    for k in range(n_frames):
        for d in (0, 1):
            f = rnd.choice(fl)
            fr = (f.out_frame if d == 0 else f.in_frame)(rnd, 64, ident=k)
            c.frame(d, fr, ("xlate", (f.out_x if d == 0 else f.in_x)(fr)))
    c.lines.append("sync")
    c.perf = (n_frames, 8.2)
    c.occupancy = len(fl) / entries
    return c, tab


def latency_single_frame(rnd):
    """One 64-byte frame alone each way: the cycles from its first beat in to its last beat
    out (store and forward: 8 beats in, the pipeline, 8 beats out), printed."""
    c = Case("own/latency_single_64B_frame", "own")
    c.lines.append("reset")
    seed = rnd.getrandbits(32)
    configure(c, BASE_CFG, seed, None)
    tab = Table(seed)
    f = flows(rnd, 1)[0]
    f.install(c, tab)
    c.lines.append("mode 0 0 1")
    fr = f.out_frame(rnd, 64)
    c.frame(0, fr, ("xlate", f.out_x(fr)))
    c.lines.append("sync")
    c.latency = True
    return c, tab


def pool_boundary(rnd):
    """The pool prefix's edges (203.0.113.16/29): every address that differs from the
    pool's base in one 4-bit piece, and the neighbours of the prefix. Inbound to one inside
    the pool: translated (each pool address has a flow); outside it: to the CPU, not_pool.
    Outbound to one inside: to the CPU, hairpin; outside: no_route (no next hop for it)."""
    c = Case("own/pool_boundary", "own")
    c.lines.append("reset")
    seed = rnd.getrandbits(32)
    configure(c, BASE_CFG, seed, None)
    tab = Table(seed)
    inside = {}
    for i in range(8):
        f = Flow(17, SUBS[i], 40000 + i, SERVERS[0], 53, POOL + i, 5000 + i)
        f.install(c, tab)
        inside[POOL + i] = f
    addrs = {POOL - 1, POOL + 8}
    for k in range(8):
        for v in (1, 8):
            addrs.add(POOL ^ (v << (4 * k)))
    c.lines.append("mode 0 0 1")
    n = 0
    for a in sorted(addrs):
        if a in inside:
            f = inside[a]
            fr = f.in_frame(rnd, 64, ident=n)
            c.frame(1, fr, ("xlate", f.in_x(fr)))
            g = Flow(17, SUBS[0], 40000, a, 53, POOL, 5000)
            c.frame(0, g.out_frame(rnd, 64, ident=n), ("cpu", {"hairpin"}))
        else:
            g = Flow(17, SUBS[0], 40000, SERVERS[0], 53, a, 5000)
            c.frame(1, g.in_frame(rnd, 64, ident=n), ("cpu", {"not_pool"}))
            g = Flow(17, SUBS[0], 40000, a, 53, POOL, 5000)
            c.frame(0, g.out_frame(rnd, 64, ident=n), ("cpu", {"no_route"}))
        n += 1
    c.lines.append("sync")
    return c, tab


def writes_during_traffic(rnd):
    """Flows A (installed throughout), B (installed while its frames flow: each frame either
    to the CPU as a miss or translated, never anything else, and once translated always),
    C (removed while its frames flow: translated, then misses), D (its outbound entry
    rewritten in place with another outside endpoint: the old translation, then the new,
    never a mix). B shares A's bucket."""
    c = Case("own/table_writes_during_traffic", "own")
    c.lines.append("reset")
    seed = rnd.getrandbits(32)
    configure(c, BASE_CFG, seed, None)
    tab = Table(seed)
    A = Flow(17, SUBS[0], 30000, SERVERS[0], 53, POOL, 2000)
    bA = nx_hash(A.sub, A.iport, P_UDP, seed) & ((1 << BLOG2) - 1)
    port = 30001
    while nx_hash(SUBS[1], port, P_UDP, seed) & ((1 << BLOG2) - 1) != bA:
        port += 1
    B = Flow(17, SUBS[1], port, SERVERS[1], 53, POOL + 1, 2001)
    C = Flow(17, SUBS[2], 30002, SERVERS[0], 53, POOL + 2, 2002)
    D = Flow(17, SUBS[3], 30003, SERVERS[1], 53, POOL + 3, 2003)
    D2 = Flow(17, SUBS[3], 30003, SERVERS[1], 53, POOL + 4, 2004)
    A.install(c, tab)
    sC = C.install(c, tab)
    sD = D.install(c, tab)
    c.lines.append("mode 10 10 %x" % (rnd.getrandbits(31) | 1))
    for k in range(400):
        for d in (0, 1):
            for f, role in ((A, "A"), (B, "B"), (C, "C")):
                fr = (f.out_frame if d == 0 else f.in_frame)(rnd, 64, ident=k)
                x = (f.out_x if d == 0 else f.in_x)(fr)
                if role == "A":
                    c.frame(d, fr, ("xlate", x))
                else:
                    c.frame(d, fr, ("either", x, {"miss"}, role))
            if d == 0:  # D's outbound entry changes its outside endpoint in place
                fr = D.out_frame(rnd, 64, ident=k)
                c.frame(d, fr, ("either", D.out_x(fr), set(), "D", D2.out_x(fr)))
    for _ in range(300):   # let traffic run: the writes land in its middle
        c.r(REG_ID)
    B.install(c, tab)
    for s in sC:
        tab.remove(c, s)
    d0, b0, w0 = sD[0]
    e = tab.slots[sD[0]]
    tab.slots[sD[0]] = e[:6] + (D2.oip, D2.oport)
    write_entry(c, d0, b0, w0, True, e[0], e[1], e[2], e[3], e[4], e[5], D2.oip, D2.oport)
    c.lines.append("sync")
    return c, tab


def read_back_during_traffic(rnd):
    """Entries read back (E_READ, RB_*) while frames flow: a read back takes the table's
    lookup port in a cycle without a header, so every entry must read back as written and
    every frame still be translated right (a read back in a lookup's slot would turn it
    into a miss or another flow's translation). Outbound, bursts of single-beat frames
    (a header every cycle, to the CPU) hold the read backs off until they end."""
    c = Case("own/table_read_back_during_traffic", "own")
    c.lines.append("reset")
    seed = rnd.getrandbits(32)
    configure(c, BASE_CFG, seed, None)
    tab = Table(seed)
    fl = flows(rnd, 48)
    for f in fl:
        f.install(c, tab)
    c.lines.append("mode 0 0 1")
    for k in range(700):
        for d in (0, 1):
            if d == 0 and k % 50 >= 40:  # ten bursts of single-beat frames in each 50
                for _ in range(12):
                    c.frame(d, bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 9))), ("cpu", None))
                continue
            f = rnd.choice(fl)
            fr = (f.out_frame if d == 0 else f.in_frame)(rnd, 64, ident=k)
            c.frame(d, fr, ("xlate", (f.out_x if d == 0 else f.in_x)(fr)))
    c.read_back_table(tab)
    # a way above the last: the commit writes nothing and is answered, the read back reads 0
    # (the entries all read back unchanged at the end, finish())
    for d in (0, 1):
        write_entry(c, d, 0, WAYS + 1, True, P_UDP, SUBS[0], 1, False, 0, 0, POOL, 1)
        c.read_back((d, 0, WAYS + 1), [0] * 7)
    c.lines.append("sync")
    return c, tab


def activity_snapshots_during_traffic(rnd, rounds=4):
    """Activity bits under snapshots taken while frames translate: 32 flows whose entries
    sit in the first activity word of each direction (buckets 0-7), one frame each way per
    flow a round, in random order, while ACT_SNAP takes and clears that word of both
    directions over and over; after the round's sync one more snapshot of each, then one
    that must read 0. No hit is lost and none made up: in each round, the OR of a word's
    snapshots is exactly the bits of the entries that translated. The snapshots land in
    every cycle relative to the sets (a set and a snapshot of the same word in the same
    cycle, or one cycle apart, are the forwarding cases)."""
    c = Case("own/activity_snapshots_during_traffic", "own")
    c.lines.append("reset")
    seed = rnd.getrandbits(32)
    configure(c, BASE_CFG, seed, None)
    tab = Table(seed)
    mask = (1 << BLOG2) - 1
    fl, want = [], {0: 0, 1: 0}
    i = j = 0   # candidates: (SUBS[i % 8], 1024 + i // 8) inside, (POOL + j % 8, 1024 + j // 8) outside
    while len(fl) < 32 and i < 8 * 64000 and j < 8 * 64000:
        while i < 8 * 64000 and nx_hash(SUBS[i % 8], 1024 + i // 8, P_UDP, seed) & mask >= 8:
            i += 1
        while j < 8 * 64000 and nx_hash(POOL + j % 8, 1024 + j // 8, P_UDP, seed) & mask >= 8:
            j += 1
        f = Flow(17, SUBS[i % 8], 1024 + i // 8, SERVERS[len(fl) % 2], 53, POOL + j % 8, 1024 + j // 8)
        i += 1
        j += 1
        slots = f.install_whole(c, tab)
        if slots is None:
            continue
        fl.append(f)
        for d, (_, b, way) in enumerate(slots):
            want[d] |= 1 << (b * WAYS + way)
    c.actrounds = []
    for r in range(rounds):
        gap, stall = ((0, 0), (0, 0), (6, 0), (4, 10))[r % 4]
        c.lines.append("mode %d %d %x" % (gap, stall, rnd.getrandbits(31) | 1))
        order = [(f, d) for f in fl for d in (0, 1)]
        rnd.shuffle(order)
        for k, (f, d) in enumerate(order):
            fr = (f.out_frame if d == 0 else f.in_frame)(rnd, 64, ident=k)
            c.frame(d, fr, ("xlate", (f.out_x if d == 0 else f.in_x)(fr)))
        seq = []
        for k in range(90 + rnd.randrange(8)):
            d = k & 1
            if rnd.randrange(3) == 0:
                c.r(REG_ID)   # shifts the snapshots against the frames
            c.w(REG_ACT_SNAP, d << 31)
            c.r(REG_ACT_DATA)
            seq.append(d)
        c.lines.append("sync")
        for d in (0, 1, 0, 1):
            c.w(REG_ACT_SNAP, d << 31)
            c.r(REG_ACT_DATA)
            seq.append(d)
        c.actrounds.append(seq)
    c.actwant = want
    return c, tab


# ---------------- running and checking ----------------

def check(c, out, tab):
    fails = list(c.fail)
    o = {0: [], 1: []}
    cpu = {0: [], 1: []}
    reads = []
    syncs = []
    for l in out:
        t = l.split()
        if t[0] == "o":
            o[int(t[1])].append(bytes.fromhex(t[2]) if len(t) > 2 else b"")
        elif t[0] == "c":
            u = int(t[1], 16)
            cpu[u >> 7].append((u & 31, bytes.fromhex(t[2]) if len(t) > 2 else b""))
        elif t[0] == "r":
            reads.append((int(t[1], 16), int(t[2], 16)))
        elif t[0] == "sync":
            syncs.append(int(t[1]))
        elif t[0] == "err":
            fails.append(l)
    tally = {(d, r): 0 for d in (0, 1) for r in range(32)}
    for d in (0, 1):
        oi = ci = 0
        state = {}
        for dd, f, exp in c.frames:
            if dd != d:
                continue
            if exp[0] == "xlate":
                if oi >= len(o[d]):
                    why = "nothing out"
                    if ci < len(cpu[d]) and cpu[d][ci][1] == f:
                        why = "to the CPU with reason %s" % REASONS[cpu[d][ci][0]]
                        ci += 1
                    fails.append("dir %d: expected a translation, %s" % (d, why))
                    continue
                if o[d][oi] != exp[1]:
                    fails.append("dir %d: translated frame differs:\n   got %s\n  want %s" % (d, o[d][oi].hex(), exp[1].hex()))
                oi += 1
                tally[(d, 0)] += 1
            elif exp[0] == "cpu":
                if ci >= len(cpu[d]):
                    why = "nothing"
                    if oi < len(o[d]):
                        why = "translated"
                        oi += 1
                    fails.append("dir %d: expected the CPU port, got %s" % (d, why))
                    continue
                r, fr = cpu[d][ci]
                ci += 1
                tally[(d, r)] += 1
                if fr != f:
                    fails.append("dir %d: CPU frame differs from the input" % d)
                if r == 0 or r >= len(REASONS) or (exp[1] is not None and REASONS[r] not in exp[1]):
                    fails.append("dir %d: reason %s not in %s" % (d, REASONS[r] if r < len(REASONS) else r, sorted(exp[1] or [])))
            else:  # either
                role = exp[3]
                if oi < len(o[d]) and o[d][oi] == exp[1]:
                    oi += 1
                    tally[(d, 0)] += 1
                    got = "x"
                elif len(exp) > 4 and oi < len(o[d]) and o[d][oi] == exp[4]:
                    oi += 1
                    tally[(d, 0)] += 1
                    got = "c"  # the new translation: "c" as in "changed", after "x" only
                elif ci < len(cpu[d]) and cpu[d][ci][1] == f and REASONS[cpu[d][ci][0]] in exp[2]:
                    tally[(d, cpu[d][ci][0])] += 1
                    ci += 1
                    got = "c"
                else:
                    fails.append("dir %d: flow %s frame neither translated right nor a miss" % (d, role))
                    continue
                prev = state.get(role)
                if prev and prev != got and ((role == "B" and prev == "x") or (role in "CD" and prev == "c")):
                    fails.append("dir %d: flow %s went back (%s then %s)" % (d, role, prev, got))
                state[role] = got
        if oi != len(o[d]) or ci != len(cpu[d]):
            fails.append("dir %d: %d translated and %d CPU frames left over" % (d, len(o[d]) - oi, len(cpu[d]) - ci))
    # counters and activity
    cnt = {a: v for a, v in reads if a >= REG_CNT}
    for d in (0, 1):
        for r in range(len(REASONS)):
            a = REG_CNT + d * 0x80 + r * 4
            if a in cnt and cnt[a] != tally[(d, r)]:
                fails.append("counter dir %d %s: %d, frames %d" % (d, REASONS[r], cnt[a], tally[(d, r)]))
    acts = [v for a, v in reads if a == REG_ACT_DATA]
    for r, seq in enumerate(getattr(c, "actrounds", [])):
        got, acts = acts[:len(seq)], acts[len(seq):]
        if len(got) < len(seq):
            fails.append("activity round %d: %d snapshots read of %d" % (r, len(got), len(seq)))
            break
        for d in (0, 1):
            words = [v for v, dd in zip(got, seq) if dd == d]
            seen = 0
            for v in words[:-1]:
                seen |= v
            if seen != c.actwant[d]:
                fails.append("activity round %d dir %d: snapshots hold %08x, translated entries %08x"
                             " (lost %08x, made up %08x)" % (r, d, seen, c.actwant[d],
                                                           c.actwant[d] & ~seen, seen & ~c.actwant[d]))
            if words[-1] != 0:
                fails.append("activity round %d dir %d: %08x after the last snapshot" % (r, d, words[-1]))
    for i, (chk, slot) in enumerate([x for x in c.checks if x[0] == "act"]):
        d, b, way = slot
        if 2 * i + 1 >= len(acts):
            fails.append("activity not read")
            break
        if not (acts[2 * i] >> ((b * WAYS + way) % 32)) & 1:
            fails.append("activity bit of dir %d bucket %d way %d not set" % slot)
        if acts[2 * i + 1] != 0:
            fails.append("activity word of dir %d bucket %d way %d not cleared by its snapshot" % slot)
    rbs = [v for a, v in reads if 0x64 <= a < 0x80]
    for i, (slot, want) in enumerate(c.rbexp):
        got = rbs[7 * i:7 * i + 7]
        if got != want:
            fails.append("entry dir %d bucket %d way %d reads back %s, written %s" % (slot + (got, want)))
    if getattr(c, "latency", False) and syncs:
        c.lat = syncs[-1]
    if c.perf:
        n, limit = c.perf
        if not syncs:
            fails.append("no cycle count")
        else:
            cpp = syncs[-1] / n
            c.cpp = cpp
            if cpp > limit:
                fails.append("%.2f cycles per frame per direction (limit %.1f)" % (cpp, limit))
    return fails


def finish(c, tab):
    for d in (0, 1):
        for r in range(len(REASONS)):
            c.r(REG_CNT + d * 0x80 + r * 4)
    for chk in c.checks:
        d, b, way = chk[1]
        c.w(REG_ACT_SNAP, d << 31 | ((b * WAYS + way) // 32))
        c.r(REG_ACT_DATA)
        c.w(REG_ACT_SNAP, d << 31 | ((b * WAYS + way) // 32))  # cleared by the snapshot
        c.r(REG_ACT_DATA)
    c.read_back_table(tab)  # every entry reads back as written
    first = min(tab.slots) if tab.slots else None
    tab.clear(c)
    if first:  # removed: valid 0 (the daemon writes the whole entry as zeros)
        c.read_back(first, [0] * 7)


def main():
    sim = os.environ.get("NX_HW_SIM", os.path.join(ROOT, "hw", "build", "Vtb_core"))
    if not os.access(sim, os.X_OK):
        print("cannot run: no simulator binary at %s (hw/tb/run.sh builds it)" % sim)
        print("0 passed, 1 failed")
        return 1
    files = sorted(glob.glob(os.path.join(ROOT, "tests", "vectors", "*.json")))
    if not files:
        print("cannot run: no tests/vectors/*.json")
        print("0 passed, 1 failed")
        return 1
    cases = []
    for fn in files:
        name = os.path.basename(fn)[:-5]
        for v in json.load(open(fn))["vectors"]:
            cases.append(vector_case(name, v))
    rnd = random.Random(int(os.environ.get("NX_HW_SEED", "33")))
    cases.append(own_case("line_rate_64B_both_directions", rnd, 1500, 0, 0, False, [64], perf=(1500, 8.2)))
    cases.append(own_case("back_to_back_mixed_minimum_frames", rnd, 600, 0, 0, True, [60, 64]))
    cases.append(own_case("tvalid_gaps_tready_stalls", rnd, 400, 30, 30, True, [60, 64, 65, 71, 72, 128, 333, 1514]))
    cases.append(own_case("output_stalls_heavy", rnd, 200, 0, 80, True, [60, 64, 200, 1514]))
    cases.append(own_case("input_gaps_heavy", rnd, 200, 80, 0, True, [60, 64, 200, 9000]))
    cases.append(writes_during_traffic(rnd))
    cases.append(activity_snapshots_during_traffic(rnd))
    cases.append(read_back_during_traffic(rnd))
    cases.append(disabled_then_enabled(rnd))
    cases.append(latency_single_frame(rnd))
    cases.append(pool_boundary(rnd))
    cases.append(line_rate_full_table(rnd))
    script = []
    for c, tab in cases:
        finish(c, tab)
        script.append("mark %s" % c.name)
        script.extend(c.lines)
    script.append("mark end")
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as t:
        t.write("\n".join(script) + "\n")
        path = t.name
    res = subprocess.run([sim, path], stdout=subprocess.PIPE, text=True)
    os.unlink(path)
    if res.returncode != 0:
        print("cannot run: the simulator exited with %d" % res.returncode)
        print("0 passed, 1 failed")
        return 1
    outs = {}
    cur = None
    for l in res.stdout.splitlines():
        if l.startswith("mark "):
            cur = l[5:]
            outs[cur] = []
        elif cur is not None:
            outs[cur].append(l)
    passed = failed = 0
    per = {}
    for c, tab in cases:
        fails = check(c, outs.get(c.name, ["err no output"]), tab)
        g = per.setdefault(c.group, [0, 0, 0, 0, 0])
        kinds = [e[0] for d, f, e in c.frames]
        if c.group != "own":
            g[2 if kinds[-1] == "xlate" else 3] += 1
            g[4] += c.replays
        if fails:
            failed += 1
            g[1] += 1
            print("FAIL %s" % c.name)
            for f in fails[:5]:
                print("  " + f)
        else:
            passed += 1
            g[0] += 1
        if getattr(c, "lat", None):
            print("%s: %d cycles from the first beat in to the last beat out" % (c.name, c.lat))
        if getattr(c, "cpp", None):
            occ = getattr(c, "occupancy", None)
            print("%s: %.3f cycles per 64-byte frame per direction, both directions loaded%s" % (
                c.name, c.cpp, "" if occ is None else ", tables %.0f%% full" % (100 * occ)))
    for g, (p, f, nx, nc, nr) in per.items():
        extra = "" if g == "own" else (" (packet translated byte for byte: %d, to the CPU port: %d;"
                                       " established setup frames replayed byte for byte: %d)" % (nx, nc, nr))
        print("%-10s %d passed, %d failed%s" % (g, p, f, extra))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
