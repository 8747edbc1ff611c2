// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! The few libpcap functions the capture filter needs, declared by hand (pcap/pcap.h,
//! pcap/bpf.h; libpcap 1.x, whose ABI these have kept since 0.8): a dead handle to compile
//! on, the compiler, its error text, and libpcap's own cBPF interpreter and disassembler.
//! Why not the `pcap` crate: docs/design/capture.md.
//!
//! Compiling and disassembling go through one lock: `bpf_image` writes a static buffer, and
//! libpcap before 1.8 compiled with global parser state; the lock makes any libpcap safe to
//! call from the threads of the daemon or of a test harness. The interpreter is reentrant.

use std::ffi::{c_char, c_int, c_uint, c_ushort, CStr, CString};
use std::sync::Mutex;

/// `struct bpf_insn` (pcap/bpf.h): one classic BPF instruction, as libpcap lays it out.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CbpfInsn {
    pub code: c_ushort,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

/// `struct bpf_program`.
#[repr(C)]
pub struct BpfProgram {
    pub bf_len: c_uint,
    pub bf_insns: *mut CbpfInsn,
}

/// `struct pcap_pkthdr`.
#[repr(C)]
pub struct PktHdr {
    pub ts: libc::timeval,
    pub caplen: u32,
    pub len: u32,
}

/// The opaque `pcap_t`.
#[repr(C)]
pub struct Pcap {
    _private: [u8; 0],
}

/// `DLT_EN10MB`: Ethernet.
pub const DLT_EN10MB: c_int = 1;
/// `PCAP_NETMASK_UNKNOWN`: the filter names no interface's netmask (`ip broadcast` is then
/// an error, as in tcpdump on an interface without an IPv4 address).
pub const PCAP_NETMASK_UNKNOWN: u32 = 0xffff_ffff;

#[link(name = "pcap")]
extern "C" {
    fn pcap_open_dead(linktype: c_int, snaplen: c_int) -> *mut Pcap;
    fn pcap_close(p: *mut Pcap);
    fn pcap_compile(
        p: *mut Pcap,
        fp: *mut BpfProgram,
        s: *const c_char,
        optimize: c_int,
        netmask: u32,
    ) -> c_int;
    fn pcap_geterr(p: *mut Pcap) -> *mut c_char;
    fn pcap_freecode(fp: *mut BpfProgram);
    fn pcap_offline_filter(fp: *const BpfProgram, h: *const PktHdr, pkt: *const u8) -> c_int;
    fn bpf_image(insn: *const CbpfInsn, n: c_int) -> *mut c_char;
    fn pcap_lib_version() -> *const c_char;
}

static LOCK: Mutex<()> = Mutex::new(());

fn with_lock<T>(f: impl FnOnce() -> T) -> T {
    // a panic while holding the lock leaves libpcap's state as sound as before it
    let _g = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    f()
}

/// What went wrong in [`compile`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompileError {
    /// libpcap refused the expression: its own message.
    Refused(String),
    /// pcap_open_dead failed (out of memory).
    NoHandle,
}

/// Compiles `expr` for Ethernet with snap length `snaplen`, optimised as tcpdump does:
/// libpcap's instructions.
pub fn compile(expr: &CStr, snaplen: c_int) -> Result<Vec<CbpfInsn>, CompileError> {
    with_lock(|| {
        // SAFETY: plain constructor; the handle is closed below on every path.
        let p = unsafe { pcap_open_dead(DLT_EN10MB, snaplen) };
        if p.is_null() {
            return Err(CompileError::NoHandle);
        }
        let mut prog = BpfProgram { bf_len: 0, bf_insns: std::ptr::null_mut() };
        // SAFETY: p is a live handle, prog a writable bpf_program, expr NUL-terminated.
        let rc = unsafe { pcap_compile(p, &mut prog, expr.as_ptr(), 1, PCAP_NETMASK_UNKNOWN) };
        let out = if rc != 0 {
            // SAFETY: pcap_geterr returns the handle's NUL-terminated error buffer, valid
            // until the handle is closed (below, after the copy).
            let msg = unsafe { CStr::from_ptr(pcap_geterr(p)) }.to_string_lossy().into_owned();
            Err(CompileError::Refused(msg))
        } else {
            let insns = if prog.bf_insns.is_null() {
                Vec::new()
            } else {
                // SAFETY: pcap_compile succeeded: bf_insns points at bf_len instructions.
                unsafe { std::slice::from_raw_parts(prog.bf_insns, prog.bf_len as usize) }.to_vec()
            };
            // SAFETY: prog was filled by a successful pcap_compile and is freed once.
            unsafe { pcap_freecode(&mut prog) };
            Ok(insns)
        };
        // SAFETY: p is live and closed once.
        unsafe { pcap_close(p) };
        out
    })
}

/// libpcap's interpreter (`pcap_offline_filter`) on `insns` for a frame captured whole
/// (`caplen` = `len` = the frame's length): the snap length it asks for, 0 for no match.
///
/// `insns` must be a program libpcap's validator accepts (the caller checks): the
/// interpreter trusts its input and aborts the process on an unknown opcode.
pub fn offline_filter(insns: &[CbpfInsn], frame: &[u8]) -> u32 {
    let prog = BpfProgram { bf_len: insns.len() as c_uint, bf_insns: insns.as_ptr().cast_mut() };
    let hdr = PktHdr {
        ts: libc::timeval { tv_sec: 0, tv_usec: 0 },
        caplen: frame.len() as u32,
        len: frame.len() as u32,
    };
    // SAFETY: prog points at insns (read only, live for the call), hdr describes frame
    // exactly; the interpreter reads no further than caplen. It is reentrant: no lock.
    let r = unsafe { pcap_offline_filter(&prog, &hdr, frame.as_ptr()) };
    r as u32
}

/// libpcap's disassembly of one instruction (as `tcpdump -d` prints it; `n` its index).
pub fn image(insn: &CbpfInsn, n: usize) -> String {
    with_lock(|| {
        // SAFETY: insn is a valid instruction; bpf_image returns a static NUL-terminated
        // buffer, copied out before the lock is released.
        unsafe { CStr::from_ptr(bpf_image(insn, n as c_int)) }.to_string_lossy().into_owned()
    })
}

/// libpcap's version string (`libpcap version 1.10.3 (...)`).
pub fn version() -> String {
    // SAFETY: a static NUL-terminated string.
    unsafe { CStr::from_ptr(pcap_lib_version()) }.to_string_lossy().into_owned()
}

/// `expr` as a C string, or None when it holds a NUL byte.
pub fn c_expr(expr: &str) -> Option<CString> {
    CString::new(expr).ok()
}
