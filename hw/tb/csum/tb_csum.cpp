// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The checksum RTL (hw/rtl/nx_csum_pkg.sv, nx_csum_unit.sv) against the data plane's own C
// (bpf/nx_csum.h, compiled for the host through nx_csum_host.h), vector by vector:
//
//   functions  nx_csum_fold, diff4, diff2, apply, udp_csum_apply on random inputs whose
//              16-bit halves are often edge values (0x0000, 0xffff, 0x0001, 0xfffe, 0x8000,
//              0x7fff), every output compared
//   edges      nx_csum_unit on every combination of edge values (checksums, address and
//              port halves) and the three L4 kinds
//   unit       nx_csum_unit on random rewrites, against nx_rewrite's checksum code (TCP,
//              UDP, ICMP); the registered copy one clock later
//   bytes      random 20-byte IPv4 headers with a correct checksum and random TCP/UDP
//              segments under their pseudo-header: the source address (and port) rewritten
//              in memory as the C does it (u32 and u16 loads and stores, little-endian
//              host), the RTL given the network-order words; the checksum bytes of both
//              must be the same, and equal to a full recomputation (RFC 1071)
//
// Arguments: [vectors per random group, default 1000000] [seed]. Prints one line per group
// and ends with "N passed, M failed" (one vector = all outputs compared); exit 1 if M > 0.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "Vtb_csum_top.h"
#include "verilated.h"

#include "nx_csum_host.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	      "the byte-level test models the C on a little-endian host");

static uint64_t rng_state;
static uint64_t rnd64()
{ // xorshift64*
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545F4914F6CDD1DULL;
}

static const uint16_t EDGES[] = {0x0000, 0xffff, 0x0001, 0xfffe, 0x8000, 0x7fff};
static const int NEDGES = sizeof(EDGES) / sizeof(EDGES[0]);

// a 16-bit value: an edge value one time in four, else random
static uint16_t r16()
{
	uint64_t r = rnd64();
	if ((r & 3) == 0)
		return EDGES[(r >> 2) % NEDGES];
	return (uint16_t)(r >> 16);
}
static uint32_t r32() { return ((uint32_t)r16() << 16) | r16(); }

struct Tally {
	const char *name;
	uint64_t pass = 0, fail = 0;
	void check(bool ok, const char *what)
	{
		if (ok) {
			pass++;
			return;
		}
		if (fail++ < 10)
			printf("  MISMATCH %s: %s\n", name, what);
	}
	void print() const { printf("%-10s %llu passed, %llu failed\n", name, (unsigned long long)pass, (unsigned long long)fail); }
};

static std::unique_ptr<Vtb_csum_top> top;
static char msg[512];

// nx_rewrite's checksum code (bpf/nx_nat.h), on values as the C holds them
static void c_rewrite(int kind, __u16 *ipc, __u16 *l4c, __u32 old_ip, __u32 new_ip, __u16 old_port,
		      __u16 new_port)
{
	__u32 d_ip = nx_csum_diff4(old_ip, new_ip);
	nx_csum_apply(ipc, d_ip);
	if (kind == 0)
		nx_csum_apply(l4c, d_ip + nx_csum_diff2(old_port, new_port));
	else if (kind == 1)
		nx_udp_csum_apply(l4c, d_ip + nx_csum_diff2(old_port, new_port));
	else
		nx_csum_apply(l4c, nx_csum_diff2(old_port, new_port));
}

static void set_unit(int kind, uint16_t ipc, uint16_t l4c, uint32_t oa, uint32_t na, uint16_t op,
		     uint16_t np)
{
	top->l4_kind = kind;
	top->ip_check = ipc;
	top->l4_check = l4c;
	top->old_addr = oa;
	top->new_addr = na;
	top->old_port = op;
	top->new_port = np;
}

static void functions(Tally &t, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		uint32_t c = r32(), f32 = r32(), t32 = r32(), diff;
		uint16_t f16 = r16(), t16 = r16(), sum = r16();
		// diff: a sum of differences as the data plane makes them, or any 32-bit value
		switch (rnd64() % 3) {
		case 0: diff = nx_csum_diff4(r32(), r32()) + nx_csum_diff2(r16(), r16()); break;
		case 1: diff = nx_csum_diff2(r16(), r16()); break;
		default: diff = r32(); break;
		}
		top->c = c;
		top->from32 = f32;
		top->to32 = t32;
		top->from16 = f16;
		top->to16 = t16;
		top->sum = sum;
		top->diff = diff;
		top->eval();
		__u16 a = sum, u = sum;
		nx_csum_apply(&a, diff);
		nx_udp_csum_apply(&u, diff);
		bool ok = top->fold_o == nx_csum_fold(c) && top->diff4_o == nx_csum_diff4(f32, t32) &&
			  top->diff2_o == nx_csum_diff2(f16, t16) && top->apply_o == a && top->udp_apply_o == u;
		if (!ok)
			snprintf(msg, sizeof msg,
				 "c=%08x fold %04x/%04x; diff4(%08x,%08x) %08x/%08x; diff2(%04x,%04x) %08x/%08x; "
				 "apply(%04x,%08x) %04x/%04x; udp %04x/%04x (rtl/c)",
				 c, top->fold_o, nx_csum_fold(c), f32, t32, top->diff4_o, nx_csum_diff4(f32, t32), f16,
				 t16, top->diff2_o, nx_csum_diff2(f16, t16), sum, diff, top->apply_o, a, top->udp_apply_o,
				 u);
		t.check(ok, msg);
	}
}

