// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// RFC 1624's claim, proven of the package's functions with every input bit free (SAT,
// csum_rfc1624.ys): the incremental update of a correct checksum is the correct checksum
// of the rewritten header. Headers are 10 network-order 16-bit words (20 bytes), word 5
// the checksum (where IPv4 has it), word 9 the replaced 16-bit field.
//
// "Correct" is defined from RFC 1071 alone, independently of the package: the one's
// complement of the one's complement sum of the other nine words, each added with an
// end-around carry (oc_add).
//
// The 32-bit + 16-bit update nx_rewrite makes (apply(check, diff4 + diff2)) is proven in
// two parts, because MiniSat (Yosys' sat) does not finish the direct 10-word statement in
// minutes: the update is exactly three 16-bit updates in a row (split_*), and each 16-bit
// update is correct (field16_*), on any header, whatever the other words. The outputs:
//
//   field16_exact  a correct checksum, one word replaced: nx_csum_apply gives the
//                  recomputed checksum; if every word but the checksum is now 0, the true
//                  sum is +0 (checksum 0xffff) and the update gives the other zero, -0
//                  (checksum 0x0000): RFC 1624 section 3's case, which no IPv4, TCP or UDP
//                  header meets (IPv4's version nibble is 4; TCP and UDP checksums cover
//                  the pseudo-header's protocol)
//   field16_equiv  the same from a checksum that is correct or the other zero (0x0000 for
//                  0xffff or back): the result is the recomputed checksum or, when that is
//                  0x0000 or 0xffff, possibly the other one: equal modulo 0xffff
//   field16_udp    nx_udp_csum_apply: without a checksum (0) the field stays 0; with one (a
//                  computed 0 sent as 0xffff, RFC 768) it gets the recomputed checksum, 0
//                  sent as 0xffff, or 0xffff for the all-zero header
//   field16_minus0 the exception's continuation: from an all-zero header holding 0x0000
//                  (-0), replacing a word by b gives the recomputed checksum ~b, or 0x0000
//                  again if b is 0
//   oc_comm,       one's complement addition (oc_add) is commutative and associative: which
//   oc_assoc       word is replaced, and in which order the words are summed, does not
//                  matter
//   split_diff4    diff4(A, B) = diff2(A[31:16], B[31:16]) + diff2(A[15:0], B[15:0]) as
//                  32-bit numbers: a 32-bit field is two 16-bit words
//   split_apply2   apply(h, x + y) = apply(apply(h, x), y), x and y 16-bit differences
//   split_apply42  the same, x a 32-bit difference (diff4), y a 16-bit one: together with
//                  split_diff4, apply(h, diff4 + diff2) is three 16-bit updates in a row
//
// Chained: the 32+16 update is three 16-bit updates (split_*), each keeping "the checksum
// is the recomputed one, or the header is all zero and the checksum 0x0000"
// (field16_exact from the first, field16_minus0 from the second; which word is replaced
// does not matter, the sum being commutative and associative: oc_comm, oc_assoc). So the
// 32+16 update of a correct checksum is the recomputed checksum, unless the rewritten
// header is all zero (then 0x0000). hw/tb/csum/ also checks the 32+16 update directly on
// a million random headers.

