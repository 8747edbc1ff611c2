// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! The capture's filter stages: small XDP programs generated at capture time around a
//! translated filter ([`super::filter::translate`]), put into natrix's program array
//! (`nx_progs`) so that the data plane's capture chain (bpf/nx_cap.h) runs them by tail
//! call:
//!
//! ```text
//! stage(ctx):  r6 = ctx
//!              r7 = nx_cap_filter(ctx)             the filter, a BPF function (appended)
//!              b = nx_cap_buf[0]  (this CPU's)
//!              if b: b->{rx,tx}_snap = r7
//!              (tx stage: neither form matched → return the verdict's action)
//!              tail call nx_progs[next]            the capture body, or nx_xdp_cap_emit
//!              b->stage_fail++                     (only if that slot is empty)
//!              return the packet's verdict (tx stage) / XDP_PASS (rx stage)
//! ```
//!
//! A stage refers to two maps by descriptor (BPF_PSEUDO_MAP_FD): the pinned per-CPU
//! `nx_cap_buf` and the program array of the running load.

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use libbpf_rs::libbpf_sys as sys;

use super::filter::EbpfInsn;
use super::load::{prog_load, LoadError};
use crate::skel::types::{nx_cap_buf, nx_prog};

/// Which stage: where its answer goes and which program comes next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The received form, on an inside interface: then the inside capture body.
    RxInside,
    /// The received form, on an outside interface: then the outside capture body.
    RxOutside,
    /// The sent form, at the packet's exit: then nx_xdp_cap_emit.
    Tx,
}

impl Stage {
    pub const ALL: [Stage; 3] = [Stage::RxInside, Stage::RxOutside, Stage::Tx];

    /// The stage's own slot in nx_progs.
    pub fn slot(self) -> u32 {
        match self {
            Stage::RxInside => nx_prog::NX_PROG_CAP_RX_INSIDE.0,
            Stage::RxOutside => nx_prog::NX_PROG_CAP_RX_OUTSIDE.0,
            Stage::Tx => nx_prog::NX_PROG_CAP_TX.0,
        }
    }

    /// The slot it tail-calls.
    fn next(self) -> u32 {
        match self {
            Stage::RxInside => nx_prog::NX_PROG_INSIDE_CAP.0,
            Stage::RxOutside => nx_prog::NX_PROG_OUTSIDE_CAP.0,
            Stage::Tx => nx_prog::NX_PROG_CAP_EMIT.0,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Stage::RxInside => "nx_cap_rx_in",
            Stage::RxOutside => "nx_cap_rx_out",
            Stage::Tx => "nx_cap_tx",
        }
    }
}

const R0: u8 = 0;
const R1: u8 = 1;
const R2: u8 = 2;
const R3: u8 = 3;
const R6: u8 = 6;
const R7: u8 = 7;
const R8: u8 = 8;
const FP: u8 = 10;
/// BPF_PSEUDO_MAP_FD, BPF_PSEUDO_CALL (linux/bpf.h)
const PSEUDO_MAP_FD: u8 = 1;
const PSEUDO_CALL: u8 = 1;
const FUNC_MAP_LOOKUP_ELEM: i32 = 1;
const FUNC_TAIL_CALL: i32 = 12;
const XDP_PASS: i32 = 2;

