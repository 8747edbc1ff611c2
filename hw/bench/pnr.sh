#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# make bench-hw, Fmax part: pnr.sh BLOG2 OUTDIR NEXTPNR. Places and routes OUTDIR/ecp5_BLOG2.json
# (synth.sh's output) on an ECP5-85 speed grade 6 out of context (the core's ~450 AXI
# signals are not pins; no IO buffers, no global clock network) with a 156.25 MHz target,
# writes OUTDIR/pnr_ecp5_BLOG2.{log,json} (the report with every register input's routed
# arrival time), the routed delays (routed_ecp5_BLOG2.sdf), the netlist it placed and
# routed (placed_ecp5_BLOG2.json), paths.py's listing of the paths that miss 6.4 ns
# (paths_BLOG2.txt) and the seconds taken. BENCH_HW_SEEDS: the placer's seeds (default
# "1"; BENCH_HW_SEED, one seed, is still read): the first gives all of the above, each
# further one its log alone (pnr_ecp5_BLOG2_seedS.log, time_pnr_BLOG2_seedS.txt), one
# after the other, so that report.py can say whether every seed closes. Each run is cut
# after BENCH_HW_PNR_TIMEOUT seconds (default 3600; with the floorplan at 1k entries
# placement and routing take 6 to 20 minutes on one core, router1, nextpnr-ecp5's
# default). BENCH_HW_PNR_ARGS: more nextpnr arguments (e.g. --no-route: the placement
# estimate only; report.py labels it).
# BENCH_HW_FLOORPLAN=0: no floorplan (by default floorplan.py fixes the block RAMs' sites
# first, OUTDIR/floorplan_BLOG2.txt says what it did; a netlist it has no plan for goes
# through unchanged).
set -u
blog2=$1 out=$2 nextpnr=$3
t0=$(date +%s)
net=$out/ecp5_$blog2.json
seeds=(${BENCH_HW_SEEDS:-${BENCH_HW_SEED:-1}})
echo "${seeds[0]}" >"$out/seed_pnr_$blog2.txt"
rm -f "$out"/pnr_ecp5_${blog2}_seed*.log "$out"/time_pnr_${blog2}_seed*.txt
if [[ ${BENCH_HW_FLOORPLAN:-1} != 0 ]]; then
	python3 "$(dirname "$0")/floorplan.py" "$net" "$out/ecp5_${blog2}_fp.json" >"$out/floorplan_$blog2.txt" 2>&1 &&
		net=$out/ecp5_${blog2}_fp.json
else
	echo "floorplan.py: not run (BENCH_HW_FLOORPLAN=0)" >"$out/floorplan_$blog2.txt"
fi
# pnr SEED LOG [ARGS...]: one place and route of $net with that seed, its log in LOG
pnr() {
	local seed=$1 log=$2
	shift 2
	timeout "${BENCH_HW_PNR_TIMEOUT:-3600}" $nextpnr --85k --speed 6 --out-of-context --json "$net" --freq 156.25 \
		--timing-allow-fail --seed "$seed" "$@" ${BENCH_HW_PNR_ARGS:-} >"$log" 2>&1
}
pnr "${seeds[0]}" "$out/pnr_ecp5_$blog2.log" --report "$out/pnr_ecp5_$blog2.json" --detailed-timing-report \
	--sdf "$out/routed_ecp5_$blog2.sdf" --write "$out/placed_ecp5_$blog2.json"
rc=$?
echo "$(($(date +%s) - t0))" >"$out/time_pnr_$blog2.txt"
# nextpnr names one path: paths.py lists the paths that miss the clock, with the routed
# delays of its SDF when routing finished, else its rough estimate over the placed netlist
if [[ -s $out/placed_ecp5_$blog2.json ]]; then
	rep=()
	grep -q "Routing complete" "$out/pnr_ecp5_$blog2.log" && [[ -s $out/routed_ecp5_$blog2.sdf ]] &&
		rep=(6.4 "$out/routed_ecp5_$blog2.sdf")
	python3 "$(dirname "$0")/paths.py" "$out/placed_ecp5_$blog2.json" 40 "${rep[@]}" >"$out/paths_$blog2.txt" 2>&1
fi
for s in "${seeds[@]:1}"; do
	t1=$(date +%s)
	pnr "$s" "$out/pnr_ecp5_${blog2}_seed$s.log"
	echo "$(($(date +%s) - t1))" >"$out/time_pnr_${blog2}_seed$s.txt"
done
exit $rc
