// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// absorb_test: three block RAM reads for hw/bench/absorb_test.sh. m1's read data goes
// straight into q1 (absorbed: OCE tied high), m3's into q3 with an enable (absorbed: OCE
// = en), m2's through logic into a register with a reset, m4's straight into a register
// with a reset (both left as they are: the output register here takes no reset).
module absorb_test (
	input  logic        clk,
	input  logic        rst,
	input  logic        we,
	input  logic        en,
	input  logic [8:0]  wa,
	input  logic [8:0]  ra,
	input  logic [35:0] wd,
	output logic [35:0] q1,
	output logic [17:0] q2,
	output logic [8:0]  q3,
	output logic [8:0]  q4
);
	(* no_rw_check *) logic [35:0] m1 [0:511];
	logic [35:0] r1;
	always_ff @(posedge clk) begin
		if (we)
			m1[wa] <= wd;
		r1 <= m1[ra];
		q1 <= r1;
	end
	(* no_rw_check *) logic [17:0] m2 [0:1023];
	logic [17:0] r2;
	always_ff @(posedge clk) begin
		if (we)
			m2[{1'b0, wa}] <= wd[17:0];
		r2 <= m2[{1'b0, ra}];
		if (rst)
			q2 <= '0;
		else
			q2 <= r2 ^ {r2[16:0], r2[17]};
	end
	(* no_rw_check *) logic [8:0] m3 [0:2047];
	logic [8:0] r3;
	always_ff @(posedge clk) begin
		if (we)
			m3[{2'b0, wa}] <= wd[8:0];
		r3 <= m3[{2'b0, ra}];
		if (en)
			q3 <= r3;
	end
	(* no_rw_check *) logic [8:0] m4 [0:2047];
	logic [8:0] r4;
	always_ff @(posedge clk) begin
		if (we)
			m4[{2'b0, wa}] <= wd[17:9];
		r4 <= m4[{2'b0, ra}];
		if (rst)
			q4 <= '0;
		else
			q4 <= r4;
	end
endmodule
