#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# make bench: natrix against nftables, the kernel and a minimal XDP forwarder, side by side,
# on this machine; per-packet cost and memory with up to 10M sessions. Results in
# bench-results/ (raw.jsonl, results.json, *.png), summary in docs/PERFORMANCE.md.
#
#   BENCH_QUICK=1   about a minute: one round, fewer sizes and scales
#   BENCH_SMOKE=1   seconds: what tests/bench_smoke.rs runs (docs are not touched)
#   BENCH_OUT=DIR   results directory (default bench-results)
#   BENCH_ROUNDS=N  rounds of the end-to-end part (default 5)
#   NATRIX_REF=BIN  also measure natrix built from another commit (gateway natrixref), case by
#                   case beside this build: a packet-path change's before and after in one run
#   BENCH_ONLY=newflow  only the connection-setup part of each round (with NATRIX_REF: a quick
#                   A/B of the setup path; BENCH_ROUNDS applies)
#   BENCH_ONLY=cost only the per-packet cost (BPF_PROG_TEST_RUN); with NATRIX_REF, this build's
#                   and the reference's in turn, BENCH_ROUNDS times (default 3)
#   BENCH_ONLY=log  only NAT event logging: its per-packet cost (off, on, with session events,
#                   an A/A control, side by side in BPF_PROG_TEST_RUN; LOG_ROUNDS rounds, default
#                   15) and its volume for a simulated minute (records and bytes per second)
#   BENCH_ONLY=capture  only `natrix capture` under load (bench/src/capture.rs): the fast path's
#                   rate with no capture, a filter matching nothing, one flow, everything;
#                   records written and lost against frame size and burst length (CAP_ROUNDS
#                   rounds, default 5; CAP_ARGS: other options of natrix-bench capture);
#                   rewrites its own section of docs/PERFORMANCE.md
#
# Topology: every gateway has a namespace and a path of its own, all built once and kept
# up, so that the gateways can be measured one right after the other, case by case:
#
#   gen ns: g<gw> ── nxbin 100.64.0.1 [<gw> ns] 198.51.100.1 nxbout ── s<gw> :sink ns
#   generator (XDP live frames, XDP_TX)   natrix | nft | kernel | xdpfwd    XDP counting drop
#                                         | natrixdet, setupfloor (new-flow cases only)
#   gen ns: gdirect ── nxbin [direct ns]: the sink itself (no gateway)
#
# Subscribers 100.64.16.0 and up sit behind the generator (route via 100.64.0.2); the pool
# is 203.0.113.0/24 + 192.0.2.0/24. Neighbours are permanent: the sink answers nothing.
# Everything runs on CPU 0, inline: the generator's batch, then the gateway's and the sink's
# NAPI polls in the same softirq (see docs/PERFORMANCE.md, "Method", for why).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
NATRIX=${NATRIX:-$ROOT/target/release/natrix}
NATRIX_BENCH=${NATRIX_BENCH:-$ROOT/target/release/natrix-bench} # generator, harness, report
PY=/usr/bin/python3 # Debian's, with python3-matplotlib
OUT=$(realpath -m "${BENCH_OUT:-$ROOT/bench-results}")
QUICK=${BENCH_QUICK:-0}
SMOKE=${BENCH_SMOKE:-0}
TAG=nxb$$
GEN=$TAG-gen SINK=$TAG-sink
gwns() { echo "$TAG-$1"; } # the namespace of gateway $1
PIN=/sys/fs/bpf/$TAG
RAW=$OUT/raw.jsonl
LOG=$OUT/bench.log
CPU=0         # generator, gateway and sink
DAEMON_CPU=1  # natrix's daemon (its sweeps), off the measured CPU

