/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Incremental checksum update, RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m').
 * Values are taken as they sit in memory (network order) and summed as 16-bit words;
 * the one's complement sum is byte-order independent, so no swapping is needed. */
#ifndef NX_CSUM_H
#define NX_CSUM_H

#include "nx_common.h"

static __always_inline __u16 nx_csum_fold(__u32 c)
{
	c = (c & 0xffff) + (c >> 16);
	c = (c & 0xffff) + (c >> 16);
	return (__u16)~c;
}

static __always_inline __u32 nx_csum_diff4(__u32 from, __u32 to)
{
	from = ~from;
	return (from & 0xffff) + (from >> 16) + (to & 0xffff) + (to >> 16);
}

static __always_inline __u32 nx_csum_diff2(__u16 from, __u16 to)
{
	return (__u32)(__u16)~from + to;
}

/* Add an unfolded difference (several fields' summed, if they changed together) to a
 * checksum with one fold: the same result as replacing the fields one by one. */
static __always_inline void nx_csum_apply(__u16 *sum, __u32 diff)
{
	*sum = nx_csum_fold((__u32)(__u16) ~*sum + diff);
}

static __always_inline void nx_csum_replace4(__u16 *sum, __u32 from, __u32 to)
{
	nx_csum_apply(sum, nx_csum_diff4(from, to));
}

static __always_inline void nx_csum_replace2(__u16 *sum, __u16 from, __u16 to)
{
	nx_csum_apply(sum, nx_csum_diff2(from, to));
}

/* UDP: a zero checksum means "none" and stays zero (RFC 768); a computed zero is sent
 * as 0xffff. */
static __always_inline void nx_udp_csum_apply(__u16 *sum, __u32 diff)
{
	if (*sum == 0)
		return;
	nx_csum_apply(sum, diff);
	if (*sum == 0)
		*sum = 0xffff;
}

#endif /* NX_CSUM_H */
