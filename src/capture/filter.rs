// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! tcpdump filters evaluated in the kernel: an expression is compiled by libpcap itself
//! ([`compile`], classic BPF, exactly what tcpdump would run) and translated to eBPF
//! ([`translate`]): a BPF function of `struct xdp_md *ctx` that returns what the classic
//! program returns (0: no match, else the snap length it asks for), reading the packet
//! between `ctx->data` and `ctx->data_end`. Design, register mapping and limits:
//! docs/design/capture.md. Loading: [`super::load`].

use std::fmt;

use thiserror::Error;

use super::libpcap;
pub use super::libpcap::CbpfInsn;

/// The largest snap length libpcap compiles for (its `MAXIMUM_SNAPLEN`, tcpdump's `-s 0`).
pub const MAX_SNAPLEN: u32 = 262_144;
/// Classic BPF's scratch memory, in 32-bit words (`BPF_MEMWORDS`).
pub const MEMWORDS: u32 = 16;
/// The highest packet offset a load may end at: the verifier's `MAX_PACKET_OFF`. An XDP
/// frame's linear part is shorter, so a load beyond it can only fail (return 0).
const MAX_PKT_OFF: u64 = 0xffff;

/// What went wrong compiling or translating a filter.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FilterError {
    /// libpcap refused the expression; its own message, as tcpdump prints it.
    #[error("{0}")]
    Syntax(String),
    /// The expression cannot be passed to libpcap.
    #[error("filter expression contains a NUL byte")]
    Nul,
    /// A snap length libpcap does not compile for.
    #[error("snap length {0} out of range: 1 to {MAX_SNAPLEN}")]
    Snaplen(u32),
    /// libpcap could not make a handle to compile on (out of memory).
    #[error("libpcap: pcap_open_dead failed")]
    NoHandle,
    /// A classic program libpcap's validator or interpreter would not run.
    #[error("classic BPF instruction {pc} ({code:#06x}): {why}")]
    Invalid { pc: usize, code: u16, why: &'static str },
    /// A classic program that is valid for libpcap's interpreter but has no eBPF
    /// equivalent here: a backward jump (libpcap's `protochain` loops).
    #[error("classic BPF instruction {pc} ({code:#06x}): {why}")]
    Unsupported { pc: usize, code: u16, why: &'static str },
    /// The eBPF program would need a jump farther than 32767 instructions.
    #[error("filter too large: a jump of {0} eBPF instructions")]
    TooLarge(usize),
}

/// A classic BPF program: what libpcap compiled (or one made by hand, for tests).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct CbpfProgram {
    insns: Vec<CbpfInsn>,
}

impl CbpfProgram {
    /// A program of these instructions (checked by [`CbpfProgram::validate`], not here).
    pub fn new(insns: Vec<CbpfInsn>) -> CbpfProgram {
        CbpfProgram { insns }
    }

    pub fn insns(&self) -> &[CbpfInsn] {
        &self.insns
    }

    /// Whether libpcap's interpreter runs this program and [`translate`] can translate it:
    /// libpcap's own validator's rules (known opcodes, jumps inside the program, scratch
    /// memory indices below 16, no division by a constant 0, a RET last), plus: only the
    /// opcodes its interpreter implements (it aborts on others), shifts by a constant below
    /// 32 (it shifts by C's undefined behaviour otherwise), and no backward jump.
    pub fn validate(&self) -> Result<(), FilterError> {
        let n = self.insns.len();
        if n == 0 {
            return Err(FilterError::Invalid { pc: 0, code: 0, why: "an empty program" });
        }
        for (pc, i) in self.insns.iter().enumerate() {
            let bad = |why| FilterError::Invalid { pc, code: i.code, why };
            let Some(op) = Op::decode(i) else { return Err(bad("not an opcode libpcap's interpreter runs")) };
            let past = |t: u64| t >= n as u64;
            match op {
                Op::Ja { k } => {
                    if k >= 1 << 31 {
                        return Err(FilterError::Unsupported {
                            pc,
                            code: i.code,
                            why: "a backward jump (a loop, as libpcap's protochain makes): eBPF here \
                                  is loop-free",
                        });
                    }
                    if past(pc as u64 + 1 + k as u64) {
                        return Err(bad("jumps past the end"));
                    }
                }
                Op::Jcond { jt, jf, .. }
                    if past(pc as u64 + 1 + jt as u64) || past(pc as u64 + 1 + jf as u64) =>
                {
                    return Err(bad("jumps past the end"));
                }
                Op::LdMem { k, .. } | Op::St { k, .. } if k >= MEMWORDS => {
                    return Err(bad("scratch memory index beyond M[15]"));
                }
                Op::Alu { op: c::DIV | c::MOD, src: Src::K(0) } => return Err(bad("division by zero")),
                Op::Alu { op: c::LSH | c::RSH, src: Src::K(k) } if k >= 32 => {
                    return Err(bad("shift by 32 or more"));
                }
                _ => {}
            }
        }
        match Op::decode(&self.insns[n - 1]) {
            Some(Op::Ret(_)) => Ok(()),
            _ => Err(FilterError::Invalid {
                pc: n - 1,
                code: self.insns[n - 1].code,
                why: "the last is no RET",
            }),
        }
    }

