/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Kernel and libbpf headers every data-plane file needs, in one place. */
#ifndef NX_COMMON_H
#define NX_COMMON_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/icmp.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#ifndef AF_INET
#define AF_INET 2
#endif

/* What a helper returns when it did its job; when it did not, minus a drop reason
 * (NX_DROP_*). A helper with a result to give returns it as a non-negative value. */
#define NX_OK 0

/* IPv4 flags in network order, compared against the raw field: no bswap per packet. */
#define NX_IP_MF bpf_htons(0x2000)
#define NX_IP_DF bpf_htons(0x4000)
#define NX_IP_OFFMASK bpf_htons(0x1fff)

/* Host-order constants compared against ETH_P_IP in network order (Katran does the same):
 * one constant swap at compile time instead of one bpf_ntohs per packet. */
#define NX_BE_ETH_P_IP bpf_htons(ETH_P_IP)

#define NX_TCPF_FIN 0x01
#define NX_TCPF_SYN 0x02
#define NX_TCPF_RST 0x04
#define NX_TCPF_ACK 0x10

/* Entries published to lock-free readers. The writer stores the fields, then the key word
 * with a volatile store; a reader loads the key word with a volatile load, then the fields.
 * This compiler barrier, before the writer's publish and after the reader's match, keeps
 * the compiler from moving a field's store or load across the key word's. x86-64 keeps the
 * same order between CPUs (stores are not reordered with stores, nor loads with loads). A
 * weakly ordered CPU would need store-release and load-acquire here (docs/ARCHITECTURE.md,
 * "How CPUs share state"); the daemon refuses to load the data plane on one. */
#define nx_order_barrier() asm volatile("" ::: "memory")

/* &p->field, or NULL when p (a map lookup's result) is NULL. Written plainly, clang (14
 * and 19 alike) may compute the field's address before the test and select between it and
 * NULL, and Linux 6.1 and 6.12 refuse arithmetic on a pointer not yet checked ("pointer
 * arithmetic on map_value_or_null prohibited"); the empty asm after the test keeps the
 * address computation behind it. */
#define NX_FIELD_OR_NULL(p, field)                                                                 \
	({                                                                                         \
		typeof(p) __p = (p);                                                               \
		typeof(&__p->field) __r = 0;                                                       \
		if (__p) {                                                                         \
			asm volatile("" : "+r"(__p));                                              \
			__r = &__p->field;                                                         \
		}                                                                                  \
		__r;                                                                               \
	})

/* A 16-bit field in network order (a length) in host order, with its range known to the
 * verifier. Linux 6.12's verifier gives a byte swap's result no bounds at all (6.18's keeps
 * them), and refuses a packet pointer plus such a scalar ("makes pkt pointer be out of
 * bounds") even after a compare; the mask restores the bound, and being asm the compiler
 * cannot drop it as redundant. One instruction. */
static __always_inline __u32 nx_ntohs_len(__be16 v)
{
	__u64 x = bpf_ntohs(v);

	asm volatile("%0 &= 0xffff" : "+r"(x));
	return (__u32)x;
}

#endif /* NX_COMMON_H */
