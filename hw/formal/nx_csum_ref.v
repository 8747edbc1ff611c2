// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The reference side of the proofs: bpf/nx_csum.h transcribed statement by statement into
// plain Verilog, independently of hw/rtl/nx_csum_pkg.sv. Every C variable is a 32-bit
// value (__u32) or a 16-bit one (__u16), every operation done at the C's width: 32-bit
// additions that wrap, (__u16) casts as truncations, (__u32) casts as zero extensions,
// ~ on the operand's own width. No narrowing beyond what the C does.

// static __u16 nx_csum_fold(__u32 c)
module ref_fold (input wire [31:0] c_in, output wire [15:0] ret);
	wire [31:0] c1 = (c_in & 32'h0000ffff) + (c_in >> 16); // c = (c & 0xffff) + (c >> 16);
	wire [31:0] c2 = (c1 & 32'h0000ffff) + (c1 >> 16);     // c = (c & 0xffff) + (c >> 16);
	wire [31:0] nc = ~c2;                                  // return (__u16)~c;
	assign ret = nc[15:0];
endmodule

// static __u32 nx_csum_diff4(__u32 from, __u32 to)
module ref_diff4 (input wire [31:0] from_in, input wire [31:0] to, output wire [31:0] ret);
	wire [31:0] from = ~from_in;                           // from = ~from;
	assign ret = (from & 32'h0000ffff) + (from >> 16) + (to & 32'h0000ffff) + (to >> 16);
endmodule

// static __u32 nx_csum_diff2(__u16 from, __u16 to): (__u32)(__u16)~from + to
module ref_diff2 (input wire [15:0] from, input wire [15:0] to, output wire [31:0] ret);
	wire [15:0] nf = ~from;                                // (__u16)~from (int promotion, then truncated)
	assign ret = {16'h0000, nf} + {16'h0000, to};          // (__u32)... + (__u32)to
endmodule

// static void nx_csum_apply(__u16 *sum, __u32 diff): *sum = nx_csum_fold((__u32)(__u16)~*sum + diff)
module ref_apply (input wire [15:0] sum, input wire [31:0] diff, output wire [15:0] sum_out);
	wire [15:0] ns = ~sum;
	wire [31:0] t = {16'h0000, ns} + diff;
	ref_fold f (.c_in(t), .ret(sum_out));
endmodule

// static void nx_udp_csum_apply(__u16 *sum, __u32 diff)
module ref_udp_apply (input wire [15:0] sum, input wire [31:0] diff, output wire [15:0] sum_out);
	wire [15:0] a;
	ref_apply ap (.sum(sum), .diff(diff), .sum_out(a));
	// if (*sum == 0) return; nx_csum_apply(sum, diff); if (*sum == 0) *sum = 0xffff;
	assign sum_out = (sum == 16'h0000) ? 16'h0000 : (a == 16'h0000) ? 16'hffff : a;
endmodule

// The checksum part of nx_rewrite (bpf/nx_nat.h), the same ports as nx_csum_unit:
//   d_ip = nx_csum_diff4(old_ip, new_ip); nx_csum_apply(&ip->check, d_ip);
//   TCP: nx_csum_apply(l4_csum, d_ip + nx_csum_diff2(old_port, new_port));
//   UDP: nx_udp_csum_apply(l4_csum, d_ip + nx_csum_diff2(old_port, new_port));
//   default: nx_csum_apply(l4_csum, nx_csum_diff2(old_port, new_port));
module ref_rewrite (
	input  wire        clk,
	input  wire [1:0]  l4_kind_i, // 0 TCP, 1 UDP, else other (ICMP)
	input  wire [15:0] ip_check_i,
	input  wire [15:0] l4_check_i,
	input  wire [31:0] old_addr_i,
	input  wire [31:0] new_addr_i,
	input  wire [15:0] old_port_i,
	input  wire [15:0] new_port_i,
	output wire [15:0] ip_check_o,
	output wire [15:0] l4_check_o
);
	wire [31:0] d_ip, d_port;
	wire [15:0] tcp, udp, other;
	ref_diff4 di (.from_in(old_addr_i), .to(new_addr_i), .ret(d_ip));
	ref_diff2 dp (.from(old_port_i), .to(new_port_i), .ret(d_port));
	ref_apply ai (.sum(ip_check_i), .diff(d_ip), .sum_out(ip_check_o));
	ref_apply at (.sum(l4_check_i), .diff(d_ip + d_port), .sum_out(tcp));
	ref_udp_apply au (.sum(l4_check_i), .diff(d_ip + d_port), .sum_out(udp));
	ref_apply ao (.sum(l4_check_i), .diff(d_port), .sum_out(other));
	assign l4_check_o = l4_kind_i == 2'd0 ? tcp : l4_kind_i == 2'd1 ? udp : other;
endmodule