    /// libpcap's own interpreter (`pcap_offline_filter`) on a frame captured whole: the
    /// snap length the program asks for, 0 for no match. The reference the translation is
    /// tested against.
    pub fn libpcap_filter(&self, frame: &[u8]) -> Result<u32, FilterError> {
        self.validate()?;
        Ok(libpcap::offline_filter(&self.insns, frame))
    }

    /// The program as `tcpdump -d` prints it (libpcap's disassembler).
    pub fn dump(&self) -> String {
        self.insns.iter().enumerate().map(|(n, i)| libpcap::image(i, n) + "\n").collect()
    }
}

impl fmt::Debug for CbpfProgram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.dump())
    }
}

/// Compiles a tcpdump filter expression with libpcap (Ethernet, snap length `snaplen`,
/// optimised, netmask unknown), as tcpdump would. An empty expression matches every
/// packet. Err([`FilterError::Syntax`]) carries libpcap's message.
pub fn compile(expr: &str, snaplen: u32) -> Result<CbpfProgram, FilterError> {
    if snaplen == 0 || snaplen > MAX_SNAPLEN {
        return Err(FilterError::Snaplen(snaplen));
    }
    let c = libpcap::c_expr(expr).ok_or(FilterError::Nul)?;
    match libpcap::compile(&c, snaplen as i32) {
        Ok(insns) => Ok(CbpfProgram { insns }),
        Err(libpcap::CompileError::Refused(msg)) => Err(FilterError::Syntax(msg)),
        Err(libpcap::CompileError::NoHandle) => Err(FilterError::NoHandle),
    }
}

/// libpcap's version, as it says it (`libpcap version 1.10.3 (with TPACKET_V3)`).
pub fn libpcap_version() -> String {
    libpcap::version()
}

// ---- classic BPF ---------------------------------------------------------------------

/// Classic BPF's encoding (pcap/bpf.h): instruction classes, sizes, modes, operations.
pub mod c {
    pub const LD: u16 = 0x00;
    pub const LDX: u16 = 0x01;
    pub const ST: u16 = 0x02;
    pub const STX: u16 = 0x03;
    pub const ALU: u16 = 0x04;
    pub const JMP: u16 = 0x05;
    pub const RET: u16 = 0x06;
    pub const MISC: u16 = 0x07;
    pub const W: u16 = 0x00;
    pub const H: u16 = 0x08;
    pub const B: u16 = 0x10;
    pub const IMM: u16 = 0x00;
    pub const ABS: u16 = 0x20;
    pub const IND: u16 = 0x40;
    pub const MEM: u16 = 0x60;
    pub const LEN: u16 = 0x80;
    pub const MSH: u16 = 0xa0;
    pub const ADD: u16 = 0x00;
    pub const SUB: u16 = 0x10;
    pub const MUL: u16 = 0x20;
    pub const DIV: u16 = 0x30;
    pub const OR: u16 = 0x40;
    pub const AND: u16 = 0x50;
    pub const LSH: u16 = 0x60;
    pub const RSH: u16 = 0x70;
    pub const NEG: u16 = 0x80;
    pub const MOD: u16 = 0x90;
    pub const XOR: u16 = 0xa0;
    pub const JA: u16 = 0x00;
    pub const JEQ: u16 = 0x10;
    pub const JGT: u16 = 0x20;
    pub const JGE: u16 = 0x30;
    pub const JSET: u16 = 0x40;
    pub const K: u16 = 0x00;
    pub const X: u16 = 0x08;
    pub const A: u16 = 0x10;
    pub const TAX: u16 = 0x00;
    pub const TXA: u16 = 0x80;
}

/// A source operand: the constant k or the index register X.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Src {
    K(u32),
    X,
}

