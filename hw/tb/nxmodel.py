# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""What the test driver of the NAT core needs of natrix: frame parsing, the checksum
functions of bpf/nx_csum.h (network-order words), the core's bucket hash and register map
(docs/HARDWARE.md), and a reference of the core's translation for the frames the test
makes up itself (checked first against the XDP vectors' own outputs)."""

import struct

M32 = 0xFFFFFFFF

# reason codes (hw/rtl/nx_core_pkg.sv)
REASONS = ["xlate", "disabled", "not_for_us", "not_ipv4", "bad_ip", "hairpin", "not_pool",
           "no_route", "route_cpu", "ttl", "fragment", "proto", "bad_l4", "icmp", "tcp_ctrl",
           "miss", "mtu"]
R = {n: i for i, n in enumerate(REASONS)}
P_TCP, P_UDP, P_ICMP = 1, 2, 3
PENC = {6: P_TCP, 17: P_UDP, 1: P_ICMP}

# register map
REG_ID, REG_CAPS, REG_CTRL = 0x000, 0x004, 0x008
REG_POOL_BASE, REG_POOL_MASK = 0x010, 0x014
REG_MAC_IN_HI, REG_MAC_IN_LO, REG_MAC_OUT_HI, REG_MAC_OUT_LO = 0x018, 0x01C, 0x020, 0x024
REG_MTU_OUT, REG_MTU_IN, REG_SEED = 0x028, 0x02C, 0x030
REG_E_KADDR, REG_E_KPORT, REG_E_RADDR, REG_E_RPORT = 0x040, 0x044, 0x048, 0x04C
REG_E_XADDR, REG_E_XPORT, REG_E_CTL, REG_E_COMMIT = 0x050, 0x054, 0x058, 0x05C
REG_NH_ADDR, REG_NH_MASK, REG_NH_DMAC_HI, REG_NH_DMAC_LO = 0x080, 0x084, 0x088, 0x08C
REG_NH_SMAC_HI, REG_NH_SMAC_LO, REG_NH_CTL, REG_NH_COMMIT = 0x090, 0x094, 0x098, 0x09C
REG_E_READ = 0x060  # then RB_KADDR .. RB_CTL at 0x064 .. 0x07c
REG_ACT_SNAP, REG_ACT_DATA = 0x0A0, 0x0A4
REG_CNT = 0x200  # + dir * 0x80 + reason * 4


def rotl(x, n):
    return ((x << n) | (x >> (32 - n))) & M32


def nx_hash(addr, port, penc, seed):
    a = addr ^ seed
    b = (port << 16) | (0x4E << 8) | penc
    h = (a + rotl(b, 11)) & M32
    h ^= h >> 15
    h = (h + rotl(h, 5)) & M32
    h ^= h >> 13
    return h


# bpf/nx_csum.h on big-endian words
def fold(c):
    c = (c & 0xFFFF) + (c >> 16)
    c = (c & 0xFFFF) + (c >> 16)
    return ~c & 0xFFFF


def diff4(f, t):
    f = ~f & M32
    return ((f & 0xFFFF) + (f >> 16) + (t & 0xFFFF) + (t >> 16)) & M32


def diff2(f, t):
    return ((~f & 0xFFFF) + t) & M32


def apply(s, d):
    return fold(((~s & 0xFFFF) + d) & M32)


def udp_apply(s, d):
    if s == 0:
        return 0
    r = apply(s, d)
    return 0xFFFF if r == 0 else r


def ip2i(s):
    a = [int(x) for x in s.split(".")]
    return (a[0] << 24) | (a[1] << 16) | (a[2] << 8) | a[3]


def mac2i(s):
    return int(s.replace(":", ""), 16)


def parse(f):
    """The fields the core and the daemon model look at; None where absent."""
    p = {"len": len(f)}
    if len(f) < 14:
        return p
    p["dmac"] = int.from_bytes(f[0:6], "big")
    p["smac"] = int.from_bytes(f[6:12], "big")
    p["etype"] = int.from_bytes(f[12:14], "big")
    if p["etype"] != 0x0800 or len(f) < 34:
        return p
    ihl = f[14] & 15
    p.update(ver=f[14] >> 4, ihl=ihl, tot=int.from_bytes(f[16:18], "big"),
             frag=int.from_bytes(f[20:22], "big"), ttl=f[22], proto=f[23],
             ipc=int.from_bytes(f[24:26], "big"), sa=int.from_bytes(f[26:30], "big"),
             da=int.from_bytes(f[30:34], "big"), l4off=14 + 4 * ihl)
    o = p["l4off"]
    if len(f) >= o + 8:
        if p["proto"] in (6, 17):
            p["sport"] = int.from_bytes(f[o:o + 2], "big")
            p["dport"] = int.from_bytes(f[o + 2:o + 4], "big")
            if p["proto"] == 6 and len(f) >= o + 14:
                p["flags"] = f[o + 13]
        elif p["proto"] == 1:
            p["type"] = f[o]
            p["id"] = int.from_bytes(f[o + 4:o + 6], "big")
    return p


def endpoints(p):
    """(proto enc, src addr, src port, dst addr, dst port) with the ICMP identifier as the
    port of both ends' "inside" side as natrix keys it (remote port 0)."""
    pe = PENC.get(p.get("proto"))
    if pe is None:
        return None
    if pe == P_ICMP:
        if "id" not in p:
            return None
        return pe, p["sa"], p["id"], p["da"], p["id"]
    if "sport" not in p:
        return None
    return pe, p["sa"], p["sport"], p["da"], p["dport"]


def csum16(b):
    if len(b) % 2:
        b = b + b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    return fold(s)


def xlate(frame, d, xaddr, xport, dmac, smac):
    """The frame as the core translates it (direction d: 0 out, 1 in), bpf/nx_nat.h's
    nx_rewrite and nx_fwd.h's nx_redirect."""
    f = bytearray(frame)
    p = parse(f)
    o = p["l4off"]
    pe = PENC[p["proto"]]
    aoff = 26 if d == 0 else 30
    old_a = int.from_bytes(f[aoff:aoff + 4], "big")
    poff = o + 4 if pe == P_ICMP else (o if d == 0 else o + 2)
    old_p = int.from_bytes(f[poff:poff + 2], "big")
    coff = o + (16 if pe == P_TCP else 6 if pe == P_UDP else 2)
    l4c = int.from_bytes(f[coff:coff + 2], "big")
    dip = diff4(old_a, xaddr)
    dp = diff2(old_p, xport)
    ipc = apply(p["ipc"], dip)
    ttlw = (p["ttl"] << 8) | p["proto"]
    ipc = apply(ipc, diff2(ttlw, ttlw - 0x100))
    if pe == P_TCP:
        l4c = apply(l4c, (dip + dp) & M32)
    elif pe == P_UDP:
        l4c = udp_apply(l4c, (dip + dp) & M32)
    else:
        l4c = apply(l4c, dp)
    f[0:6] = dmac.to_bytes(6, "big")
    f[6:12] = smac.to_bytes(6, "big")
    f[22] = p["ttl"] - 1
    f[24:26] = ipc.to_bytes(2, "big")
    f[aoff:aoff + 4] = xaddr.to_bytes(4, "big")
    f[poff:poff + 2] = xport.to_bytes(2, "big")
    f[coff:coff + 2] = l4c.to_bytes(2, "big")
    return bytes(f)


def build(dmac, smac, sa, da, proto, sport, dport, payload=b"", ttl=64, ihl=5, flags=0x10,
          icmp_type=8, pad_to=60, ident=0x1234, udp_zero_csum=False):
    """A frame with correct checksums (for the test's own traffic)."""
    opts = bytes([1] * (4 * (ihl - 5)))  # NOP options
    if proto == 17:
        l4 = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    elif proto == 6:
        l4 = struct.pack("!HHIIBBHHH", sport, dport, 1000, 2000, 5 << 4, flags, 65535, 0, 0) + payload
    else:
        l4 = struct.pack("!BBHHH", icmp_type, 0, 0, sport, 1) + payload
    tot = 4 * ihl + len(l4)
    iph = struct.pack("!BBHHHBBHII", 0x40 | ihl, 0, tot, ident, 0x4000, ttl, proto, 0, sa, da) + opts
    iph = iph[:10] + csum16(iph).to_bytes(2, "big") + iph[12:]
    if proto in (6, 17):
        ph = struct.pack("!IIBBH", sa, da, 0, proto, len(l4))
        c = csum16(ph + l4)
        if proto == 17 and c == 0:
            c = 0xFFFF
        if proto == 17 and udp_zero_csum:
            c = 0
        co = 16 if proto == 6 else 6
        l4 = l4[:co] + c.to_bytes(2, "big") + l4[co + 2:]
    else:
        l4 = l4[:2] + csum16(l4).to_bytes(2, "big") + l4[4:]
    f = dmac.to_bytes(6, "big") + smac.to_bytes(6, "big") + b"\x08\x00" + iph + l4
    if len(f) < pad_to:
        f += bytes(pad_to - len(f))
    return f
