// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Verilator testbench of nx_core: reads a stimulus script (hw/tb/vectors.py writes it),
// drives the two AXI4-Stream inputs and the AXI4-Lite port, takes the three AXI4-Stream
// outputs, and writes what came out for vectors.py to check.
//
// Script (one command a line, numbers in hex):
//   reset                  synchronous reset, 4 cycles
//   mode GAP STALL SEED    percent of cycles an input holds tvalid low before a frame's
//                          beat, percent an output holds tready low; the generator's seed
//   w ADDR DATA            AXI4-Lite write (streams keep running meanwhile)
//   r ADDR                 AXI4-Lite read: prints "r ADDR DATA"
//   f DIR HEX              queue a frame on input DIR (0: inside->outside, 1: outside->inside)
//   sync                   run until both inputs are empty and nothing has come out for 64
//                          cycles; prints "sync CYCLES" (first input beat to last output
//                          beat since the previous sync)
//   mark TEXT              printed as is
// Output lines: "o DIR HEX" (a frame on m_i2o / m_o2i), "c TUSER HEX" (on the CPU port),
// "err TEXT" (an AXI4-Stream rule broken by the core: tvalid dropped or data changed
// while waiting for tready).
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>
#include "Vnx_core.h"
#include "verilated.h"

typedef std::vector<uint8_t> Frame;

static Vnx_core *top;
static uint64_t cyc = 0;
static uint32_t rng = 1;
static int gap_pct = 0, stall_pct = 0;
static uint64_t first_in = 0, last_out = 0;
static bool have_first = false;

static unsigned rnd100() {
	rng ^= rng << 13; rng ^= rng >> 17; rng ^= rng << 5;
	return rng % 100;
}

static std::string hex(const Frame &f) {
	static const char *d = "0123456789abcdef";
	std::string s;
	for (uint8_t b : f) { s += d[b >> 4]; s += d[b & 15]; }
	return s;
}

static Frame unhex(const std::string &s) {
	Frame f;
	for (size_t i = 0; i + 1 < s.size(); i += 2)
		f.push_back((uint8_t)strtoul(s.substr(i, 2).c_str(), nullptr, 16));
	return f;
}

struct Src {
	std::deque<Frame> q;
	size_t off = 0;
	bool presenting = false;
	bool busy() const { return !q.empty(); }
};

struct Sink {
	Frame cur;
	bool was_waiting = false; // tvalid && !tready last cycle
	uint64_t last_data = 0; uint8_t last_keep = 0; bool last_last = false; uint8_t last_user = 0;
};

static Src src[2];
static Sink snk[3];
static uint64_t last_activity = 0;

// AXI-Lite transaction in progress
static int lite_state = 0; // 0 idle, 1 write, 2 read
static uint32_t lite_addr, lite_data;
static bool aw_done, w_done;

static void set_inputs() {
	for (int d = 0; d < 2; d++) {
		Src &s = src[d];
		if (!s.presenting && s.busy() && (gap_pct == 0 || rnd100() >= (unsigned)gap_pct))
			s.presenting = true;
		uint64_t data = 0; uint8_t keep = 0; bool last = false;
		if (s.presenting) {
			const Frame &f = s.q.front();
			for (int j = 0; j < 8; j++)
				if (s.off + j < f.size()) { data |= (uint64_t)f[s.off + j] << (8 * j); keep |= 1 << j; }
			last = s.off + 8 >= f.size();
		}
		if (d == 0) { top->s_i2o_tvalid = s.presenting; top->s_i2o_tdata = data; top->s_i2o_tkeep = keep; top->s_i2o_tlast = last; }
		else { top->s_o2i_tvalid = s.presenting; top->s_o2i_tdata = data; top->s_o2i_tkeep = keep; top->s_o2i_tlast = last; }
	}
	top->m_i2o_tready = stall_pct == 0 || rnd100() >= (unsigned)stall_pct;
	top->m_o2i_tready = stall_pct == 0 || rnd100() >= (unsigned)stall_pct;
	top->m_cpu_tready = stall_pct == 0 || rnd100() >= (unsigned)stall_pct;
	top->s_axil_awvalid = lite_state == 1 && !aw_done;
	top->s_axil_wvalid = lite_state == 1 && !w_done;
	top->s_axil_awaddr = lite_addr;
	top->s_axil_wdata = lite_data;
	top->s_axil_wstrb = 0xf;
	top->s_axil_bready = 1;
	top->s_axil_arvalid = lite_state == 2 && !aw_done;
	top->s_axil_araddr = lite_addr;
	top->s_axil_rready = 1;
}

