// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The package's functions (hw/rtl/nx_csum_pkg.sv) beside their C transcriptions
// (nx_csum_ref.v), on the same free inputs: each eq_* output is 1 exactly when the two
// agree. csum_equiv.ys proves each is 1 for all inputs (SAT, no bound: the circuits are
// combinational, every input bit free).

module nx_csum_fn_miter (
	input  logic [31:0] c,
	input  logic [31:0] from32,
	input  logic [31:0] to32,
	input  logic [15:0] from16,
	input  logic [15:0] to16,
	input  logic [15:0] sum,
	input  logic [31:0] diff,
	output logic        eq_fold,
	output logic        eq_diff4,
	output logic        eq_diff2,
	output logic        eq_apply,
	output logic        eq_udp_apply,
	output logic        eq_replace4_2,
	output logic        eq_udp_replace4_2
);
	logic [15:0] r_fold, r_apply, r_udp, r_rep, r_urep;
	logic [31:0] r_d4, r_d2, r_d4b, r_d2b;

	ref_fold rf (.c_in(c), .ret(r_fold));
	ref_diff4 rd4 (.from_in(from32), .to(to32), .ret(r_d4));
	ref_diff2 rd2 (.from(from16), .to(to16), .ret(r_d2));
	ref_apply ra (.sum(sum), .diff(diff), .sum_out(r_apply));
	ref_udp_apply ru (.sum(sum), .diff(diff), .sum_out(r_udp));
	// a 32-bit field and a 16-bit field replaced in one update, as nx_rewrite does for TCP
	// and UDP: apply(sum, diff4 + diff2), the reference's diffs from its own modules
	ref_diff4 rd4b (.from_in(from32), .to(to32), .ret(r_d4b));
	ref_diff2 rd2b (.from(from16), .to(to16), .ret(r_d2b));
	ref_apply rar (.sum(sum), .diff(r_d4b + r_d2b), .sum_out(r_rep));
	ref_udp_apply rur (.sum(sum), .diff(r_d4b + r_d2b), .sum_out(r_urep));

	assign eq_fold = nx_csum_pkg::nx_csum_fold(c) == r_fold;
	assign eq_diff4 = nx_csum_pkg::nx_csum_diff4(from32, to32) == r_d4;
	assign eq_diff2 = nx_csum_pkg::nx_csum_diff2(from16, to16) == r_d2;
	assign eq_apply = nx_csum_pkg::nx_csum_apply(sum, diff) == r_apply;
	assign eq_udp_apply = nx_csum_pkg::nx_udp_csum_apply(sum, diff) == r_udp;
	assign eq_replace4_2 = nx_csum_pkg::nx_csum_apply(sum, nx_csum_pkg::nx_csum_diff4(from32, to32)
				+ nx_csum_pkg::nx_csum_diff2(from16, to16)) == r_rep;
	assign eq_udp_replace4_2 = nx_csum_pkg::nx_udp_csum_apply(sum,
				nx_csum_pkg::nx_csum_diff4(from32, to32)
				+ nx_csum_pkg::nx_csum_diff2(from16, to16)) == r_urep;
endmodule