fn i(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> EbpfInsn {
    EbpfInsn::new(code, dst, src, off, imm)
}

/// `dst = map fd` (a 16-byte instruction)
fn ld_map(dst: u8, fd: i32) -> [EbpfInsn; 2] {
    [i(0x18, dst, PSEUDO_MAP_FD, 0, fd), i(0, 0, 0, 0, 0)]
}

fn off_of(field: usize) -> i16 {
    i16::try_from(field).expect("nx_cap_buf's counters lie in its first 32 KiB")
}

/// The stage's instructions, the filter's appended as a BPF function.
pub fn stage_insns(stage: Stage, filter: &[EbpfInsn], buf_fd: i32, progs_fd: i32) -> Vec<EbpfInsn> {
    let answer = off_of(match stage {
        Stage::Tx => std::mem::offset_of!(nx_cap_buf, tx_snap),
        _ => std::mem::offset_of!(nx_cap_buf, rx_snap),
    });
    let fail = off_of(std::mem::offset_of!(nx_cap_buf, stage_fail));
    let verdict = off_of(std::mem::offset_of!(nx_cap_buf, verdict));
    let rx_answer = off_of(std::mem::offset_of!(nx_cap_buf, rx_snap));
    let mut p = vec![
        i(0xbf, R6, R1, 0, 0),         // r6 = ctx
        i(0x85, 0, PSEUDO_CALL, 0, 0), // call the filter (offset set below)
        i(0xbf, R7, R0, 0, 0),         // r7 = its answer
        i(0x62, FP, 0, -4, 0),         // *(u32 *)(fp - 4) = 0
    ];
    p.extend(ld_map(R1, buf_fd)); // r1 = &nx_cap_buf
    p.extend([
        i(0xbf, R2, FP, 0, 0),                  // r2 = fp
        i(0x07, R2, 0, 0, -4),                  // r2 += -4
        i(0x85, 0, 0, 0, FUNC_MAP_LOOKUP_ELEM), // r0 = this CPU's nx_cap_buf
        i(0xbf, R8, R0, 0, 0),                  // r8 = r0
    ]);
    // "if r0 == 0 goto tail", its offset set once the tail's place is known
    let null_check = p.len();
    p.push(i(0x15, R0, 0, 0, 0));
    p.push(i(0x63, R0, R7, answer, 0)); // b->*_snap = answer
    if stage == Stage::Tx {
        // Neither form matched (most packets of a narrow filter): the packet's action now,
        // without the emit stage's tail call and lookups.
        p.extend([
            i(0x55, R7, 0, 5, 0),          // if r7 != 0 goto tail
            i(0x61, R1, R8, rx_answer, 0), // w1 = b->rx_snap
            i(0x55, R1, 0, 3, 0),          // if r1 != 0 goto tail
            i(0x61, R0, R8, verdict, 0),   // w0 = b->verdict
            i(0x74, R0, 0, 0, 16),         // w0 >>= 16: its XDP action
            i(0x95, 0, 0, 0, 0),           // exit
        ]);
    }
    let tail = p.len();
    p[null_check].off = (tail - null_check - 1) as i16;
    p.push(i(0xbf, R1, R6, 0, 0)); // tail: r1 = ctx
    p.extend(ld_map(R2, progs_fd)); // r2 = &nx_progs
    p.extend([
        i(0xb4, R3, 0, 0, stage.next() as i32), // w3 = next slot
        i(0x85, 0, 0, 0, FUNC_TAIL_CALL),       // tail call: does not return if the slot is filled
        i(0xb4, R0, 0, 0, XDP_PASS),            // w0 = XDP_PASS
    ]);
    // "if r8 == 0 goto exit", its offset set below
    let null_check2 = p.len();
    p.push(i(0x15, R8, 0, 0, 0));
    p.extend([
        i(0x79, R1, R8, fail, 0), // r1 = b->stage_fail
        i(0x07, R1, 0, 0, 1),     // r1 += 1
        i(0x7b, R8, R1, fail, 0), // b->stage_fail = r1
    ]);
    if stage == Stage::Tx {
        p.extend([
            i(0x61, R0, R8, verdict, 0), // w0 = b->verdict
            i(0x74, R0, 0, 0, 16),       // w0 >>= 16: its XDP action
        ]);
    }
    p.push(i(0x95, 0, 0, 0, 0)); // exit
    p[null_check2].off = (p.len() - 1 - null_check2 - 1) as i16;
    p[1].imm = (p.len() - 2) as i32; // the filter starts right after
    p.extend_from_slice(filter);
    p
}

/// Loads a stage (BPF_PROG_TYPE_XDP, expected attach type BPF_XDP like the data plane's
/// `SEC("xdp")` programs: a program array takes only programs of its owner's type and
/// attach type).
pub fn load_stage(
    stage: Stage,
    filter: &[EbpfInsn],
    buf: BorrowedFd<'_>,
    progs: BorrowedFd<'_>,
) -> Result<OwnedFd, LoadError> {
    let insns = stage_insns(stage, filter, buf.as_raw_fd(), progs.as_raw_fd());
    let opts = sys::bpf_prog_load_opts { expected_attach_type: sys::BPF_XDP, ..Default::default() };
    prog_load(
        &insns,
        sys::BPF_PROG_TYPE_XDP,
        opts,
        stage.name(),
        &format!("loading the capture stage {}", stage.name()),
    )
}