static bool unit_one(int kind, uint16_t ipc, uint16_t l4c, uint32_t oa, uint32_t na, uint16_t op, uint16_t np)
{
	set_unit(kind, ipc, l4c, oa, na, op, np);
	top->eval();
	__u16 i = ipc, l = l4c;
	c_rewrite(kind, &i, &l, oa, na, op, np);
	bool ok = top->ip_check_o == i && top->l4_check_o == l;
	if (!ok)
		snprintf(msg, sizeof msg, "kind %d ip %04x l4 %04x addr %08x->%08x port %04x->%04x: rtl %04x %04x, c %04x %04x",
			 kind, ipc, l4c, oa, na, op, np, top->ip_check_o, top->l4_check_o, i, l);
	return ok;
}

static void edges(Tally &t)
{
	uint32_t e32[NEDGES * NEDGES];
	for (int i = 0; i < NEDGES; i++)
		for (int j = 0; j < NEDGES; j++)
			e32[i * NEDGES + j] = ((uint32_t)EDGES[i] << 16) | EDGES[j];
	for (int kind = 0; kind < 3; kind++)
		for (uint16_t ipc : EDGES)
			for (uint16_t l4c : EDGES)
				for (uint32_t oa : e32)
					for (uint32_t na : e32)
						for (uint16_t op : EDGES)
							for (uint16_t np : EDGES)
								t.check(unit_one(kind, ipc, l4c, oa, na, op, np), msg);
}

static void unit(Tally &t, uint64_t n)
{
	// the registered copy: its outputs after a rising edge are the combinational ones of
	// the inputs before it
	uint16_t prev_i = 0, prev_l = 0;
	bool have_prev = false;
	for (uint64_t k = 0; k < n; k++) {
		int kind = rnd64() % 3;
		bool ok = unit_one(kind, r16(), r16(), r32(), r32(), r16(), r16());
		uint16_t ci = top->ip_check_o, cl = top->l4_check_o;
		if (have_prev && (top->ip_check_r != prev_i || top->l4_check_r != prev_l)) {
			ok = false;
			snprintf(msg, sizeof msg, "registered %04x %04x, expected the last cycle's %04x %04x",
				 top->ip_check_r, top->l4_check_r, prev_i, prev_l);
		}
		t.check(ok, msg);
		top->clk = 1;
		top->eval();
		top->clk = 0;
		top->eval();
		prev_i = ci;
		prev_l = cl;
		have_prev = true;
	}
}

// RFC 1071: the checksum of len bytes (even), 16-bit big-endian words
static uint16_t full_csum(const uint8_t *b, int len)
{
	uint32_t s = 0;
	for (int i = 0; i < len; i += 2)
		s += (uint32_t)b[i] << 8 | b[i + 1];
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (uint16_t)~s;
}
static uint16_t be16(const uint8_t *b) { return (uint16_t)(b[0] << 8 | b[1]); }
static uint32_t be32(const uint8_t *b) { return (uint32_t)b[0] << 24 | b[1] << 16 | b[2] << 8 | b[3]; }

