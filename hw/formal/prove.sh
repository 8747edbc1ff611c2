#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# The checksum unit's proofs (Yosys' SAT solver, every input bit free), and the core's
# carry-select adder's (core_arith.ys): each `sat -prove` of csum_equiv.ys, csum_rfc1624.ys
# and core_arith.ys is one result; then the proofs run on broken copies of
# the package, where they must find a counterexample (they can tell right from wrong).
# Ends with "N passed, M failed"; exit status 1 if M > 0.
set -uo pipefail
cd "$(dirname "$0")"
command -v yosys >/dev/null || { echo "prove: yosys missing (make deps-hw)"; echo "0 passed, 1 failed"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0

# run <script.ys> [package file]: one result per `sat -prove` line, in order
run() {
	local ys=$1 pkg=${2:-../rtl/nx_csum_pkg.sv} log=$tmp/log
	local -a names results
	mapfile -t names < <(sed -n 's/^sat -prove \([^ ]*\) .*/\1/p' "$ys")
	sed "s#\.\./rtl/nx_csum_pkg\.sv#$pkg#" "$ys" > "$tmp/run.ys"
	local rc=0
	yosys -q -l "$log" "$tmp/run.ys" >/dev/null 2>&1 || rc=$?
	mapfile -t results < <(grep -oE 'SAT proof finished - (no model found: SUCCESS|model found: FAIL)' "$log" | grep -oE 'SUCCESS|FAIL')
	if ((rc != 0 || ${#results[@]} != ${#names[@]})); then
		echo "prove: $ys: yosys exit $rc, ${#results[@]} of ${#names[@]} proofs reported" >&2
		grep -E 'ERROR' "$log" >&2
	fi
	local i
	for i in "${!names[@]}"; do
		printf '%s\t%s\n' "${names[$i]}" "${results[$i]:-NONE}"
	done
}

for ys in csum_equiv.ys csum_rfc1624.ys core_arith.ys; do
	while IFS=$'\t' read -r name res; do
		if [[ $res == SUCCESS ]]; then
			[[ $name == trigger ]] && name="nx_csum_unit == ref_rewrite (miter, all outputs)"
			pass=$((pass + 1)); echo "proved   ${ys%.ys}: $name"
		else
			fail=$((fail + 1)); echo "FAILED   ${ys%.ys}: $name ($res)"
		fi
	done < <(run "$ys")
done

# mutants: the package with one fold only, and with diff4's sum cut to 17 bits
mutate() { sed "$1" ../rtl/nx_csum_pkg.sv > "$tmp/$2.sv"; cmp -s ../rtl/nx_csum_pkg.sv "$tmp/$2.sv" && echo "prove: mutant $2 changed nothing" >&2; }
mutate 's/s2 = s1\[16\] ? nx_sum1(c\[15:0\], c\[31:16\]) : s1\[15:0\];/s2 = s1[15:0];/' one_fold
mutate 's/logic \[17:0\] s;/logic [16:0] s;/; s/{2.d0, \(n\?[a-z]*\)\[\([0-9:]*\)\]}/{1'"'"'b0, \1[\2]}/g; s/nx_csum_diff4 = {14.d0, s};/nx_csum_diff4 = {15'"'"'d0, s};/' diff4_17bit
for m in one_fold diff4_17bit; do
	if cmp -s ../rtl/nx_csum_pkg.sv "$tmp/$m.sv"; then
		fail=$((fail + 1)); echo "FAILED   mutant $m: not made"; continue
	fi
	# the results captured first: with pipefail, `run | grep -q` fails whenever grep exits at
	# its first match before run has written its last line (SIGPIPE), a false "proven equal"
	res=$(run csum_equiv.ys "$tmp/$m.sv")
	if grep -q $'\tFAIL$' <<<"$res"; then
		pass=$((pass + 1)); echo "refuted  mutant $m (a counterexample found, as it must be)"
	else
		fail=$((fail + 1)); echo "FAILED   mutant $m: proven equal though it is wrong"
	fi
done
# a mutant of the core's adder: the high half's carry in ignored (the sum without the
# select), which the hash's proofs must refute too
sed 's/nx_add32 = {lo\[16\] ? nx_csum_pkg::nx_sum1(a\[31:16\], b\[31:16\]) : a\[31:16\] + b\[31:16\], lo\[15:0\]};/nx_add32 = {a[31:16] + b[31:16], lo[15:0]};/' ../rtl/nx_core_pkg.sv > "$tmp/no_carry.sv"
if cmp -s ../rtl/nx_core_pkg.sv "$tmp/no_carry.sv"; then
	fail=$((fail + 1)); echo "FAILED   mutant add32_no_carry: not made"
else
	sed "s#\.\./rtl/nx_core_pkg\.sv#$tmp/no_carry.sv#" core_arith.ys > "$tmp/arith.ys"
	yosys -q -l "$tmp/arith.log" "$tmp/arith.ys" >/dev/null 2>&1
	if [[ $(grep -c 'model found: FAIL' "$tmp/arith.log") == 2 ]]; then
		pass=$((pass + 1)); echo "refuted  mutant add32_no_carry (both proofs find a counterexample)"
	else
		fail=$((fail + 1)); echo "FAILED   mutant add32_no_carry: not refuted by both proofs"
	fi
fi
echo "$pass passed, $fail failed"
((fail == 0))