module nx_csum_rfc1624 (
	input  logic [159:0] hdr,      // the old header, word i in [159 - 16 i -: 16]
	input  logic [15:0]  new16,    // the new value of word 9
	input  logic         alt,      // field16_equiv: start from the other zero
	input  logic         has_csum, // field16_udp: the sender sent a checksum
	input  logic [15:0]  h,        // split_*: any checksum
	input  logic [31:0]  a32,
	input  logic [31:0]  b32,
	input  logic [15:0]  a,
	input  logic [15:0]  b,
	input  logic [15:0]  c,
	input  logic [15:0]  d,
	output logic         field16_exact,
	output logic         field16_equiv,
	output logic         field16_udp,
	output logic         field16_minus0,
	output logic         oc_comm,
	output logic         oc_assoc,
	output logic         split_diff4,
	output logic         split_apply2,
	output logic         split_apply42
);
	function automatic logic [15:0] w(input logic [159:0] hd, input int i);
		w = hd[159 - 16 * i -: 16];
	endfunction

	// RFC 1071: 16-bit one's complement addition, the carry added back in
	function automatic logic [15:0] oc_add(input logic [15:0] x, input logic [15:0] y);
		logic [16:0] s;
		s = {1'b0, x} + {1'b0, y};
		oc_add = s[15:0] + {15'd0, s[16]};
	endfunction

	// The checksum of hd, word 5 left out. Word 9, the replaced one, is added last (the sum
	// does not depend on the order, RFC 1071 2.(A)): the solver then shares the sum of the
	// kept words between the old and the new header.
	function automatic logic [15:0] csum(input logic [159:0] hd);
		logic [15:0] s;
		s = 16'd0;
		for (int i = 0; i < 9; i++)
			if (i != 5)
				s = oc_add(s, w(hd, i));
		s = oc_add(s, w(hd, 9));
		csum = ~s;
	endfunction

	function automatic logic same_mod(input logic [15:0] x, input logic [15:0] y);
		same_mod = x == y || (x == 16'h0000 && y == 16'hffff) || (x == 16'hffff && y == 16'h0000);
	endfunction

	logic [159:0] old_h, new_h;
	logic [15:0] ck, ck_alt, full, inc, inc_alt, udp_ck, udp_inc, udp_want;
	logic new_zero;

	// the old header with its correct checksum in word 5; word 9 replaced
	assign ck = csum(hdr);
	assign old_h = {hdr[159:80], ck, hdr[63:0]};
	assign new_h = {old_h[159:16], new16};
	assign full = csum(new_h);
	assign new_zero = {new_h[159:80], new_h[63:0]} == 144'd0;

	assign inc = nx_csum_pkg::nx_csum_apply(ck, nx_csum_pkg::nx_csum_diff2(old_h[15:0], new16));
	assign field16_exact = new_zero ? inc == 16'h0000 : inc == full;

	assign ck_alt = !alt ? ck : ck == 16'h0000 ? 16'hffff : ck == 16'hffff ? 16'h0000 : ck;
	assign inc_alt = nx_csum_pkg::nx_csum_apply(ck_alt, nx_csum_pkg::nx_csum_diff2(old_h[15:0], new16));
	assign field16_equiv = same_mod(inc_alt, full);

	assign udp_ck = !has_csum ? 16'h0000 : ck == 16'h0000 ? 16'hffff : ck;
	assign udp_inc = nx_csum_pkg::nx_udp_csum_apply(udp_ck, nx_csum_pkg::nx_csum_diff2(old_h[15:0], new16));
	assign udp_want = !has_csum ? 16'h0000 : new_zero || full == 16'h0000 ? 16'hffff : full;
	assign field16_udp = udp_inc == udp_want;

	assign field16_minus0 = nx_csum_pkg::nx_csum_apply(16'h0000, nx_csum_pkg::nx_csum_diff2(16'h0000, b))
		== (b == 16'h0000 ? 16'h0000 : ~b);

	assign oc_comm = oc_add(a, b) == oc_add(b, a);
	assign oc_assoc = oc_add(oc_add(a, b), c) == oc_add(a, oc_add(b, c));

	assign split_diff4 = nx_csum_pkg::nx_csum_diff4(a32, b32)
		== nx_csum_pkg::nx_csum_diff2(a32[31:16], b32[31:16]) + nx_csum_pkg::nx_csum_diff2(a32[15:0], b32[15:0]);
	assign split_apply2 = nx_csum_pkg::nx_csum_apply(h, nx_csum_pkg::nx_csum_diff2(a, b) + nx_csum_pkg::nx_csum_diff2(c, d))
		== nx_csum_pkg::nx_csum_apply(nx_csum_pkg::nx_csum_apply(h, nx_csum_pkg::nx_csum_diff2(a, b)),
					      nx_csum_pkg::nx_csum_diff2(c, d));
	assign split_apply42 = nx_csum_pkg::nx_csum_apply(h, nx_csum_pkg::nx_csum_diff4(a32, b32) + nx_csum_pkg::nx_csum_diff2(c, d))
		== nx_csum_pkg::nx_csum_apply(nx_csum_pkg::nx_csum_apply(h, nx_csum_pkg::nx_csum_diff4(a32, b32)),
					      nx_csum_pkg::nx_csum_diff2(c, d));
endmodule