if ((SMOKE)); then
	ROUNDS=1 DUR=0.5 SIZES="64" GATEWAYS="direct natrix natrixdet xdpfwd kernel setupfloor" SCALES="1 1000" PASSES64=2
	COST_SESSIONS=1000,2000 COST_REPS=2 COST_REPEAT=20000 MANY_FLOWS=4096 SUBS=64 ALLOC_MAX=2048
	# both new-flow runs, with their profile windows (< 2.5M setups/s); natrix's tables for
	# the established cases are at least this large too (natrix_up): ~0.6 GB per instance
	NEWFLOW_TABLE=6000000
	LOG_COST_ARGS="--sessions 2000 --reps 2 --split 2 --repeat 2000 --new-flows 40 --new-blocks 100"
	LOG_VOLUME_ARGS="--subs 100 --conns 4 --variants sessions --idle"
	CAP_ROUNDS=1 CAP_ARGS="--duration 0.3 --subs 64 --flows 256 --sizes 64 --bursts 64,4096 --burst-sizes 64"
elif ((QUICK)); then
	ROUNDS=1 DUR=1 SIZES="64 512 1500" GATEWAYS="direct natrix natrixdet nft kernel xdpfwd setupfloor" SCALES="1 1000 100000" PASSES64=1
	COST_SESSIONS=1000,100000 COST_REPS=3 COST_REPEAT=200000 MANY_FLOWS=65536 SUBS=16384 ALLOC_MAX=4096
	NEWFLOW_TABLE=10000000
	LOG_COST_ARGS="--sessions 100000 --reps 3 --repeat 100000 --new-flows 2000 --new-blocks 1000"
	LOG_VOLUME_ARGS="--subs 10000 --conns 20 --idle"
	CAP_ROUNDS=1 CAP_ARGS="--duration 0.5 --sizes 64,512,1500 --bursts 256,4096,65536 --burst-sizes 64,1500"
else
	ROUNDS=${BENCH_ROUNDS:-5} DUR=1 SIZES="64 128 256 512 1024 1500" GATEWAYS="direct natrix natrixdet nft kernel xdpfwd setupfloor" PASSES64=3
	SCALES="1 1000 100000 1000000 10000000"
	COST_SESSIONS=1000,1000000,10000000 COST_REPS=5 COST_REPEAT=500000 MANY_FLOWS=65536 SUBS=16384 ALLOC_MAX=8192
	NEWFLOW_TABLE=10000000 # a daemon's two new-flow runs (UDP, TCP): up to 1.5 s each at < 2.5M setups/s
	# NAT event logging: 1M sessions, LOG_ROUNDS rounds; the volume of
	# 10,000 subscribers opening 20 connections each in a simulated minute
	LOG_COST_ARGS="--sessions 1000000 --reps ${LOG_ROUNDS:-15} --repeat 200000 --new-flows 5000 --new-blocks 800"
	LOG_VOLUME_ARGS="--subs 10000 --conns 20 --idle"
	# natrix capture: 1024 subscribers' 4096 established flows; frame sizes 64-1500, bursts of
	# 64 to 256k packets (bench/src/capture.rs has the defaults)
	CAP_ROUNDS=${CAP_ROUNDS:-5} CAP_ARGS=${CAP_ARGS:-"--duration 1"}
fi
NATRIX_REF=${NATRIX_REF:-}
BENCH_ONLY=${BENCH_ONLY:-}
if [[ -n $NATRIX_REF ]]; then
	[[ -x $NATRIX_REF ]] || { echo "bench: NATRIX_REF=$NATRIX_REF is not an executable" >&2; exit 1; }
	GATEWAYS=${GATEWAYS/natrix /natrix natrixref }
fi
[[ -z $BENCH_ONLY || $BENCH_ONLY == newflow || $BENCH_ONLY == cost || $BENCH_ONLY == log || $BENCH_ONLY == capture ]] ||
	{ echo "bench: BENCH_ONLY: only 'newflow', 'cost', 'log' and 'capture' are known" >&2; exit 1; }
# the log and capture parts need natrix's namespace (and its sink) only, no end-to-end
# rounds (and no NATRIX_REF)
[[ $BENCH_ONLY == log || $BENCH_ONLY == capture ]] && GATEWAYS=natrix ROUNDS=0
MAX_SCALE=$(tr ' ' '\n' <<<"$SCALES" | sort -n | tail -1)

mkdir -p "$OUT"
: >"$RAW"
: >"$LOG"
T0=$SECONDS
say() { printf '\033[1m== [%4ds] %s\033[0m\n' $((SECONDS - T0)) "$*" | tee -a "$LOG" >&2; }
in_ns() { local ns=$1; shift; nsenter --net=/run/netns/"$ns" "$@"; }

