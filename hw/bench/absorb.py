#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""Moves the registers that directly follow an ECP5 block RAM's read data into the block
RAM's own output register (DP16KD REGMODE OUTREG), in a Yosys JSON netlist:

    absorb.py IN.json OUT.json

Yosys 0.23's synth_ecp5 maps every block RAM without its output register (REGMODE NOREG),
so its read data leaves the block 5.6 ns after the clock at speed grade 6 (Project
Trellis' timing database), most of a 6.4 ns cycle; with the output register, 0.94 ns.
Vendor synthesis absorbs such registers; this does the same, only where the result is the
same circuit: a read port qualifies when every read data bit in use drives exactly one
flip-flop and nothing else, and those flip-flops share the block RAM's read clock (not
inverted), have no set or reset (LSR tied to 0) and share one clock enable (or none),
which becomes the output register's enable (OCE). The flip-flops are removed and their
outputs driven by the block RAM. Ports that do not qualify are left as they were. Prints
what it did.
"""
import collections
import json
import sys


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    j = json.load(open(sys.argv[1]))
    top = next(n for n, m in j["modules"].items() if m.get("attributes", {}).get("top"))
    m = j["modules"][top]
    cells = m["cells"]
    port_bits = {b for p in m["ports"].values() for b in p["bits"]}
    sinks = collections.defaultdict(list)
    for name, c in cells.items():
        for p, bits in c["connections"].items():
            if c["port_directions"].get(p) == "input":
                for b in bits:
                    sinks[b].append((name, p))

    absorbed = ports_done = ports_left = 0
    for name, c in list(cells.items()):
        if c["type"] != "DP16KD":
            continue
        par = c["parameters"]
        pdp = int(par.get("DATA_WIDTH_B", "0"), 2) == 36  # Yosys writes integers in binary
        # the read ports: in the 36-bit mode the data comes out of both DOA and DOB,
        # read with port B's clock and enabled by OCEB
        groups = [("B", ["DOA%d" % i for i in range(18)] + ["DOB%d" % i for i in range(18)])] if pdp else \
            [("A", ["DOA%d" % i for i in range(18)]), ("B", ["DOB%d" % i for i in range(18)])]
        for port, dos in groups:
            used = [(d, c["connections"][d][0]) for d in dos
                    if c["connections"].get(d) and isinstance(c["connections"][d][0], int) and sinks.get(c["connections"][d][0])]
            if not used:
                continue
            clk = c["connections"]["CLK" + port]
            ffs, ce, ok = [], None, True
            for d, b in used:
                s = sinks[b]
                if len(s) != 1 or b in port_bits:
                    ok = False
                    break
                fn, fp = s[0]
                f = cells[fn]
                fpar = f["parameters"]
                if f["type"] != "TRELLIS_FF" or fp != "DI" or f["connections"]["CLK"] != clk \
                        or fpar.get("CLKMUX", "CLK") != "CLK" or f["connections"].get("LSR", ["0"]) != ["0"] \
                        or fpar.get("GSR", "DISABLED") != "DISABLED":
                    ok = False
                    break
                cemux = fpar.get("CEMUX", "CE").strip()
                if cemux not in ("CE", "1"):
                    ok = False
                    break
                fce = f["connections"].get("CE", ["1"]) if cemux == "CE" else ["1"]
                if ce is None:
                    ce = fce
                elif fce != ce:
                    ok = False
                    break
                ffs.append((d, fn))
            if not ok:
                ports_left += 1
                continue
            for d, fn in ffs:
                q = cells[fn]["connections"]["Q"]
                c["connections"][d] = q
                del cells[fn]
                absorbed += 1
            if pdp:
                par["REGMODE_A"] = "OUTREG"
                par["REGMODE_B"] = "OUTREG"
            else:
                par["REGMODE_" + port] = "OUTREG"
            c["connections"]["OCE" + port] = ce
            ports_done += 1
    json.dump(j, open(sys.argv[2], "w"))
    print("absorb: %d flip-flops moved into %d block RAM read ports' output registers; %d read ports left"
          " as they were (their data does not go straight into one register each)" % (absorbed, ports_done, ports_left))
    return 0


if __name__ == "__main__":
    sys.exit(main())