/// One classic instruction, decoded; exactly the opcodes libpcap's interpreter
/// (bpf_filter.c) implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    /// RET k, RET A (`Src::X` stands for A here).
    Ret(Src),
    /// A = P[k:size]
    LdAbs {
        size: u8,
        k: u32,
    },
    /// A = P[X + k:size]
    LdInd {
        size: u8,
        k: u32,
    },
    /// X = 4 × (P[k:1] & 0xf)
    LdxMsh {
        k: u32,
    },
    /// A or X = the packet's length
    LdLen {
        x: bool,
    },
    /// A or X = k
    LdImm {
        x: bool,
        k: u32,
    },
    /// A or X = M[k]
    LdMem {
        x: bool,
        k: u32,
    },
    /// M[k] = A or X
    St {
        x: bool,
        k: u32,
    },
    Ja {
        k: u32,
    },
    Jcond {
        op: u16,
        src: Src,
        jt: u8,
        jf: u8,
    },
    /// A = A op src
    Alu {
        op: u16,
        src: Src,
    },
    /// A = -A
    Neg,
    Tax,
    Txa,
}

impl Op {
    fn decode(i: &CbpfInsn) -> Option<Op> {
        use c::*;
        let (code, k) = (i.code, i.k);
        let src = |code: u16| if code & X != 0 { Src::X } else { Src::K(k) };
        Some(match code {
            _ if code == RET | K => Op::Ret(Src::K(k)),
            _ if code == RET | A => Op::Ret(Src::X),
            _ if code == LD | W | ABS => Op::LdAbs { size: 4, k },
            _ if code == LD | H | ABS => Op::LdAbs { size: 2, k },
            _ if code == LD | B | ABS => Op::LdAbs { size: 1, k },
            _ if code == LD | W | IND => Op::LdInd { size: 4, k },
            _ if code == LD | H | IND => Op::LdInd { size: 2, k },
            _ if code == LD | B | IND => Op::LdInd { size: 1, k },
            _ if code == LDX | MSH | B => Op::LdxMsh { k },
            _ if code == LD | W | LEN => Op::LdLen { x: false },
            _ if code == LDX | W | LEN => Op::LdLen { x: true },
            _ if code == LD | IMM => Op::LdImm { x: false, k },
            _ if code == LDX | IMM => Op::LdImm { x: true, k },
            _ if code == LD | MEM => Op::LdMem { x: false, k },
            _ if code == LDX | MEM => Op::LdMem { x: true, k },
            _ if code == ST => Op::St { x: false, k },
            _ if code == STX => Op::St { x: true, k },
            _ if code == JMP | JA => Op::Ja { k },
            _ if code & 0x07 == JMP && matches!(code & !X & !0x07, JEQ | JGT | JGE | JSET) => {
                Op::Jcond { op: code & !X & !0x07, src: src(code), jt: i.jt, jf: i.jf }
            }
            _ if code == ALU | NEG => Op::Neg,
            _ if code & 0x07 == ALU
                && matches!(code & !X & !0x07, ADD | SUB | MUL | DIV | MOD | AND | OR | XOR | LSH | RSH) =>
            {
                Op::Alu { op: code & !X & !0x07, src: src(code) }
            }
            _ if code == MISC | TAX => Op::Tax,
            _ if code == MISC | TXA => Op::Txa,
            _ => return None,
        })
    }
}

// ---- eBPF ----------------------------------------------------------------------------

/// One eBPF instruction, laid out as the kernel's `struct bpf_insn` (linux/bpf.h): opcode,
/// destination and source registers (4 bits each), signed offset, signed immediate.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct EbpfInsn {
    pub code: u8,
    regs: u8,
    pub off: i16,
    pub imm: i32,
}

impl EbpfInsn {
    pub const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> EbpfInsn {
        // the bitfields `dst_reg:4, src_reg:4` are allocated from the low bits on
        // little-endian targets, from the high bits on big-endian ones
        let regs =
            if cfg!(target_endian = "little") { (dst & 0xf) | (src << 4) } else { (dst << 4) | (src & 0xf) };
        EbpfInsn { code, regs, off, imm }
    }

    pub fn dst(&self) -> u8 {
        if cfg!(target_endian = "little") {
            self.regs & 0xf
        } else {
            self.regs >> 4
        }
    }

    pub fn src(&self) -> u8 {
        if cfg!(target_endian = "little") {
            self.regs >> 4
        } else {
            self.regs & 0xf
        }
    }
}

impl fmt::Debug for EbpfInsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{{:#04x} r{} r{} {:+} {:#x}}}", self.code, self.dst(), self.src(), self.off, self.imm)
    }
}