# ---- host settings we change, restored on exit --------------------------------------------
CT_MAX_OLD="" CT_BUCKETS_OLD=""
declare -A daemon=() # natrix gateway -> its daemon's pid
cleanup() {
	set +e
	for d in "${daemon[@]}"; do kill "$d" 2>/dev/null; wait "$d" 2>/dev/null; done
	for d in "$PIN"/*/; do
		[[ -d $d ]] && "$(bin_of "$(basename "$d")")" down --pin "${d%/}" >/dev/null 2>&1
	done
	rmdir "$PIN" 2>/dev/null
	for ns in $GEN $SINK $(for g in $GATEWAYS; do gwns "$g"; done); do ip netns del "$ns" 2>/dev/null; done
	[[ -n $CT_BUCKETS_OLD ]] && sysctl -qw net.netfilter.nf_conntrack_buckets="$CT_BUCKETS_OLD"
	[[ -n $CT_MAX_OLD ]] && sysctl -qw net.netfilter.nf_conntrack_max="$CT_MAX_OLD"
	return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- topology ------------------------------------------------------------------------------
topology_up() {
	for ns in $GEN $SINK; do ip netns add "$ns"; ip -n "$ns" link set lo up; done
	# The generator's parking place (natrix-bench e2e --park-dev): a veth pair that stays
	# down and carries nothing. Attached there, the generator stays in the kernel's XDP
	# dispatcher, and its test runs do not wait for two RCU grace periods each
	# (docs/design/performance-notebook.md, R31: on some machines that wait was most of every run).
	ip -n $GEN link add nxbpark type veth peer name nxbpark1
	for g in $GATEWAYS; do
		local ns
		ns=$(gwns "$g")
		ip netns add "$ns"
		ip -n "$ns" link set lo up
		ip link add "g$g" netns $GEN type veth peer name nxbin netns "$ns"
		ip -n $GEN link set "g$g" up
		ip -n "$ns" link set nxbin up
		[[ $g == direct ]] && continue
		ip link add nxbout netns "$ns" type veth peer name "s$g" netns $SINK
		ip -n "$ns" addr add 100.64.0.1/24 dev nxbin
		ip -n "$ns" addr add 198.51.100.1/24 dev nxbout
		ip -n $SINK link set "s$g" up
		ip -n "$ns" link set nxbout up
		ip -n "$ns" route add 100.64.0.0/16 via 100.64.0.2
		ip -n "$ns" neigh replace 100.64.0.2 lladdr "$(mac $GEN "g$g")" dev nxbin nud permanent
		ip -n "$ns" neigh replace 198.51.100.2 lladdr "$(mac $SINK "s$g")" dev nxbout nud permanent
		ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 \
			net.ipv4.conf.default.rp_filter=0 net.ipv4.conf.nxbin.rp_filter=0
		# The kernel paths need NAPI on nxbin to take the generator's XDP frames: GRO does
		# it when no XDP program is attached (an attached one does it too).
		ip netns exec "$ns" ethtool -K nxbin gro on >/dev/null
	done
}
mac() { ip -n "$1" -br link show "$2" | awk '{print $3}'; }

# ---- gateways ------------------------------------------------------------------------------
# Gateway natrixdet (or NATRIX_MODE=deterministic for natrix itself): RFC 7422 ranges
# (bpf/nx_det.h) instead of dynamic port blocks; the generator's subscribers (100.64.16.0 and
# up) all sit in 100.64.0.0/17, 64 to a pool address, 1008 ports each.
# Gateway natrixref: the same configuration as natrix, run by the binary NATRIX_REF (its own
# daemon, BPF objects and generator: e2e runs use that binary too, since the table layout
# the generator's provisioning reads may differ between builds).
isnatrix() { [[ $1 == natrix || $1 == natrixdet || $1 == natrixref ]]; }
bin_of() { if [[ $1 == natrixref ]]; then echo "$NATRIX_REF"; else echo "$NATRIX"; fi; }
# the generator for gateway $1, into the array GENCMD: the reference build's own (its
# natrix-bench beside it, or `natrix bench` in builds from before the bench crate)
gen_of() {
	if [[ $1 != natrixref ]]; then GENCMD=("$NATRIX_BENCH")
	elif [[ -x $(dirname "$NATRIX_REF")/natrix-bench ]]; then GENCMD=("$(dirname "$NATRIX_REF")/natrix-bench")
	else GENCMD=("$NATRIX_REF" bench); fi
}
natrix_nat_conf() { # natrix_nat_conf GATEWAY
	if [[ $1 == natrixdet || ${NATRIX_MODE:-dynamic} == deterministic ]]; then
		printf 'mode = "deterministic"\ndeterministic_subscribers = "100.64.0.0/17"\n'
	else
		printf 'block_size = 1024\nmax_blocks_per_subscriber = 32\n'
	fi
}

# the new-flow runs open thousands of sessions per subscriber (the smoke run's 64
# subscribers above 10k each): a per-subscriber limit above that, so that its check is
# measured as an operator runs it (a reference build older than the limit does not know
# the key)
per_sub_limit() {
	[[ $1 == natrixref ]] && ! grep -q max_sessions_per_subscriber "$NATRIX_REF" && return
	echo "max_sessions_per_subscriber = 100000"
}

natrix_conf() { # natrix_conf TABLE-SIZE GATEWAY
	cat <<-EOF
		# written by scripts/bench.sh
		[interfaces]
		inside = ["nxbin"]
		outside = ["nxbout"]
		[pool]
		addresses = ["203.0.113.0/24", "192.0.2.0/24"]
		ports = "1024-65535"
		[nat]
		$(natrix_nat_conf "$2")
		[limits]
		max_subscribers = 65536
		max_mappings = $1
		max_sessions = $1
		$(per_sub_limit "$2")
		[daemon]
		pin_path = "$PIN/$2"
		sweep_interval = "60s"
	EOF
}

natrix_up() { # natrix_up GATEWAY SESSIONS
	local gw=$1 size=$(( $2 + $2 / 20 > NEWFLOW_TABLE ? $2 + $2 / 20 : NEWFLOW_TABLE ))
	natrix_conf "$size" "$gw" >"$OUT/$gw-bench.toml"
	: >"$OUT/$gw-daemon.log"
	# not through in_ns: $! must be the daemon itself (nsenter and taskset exec it)
	nsenter --net=/run/netns/"$(gwns "$gw")" taskset -c $DAEMON_CPU "$(bin_of "$gw")" run --config "$OUT/$gw-bench.toml" \
		>"$OUT/$gw-daemon.log" 2>&1 &
	daemon[$gw]=$!
	for _ in $(seq 300); do
		[[ -e $PIN/$gw/link_nxbout ]] && grep -q "ready" "$OUT/$gw-daemon.log" && return 0
		kill -0 "${daemon[$gw]}" 2>/dev/null || break
		sleep 0.1
	done
	tail -20 "$OUT/$gw-daemon.log" >&2
	echo "bench: $gw did not start" >&2
	return 1
}

natrix_down() { # natrix_down GATEWAY
	local gw=$1
	if [[ -n ${daemon[$gw]:-} ]]; then
		kill "${daemon[$gw]}" 2>/dev/null || true
		wait "${daemon[$gw]}" 2>/dev/null || true
		unset "daemon[$gw]"
	fi
	[[ -d $PIN/$gw ]] && "$(bin_of "$gw")" down --pin "$PIN/$gw" >/dev/null
	return 0
}

nft_up() {
	ip netns exec "$(gwns nft)" nft -f - <<-'EOF'
		table ip nxbench {
			chain postrouting {
				type nat hook postrouting priority srcnat; policy accept;
				oifname "nxbout" snat ip to 203.0.113.0-203.0.113.255
			}
		}
	EOF
	# unreplied UDP (all of ours) lives 30 s by default: longer than filling 10M flows
	ip netns exec "$(gwns nft)" sysctl -qw net.netfilter.nf_conntrack_udp_timeout=600 \
		net.netfilter.nf_conntrack_tcp_timeout_syn_sent=600
}

nft_flush() { ip netns exec "$(gwns nft)" conntrack -F >/dev/null 2>&1 || true; }

nft_down() {
	ip netns exec "$(gwns nft)" nft delete table ip nxbench 2>/dev/null || true
	nft_flush
}

gateway_up() {
	case $1 in
	natrix | natrixref) natrix_up "$1" "$MAX_SCALE" ;;
	natrixdet) natrix_up natrixdet 0 ;;
	nft) nft_up ;;
	kernel) ;;
	xdpfwd) in_ns "$(gwns xdpfwd)" "$NATRIX_BENCH" attach fwd --dev nxbin,nxbout --pin "$PIN/fwd" ;;
	# a table as large as natrix's session table in the new-flow runs
	setupfloor) in_ns "$(gwns setupfloor)" "$NATRIX_BENCH" attach setup-floor --dev nxbin,nxbout \
		--pin "$PIN/floor" --sessions "$NEWFLOW_TABLE" ;;
	direct) in_ns "$(gwns direct)" "$NATRIX_BENCH" attach sink --dev nxbin --pin "$PIN/direct" ;;
	esac
}

gateway_down() {
	case $1 in
	natrix | natrixdet | natrixref) natrix_down "$1" ;;
	nft) nft_down ;;
	kernel) ;;
	xdpfwd) "$NATRIX_BENCH" detach --pin "$PIN/fwd" ;;
	setupfloor) "$NATRIX_BENCH" detach --pin "$PIN/floor" ;;
	direct) "$NATRIX_BENCH" detach --pin "$PIN/direct" ;;
	esac
}

# ---- one measurement -----------------------------------------------------------------------
e2e() { # e2e GATEWAY CASE ARGS...
	local gw=$1 case=$2 sink=$PIN/sink-$1 extra=()
	shift 2
	[[ $gw == direct ]] && sink=$PIN/direct
	isnatrix "$gw" && extra+=(--natrix-pin "$PIN/$gw")
	local line GENCMD
	gen_of "$gw"
	if ! line=$(in_ns $GEN taskset -c $CPU "${GENCMD[@]}" e2e --dev "g$gw" --dst-mac "$(mac "$(gwns "$gw")" nxbin)" \
		--sink-pin "$sink" --park-dev nxbpark --gateway "$gw" --case "$case" --round "$ROUND" --subs "$SUBS" \
		--duration "$DUR" --out "$RAW" "${extra[@]}" "$@" 2>>"$LOG"); then
		echo "bench: e2e $gw $case $* failed (see $LOG)" >&2
		return 1
	fi
	printf '  [%4ds] %-7s %-8s %s\n' $((SECONDS - T0)) "$gw" "$case" "$(summary <<<"$line")" | tee -a "$LOG" >&2
}
summary() {
	$PY -c 'import json,sys; r=json.load(sys.stdin)
print("%5s B %8s flows %-6s %-4s %8.3f Mpps %6.2f Gbit/s loss %5.1f%%" % (r["size"], r["flows"], r["mode"], r["proto"], r["pps"]/1e6, r["gbps"], 100*r["loss"]))'
}
profile() { # profile GATEWAY: link pins whose programs get a bpf_stats profile (round 1)
	((ROUND == 1)) || return 0
	case $1 in
	natrix | natrixdet | natrixref) echo --profile "$PIN/$1/link_nxbin" ;;
	xdpfwd) echo --profile "$PIN/fwd/link_nxbin" ;;
	esac
}

# One round: every case, and within a case every gateway in turn, so that the gateways'
# figures for one case are taken seconds apart, not minutes: this machine's speed drifts
# by more than the differences measured (docs/PERFORMANCE.md, "Method"). natrix starts each
# round on fresh tables; the others stay up for the whole run.
stateful() { [[ $1 == natrix || $1 == natrixref || $1 == nft ]]; }
setup_only() { [[ $1 == setupfloor || $1 == natrixdet ]]; } # measured on new flows only
has() { [[ " $GATEWAYS " == *" $1 "* ]]; } # is gateway $1 part of this run
round() {
	local gws=("$@") gw s c p est
	local pass passes pass_order
	if [[ $BENCH_ONLY == newflow ]]; then
		# the no-gateway figure: what the gateways' times are derived from
		has direct && e2e direct size --size 64 --flows 1 --establish
		newflows "${gws[@]}"
		return
	fi
	has natrix && natrix_up natrix "$MAX_SCALE"
	has natrixref && natrix_up natrixref "$MAX_SCALE"
	for s in $SIZES; do
		# the first target is judged on 64-byte frames: measured PASSES64 times a round, the
		# gateways' order reversed on every other pass (with an even count, a steady drift
		# within the round favours none of them; with an odd one, less than a fixed order)
		passes=1
		[[ $s == 64 ]] && passes=$PASSES64
		for pass in $(seq 1 "$passes"); do
			pass_order=("${gws[@]}")
			((pass % 2 == 0)) && mapfile -t pass_order < <(printf '%s\n' "${gws[@]}" | tac)
			for gw in "${pass_order[@]}"; do
				setup_only "$gw" && continue
				p=()
				[[ $s == 64 && $pass == 1 ]] && read -ra p <<<"$(profile "$gw")"
				e2e "$gw" size --size "$s" --flows 1 --establish --pass "$pass" "${p[@]}"
			done
		done
	done
	for gw in "${gws[@]}"; do
		[[ $gw == direct ]] && continue
		setup_only "$gw" && continue
		read -ra p <<<"$(profile "$gw")"
		e2e "$gw" flows --flows "$MANY_FLOWS" --mode random --establish "${p[@]}"
	done
	for c in $SCALES; do
		for gw in "${gws[@]}"; do
			[[ $gw == direct ]] && continue
			setup_only "$gw" && continue
			est=()
			if stateful "$gw"; then
				# filling the largest scale takes natrix seconds and conntrack minutes:
				# round 1 only
				((c == MAX_SCALE && ROUND > 1 && c > 1000000)) && continue
				est=(--establish)
			else
				# no per-flow state: the smallest and the largest are the whole curve
				[[ $c != 1 && $c != "$MAX_SCALE" ]] && continue
			fi
			e2e "$gw" scale --flows "$c" --mode random "${est[@]}"
		done
	done
	newflows "${gws[@]}"
}

# connection setups: every packet a new flow, on fresh state (UDP and TCP flows use
# different outside ports and sessions, so natrix needs one restart for both)
newflows() {
	local gws=("$@") gw p proto
	has natrix && { natrix_down natrix; natrix_up natrix 0; }
	has natrixref && { natrix_down natrixref; natrix_up natrixref 0; }
	has natrixdet && natrix_up natrixdet 0
	# the protocol measured second on a daemon tends to be the slower (docs/design/
	# performance-notebook.md, R22): the order alternates from round to round so that neither always takes that turn
	local protos=(udp tcp)
	((ROUND % 2 == 0)) && protos=(tcp udp)
	for proto in "${protos[@]}"; do
		for gw in "${gws[@]}"; do
			[[ $gw == direct ]] && continue
			[[ $gw == nft ]] && nft_flush
			read -ra p <<<"$(profile "$gw")"
			e2e "$gw" newflow --proto "$proto" --tcp-flags syn --mode new --flow-base "$SUBS" "${p[@]}"
		done
	done
	has nft && nft_flush
	natrix_down natrix
	natrix_down natrixref
	natrix_down natrixdet
}

# ---- run -----------------------------------------------------------------------------------
[[ $(id -u) -eq 0 ]] || { echo "bench: needs root (namespaces, XDP)" >&2; exit 1; }
[[ -x $NATRIX ]] || { echo "bench: $NATRIX missing: make build" >&2; exit 1; }
[[ -x $NATRIX_BENCH ]] || { echo "bench: $NATRIX_BENCH missing: make bench builds it" >&2; exit 1; }
say "machine: $(nproc) CPUs, $(uname -r); load $(cut -d' ' -f1-3 /proc/loadavg)"
if ip netns list | grep -q '^nxb[0-9]*-gen'; then
	echo "bench: warning: another benchmark is running (namespaces nxb*-gen): numbers will be disturbed" | tee -a "$LOG" >&2
fi
topology_up
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
mkdir -p "$PIN"
for g in $GATEWAYS; do
	[[ $g == direct ]] || in_ns $SINK "$NATRIX_BENCH" attach sink --dev "s$g" --pin "$PIN/sink-$g"
done
if [[ $GATEWAYS == *nft* ]]; then
	# conntrack's table is global: room for the largest scale, buckets to match
	CT_MAX_OLD=$(sysctl -n net.netfilter.nf_conntrack_max)
	CT_BUCKETS_OLD=$(sysctl -n net.netfilter.nf_conntrack_buckets)
	want=$((MAX_SCALE + MAX_SCALE / 5 + 262144))
	((want > CT_MAX_OLD)) && sysctl -qw net.netfilter.nf_conntrack_max=$want
	b=262144; while ((b < MAX_SCALE)); do b=$((b * 2)); done
	((b > CT_BUCKETS_OLD)) && sysctl -qw net.netfilter.nf_conntrack_buckets=$b
fi

# cost RAW LABEL BENCH...: the per-packet cost and memory of the data plane the command
# BENCH... (a natrix-bench, or an older natrix's `natrix bench`) embeds, its summary printed
# with LABEL
cost() {
	local raw=$1 label=$2
	shift 2
	in_ns "$(gwns natrix)" taskset -c $CPU "$@" cost --sessions "$COST_SESSIONS" --reps $COST_REPS \
		--repeat $COST_REPEAT --alloc-max $ALLOC_MAX --out "$raw" 2>>"$LOG" >/dev/null
	$PY -c 'import json,sys
for l in open(sys.argv[1]):
    r=json.loads(l)
    if r["kind"]=="cost":
        n=r["ns"]; print("  %s %9d sessions (hot/random): fwd %5.0f/%5.0f ns, out %5.0f/%5.0f ns, in %5.0f/%5.0f ns, new %5.0f ns, %5.1f B/session" % (sys.argv[2], r["sessions"], n["fwd"]["hot"], n["fwd"]["random"], n["est_out"]["hot"], n["est_out"]["random"], n["est_in"]["hot"], n["est_in"]["random"], n["new_flow"]["at_n"], r["memory"]["bytes_per_session"]))' "$raw" "$label" | tee -a "$LOG" >&2
}
if [[ $BENCH_ONLY == cost ]]; then
	gen_of natrixref
	for r in $(seq 1 "${BENCH_ROUNDS:-3}"); do
		say "per-packet cost, round $r: this build${NATRIX_REF:+, then the reference}"
		cost "$OUT/cost-this-$r.jsonl" this "$NATRIX_BENCH"
		[[ -n $NATRIX_REF ]] && cost "$OUT/cost-ref-$r.jsonl" "ref " "${GENCMD[@]}"
	done
	exit 0
fi
[[ -z $BENCH_ONLY ]] && say "per-packet cost (BPF_PROG_TEST_RUN) and memory: sessions $COST_SESSIONS"
[[ -z $BENCH_ONLY ]] && cost "$RAW" "" "$NATRIX_BENCH"

# logbench RAW: NAT event logging in natrix's namespace (bench/src/logcost.rs,
# logvolume.rs): what it costs per packet, logging off, on and with session events beside
# an A/A control (off again), run by run; and what it sends for a simulated minute
logbench() {
	local ns
	ns=$(gwns natrix)
	# shellcheck disable=SC2086 # the arguments are words
	in_ns "$ns" taskset -c $CPU "$NATRIX_BENCH" log-cost $LOG_COST_ARGS --out "$1" 2>>"$LOG" >/dev/null
	# shellcheck disable=SC2086
	in_ns "$ns" taskset -c $CPU "$NATRIX_BENCH" log-volume $LOG_VOLUME_ARGS --out "$1" 2>>"$LOG" >/dev/null
	$PY -c 'import json,sys
for l in open(sys.argv[1]):
    r=json.loads(l)
    if r["kind"]=="log_cost":
        v=r["variants"]; q=r["ratios"]
        for c in ["out_hot","out_rnd","in_hot","in_rnd","new_flow","new_block"]:
            print("  log %-9s off %5.0f ns; on/off: blocks %.2fx, sessions %.2fx, A/A %.2fx" % (c, v["off"]["ns"][c], q["blocks"][c]["median"], q["sessions"][c]["median"], q["off_control"][c]["median"]))
        made=lambda n: sum(sum(k.values()) for k in v[n]["events"].values())
        print("  log events made (blocks, sessions): %d, %d; lost %d" % (made("blocks"), made("sessions"), r["log_lost"]))
    if r["kind"]=="log_volume":
        for v in r["variants"]:
            a=v["active"]
            print("  volume %-12s %8d records/min (%.2f a connection), IPFIX %9.0f B/s, syslog %10.0f B/s, lost %d" % (v["variant"], a["ipfix_records"], a["ipfix_records"]/v["connections"], a["ipfix_bytes"]/60, a["syslog_bytes"]/60, v["log_lost"]))' "$1" | tee -a "$LOG" >&2
}
if [[ -z $BENCH_ONLY || $BENCH_ONLY == log ]]; then
	say "NAT event logging: per-packet cost (off, on, sessions, A/A control) and volume"
	logbench "$RAW"
fi

# the stateless gateways and nftables' rules stay up for the whole run (conntrack is
# flushed where a case needs fresh state); natrix is started by each round
for g in $GATEWAYS; do isnatrix "$g" || gateway_up "$g"; done
for ROUND in $(seq 1 "$ROUNDS"); do
	# rotate the order each round, so that no gateway always runs first (or last)
	read -ra gws <<<"$GATEWAYS"
	k=$(((ROUND - 1) % ${#gws[@]}))
	order=("${gws[@]:k}" "${gws[@]:0:k}")
	say "round $ROUND/$ROUNDS: ${order[*]}"
	round "${order[@]}"
done
for g in $GATEWAYS; do gateway_down "$g"; done

# capbench: `natrix capture` under load (bench/src/capture.rs), end to end through natrix
# with the capture beside the daemon on the other CPU; CAP_ROUNDS rounds, each measuring
# every variant side by side
capbench() {
	local r
	natrix_up natrix 0
	for r in $(seq 1 "$CAP_ROUNDS"); do
		say "capture, round $r/$CAP_ROUNDS: fast path by filter, rate by frame size, loss by burst length"
		# shellcheck disable=SC2086 # the arguments are words
		if ! in_ns $GEN taskset -c $CPU "$NATRIX_BENCH" capture --dev gnatrix --dst-mac "$(mac "$(gwns natrix)" nxbin)" \
			--sink-pin "$PIN/sink-natrix" --park-dev nxbpark --natrix-pin "$PIN/natrix" --natrix "$NATRIX" \
			--netns "$(gwns natrix)" --capture-cpu $DAEMON_CPU --round "$r" --out "$RAW" $CAP_ARGS \
			2>>"$LOG" | tee -a "$LOG" >&2; then
			echo "bench: capture round $r failed (see $LOG)" >&2
			return 1
		fi
	done
	natrix_down natrix
}
if [[ -z $BENCH_ONLY || $BENCH_ONLY == capture ]] && ((CAP_ROUNDS > 0)); then
	capbench
fi

say "report"
# a partial run (smoke, one part, or with a reference build) leaves the docs alone
# (BENCH_ONLY=capture rewrites the capture's own section and plot, nothing else)
PARTIAL=0
((SMOKE)) || [[ -n $BENCH_ONLY || -n $NATRIX_REF ]] && PARTIAL=1
CAPDOCS=0
! ((SMOKE)) && [[ $BENCH_ONLY == capture ]] && CAPDOCS=1
"$NATRIX_BENCH" report --raw "$RAW" --out "$OUT/results.json" --md "$OUT/results.md" $( ((PARTIAL)) || echo --docs docs/PERFORMANCE.md) \
	$( ((CAPDOCS)) && echo --capture-docs docs/PERFORMANCE.md) | tee -a "$LOG"
[[ -z $BENCH_ONLY || $BENCH_ONLY == capture ]] && $PY scripts/plot.py "$OUT/results.json" "$OUT"
if ! ((PARTIAL)); then
	mkdir -p docs/img
	cp "$OUT"/*.png docs/img/
elif ((CAPDOCS)); then
	mkdir -p docs/img
	cp "$OUT"/capture.png docs/img/
fi
say "done: $OUT"
