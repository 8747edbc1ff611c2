#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# make demo: two subscribers reach a server through natrix; then the sessions and counters.
set -euo pipefail
cd "$(dirname "$0")/.."
NATRIX=$PWD/target/release/natrix
CONF=$PWD/examples/demo.toml
PIN=/sys/fs/bpf/natrix-demo
source scripts/netns-lib.sh
LOG=$(mktemp /tmp/natrix-demo.XXXXXX.log)
daemon=""

cleanup() {
	set +e
	[[ -n $daemon ]] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
	ip netns pids $SRV 2>/dev/null | xargs -r kill 2>/dev/null
	nsenter --net=/run/netns/$GW "$NATRIX" down --pin $PIN >/dev/null 2>&1
	nx_topology_down
	rm -f "$LOG"
}
trap cleanup EXIT
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "namespaces: 2 subscribers, gateway, server"
nx_topology_up
"$NATRIX" down --pin $PIN >/dev/null 2>&1 || true

say "natrix run --config examples/demo.toml"
nsenter --net=/run/netns/$GW "$NATRIX" run --config "$CONF" 2>"$LOG" &
daemon=$!
for _ in $(seq 50); do grep -q ready "$LOG" && break; sleep 0.1; done
grep -q ready "$LOG" || { cat "$LOG" >&2; echo "natrix did not become ready" >&2; exit 1; }
sed 's/^/  /' "$LOG"

say "server: HTTP on :8080, UDP echo on :5353"
ip netns exec $SRV python3 -m http.server 8080 --bind 198.51.100.2 >/dev/null 2>&1 &
ip netns exec $SRV python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("198.51.100.2", 5353))
while True:
    d, a = s.recvfrom(2048); s.sendto(b"echo from %s:%d: " % (a[0].encode(), a[1]) + d, a)
' &
sleep 0.5

for s in $SUB1 $SUB2; do
	say "$s: ping, HTTP GET, UDP"
	ip netns exec $s ping -c 2 -i 0.2 -W 2 198.51.100.2 | grep -E 'bytes from|packets'
	ip netns exec $s curl -s -o /dev/null -w '  HTTP %{http_code}, %{size_download} bytes from %{remote_ip}\n' http://198.51.100.2:8080/
	ip netns exec $s python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)
s.sendto(b"hello", ("198.51.100.2", 5353)); print("  UDP reply:", s.recv(2048).decode())'
done

say "natrix sessions"
nsenter --net=/run/netns/$GW "$NATRIX" sessions --pin $PIN
say "natrix stats"
nsenter --net=/run/netns/$GW "$NATRIX" stats --pin $PIN
say "done: cleaning up (natrix down, namespaces removed)"