/// eBPF's encoding (linux/bpf.h, linux/bpf_common.h).
mod e {
    pub const LDX: u8 = 0x01;
    pub const ST: u8 = 0x02;
    pub const STX: u8 = 0x03;
    pub const ALU: u8 = 0x04;
    pub const JMP: u8 = 0x05;
    pub const JMP32: u8 = 0x06;
    pub const ALU64: u8 = 0x07;
    pub const W: u8 = 0x00;
    pub const H: u8 = 0x08;
    pub const B: u8 = 0x10;
    pub const DW: u8 = 0x18;
    pub const MEM: u8 = 0x60;
    pub const K: u8 = 0x00;
    pub const X: u8 = 0x08;
    pub const ADD: u8 = 0x00;
    pub const AND: u8 = 0x50;
    pub const LSH: u8 = 0x60;
    pub const NEG: u8 = 0x80;
    pub const MOV: u8 = 0xb0;
    pub const END: u8 = 0xd0;
    pub const TO_BE: u8 = 0x08;
    pub const JA: u8 = 0x00;
    pub const JEQ: u8 = 0x10;
    pub const JGT: u8 = 0x20;
    pub const JGE: u8 = 0x30;
    pub const JSET: u8 = 0x40;
    pub const JNE: u8 = 0x50;
    pub const JLT: u8 = 0xa0;
    pub const JLE: u8 = 0xb0;
    pub const CALL: u8 = 0x80;
    pub const EXIT: u8 = 0x90;
}

/// Registers. R6–R9 survive the one helper call (`LEN`); R1–R3 are scratch.
const R0: u8 = 0;
const R1: u8 = 1;
const R2: u8 = 2;
const R3: u8 = 3;
/// `ctx->data`: the packet's start, never moved, so every bounds check widens its range
const PKT: u8 = 6;
/// the accumulator A
const RA: u8 = 7;
/// the index register X
const RX: u8 = 8;
/// `ctx->data_end`
const END: u8 = 9;
const FP: u8 = 10;
/// M[i] lives at FP + MEM_OFF + 4 i: 64 bytes under the frame pointer.
const MEM_OFF: i16 = -64;
/// ctx, spilled when the program reads the packet's length (a helper call needs it).
const CTX_OFF: i16 = -72;
/// `struct xdp_md`: `data`, `data_end`.
const XDP_MD_DATA: i16 = 0;
const XDP_MD_DATA_END: i16 = 4;
/// `bpf_xdp_get_buff_len(ctx)`: the whole frame's length, fragments included.
const FUNC_XDP_GET_BUFF_LEN: i32 = 188;

/// Where a jump goes: the code of a classic instruction, or the shared `return 0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Insn(usize),
    Ret0,
}

struct Emitter {
    out: Vec<EbpfInsn>,
    /// jumps to patch: (index in out, where to)
    fix: Vec<(usize, Target)>,
}

impl Emitter {
    fn put(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) {
        self.out.push(EbpfInsn::new(code, dst, src, off, imm));
    }
    /// A jump (conditional or not) whose offset is patched at the end.
    fn jump(&mut self, code: u8, dst: u8, src: u8, imm: i32, to: Target) {
        self.fix.push((self.out.len(), to));
        self.put(code, dst, src, 0, imm);
    }
    fn mov32_imm(&mut self, dst: u8, k: u32) {
        self.put(e::ALU | e::MOV | e::K, dst, 0, 0, k as i32);
    }
    fn mov32_reg(&mut self, dst: u8, src: u8) {
        self.put(e::ALU | e::MOV | e::X, dst, src, 0, 0);
    }
    fn mov64_reg(&mut self, dst: u8, src: u8) {
        self.put(e::ALU64 | e::MOV | e::X, dst, src, 0, 0);
    }
    fn add64_imm(&mut self, dst: u8, k: i32) {
        self.put(e::ALU64 | e::ADD | e::K, dst, 0, 0, k);
    }
    fn exit(&mut self) {
        self.put(e::JMP | e::EXIT, 0, 0, 0, 0);
    }

    /// `dst = P[k:size]`, big-endian, for a constant offset; `known`: the packet length
    /// already checked on every path here. Returns false when the load can never succeed
    /// (the code returns 0).
    fn load_abs(&mut self, dst: u8, size: u8, k: u32, known: u64) -> bool {
        let end = k as u64 + size as u64;
        if end > MAX_PKT_OFF {
            self.jump(e::JMP | e::JA, 0, 0, 0, Target::Ret0);
            return false;
        }
        if end > known {
            // PKT + end <= data_end, or return 0: the verifier now knows `end` bytes
            self.mov64_reg(R1, PKT);
            self.add64_imm(R1, end as i32);
            self.jump(e::JMP | e::JGT | e::X, R1, END, 0, Target::Ret0);
        }
        if k <= i16::MAX as u32 {
            self.put(e::LDX | e::MEM | ebpf_size(size), dst, PKT, k as i16, 0);
        } else {
            self.mov64_reg(R1, PKT);
            self.add64_imm(R1, k as i32);
            self.put(e::LDX | e::MEM | ebpf_size(size), dst, R1, 0, 0);
        }
        self.swap_from_network(dst, size);
        true
    }

