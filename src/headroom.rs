// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! How far each loaded BPF program is from the verifier's limits: the instructions the
//! verifier processed (`verified_insns` of bpf_prog_info, Linux >= 5.16) against its 1M
//! limit, and the stack of the deepest call chain against the 512 bytes a chain may use.
//!
//! The stack is read off the program as the kernel holds it (its translated instructions,
//! subprogram starts and JIT symbols): every subprogram's frame is the deepest access
//! relative to its frame pointer (r10, directly or through a register copied from it plus
//! a constant), as the verifier measures it; a chain sums the frames, each rounded up to 32
//! bytes as the kernel does (`round_up_stack_depth`), along BPF-to-BPF calls and callbacks
//! (bpf_loop's, which the kernel counts as calls since 6.5). The chain held to the budget
//! is counted with the verifier's own frames when the load kept its statistics (what its
//! 512-byte check adds up); the translated program's frames, which bpf_loop's inlining
//! grows after that check, give the stack at run time beside it. The budget a test holds
//! the data plane to (tests/headroom.rs): 25% of the instruction limit, 448 of 512 bytes.

use std::os::fd::{AsRawFd, BorrowedFd};

/// The verifier's limit on processed instructions (BPF_COMPLEXITY_LIMIT_INSNS).
pub const INSN_LIMIT: u32 = 1_000_000;
/// The stack one call chain may use (MAX_BPF_STACK).
pub const STACK_LIMIT: u32 = 512;
/// The budget: a program over either fails the headroom test.
pub const INSN_BUDGET: u32 = INSN_LIMIT / 4;
pub const STACK_BUDGET: u32 = 448;

/// One program's distance from the limits.
#[derive(Debug, Clone)]
pub struct Headroom {
    pub name: String,
    pub verified_insns: u32,
    /// Each subprogram (the program's own code first) and its frame in bytes, unrounded:
    /// the verifier's own figures when known (its statistics, `verifier`), else read off
    /// the translated program.
    pub frames: Vec<(String, u32)>,
    /// The deepest chain's stack (frames rounded up to 32), as the verifier counts it
    /// against its 512 bytes when its figures are known, and the chain, outermost first,
    /// each subprogram with its frame in bytes.
    pub chain_stack: u32,
    pub chain: Vec<String>,
    /// The same chain's stack at run time: the translated program's frames, which include
    /// what the kernel adds after its check (bpf_loop's inlining, up to 24 bytes a frame).
    pub run_stack: u32,
}

impl Headroom {
    pub fn insn_percent(&self) -> f64 {
        100.0 * f64::from(self.verified_insns) / f64::from(INSN_LIMIT)
    }
}

#[derive(Clone, Copy)]
struct Insn {
    code: u8,
    dst: u8,
    src: u8,
    off: i16,
    imm: i32,
}

