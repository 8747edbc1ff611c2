// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// nx_core: natrix's NAT44 fast path for established flows in hardware (issue 33). Two
// directions (nx_dir), each 64-bit AXI4-Stream in and out; one AXI4-Stream to the CPU with
// every frame the core does not translate, unchanged, tuser = {direction, 2'b0, reason};
// an AXI4-Lite register port (docs/HARDWARE.md: register map, table format, bucket hash).
// Clock and reset: one clock, synchronous active-high reset (the tables keep their
// contents across reset: the control plane removes entries explicitly).

module nx_core #(
	parameter int BLOG2 = 8,  // buckets per direction: 2^BLOG2; entries = WAYS << BLOG2
	parameter int WAYS = 4,
	parameter int NH = 16,
	parameter int DLOG2 = 11,
	parameter int MLOG2 = 4
) (
	input  logic        clk,
	input  logic        rst,

	// inside -> outside
	input  logic [63:0] s_i2o_tdata,
	input  logic [7:0]  s_i2o_tkeep,
	input  logic        s_i2o_tvalid,
	input  logic        s_i2o_tlast,
	output logic        s_i2o_tready,
	output logic [63:0] m_i2o_tdata,
	output logic [7:0]  m_i2o_tkeep,
	output logic        m_i2o_tvalid,
	output logic        m_i2o_tlast,
	input  logic        m_i2o_tready,

	// outside -> inside
	input  logic [63:0] s_o2i_tdata,
	input  logic [7:0]  s_o2i_tkeep,
	input  logic        s_o2i_tvalid,
	input  logic        s_o2i_tlast,
	output logic        s_o2i_tready,
	output logic [63:0] m_o2i_tdata,
	output logic [7:0]  m_o2i_tkeep,
	output logic        m_o2i_tvalid,
	output logic        m_o2i_tlast,
	input  logic        m_o2i_tready,

	// to the CPU
	output logic [63:0] m_cpu_tdata,
	output logic [7:0]  m_cpu_tkeep,
	output logic        m_cpu_tvalid,
	output logic        m_cpu_tlast,
	output logic [7:0]  m_cpu_tuser,
	input  logic        m_cpu_tready,

	// AXI4-Lite, 32-bit
	input  logic [11:0] s_axil_awaddr,
	input  logic        s_axil_awvalid,
	output logic        s_axil_awready,
	input  logic [31:0] s_axil_wdata,
	input  logic [3:0]  s_axil_wstrb,
	input  logic        s_axil_wvalid,
	output logic        s_axil_wready,
	output logic [1:0]  s_axil_bresp,
	output logic        s_axil_bvalid,
	input  logic        s_axil_bready,
	input  logic [11:0] s_axil_araddr,
	input  logic        s_axil_arvalid,
	output logic        s_axil_arready,
	output logic [31:0] s_axil_rdata,
	output logic [1:0]  s_axil_rresp,
	output logic        s_axil_rvalid,
	input  logic        s_axil_rready
);
	localparam int EW = nx_core_pkg::EW;
	localparam int ENTRIES = WAYS << BLOG2;
	localparam int AWORDS = ENTRIES / 32;

	// ---------------- registers ----------------
	logic        r_enable;
	logic [31:0] r_pool_base, r_pool_mask, r_seed;
	logic [47:0] r_mac_in, r_mac_out;
	logic [15:0] r_mtu_out, r_mtu_in;
	logic [31:0] e_kaddr, e_raddr, e_xaddr;
	logic [15:0] e_kport, e_rport, e_xport;
	logic [3:0]  e_ctl;
	logic [31:0] n_addr, n_mask;
	logic [47:0] n_dmac, n_smac;
	logic [2:0]  n_ctl;
	logic [1:0] tw_en, tr_en;
	logic tr_dir;
	logic [3:0] tr_way;
	logic [EW-1:0] tr_data [0:1];
	logic [1:0] pb_done;
	logic pb_wait;      // a commit or read back is under way in a direction (its answer waits)
	logic b_hold;       // a write's answer held until then
	logic [EW-1:0] rb;
	logic [3:0] tw_way;
	logic [BLOG2-1:0] tw_bucket;
	logic [1:0] act_snap;
	logic [15:0] act_idx;
	logic act_dir;
	logic [31:0] act_word [0:1];
	localparam int NREASON = 17; // reasons 0 (translated) .. R_MTU
	logic [2*NREASON*32-1:0] cnt; // direction d, reason r: bits 32 * (d * NREASON + r)
	logic [1:0] ev_valid;
	logic [4:0] ev_reason [0:1];

	logic wr, rdq, ar_pend, ar_pend2, ar_pend3;
	// AXI4-Lite writes: accepted, then applied, then answered. The accepted address
	// (decoded one-hot as it is taken, aw_dec) and data go into registers (wd_a); in the
	// next cycle the decode is qualified with the write into registers (wsel0), the
	// next-hop commit's index decoded too (nh_we0); in the
	// next they are copied into wsel and nh_we (beside the registers they enable), the data
	// into wd (three copies); in the next every register the write addresses is written
	// with its enable straight from those registers (each direction keeps its own copy of the
	// next hops, written from nh_we and the staged n_* two cycles later). The answer waits
	// four more cycles, until what the write starts (an activity snapshot into ACT_DATA,
	// the next hops, the configuration's copies) has reached the registers it changes; a
	// table commit or read back (E_COMMIT, E_READ) waits in its direction for a free
	// lookup slot, and its answer until the direction says it is done (pb_wait, below).
	localparam int NWA = 41;  // word addresses 0x000 .. 0x0a0
	logic [NWA-1:0] wsel;
	logic [NH-1:0] nh_we, nh_we0;
	logic [NWA-1:0] wsel0;
	logic [31:0] wd_b;
	logic [6:0] wpend;        // a write accepted one to seven cycles ago
	logic [31:0] wd_a;
	logic [NWA-1:0] aw_dec;   // the word address of the cycle before, decoded (a write's when wpend[0])
	// the write data in three copies, each beside the registers it writes: the live
	// registers and the table, snapshot and read requests (wd), the staged entry (wd_e),
	// the staged next hop (wd_n); their different initial values keep synthesis from
	// merging them into one register (the values never matter: a copy is written with
	// every accepted write before it is read)
	logic [31:0] wd = 32'd0;
	logic [31:0] wd_e = 32'hffffffff;
	logic [31:0] wd_n = 32'h00000001;
	assign wr = s_axil_awvalid && s_axil_wvalid && !s_axil_bvalid && !b_hold && wpend == 7'd0;
	assign s_axil_awready = wr;
	assign s_axil_wready = wr;
	assign s_axil_bresp = 2'b00;
	assign s_axil_rresp = 2'b00;
	assign rdq = s_axil_arvalid && !s_axil_rvalid && !ar_pend && !ar_pend2 && !ar_pend3;
	assign s_axil_arready = rdq;

	function automatic logic wsel_is(input logic [NWA-1:0] s, input logic [11:0] a);
		wsel_is = s[a[7:2]];  // the addresses used are below 0x100
	endfunction

	always_ff @(posedge clk) begin
		if (rst) begin
			wpend <= 7'd0;
			wsel0 <= '0;
			wsel <= '0;
			nh_we0 <= '0;
			nh_we <= '0;
		end else begin
			wpend <= {wpend[5:0], wr};
			for (int k = 0; k < NWA; k++)
				wsel0[k] <= wpend[0] && aw_dec[k];
			for (int i = 0; i < NH; i++)
				nh_we0[i] <= wpend[0] && aw_dec[6'h27] && wd_a[7:0] == 8'(i);
			wsel <= wsel0;
			nh_we <= nh_we0;
		end
		for (int k = 0; k < NWA; k++)
			aw_dec[k] <= s_axil_awaddr[11:2] == 10'(k);
		wd_a <= s_axil_wdata;
		wd_b <= wd_a;
		wd <= wd_b;
		wd_e <= wd_b;
		wd_n <= wd_b;
	end

	always_ff @(posedge clk) begin
		tw_en <= 2'b00;
		tr_en <= 2'b00;
		act_snap <= 2'b00;
		if (rst) begin
			s_axil_bvalid <= 1'b0;
			b_hold <= 1'b0;
			pb_wait <= 1'b0;
			r_enable <= 1'b0;
			r_pool_base <= 32'd0;
			r_pool_mask <= 32'hffffffff;
			r_seed <= 32'd0;
			r_mac_in <= 48'd0;
			r_mac_out <= 48'd0;
			r_mtu_out <= 16'd1500;
			r_mtu_in <= 16'd1500;
		end else begin
			if (s_axil_bvalid && s_axil_bready)
				s_axil_bvalid <= 1'b0;
			// an E_READ's answer waits for its entry in RB_*, an E_COMMIT's for its
			// write: each waits in its direction for a lookup slot without a header;
			// pb_done: the entry is in tr_data (in trq a cycle later and in rb the cycle
			// after, when a read accepted with the answer or later takes it), or the
			// commit's word is written
			if (tr_en != 2'b00 || tw_en != 2'b00)
				pb_wait <= 1'b1;
			else if (pb_done != 2'b00)
				pb_wait <= 1'b0;
			if (wpend[6] || b_hold) begin
				b_hold <= pb_wait;
				if (!pb_wait)
					s_axil_bvalid <= 1'b1;
			end
			if (wsel_is(wsel, 12'h008)) r_enable <= wd[0];
			if (wsel_is(wsel, 12'h010)) r_pool_base <= wd;
			if (wsel_is(wsel, 12'h014)) r_pool_mask <= wd;
			if (wsel_is(wsel, 12'h018)) r_mac_in[47:32] <= wd[15:0];
			if (wsel_is(wsel, 12'h01c)) r_mac_in[31:0] <= wd;
			if (wsel_is(wsel, 12'h020)) r_mac_out[47:32] <= wd[15:0];
			if (wsel_is(wsel, 12'h024)) r_mac_out[31:0] <= wd;
			if (wsel_is(wsel, 12'h028)) r_mtu_out <= wd[15:0];
			if (wsel_is(wsel, 12'h02c)) r_mtu_in <= wd[15:0];
			if (wsel_is(wsel, 12'h030)) r_seed <= wd;
			if (wsel_is(wsel, 12'h05c)) begin
				tw_en <= wd[31] ? 2'b10 : 2'b01;
				tw_way <= wd[27:24];
				tw_bucket <= wd[BLOG2-1:0];
			end
			if (wsel_is(wsel, 12'h060)) begin
				tr_en <= wd[31] ? 2'b10 : 2'b01;
				tr_dir <= wd[31];
				tr_way <= wd[27:24];
				tw_bucket <= wd[BLOG2-1:0];
			end
			if (wsel_is(wsel, 12'h0a0)) begin
				act_snap <= wd[31] ? 2'b10 : 2'b01;
				act_dir <= wd[31];
				act_idx <= 16'(wd[15:0] % 16'(AWORDS));
			end
		end
		// staging registers (no reset)
		if (wsel_is(wsel, 12'h040)) e_kaddr <= wd_e;
		if (wsel_is(wsel, 12'h044)) e_kport <= wd_e[15:0];
		if (wsel_is(wsel, 12'h048)) e_raddr <= wd_e;
		if (wsel_is(wsel, 12'h04c)) e_rport <= wd_e[15:0];
		if (wsel_is(wsel, 12'h050)) e_xaddr <= wd_e;
		if (wsel_is(wsel, 12'h054)) e_xport <= wd_e[15:0];
		if (wsel_is(wsel, 12'h058)) e_ctl <= wd_e[3:0];
		if (wsel_is(wsel, 12'h080)) n_addr <= wd_n;
		if (wsel_is(wsel, 12'h084)) n_mask <= wd_n;
		if (wsel_is(wsel, 12'h088)) n_dmac[47:32] <= wd_n[15:0];
		if (wsel_is(wsel, 12'h08c)) n_dmac[31:0] <= wd_n;
		if (wsel_is(wsel, 12'h090)) n_smac[47:32] <= wd_n[15:0];
		if (wsel_is(wsel, 12'h094)) n_smac[31:0] <= wd_n;
		if (wsel_is(wsel, 12'h098)) n_ctl <= wd_n[2:0];
	end

	// AXI4-Lite reads, four cycles: the address decoded into registers (rsel one-hot for
	// the registers, the counter's index); the counter's group of four and the other
	// registers' value in three parts, each into a register; the counter's group of eight
	// (two groups of four) and the three parts' OR; the data
	localparam int NRA = 42;  // word addresses 0x000 .. 0x0a4
	logic [NRA-1:0] rsel;
	logic [5:0] cidx;          // the counter a read addresses
	logic rcnt, rcnt2;         // the read is of a counter
	logic [2:0] cgi, cgi2;     // the counter's group
	logic cgh;                 // the counter's half of its group of eight (cidx[2])
	logic [31:0] cq4 [0:8];    // counters 4h + cidx[1:0]
	logic [31:0] cgrp [0:4];   // counters 8g + cidx[2:0]
	logic [31:0] rfa, rfb, rfa_d, rfb_d; // the other registers' value: two parts, ORed with ACT_DATA a cycle later
	logic [31:0] rfo;
	logic rcnt3, ract;
	localparam int NCNT = 2 * NREASON;
	// the addressed direction's activity snapshot, a register beside the read's mux, a
	// cycle behind the directions' own (which hold the snapshot from a cycle after its
	// write is answered): a read accepted with the answer or later takes its value from
	// this copy in its third cycle
	logic [31:0] act_q;
	always_ff @(posedge clk)
		act_q <= act_dir ? act_word[1] : act_word[0];

	always_comb begin
		rfa_d = 32'd0;
		if (rsel[0]) rfa_d = rfa_d | 32'h4e584857; // "NXHW"
		if (rsel[1]) rfa_d = rfa_d | {8'd0, 8'(NH), 4'd0, 4'(WAYS), 8'(BLOG2)};
		if (rsel[2]) rfa_d = rfa_d | {31'd0, r_enable};
		if (rsel[4]) rfa_d = rfa_d | r_pool_base;
		if (rsel[5]) rfa_d = rfa_d | r_pool_mask;
		if (rsel[10]) rfa_d = rfa_d | {16'd0, r_mtu_out};
		if (rsel[11]) rfa_d = rfa_d | {16'd0, r_mtu_in};
		if (rsel[12]) rfa_d = rfa_d | r_seed;
		rfb_d = 32'd0;
		if (rsel[25]) rfb_d = rfb_d | rb[35:4];
		if (rsel[26]) rfb_d = rfb_d | {16'd0, rb[51:36]};
		if (rsel[27]) rfb_d = rfb_d | rb[83:52];
		if (rsel[28]) rfb_d = rfb_d | {16'd0, rb[99:84]};
		if (rsel[29]) rfb_d = rfb_d | rb[131:100];
		if (rsel[30]) rfb_d = rfb_d | {16'd0, rb[147:132]};
		if (rsel[31]) rfb_d = rfb_d | {28'd0, rb[3:0]};
	end

	always_ff @(posedge clk) begin
		if (rst) begin
			s_axil_rvalid <= 1'b0;
			ar_pend <= 1'b0;
			ar_pend2 <= 1'b0;
			ar_pend3 <= 1'b0;
		end else begin
			if (s_axil_rvalid && s_axil_rready)
				s_axil_rvalid <= 1'b0;
			ar_pend <= rdq;
			ar_pend2 <= ar_pend;
			ar_pend3 <= ar_pend2;
			if (ar_pend3)
				s_axil_rvalid <= 1'b1;
		end
		// decoded every cycle (no enable): the cycle after a read's acceptance uses the
		// accepted address's
		for (int k = 0; k < NRA; k++)
			rsel[k] <= s_axil_araddr[11:2] == 10'(k);
		rcnt <= s_axil_araddr[11:8] == 4'h2 && {1'b0, s_axil_araddr[6:2]} < 6'(NREASON);
		cidx <= (s_axil_araddr[7] ? 6'(NREASON) : 6'd0) + {1'b0, s_axil_araddr[6:2]};
		if (ar_pend) begin
			// a counter read has cidx < NCNT (rcnt: the reason below NREASON), so in the
			// last group (NCNT = 34: two counters) it addresses NCNT - 2 + cidx[0] only;
			// no read of a counter that does not exist reaches cq4
			for (int h = 0; h < 8; h++)
				cq4[h] <= cnt[32 * (4 * h + 32'(cidx[1:0])) +: 32];
			cq4[8] <= cnt[32 * (NCNT - 2 + 32'(cidx[0])) +: 32];
			cgi <= cidx[5:3];
			cgh <= cidx[2];
			rcnt2 <= rcnt;
			rfa <= rfa_d;
			rfb <= rfb_d;
			ract <= rsel[41];
		end
		if (ar_pend2) begin
			for (int g = 0; g < 5; g++)
				cgrp[g] <= cgh ? (g < 4 ? cq4[2 * g + 1] : 32'd0) : cq4[2 * g];
			cgi2 <= cgi;
			rcnt3 <= rcnt2;
			rfo <= rfa | rfb | (ract ? act_q : 32'd0);
		end
		if (ar_pend3)
			s_axil_rdata <= rcnt3 ? cgrp[cgi2] : rfo;
	end

	// counters at 0x200 + dir * 0x80 + reason * 4 (reason 0: translated; the reasons above
	// R_MTU never occur and read 0): each counter its own incrementer, enabled by the
	// event's reason decoded into a register
	logic [NREASON-1:0] cnt_hit [0:1];
	always_ff @(posedge clk) begin
		for (int d = 0; d < 2; d++)
			for (int r = 0; r < NREASON; r++)
				cnt_hit[d][r] <= ev_valid[d] && ev_reason[d] == 5'(r);
		if (rst) begin
			cnt <= '0;
		end else begin
			for (int d = 0; d < 2; d++)
				for (int r = 0; r < NREASON; r++)
					if (cnt_hit[d][r])
						cnt[32 * (d * NREASON + r) +: 32] <= cnt[32 * (d * NREASON + r) +: 32] + 32'd1;
		end
	end

	// the entry read back: each direction's (the addressed way, in a register there) into
	// a register here, then the addressed direction's into rb
	logic [EW-1:0] trq [0:1];
	always_ff @(posedge clk) begin
		trq[0] <= tr_data[0];
		trq[1] <= tr_data[1];
		rb <= trq[tr_dir];
	end

	wire [EW-1:0] tw_data = {e_xport, e_xaddr, e_rport, e_raddr, e_kport, e_kaddr, e_ctl[3:2], e_ctl[1], e_ctl[0]};

	// ---------------- the two directions ----------------
	logic [63:0] c_tdata [0:1];
	logic [7:0]  c_tkeep [0:1];
	logic [1:0]  c_tvalid, c_tlast, c_tready;
	logic [4:0]  c_reason [0:1];

	nx_dir #(.DIR(0), .BLOG2(BLOG2), .WAYS(WAYS), .NH(NH), .DLOG2(DLOG2), .MLOG2(MLOG2)) u_i2o (
		.clk, .rst,
		.s_tdata(s_i2o_tdata), .s_tkeep(s_i2o_tkeep), .s_tvalid(s_i2o_tvalid),
		.s_tlast(s_i2o_tlast), .s_tready(s_i2o_tready),
		.m_tdata(m_i2o_tdata), .m_tkeep(m_i2o_tkeep), .m_tvalid(m_i2o_tvalid),
		.m_tlast(m_i2o_tlast), .m_tready(m_i2o_tready),
		.c_tdata(c_tdata[0]), .c_tkeep(c_tkeep[0]), .c_tvalid(c_tvalid[0]),
		.c_tlast(c_tlast[0]), .c_reason(c_reason[0]), .c_tready(c_tready[0]),
		.enable_in(r_enable), .my_mac_in(r_mac_in), .pool_base_in(r_pool_base), .pool_mask_in(r_pool_mask),
		.mtu_in(r_mtu_out), .seed_in(r_seed),
		.tw_en(tw_en[0]), .tw_way, .tw_bucket, .tw_data,
		.tr_en(tr_en[0]), .tr_bucket(tw_bucket), .tr_way, .tr_data(tr_data[0]), .pb_done(pb_done[0]),
		.nh_we, .n_addr, .n_mask, .n_dmac, .n_smac, .n_ctl,
		.act_snap(act_snap[0]), .act_idx, .act_word(act_word[0]),
		.ev_valid(ev_valid[0]), .ev_reason(ev_reason[0])
	);

	nx_dir #(.DIR(1), .BLOG2(BLOG2), .WAYS(WAYS), .NH(NH), .DLOG2(DLOG2), .MLOG2(MLOG2)) u_o2i (
		.clk, .rst,
		.s_tdata(s_o2i_tdata), .s_tkeep(s_o2i_tkeep), .s_tvalid(s_o2i_tvalid),
		.s_tlast(s_o2i_tlast), .s_tready(s_o2i_tready),
		.m_tdata(m_o2i_tdata), .m_tkeep(m_o2i_tkeep), .m_tvalid(m_o2i_tvalid),
		.m_tlast(m_o2i_tlast), .m_tready(m_o2i_tready),
		.c_tdata(c_tdata[1]), .c_tkeep(c_tkeep[1]), .c_tvalid(c_tvalid[1]),
		.c_tlast(c_tlast[1]), .c_reason(c_reason[1]), .c_tready(c_tready[1]),
		.enable_in(r_enable), .my_mac_in(r_mac_out), .pool_base_in(r_pool_base), .pool_mask_in(r_pool_mask),
		.mtu_in(r_mtu_in), .seed_in(r_seed),
		.tw_en(tw_en[1]), .tw_way, .tw_bucket, .tw_data,
		.tr_en(tr_en[1]), .tr_bucket(tw_bucket), .tr_way, .tr_data(tr_data[1]), .pb_done(pb_done[1]),
		.nh_we, .n_addr, .n_mask, .n_dmac, .n_smac, .n_ctl,
		.act_snap(act_snap[1]), .act_idx, .act_word(act_word[1]),
		.ev_valid(ev_valid[1]), .ev_reason(ev_reason[1])
	);

	// ---------------- the CPU port: round robin between the directions, per frame ----------------
	// The grant (g) is a register: each direction's c_tready is a_ready and the grant, both
	// registers. It moves between frames, to the other direction when that one waits and
	// this one's frame ends now or it has nothing; a_ready is a register slice's
	// (m_cpu_tready reaches registers only)
	logic g, lock, a_valid, a_ready, a_last;
	assign a_valid = c_tvalid[g];
	assign a_last = c_tlast[g];
	assign c_tready[0] = a_ready && !g;
	assign c_tready[1] = a_ready && g;

	logic [80:0] cpu_q;
	nx_slice #(.W(81), .SPLIT(2)) u_cpu (
		.clk, .rst, .s_valid(a_valid),
		.s_data({g, 2'b00, c_reason[g], c_tlast[g], c_tkeep[g], c_tdata[g]}),
		.s_ready(a_ready), .m_valid(m_cpu_tvalid), .m_data(cpu_q), .m_ready(m_cpu_tready)
	);
	assign m_cpu_tdata = cpu_q[63:0];
	assign m_cpu_tkeep = cpu_q[71:64];
	assign m_cpu_tlast = cpu_q[72];
	assign m_cpu_tuser = cpu_q[80:73];

	always_ff @(posedge clk) begin
		if (rst) begin
			g <= 1'b0;
			lock <= 1'b0;
		end else begin
			if (a_valid && a_ready)
				lock <= !a_last;
			if (c_tvalid[!g] && ((a_valid && a_ready && a_last) || (!lock && !c_tvalid[g])))
				g <= !g;
		end
	end
endmodule
