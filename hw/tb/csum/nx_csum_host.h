/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* bpf/nx_csum.h compiled for the host, unmodified: the kernel's __u16/__u32 from
 * linux/types.h, __always_inline as the kernel defines it, and nx_common.h's guard defined
 * first so that the BPF headers it would pull in (bpf_helpers.h) stay out: nx_csum.h needs
 * only the types. */
#ifndef NX_CSUM_HOST_H
#define NX_CSUM_HOST_H

#include <linux/types.h>
#ifndef __always_inline
#define __always_inline inline __attribute__((__always_inline__))
#endif
#define NX_COMMON_H
#include "../../../bpf/nx_csum.h"

#endif