fn insns(raw: &[u8]) -> Vec<Insn> {
    raw.chunks_exact(8)
        .map(|c| Insn {
            code: c[0],
            dst: c[1] & 0xf,
            src: c[1] >> 4,
            off: i16::from_le_bytes([c[2], c[3]]),
            imm: i32::from_le_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect()
}

const BPF_CALL: u8 = 0x85;
const BPF_LD_IMM64: u8 = 0x18;
const BPF_PSEUDO_CALL: u8 = 1;
const BPF_PSEUDO_FUNC: u8 = 4;

/// The deepest r10-relative access of insns[lo..hi] (a frame), in bytes.
fn frame_depth(ins: &[Insn]) -> u32 {
    // fp[r] = Some(k): register r holds r10 + k
    let mut fp: [Option<i64>; 11] = [None; 11];
    let mut deepest: i64 = 0;
    let mut i = 0;
    while i < ins.len() {
        let x = ins[i];
        let class = x.code & 7;
        let (dst, src) = (x.dst as usize, x.src as usize);
        let mut touch = |base: Option<i64>, off: i64| {
            if let Some(b) = base {
                deepest = deepest.max(-(b + off));
            }
        };
        match class {
            // LDX: dst = *(src + off)
            1 => {
                touch(if src == 10 { Some(0) } else { fp.get(src).copied().flatten() }, x.off.into());
                if dst < 11 {
                    fp[dst] = None;
                }
            }
            // ST / STX: *(dst + off) = ...
            2 | 3 => {
                touch(if dst == 10 { Some(0) } else { fp.get(dst).copied().flatten() }, x.off.into());
                // an atomic fetch writes src
                if class == 3 && x.code & 0xe0 == 0xc0 && x.imm & 1 != 0 && src < 11 {
                    fp[src] = None;
                }
            }
            // ALU64
            7 if dst < 11 => {
                let op = x.code & 0xf0;
                let from_reg = x.code & 8 != 0;
                match (op, from_reg) {
                    (0xb0, true) => {
                        fp[dst] = if src == 10 { Some(0) } else { fp.get(src).copied().flatten() }
                    }
                    (0x00, false) => fp[dst] = fp[dst].map(|k| k + i64::from(x.imm)),
                    (0x10, false) => fp[dst] = fp[dst].map(|k| k - i64::from(x.imm)),
                    _ => fp[dst] = None,
                }
                if let Some(k) = fp[dst] {
                    // a pointer into the frame made here is as deep as its offset
                    deepest = deepest.max(-k);
                }
            }
            0 | 4 if dst < 11 => {
                // LD (imm64 takes two slots), ALU32
                fp[dst] = None;
                if x.code == BPF_LD_IMM64 {
                    i += 1;
                }
            }
            5 | 6 => {
                // a call clobbers r0-r5; a jump joins paths: forget what is not r10
                if x.code == BPF_CALL {
                    for r in fp.iter_mut().take(6) {
                        *r = None;
                    }
                } else {
                    fp = [None; 11];
                }
            }
            _ => {}
        }
        i += 1;
    }
    deepest.max(0) as u32
}

/// The kernel's rounding of one frame (round_up_stack_depth): at least 1 byte, to 32.
fn rounded(d: u32) -> u32 {
    d.max(1).div_ceil(32) * 32
}

/// Measures a loaded program. `verifier`: the verifier's stack depth of each subprogram
/// (its statistics line, "stack depth A+B+C", in subprogram order), when the load kept it.
pub fn measure(name: &str, fd: BorrowedFd<'_>, verifier: Option<&[u32]>) -> std::io::Result<Headroom> {
    use libbpf_rs::libbpf_sys as sys;
    // first call: the lengths
    let mut info = sys::bpf_prog_info::default();
    let mut len = std::mem::size_of::<sys::bpf_prog_info>() as u32;
    // SAFETY: info is a valid bpf_prog_info of len bytes.
    if unsafe { sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let n_x = info.xlated_prog_len as usize;
    let n_f = info.nr_func_info as usize;
    let n_k = info.nr_jited_ksyms as usize;
    let (verified, btf_id) = (info.verified_insns, info.btf_id);
    let mut xlated = vec![0u8; n_x];
    let mut funcs = vec![sys::bpf_func_info::default(); n_f];
    let mut ksyms = vec![0u64; n_k];
    let mut info = sys::bpf_prog_info {
        xlated_prog_len: n_x as u32,
        xlated_prog_insns: xlated.as_mut_ptr() as u64,
        nr_func_info: n_f as u32,
        func_info_rec_size: std::mem::size_of::<sys::bpf_func_info>() as u32,
        func_info: funcs.as_mut_ptr() as u64,
        nr_jited_ksyms: n_k as u32,
        jited_ksyms: ksyms.as_mut_ptr() as u64,
        ..Default::default()
    };
    let mut len = std::mem::size_of::<sys::bpf_prog_info>() as u32;
    // SAFETY: every buffer pointer in info is valid for the length given beside it.
    if unsafe { sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let ins = insns(&xlated[..(info.xlated_prog_len as usize).min(n_x)]);
    let mut starts: Vec<usize> = funcs.iter().map(|f| f.insn_off as usize).collect();
    if starts.is_empty() {
        starts.push(0);
    }
    let fnames = func_names(btf_id, &funcs);
    let nsub = starts.len();
    let end = |s: usize| if s + 1 < nsub { starts[s + 1] } else { ins.len() };
    let sub_of = |pc: usize| starts.iter().rposition(|&s| s <= pc).unwrap_or(0);
    let jited = ksyms.iter().any(|&k| k != 0);
    let mut frames: Vec<u32> = Vec::with_capacity(nsub);
    let mut callees: Vec<Vec<usize>> = vec![Vec::new(); nsub];
    for s in 0..nsub {
        let body = &ins[starts[s].min(ins.len())..end(s).min(ins.len())];
        frames.push(frame_depth(body));
        let mut pc = starts[s];
        while pc < end(s).min(ins.len()) {
            let x = ins[pc];
            if x.code == BPF_CALL && x.src == BPF_PSEUDO_CALL {
                // JITed: imm is the callee's index (jit_subprogs); interpreted: an offset
                let t =
                    if jited { x.imm as usize } else { sub_of((pc as i64 + 1 + i64::from(x.imm)) as usize) };
                if t < nsub {
                    callees[s].push(t);
                }
            } else if x.code == BPF_LD_IMM64 && x.src == BPF_PSEUDO_FUNC && pc + 1 < ins.len() {
                // a callback: its JIT image's address, or an offset when interpreted
                let t = if jited {
                    let addr = (x.imm as u32 as u64) | (u64::from(ins[pc + 1].imm as u32) << 32);
                    ksyms.iter().position(|&k| k == addr)
                } else {
                    Some(sub_of((pc as i64 + 1 + i64::from(x.imm)) as usize))
                };
                if let Some(t) = t.filter(|&t| t < nsub) {
                    callees[s].push(t);
                }
                pc += 1;
            }
            pc += 1;
        }
        callees[s].sort_unstable();
        callees[s].dedup();
    }
    // the deepest chain from the program's entry (the call graph has no cycles: the
    // verifier refuses recursion)
    fn deepest(s: usize, frames: &[u32], callees: &[Vec<usize>], depth: usize) -> (u32, Vec<usize>) {
        let mut best = (0, Vec::new());
        if depth < 64 {
            for &c in &callees[s] {
                let d = deepest(c, frames, callees, depth + 1);
                if d.0 > best.0 {
                    best = d;
                }
            }
        }
        let mut chain = vec![s];
        chain.extend(best.1);
        (rounded(frames[s]) + best.0, chain)
    }
    let (run_stack, _) = deepest(0, &frames, &callees, 0);
    if let Some(v) = verifier.filter(|v| v.len() == frames.len()) {
        frames = v.to_vec();
    }
    let (chain_stack, chain) = deepest(0, &frames, &callees, 0);
    let label = |i: usize| fnames.get(i).cloned().flatten().unwrap_or_else(|| format!("subprog{i}"));
    let framed = |i: usize| format!("{} ({})", label(i), frames[i]);
    Ok(Headroom {
        name: name.to_string(),
        verified_insns: verified,
        frames: (0..nsub).map(|i| (label(i), frames[i])).collect(),
        chain_stack,
        chain: chain.into_iter().map(framed).collect(),
        run_stack,
    })
}

/// The subprograms' names from the program's BTF (func_info's type ids).
fn func_names(btf_id: u32, funcs: &[libbpf_rs::libbpf_sys::bpf_func_info]) -> Vec<Option<String>> {
    use libbpf_rs::libbpf_sys as sys;
    if btf_id == 0 {
        return vec![None; funcs.len()];
    }
    // SAFETY: plain call; a null result is checked.
    let btf = unsafe { sys::btf__load_from_kernel_by_id(btf_id) };
    if btf.is_null() {
        return vec![None; funcs.len()];
    }
    let names = funcs
        .iter()
        .map(|f| {
            // SAFETY: btf is valid until freed below; the type and name are checked for null.
            unsafe {
                let t = sys::btf__type_by_id(btf, f.type_id);
                if t.is_null() {
                    return None;
                }
                let n = sys::btf__name_by_offset(btf, (*t).name_off);
                if n.is_null() {
                    return None;
                }
                Some(std::ffi::CStr::from_ptr(n).to_string_lossy().into_owned())
            }
        })
        .collect();
    // SAFETY: btf came from btf__load_from_kernel_by_id and is not used after this.
    unsafe { sys::btf__free(btf) };
    names
}

/// The table the headroom test prints and docs/PERFORMANCE.md keeps (Markdown).
pub fn table(kernel: &str, compiler: &str, rows: &[Headroom]) -> String {
    let mut s = String::new();
    s += "| program | kernel | compiler | instructions | % of 1M | deepest chain's stack (of 512 B) | at run time | chain (frames in bytes) |\n";
    s += "|---|---|---|---:|---:|---:|---:|---|\n";
    for r in rows {
        s += &format!(
            "| {} | {} | {} | {} | {:.1}% | {} | {} | {} |\n",
            r.name,
            kernel,
            compiler,
            r.verified_insns,
            r.insn_percent(),
            r.chain_stack,
            r.run_stack,
            r.chain.join(" → ")
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(v: &[(u8, u8, u8, i16, i32)]) -> Vec<u8> {
        v.iter()
            .flat_map(|&(code, dst, src, off, imm)| {
                let mut b = vec![code, dst | src << 4];
                b.extend_from_slice(&off.to_le_bytes());
                b.extend_from_slice(&imm.to_le_bytes());
                b
            })
            .collect()
    }

    #[test]
    fn a_frame_is_its_deepest_access_direct_or_through_a_copy_of_r10() {
        // *(u64 *)(r10 - 8) = r1; r2 = r10; r2 += -72; *(u32 *)(r2 + 4) = 0; exit
        let v = insns(&raw(&[
            (0x7b, 10, 1, -8, 0),
            (0xbf, 2, 10, 0, 0),
            (0x07, 2, 0, 0, -72),
            (0x62, 2, 0, 4, 0),
            (0x95, 0, 0, 0, 0),
        ]));
        assert_eq!(frame_depth(&v), 72);
        // a register overwritten after the copy no longer points into the frame
        let v = insns(&raw(&[(0xbf, 2, 10, 0, 0), (0xb7, 2, 0, 0, 5), (0x62, 2, 0, -200, 0)]));
        assert_eq!(frame_depth(&v), 0);
        // loads through r10
        let v = insns(&raw(&[(0x79, 1, 10, -24, 0)]));
        assert_eq!(frame_depth(&v), 24);
    }

    #[test]
    fn frames_round_up_to_32_bytes_as_the_kernel_does() {
        assert_eq!(rounded(0), 32);
        assert_eq!(rounded(32), 32);
        assert_eq!(rounded(33), 64);
    }
}
