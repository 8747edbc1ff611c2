#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# absorb.py's check (make hw-test runs it): synth_ecp5 of absorb_test.sv, absorb.py over the
# netlist, then the netlist read back: m1's and m3's block RAMs with their output register
# (REGMODE OUTREG, OCE tied high for m1, the enable's net for m3) and their data driving
# q1 and q3 directly; m2's and m4's left without it; the flip-flops removed exactly those 45.
# Prints one line; exits non-zero on any difference. OUT: the directory for the netlists.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-$(mktemp -d)}
mkdir -p "$OUT"
if ! yosys -q -l "$OUT/absorb_test_yosys.log" -p "read_verilog -sv $HERE/absorb_test.sv; synth_ecp5 -top absorb_test -json $OUT/absorb_test.json" >/dev/null 2>&1; then
	echo "absorb.py: Yosys failed on absorb_test.sv ($OUT/absorb_test_yosys.log)"
	exit 1
fi
python3 "$HERE/absorb.py" "$OUT/absorb_test.json" "$OUT/absorb_test_out.json" >"$OUT/absorb_test.txt" || exit 1
python3 - "$OUT/absorb_test.json" "$OUT/absorb_test_out.json" <<'P'
import json, sys
def load(f):
    m = json.load(open(f))["modules"]["absorb_test"]
    return m, m["cells"]
m0, before = load(sys.argv[1])
m1, after = load(sys.argv[2])
bad = []
ffs = lambda c: sum(1 for v in c.values() if v["type"] == "TRELLIS_FF")
if ffs(before) - ffs(after) != 45:
    bad.append("%d flip-flops removed, want 45" % (ffs(before) - ffs(after)))
rams = {k.split(".")[0]: v for k, v in after.items() if v["type"] == "DP16KD"}
port = lambda n: m1["ports"][n]["bits"]
en = port("en")
drivers = {}
for v in after.values():
    for p, bits in v["connections"].items():
        if v["port_directions"].get(p) == "output":
            for b in bits:
                drivers[b] = (v["type"], p)
for name, reg, oce, q, w in (("m1", "OUTREG", ["1"], "q1", 36), ("m2", "NOREG", None, None, 0), ("m3", "OUTREG", en, "q3", 9),
                             ("m4", "NOREG", None, None, 0)):
    r = rams.get(name)
    if r is None:
        bad.append("%s: no DP16KD" % name)
        continue
    got = r["parameters"].get("REGMODE_B", "").strip()
    if got != reg:
        bad.append("%s: REGMODE_B %s, want %s" % (name, got, reg))
    if oce is not None and r["connections"].get("OCEB") != oce:
        bad.append("%s: OCEB %s, want %s" % (name, r["connections"].get("OCEB"), oce))
    if q:
        for b in port(q)[:w]:
            if drivers.get(b, ("?",))[0] != "DP16KD":
                bad.append("%s: bit %s driven by %s, not the block RAM" % (q, b, drivers.get(b)))
                break
if bad:
    print("absorb.py: FAIL " + "; ".join(bad))
    sys.exit(1)
print("absorb.py: 2 of 4 block RAM reads take their output register (36 + 9 flip-flops), the two behind logic or a reset stay as they were")
P
