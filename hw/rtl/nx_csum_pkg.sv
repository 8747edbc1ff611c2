// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// nx_csum_pkg: the data plane's incremental checksum update (bpf/nx_csum.h, RFC 1624
// eqn. 3: HC' = ~(~HC + ~m + m')) as synthesizable SystemVerilog functions, bit for bit the
// C functions of the same names for every input (hw/formal/ proves it with Yosys' SAT
// solver; hw/tb/csum/ runs millions of vectors against the compiled C).
//
//   nx_csum_fold(c)              ~((c folded twice end-around) as 16 bits)
//   nx_csum_diff4(from, to)      the unfolded difference of replacing a 32-bit field
//   nx_csum_diff2(from, to)      the same for a 16-bit field
//   nx_csum_apply(sum, diff)     fold((u16)~sum + diff): a checksum after the change(s)
//   nx_udp_csum_apply(sum, diff) the same for UDP: 0 ("no checksum") stays 0, a
//                                computed 0 becomes 0xffff (RFC 768)
//
// Several changed fields' differences may be added (32-bit wrap-around, as the C does) and
// applied with one nx_csum_apply: the data plane's rewrite does diff4(addr) + diff2(port).
//
// Byte order. The C code loads the fields from packet memory on a little-endian host: a
// 16-bit field whose wire bytes are b0 b1 is the value {b1, b0}, a 32-bit field b0 b1 b2 b3
// is {b3, b2, b1, b0}, whose 16-bit halves are {b1, b0} and {b3, b2}. Every operand is
// thus the byte swap of the network-order (big-endian) 16-bit word the RTL takes: here a
// 16-bit operand is {b0, b1}, a 32-bit operand {b0, b1, b2, b3} (halves {b0, b1} and
// {b2, b3}), the header's words as they arrive on the wire. The two computations give the
// same bytes on the wire because the one's complement sum commutes with the byte swap
// (RFC 1071, 2.(B)): swap(x) = 256 * x (mod 0xffff), since 2^16 = 1 (mod 0xffff), so the
// sums of the swapped words are 256 times the sums of the unswapped ones modulo 0xffff;
// an end-around fold keeps a value's residue modulo 0xffff and gives 0 only for a sum of
// all-zero words, which is the same words swapped or not; and ~ and the tests for zero
// commute with the swap. The C writes its result back with a 16-bit little-endian store,
// the RTL puts its result's high byte first: the same two bytes. hw/tb/csum/ checks it on
// random IPv4 headers, byte for byte against the C. The intermediate 32-bit differences
// are not the same numbers in the two orders; only folded results are compared.
//
// The functions are written for the hardware (the narrowest adders that hold the
// values); the reference they are proven equal to, hw/formal/nx_csum_ref.v, is the C
// transcribed with 32-bit arithmetic. Verilator 5, Icarus Verilog 11 (-g2012) and Yosys
// (0.23: no `return` in functions, hence the assignments to the function's name) read
// this file.

package nx_csum_pkg;

	// Two end-around folds, then the one's complement. After the first fold the value is at
	// most 0xffff + 0xffff = 0x1fffe, after the second at most 0xffff (a carry out of the
	// first fold leaves at most 0xfffe in the low half): 16 bits hold it. The second fold
	// adds the first's carry: both outcomes are computed beside each other (the halves'
	// sum, and the sum plus one: one adder, a 1 added below each half) and the carry
	// selects, so the fold is one adder's delay and a select, not two adders in a row.
	function automatic logic [15:0] nx_csum_fold(input logic [31:0] c);
		logic [16:0] s1;
		logic [15:0] s2;
		s1 = {1'b0, c[15:0]} + {1'b0, c[31:16]};
		s2 = s1[16] ? nx_sum1(c[15:0], c[31:16]) : s1[15:0];
		nx_csum_fold = ~s2;
	endfunction

	// a + b + 1 (mod 2^16) in one adder: a 1 added below each operand carries into bit 1
	// (the carry-select adders' second outcome: the fold's here, nx_core_pkg::nx_add32's)
	function automatic logic [15:0] nx_sum1(input logic [15:0] a, input logic [15:0] b);
		/* verilator lint_off UNUSEDSIGNAL */
		logic [16:0] s;    // bits 16..1: the sum plus one (bit 0 is 1 + 1's 0)
		/* verilator lint_on UNUSEDSIGNAL */
		s = {a, 1'b1} + {b, 1'b1};
		nx_sum1 = s[16:1];
	endfunction

	// ~from's halves plus to's halves: at most 4 * 0xffff, 18 bits.
	function automatic logic [31:0] nx_csum_diff4(input logic [31:0] from, input logic [31:0] to);
		logic [31:0] nf;
		logic [17:0] s;
		nf = ~from;
		s = {2'd0, nf[15:0]} + {2'd0, nf[31:16]} + {2'd0, to[15:0]} + {2'd0, to[31:16]};
		nx_csum_diff4 = {14'd0, s};
	endfunction

	// ~from plus to: at most 2 * 0xffff, 17 bits.
	function automatic logic [31:0] nx_csum_diff2(input logic [15:0] from, input logic [15:0] to);
		logic [16:0] s;
		s = {1'b0, ~from} + {1'b0, to};
		nx_csum_diff2 = {15'd0, s};
	endfunction

	// diff is any 32-bit value (the sum of several differences): the addition wraps at 32
	// bits exactly as the C's __u32 addition does.
	function automatic logic [15:0] nx_csum_apply(input logic [15:0] sum, input logic [31:0] diff);
		logic [31:0] t;
		t = {16'd0, ~sum} + diff;
		nx_csum_apply = nx_csum_fold(t);
	endfunction

	function automatic logic [15:0] nx_udp_csum_apply(input logic [15:0] sum,
							  input logic [31:0] diff);
		logic [15:0] r;
		r = nx_csum_apply(sum, diff);
		if (sum == 16'd0)
			nx_udp_csum_apply = 16'd0;
		else if (r == 16'd0)
			nx_udp_csum_apply = 16'hffff;
		else
			nx_udp_csum_apply = r;
	endfunction

endpackage
