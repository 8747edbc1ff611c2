// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// nx_dir: one direction of the NAT core (DIR 0: inside -> outside, DIR 1: outside ->
// inside). Store and forward:
//
//   ingress   every beat goes into the data FIFO; the first 96 bytes are captured; at tlast
//             the header and the frame's length enter the lookup pipeline (one packet per
//             cycle, so back-to-back frames of any length never wait for it)
//   SA        the transport header selected by IHL; the IPv4 header checksum's words in
//             eight partial sums; the first half of the bucket hash
//   S1        parse and validate Ethernet, IPv4 (lengths, fragments, TTL), TCP/UDP/ICMP;
//             the key, the bucket hash
//   S2        the bucket's WAYS entries, read in one access, compared; the outbound next
//             hop; the header checksum folded and checked
//   S3        the inbound next hop; the reason; the checksums' sums
//   S4, S5    the folds (bpf/nx_csum.h's sequence, nx_rewrite then nx_redirect); the
//             packet's metadata into the meta FIFO
//   egress    the data FIFO's beats with the metadata: the translated frame (MACs, TTL,
//             address, port or identifier, both checksums patched in flight) to m_axis, or
//             the frame unchanged to the CPU stream with its reason
//
// Nothing is dropped: a frame the core does not translate goes to the CPU stream. s_tready
// falls only when the data FIFO is full or META packets wait for their metadata to leave.
// The data FIFO must hold the longest frame (2^DLOG2 beats of 8 bytes).

