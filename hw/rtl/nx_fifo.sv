// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// nx_fifo: synchronous first-word-fall-through FIFO. The storage is read synchronously
// (block RAM) into its read register (mq), which feeds the output register (dout) and a
// skid register behind it: the block RAM's clock-to-out ends at a register, never in
// logic, and its read is decided from registers alone (a read whenever the three hold at
// most two words), so pop reaches only the output and skid registers' enables. One push
// and one pop per cycle; a pop while valid is low is ignored (the caller need not AND it
// with valid, so each column's enables see the caller's registers and their own). The
// caller keeps the words held at most DEPTH (the core: by its count of frames in flight).
// SPLIT > 1 cuts the storage and the output registers
// into that many column slices, each with its own copy of the pointers and of the output
// control (beside it; the copies' different initial values, never used, keep synthesis
// from merging them).
//
// Also here: nx_rfifo (the data FIFO: block RAM read on request, two cycles), nx_ofifo (a
// stream output's small FIFO: valid and data registers, ready pops), nx_slice (a
// two-entry register slice: valid, data and ready all registered at the outputs; the CPU
// port's) and nx_dly (a plain delay line), the core's pipeline helpers. nx_fifo holds the
// egress's metadata and frame lengths.

module nx_fifo #(
	parameter int W = 8,
	parameter int LOG2 = 4,
	parameter int SPLIT = 1
) (
	input  logic         clk,
	input  logic         rst,
	input  logic         push,
	input  logic [W-1:0] din,
	input  logic         pop,
	output logic         valid,
	output logic [W-1:0] dout
);
	localparam int DEPTH = 1 << LOG2;

	localparam int SW = (W + SPLIT - 1) / SPLIT;
	logic mnz;             // mem holds a word not yet read out
	logic [SPLIT-1:0] ld;  // each column's read (all equal)

	// order: dout, then sk, then mq. A read only when they hold at most two words, so mq's
	// word always has a place to go when the read overwrites it. Each column keeps its own
	// copy of the control (mv, vd, sv), so pop reaches a few registers per column
	logic [SW*SPLIT-1:0] dinp, doutp;
	logic [SPLIT-1:0] validk;
	assign dinp = (SW*SPLIT)'(din);
	assign dout = doutp[W-1:0];
	assign valid = validk[0];
	for (genvar k = 0; k < SPLIT; k++) begin : g_col
		// a word is never read in the cycle it is written (mcount counts a push a cycle
		// late), so nothing depends on what the memory returns then (no_rw_check)
		(* no_rw_check *) logic [SW-1:0] mem [0:DEPTH-1];
		logic [LOG2-1:0] wptr = LOG2'(k);
		logic [LOG2-1:0] rptr = LOG2'(k);
		logic [SW-1:0] mq;    // the memory's read register
		logic [SW-1:0] sk;    // the skid register: the word after dout's
		logic [SW-1:0] dq;    // dout's column
		logic mv = 1'(k % 2);   // mq holds a word
		logic sv = 1'(k / 2 % 2); // sk holds a word (only while dout holds one)
		logic vd = 1'(k / 4 % 2); // dout holds a word
		logic load, keep;
		assign load = mnz && !(mv && vd && sv);
		assign keep = vd && !pop;   // dout's word stays
		assign ld[k] = load;
		always_ff @(posedge clk) begin
			if (rst) begin
				wptr <= '0;
				rptr <= '0;
				mv <= 1'b0;
				sv <= 1'b0;
				vd <= 1'b0;
			end else begin
				if (push)
					wptr <= wptr + 1'b1;
				if (load)
					rptr <= rptr + 1'b1;
				// dout: kept, else sk's word, else mq's
				vd <= keep || sv || mv;
				// sk: kept when dout and sk both stay; takes mq's word when exactly one
				// of them moves up (dout kept and sk empty, or dout taken and sk full)
				sv <= (keep && sv) || ((keep != sv) && mv);
				// mq: a new word, or its word stays when dout and sk are both full and kept
				mv <= load || (mv && keep && sv);
			end
			if (push)
				mem[wptr] <= dinp[SW*k +: SW];
			if (load)
				mq <= mem[rptr];
			if (!keep)
				dq <= sv ? sk : mq;
			if (keep != sv)
				sk <= mq;
		end
		assign doutp[SW*k +: SW] = dq;
		assign validk[k] = vd;
	end

	// The words in mem not yet read (mcount) count a push a cycle late (push_q, a register
	// beside the count: the push comes from the writer's side of the die), so a word is
	// read two cycles after its write at the earliest; the words in flight are never more
	// than mcount says. The read decides from mnz and mgt1 (mcount != 0, > 1), registers
	// set from this cycle's change, the flags and mcount > 2 (a compare of the register),
	// never through the count's adder
	logic push_q = 1'b1;
	always_ff @(posedge clk)
		push_q <= push && !rst;
	logic [LOG2:0] mcount;
	logic mgt1, up, down;
	assign up = push_q && !ld[0];
	assign down = ld[0] && !push_q;
	nx_fill u_fill (.clk, .rst, .up, .down, .gt2(mcount > (LOG2+1)'(2)), .nz(mnz), .gt1(mgt1));
	always_ff @(posedge clk) begin
		if (rst)
			mcount <= '0;
		else if (up)
			mcount <= mcount + 1'b1;
		else if (down)
			mcount <= mcount - 1'b1;
	end
endmodule

// nx_fill: a FIFO memory's fill flags as registers, nz (it holds a word) and gt1 (more
// than one), set from this cycle's change (up: a word in and none out; down: one out and
// none in) and gt2 (more than two now, from the caller's registers), never through a
// count's adder: the FIFOs' read decisions start from them
module nx_fill (
	input  logic clk,
	input  logic rst,
	input  logic up,
	input  logic down,
	input  logic gt2,
	output logic nz,
	output logic gt1
);
	always_ff @(posedge clk) begin
		if (rst) begin
			nz <= 1'b0;
			gt1 <= 1'b0;
		end else begin
			nz <= up || (nz && !down) || gt1;
			gt1 <= (up && nz) || (gt1 && !down) || gt2;
		end
	end
endmodule

// nx_rfifo: block RAM FIFO read on request, for a reader that knows what it holds (the
// egress's issuer asks only for a frame's beats, written before the frame's metadata
// exists). A word asked for with rd comes out of dout two cycles later: the memory's read
// register, then the register that takes it alone (hw/bench/absorb.py puts it into the
// block RAM's output register on ECP5). level counts the words not yet asked for (a
// request a cycle late); the caller keeps it at most DEPTH.
module nx_rfifo #(
	parameter int W = 8,
	parameter int LOG2 = 4
) (
	input  logic         clk,
	input  logic         rst,
	input  logic         push,
	input  logic [W-1:0] din,
	input  logic         rd,
	output logic [W-1:0] dout,
	output logic [LOG2:0] level
);
	localparam int DEPTH = 1 << LOG2;
	// a word is asked for long after its write: what the memory returns while a word is
	// written to the address read is never used (no_rw_check)
	(* no_rw_check *) logic [W-1:0] mem [0:DEPTH-1];
	logic [LOG2-1:0] wptr, rptr;
	logic [W-1:0] rq, oq;
	logic rd_q;   // level counts a read a cycle late (never below the words held)
	always_ff @(posedge clk) begin
		if (rst) begin
			wptr <= '0;
			rptr <= '0;
			level <= '0;
			rd_q <= 1'b0;
		end else begin
			if (push)
				wptr <= wptr + 1'b1;
			if (rd)
				rptr <= rptr + 1'b1;
			rd_q <= rd;
			level <= level + (LOG2+1)'(push) - (LOG2+1)'(rd_q);
		end
		if (push)
			mem[wptr] <= din;
		rq <= mem[rptr];
		oq <= rq;
	end
	assign dout = oq;
endmodule

// nx_ofifo: a small first-word-fall-through FIFO for a stream's output: valid and dout are
// registers, and ready reaches only their enables and the read pointer. The writer keeps
// it from overflowing (a credit count: at most DEPTH words in it).
module nx_ofifo #(
	parameter int W = 8,
	parameter int LOG2 = 4
) (
	input  logic         clk,
	input  logic         rst,
	input  logic         push,
	input  logic [W-1:0] din,
	output logic         valid,
	output logic [W-1:0] dout,
	input  logic         ready
);
	localparam int DEPTH = 1 << LOG2;
	// read a cycle or more after the word's write, never at the write's address while
	// it holds a word to read (no_rw_check)
	(* no_rw_check *) logic [W-1:0] mem [0:DEPTH-1];
	logic [LOG2-1:0] wptr, rptr;
	logic mnz, mgt1;           // mem holds a word not yet in dq, more than one (registers)
	logic vd, load, up, down, gt2;
	logic [W-1:0] dq;
	assign load = mnz && (!vd || ready);
	assign up = push && !load;
	assign down = load && !push;
	// the words in mem: the pointers' difference (at most DEPTH - 1), from registers only
	assign gt2 = LOG2'(wptr - rptr) > LOG2'(2);
	nx_fill u_fill (.clk, .rst, .up, .down, .gt2, .nz(mnz), .gt1(mgt1));
	always_ff @(posedge clk) begin
		if (rst) begin
			wptr <= '0;
			rptr <= '0;
			vd <= 1'b0;
		end else begin
			if (push)
				wptr <= wptr + 1'b1;
			if (load)
				rptr <= rptr + 1'b1;
			vd <= load || (vd && !ready);
		end
		if (push)
			mem[wptr] <= din;
		if (load)
			dq <= mem[rptr];
	end
	assign valid = vd;
	assign dout = dq;
