// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// nx_dir: one direction of the NAT core (DIR 0: inside -> outside, DIR 1: outside ->
// inside). Store and forward:
//
//   ingress   every beat goes into an input register, from there into the data FIFO; the
//             first 96 bytes are captured; at tlast the header and the frame's length enter
//             the lookup pipeline (one packet per cycle, so back-to-back frames of any
//             length never wait for it); the IPv4 header checksum's words summed as the
//             beats arrive (c_acc, four steps beside the input register)
//   SA        32 bytes from 14 + 16 * IHL[3:2], and the key's port (selected by IHL)
//   SB        the transport header selected by IHL[1:0]; the bucket hash's first step; the
//             IPv4 length checks; the offsets of the port and the transport checksum
//   S1        parse and validate Ethernet, IPv4 (fragments, TTL), TCP/UDP/ICMP; the key, the
//             bucket hash's second step; the header checksum's sum read (c_acc)
//   S1b       the bucket (the hash's last step) beside the table's block RAMs, which it
//             addresses
//   S2        the bucket's WAYS entries (one block RAM access) into registers; the header
//             checksum's fold, first add (S3 the second, S4 the verdict); the outbound
//             next hop's prefix compares (4-bit pieces)
//   S3        the ways compared with the key in 2-bit pieces, each into a register; the
//             outbound next hops that match (all pieces, valid)
//   S4        the ways that match (all pieces); the first matching next hop's index
//   S4b       the hit way (the lowest-numbered) and its fields selected; the outbound next
//             hop's fields (the next hops' distributed RAM read by the index)
//   S5        the reason's checks before and after the outbound route (two codes); the
//             inbound next hop's prefix compares; the checksum differences
//   S6..S10   the inbound next hop's matches (S6), first match's index (S7) and fields
//             (S8, read by it); the reason (S10: the two codes, the routes, the
//             MTU); the checksums' sums and folds (bpf/nx_csum.h's sequence, nx_rewrite
//             then nx_redirect, one adder or fold per stage) in S6 to S10
//   S11       the packet's metadata into the meta FIFO, the counters' event, the activity bit
//   egress    an issuer asks the data FIFO for each frame's beats while the output it goes
//             to has credit; each beat with its frame's metadata (the meta FIFO's output
//             register) down plain registers (P, G, X: no ready goes back through them):
//             the translated frame (MACs, TTL, address, port or identifier, both
//             checksums patched in flight) to m_axis, or the frame unchanged to the CPU
//             stream with its reason, each through a small output FIFO whose valid and
//             data are registers (tready only pops it)
//
// Every block RAM's output goes straight into a register (the table's ways, the data
// FIFO's read, both the block RAM's own output register on ECP5 after absorb.py): its
// clock-to-out never adds to a path through logic.
//
// Nothing is dropped: a frame the core does not translate goes to the CPU stream. s_tready
// falls only when the data FIFO is (nearly) full or MDEPTH frames are in flight.
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

	input  logic        enable_in,
	input  logic [47:0] my_mac_in,
	input  logic [31:0] pool_base_in,
	input  logic [31:0] pool_mask_in,
	input  logic [15:0] mtu_in,
	input  logic [31:0] seed_in,

	input  logic                   tw_en,
	input  logic [3:0]             tw_way,
	input  logic [BLOG2-1:0]       tw_bucket,
	input  logic [nx_core_pkg::EW-1:0] tw_data,
	input  logic                   tr_en,      // read a bucket back (the control plane's port)
	input  logic [BLOG2-1:0]       tr_bucket,
	input  logic [3:0]             tr_way,
	output logic [nx_core_pkg::EW-1:0] tr_data,  // the way read back
	output logic                   pb_done,    // a cycle: tr_data holds the read back, or the commit is written

	input  logic [NH-1:0]    nh_we,      // commit the staged next hop into entry i (one-hot)
	input  logic [31:0]      n_addr,     // the staged next hop
	input  logic [31:0]      n_mask,
	input  logic [47:0]      n_dmac,
	input  logic [47:0]      n_smac,
	input  logic [2:0]       n_ctl,      // {to the CPU, egress inside, valid}

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
	localparam int AWORDS_P = ENTRIES / 32;   // 32-bit words of activity bits

	// the configuration: this direction's own copy, a cycle behind the core's registers
	// (beside the checks that read it)
	logic        enable;
	logic [47:0] my_mac;
	logic [31:0] pool_base, pool_mask, seed;
	logic [15:0] mtu;
	always_ff @(posedge clk) begin
		enable <= enable_in;
		my_mac <= my_mac_in;
		pool_base <= pool_base_in;
		pool_mask <= pool_mask_in;
		mtu <= mtu_in;
		seed <= seed_in;
	end

	// ---------------- ingress ----------------
	// The accepted beat goes into an input register stage first (i_*): the data FIFO's
	// write and the header capture take it from there, and each 64-bit slice of the capture
	// is enabled from two registers beside it (i_vcap, a beat was accepted; i_bsel[i], it
	// is beat i), so no enable is a combination of s_tvalid and s_tready carried across the
	// die and fanned out over the whole capture.
	logic [HB*8-1:0] hcap;
	logic [12:0] bidx;
	logic [HB/8-1:0] bsel;      // one-hot: the next beat is beat i of the header
	logic [3:0] nbytes;
	logic in_fire, in_ready;
	logic [DLOG2:0] dlevel;
	logic [MLOG2+1:0] inflight;
	logic meta_pop, e_end_r;

	logic i_valid, i_last;
	logic [63:0] i_data;
	logic [7:0] i_keep;
	logic [HB/8-1:0] i_cap;     // the beat in i_data is beat i of the header
	logic i_vcap = 1'b1;        // i_valid's copy beside the capture (another initial value)
	logic [HB/8-1:0] i_bsel;    // bsel as the beat in i_data was accepted
	logic [15:0] i_len;         // the length of the frame whose last beat is in i_data
	logic [DLOG2:0] i_nb;       // and its beats (a frame fits the data FIFO: at most DDEPTH)

	logic p0_valid;
	logic [HB*8-1:0] p0_hdr;
	logic [15:0] p0_len;
	logic [15:0] p0_lenm14;     // the length - 14 (wraps below 14: then p0_lt34 decides)
	logic p0_lt34;              // the length < 34
	logic [DLOG2:0] p0_nb;

	// s_tready is a register computed from the counts alone, a cycle old: high only when
	// the FIFO held at most DDEPTH - 4 words (two more may be in the input register and the
	// FIFO's write register) and at
	// most MDEPTH - 3 frames were counted in flight (the count takes a frame's end from the
	// input register and a frame's departure a cycle late, both from registers: one frame
	// may be missing from it), so the beat (or the frame's end) it accepts always fits; it
	// waits for no pop of the cycle, so it may fall a cycle early when the FIFO is nearly
	// full
	assign s_tready = in_ready;
	assign in_fire = s_tvalid && in_ready;

	always_comb begin
		nbytes = 4'd0;
		for (int i = 0; i < 8; i++)
			nbytes = nbytes + {3'd0, s_tkeep[i]};
	end

	// the header of the frame whose last beat was in the input register the cycle before:
	// hcap itself (the next frame's first beat overwrites it only at the end of that cycle,
	// when SA has taken what it needs)
	assign p0_hdr = hcap;

	always_ff @(posedge clk) begin
		if (rst) begin
			bidx <= '0;
			bsel <= {{(HB/8-1){1'b0}}, 1'b1};
			i_valid <= 1'b0;
			p0_valid <= 1'b0;
			inflight <= '0;
			e_end_r <= 1'b0;
			in_ready <= 1'b1;
		end else begin
			i_valid <= in_fire;
			p0_valid <= i_valid && i_last;
			if (in_fire) begin
				if (s_tlast) begin
					bidx <= '0;
					bsel <= {{(HB/8-1){1'b0}}, 1'b1};
				end else begin
					if (bidx != 13'h1fff)
						bidx <= bidx + 1'b1;
					bsel <= bsel << 1;
				end
			end
			e_end_r <= meta_pop;
			inflight <= inflight + (MLOG2+2)'(i_valid && i_last) - (MLOG2+2)'(e_end_r);
			in_ready <= (dlevel < DDEPTH[DLOG2:0] - (DLOG2+1)'(3)) && (inflight < MDEPTH[MLOG2+1:0] - (MLOG2+2)'(2));
		end
		i_data <= s_tdata;
		i_keep <= s_tkeep;
		i_last <= s_tlast;
		if (in_fire && s_tlast) begin
			i_len <= {bidx, 3'd0} + {12'd0, nbytes};
			i_nb <= (DLOG2+1)'(bidx) + 1'b1;
		end
		p0_len <= i_len;
		p0_lenm14 <= i_len - 16'd14;
		p0_lt34 <= i_len < 16'd34;
		p0_nb <= i_nb;
	end

	// the header capture: beat i into its 64 bits of hcap, each slice enabled by its own
	// register, nothing cleared. The bytes past a frame's end keep an older frame's; no
	// check depends on them: below 14 bytes the reason is not_for_us (bytes 0..5, the first
	// beat's) or not_ipv4, below 34 bad_ip at the latest, and every field past byte 33 is
	// read only after the IPv4 and transport length checks that precede it in the checks'
	// order have found it inside the frame (docs/HARDWARE.md)
	// with the beat of bytes 16..23, the protocol (byte 23) encoded, into hpenc beside the
	// capture (the same slice's enable: it always matches hcap's byte 23)
	logic [1:0] hpenc;
	always_ff @(posedge clk) begin
		i_vcap <= in_fire && !rst;
		i_bsel <= bsel;
	end
	assign i_cap = i_vcap ? i_bsel : '0;
	always_ff @(posedge clk) begin
		for (int i = 0; i < HB / 8; i++)
			if (i_cap[i])
				hcap[64*i +: 64] <= i_data;
		if (i_cap[2])
			case (i_data[56 +: 8])
			8'd6: hpenc <= nx_core_pkg::P_TCP;
			8'd17: hpenc <= nx_core_pkg::P_UDP;
			8'd1: hpenc <= nx_core_pkg::P_ICMP;
			default: hpenc <= 2'd0;
			endcase
	end

	// the IPv4 header checksum's sum, added as the beats arrive (four steps, a register
	// after each): which of the beat's four words are header words (bytes 14 .. 13 +
	// 4 * IHL) into c_en, with the beat beside the adders (c_d); those words in two pairs;
	// the pairs; the frame's sum (started by the beat of bytes 8..15, whose last word is
	// the header's first). Which words count: word 0 always (IHL 0 is bad_ip whatever the
	// sum), words 1 .. 2 * IHL - 1 from c_rem, loaded from IHL with that beat and shifted
	// four words a beat. The sum of a frame whose last beat was in the input register in
	// cycle t is in c_acc in cycles t + 4 and t + 5 (the next frame's beat of bytes 8..15
	// comes at t + 2 at the earliest, and reaches c_acc at t + 6): S1 reads it in t + 4.
	// Words past the frame's end are never added (the bytes past it are the previous
	// frame's): a header that does not fit the frame is bad_ip anyway
	logic [28:0] c_rem;            // header words 1..29 (bit k: word k + 1) still to come, as IHL has it
	logic [3:0] c_en;
	logic [63:0] c_d;
	logic c0_first;
	logic [16:0] c_p0, c_p1;       // the beat's counted words, two by two
	logic c1_v, c1_first, c2_v, c2_first;
	logic [17:0] c_s4;
	logic [20:0] c_acc;
	always_ff @(posedge clk) begin
		if (i_cap[1])
			for (int k = 0; k < 29; k++)
				c_rem[k] <= 5'(k + 1) < {i_data[48 +: 4], 1'b0};
		else if (i_vcap)
			c_rem <= {4'd0, c_rem[28:4]};
		c_en <= i_cap[1] ? 4'b1000 : (i_vcap && !i_bsel[0] ? c_rem[3:0] : 4'b0000);
		c_d <= i_data;
		c0_first <= i_cap[1];
		c_p0 <= (c_en[0] ? {1'b0, c_d[0 +: 8], c_d[8 +: 8]} : 17'd0) +
			(c_en[1] ? {1'b0, c_d[16 +: 8], c_d[24 +: 8]} : 17'd0);
		c_p1 <= (c_en[2] ? {1'b0, c_d[32 +: 8], c_d[40 +: 8]} : 17'd0) +
			(c_en[3] ? {1'b0, c_d[48 +: 8], c_d[56 +: 8]} : 17'd0);
		c1_v <= c_en != 4'd0;
		c1_first <= c0_first;
		c_s4 <= {1'b0, c_p0} + {1'b0, c_p1};
		c2_v <= c1_v;
		c2_first <= c1_first;
		if (c2_v)
			c_acc <= (c2_first ? 21'd0 : c_acc) + {3'd0, c_s4};
	end

	// data FIFO: {tlast, tkeep, tdata}, written from a register of its own a cycle after the
	// input register (the block RAMs sit where the die has them, the input register beside
	// the header capture); read by the egress's issuer, each word two cycles after it is
	// asked for, from the block RAM's output register
	logic d_rd;
	logic [72:0] d_out;
	logic j_valid = 1'b1;
	logic [72:0] j_beat;
	always_ff @(posedge clk) begin
		j_valid <= i_valid && !rst;
		j_beat <= {i_last, i_keep, i_data};
	end
	nx_rfifo #(.W(73), .LOG2(DLOG2)) u_data (
		.clk, .rst, .push(j_valid), .din(j_beat), .rd(d_rd), .dout(d_out), .level(dlevel)
	);

	// ---------------- SA: the transport header's position, partial sums ----------------
	// (the IHL-dependent selection of the transport header, the hash key's port)
	function automatic logic [7:0] hb(input logic [HB*8-1:0] h, input int k);
		hb = h[8*k +: 8];
	endfunction

	logic [3:0] z_ihl;
	logic [255:0] z_l4w;
	logic [15:0] z_kpc [0:3];
	logic [1:0] z_penc;
	logic [47:0] z_dmac;
	always_comb begin
		z_dmac = {hb(p0_hdr, 0), hb(p0_hdr, 1), hb(p0_hdr, 2), hb(p0_hdr, 3), hb(p0_hdr, 4), hb(p0_hdr, 5)};
		z_ihl = p0_hdr[8 * 14 +: 4];
		// the transport header starts at 14 + 4 * IHL: here the 32 bytes from
		// 14 + 16 * IHL[3:2] (IHL 4 to 15; below 5 the frame is bad_ip whatever is read),
		// in SB the 20 bytes at 4 * IHL[1:0] in them
		case (z_ihl[3:2])
		2'd3: z_l4w = p0_hdr[8 * 62 +: 256];
		2'd2: z_l4w = p0_hdr[8 * 46 +: 256];
		default: z_l4w = p0_hdr[8 * 30 +: 256];
		endcase
		z_penc = hpenc;  // byte 23's encoding
		// the key's port for each of the four places the header can start at in the window
		for (int c = 0; c < 4; c++)
			z_kpc[c] = z_penc == nx_core_pkg::P_ICMP ? {z_l4w[32 * c + 32 +: 8], z_l4w[32 * c + 40 +: 8]} :
				   (DIR == 0 ? {z_l4w[32 * c +: 8], z_l4w[32 * c + 8 +: 8]} :
					       {z_l4w[32 * c + 16 +: 8], z_l4w[32 * c + 24 +: 8]});
	end

	logic a_valid;
	logic [HB*8-1:0] a_hdr;   // bytes 0..33 used (the rest is optimised away)
	logic [15:0] a_len;
	logic [255:0] a_l4w;
	logic [15:0] a_kport;     // the key's port (selected by IHL here: the hash's add in SB starts from registers)
	logic [1:0] a_penc;
	logic [31:0] a_kx;       // the key address XOR the seed (the hash's first step)
	logic [15:0] a_lenm14;   // the frame's length - 14, and whether it is below 34 (SB's bad_ip checks)
	logic a_lt34;
	logic [6:0] a_hl14;      // 4 * IHL + 14
	logic [7:0] a_mac_eq;    // the destination MAC's 6-bit pieces equal to the port's
	logic [15:0] a_l4len;    // the transport length: total length - 4 * IHL
	logic a_l4hi;            // a_l4len >= 64 (as a 16-bit value: true when it wraps too)
	// IHL[1:0] for SB's selections by it, a copy for each (each half of the transport
	// header's 160 bits, the length checks): no select fans out over all of them (the
	// copies' different initial values, never used, keep synthesis from merging them)
	logic [1:0] a_ihl_l0 = 2'd1, a_ihl_l1 = 2'd2, a_ihl_c = 2'd3;
	always_ff @(posedge clk) begin
		if (rst)
			a_valid <= 1'b0;
		else
			a_valid <= p0_valid;
		a_lenm14 <= p0_lenm14;
		a_lt34 <= p0_lt34;
		a_hl14 <= {1'b0, p0_hdr[8 * 14 +: 4], 2'd0} + 7'd14;
		a_ihl_l0 <= p0_hdr[8 * 14 +: 2];
		a_ihl_l1 <= p0_hdr[8 * 14 +: 2];
		a_ihl_c <= p0_hdr[8 * 14 +: 2];
		a_l4len <= {hb(p0_hdr, 16), hb(p0_hdr, 17)} - {10'd0, p0_hdr[8 * 14 +: 4], 2'd0};
		a_l4hi <= ({hb(p0_hdr, 16), hb(p0_hdr, 17)} < {10'd0, p0_hdr[8 * 14 +: 4], 2'd0}) ||
			  ({hb(p0_hdr, 16), hb(p0_hdr, 17)} >= {10'd0, p0_hdr[8 * 14 +: 4], 2'd0} + 16'd64);
		for (int c = 0; c < 8; c++)
			a_mac_eq[c] <= z_dmac[6*c +: 6] == my_mac[6*c +: 6];
		a_hdr <= {{(HB - 34) * 8{1'b0}}, p0_hdr[34 * 8 - 1:0]};
		a_len <= p0_len;
		a_l4w <= z_l4w;
		a_kport <= z_kpc[z_ihl[1:0]];
		a_penc <= z_penc;
		a_kx <= (DIR == 0 ? {hb(p0_hdr, 26), hb(p0_hdr, 27), hb(p0_hdr, 28), hb(p0_hdr, 29)}
				  : {hb(p0_hdr, 30), hb(p0_hdr, 31), hb(p0_hdr, 32), hb(p0_hdr, 33)}) ^ seed;
	end

	// ---------------- SB: the hash's first step, IPv4 checks ----------------
	logic [3:0] y_tbad, y_ubad;  // per place of the transport header: TCP's, UDP's length checks
	logic [31:0] y_da;
	always_comb begin
		y_da = {hb(a_hdr, 30), hb(a_hdr, 31), hb(a_hdr, 32), hb(a_hdr, 33)};
		for (int c = 0; c < 4; c++) begin
			logic [3:0] doff;
			logic [15:0] ulen;
			doff = a_l4w[32 * c + 100 +: 4];
			ulen = {a_l4w[32 * c + 32 +: 8], a_l4w[32 * c + 40 +: 8]};
			// doff * 4 > l4len: never when l4len >= 64, else doff > l4len[5:2] (a 4-bit
			// compare instead of a 16-bit one)
			y_tbad[c] = (doff < 4'd5) || (!a_l4hi && doff > a_l4len[5:2]);
			y_ubad[c] = (ulen < 16'd8) || (ulen > a_l4len);
		end
	end

	logic b_valid;
	logic [HB*8-1:0] b_hdr;
	logic [15:0] b_len;
	logic [6:0] b_poff, b_coff;
	logic [159:0] b_l4;
	logic [3:0] b_bip4;      // bad_ip's length checks (S1 ORs them; S4b adds the checksum)
	logic [31:0] b_h1;
	logic b_nfu, b_nip;
	logic [7:0] b_pool8;     // the destination address's 4-bit pieces inside the pool (S1 ANDs them)
	// the transport header's checks (nx_parse_l4) for TCP, UDP, ICMP: TCP's and UDP's for
	// each of the four places, S1 selects by IHL[1:0] (b_ihl); the length's own checks
	logic [3:0] b_tbad4, b_ubad4;
	logic [1:0] b_ihl;
	logic b_tlen, b_lt8;          // l4len < 20; l4len < 8 (UDP's and ICMP's)
	logic [1:0] b_penc;
	always_ff @(posedge clk) begin
		if (rst)
			b_valid <= 1'b0;
		else
			b_valid <= a_valid;
		b_hdr <= a_hdr;
		b_len <= a_len;
		b_l4[79:0] <= a_l4w[32 * a_ihl_l0 +: 80];
		b_l4[159:80] <= a_l4w[32 * a_ihl_l1 + 80 +: 80];
		b_tbad4 <= y_tbad;
		b_ubad4 <= y_ubad;
		b_ihl <= a_ihl_c;
		b_tlen <= a_l4len < 16'd20;
		b_lt8 <= a_l4len < 16'd8;
		// the offsets of the port (identifier) and of the transport checksum in the frame
		// (a_hl14: 14 + 4 * IHL, from SA)
		b_poff <= a_hl14 + (a_penc == nx_core_pkg::P_ICMP ? 7'd4 : (DIR == 0 ? 7'd0 : 7'd2));
		b_coff <= a_hl14 + (a_penc == nx_core_pkg::P_TCP ? 7'd16 :
							   a_penc == nx_core_pkg::P_UDP ? 7'd6 : 7'd2);
		// below 34 bytes; version, IHL < 5, total length < 4 * IHL; total length + 14 and
		// 4 * IHL + 14 beyond the frame (as compares with the length - 14, which wraps only
		// below 14 bytes, where the first is true). The first and the last follow from the
		// others (below 14 bytes not_ipv4 comes first); they are nx_parse's checks, kept
		// as it has them
		b_bip4[0] <= a_lt34;
		b_bip4[1] <= (a_hdr[8 * 14 + 4 +: 4] != 4'd4) || (a_hdr[8 * 14 +: 4] < 4'd5) ||
			     ({hb(a_hdr, 16), hb(a_hdr, 17)} < {10'd0, a_hdr[8 * 14 +: 4], 2'd0});
		b_bip4[2] <= {hb(a_hdr, 16), hb(a_hdr, 17)} > a_lenm14;
		b_bip4[3] <= {10'd0, a_hdr[8 * 14 +: 4], 2'd0} > a_lenm14;
		b_h1 <= nx_core_pkg::nx_hash_a(a_kx, a_kport, a_penc, 32'd0);  // a_kx: the address XOR the seed
		b_penc <= a_penc;
		// the Ethernet checks (S1 takes them as they are)
		b_nfu <= a_mac_eq != 8'hff && !a_hdr[0];  // group addresses (bit 0 of byte 0) are for us (nx_for_us)
		b_nip <= (a_len < 16'd14) || ({hb(a_hdr, 12), hb(a_hdr, 13)} != 16'h0800);
		for (int c = 0; c < 8; c++)
			b_pool8[c] <= (y_da[4 * c +: 4] & pool_mask[4 * c +: 4]) == pool_base[4 * c +: 4];
	end

	// ---------------- S1: parse ----------------

	logic [47:0] q_dmac;
	logic [15:0] q_etype, q_tot, q_fragw, q_ipc;
	logic [3:0] q_ihl;
	logic [7:0] q_ttl, q_proto;
	logic [31:0] q_sa, q_da;
	logic [159:0] q_l4;
	logic [1:0] q_penc;
	logic q_bl4, q_icmp, q_tcpc;
	logic [15:0] q_sport, q_dport, q_id, q_l4c, q_ulen;
	logic [7:0] q_flags, q_type;
	logic [31:0] q_hash;

	always_comb begin
		q_dmac = {hb(b_hdr, 0), hb(b_hdr, 1), hb(b_hdr, 2), hb(b_hdr, 3), hb(b_hdr, 4), hb(b_hdr, 5)};
		q_etype = {hb(b_hdr, 12), hb(b_hdr, 13)};
		q_ihl = b_hdr[8 * 14 +: 4];
		q_tot = {hb(b_hdr, 16), hb(b_hdr, 17)};
		q_fragw = {hb(b_hdr, 20), hb(b_hdr, 21)};
		q_ttl = hb(b_hdr, 22);
		q_proto = hb(b_hdr, 23);
		q_ipc = {hb(b_hdr, 24), hb(b_hdr, 25)};
		q_sa = {hb(b_hdr, 26), hb(b_hdr, 27), hb(b_hdr, 28), hb(b_hdr, 29)};
		q_da = {hb(b_hdr, 30), hb(b_hdr, 31), hb(b_hdr, 32), hb(b_hdr, 33)};
		q_l4 = b_l4;
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
		case (b_penc)  // q_proto's encoding (SA's)
		nx_core_pkg::P_TCP: begin
			q_penc = nx_core_pkg::P_TCP;
			q_bl4 = b_tbad4[b_ihl] || b_tlen;  // doff < 5, doff * 4 > l4len; l4len < 20 (SB)
			q_tcpc = (q_flags[2:0] != 3'd0);
			q_l4c = {q_l4[135:128], q_l4[143:136]};
		end
		nx_core_pkg::P_UDP: begin
			q_penc = nx_core_pkg::P_UDP;
			q_bl4 = b_ubad4[b_ihl] || b_lt8;  // udp.len < 8, udp.len > l4len; l4len < 8 (SB)
			q_l4c = {q_l4[55:48], q_l4[63:56]};
		end
		nx_core_pkg::P_ICMP: begin
			q_penc = nx_core_pkg::P_ICMP;
			q_bl4 = b_lt8;  // l4len < 8 (SB)
			q_icmp = (q_type != 8'd0) && (q_type != 8'd8);
			q_l4c = {q_l4[23:16], q_l4[31:24]};
		end
		default: ;
		endcase
		q_hash = nx_core_pkg::nx_hash_b(b_h1);
	end

	logic s1_valid;
	logic s1_dis, s1_nfu, s1_nip, s1_bip, s1_pool, s1_ttl, s1_frag, s1_proto, s1_bl4, s1_icmp, s1_tcpc;
	logic [1:0] s1_penc;
	logic [31:0] s1_kaddr, s1_raddr, s1_da;
	logic [15:0] s1_kport, s1_rport, s1_tot, s1_ipc, s1_l4c;
	logic [7:0] s1_ttl8, s1_proto8;
	logic [6:0] s1_poff, s1_coff;
	logic [31:0] s1_h2;             // the hash but its last step (S1b's)
	logic s1_pb;                    // the slot carries port B's request, not a lookup
	logic [BLOG2-1:0] pb_addr;      // port B's request: the bucket (the table, below)
	logic pb_pend, pb_go, s1_rb, s1b_rb, s2_rb, s3_rb; // a read back: waiting, issued, in S1, S1b, S2, S3

	always_ff @(posedge clk) begin
		if (rst)
			s1_valid <= 1'b0;
		else
			s1_valid <= b_valid;
		s1_dis <= !enable;
		s1_nfu <= b_nfu;
		s1_nip <= b_nip;
		s1_bip <= b_bip4 != 4'd0;  // and the checksum: S2 and S3 fold the sum, S4 checks it
		s1_pool <= DIR == 0 ? (b_pool8 == 8'hff) : (b_pool8 != 8'hff);
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
		s1_poff <= b_poff;
		s1_coff <= b_coff;
		// an idle slot (no header in SB) carries a waiting read back (or commit) to the
		// table instead
		s1_h2 <= q_hash;
		s1_pb <= pb_go;
		s1_rb <= pb_go && !pb_wr;
	end

	// ---------------- S1b: the bucket (the hash's last step, or port B's) beside the
	// table's block RAMs; the header checksum's sum. S1's other fields
	// ride to S2 through a delay line (S1b has nothing else to do with them) ----------------
	logic s1b_valid;
	logic [BLOG2-1:0] s1b_bucket;
	logic [20:0] s1b_hsum;         // the IPv4 header's words' sum (c_acc, read in S1)
	logic [31:0] q_bkt;
	assign q_bkt = nx_core_pkg::nx_hash_c(s1_h2);
	always_ff @(posedge clk) begin
		if (rst)
			s1b_valid <= 1'b0;
		else
			s1b_valid <= s1_valid;
		s1b_bucket <= s1_pb ? pb_addr : q_bkt[BLOG2-1:0];
		s1b_hsum <= c_acc;
	end

	// ---------------- the table: WAYS memories, one bucket read per cycle ----------------
	// Port A reads the bucket S1 addresses: a lookup's, or in a slot without a header a
	// read back's (the control plane's E_READ), whose addressed way goes from the ways'
	// registers (rq, S3) into tr_data. Port B only writes (a commit, E_COMMIT), in such a
	// slot too: the write never meets a lookup's read of the same word, so nothing depends
	// on what a block RAM returns then (no_rw_check: synthesis adds no logic for it, and
	// each block RAM's read data goes straight into rq). One read port and one write port
	// make each way's memory a simple dual-port block RAM (a second read port would make
	// synthesis copy every way's memory). The control plane's request goes into this
	// direction's registers first (enabled by this direction's request, so the two
	// directions' copies stay two): the memories' write data, address and enables come
	// from registers beside them.
	logic [EW-1:0] rd [0:WAYS-1];
	logic [EW-1:0] rq [0:WAYS-1];   // the ways one cycle on (S3; on ECP5 the block RAMs' output registers)
	logic [WAYS-1:0] pb_we;
	logic [EW-1:0] pb_data;
	logic [3:0] pb_way;             // the way a commit writes or a read back reads (none above WAYS - 1)
	logic pb_wr;                    // the request is a commit
	logic pb_wdone;                 // the commit's slot (its word written, if its way exists)
	logic pb_cw;                    // pb_go a cycle on, for a commit
	// A request waits (pb_pend) for a cycle in which SB holds no header: pb_go, set the
	// cycle before from SA's valid, marks that slot: S1b holds no lookup two cycles after,
	// when a read back's bucket is read (S1 and S1b carry it) or a commit's word written
	// (pb_we). Frames of two beats or more leave such a slot at least every other cycle;
	// only single-beat frames back to back hold a request off, for as long as they last
	// (the register write's answer waits, the frames do not). pb_done: the read back is
	// in tr_data, or the commit's word written.
	always_ff @(posedge clk) begin
		pb_cw <= pb_go && pb_wr;
		for (int w = 0; w < WAYS; w++)
			pb_we[w] <= pb_cw && pb_way == 4'(w);
		pb_wdone <= pb_cw;   // whatever the way (none above WAYS - 1 is written)
		if (tw_en || tr_en) begin
			pb_addr <= tw_en ? tw_bucket : tr_bucket;
			pb_way <= tw_en ? tw_way : tr_way;
			pb_wr <= tw_en;
		end
		if (tw_en)
			pb_data <= tw_data;
		pb_go <= (pb_pend || tr_en || tw_en) && !pb_go && !a_valid;
		if (tr_en || tw_en)
			pb_pend <= 1'b1;
		else if (pb_go)
			pb_pend <= 1'b0;
		s1b_rb <= s1_rb;
		s2_rb <= s1b_rb;
		s3_rb <= s2_rb;
		pb_done <= s3_rb || pb_wdone;
		if (s3_rb) begin
			tr_data <= '0;
			for (int w = 0; w < WAYS; w++)
				if (pb_way == 4'(w))
					tr_data <= rq[w];
		end
		if (rst) begin
			pb_cw <= 1'b0;
			pb_we <= '0;
			pb_wdone <= 1'b0;
			pb_pend <= 1'b0;
			pb_go <= 1'b0;
			s1_rb <= 1'b0;
			s1b_rb <= 1'b0;
			s2_rb <= 1'b0;
			s3_rb <= 1'b0;
			pb_done <= 1'b0;
		end
	end
	genvar gw;
	generate
		for (gw = 0; gw < WAYS; gw++) begin : g_way
			(* no_rw_check *) logic [EW-1:0] mem [0:BUCKETS-1];
			initial begin
				for (int i = 0; i < BUCKETS; i++)
					mem[i] = '0;
			end
			// port B's request: this way's own copy (beside its block RAM; the ways'
			// different initial values, never used, keep synthesis from merging them)
			logic [BLOG2-1:0] w_addr = BLOG2'(gw);
			logic [EW-1:0] w_data = EW'(gw);
			always_ff @(posedge clk) begin
				w_addr <= pb_addr;
				w_data <= pb_data;
			end
			always_ff @(posedge clk) begin
				rd[gw] <= mem[s1b_bucket];
			end
			always_ff @(posedge clk) begin
				if (pb_we[gw])
					mem[w_addr] <= w_data;
			end
		end
	endgenerate

	// ---------------- beside the table read: S1's fields two cycles on (S1b's delay) ----------------
	logic s2_valid;
	logic s2_dis, s2_nfu, s2_nip, s2_bip, s2_pool, s2_ttl, s2_frag, s2_proto, s2_bl4, s2_icmp, s2_tcpc;
	logic [1:0] s2_penc;
	logic [31:0] s2_kaddr, s2_raddr, s2_da;
	logic [15:0] s2_kport, s2_rport, s2_tot, s2_ipc, s2_l4c;
	logic [7:0] s2_ttl8, s2_proto8;
	logic [6:0] s2_poff, s2_coff;
	logic [BLOG2-1:0] s2_bucket;
	logic [16:0] s2_hf1;           // the header checksum folded: the sum's two halves added

	localparam int S2W = 11 + 2 + 3 * 32 + 5 * 16 + 2 * 8 + 2 * 7;
	nx_dly #(.W(S2W), .N(2)) u_s1s2 (
		.clk,
		.d({s1_dis, s1_nfu, s1_nip, s1_bip, s1_pool, s1_ttl, s1_frag, s1_proto, s1_bl4, s1_icmp, s1_tcpc,
		    s1_penc, s1_kaddr, s1_raddr, s1_da, s1_kport, s1_rport, s1_tot, s1_ipc, s1_l4c,
		    s1_ttl8, s1_proto8, s1_poff, s1_coff}),
		.q({s2_dis, s2_nfu, s2_nip, s2_bip, s2_pool, s2_ttl, s2_frag, s2_proto, s2_bl4, s2_icmp, s2_tcpc,
		    s2_penc, s2_kaddr, s2_raddr, s2_da, s2_kport, s2_rport, s2_tot, s2_ipc, s2_l4c,
		    s2_ttl8, s2_proto8, s2_poff, s2_coff})
	);
	always_ff @(posedge clk) begin
		if (rst)
			s2_valid <= 1'b0;
		else
			s2_valid <= s1b_valid;
		s2_bucket <= s1b_bucket;
		s2_hf1 <= {1'b0, s1b_hsum[15:0]} + {12'd0, s1b_hsum[20:16]};
	end


	// ---------------- the next hops: this direction's own copy ----------------
	localparam int RW = 3 + 48 + 48; // {found, punt, inside, dmac, smac}
	// the index of the set bit of a one-hot (or zero) vector: each bit of it the OR of the
	// inputs whose index has it (nh_we is one-hot: no priority chain needed)
	function automatic logic [$clog2(NH)-1:0] nh_oenc(input logic [NH-1:0] m);
		nh_oenc = '0;
		for (int i = 0; i < NH; i++)
			nh_oenc = nh_oenc | (m[i] ? ($clog2(NH))'(i) : '0);
	endfunction

	// the first match's index in two steps, a register between: each group of four's
	// "any" and lowest index (nh_grp), then the first group with one and its index
	// (nh_pick): the lowest set bit's index, without a 16-input priority chain in one cycle
	localparam int NG = NH / 4;
	function automatic logic [3*NG-1:0] nh_grp(input logic [NH-1:0] m);
		for (int g = 0; g < NG; g++) begin
			nh_grp[3*g+2] = m[4*g +: 4] != 4'd0;
			nh_grp[3*g +: 2] = m[4*g] ? 2'd0 : m[4*g+1] ? 2'd1 : m[4*g+2] ? 2'd2 : 2'd3;
		end
	endfunction
	function automatic logic [$clog2(NH):0] nh_pick(input logic [3*NG-1:0] gr);  // {any, index}
		nh_pick = '0;
		for (int g = NG - 1; g >= 0; g--)
			if (gr[3*g+2])
				nh_pick = {1'b1, ($clog2(NH)-2)'(g), gr[3*g +: 2]};
	endfunction
	// Written from the core's staged next hop, DIR + 1 cycles after the commit's enable (the
	// two copies' different enables also keep synthesis from merging them into one): each
	// copy sits beside the lookup that reads it.
	logic [NH-1:0]    nh_valid;
	logic [NH*32-1:0] nh_addr, nh_mask;
	// the fields a matching entry gives ({to the CPU, egress inside, dmac, smac}) are read
	// by the first match's index, so they sit in a small memory (distributed RAM: one
	// LUT's delay from the index to the fields), written with the entry
	logic [RW-2:0]    nh_f [0:NH-1];
	logic [$clog2(NH)-1:0] nh_wa;
	logic             nh_wv;
	// nh_we through two registers in both directions (a register beside the core's decode,
	// one beside the copy); the directions' different initial values (never used: reset
	// clears nh_we first) keep synthesis from merging the two directions' registers
	logic [NH-1:0]    nh_we1 = DIR == 0 ? '0 : '1;
	logic [NH-1:0]    nh_wel = DIR == 0 ? '0 : '1;
	// the staged next hop copied beside the copy every cycle (the core's staging registers
	// would otherwise drive all 32 entries of both directions across the die); the staging
	// registers are written by earlier register writes than NH_COMMIT's, so the copy holds
	// their value long before nh_wel
	logic [2:0]  nl_ctl = 3'(DIR);
	logic [31:0] nl_addr = 32'(DIR), nl_mask = 32'(DIR);
	logic [47:0] nl_dmac = 48'(DIR), nl_smac = 48'(DIR);
	always_ff @(posedge clk) begin
		nl_ctl <= n_ctl;
		nl_addr <= n_addr;
		nl_mask <= n_mask;
		nl_dmac <= n_dmac;
		nl_smac <= n_smac;
	end
	always_ff @(posedge clk) begin
		nh_we1 <= nh_we;
		nh_wel <= nh_we1;
		nh_wa <= nh_oenc(nh_we1);
		nh_wv <= nh_we1 != '0;
		if (nh_wv)
			nh_f[nh_wa] <= {nl_ctl[2], nl_ctl[1], nl_dmac, nl_smac};
		if (rst)
			nh_valid <= '0;
		for (int i = 0; i < NH; i++)
			if (nh_wel[i]) begin
				if (!rst)
					nh_valid[i] <= nl_ctl[0];
				nh_addr[32*i +: 32] <= nl_addr;
				nh_mask[32*i +: 32] <= nl_mask;
			end
	end

	// ---------------- S2: the ways' entries into registers; outbound next-hop match ----------------
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

	// next-hop lookup in four steps, a register after each: each entry's prefix compared
	// with the address in eight 4-bit pieces; the valid entries whose pieces all match;
	// the lowest-numbered of them (one-hot); its fields
	function automatic logic [NH*8-1:0] nh_cmp(input logic [31:0] a,
						    input logic [NH*32-1:0] ad, input logic [NH*32-1:0] mk);
		for (int i = 0; i < NH; i++)
			for (int c = 0; c < 8; c++)
				nh_cmp[8*i + c] = (a[4*c +: 4] & mk[32*i + 4*c +: 4]) == ad[32*i + 4*c +: 4];
	endfunction

	function automatic logic [NH-1:0] nh_match(input logic [NH*8-1:0] c, input logic [NH-1:0] v);
		for (int i = 0; i < NH; i++)
			nh_match[i] = v[i] && c[8*i +: 8] == 8'hff;
	endfunction

	// the lowest-numbered match, one-hot: none below it in its group of four, none in a
	// lower group (NH a multiple of 4)

	// the selected entry's fields in two steps: each group of four's OR of its selected
	// entry (one register per group), then the groups' OR

	localparam int EB = $clog2(ENTRIES);
	logic [15:0] v_stage; // v_stage[k]: register stage k holds a packet (3: S3, 4: S4, 5: S4b, 6: S5, ... 12: the result)
	always_ff @(posedge clk) begin
		if (rst)
			v_stage <= '0;
		else
			v_stage <= {v_stage[14:0], 1'b0} | {12'd0, s2_valid, 3'd0};
	end

	logic s3_dis, s3_nfu, s3_nip, s3_bip, s3_pool, s3_ttl, s3_frag, s3_proto, s3_bl4, s3_icmp, s3_tcpc;
	logic [1:0] s3_penc;
	logic [31:0] s3_kaddr, s3_raddr;
	logic [15:0] s3_kport, s3_rport, s3_tot, s3_ipc, s3_l4c;
	logic [7:0] s3_ttl8, s3_proto8;
	logic [6:0] s3_poff, s3_coff;
	logic [BLOG2-1:0] s3_bucket;
	logic [15:0] s3_hf2;           // and their carry (nx_csum_fold's sum, before its complement)
	logic [NH*8-1:0] n3_c;

	always_ff @(posedge clk) begin
		{s3_dis, s3_nfu, s3_nip, s3_bip, s3_pool, s3_ttl, s3_frag, s3_proto, s3_bl4, s3_icmp, s3_tcpc} <=
			{s2_dis, s2_nfu, s2_nip, s2_bip, s2_pool, s2_ttl, s2_frag, s2_proto, s2_bl4, s2_icmp, s2_tcpc};
		s3_penc <= s2_penc;
		s3_kaddr <= s2_kaddr;
		s3_raddr <= s2_raddr;
		s3_kport <= s2_kport;
		s3_rport <= s2_rport;
		s3_tot <= s2_tot;
		s3_ipc <= s2_ipc;
		s3_l4c <= s2_l4c;
		s3_ttl8 <= s2_ttl8;
		s3_proto8 <= s2_proto8;
		s3_poff <= s2_poff;
		s3_coff <= s2_coff;
		s3_bucket <= s2_bucket;
		s3_hf2 <= s2_hf1[15:0] + {15'd0, s2_hf1[16]};
		for (int w = 0; w < WAYS; w++)
			rq[w] <= rd[w];
		n3_c <= DIR == 0 ? nh_cmp(s2_da, nh_addr, nh_mask) : '0;
	end

	// ---------------- S3: compare the ways in 2-bit pieces, each into a register (S4 ANDs
	// them): the key's 50 bits {port, address, protocol} in 25 pieces, the valid bit with
	// the last; the remote's 48 bits {port, address} in 24, each true when the entry is not
	// remote-bound; the header checksum's verdict. A piece is one LUT after the table's
	// block RAM output register, whose data crosses the die to here ----------------
	localparam int PW = 2, KC = 50 / PW, RC = 48 / PW, WC = KC + RC;
	logic [WC-1:0] wc [0:WAYS-1];
	always_comb begin
		for (int w = 0; w < WAYS; w++) begin
			logic [49:0] ke, kk;
			logic [47:0] re, rk;
			ke = rq[w][51:2];
			kk = {s3_kport, s3_kaddr, s3_penc};
			re = rq[w][99:52];
			rk = {s3_rport, s3_raddr};
			for (int c = 0; c < KC; c++)
				wc[w][c] = ke[PW*c +: PW] == kk[PW*c +: PW] && (c != KC - 1 || rq[w][0]);
			for (int c = 0; c < RC; c++)
				wc[w][KC + c] = !rq[w][1] || re[PW*c +: PW] == rk[PW*c +: PW];
		end
	end

	logic s4_dis, s4_nfu, s4_nip, s4_bip, s4_pool, s4_ttl, s4_frag, s4_proto, s4_bl4, s4_icmp, s4_tcpc;
	logic [1:0] s4_penc;
	logic [31:0] s4_kaddr;
	logic [15:0] s4_kport, s4_tot, s4_ipc, s4_l4c;
	logic [7:0] s4_ttl8, s4_proto8;
	logic [6:0] s4_poff, s4_coff;
	logic [BLOG2-1:0] s4_bucket;
	logic [WC-1:0] s4_wc [0:WAYS-1];
	logic [WAYS-1:0] s4_hv;
	logic [47:0] s4_x [0:WAYS-1];   // each way's {new port, new address}
	logic [NH-1:0] n4_m;
	logic s4_hbad;                 // the IPv4 header checksum is wrong (its fold is not 0)

	always_ff @(posedge clk) begin
		{s4_dis, s4_nfu, s4_nip, s4_pool, s4_ttl, s4_frag, s4_proto, s4_bl4, s4_icmp, s4_tcpc} <=
			{s3_dis, s3_nfu, s3_nip, s3_pool, s3_ttl, s3_frag, s3_proto, s3_bl4, s3_icmp, s3_tcpc};
		s4_bip <= s3_bip;
		s4_hbad <= s3_hf2 != 16'hffff;
		s4_penc <= s3_penc;
		s4_kaddr <= s3_kaddr;
		s4_kport <= s3_kport;
		s4_tot <= s3_tot;
		s4_ipc <= s3_ipc;
		s4_l4c <= s3_l4c;
		s4_ttl8 <= s3_ttl8;
		s4_proto8 <= s3_proto8;
		s4_poff <= s3_poff;
		s4_coff <= s3_coff;
		s4_bucket <= s3_bucket;
		for (int w = 0; w < WAYS; w++) begin
			s4_wc[w] <= wc[w];
			s4_x[w] <= rq[w][147:100];
		end
		n4_m <= DIR == 0 ? nh_match(n3_c, nh_valid) : '0;
	end

	// ---------------- S4: the ways that match (all their pieces equal); the outbound next hop's first match ----------------
	always_comb
		for (int w = 0; w < WAYS; w++)
			s4_hv[w] = &s4_wc[w];
	logic s4b_dis, s4b_nfu, s4b_nip, s4b_bip, s4b_pool, s4b_ttl, s4b_frag, s4b_proto, s4b_bl4, s4b_icmp, s4b_tcpc;
	logic [1:0] s4b_penc;
	logic [31:0] s4b_kaddr;
	logic [15:0] s4b_kport, s4b_tot, s4b_ipc, s4b_l4c;
	logic [7:0] s4b_ttl8, s4b_proto8;
	logic [6:0] s4b_poff, s4b_coff;
	logic [BLOG2-1:0] s4b_bucket;
	logic [WAYS-1:0] s4b_hv;          // the ways that match (none: a miss)
	logic [47:0] s4b_x [0:WAYS-1];
	logic [3*NG-1:0] n4b_gr;          // the outbound next hop's matches by group of four (nh_grp)

	always_ff @(posedge clk) begin
		{s4b_dis, s4b_nfu, s4b_nip, s4b_pool, s4b_ttl, s4b_frag, s4b_proto, s4b_bl4, s4b_icmp, s4b_tcpc} <=
			{s4_dis, s4_nfu, s4_nip, s4_pool, s4_ttl, s4_frag, s4_proto, s4_bl4, s4_icmp, s4_tcpc};
		s4b_bip <= s4_bip || s4_hbad;
		s4b_penc <= s4_penc;
		s4b_kaddr <= s4_kaddr;
		s4b_kport <= s4_kport;
		s4b_tot <= s4_tot;
		s4b_ipc <= s4_ipc;
		s4b_l4c <= s4_l4c;
		s4b_ttl8 <= s4_ttl8;
		s4b_proto8 <= s4_proto8;
		s4b_poff <= s4_poff;
		s4b_coff <= s4_coff;
		s4b_bucket <= s4_bucket;
		s4b_hv <= s4_hv;
		for (int w = 0; w < WAYS; w++)
			s4b_x[w] <= s4_x[w];
		n4b_gr <= DIR == 0 ? nh_grp(n4_m) : '0;
	end

	// ---------------- S4b: the hit way (the lowest-numbered) and its fields selected; the outbound next hop's fields ----------------
	logic [47:0] c_x;
	logic [3:0] c_way;
	always_comb begin
		c_x = 48'd0;
		c_way = 4'd0;
		for (int w = WAYS - 1; w >= 0; w--)
			if (s4b_hv[w]) begin
				c_x = s4b_x[w];
				c_way = 4'(w);
			end
	end

	logic s5_dis, s5_nfu, s5_nip, s5_bip, s5_pool, s5_ttl, s5_frag, s5_proto, s5_bl4, s5_icmp, s5_tcpc;
	logic [1:0] s5_penc;
	logic [31:0] s5_kaddr, s5_xaddr;
	logic [15:0] s5_kport, s5_xport, s5_tot, s5_ipc, s5_l4c;
	logic [7:0] s5_ttl8, s5_proto8;
	logic [6:0] s5_poff, s5_coff;
	logic s5_hit;
	logic [EB-1:0] s5_eidx;
	logic [$clog2(NH):0] n5_pick;     // the outbound next hop: {any, the first match's index}

	always_ff @(posedge clk) begin
		{s5_dis, s5_nfu, s5_nip, s5_bip, s5_pool, s5_ttl, s5_frag, s5_proto, s5_bl4, s5_icmp, s5_tcpc} <=
			{s4b_dis, s4b_nfu, s4b_nip, s4b_bip, s4b_pool, s4b_ttl, s4b_frag, s4b_proto, s4b_bl4, s4b_icmp, s4b_tcpc};
		s5_penc <= s4b_penc;
		s5_kaddr <= s4b_kaddr;
		s5_kport <= s4b_kport;
		s5_tot <= s4b_tot;
		s5_ipc <= s4b_ipc;
		s5_l4c <= s4b_l4c;
		s5_ttl8 <= s4b_ttl8;
		s5_proto8 <= s4b_proto8;
		s5_poff <= s4b_poff;
		s5_coff <= s4b_coff;
		s5_hit <= s4b_hv != '0;
		s5_xaddr <= c_x[31:0];
		s5_xport <= c_x[47:32];
		s5_eidx <= EB'(s4b_bucket) * EB'(WAYS) + EB'(c_way);
		n5_pick <= DIR == 0 ? nh_pick(n4b_gr) : '0;
	end

	// ---------------- S5: the reason's checks before the outbound route (x_pre) and those
	// between it and the inbound route (x_post); the outbound next hop's fields (the
	// groups' OR); the inbound next hop's prefix compares; the checksum differences ----------------
	// nx_rewrite: the address into the IP checksum, address and port into TCP/UDP's, the
	// identifier alone into ICMP's; then nx_redirect: the TTL word. Each
	// nx_csum_apply(sum, diff) = nx_csum_fold(~sum + diff) is spread over the registers:
	// the differences (S5; diff4 as the sum of its halves' diff2), their sums (S6), the
	// sums with ~checksum (S7), the folds (S8), the TTL word's apply (S9, S10).
	logic [4:0] x_pre, x_post;
	logic [31:0] x_dlo, x_dhi, x_dport, x_dttl;
	logic [7:0] x_ttl;
	always_comb begin
		if (s5_dis) x_pre = nx_core_pkg::R_DISABLED;
		else if (s5_nfu) x_pre = nx_core_pkg::R_NOT_FOR_US;
		else if (s5_nip) x_pre = nx_core_pkg::R_NOT_IPV4;
		else if (s5_bip) x_pre = nx_core_pkg::R_BAD_IP;
		else if (s5_pool) x_pre = DIR == 0 ? nx_core_pkg::R_HAIRPIN : nx_core_pkg::R_NOT_POOL;
		else x_pre = nx_core_pkg::R_XLATE;
		if (s5_ttl) x_post = nx_core_pkg::R_TTL;
		else if (s5_frag) x_post = nx_core_pkg::R_FRAGMENT;
		else if (s5_proto) x_post = nx_core_pkg::R_PROTO;
		else if (s5_bl4) x_post = nx_core_pkg::R_BAD_L4;
		else if (s5_icmp) x_post = nx_core_pkg::R_ICMP;
		else if (s5_tcpc) x_post = nx_core_pkg::R_TCP_CTRL;
		else if (!s5_hit) x_post = nx_core_pkg::R_MISS;
		else x_post = nx_core_pkg::R_XLATE;
		x_dlo = nx_csum_pkg::nx_csum_diff2(s5_kaddr[15:0], s5_xaddr[15:0]);
		x_dhi = nx_csum_pkg::nx_csum_diff2(s5_kaddr[31:16], s5_xaddr[31:16]);
		x_dport = nx_csum_pkg::nx_csum_diff2(s5_kport, s5_xport);
		x_ttl = s5_ttl8 - 8'd1;
		x_dttl = nx_csum_pkg::nx_csum_diff2({s5_ttl8, s5_proto8}, {x_ttl, s5_proto8});
	end

	logic [4:0] s6_pre, s6_post;
	logic s6_mtu, s6_icmp;
	logic [31:0] s6_dlo, s6_dhi, s6_dport, s6_dttl;
	logic [15:0] s6_ipc, s6_l4c;
	logic [NH*8-1:0] n6_c;
	logic [RW-1:0] r6;
	always_ff @(posedge clk) begin
		s6_pre <= x_pre;
		s6_post <= x_post;
		s6_mtu <= s5_tot > mtu;
		r6 <= DIR == 0 ? {n5_pick[$clog2(NH)], nh_f[n5_pick[$clog2(NH)-1:0]]} : '0;
		s6_icmp <= s5_penc == nx_core_pkg::P_ICMP;
		s6_dlo <= x_dlo;
		s6_dhi <= x_dhi;
		s6_dport <= x_dport;
		s6_dttl <= x_dttl;
		s6_ipc <= s5_ipc;
		s6_l4c <= s5_l4c;
		n6_c <= DIR == 1 ? nh_cmp(s5_xaddr, nh_addr, nh_mask) : '0;
	end

	// the fields that only ride along, S5 to S10: {ttl - 1, address, port, offsets, entry,
	// UDP, no transport checksum}
	localparam int CW = 8 + 32 + 16 + 7 + 7 + EB + 2;
	logic [CW-1:0] k10;
	nx_dly #(.W(CW), .N(5)) u_ride (
		.clk, .d({x_ttl, s5_xaddr, s5_xport, s5_poff, s5_coff, s5_eidx,
			  s5_penc == nx_core_pkg::P_UDP, s5_l4c == 16'd0}),
		.q(k10)
	);
	// the reason's parts and the outbound next hop, S6 to S10
	logic [4:0] s10_pre, s10_post;
	logic s10_mtu;
	logic [RW-1:0] r10_out;
	nx_dly #(.W(11 + RW), .N(4)) u_rsn (.clk, .d({s6_pre, s6_post, s6_mtu, r6}),
					   .q({s10_pre, s10_post, s10_mtu, r10_out}));

	// S6: the differences' sums; the inbound next hop's matches
	logic s7_icmp;
	logic [31:0] s7_dip, s7_dpp, s7_dhi, s7_dport, s7_dttl;
	logic [15:0] s7_ipc, s7_l4c;
	logic [NH-1:0] n7_m;
	always_ff @(posedge clk) begin
		s7_icmp <= s6_icmp;
		s7_dip <= s6_dlo + s6_dhi;   // nx_csum_diff4(key address, new address)
		s7_dpp <= s6_dlo + s6_dport;
		s7_dhi <= s6_dhi;
		s7_dport <= s6_dport;
		s7_dttl <= s6_dttl;
		s7_ipc <= s6_ipc;
		s7_l4c <= s6_l4c;
		n7_m <= DIR == 1 ? nh_match(n6_c, nh_valid) : '0;
	end

	// S7: the sums with the old checksums; the inbound next hop's first match
	logic [31:0] s8_tip, s8_dsum, s8_dttl;
	logic [15:0] s8_l4c;
	logic [3*NG-1:0] n8_gr;           // the inbound next hop's matches by group of four
	always_ff @(posedge clk) begin
		s8_tip <= {16'd0, ~s7_ipc} + s7_dip;
		s8_dsum <= s7_icmp ? s7_dport : s7_dpp + s7_dhi;
		s8_dttl <= s7_dttl;
		s8_l4c <= s7_l4c;
		n8_gr <= DIR == 1 ? nh_grp(n7_m) : '0;
	end

	// S8: the first folds; the inbound next hop's fields in each group
	logic [15:0] s9_ipc1;
	logic [31:0] s9_tl4, s9_dttl;
	logic [$clog2(NH):0] n9_pick;     // the inbound next hop: {any, the first match's index}
	always_ff @(posedge clk) begin
		s9_ipc1 <= nx_csum_pkg::nx_csum_fold(s8_tip);
		s9_tl4 <= {16'd0, ~s8_l4c} + s8_dsum;
		s9_dttl <= s8_dttl;
		n9_pick <= DIR == 1 ? nh_pick(n8_gr) : '0;
	end

	// S9: the TTL word's sum; the transport checksum's fold; the inbound next hop's fields
	// (the groups' OR)
	logic [31:0] s10_tip2;
	logic [15:0] s10_l4r;
	logic [RW-1:0] r10_in;
	always_ff @(posedge clk) begin
		s10_tip2 <= {16'd0, ~s9_ipc1} + s9_dttl;
		s10_l4r <= nx_csum_pkg::nx_csum_fold(s9_tl4);
		r10_in <= DIR == 1 ? {n9_pick[$clog2(NH)], nh_f[n9_pick[$clog2(NH)-1:0]]} : '0;
	end

	// S10: the reason (the checks before the outbound route, the outbound route, those
	// between it and the inbound route, the inbound route, the MTU, in this order); the
	// TTL word's fold, UDP's rule for 0; the result (S11's registers)
	logic [4:0] x_reason;
	logic [RW-1:0] r10;
	assign r10 = DIR == 0 ? r10_out : r10_in;
	logic x_xlate;  // x_reason == R_XLATE, from the parts directly (the activity bit's enable)
	assign x_xlate = s10_pre == nx_core_pkg::R_XLATE && s10_post == nx_core_pkg::R_XLATE && !s10_mtu &&
			 r10[RW-1] && !r10[RW-2] && (r10[RW-3] == (DIR == 1));
	always_comb begin
		logic [4:0] rr;
		rr = nh_rsn(r10[RW-1], r10[RW-2], r10[RW-3]);
		if (s10_pre != nx_core_pkg::R_XLATE) x_reason = s10_pre;
		else if (DIR == 0 && rr != nx_core_pkg::R_XLATE) x_reason = rr;
		else if (s10_post != nx_core_pkg::R_XLATE) x_reason = s10_post;
		else if (DIR == 1 && rr != nx_core_pkg::R_XLATE) x_reason = rr;
		else if (s10_mtu) x_reason = nx_core_pkg::R_MTU;
		else x_reason = nx_core_pkg::R_XLATE;
	end

	logic [15:0] w_l4c;
	logic k_udp, k_l4zero;
	assign k_udp = k10[1];
	assign k_l4zero = k10[0];
	always_comb begin
		if (k_udp && k_l4zero)
			w_l4c = 16'd0;      // nx_udp_csum_apply: no checksum stays none
		else if (k_udp && s10_l4r == 16'd0)
			w_l4c = 16'hffff;   // a computed 0 is sent as 0xffff
		else
			w_l4c = s10_l4r;
	end

	logic f_valid;
	logic [4:0] f_reason;
	logic [95:0] f_mac;
	logic [7:0] f_ttl;
	logic [15:0] f_ipc, f_l4c, f_xport;
	logic [31:0] f_xaddr;
	logic [6:0] f_poff, f_coff;
	logic f_set;                // a translated frame: its activity bit (word f_seta, bit f_setb)
	logic [EB-6:0] f_seta;
	logic [31:0] f_setb;
	assign f_valid = v_stage[12];
	always_ff @(posedge clk) begin
		f_reason <= x_reason;
		f_mac <= r10[95:0];
		f_ipc <= nx_csum_pkg::nx_csum_fold(s10_tip2);
		f_l4c <= w_l4c;
		{f_ttl, f_xaddr, f_xport, f_poff, f_coff} <= k10[CW-1:EB+2];
		f_set <= v_stage[11] && x_xlate;
		f_seta <= k10[2 + 5 +: EB - 5];
		f_setb <= 32'd1 << k10[2 +: 5];  // the entry sits above UDP and no-checksum
	end

	// the counters' event: its own registers (the counters sit apart from the meta FIFO);
	// with another initial value than v_stage's (an event of reason 31, which no counter
	// counts), so synthesis keeps them apart from f_valid
	logic ev_v = 1'b1;
	logic [4:0] ev_r = 5'h1f;
	always_ff @(posedge clk) begin
		ev_v <= v_stage[11] && !rst;
		ev_r <= x_reason;
	end
	assign ev_valid = ev_v;
	assign ev_reason = ev_r;

	// activity: set by a translated packet, snapshot-and-clear by the control plane, 32 bits
	// a word. The bits are a memory of AWORDS_P words (block RAM from 4k entries up; not
	// cleared by reset, zero at configuration, like the table), one operation a cycle: issued
	// into registers (r: the memory's read address a register), its word read in the next
	// cycle, its new word computed into a register in the one after and written from
	// there in the next (the memory's write data, address and enable all registers): a
	// set ORs its bit in, a snapshot copies the word into act_word and writes 0. The two
	// operations before one are still on their way to the memory when it reads, so their
	// words are forwarded to it (which, from two equality bits taken beside the read),
	// whatever the memory returns for a read of a word being written. A set goes first; a
	// snapshot waits for a cycle without one.
	// Translated frames are 42 bytes (6 beats) or more and the pipeline keeps their
	// spacing, so a snapshot waits one cycle at most: requested in cycle t (the core's
	// act_snap), act_word holds it from t + 4 (t + 5 after a set), by the time a read
	// accepted with the register write's answer takes it (nx_core). No hit is lost:
	// a set before the snapshot is in it, one after it stays set.
	localparam int AWL = EB - 5;
	logic [31:0] act_mem [0:AWORDS_P-1];
	logic a_pend;                  // a snapshot waiting for a cycle without a set
	logic [AWL-1:0] a_pidx;
	logic i_snap;                  // the operation issued this cycle is a snapshot
	logic [AWL-1:0] i_a;
	logic r_v, r_snap;             // the operation issued the cycle before (its word read this cycle)
	logic [AWL-1:0] r_a;
	logic [31:0] r_b;
	logic o_v, o_snap;             // the operation whose word was read the cycle before
	logic [AWL-1:0] o_a;
	logic [31:0] o_b, o_rd, o_old, o_new;
	logic n_v;                     // the write of this cycle (the operation before)
	logic [AWL-1:0] n_a;
	logic [31:0] n_d;
	logic w_v;                     // the write of the cycle before
	logic [AWL-1:0] w_a;
	logic [31:0] w_d;
	logic fw_n, fw_w;              // the operation read this cycle is on n's word, on w's
	initial
		for (int w = 0; w < AWORDS_P; w++)
			act_mem[w] = 32'd0;
	// the request in registers beside the memory first (the core's sit by its register
	// decode, across the die)
	logic act_snap_l;
	logic [AWL-1:0] act_idx_l;
	always_ff @(posedge clk) begin
		act_snap_l <= act_snap && !rst;
		act_idx_l <= act_idx[AWL-1:0];
	end
	assign i_snap = (act_snap_l || a_pend) && !f_set;
	assign i_a = f_set ? f_seta : act_snap_l ? act_idx_l : a_pidx;
	assign o_old = fw_n ? n_d : fw_w ? w_d : o_rd;
	assign o_new = o_snap ? 32'd0 : o_old | o_b;
	always_ff @(posedge clk) begin
		r_v <= f_set || i_snap;
		r_snap <= i_snap;
		r_a <= i_a;
		r_b <= f_setb;
		o_rd <= act_mem[r_a];
		if (n_v)
			act_mem[n_a] <= n_d;
		// the operation read now computes its word next cycle, when the one in o is in
		// n and the one in n is in w
		fw_n <= o_v && o_a == r_a;
		fw_w <= n_v && n_a == r_a;
		a_pend <= (act_snap_l || a_pend) && f_set;
		if (act_snap_l)
			a_pidx <= act_idx_l;
		o_v <= r_v;
		o_snap <= r_snap;
		o_a <= r_a;
		o_b <= r_b;
		n_v <= o_v;
		n_a <= o_a;
		n_d <= o_new;
		w_v <= n_v;
		w_a <= n_a;
		w_d <= n_d;
		if (o_v && o_snap)
			act_word <= o_old;
		if (rst) begin
			a_pend <= 1'b0;
			r_v <= 1'b0;
			o_v <= 1'b0;
			n_v <= 1'b0;
			w_v <= 1'b0;
			fw_n <= 1'b0;
			fw_w <= 1'b0;
		end
	end

	// the frame's beats, beside the lookup pipeline from p0 to the result (f_*): 14 stages
	logic [DLOG2:0] f_nb;
	nx_dly #(.W(DLOG2 + 1), .N(15)) u_nb (.clk, .d(p0_nb), .q(f_nb));

	// meta FIFO: {reason, dmac, smac, ttl, ipc, addr, port, poff, l4c, coff, poff + 1,
	// coff + 1}, read at the egress's patch stage; the length FIFO: {to the CPU, one beat,
	// beats}, pushed with it, read by the egress's issuer
	localparam int MW = 5 + 48 + 48 + 8 + 16 + 32 + 16 + 7 + 16 + 7 + 7 + 7;
	localparam int LW = DLOG2 + 3;
	logic m_valid, l_valid, l_pop;
	logic [MW-1:0] m_out;
	logic [LW-1:0] l_out;
	nx_fifo #(.W(MW), .LOG2(MLOG2), .SPLIT(4)) u_meta (
		.clk, .rst, .push(f_valid),
		.din({f_reason, f_mac, f_ttl, f_ipc, f_xaddr, f_xport,
		      f_poff, f_l4c, f_coff, f_poff + 7'd1, f_coff + 7'd1}),
		.pop(meta_pop), .valid(m_valid), .dout(m_out)
	);
	nx_fifo #(.W(LW), .LOG2(MLOG2)) u_len (
		.clk, .rst, .push(f_valid),
		.din({f_reason != nx_core_pkg::R_XLATE, f_nb == (DLOG2+1)'(1), f_nb}),
		.pop(l_pop), .valid(l_valid), .dout(l_out)
	);

	// ---------------- egress ----------------
	// No ready travels back through it. The issuer asks the data FIFO for a frame's beats,
	// one a cycle, while the output FIFO the frame goes to (m or c) has room for every
	// beat asked for and not yet taken from it (a credit count per output, compared a
	// cycle late, so it can pass OLIM by one: OLIM = 2^OLOG2 - 2 keeps it below the
	// FIFO's 2^OLOG2 beats; taken beats it counts a cycle late, so it is never below
	// what the FIFO holds). Each beat comes out of the block
	// RAM's output register two cycles later and goes down a pipeline of plain registers:
	// P (the beat with the frame's metadata, the meta FIFO's output register: the fixed
	// fields' bytes and the variable bytes' selects), G (the selected values ORed into the
	// patch), X (the patched beat, or the beat as it came with its reason) into the output
	// FIFO. A frame's metadata leaves the meta FIFO with its last beat at P; it was
	// written with the length the issuer took, whose FIFO is no faster, so it is there.
	localparam int OLOG2 = 4;
	localparam int OLIM = (1 << OLOG2) - 2;
	logic e_act, e_rem1, e_dst, e_go, e_sw, ok_m, ok_c;
	logic [DLOG2:0] e_rem;
	logic [OLOG2:0] occ_m, occ_c;
	logic m_take, c_take;
	// an output's beats taken are counted a cycle late, from a register beside the count
	// (tready comes from outside, c_tready from the CPU port across the die): the count is
	// then never below the beats its FIFO holds
	logic m_take_q, c_take_q;
	always_ff @(posedge clk) begin
		m_take_q <= m_take && !rst;
		c_take_q <= c_take && !rst;
	end
	assign e_go = e_act && (e_dst ? ok_c : ok_m);
	assign e_sw = !e_act || (e_go && e_rem1);
	assign l_pop = e_sw;      // the FIFO ignores it while it holds nothing
	assign d_rd = e_go;
	always_ff @(posedge clk) begin
		if (rst) begin
			e_act <= 1'b0;
			occ_m <= '0;
			occ_c <= '0;
			ok_m <= 1'b1;
			ok_c <= 1'b1;
		end else begin
			if (e_sw)
				e_act <= l_valid;
			occ_m <= occ_m + (OLOG2+1)'(e_go && !e_dst) - (OLOG2+1)'(m_take_q);
			occ_c <= occ_c + (OLOG2+1)'(e_go && e_dst) - (OLOG2+1)'(c_take_q);
			ok_m <= occ_m < (OLOG2+1)'(OLIM);
			ok_c <= occ_c < (OLOG2+1)'(OLIM);
		end
		if (e_sw) begin
			e_rem <= l_out[DLOG2:0];
			e_rem1 <= l_out[DLOG2+1];
			e_dst <= l_out[DLOG2+2];
		end else if (e_go) begin
			e_rem <= e_rem - 1'b1;
			e_rem1 <= e_rem == (DLOG2+1)'(2);
		end
	end

	// the beat's frame's last beat and destination, beside the memory's two cycles
	logic [1:0] q_v, q_last, q_cpu;
	logic q_pop = 1'b1;
	always_ff @(posedge clk) begin
		q_v <= rst ? 2'b00 : {q_v[0], e_go};
		q_last <= {q_last[0], e_rem1};
		q_cpu <= {q_cpu[0], e_dst};
		q_pop <= q_v[0] && q_last[0] && !rst;
	end
	assign meta_pop = q_pop;    // the frame's last beat at P

	// P: the beat (d_out) and its frame's metadata
	logic [4:0] e_reason;
	logic [47:0] e_dmac, e_smac;
	logic [7:0] e_ttl;
	logic [15:0] e_ipc, e_port, e_l4c;
	logic [31:0] e_addr;
	logic [6:0] e_poff, e_coff, e_poff1, e_coff1;
	logic [3:0] ebeat;
	logic [4:0] ebeat_oh;    // ebeat one-hot while it is below 5 (the beats the fixed fields are in), else 0
	assign {e_reason, e_dmac, e_smac, e_ttl, e_ipc, e_addr, e_port, e_poff, e_l4c, e_coff, e_poff1, e_coff1} = m_out;

	always_ff @(posedge clk) begin
		if (rst) begin
			ebeat <= 4'd0;
			ebeat_oh <= 5'b00001;
		end else if (q_v[1]) begin
			ebeat <= q_last[1] ? 4'd0 : (ebeat == 4'hf ? ebeat : ebeat + 1'b1);
			ebeat_oh <= q_last[1] ? 5'b00001 : {ebeat_oh[3:0], 1'b0};
		end
	end

	// The patch. Each byte of the beat is patched by the field its offset in the frame
	// falls in. The MACs, TTL, IP checksum and address sit at fixed offsets: their value and
	// select for the beat depend on the beat's number alone. The port/identifier and the
	// transport checksum follow IHL: for each of their four bytes, the byte select (the
	// beat is the byte's beat, one-hot of its place in the beat) goes into G with the four
	// values; X takes the patch, the selected values ORed. The fields never overlap in a
	// translated frame (the transport header starts at 34 or later), so a byte is an OR of
	// the selected fields. Beats past the 16th hold no field. The fixed fields are in beats
	// 0 to 4: each byte's value and hit an OR over ebeat_oh's bits of the field byte at that
	// place (constants per bit: no compare of the beat's number on the way).
	logic [95:0] e_macs;
	assign e_macs = {e_dmac, e_smac};
	logic [63:0] e_cval;     // the fixed fields' bytes in this beat
	logic [7:0] e_chit;      // the bytes they patch
	logic [31:0] e_vsel;     // per variable byte (port hi, lo, checksum hi, lo): the bytes it patches
	always_comb begin
		for (int j = 0; j < 8; j++) begin
			logic [6:0] o;
			logic [7:0] v;
			logic hit;
			o = {ebeat, 3'(j)};
			v = 8'd0;
			hit = 1'b0;
			for (int b = 0; b < 5; b++) begin
				int f;  // the byte's offset in the frame when the beat is b
				f = 8 * b + j;
				for (int k = 0; k < 12; k++)
					if (f == k && ebeat_oh[b]) begin
						v = v | e_macs[8 * (11 - k) +: 8];
						hit = 1'b1;
					end
				if (f == 22 && ebeat_oh[b]) begin
					v = v | e_ttl;
					hit = 1'b1;
				end
				if (f == 24 && ebeat_oh[b]) begin
					v = v | e_ipc[15:8];
					hit = 1'b1;
				end
				if (f == 25 && ebeat_oh[b]) begin
					v = v | e_ipc[7:0];
					hit = 1'b1;
				end
				for (int k = 0; k < 4; k++)
					if (f == AOFF + k && ebeat_oh[b]) begin
						v = v | e_addr[8 * (3 - k) +: 8];
						hit = 1'b1;
					end
			end
			e_cval[8*j +: 8] = v;
			e_chit[j] = hit;
			e_vsel[j] = o == e_poff;
			e_vsel[8 + j] = o == e_poff1;
			e_vsel[16 + j] = o == e_coff;
			e_vsel[24 + j] = o == e_coff1;
		end
	end

	// G
	logic g_v = 1'b1;
	logic g_cpu;
	logic [4:0] g_rsn;
	logic [72:0] g_d;
	logic [63:0] g_cval;
	logic [7:0] g_chit;
	logic [31:0] g_vsel, g_vals;
	logic [63:0] e_pval;  // each byte's patch value
	logic [7:0] e_phit;   // the bytes patched
	always_ff @(posedge clk) begin
		g_v <= q_v[1] && !rst;
		g_cpu <= q_cpu[1];
		g_rsn <= e_reason;
		g_d <= d_out;
		g_cval <= e_cval;
		g_chit <= e_chit;
		g_vsel <= e_vsel;
		g_vals <= {e_port, e_l4c};
	end
	always_comb
		for (int j = 0; j < 8; j++) begin
			e_pval[8*j +: 8] = g_cval[8*j +: 8] |
				(g_vsel[j] ? g_vals[31:24] : 8'd0) | (g_vsel[8 + j] ? g_vals[23:16] : 8'd0) |
				(g_vsel[16 + j] ? g_vals[15:8] : 8'd0) | (g_vsel[24 + j] ? g_vals[7:0] : 8'd0);
			e_phit[j] = g_chit[j] | g_vsel[j] | g_vsel[8 + j] | g_vsel[16 + j] | g_vsel[24 + j];
		end

	// X
	logic x_v = 1'b1;
	logic x_cpu;
	logic [4:0] x_rsn;
	logic [72:0] x_d;
	logic [63:0] x_pval, x_pdata;
	logic [7:0] x_phit;
	always_ff @(posedge clk) begin
		x_v <= g_v && !rst;
		x_cpu <= g_cpu;
		x_rsn <= g_rsn;
		x_d <= g_d;
		x_pval <= e_pval;
		x_phit <= e_phit;
	end
	always_comb
		for (int j = 0; j < 8; j++)
			x_pdata[8*j +: 8] = x_phit[j] ? x_pval[8*j +: 8] : x_d[8*j +: 8];

	// the output FIFOs: m_t* and c_t* from their output registers
	logic [72:0] m_q;
	nx_ofifo #(.W(73), .LOG2(OLOG2)) u_mout (
		.clk, .rst, .push(x_v && !x_cpu), .din({x_d[72:64], x_pdata}),
		.valid(m_tvalid), .dout(m_q), .ready(m_tready)
	);
	assign m_take = m_tvalid && m_tready;
	assign m_tdata = m_q[63:0];
	assign m_tkeep = m_q[71:64];
	assign m_tlast = m_q[72];

	logic [77:0] c_q;
	nx_ofifo #(.W(78), .LOG2(OLOG2)) u_cout (
		.clk, .rst, .push(x_v && x_cpu), .din({x_rsn, x_d}),
		.valid(c_tvalid), .dout(c_q), .ready(c_tready)
	);
	assign c_take = c_tvalid && c_tready;
	assign c_tdata = c_q[63:0];
	assign c_tkeep = c_q[71:64];
	assign c_tlast = c_q[72];
	assign c_reason = c_q[77:73];
endmodule
