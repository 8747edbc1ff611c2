// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The Verilator testbench's top (tb_csum.cpp drives it): the package's functions on
// inputs of their own, and nx_csum_unit twice, combinational and registered, on the same
// rewrite inputs.

module tb_csum_top (
	input  logic        clk,
	input  logic [31:0] c,
	input  logic [31:0] from32,
	input  logic [31:0] to32,
	input  logic [15:0] from16,
	input  logic [15:0] to16,
	input  logic [15:0] sum,
	input  logic [31:0] diff,
	output logic [15:0] fold_o,
	output logic [31:0] diff4_o,
	output logic [31:0] diff2_o,
	output logic [15:0] apply_o,
	output logic [15:0] udp_apply_o,

	input  logic [1:0]  l4_kind,
	input  logic [15:0] ip_check,
	input  logic [15:0] l4_check,
	input  logic [31:0] old_addr,
	input  logic [31:0] new_addr,
	input  logic [15:0] old_port,
	input  logic [15:0] new_port,
	output logic [15:0] ip_check_o,
	output logic [15:0] l4_check_o,
	output logic [15:0] ip_check_r,
	output logic [15:0] l4_check_r
);
	assign fold_o = nx_csum_pkg::nx_csum_fold(c);
	assign diff4_o = nx_csum_pkg::nx_csum_diff4(from32, to32);
	assign diff2_o = nx_csum_pkg::nx_csum_diff2(from16, to16);
	assign apply_o = nx_csum_pkg::nx_csum_apply(sum, diff);
	assign udp_apply_o = nx_csum_pkg::nx_udp_csum_apply(sum, diff);

	nx_csum_unit #(.REGISTERED(0)) u_comb (
		.clk(clk), .l4_kind_i(l4_kind), .ip_check_i(ip_check), .l4_check_i(l4_check),
		.old_addr_i(old_addr), .new_addr_i(new_addr), .old_port_i(old_port),
		.new_port_i(new_port), .ip_check_o(ip_check_o), .l4_check_o(l4_check_o));
	nx_csum_unit #(.REGISTERED(1)) u_reg (
		.clk(clk), .l4_kind_i(l4_kind), .ip_check_i(ip_check), .l4_check_i(l4_check),
		.old_addr_i(old_addr), .new_addr_i(new_addr), .old_port_i(old_port),
		.new_port_i(new_port), .ip_check_o(ip_check_r), .l4_check_o(l4_check_r));
endmodule
