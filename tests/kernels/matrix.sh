#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# The kernel matrix (make kernel-matrix; make test runs it): the test binaries that load the
# data plane, built once per compiler, run on Debian 12's kernel (6.1 LTS), Debian 13's
# (6.12 LTS), both under qemu -accel tcg (vm.sh), and on the running kernel (natively).
# Prints each run's output (its last MATRIX_LINES lines) under a header naming the kernel,
# the compiler and the test, then one table; exits 1 when any run failed or could not run
# (a kernel that does not boot is a failure). Full outputs: target/kernel-matrix/.
#
# Environment (defaults in brackets):
#   MATRIX_TESTS      test targets [packet_vectors headroom]; a missing one is a failure
#   MATRIX_KERNELS    [6.1 6.12 host]
#   MATRIX_COMPILERS  [clang clang-19]: clang is PATH's (Debian 12: clang 14); any other is
#                     built with NATRIX_CLANG=/usr/bin/<name> in target/<name without ->
#   MATRIX_SKIP       runs left out, as kernel/compiler/test words with * allowed
#                     [6.12/clang-19/*]: see README.md (CI time)
#   MATRIX_THREADS    --test-threads [2]
#   MATRIX_TIMEOUT    seconds per run [900]
#   MATRIX_LINES      lines of a run's output printed [200]
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root" || exit 1
CARGO=${CARGO:-$(command -v cargo || echo "$HOME/.cargo/bin/cargo")}
tests=${MATRIX_TESTS-packet_vectors headroom}
kernels=${MATRIX_KERNELS-6.1 6.12 host}
compilers=${MATRIX_COMPILERS-clang clang-19}
skip=${MATRIX_SKIP-6.12/clang-19/*}
threads=${MATRIX_THREADS:-2}
run_timeout=${MATRIX_TIMEOUT:-900}
lines=${MATRIX_LINES:-200}
out=$root/target/kernel-matrix
mkdir -p "$out"
rm -f "$out"/*.log "$out"/summary.txt
t_start=$(date +%s)
say() { echo "kernel-matrix: $*"; }
rows=()
failed=0
skipped() { # skipped kernel compiler label test
	local pat
	for pat in $skip; do
		# shellcheck disable=SC2053
		[[ $1/$3/$4 == $pat || $1/$2/$4 == $pat ]] && return 0
	done
	return 1
}
row() { # row kernel compiler test result seconds
	rows+=("$1"$'\t'"$2"$'\t'"$3"$'\t'"$4"$'\t'"$5")
}

# --- the test binaries, one set per compiler
declare -A bin      # [compiler/test] = path
declare -A cc_label # [compiler] = clang-14
for cc in $compilers; do
	if [[ $cc == clang ]]; then
		path=$(command -v clang) || { say "no clang"; exit 1; }
		tdir=$root/target
		env_cc=()
	else
		path=/usr/bin/$cc
		[[ -x $path ]] || { say "$path missing (scripts/deps.sh kernels installs it)"; exit 1; }
		tdir=$root/target/${cc//-/}
		env_cc=(NATRIX_CLANG="$path")
		# seeded with the default build: only natrix itself is built again
		if [[ ! -d $tdir/release && -d $root/target/release ]]; then
			mkdir -p "$tdir"
			cp -a --reflink=auto "$root/target/release" "$tdir/"
		fi
	fi
	cc_label[$cc]=clang-$("$path" --version | head -1 | grep -o 'version [0-9]*' | awk '{print $2}')
	args=()
	for t in $tests; do args+=(--test "$t"); done
	say "building ${tests// /, } with ${cc_label[$cc]} ($path) in ${tdir#"$root"/}"
	tb=$(date +%s)
	if ! json=$(env "${env_cc[@]}" CARGO_TARGET_DIR="$tdir" "$CARGO" test --release --locked --no-run \
		"${args[@]}" --message-format=json-render-diagnostics); then
		say "cargo test --no-run failed with ${cc_label[$cc]} (a test target missing? MATRIX_TESTS='$tests')"
		for t in $tests; do for k in $kernels; do
			skipped "$k" "$cc" "${cc_label[$cc]}" "$t" || row "$k" "${cc_label[$cc]}" "$t" "NOT BUILT" -
		done; done
		failed=1
		continue
	fi
	say "built in $(($(date +%s) - tb)) s"
	while IFS=$'\t' read -r name exe; do
		bin[$cc/$name]=$exe
	done < <(jq -r 'select(.reason == "compiler-artifact" and .executable != null and (.target.kind | index("test"))) | [.target.name, .executable] | @tsv' <<<"$json")
	for t in $tests; do
		[[ -n ${bin[$cc/$t]:-} ]] || { say "no executable for test $t"; exit 1; }
	done
done

# --- the kernels
declare -A kdir
for k in $kernels; do
	case $k in
	6.1) rel=bookworm ;;
	6.12) rel=trixie ;;
	host) continue ;;
	*) say "unknown kernel $k (6.1, 6.12, host)"; exit 2 ;;
	esac
	if ! kdir[$k]=$("$here/fetch.sh" $rel); then
		say "fetching $rel's kernel failed"
		kdir[$k]=
	fi
done

# --- the runs
show() { # the verifier's refusals (the end of the first log per program), then the last
	# $lines lines of the run's output; every line cut at 400 characters
	local n
	awk -v keep=25 '
		/^libbpf: prog .*: BPF program load failed/ {
			p = $3; coll = !(p in seen); seen[p] = 1
			if (coll) { if (!hdr++) print "[the verifier refused (the end of its log, first time per program):]"; print }
			inlog = 0; next
		}
		coll && /-- BEGIN PROG LOAD LOG --/ { inlog = 1; n = 0; next }
		coll && inlog && /-- END PROG LOAD LOG --/ {
			if (n > keep) print "  [... " n - keep " lines of the log cut]"
			for (i = (n > keep ? n - keep : 0); i < n; i++) print "  " buf[i % keep]
			inlog = 0; coll = 0; next
		}
		coll && inlog { buf[n++ % keep] = $0 }
	' "$1" | cut -c1-400
	n=$(wc -l <"$1")
	if ((n > lines)); then echo "[... $((n - lines)) lines cut; all of it: ${1#"$root"/}]"; fi
	tail -n "$lines" "$1" | cut -c1-400
}
for k in $kernels; do
	for cc in $compilers; do
		[[ -n ${cc_label[$cc]:-} ]] || continue
		for t in $tests; do
			[[ -n ${bin[$cc/$t]:-} ]] || continue
			label=${cc_label[$cc]}
			skipped "$k" "$cc" "$label" "$t" && continue
			log=$out/$k-$label-$t.log
			uname_f=$out/.uname
			rm -f "$uname_f"
			echo
			echo "=================== kernel $k, $label, $t ==================="
			t0=$(date +%s)
			if [[ $k == host ]]; then
				uname -r >"$uname_f"
				timeout -s KILL "$run_timeout" "${bin[$cc/$t]}" --test-threads="$threads" >"$log" 2>&1
				rc=$?
			elif [[ -z ${kdir[$k]} ]]; then
				echo "kernel $k not fetched" >"$log"
				rc=125
			else
				VM_TIMEOUT=$run_timeout VM_QUIET=1 VM_UNAME_FILE=$uname_f \
					"$here/vm.sh" "${kdir[$k]}" -- "${bin[$cc/$t]}" --test-threads="$threads" >"$log" 2>&1
				rc=$?
			fi
			secs=$(($(date +%s) - t0))
			show "$log"
			kname=$k
			[[ -s $uname_f ]] && kname=$(cat "$uname_f")
			result=$(grep -a '^test result: ' "$log" | tail -1 | sed 's/^test result: //; s/; finished in .*//')
			case $rc in
			0) [[ -n $result ]] || result="exit 0, no test result line" ;;
			124) result="TIMEOUT after $run_timeout s${result:+ ($result)}" ;;
			125) [[ $k == host ]] || result="DID NOT BOOT/RUN (vm.sh 125)" ;;
			*) [[ -n $result ]] || result="exit $rc, no test result line" ;;
			esac
			[[ $rc == 137 && $k == host ]] && result="TIMEOUT after $run_timeout s${result:+ ($result)}"
			((rc == 0)) || failed=1
			echo "--- kernel $k ($kname), $label, $t: exit $rc in $secs s"
			row "$kname" "$label" "$t" "$result" "$secs"
		done
	done
done

# --- the table (without the words "test result:", which CI counts)
{
	echo
	echo "kernel matrix ($(($(date +%s) - t_start)) s; outputs in ${out#"$root"/}/):"
	printf '%-24s %-9s %-16s %6s  %s\n' kernel compiler test secs result
	for r in "${rows[@]}"; do
		IFS=$'\t' read -r a b c d e <<<"$r"
		printf '%-24s %-9s %-16s %6s  %s\n' "$a" "$b" "$c" "$e" "$d"
	done
	[[ -n $skip ]] && echo "left out (MATRIX_SKIP): $skip"
	if ((failed)); then echo "kernel matrix: FAILED"; else echo "kernel matrix: ok"; fi
} | tee "$out/summary.txt"
exit "$failed"