module nx_dir #(
	parameter int DIR = 0,
	parameter int BLOG2 = 8,   // log2 of the number of buckets
	parameter int WAYS = 4,
	parameter int NH = 16,      // next-hop entries
	parameter int DLOG2 = 11,   // data FIFO: 2048 beats (16 KiB)
	parameter int MLOG2 = 4     // meta FIFO: 16 packets
) (
	input  logic        clk,
	input  logic        rst,

	input  logic [63:0] s_tdata,
	input  logic [7:0]  s_tkeep,
	input  logic        s_tvalid,
	input  logic        s_tlast,
	output logic        s_tready,

	output logic [63:0] m_tdata,
	output logic [7:0]  m_tkeep,
	output logic        m_tvalid,
	output logic        m_tlast,
	input  logic        m_tready,

	output logic [63:0] c_tdata,
	output logic [7:0]  c_tkeep,
	output logic        c_tvalid,
	output logic        c_tlast,
	output logic [4:0]  c_reason,
	input  logic        c_tready,

	input  logic        enable,
	input  logic [47:0] my_mac,
	input  logic [31:0] pool_base,
	input  logic [31:0] pool_mask,
	input  logic [15:0] mtu,
	input  logic [31:0] seed,

	input  logic                   tw_en,
	input  logic [3:0]             tw_way,
	input  logic [BLOG2-1:0]       tw_bucket,
	input  logic [nx_core_pkg::EW-1:0] tw_data,
	input  logic                   tr_en,      // read a bucket back (the control plane's port)
	input  logic [BLOG2-1:0]       tr_bucket,
	output logic [WAYS*nx_core_pkg::EW-1:0] tr_data,

	input  logic [NH-1:0]    nh_valid,
	input  logic [NH*32-1:0] nh_addr,
	input  logic [NH*32-1:0] nh_mask,
	input  logic [NH*48-1:0] nh_dmac,
	input  logic [NH*48-1:0] nh_smac,
	input  logic [NH-1:0]    nh_inside,  // egress on the inside
	input  logic [NH-1:0]    nh_punt,    // to the CPU

	input  logic        act_snap,
	input  logic [15:0] act_idx,    // 32-bit word of activity bits
	output logic [31:0] act_word,

	output logic        ev_valid,
	output logic [4:0]  ev_reason
);
	localparam int EW = nx_core_pkg::EW;
	localparam int BUCKETS = 1 << BLOG2;
	localparam int ENTRIES = BUCKETS * WAYS;
	localparam int DDEPTH = 1 << DLOG2;
	localparam int MDEPTH = 1 << MLOG2;
	localparam int AOFF = DIR == 0 ? 26 : 30; // the rewritten address: source out, destination in
	localparam int HB = 96;                   // header bytes captured

	// ---------------- ingress ----------------
	logic [HB*8-1:0] hcap, hnext;
	logic [12:0] bidx;
	logic [3:0] nbytes;
	logic in_fire;
	logic [DLOG2:0] dlevel;
	logic [MLOG2+1:0] inflight;
	logic meta_pop;

	logic p0_valid;
	logic [HB*8-1:0] p0_hdr;
	logic [15:0] p0_len;

	assign s_tready = (dlevel < DDEPTH[DLOG2:0]) && (inflight < MDEPTH[MLOG2+1:0]);
	assign in_fire = s_tvalid && s_tready;

	always_comb begin
		nbytes = 4'd0;
		for (int i = 0; i < 8; i++)
			nbytes = nbytes + {3'd0, s_tkeep[i]};
		hnext = (bidx == 13'd0) ? '0 : hcap;
		for (int i = 0; i < HB / 8; i++)
			if (bidx == 13'(i))
				hnext[64*i +: 64] = s_tdata;
	end

	always_ff @(posedge clk) begin
		if (rst) begin
			bidx <= '0;
			p0_valid <= 1'b0;
			inflight <= '0;
		end else begin
			p0_valid <= in_fire && s_tlast;
			if (in_fire) begin
				hcap <= hnext;
				if (s_tlast)
					bidx <= '0;
				else if (bidx != 13'h1fff)
					bidx <= bidx + 1'b1;
			end
			inflight <= inflight + (MLOG2+2)'(in_fire && s_tlast) - (MLOG2+2)'(meta_pop);
		end
		if (in_fire && s_tlast) begin
			p0_hdr <= hnext;
			p0_len <= {bidx, 3'd0} + {12'd0, nbytes};
		end
	end

	// data FIFO: {tlast, tkeep, tdata}
	logic d_valid, d_pop;
	logic [72:0] d_out;
	nx_fifo #(.W(73), .LOG2(DLOG2)) u_data (
		.clk, .rst, .push(in_fire), .din({s_tlast, s_tkeep, s_tdata}),
		.pop(d_pop), .valid(d_valid), .dout(d_out), .level(dlevel)
	);

	// ---------------- SA: the transport header's position, partial sums ----------------
	// (the first half of parsing: the IHL-dependent selection of the transport header, the
	// header checksum's words in eight groups, the hash's first half)
	function automatic logic [7:0] hb(input logic [HB*8-1:0] h, input int k);
		hb = h[8*k +: 8];
	endfunction

	logic [3:0] z_ihl;
	logic [159:0] z_l4;
	logic [18:0] z_psum [0:7];
	logic [15:0] z_kport;
	logic [1:0] z_penc;
	always_comb begin
		z_ihl = p0_hdr[8 * 14 +: 4];
		z_l4 = '0;
		for (int i = 5; i < 16; i++)
			if (z_ihl == 4'(i))
				z_l4 = p0_hdr[8 * (14 + 4 * i) +: 160];
		for (int g = 0; g < 8; g++) begin
			z_psum[g] = 19'd0;
			for (int k = 0; k < 4; k++)
				if (4 * g + k < 30 && {1'b0, z_ihl, 1'b0} > 6'(4 * g + k))
					z_psum[g] = z_psum[g] + {3'd0, hb(p0_hdr, 14 + 2 * (4 * g + k)),
								 hb(p0_hdr, 15 + 2 * (4 * g + k))};
		end
		case (hb(p0_hdr, 23))
		8'd6: z_penc = nx_core_pkg::P_TCP;
		8'd17: z_penc = nx_core_pkg::P_UDP;
		8'd1: z_penc = nx_core_pkg::P_ICMP;
		default: z_penc = 2'd0;
		endcase
		z_kport = z_penc == nx_core_pkg::P_ICMP ? {z_l4[39:32], z_l4[47:40]} :
			  (DIR == 0 ? {z_l4[7:0], z_l4[15:8]} : {z_l4[23:16], z_l4[31:24]});
	end

	logic a_valid;
	logic [HB*8-1:0] a_hdr;   // bytes 0..33 used (the rest is optimised away)
	logic [15:0] a_len;
	logic [159:0] a_l4;
	logic [18:0] a_psum [0:7];
	logic [31:0] a_h1;
	always_ff @(posedge clk) begin
		if (rst)
			a_valid <= 1'b0;
		else
			a_valid <= p0_valid;
		a_hdr <= {{(HB - 34) * 8{1'b0}}, p0_hdr[34 * 8 - 1:0]};
		a_len <= p0_len;
		a_l4 <= z_l4;
		for (int g = 0; g < 8; g++)
			a_psum[g] <= z_psum[g];
		a_h1 <= nx_core_pkg::nx_hash_a(DIR == 0 ? {hb(p0_hdr, 26), hb(p0_hdr, 27), hb(p0_hdr, 28), hb(p0_hdr, 29)}
						       : {hb(p0_hdr, 30), hb(p0_hdr, 31), hb(p0_hdr, 32), hb(p0_hdr, 33)},
					      z_kport, z_penc, seed);
	end

	// ---------------- S1: parse ----------------

	logic [47:0] q_dmac;
	logic [15:0] q_etype, q_tot, q_fragw, q_ipc, q_hlen, q_l4len;
	logic [3:0] q_ver, q_ihl;
	logic [7:0] q_ttl, q_proto;
	logic [31:0] q_sa, q_da, q_sum;
	logic [159:0] q_l4;
	logic [1:0] q_penc;
	logic q_bip, q_bl4, q_icmp, q_tcpc;
	logic [15:0] q_sport, q_dport, q_id, q_l4c, q_ulen;
	logic [7:0] q_flags, q_type;
	logic [6:0] q_l4off;
	logic [31:0] q_hash;

	always_comb begin
		q_dmac = {hb(a_hdr, 0), hb(a_hdr, 1), hb(a_hdr, 2), hb(a_hdr, 3), hb(a_hdr, 4), hb(a_hdr, 5)};
		q_etype = {hb(a_hdr, 12), hb(a_hdr, 13)};
		q_ver = a_hdr[8 * 14 + 4 +: 4];
		q_ihl = a_hdr[8 * 14 +: 4];
		q_hlen = {10'd0, q_ihl, 2'd0};
		q_tot = {hb(a_hdr, 16), hb(a_hdr, 17)};
		q_fragw = {hb(a_hdr, 20), hb(a_hdr, 21)};
		q_ttl = hb(a_hdr, 22);
		q_proto = hb(a_hdr, 23);
		q_ipc = {hb(a_hdr, 24), hb(a_hdr, 25)};
		q_sa = {hb(a_hdr, 26), hb(a_hdr, 27), hb(a_hdr, 28), hb(a_hdr, 29)};
		q_da = {hb(a_hdr, 30), hb(a_hdr, 31), hb(a_hdr, 32), hb(a_hdr, 33)};
		q_sum = 32'd0;
		for (int g = 0; g < 8; g++)
			q_sum = q_sum + {13'd0, a_psum[g]};
		q_bip = (a_len < 16'd34) || (q_ver != 4'd4) || (q_ihl < 4'd5) || (q_tot < q_hlen) ||
			({16'd0, q_tot} + 32'd14 > {16'd0, a_len}) ||
			(q_hlen + 16'd14 > a_len);  // and the checksum: S2 folds q_sum
		q_l4 = a_l4;
		q_l4off = 7'd14 + {1'b0, q_ihl, 2'd0};
		q_l4len = q_tot - q_hlen;
		q_sport = {q_l4[7:0], q_l4[15:8]};
		q_dport = {q_l4[23:16], q_l4[31:24]};
		q_ulen = {q_l4[39:32], q_l4[47:40]};
		q_id = {q_l4[39:32], q_l4[47:40]};
		q_flags = q_l4[111:104];
		q_type = q_l4[7:0];
		q_penc = 2'd0;
		q_bl4 = 1'b0;
		q_icmp = 1'b0;
		q_tcpc = 1'b0;
		q_l4c = 16'd0;
		case (q_proto)
		8'd6: begin
			q_penc = nx_core_pkg::P_TCP;
			q_bl4 = (q_l4len < 16'd20) || (q_l4[103:100] < 4'd5) ||
				({10'd0, q_l4[103:100], 2'd0} > q_l4len);
			q_tcpc = (q_flags[2:0] != 3'd0);
			q_l4c = {q_l4[135:128], q_l4[143:136]};
		end
		8'd17: begin
			q_penc = nx_core_pkg::P_UDP;
			q_bl4 = (q_l4len < 16'd8) || (q_ulen < 16'd8) || (q_ulen > q_l4len);
			q_l4c = {q_l4[55:48], q_l4[63:56]};
		end
		8'd1: begin
			q_penc = nx_core_pkg::P_ICMP;
			q_bl4 = (q_l4len < 16'd8);
			q_icmp = (q_type != 8'd0) && (q_type != 8'd8);
			q_l4c = {q_l4[23:16], q_l4[31:24]};
		end
		default: ;
		endcase
		q_hash = nx_core_pkg::nx_hash_b(a_h1);
	end

	logic s1_valid;
	logic s1_dis, s1_nfu, s1_nip, s1_bip, s1_pool, s1_ttl, s1_frag, s1_proto, s1_bl4, s1_icmp, s1_tcpc;
	logic [1:0] s1_penc;
	logic [31:0] s1_kaddr, s1_raddr, s1_da;
	logic [15:0] s1_kport, s1_rport, s1_tot, s1_ipc, s1_l4c;
	logic [7:0] s1_ttl8, s1_proto8;
	logic [6:0] s1_poff, s1_coff;
	logic [BLOG2-1:0] s1_bucket;
	logic [31:0] s1_sum;

	always_ff @(posedge clk) begin
		if (rst)
			s1_valid <= 1'b0;
		else
			s1_valid <= a_valid;
		s1_dis <= !enable;
		s1_nfu <= (q_dmac != my_mac) && !q_dmac[40]; // group addresses are for us (nx_for_us)
		s1_nip <= (a_len < 16'd14) || (q_etype != 16'h0800);
		s1_bip <= q_bip;
		s1_pool <= DIR == 0 ? ((q_da & pool_mask) == pool_base) : ((q_da & pool_mask) != pool_base);
		s1_ttl <= q_ttl <= 8'd1;
		s1_frag <= q_fragw[13:0] != 14'd0;
		s1_proto <= q_penc == 2'd0;
		s1_bl4 <= q_bl4;
		s1_icmp <= q_icmp;
		s1_tcpc <= q_tcpc;
		s1_penc <= q_penc;
		s1_kaddr <= DIR == 0 ? q_sa : q_da;
		s1_raddr <= DIR == 0 ? q_da : q_sa;
		s1_kport <= q_penc == nx_core_pkg::P_ICMP ? q_id : (DIR == 0 ? q_sport : q_dport);
		s1_rport <= q_penc == nx_core_pkg::P_ICMP ? 16'd0 : (DIR == 0 ? q_dport : q_sport);
		s1_da <= q_da;
		s1_tot <= q_tot;
		s1_ipc <= q_ipc;
		s1_l4c <= q_l4c;
		s1_ttl8 <= q_ttl;
		s1_proto8 <= q_proto;
		s1_poff <= q_l4off + (q_penc == nx_core_pkg::P_ICMP ? 7'd4 : (DIR == 0 ? 7'd0 : 7'd2));
		s1_coff <= q_l4off + (q_penc == nx_core_pkg::P_TCP ? 7'd16 :
				      q_penc == nx_core_pkg::P_UDP ? 7'd6 : 7'd2);
		s1_bucket <= q_hash[BLOG2-1:0];
		s1_sum <= q_sum;
	end

	// ---------------- the table: WAYS memories, one bucket read per cycle ----------------
	logic [EW-1:0] rd [0:WAYS-1];
	genvar gw;
	generate
		for (gw = 0; gw < WAYS; gw++) begin : g_way
			logic [EW-1:0] mem [0:BUCKETS-1];
			initial begin
				for (int i = 0; i < BUCKETS; i++)
					mem[i] = '0;
			end
			// port A: the lookup's read; port B: the control plane's write or read back
			always_ff @(posedge clk) begin
				rd[gw] <= mem[s1_bucket];
			end
			always_ff @(posedge clk) begin
				if (tw_en && tw_way == 4'(gw))
					mem[tw_bucket] <= tw_data;
				else if (tr_en)
					tr_data[EW*gw +: EW] <= mem[tr_bucket];
			end
		end
	endgenerate

	// ---------------- S2: compare the ways; outbound next hop ----------------
	logic s2_valid;
	logic s2_dis, s2_nfu, s2_nip, s2_bip, s2_pool, s2_ttl, s2_frag, s2_proto, s2_bl4, s2_icmp, s2_tcpc;
	logic [1:0] s2_penc;
	logic [31:0] s2_kaddr, s2_raddr, s2_da;
	logic [15:0] s2_kport, s2_rport, s2_tot, s2_ipc, s2_l4c;
	logic [7:0] s2_ttl8, s2_proto8;
	logic [6:0] s2_poff, s2_coff;
	logic [BLOG2-1:0] s2_bucket;
	logic [31:0] s2_sum;

	always_ff @(posedge clk) begin
		if (rst)
			s2_valid <= 1'b0;
		else
			s2_valid <= s1_valid;
		{s2_dis, s2_nfu, s2_nip, s2_bip, s2_pool, s2_ttl, s2_frag, s2_proto, s2_bl4, s2_icmp, s2_tcpc} <=
			{s1_dis, s1_nfu, s1_nip, s1_bip, s1_pool, s1_ttl, s1_frag, s1_proto, s1_bl4, s1_icmp, s1_tcpc};
		s2_penc <= s1_penc;
		s2_kaddr <= s1_kaddr;
		s2_raddr <= s1_raddr;
		s2_da <= s1_da;
		s2_kport <= s1_kport;
		s2_rport <= s1_rport;
		s2_tot <= s1_tot;
		s2_ipc <= s1_ipc;
		s2_l4c <= s1_l4c;
		s2_ttl8 <= s1_ttl8;
		s2_proto8 <= s1_proto8;
		s2_poff <= s1_poff;
		s2_coff <= s1_coff;
		s2_bucket <= s1_bucket;
		s2_sum <= s1_sum;
	end

	// next-hop lookup: the lowest-numbered valid entry whose prefix holds the address
	function automatic logic [4:0] nh_rsn(input logic found, input logic punt, input logic on_in);
		if (!found)
			nh_rsn = nx_core_pkg::R_NO_ROUTE;
		else if (punt)
			nh_rsn = nx_core_pkg::R_ROUTE_CPU;
		else if (on_in != (DIR == 1))
			nh_rsn = nx_core_pkg::R_NO_ROUTE;
		else
			nh_rsn = nx_core_pkg::R_XLATE;
	endfunction

	logic c_hit;
	logic [3:0] c_way;
	logic [31:0] c_xaddr;
	logic [15:0] c_xport;
	logic r2_found, r2_punt, r2_in;
	logic [47:0] r2_dmac, r2_smac;

	always_comb begin
		c_hit = 1'b0;
		c_way = 4'd0;
		c_xaddr = 32'd0;
		c_xport = 16'd0;
		for (int w = WAYS - 1; w >= 0; w--) begin
			if (rd[w][0] && rd[w][3:2] == s2_penc && rd[w][35:4] == s2_kaddr &&
			    rd[w][51:36] == s2_kport &&
			    (!rd[w][1] || (rd[w][83:52] == s2_raddr && rd[w][99:84] == s2_rport))) begin
				c_hit = 1'b1;
				c_way = 4'(w);
				c_xaddr = rd[w][131:100];
				c_xport = rd[w][147:132];
			end
		end
		r2_found = 1'b0;
		r2_punt = 1'b0;
		r2_in = 1'b0;
		r2_dmac = 48'd0;
		r2_smac = 48'd0;
		for (int i = NH - 1; i >= 0; i--) begin
			if (nh_valid[i] && ((s2_da & nh_mask[32*i +: 32]) == nh_addr[32*i +: 32])) begin
				r2_found = 1'b1;
				r2_punt = nh_punt[i];
				r2_in = nh_inside[i];
				r2_dmac = nh_dmac[48*i +: 48];
				r2_smac = nh_smac[48*i +: 48];
			end
		end
	end

	logic s3_valid;
	logic s3_dis, s3_nfu, s3_nip, s3_bip, s3_pool, s3_ttl, s3_frag, s3_proto, s3_bl4, s3_icmp, s3_tcpc;
	logic [1:0] s3_penc;
	logic [31:0] s3_kaddr, s3_xaddr;
	logic [15:0] s3_kport, s3_xport, s3_tot, s3_ipc, s3_l4c;
	logic [7:0] s3_ttl8, s3_proto8;
	logic [6:0] s3_poff, s3_coff;
	logic s3_hit;
	logic [$clog2(ENTRIES)-1:0] s3_eidx;
	logic r3_found, r3_punt, r3_in;
	logic [47:0] r3_dmac, r3_smac;

	always_ff @(posedge clk) begin
		if (rst)
			s3_valid <= 1'b0;
		else
			s3_valid <= s2_valid;
		{s3_dis, s3_nfu, s3_nip, s3_pool, s3_ttl, s3_frag, s3_proto, s3_bl4, s3_icmp, s3_tcpc} <=
			{s2_dis, s2_nfu, s2_nip, s2_pool, s2_ttl, s2_frag, s2_proto, s2_bl4, s2_icmp, s2_tcpc};
		s3_bip <= s2_bip || (nx_csum_pkg::nx_csum_fold(s2_sum) != 16'd0);
		s3_penc <= s2_penc;
		s3_kaddr <= s2_kaddr;
		s3_kport <= s2_kport;
		s3_tot <= s2_tot;
		s3_ipc <= s2_ipc;
		s3_l4c <= s2_l4c;
		s3_ttl8 <= s2_ttl8;
		s3_proto8 <= s2_proto8;
		s3_poff <= s2_poff;
		s3_coff <= s2_coff;
		s3_hit <= c_hit;
		s3_eidx <= ($clog2(ENTRIES))'(s2_bucket) * ($clog2(ENTRIES))'(WAYS) + ($clog2(ENTRIES))'(c_way);
		s3_xaddr <= c_xaddr;
		s3_xport <= c_xport;
		r3_found <= r2_found;
		r3_punt <= r2_punt;
		r3_in <= r2_in;
		r3_dmac <= r2_dmac;
		r3_smac <= r2_smac;
	end

	// ---------------- S3: inbound next hop, checksums, the reason ----------------
	logic x_found, x_punt, x_in;
	logic [47:0] x_dmac, x_smac;
	logic [4:0] x_rrsn, x_reason;
	logic [31:0] x_dip, x_dport, x_tip, x_tl4, x_dttl;
	logic [7:0] x_ttl;

	always_comb begin
		x_found = r3_found;
		x_punt = r3_punt;
		x_in = r3_in;
		x_dmac = r3_dmac;
		x_smac = r3_smac;
		if (DIR == 1) begin
			x_found = 1'b0;
			x_punt = 1'b0;
			x_in = 1'b0;
			x_dmac = 48'd0;
			x_smac = 48'd0;
			for (int i = NH - 1; i >= 0; i--) begin
				if (nh_valid[i] && ((s3_xaddr & nh_mask[32*i +: 32]) == nh_addr[32*i +: 32])) begin
					x_found = 1'b1;
					x_punt = nh_punt[i];
					x_in = nh_inside[i];
					x_dmac = nh_dmac[48*i +: 48];
					x_smac = nh_smac[48*i +: 48];
				end
			end
		end
		x_rrsn = nh_rsn(x_found, x_punt, x_in);

		// nx_rewrite: the address into the IP checksum, address and port into TCP/UDP's,
		// the identifier alone into ICMP's; then nx_redirect: the TTL word. Each
		// nx_csum_apply(sum, diff) = nx_csum_fold(~sum + diff) is split at a register: the
		// sum here (S3), the fold in S4; the TTL word's apply in S4 and S5.
		x_dip = nx_csum_pkg::nx_csum_diff4(s3_kaddr, s3_xaddr);
		x_dport = nx_csum_pkg::nx_csum_diff2(s3_kport, s3_xport);
		x_ttl = s3_ttl8 - 8'd1;
		x_tip = {16'd0, ~s3_ipc} + x_dip;
		x_tl4 = {16'd0, ~s3_l4c} + (s3_penc == nx_core_pkg::P_ICMP ? x_dport : x_dip + x_dport);
		x_dttl = nx_csum_pkg::nx_csum_diff2({s3_ttl8, s3_proto8}, {x_ttl, s3_proto8});

		if (s3_dis) x_reason = nx_core_pkg::R_DISABLED;
		else if (s3_nfu) x_reason = nx_core_pkg::R_NOT_FOR_US;
		else if (s3_nip) x_reason = nx_core_pkg::R_NOT_IPV4;
		else if (s3_bip) x_reason = nx_core_pkg::R_BAD_IP;
		else if (s3_pool) x_reason = DIR == 0 ? nx_core_pkg::R_HAIRPIN : nx_core_pkg::R_NOT_POOL;
		else if (DIR == 0 && x_rrsn != nx_core_pkg::R_XLATE) x_reason = x_rrsn;
		else if (s3_ttl) x_reason = nx_core_pkg::R_TTL;
		else if (s3_frag) x_reason = nx_core_pkg::R_FRAGMENT;
		else if (s3_proto) x_reason = nx_core_pkg::R_PROTO;
		else if (s3_bl4) x_reason = nx_core_pkg::R_BAD_L4;
		else if (s3_icmp) x_reason = nx_core_pkg::R_ICMP;
		else if (s3_tcpc) x_reason = nx_core_pkg::R_TCP_CTRL;
		else if (!s3_hit) x_reason = nx_core_pkg::R_MISS;
		else if (DIR == 1 && x_rrsn != nx_core_pkg::R_XLATE) x_reason = x_rrsn;
		else if (s3_tot > mtu) x_reason = nx_core_pkg::R_MTU;
		else x_reason = nx_core_pkg::R_XLATE;
	end

	// S4: the folds
	logic s4_valid, s4_udp, s4_l4zero;
	logic [4:0] s4_reason;
	logic [47:0] s4_dmac, s4_smac;
	logic [7:0] s4_ttl;
	logic [31:0] s4_tip, s4_tl4, s4_dttl, s4_xaddr;
	logic [15:0] s4_xport;
	logic [6:0] s4_poff, s4_coff;
	logic [$clog2(ENTRIES)-1:0] s4_eidx;
	always_ff @(posedge clk) begin
		if (rst)
			s4_valid <= 1'b0;
		else
			s4_valid <= s3_valid;
		s4_reason <= x_reason;
		s4_dmac <= x_dmac;
		s4_smac <= x_smac;
		s4_ttl <= x_ttl;
		s4_tip <= x_tip;
		s4_tl4 <= x_tl4;
		s4_dttl <= x_dttl;
		s4_udp <= s3_penc == nx_core_pkg::P_UDP;
		s4_l4zero <= s3_l4c == 16'd0;
		s4_xaddr <= s3_xaddr;
		s4_xport <= s3_xport;
		s4_poff <= s3_poff;
		s4_coff <= s3_coff;
		s4_eidx <= s3_eidx;
	end

	logic [15:0] y_ipc1, y_l4;
	logic [31:0] y_tip2;
	always_comb begin
		y_ipc1 = nx_csum_pkg::nx_csum_fold(s4_tip);
		y_tip2 = {16'd0, ~y_ipc1} + s4_dttl;
		y_l4 = nx_csum_pkg::nx_csum_fold(s4_tl4);
	end

	// S5: the TTL word's fold, UDP's rule for 0; the result
	logic s5_valid, s5_udp, s5_l4zero;
	logic [4:0] s5_reason;
	logic [47:0] s5_dmac, s5_smac;
	logic [7:0] s5_ttl;
	logic [31:0] s5_tip2, s5_xaddr;
	logic [15:0] s5_l4r, s5_xport;
	logic [6:0] s5_poff, s5_coff;
	logic [$clog2(ENTRIES)-1:0] s5_eidx;
	always_ff @(posedge clk) begin
		if (rst)
			s5_valid <= 1'b0;
		else
			s5_valid <= s4_valid;
		s5_reason <= s4_reason;
		s5_dmac <= s4_dmac;
		s5_smac <= s4_smac;
		s5_ttl <= s4_ttl;
		s5_tip2 <= y_tip2;
		s5_l4r <= y_l4;
		s5_udp <= s4_udp;
		s5_l4zero <= s4_l4zero;
		s5_xaddr <= s4_xaddr;
		s5_xport <= s4_xport;
		s5_poff <= s4_poff;
		s5_coff <= s4_coff;
		s5_eidx <= s4_eidx;
	end

	logic [15:0] w_ipc2, w_l4c;
	always_comb begin
		w_ipc2 = nx_csum_pkg::nx_csum_fold(s5_tip2);
		if (s5_udp && s5_l4zero)
			w_l4c = 16'd0;      // nx_udp_csum_apply: no checksum stays none
		else if (s5_udp && s5_l4r == 16'd0)
			w_l4c = 16'hffff;   // a computed 0 is sent as 0xffff
		else
			w_l4c = s5_l4r;
	end

	assign ev_valid = s5_valid;
	assign ev_reason = s5_reason;

	// activity: set by a translated packet, snapshot-and-clear by the control plane, 32 bits
	// a word; a bit set in the cycle of its word's snapshot stays set. Like the table, not
	// cleared by reset (zero at configuration).
	localparam int AWORDS = ENTRIES / 32;
	localparam int AWL = $clog2(ENTRIES) - 5;
	logic [31:0] act [0:AWORDS-1];
	logic act_set;
	logic [AWL-1:0] act_sw, act_aw;
	logic [4:0] act_sb;
	assign act_set = s5_valid && s5_reason == nx_core_pkg::R_XLATE;
	assign act_sw = s5_eidx[$clog2(ENTRIES)-1:5];
	assign act_sb = s5_eidx[4:0];
	assign act_aw = act_idx[AWL-1:0];
	initial begin
		for (int i = 0; i < AWORDS; i++)
			act[i] = 32'd0;
	end
	always_ff @(posedge clk) begin
		if (act_snap) begin
			act_word <= act[act_aw];
			act[act_aw] <= (act_set && act_sw == act_aw) ? (32'd1 << act_sb) : 32'd0;
		end
		if (act_set && !(act_snap && act_sw == act_aw))
			act[act_sw][act_sb] <= 1'b1;
	end

	// meta FIFO: {reason, dmac, smac, ttl, ipc, addr, port, poff, l4c, coff}
	localparam int MW = 5 + 48 + 48 + 8 + 16 + 32 + 16 + 7 + 16 + 7;
	logic m_valid;
	logic [MW-1:0] m_out;
	logic [MLOG2:0] mlevel;
	nx_fifo #(.W(MW), .LOG2(MLOG2)) u_meta (
		.clk, .rst, .push(s5_valid),
		.din({s5_reason, s5_dmac, s5_smac, s5_ttl, w_ipc2, s5_xaddr, s5_xport, s5_poff, w_l4c, s5_coff}),
		.pop(meta_pop), .valid(m_valid), .dout(m_out), .level(mlevel)
	);

	// ---------------- egress ----------------
	logic cur_valid;
	logic [4:0] e_reason;
	logic [47:0] e_dmac, e_smac;
	logic [7:0] e_ttl;
	logic [15:0] e_ipc, e_port, e_l4c;
	logic [31:0] e_addr;
	logic [6:0] e_poff, e_coff;
	logic [3:0] ebeat;
	logic e_cpu, e_fire;
	logic [63:0] e_pdata;

	assign e_cpu = e_reason != nx_core_pkg::R_XLATE;
	assign e_fire = cur_valid && d_valid && (e_cpu ? c_tready : m_tready);
	assign d_pop = e_fire;
	assign meta_pop = m_valid && (!cur_valid || (e_fire && d_out[72]));

	always_ff @(posedge clk) begin
		if (rst) begin
			cur_valid <= 1'b0;
			ebeat <= 4'd0;
		end else begin
			if (meta_pop) begin
				cur_valid <= 1'b1;
				{e_reason, e_dmac, e_smac, e_ttl, e_ipc, e_addr, e_port, e_poff, e_l4c, e_coff} <= m_out;
			end else if (e_fire && d_out[72]) begin
				cur_valid <= 1'b0;
			end
			if (e_fire)
				ebeat <= d_out[72] ? 4'd0 : (ebeat == 4'hf ? ebeat : ebeat + 1'b1);
		end
	end

	// The patch: each byte of the beat, by its offset in the frame, from the field it falls
	// in. The MACs, TTL, IP checksum and address sit at fixed offsets (compared with
	// constants); the port/identifier and the transport checksum follow IHL (compared with
	// the offsets the parser computed). Beats past the 16th never hold a field.
	logic [95:0] e_macs;
	assign e_macs = {e_dmac, e_smac};

	always_comb begin
		for (int j = 0; j < 8; j++) begin
			logic [6:0] o;
			logic [7:0] b;
			o = {ebeat, 3'(j)};
			b = d_out[8*j +: 8];
			for (int k = 0; k < 12; k++)
				if (o == 7'(k))
					b = e_macs[8 * (11 - k) +: 8];
			if (o == 7'd22)
				b = e_ttl;
			if (o == 7'd24)
				b = e_ipc[15:8];
			if (o == 7'd25)
				b = e_ipc[7:0];
			for (int k = 0; k < 4; k++)
				if (o == 7'(AOFF + k))
					b = e_addr[8 * (3 - k) +: 8];
			if (o == e_poff)
				b = e_port[15:8];
			if (o == e_poff + 7'd1)
				b = e_port[7:0];
			if (o == e_coff)
				b = e_l4c[15:8];
			if (o == e_coff + 7'd1)
				b = e_l4c[7:0];
			e_pdata[8*j +: 8] = b;
		end
	end

	assign m_tdata = e_pdata;
	assign m_tkeep = d_out[71:64];
	assign m_tlast = d_out[72];
	assign m_tvalid = cur_valid && d_valid && !e_cpu;
	assign c_tdata = d_out[63:0];
	assign c_tkeep = d_out[71:64];
	assign c_tlast = d_out[72];
	assign c_tvalid = cur_valid && d_valid && e_cpu;
	assign c_reason = e_reason;
endmodule
