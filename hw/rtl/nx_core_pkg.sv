// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// nx_core_pkg: constants of the NAT core shared by its modules and by the control plane
// (docs/HARDWARE.md documents them as the daemon drives them): the CPU port's reason codes,
// the protocol encoding of a table entry, the entry's bit layout and the bucket hash.

package nx_core_pkg;

	// Reason codes (tuser[4:0] of the CPU port; index of the per-direction counters). 0 is
	// "translated by the core" and never appears on the CPU port.
	localparam logic [4:0] R_XLATE = 5'd0;
	localparam logic [4:0] R_DISABLED = 5'd1;    // CTRL.enable is 0
	localparam logic [4:0] R_NOT_FOR_US = 5'd2;  // destination MAC is not the port's MAC
	localparam logic [4:0] R_NOT_IPV4 = 5'd3;    // EtherType not 0x0800 (ARP, IPv6, VLAN)
	localparam logic [4:0] R_BAD_IP = 5'd4;      // truncated, version, IHL, length, checksum
	localparam logic [4:0] R_HAIRPIN = 5'd5;     // outbound to a pool address
	localparam logic [4:0] R_NOT_POOL = 5'd6;    // inbound to an address outside the pool
	localparam logic [4:0] R_NO_ROUTE = 5'd7;    // no next-hop entry, or one on the wrong side
	localparam logic [4:0] R_ROUTE_CPU = 5'd8;   // a next-hop entry marked "to the CPU"
	localparam logic [4:0] R_TTL = 5'd9;         // TTL <= 1
	localparam logic [4:0] R_FRAGMENT = 5'd10;   // MF set or fragment offset non-zero
	localparam logic [4:0] R_PROTO = 5'd11;      // not TCP, UDP or ICMP
	localparam logic [4:0] R_BAD_L4 = 5'd12;     // transport header truncated or inconsistent
	localparam logic [4:0] R_ICMP = 5'd13;       // ICMP other than echo request/reply
	localparam logic [4:0] R_TCP_CTRL = 5'd14;   // TCP SYN, FIN or RST
	localparam logic [4:0] R_MISS = 5'd15;       // no table entry
	localparam logic [4:0] R_MTU = 5'd16;        // IP total length above the egress MTU

	// Protocol as a table entry encodes it (2 bits).
	localparam logic [1:0] P_TCP = 2'd1;
	localparam logic [1:0] P_UDP = 2'd2;
	localparam logic [1:0] P_ICMP = 2'd3;

	// A table entry (one way of a bucket), EW bits:
	//   [0] valid  [1] remote-bound  [3:2] proto  [35:4] key address  [51:36] key port
	//   [83:52] remote address  [99:84] remote port  [131:100] new address  [147:132] new port
	// Outbound table: key = inside endpoint, remote = destination, new = outside endpoint.
	// Inbound table:  key = outside endpoint, remote = source, new = inside endpoint.
	// For ICMP echo the port is the identifier and the remote port is 0.
	localparam int EW = 148;

	// a + b (mod 2^32) as a carry select: the low halves' sum, and the high halves' sum with
	// and without a carry in computed beside it (nx_csum_pkg::nx_sum1: one adder), the low
	// half's carry out selecting. Two 16-bit adders' delay and a select instead of one
	// 32-bit adder's.
	function automatic logic [31:0] nx_add32(input logic [31:0] a, input logic [31:0] b);
		logic [16:0] lo;
		lo = {1'b0, a[15:0]} + {1'b0, b[15:0]};
		nx_add32 = {lo[16] ? nx_csum_pkg::nx_sum1(a[31:16], b[31:16]) : a[31:16] + b[31:16], lo[15:0]};
	endfunction

	// The bucket hash of (key address, key port, proto) under the seed; the bucket is its
	// low bits. docs/HARDWARE.md gives it in Python for the daemon.
	// In three steps, one per pipeline stage: nx_hash = nx_hash_c(nx_hash_b(nx_hash_a(...))).
	function automatic logic [31:0] nx_hash_a(input logic [31:0] addr, input logic [15:0] port,
						   input logic [1:0] proto, input logic [31:0] seed);
		logic [31:0] a, b;
		a = addr ^ seed;
		b = {port, 8'h4e, 6'd0, proto};
		nx_hash_a = nx_add32(a, {b[20:0], b[31:21]});
	endfunction

	function automatic logic [31:0] nx_hash_b(input logic [31:0] h1);
		logic [31:0] h;
		h = h1 ^ {15'd0, h1[31:15]};
		nx_hash_b = nx_add32(h, {h[26:0], h[31:27]});
	endfunction

	function automatic logic [31:0] nx_hash_c(input logic [31:0] h2);
		nx_hash_c = h2 ^ {13'd0, h2[31:13]};
	endfunction

	function automatic logic [31:0] nx_hash(input logic [31:0] addr, input logic [15:0] port,
						 input logic [1:0] proto, input logic [31:0] seed);
		nx_hash = nx_hash_c(nx_hash_b(nx_hash_a(addr, port, proto, seed)));
	endfunction

endpackage