    /// `A = P[X + k:size]`, big-endian. Returns false when the load can never succeed.
    fn load_ind(&mut self, size: u8, k: u32) -> bool {
        let end = k as u64 + size as u64;
        if end > MAX_PKT_OFF {
            self.jump(e::JMP | e::JA, 0, 0, 0, Target::Ret0);
            return false;
        }
        // X is bounded first, so that the verifier accepts PKT + X and, with the check
        // below, knows the access in bounds: X + k + size <= MAX_PACKET_OFF.
        self.mov32_reg(R1, RX);
        self.jump(e::JMP | e::JGT | e::K, R1, 0, (MAX_PKT_OFF - end) as i32, Target::Ret0);
        self.mov64_reg(R2, PKT);
        self.put(e::ALU64 | e::ADD | e::X, R2, R1, 0, 0);
        let off = if k <= i16::MAX as u32 {
            k as i16
        } else {
            self.add64_imm(R2, k as i32);
            0
        };
        self.mov64_reg(R3, R2);
        self.add64_imm(R3, off as i32 + size as i32);
        self.jump(e::JMP | e::JGT | e::X, R3, END, 0, Target::Ret0);
        self.put(e::LDX | e::MEM | ebpf_size(size), RA, R2, off, 0);
        self.swap_from_network(RA, size);
        true
    }

    /// Packet bytes are big-endian; classic BPF's loads give host values.
    fn swap_from_network(&mut self, dst: u8, size: u8) {
        if size > 1 {
            // on a big-endian host this only zero-extends, as wanted
            self.put(e::ALU | e::END | e::TO_BE, dst, 0, 0, size as i32 * 8);
        }
    }
}

fn ebpf_size(size: u8) -> u8 {
    match size {
        1 => e::B,
        2 => e::H,
        _ => e::W,
    }
}

/// The eBPF jump opcode of a classic comparison, and of its negation (JSET has none).
fn jmp_ops(op: u16) -> (u8, Option<u8>) {
    match op {
        c::JEQ => (e::JEQ, Some(e::JNE)),
        c::JGT => (e::JGT, Some(e::JLE)),
        c::JGE => (e::JGE, Some(e::JLT)),
        _ => (e::JSET, None),
    }
}

fn mem_off(k: u32) -> i16 {
    MEM_OFF + 4 * k as i16
}