static void take(int k, bool valid, bool ready, uint64_t data, uint8_t keep, bool last, uint8_t user) {
	Sink &s = snk[k];
	if (s.was_waiting) {
		if (!valid)
			printf("err port %d dropped tvalid before tready at cycle %llu\n", k, (unsigned long long)cyc);
		else if (data != s.last_data || keep != s.last_keep || last != s.last_last || user != s.last_user)
			printf("err port %d changed its beat while waiting at cycle %llu\n", k, (unsigned long long)cyc);
	}
	s.was_waiting = valid && !ready;
	s.last_data = data; s.last_keep = keep; s.last_last = last; s.last_user = user;
	if (!(valid && ready))
		return;
	last_activity = cyc;
	last_out = cyc;
	for (int j = 0; j < 8; j++)
		if (keep & (1 << j)) s.cur.push_back((uint8_t)(data >> (8 * j)));
	if (last) {
		if (k < 2) printf("o %d %s\n", k, hex(s.cur).c_str());
		else printf("c %02x %s\n", user, hex(s.cur).c_str());
		s.cur.clear();
	}
}

static void tick() {
	set_inputs();
	top->clk = 0;
	top->eval();
	// sample the handshakes before the edge
	bool in_fire[2] = {top->s_i2o_tvalid && top->s_i2o_tready, top->s_o2i_tvalid && top->s_o2i_tready};
	take(0, top->m_i2o_tvalid, top->m_i2o_tready, top->m_i2o_tdata, top->m_i2o_tkeep, top->m_i2o_tlast, 0);
	take(1, top->m_o2i_tvalid, top->m_o2i_tready, top->m_o2i_tdata, top->m_o2i_tkeep, top->m_o2i_tlast, 0);
	take(2, top->m_cpu_tvalid, top->m_cpu_tready, top->m_cpu_tdata, top->m_cpu_tkeep, top->m_cpu_tlast, top->m_cpu_tuser);
	bool awf = top->s_axil_awvalid && top->s_axil_awready;
	bool wf = top->s_axil_wvalid && top->s_axil_wready;
	bool bf = top->s_axil_bvalid && top->s_axil_bready;
	bool arf = top->s_axil_arvalid && top->s_axil_arready;
	bool rf = top->s_axil_rvalid && top->s_axil_rready;
	uint32_t rdata = top->s_axil_rdata;
	top->clk = 1;
	top->eval();
	cyc++;
	for (int d = 0; d < 2; d++) {
		if (!in_fire[d]) continue;
		Src &s = src[d];
		if (!have_first) { have_first = true; first_in = cyc; }
		last_activity = cyc;
		s.off += 8;
		if (s.off >= s.q.front().size()) { s.q.pop_front(); s.off = 0; }
		s.presenting = false;
	}
	if (lite_state == 1) {
		if (awf) aw_done = true;
		if (wf) w_done = true;
		if (bf) lite_state = 0;
	} else if (lite_state == 2) {
		if (arf) aw_done = true;
		if (rf) { printf("r %x %x\n", lite_addr, rdata); lite_state = 0; }
	}
}

int main(int argc, char **argv) {
	Verilated::commandArgs(argc, argv);
	if (argc < 2) { fprintf(stderr, "usage: %s SCRIPT\n", argv[0]); return 2; }
	std::ifstream in(argv[1]);
	if (!in) { fprintf(stderr, "cannot read %s\n", argv[1]); return 2; }
	top = new Vnx_core;
	top->rst = 1;
	for (int i = 0; i < 4; i++) tick();
	top->rst = 0;
	std::string line;
	while (std::getline(in, line)) {
		std::istringstream ls(line);
		std::string cmd;
		ls >> cmd;
		if (cmd == "reset") {
			top->rst = 1;
			for (int i = 0; i < 4; i++) tick();
			top->rst = 0;
		} else if (cmd == "mode") {
			unsigned seed = 1;
			ls >> gap_pct >> stall_pct >> std::hex >> seed;
			rng = seed ? seed : 1;
		} else if (cmd == "w" || cmd == "r") {
			ls >> std::hex >> lite_addr;
			if (cmd == "w") ls >> std::hex >> lite_data;
			lite_state = cmd == "w" ? 1 : 2;
			aw_done = w_done = false;
			uint64_t t0 = cyc;
			while (lite_state != 0) {
				tick();
				if (cyc - t0 > 1000) { printf("err AXI4-Lite timeout at %x\n", lite_addr); lite_state = 0; }
			}
		} else if (cmd == "f") {
			int d; std::string h;
			ls >> d >> h;
			src[d].q.push_back(unhex(h));
		} else if (cmd == "sync") {
			uint64_t t0 = cyc;
			while (src[0].busy() || src[1].busy() || cyc - last_activity < 64) {
				tick();
				if (cyc - t0 > 5000000) { printf("err sync timeout\n"); break; }
			}
			printf("sync %llu\n", have_first ? (unsigned long long)(last_out - first_in + 1) : 0ULL);
			have_first = false;
		} else if (cmd == "mark") {
			std::string rest;
			std::getline(ls, rest);
			printf("mark%s\n", rest.c_str());
		}
	}
	fflush(stdout);
	top->final();
	delete top;
	return 0;
}
