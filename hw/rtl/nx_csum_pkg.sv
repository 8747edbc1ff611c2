// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// TEMPORARY minimal copy written on branch hw-core so that the NAT core compiles before
// the checksum helper's branch (hw-csum, which owns this file, its proof and its random
// tests) is merged; the merge takes theirs. The functions are bpf/nx_csum.h's, on
// network-order (big-endian) 16-bit words; the one's complement sum commutes with the
// byte swap, so the bytes written are the C code's (the vectors check it byte for byte).
// Yosys 0.23 reads no package import and no `return`: callers qualify the names.

package nx_csum_pkg;

	function automatic logic [15:0] nx_csum_fold(input logic [31:0] c);
		logic [31:0] t;
		t = {16'd0, c[15:0]} + {16'd0, c[31:16]};
		t = {16'd0, t[15:0]} + {16'd0, t[31:16]};
		nx_csum_fold = ~t[15:0];
	endfunction

	function automatic logic [31:0] nx_csum_diff4(input logic [31:0] from, input logic [31:0] to);
		logic [31:0] f;
		f = ~from;
		nx_csum_diff4 = {16'd0, f[15:0]} + {16'd0, f[31:16]} + {16'd0, to[15:0]} + {16'd0, to[31:16]};
	endfunction

	function automatic logic [31:0] nx_csum_diff2(input logic [15:0] from, input logic [15:0] to);
		nx_csum_diff2 = {16'd0, ~from} + {16'd0, to};
	endfunction

	function automatic logic [15:0] nx_csum_apply(input logic [15:0] sum, input logic [31:0] diff);
		nx_csum_apply = nx_csum_fold({16'd0, ~sum} + diff);
	endfunction

	function automatic logic [15:0] nx_udp_csum_apply(input logic [15:0] sum, input logic [31:0] diff);
		logic [15:0] r;
		r = nx_csum_fold({16'd0, ~sum} + diff);
		if (sum == 16'd0)
			nx_udp_csum_apply = 16'd0;
		else if (r == 16'd0)
			nx_udp_csum_apply = 16'hffff;
		else
			nx_udp_csum_apply = r;
	endfunction

endpackage
