// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The package and the unit under Icarus Verilog (-g2012): RFC 1624's worked example, then
// random IPv4 headers whose source address is rewritten, the unit's checksum against a
// full recomputation (RFC 1071) done here. Prints "N passed, M failed".

module tb_csum_icarus;
	logic        clk = 1'b0;
	logic [1:0]  kind;
	logic [15:0] ipc, l4c, oport, nport, ipc_o, l4c_o;
	logic [31:0] oaddr, naddr;
	integer pass = 0, fail = 0;

	nx_csum_unit #(.REGISTERED(0)) dut (
		.clk(clk), .l4_kind_i(kind), .ip_check_i(ipc), .l4_check_i(l4c), .old_addr_i(oaddr),
		.new_addr_i(naddr), .old_port_i(oport), .new_port_i(nport), .ip_check_o(ipc_o),
		.l4_check_o(l4c_o));

	// RFC 1071: the checksum of a 20-byte header, word 5 left out
	function automatic logic [15:0] full(input logic [159:0] h);
		logic [31:0] s;
		s = 32'd0;
		for (int i = 0; i < 10; i++)
			if (i != 5)
				s = s + {16'd0, h[159 - 16 * i -: 16]};
		s = {16'd0, s[15:0]} + {16'd0, s[31:16]};
		s = {16'd0, s[15:0]} + {16'd0, s[31:16]};
		full = ~s[15:0];
	endfunction

	task automatic check(input logic ok, input string what);
		if (ok)
			pass = pass + 1;
		else begin
			fail = fail + 1;
			if (fail <= 10)
				$display("  MISMATCH %s", what);
		end
	endtask

	logic [159:0] h, nh;
	initial begin
		// RFC 1624, section 4: HC = 0xDD2F, m = 0x5555 -> m' = 0x3285 gives HC' = 0x0000
		check(nx_csum_pkg::nx_csum_apply(16'hdd2f, nx_csum_pkg::nx_csum_diff2(16'h5555, 16'h3285)) == 16'h0000,
		      "RFC 1624 example");
		// the same through the unit's ICMP path (the port alone)
		kind = 2'd2; ipc = 16'h1234; l4c = 16'hdd2f; oaddr = 32'h0a000001; naddr = 32'h0a000001;
		oport = 16'h5555; nport = 16'h3285;
		#1 check(l4c_o == 16'h0000 && ipc_o == 16'h1234, "RFC 1624 example, unit");
		// UDP: no checksum stays none; a computed 0 is sent as 0xffff
		kind = 2'd1; l4c = 16'h0000;
		#1 check(l4c_o == 16'h0000, "UDP without checksum");
		check(nx_csum_pkg::nx_udp_csum_apply(16'hdd2f, nx_csum_pkg::nx_csum_diff2(16'h5555, 16'h3285)) == 16'hffff,
		      "UDP computed zero");
		for (int k = 0; k < 20000; k++) begin
			h = {$urandom, $urandom, $urandom, $urandom, $urandom};
			h[159:152] = 8'h45;
			h[79:64] = full(h);
			naddr = $urandom;
			nh = h;
			nh[63:32] = naddr;
			kind = 2'($urandom % 3); ipc = h[79:64]; l4c = 16'($urandom); oaddr = h[63:32];
			oport = 16'($urandom); nport = 16'($urandom);
			#1 check(ipc_o == full(nh), $sformatf("header %h, new source %h: %h, want %h", h, naddr, ipc_o, full(nh)));
		end
		$display("%0d passed, %0d failed", pass, fail);
		$finish;
	end
endmodule