endmodule

// nx_slice: AXI4-Stream register slice (skid buffer). s_ready is a register (no path from
// m_ready to s_ready); full throughput; m_valid/m_data hold until taken. SPLIT > 1 cuts the
// data into that many column slices, each with its own copy of the control (m_valid,
// sk_v: the same inputs, so the copies always agree; their different initial values,
// never used, keep synthesis from merging them), so no enable or select fans out over
// the whole width; s_ready and m_valid are column 0's.
module nx_slice #(
	parameter int W = 8,
	parameter int SPLIT = 1
) (
	input  logic         clk,
	input  logic         rst,
	input  logic         s_valid,
	input  logic [W-1:0] s_data,
	output logic         s_ready,
	output logic         m_valid,
	output logic [W-1:0] m_data,
	input  logic         m_ready
);
	localparam int SW = (W + SPLIT - 1) / SPLIT;
	logic [SW*SPLIT-1:0] sdp, mdp;
	logic [SPLIT-1:0] rdyk, mvk;
	assign sdp = (SW*SPLIT)'(s_data);
	assign m_data = mdp[W-1:0];
	assign s_ready = rdyk[0];
	assign m_valid = mvk[0];
	for (genvar k = 0; k < SPLIT; k++) begin : g_col
		logic mv = 1'(k % 2);
		logic sk_v = 1'(k / 2 % 2);
		logic [SW-1:0] sk_d, md;
		assign rdyk[k] = !sk_v;
		assign mvk[k] = mv;
		assign mdp[SW*k +: SW] = md;
		always_ff @(posedge clk) begin
			if (rst) begin
				mv <= 1'b0;
				sk_v <= 1'b0;
			end else if (!mv || m_ready) begin
				// the output register is free this cycle
				if (sk_v) begin
					mv <= 1'b1;
					sk_v <= 1'b0;
				end else begin
					mv <= s_valid;
				end
			end else if (s_valid && !sk_v) begin
				sk_v <= 1'b1;
			end
			if (!mv || m_ready)
				md <= sk_v ? sk_d : sdp[SW*k +: SW];
			if (s_valid && !sk_v && mv && !m_ready)
				sk_d <= sdp[SW*k +: SW];
		end
	end
endmodule

// nx_dly: N (>= 1) register stages, no reset
module nx_dly #(
	parameter int W = 1,
	parameter int N = 1
) (
	input  logic         clk,
	input  logic [W-1:0] d,
	output logic [W-1:0] q
);
	logic [N*W-1:0] r;
	generate
		if (N == 1) begin : g_one
			always_ff @(posedge clk)
				r <= d;
		end else begin : g_many
			always_ff @(posedge clk)
				r <= {r[(N-1)*W-1:0], d};
		end
	endgenerate
	assign q = r[N*W-1 -: W];
endmodule