/// Translates a classic BPF program to an eBPF function `int f(struct xdp_md *ctx)` that
/// returns what the classic program returns for the packet between `ctx->data` and
/// `ctx->data_end` (the length it reads, `len`, is the whole frame's: fragments
/// included). The program is validated first ([`CbpfProgram::validate`]).
///
/// Registers: A in R7, X in R8 (32-bit values, zero-extended: every operation on them is
/// a 32-bit one), `data` in R6, `data_end` in R9, M[0..15] on the stack at R10-64..R10-4.
/// Every packet load is checked against `data_end` unless an earlier check on every path
/// to it covers it; a failing check returns 0, as an out-of-bounds load does in classic
/// BPF, and so do division and modulo by X = 0. The output has no loop and no backward
/// jump; unreachable classic instructions are left out (the verifier refuses dead code).
pub fn translate(prog: &CbpfProgram) -> Result<Vec<EbpfInsn>, FilterError> {
    prog.validate()?;
    let ops: Vec<Op> = prog.insns.iter().map(|i| Op::decode(i).expect("validated")).collect();
    let n = ops.len();

    // Which instructions are reachable, and the packet length checked on every path to
    // each: jumps only go forward, so one pass in order sees all predecessors first.
    let mut reach = vec![false; n];
    let mut known = vec![u64::MAX; n];
    reach[0] = true;
    known[0] = 0;
    let mut uses_len = false;
    let mut mem_read = [false; MEMWORDS as usize];
    for pc in 0..n {
        if !reach[pc] {
            continue;
        }
        let mut out = known[pc];
        let mut next: [Option<usize>; 2] = [Some(pc + 1), None];
        let mut load = |size: u8, k: u32| {
            out = out.max(k as u64 + size as u64);
            // a load that can never succeed ends every path through it (return 0)
            out <= MAX_PKT_OFF
        };
        match ops[pc] {
            Op::Ret(_) => next = [None, None],
            Op::LdAbs { size, k } if !load(size, k) => next = [None, None],
            Op::LdxMsh { k } if !load(1, k) => next = [None, None],
            Op::LdInd { size, k } if k as u64 + size as u64 > MAX_PKT_OFF => next = [None, None],
            Op::LdLen { .. } => uses_len = true,
            Op::LdMem { k, .. } => mem_read[k as usize] = true,
            Op::Ja { k } => next = [Some(pc + 1 + k as usize), None],
            Op::Jcond { jt, jf, .. } => next = [Some(pc + 1 + jt as usize), Some(pc + 1 + jf as usize)],
            _ => {}
        }
        for s in next.into_iter().flatten() {
            known[s] = if reach[s] { known[s].min(out) } else { out };
            reach[s] = true;
        }
    }

    let mut em = Emitter { out: Vec::with_capacity(n * 4 + 8), fix: Vec::new() };
    if uses_len {
        em.put(e::STX | e::MEM | e::DW, FP, R1, CTX_OFF, 0);
    }
    em.put(e::LDX | e::MEM | e::W, PKT, R1, XDP_MD_DATA, 0);
    em.put(e::LDX | e::MEM | e::W, END, R1, XDP_MD_DATA_END, 0);
    // classic BPF starts with A = X = 0; scratch words read anywhere start at 0 too
    // (libpcap never reads one before storing it, but the verifier wants them written)
    em.mov32_imm(RA, 0);
    em.mov32_imm(RX, 0);
    for (i, _) in mem_read.iter().enumerate().filter(|(_, r)| **r) {
        em.put(e::ST | e::MEM | e::W, FP, 0, mem_off(i as u32), 0);
    }

    let mut start = vec![usize::MAX; n];
    for pc in 0..n {
        if !reach[pc] {
            continue;
        }
        start[pc] = em.out.len();
        // the next instruction emitted, if it is this one's fall-through
        let next = pc + 1;
        match ops[pc] {
            Op::Ret(src) => {
                match src {
                    Src::K(k) => em.mov32_imm(R0, k),
                    Src::X => em.mov32_reg(R0, RA),
                }
                em.exit();
            }
            Op::LdAbs { size, k } => {
                em.load_abs(RA, size, k, known[pc]);
            }
            Op::LdxMsh { k } => {
                if em.load_abs(RX, 1, k, known[pc]) {
                    em.put(e::ALU | e::AND | e::K, RX, 0, 0, 0xf);
                    em.put(e::ALU | e::LSH | e::K, RX, 0, 0, 2);
                }
            }
            Op::LdInd { size, k } => {
                em.load_ind(size, k);
            }
            Op::LdLen { x } => {
                em.put(e::LDX | e::MEM | e::DW, R1, FP, CTX_OFF, 0);
                em.put(e::JMP | e::CALL, 0, 0, 0, FUNC_XDP_GET_BUFF_LEN);
                em.mov32_reg(if x { RX } else { RA }, R0);
            }
            Op::LdImm { x, k } => em.mov32_imm(if x { RX } else { RA }, k),
            Op::LdMem { x, k } => em.put(e::LDX | e::MEM | e::W, if x { RX } else { RA }, FP, mem_off(k), 0),
            Op::St { x, k } => em.put(e::STX | e::MEM | e::W, FP, if x { RX } else { RA }, mem_off(k), 0),
            Op::Ja { k } => {
                let to = next + k as usize;
                if to != next {
                    em.jump(e::JMP | e::JA, 0, 0, 0, Target::Insn(to));
                }
            }
            Op::Jcond { op, src, jt, jf } => {
                let (t, f) = (next + jt as usize, next + jf as usize);
                let (code, neg) = jmp_ops(op);
                let (srcbits, sreg, imm) = match src {
                    Src::K(k) => (e::K, 0, k as i32),
                    Src::X => (e::X, RX, 0),
                };
                // 32-bit compares: an immediate is taken as the u32 it encodes
                if t == f {
                    if t != next {
                        em.jump(e::JMP | e::JA, 0, 0, 0, Target::Insn(t));
                    }
                } else if f == next {
                    em.jump(e::JMP32 | code | srcbits, RA, sreg, imm, Target::Insn(t));
                } else if let (true, Some(neg)) = (t == next, neg) {
                    em.jump(e::JMP32 | neg | srcbits, RA, sreg, imm, Target::Insn(f));
                } else {
                    em.jump(e::JMP32 | code | srcbits, RA, sreg, imm, Target::Insn(t));
                    em.jump(e::JMP | e::JA, 0, 0, 0, Target::Insn(f));
                }
            }
            Op::Alu { op, src } => {
                // classic and extended BPF number their ALU operations alike
                let op8 = op as u8;
                match src {
                    Src::K(k) => em.put(e::ALU | op8 | e::K, RA, 0, 0, k as i32),
                    Src::X if op == c::DIV || op == c::MOD => {
                        // classic BPF returns 0 on division by zero; eBPF would yield 0 and go on
                        em.jump(e::JMP32 | e::JEQ | e::K, RX, 0, 0, Target::Ret0);
                        em.put(e::ALU | op8 | e::X, RA, RX, 0, 0);
                    }
                    Src::X if op == c::LSH || op == c::RSH => {
                        // libpcap: a shift by 32 or more gives 0; eBPF masks the count
                        em.put(e::JMP32 | e::JLT | e::K, RX, 0, 2, 32);
                        em.mov32_imm(RA, 0);
                        em.put(e::JMP | e::JA, 0, 0, 1, 0);
                        em.put(e::ALU | op8 | e::X, RA, RX, 0, 0);
                    }
                    Src::X => em.put(e::ALU | op8 | e::X, RA, RX, 0, 0),
                }
            }
            Op::Neg => em.put(e::ALU | e::NEG, RA, 0, 0, 0),
            Op::Tax => em.mov32_reg(RX, RA),
            Op::Txa => em.mov32_reg(RA, RX),
        }
    }
    let ret0 = em.out.len();
    if em.fix.iter().any(|(_, t)| *t == Target::Ret0) {
        em.mov32_imm(R0, 0);
        em.exit();
    }
    for (at, to) in std::mem::take(&mut em.fix) {
        let dest = match to {
            Target::Insn(pc) => start[pc],
            Target::Ret0 => ret0,
        };
        debug_assert!(dest != usize::MAX && dest > at, "a jump to dead code or backwards");
        let off = dest - at - 1;
        em.out[at].off = i16::try_from(off).map_err(|_| FilterError::TooLarge(off))?;
    }
    Ok(em.out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn insn(code: u16, jt: u8, jf: u8, k: u32) -> CbpfInsn {
        CbpfInsn { code, jt, jf, k }
    }

    /// Every jump of the output lands inside it, forward; the output ends in EXIT or JA;
    /// no load from the packet without a check before it in program order.
    fn check_shape(out: &[EbpfInsn]) {
        for (i, x) in out.iter().enumerate() {
            let class = x.code & 7;
            if (class == e::JMP || class == e::JMP32)
                && x.code != e::JMP | e::EXIT
                && x.code != e::JMP | e::CALL
            {
                assert!(x.off >= 0, "insn {i}: backward jump {x:?}");
                assert!(i + 1 + (x.off as usize) < out.len(), "insn {i}: jump out of the program {x:?}");
            }
        }
        let last = out.last().unwrap().code;
        assert!(last == e::JMP | e::EXIT || last == e::JMP | e::JA);
    }

    #[test]
    fn compile_gives_libpcaps_program_and_errors() {
        let p = compile("", 65535).unwrap();
        assert_eq!(p.insns(), &[insn(c::RET | c::K, 0, 0, 65535)]);
        let p = compile("ip", 1234).unwrap();
        assert!(p.dump().contains("ldh      [12]"), "{}", p.dump());
        assert!(p.insns().iter().any(|i| i.code == c::RET | c::K && i.k == 1234));
        match compile("udp and", 100) {
            Err(FilterError::Syntax(m)) => assert!(m.contains("syntax error"), "{m}"),
            r => panic!("{r:?}"),
        }
        assert_eq!(compile("ip", 0), Err(FilterError::Snaplen(0)));
        assert_eq!(compile("ip", MAX_SNAPLEN + 1), Err(FilterError::Snaplen(MAX_SNAPLEN + 1)));
        assert_eq!(compile("i\0p", 100), Err(FilterError::Nul));
        assert!(libpcap_version().starts_with("libpcap version"));
    }

    #[test]
    fn validate_refuses_what_libpcap_would_not_run() {
        let ret = insn(c::RET | c::K, 0, 0, 1);
        let bad = |v: Vec<CbpfInsn>| CbpfProgram::new(v).validate().unwrap_err();
        assert!(matches!(bad(vec![]), FilterError::Invalid { .. }));
        assert!(matches!(bad(vec![insn(c::LD | c::IMM, 0, 0, 1)]), FilterError::Invalid { pc: 0, .. }));
        assert!(matches!(bad(vec![insn(0xffff, 0, 0, 0), ret]), FilterError::Invalid { pc: 0, .. }));
        // LD|H|IMM: the validator takes it, the interpreter aborts on it
        assert!(matches!(bad(vec![insn(c::LD | c::H | c::IMM, 0, 0, 0), ret]), FilterError::Invalid { .. }));
        assert!(matches!(bad(vec![insn(c::JMP | c::JA, 0, 0, 1), ret]), FilterError::Invalid { .. }));
        assert!(matches!(
            bad(vec![insn(c::JMP | c::JA, 0, 0, u32::MAX), ret]),
            FilterError::Unsupported { pc: 0, .. }
        ));
        assert!(matches!(bad(vec![insn(c::JMP | c::JEQ, 0, 1, 0), ret]), FilterError::Invalid { .. }));
        assert!(matches!(bad(vec![insn(c::ST, 0, 0, 16), ret]), FilterError::Invalid { .. }));
        assert!(matches!(bad(vec![insn(c::LDX | c::MEM, 0, 0, 16), ret]), FilterError::Invalid { .. }));
        assert!(matches!(bad(vec![insn(c::ALU | c::DIV, 0, 0, 0), ret]), FilterError::Invalid { .. }));
        assert!(matches!(bad(vec![insn(c::ALU | c::MOD, 0, 0, 0), ret]), FilterError::Invalid { .. }));
        assert!(matches!(bad(vec![insn(c::ALU | c::LSH, 0, 0, 32), ret]), FilterError::Invalid { .. }));
        assert!(matches!(bad(vec![insn(c::ALU | c::RSH, 0, 0, 40), ret]), FilterError::Invalid { .. }));
        assert!(CbpfProgram::new(vec![insn(c::ALU | c::LSH, 0, 0, 31), ret]).validate().is_ok());
        // translate validates too
        assert!(translate(&CbpfProgram::new(vec![insn(c::ST, 0, 0, 99), ret])).is_err());
        assert!(CbpfProgram::new(vec![insn(c::ST, 0, 0, 99), ret]).libpcap_filter(&[0; 20]).is_err());
    }

    #[test]
    fn protochain_loops_are_refused_with_a_reason() {
        let p = compile("ip6 protochain 17", 100).unwrap();
        match translate(&p) {
            Err(FilterError::Unsupported { why, .. }) => assert!(why.contains("backward"), "{why}"),
            r => panic!("{r:?}"),
        }
    }

    #[test]
    fn every_jump_is_forward_and_inside() {
        for expr in ["", "tcp port 80 or udp port 53", "ip[2:2] / ip[8] > 10", "len < 100", "vlan and udp"] {
            let out = translate(&compile(expr, 65535).unwrap()).unwrap();
            check_shape(&out);
        }
    }

    #[test]
    fn redundant_bounds_checks_are_left_out() {
        // ip[22], ip[23], then ip[9]: a load no further than one already checked on
        // every path to it (ip[9] after ip[23]) needs no check of its own
        let out =
            translate(&compile("ip and ip[22] = 64 and ip[23] = 17 and ip[9] = 6", 65535).unwrap()).unwrap();
        let checks = out.iter().filter(|i| i.code == e::JMP | e::JGT | e::X && i.src() == END).count();
        let loads = out.iter().filter(|i| i.code & 7 == e::LDX && i.src() == PKT).count();
        assert!(loads >= 3, "{out:?}");
        assert!(checks < loads, "{checks} checks for {loads} loads: {out:?}");
    }

    #[test]
    fn dead_code_is_left_out_and_far_loads_return_0() {
        let p = CbpfProgram::new(vec![
            insn(c::JMP | c::JA, 0, 0, 1),
            insn(c::RET | c::K, 0, 0, 7), // dead
            insn(c::LD | c::W | c::ABS, 0, 0, 70_000),
            insn(c::RET | c::A, 0, 0, 0), // dead: the load above never succeeds
        ]);
        let out = translate(&p).unwrap();
        check_shape(&out);
        assert!(!out.iter().any(|i| i.code == e::ALU | e::MOV | e::K && i.dst() == R0 && i.imm == 7));
        assert!(!out.iter().any(|i| i.code == e::ALU | e::MOV | e::X && i.dst() == R0));
    }

    #[test]
    fn scratch_words_read_are_zeroed_and_len_spills_ctx() {
        let p = CbpfProgram::new(vec![
            insn(c::LD | c::MEM, 0, 0, 3),
            insn(c::LDX | c::W | c::LEN, 0, 0, 0),
            insn(c::RET | c::A, 0, 0, 0),
        ]);
        let out = translate(&p).unwrap();
        assert_eq!(out[0], EbpfInsn::new(e::STX | e::MEM | e::DW, FP, R1, CTX_OFF, 0));
        assert!(out.contains(&EbpfInsn::new(e::ST | e::MEM | e::W, FP, 0, MEM_OFF + 12, 0)));
        assert!(out.contains(&EbpfInsn::new(e::JMP | e::CALL, 0, 0, 0, FUNC_XDP_GET_BUFF_LEN)));
    }

    #[test]
    fn insn_layout_is_the_kernels() {
        assert_eq!(std::mem::size_of::<EbpfInsn>(), std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_insn>());
        let i = EbpfInsn::new(0x61, 6, 1, 4, -1);
        // SAFETY: both are 8-byte plain-data structs of the kernel's layout.
        let k: libbpf_rs::libbpf_sys::bpf_insn = unsafe { std::mem::transmute(i) };
        assert_eq!((k.code, k.dst_reg(), k.src_reg(), k.off, k.imm), (0x61, 6, 1, 4, -1));
        assert_eq!((i.dst(), i.src()), (6, 1));
    }
}
