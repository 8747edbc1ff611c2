#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# make bench-hw, Fmax part: pnr.sh BLOG2 OUTDIR NEXTPNR. Places and routes OUTDIR/ecp5_BLOG2.json
# (synth.sh's output) on an ECP5-85 speed grade 6 out of context (the core's ~450 AXI
# signals are not pins; no IO buffers, no global clock network) with a 156.25 MHz target,
# writes OUTDIR/pnr_ecp5_BLOG2.{log,json}, the netlist it placed (placed_ecp5_BLOG2.json), paths.py's
# estimate over it (paths_BLOG2.txt) and the seconds taken; cut after BENCH_HW_TIMEOUT
# seconds (default 1200). BENCH_HW_PNR_ARGS: more nextpnr arguments (e.g. --no-route: the
# placement estimate only, when routing does not finish in time; report.py labels it).
set -u
blog2=$1 out=$2 nextpnr=$3
t0=$(date +%s)
timeout "${BENCH_HW_TIMEOUT:-1200}" $nextpnr --85k --speed 6 --out-of-context --json "$out/ecp5_$blog2.json" --freq 156.25 \
	--timing-allow-fail --seed 1 --report "$out/pnr_ecp5_$blog2.json" --write "$out/placed_ecp5_$blog2.json" \
	${BENCH_HW_PNR_ARGS:-} >"$out/pnr_ecp5_$blog2.log" 2>&1
rc=$?
echo "$(($(date +%s) - t0))" >"$out/time_pnr_$blog2.txt"
# nextpnr names no path without routing: paths.py's rough estimate over its netlist
if [[ -s $out/placed_ecp5_$blog2.json ]]; then
	python3 "$(dirname "$0")/paths.py" "$out/placed_ecp5_$blog2.json" 40 >"$out/paths_$blog2.txt" 2>&1
fi
exit $rc
