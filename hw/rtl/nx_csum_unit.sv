// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// nx_csum_unit: the checksum half of the data plane's header rewrite (nx_rewrite in
// bpf/nx_nat.h) as one block, for synthesis numbers and for the tests: an address
// (32 bits) and a port or ICMP identifier (16 bits) replaced, the IPv4 header checksum and
// the L4 checksum updated.
//
//   ip_check_o = nx_csum_apply(ip_check_i, d_ip)                  d_ip = diff4(old, new addr)
//   l4_check_o = TCP:   nx_csum_apply    (l4_check_i, d_ip + diff2(old, new port))
//                UDP:   nx_udp_csum_apply(l4_check_i, d_ip + diff2(old, new port))
//                other: nx_csum_apply    (l4_check_i, diff2(old, new port))   (ICMP: no
//                       pseudo-header)
//
// Operands are network-order words as they sit in the header (see nx_csum_pkg.sv on why
// that gives the C's bytes). REGISTERED = 0: combinational; REGISTERED = 1: the outputs
// registered on clk's rising edge (one cycle of latency, no reset: the data path only;
// the caller's valid bit travels beside it).
//
// The package's functions are called by their qualified names: Yosys 0.23 (Debian 12)
// parses neither `import nx_csum_pkg::*;` in a module nor in a module's header.

module nx_csum_unit #(
	parameter int REGISTERED = 0
) (
	/* verilator lint_off UNUSEDSIGNAL */
	input  logic        clk, // REGISTERED = 1 only
	/* verilator lint_on UNUSEDSIGNAL */
	input  logic [1:0]  l4_kind_i,  // NX_CSUM_TCP, NX_CSUM_UDP, NX_CSUM_OTHER (ICMP)
	input  logic [15:0] ip_check_i,
	input  logic [15:0] l4_check_i,
	input  logic [31:0] old_addr_i,
	input  logic [31:0] new_addr_i,
	input  logic [15:0] old_port_i,
	input  logic [15:0] new_port_i,
	output logic [15:0] ip_check_o,
	output logic [15:0] l4_check_o
);
	localparam logic [1:0] NX_CSUM_TCP = 2'd0;
	localparam logic [1:0] NX_CSUM_UDP = 2'd1;

	logic [31:0] d_ip, d_port;
	logic [15:0] ip_c, l4_c;

	// continuous assignments, not always_comb: Icarus 11 warns about part selects in
	// always_* processes
	assign d_ip = nx_csum_pkg::nx_csum_diff4(old_addr_i, new_addr_i);
	assign d_port = nx_csum_pkg::nx_csum_diff2(old_port_i, new_port_i);
	assign ip_c = nx_csum_pkg::nx_csum_apply(ip_check_i, d_ip);
	assign l4_c = l4_kind_i == NX_CSUM_TCP ? nx_csum_pkg::nx_csum_apply(l4_check_i, d_ip + d_port)
		    : l4_kind_i == NX_CSUM_UDP ? nx_csum_pkg::nx_udp_csum_apply(l4_check_i, d_ip + d_port)
		    : nx_csum_pkg::nx_csum_apply(l4_check_i, d_port);

	generate
		if (REGISTERED != 0) begin : g_reg
			always_ff @(posedge clk) begin
				ip_check_o <= ip_c;
				l4_check_o <= l4_c;
			end
		end else begin : g_comb
			assign ip_check_o = ip_c;
			assign l4_check_o = l4_c;
		end
	endgenerate
endmodule
