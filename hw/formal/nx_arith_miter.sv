// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The core's carry-select adder (nx_core_pkg::nx_add32, written for timing) and the bucket
// hash built on it, beside the plain 32-bit sums they stand for, on the same free inputs:
// each eq_* output is 1 exactly when the two agree. core_arith.ys proves each is 1 for
// all inputs.

module nx_arith_miter (
	input  logic [31:0] a,
	input  logic [31:0] b,
	input  logic [31:0] addr,
	input  logic [15:0] port,
	input  logic [1:0]  proto,
	input  logic [31:0] seed,
	output logic        eq_add32,
	output logic        eq_hash
);
	// the hash as docs/HARDWARE.md gives it, with the plain additions
	function automatic logic [31:0] plain_hash(input logic [31:0] ad, input logic [15:0] p,
						   input logic [1:0] pr, input logic [31:0] s);
		logic [31:0] x, y, h;
		x = ad ^ s;
		y = {p, 8'h4e, 6'd0, pr};
		h = x + {y[20:0], y[31:21]};
		h = h ^ {15'd0, h[31:15]};
		h = h + {h[26:0], h[31:27]};
		plain_hash = h ^ {13'd0, h[31:13]};
	endfunction

	assign eq_add32 = nx_core_pkg::nx_add32(a, b) == a + b;
	assign eq_hash = nx_core_pkg::nx_hash(addr, port, proto, seed) == plain_hash(addr, port, proto, seed);
endmodule
