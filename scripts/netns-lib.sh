# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Shared by scripts/demo.sh and scripts/bench.sh: a gateway namespace with inside links to
# subscriber namespaces and an outside link to a server namespace. Sourced, not run.
#
#   sub1 (100.64.0.2) --- lan0 [100.64.0.1]            [198.51.100.1] wan0 --- server (198.51.100.2)
#   sub2 (100.64.1.2) --- lan1 [100.64.1.1]   gateway                          routes the pool via the gw
#
# Peers of the gateway's links turn GRO on: a veth takes XDP-redirected frames only then.

NX_TAG=${NX_TAG:-nx$$}
GW=$NX_TAG-gw SUB1=$NX_TAG-s1 SUB2=$NX_TAG-s2 SRV=$NX_TAG-srv
POOL4=203.0.113.16/29
POOL1=203.0.113.40

nx_topology_up() {
	for ns in $GW $SUB1 $SUB2 $SRV; do ip netns add "$ns"; ip -n "$ns" link set lo up; done
	ip link add lan0 netns $GW type veth peer name eth0 netns $SUB1
	ip link add lan1 netns $GW type veth peer name eth0 netns $SUB2
	ip link add wan0 netns $GW type veth peer name eth0 netns $SRV
	ip -n $GW addr add 100.64.0.1/24 dev lan0
	ip -n $GW addr add 100.64.1.1/24 dev lan1
	ip -n $GW addr add 198.51.100.1/24 dev wan0
	ip -n $SUB1 addr add 100.64.0.2/24 dev eth0
	ip -n $SUB2 addr add 100.64.1.2/24 dev eth0
	ip -n $SRV addr add 198.51.100.2/24 dev eth0
	for ns in $GW $SUB1 $SUB2 $SRV; do
		for l in $(ip -n "$ns" -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -v '^lo$'); do
			ip -n "$ns" link set "$l" up
		done
	done
	ip -n $SUB1 route add default via 100.64.0.1
	ip -n $SUB2 route add default via 100.64.1.1
	ip -n $GW route add default via 198.51.100.2
	ip -n $SRV route add $POOL4 via 198.51.100.1
	ip -n $SRV route add $POOL1 via 198.51.100.1
	# Hosts checksum in software and send MTU-sized frames, as on a wire: a local stack's
	# CHECKSUM_PARTIAL and GSO super-frames are invisible to XDP (see docs/ARCHITECTURE.md).
	for ns in $SUB1 $SUB2 $SRV; do ip netns exec "$ns" ethtool -K eth0 gro on tx off tso off gso off >/dev/null; done
}

nx_topology_down() {
	for ns in $GW $SUB1 $SUB2 $SRV; do ip netns del "$ns" 2>/dev/null || true; done
}
