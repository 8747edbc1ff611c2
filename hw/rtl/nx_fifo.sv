// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// nx_fifo: synchronous first-word-fall-through FIFO. The storage is read synchronously
// (block RAM) into an output register; one push and one pop per cycle. level counts the
// words held (storage and output register); full when DEPTH are held.

module nx_fifo #(
	parameter int W = 8,
	parameter int LOG2 = 4
) (
	input  logic         clk,
	input  logic         rst,
	input  logic         push,
	input  logic [W-1:0] din,
	input  logic         pop,
	output logic         valid,
	output logic [W-1:0] dout,
	output logic [LOG2:0] level
);
	localparam int DEPTH = 1 << LOG2;

	logic [W-1:0] mem [0:DEPTH-1];
	logic [LOG2-1:0] wptr, rptr;
	logic [LOG2:0] mcount; // words in mem, not yet in the output register
	logic load;

	assign load = (mcount != 0) && (!valid || pop);

	always_ff @(posedge clk) begin
		if (push)
			mem[wptr] <= din;
		if (load)
			dout <= mem[rptr];
	end

	always_ff @(posedge clk) begin
		if (rst) begin
			wptr <= '0;
			rptr <= '0;
			mcount <= '0;
			valid <= 1'b0;
			level <= '0;
		end else begin
			if (push)
				wptr <= wptr + 1'b1;
			if (load)
				rptr <= rptr + 1'b1;
			mcount <= mcount + (LOG2+1)'(push) - (LOG2+1)'(load);
			if (load)
				valid <= 1'b1;
			else if (pop)
				valid <= 1'b0;
			level <= level + (LOG2+1)'(push) - (LOG2+1)'(pop && valid);
		end
	end
endmodule