static void bytes(Tally &t, uint64_t n)
{
	// ip: a 20-byte IPv4 header; seg: pseudo-header (12) + TCP header (20) or UDP header
	// and payload (20): the L4 checksum at 12+16 (TCP) or 12+6 (UDP)
	uint8_t ip[20], seg[32], ip_c[20], seg_c[32];
	for (uint64_t k = 0; k < n; k++) {
		int udp = rnd64() & 1;
		int coff = udp ? 18 : 28;
		for (auto &x : ip)
			x = (uint8_t)rnd64();
		for (auto &x : seg)
			x = (uint8_t)rnd64();
		ip[0] = 0x45;
		if ((rnd64() & 7) == 0) // edge values in the address
			memset(ip + 12, (rnd64() & 1) ? 0xff : 0x00, 4);
		ip[10] = ip[11] = 0;
		uint16_t ipck = full_csum(ip, 20);
		ip[10] = ipck >> 8;
		ip[11] = ipck & 0xff;
		memcpy(seg, ip + 12, 8); // the pseudo-header's addresses
		seg[8] = 0;
		seg[9] = udp ? 17 : 6;
		seg[coff] = seg[coff + 1] = 0;
		uint16_t l4ck = full_csum(seg, 32);
		bool udp_none = udp && (rnd64() & 15) == 0;
		if (udp_none)
			l4ck = 0;
		else if (udp && l4ck == 0)
			l4ck = 0xffff;
		seg[coff] = l4ck >> 8;
		seg[coff + 1] = l4ck & 0xff;
		uint8_t new_addr[4], new_port[2];
		for (auto &x : new_addr)
			x = (uint8_t)rnd64();
		for (auto &x : new_port)
			x = (uint8_t)rnd64();

		// the C, in memory: loads and stores of the host's (little-endian) order
		memcpy(ip_c, ip, 20);
		memcpy(seg_c, seg, 32);
		__u32 old_ip, nip;
		__u16 old_port, nport, ipc, l4c;
		memcpy(&old_ip, ip_c + 12, 4);
		memcpy(&nip, new_addr, 4);
		memcpy(&old_port, seg_c + 12, 2);
		memcpy(&nport, new_port, 2);
		memcpy(ip_c + 12, &nip, 4);
		memcpy(seg_c, &nip, 4);
		memcpy(seg_c + 12, &nport, 2);
		memcpy(&ipc, ip_c + 10, 2);
		memcpy(&l4c, seg_c + coff, 2);
		c_rewrite(udp, &ipc, &l4c, old_ip, nip, old_port, nport);
		memcpy(ip_c + 10, &ipc, 2);
		memcpy(seg_c + coff, &l4c, 2);

		// the RTL, on the header's network-order words
		set_unit(udp, be16(ip + 10), be16(seg + coff), be32(ip + 12), be32(new_addr), be16(seg + 12),
			 be16(new_port));
		top->eval();
		uint8_t rtl_ip[2] = {(uint8_t)(top->ip_check_o >> 8), (uint8_t)top->ip_check_o};
		uint8_t rtl_l4[2] = {(uint8_t)(top->l4_check_o >> 8), (uint8_t)top->l4_check_o};

		// the recomputed checksums of the rewritten bytes
		uint8_t ip_z[20], seg_z[32];
		memcpy(ip_z, ip_c, 20);
		memcpy(seg_z, seg_c, 32);
		ip_z[10] = ip_z[11] = 0;
		seg_z[coff] = seg_z[coff + 1] = 0;
		uint16_t want_ip = full_csum(ip_z, 20), want_l4 = full_csum(seg_z, 32);
		if (udp_none)
			want_l4 = 0;
		else if (udp && want_l4 == 0)
			want_l4 = 0xffff;

		bool ok = memcmp(rtl_ip, ip_c + 10, 2) == 0 && memcmp(rtl_l4, seg_c + coff, 2) == 0 &&
			  be16(ip_c + 10) == want_ip && be16(seg_c + coff) == want_l4;
		if (!ok)
			snprintf(msg, sizeof msg, "%s: ip check rtl %02x%02x c %02x%02x full %04x; l4 rtl %02x%02x c %02x%02x full %04x",
				 udp ? "udp" : "tcp", rtl_ip[0], rtl_ip[1], ip_c[10], ip_c[11], want_ip, rtl_l4[0], rtl_l4[1],
				 seg_c[coff], seg_c[coff + 1], want_l4);
		t.check(ok, msg);
	}
}

int main(int argc, char **argv)
{
	uint64_t n = argc > 1 ? strtoull(argv[1], nullptr, 0) : 1000000;
	uint64_t seed = argc > 2 ? strtoull(argv[2], nullptr, 0) : 0x6e78637375ULL;
	rng_state = seed ? seed : 1;
	auto ctx = std::make_unique<VerilatedContext>();
	top = std::make_unique<Vtb_csum_top>(ctx.get());
	top->clk = 0;
	printf("tb_csum: %llu vectors per random group, seed %#llx\n", (unsigned long long)n,
	       (unsigned long long)seed);

	Tally tf{"functions"}, te{"edges"}, tu{"unit"}, tb{"bytes"};
	functions(tf, n);
	tf.print();
	edges(te);
	te.print();
	unit(tu, n);
	tu.print();
	bytes(tb, n);
	tb.print();
	top->final();
	top.reset(); // before its context
	uint64_t p = tf.pass + te.pass + tu.pass + tb.pass, f = tf.fail + te.fail + tu.fail + tb.fail;
	printf("%llu passed, %llu failed\n", (unsigned long long)p, (unsigned long long)f);
	return f ? 1 : 0;
}
