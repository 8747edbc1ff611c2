#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# make bench-hw, synthesis part: synth.sh FAMILY BLOG2 OUTDIR [YOSYS]. Synthesises the
# whole core (nx_core, both directions) with Yosys for FAMILY (ecp5, ice40, xcup) at
# BLOG2 (8: 1k entries per direction, 10: 4k, 12: 16k), writes OUTDIR/stat_FAMILY_BLOG2.txt
# (Yosys' stat), OUTDIR/FAMILY_BLOG2.json for ecp5 (nextpnr's input, after absorb.py, whose
# count is in OUTDIR/absorb_BLOG2.txt) and the seconds taken;
# cut after BENCH_HW_TIMEOUT seconds (default 1200).
set -u
fam=$1 blog2=$2 out=$3 yosys=${4:-yosys}
HW=$(cd "$(dirname "$0")/.." && pwd)
srcs=""
for f in nx_csum_pkg.sv nx_core_pkg.sv nx_fifo.sv nx_dir.sv nx_core.sv; do srcs="$srcs $HW/rtl/$f"; done
case $fam in
ecp5) syn="synth_ecp5 -top nx_core -json $out/ecp5_$blog2.json" ;;
ice40) syn="synth_ice40 -top nx_core" ;;
xcup) syn="synth_xilinx -family xcup -top nx_core" ;;
*) echo "synth.sh: unknown family $fam" >&2; exit 2 ;;
esac
mkdir -p "$out"
t0=$(date +%s)
timeout "${BENCH_HW_TIMEOUT:-1200}" $yosys -q -l "$out/yosys_${fam}_$blog2.log" -p "read_verilog -sv $srcs; chparam -set BLOG2 $blog2 nx_core; $syn; tee -q -o $out/stat_${fam}_$blog2.txt stat" >/dev/null 2>&1
rc=$?
# ECP5: the registers straight after a block RAM's read data become its output register
# (absorb.py: Yosys 0.23 leaves every block RAM without it), in the netlist nextpnr reads
if [[ $rc -eq 0 && $fam == ecp5 ]]; then
	python3 "$HW/bench/absorb.py" "$out/ecp5_$blog2.json" "$out/ecp5_$blog2.json" >"$out/absorb_$blog2.txt" || rc=$?
fi
echo "$(($(date +%s) - t0))" >"$out/time_${fam}_$blog2.txt"
exit $rc
