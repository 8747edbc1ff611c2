// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Loading a translated filter ([`super::filter::translate`]) into the kernel: as an XDP
//! program of its own ([`load_xdp`]: tests run it with BPF_PROG_TEST_RUN), or as the body
//! of a global function `int nx_cap_filter(struct xdp_md *ctx)` of a loaded XDP program
//! (BPF_PROG_TYPE_EXT, "freplace": [`load_freplace`], then [`attach_freplace`]). Both carry
//! BTF describing the function (`int nx_cap_filter(struct xdp_md *ctx)`, global): freplace
//! requires it, the kernel matching it against the target function's prototype.
//! docs/design/capture.md says what the target needs.

use std::ffi::{c_char, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use libbpf_rs::libbpf_sys as sys;
use thiserror::Error;

use super::filter::EbpfInsn;

/// The name of the filter function, in the BTF of the programs loaded here and of the
/// XDP programs that call it.
pub const FILTER_FUNC: &str = "nx_cap_filter";
/// Program licence: the project's (a GPL-compatible one, as some helpers require).
const LICENSE: &str = "Dual BSD/GPL";
/// Room for the verifier's log of a refused program.
const LOG_SIZE: usize = 1 << 20;
/// How much of that log an error keeps: its end, where the verifier says why.
const LOG_TAIL: usize = 4000;

/// What went wrong loading or attaching a filter.
#[derive(Debug, Error)]
pub enum LoadError {
    /// A system call or libbpf call failed.
    #[error("{what}: {source}")]
    Sys { what: String, source: io::Error },
    /// The kernel refused the program; the end of the verifier's log.
    #[error("{what}: {source}; the verifier's log: {log}")]
    Verifier { what: String, source: io::Error, log: String },
    /// The target program's BTF has no such global function.
    #[error("program id {prog_id} has no function {func} in its BTF (a global, __noinline one)")]
    NoFunc { prog_id: u32, func: String },
}

fn sys_err(what: impl Into<String>, errno: i32) -> LoadError {
    LoadError::Sys { what: what.into(), source: io::Error::from_raw_os_error(errno) }
}

/// A libbpf BTF object, freed on drop.
struct Btf(*mut sys::btf);

impl Drop for Btf {
    fn drop(&mut self) {
        // SAFETY: a pointer from btf__new_empty / btf__load_from_kernel_by_id, freed once.
        unsafe { sys::btf__free(self.0) }
    }
}

/// libbpf's int results: the value, or its negative errno as an error.
fn lb(what: &str, rc: i32) -> Result<u32, LoadError> {
    if rc < 0 {
        Err(sys_err(format!("building the filter's BTF: {what}"), -rc))
    } else {
        Ok(rc as u32)
    }
}

/// BTF for `int nx_cap_filter(struct xdp_md *ctx)`, global, loaded into the kernel; with
/// the function's type id. `struct xdp_md` is the UAPI one (linux/bpf.h): the kernel
/// recognises the context argument by that name.
fn filter_btf() -> Result<(Btf, u32), LoadError> {
    // SAFETY: plain constructor; NULL (errno set) on failure.
    let b = unsafe { sys::btf__new_empty() };
    if b.is_null() {
        return Err(sys_err(
            "btf__new_empty",
            io::Error::last_os_error().raw_os_error().unwrap_or(libc::ENOMEM),
        ));
    }
    let btf = Btf(b);
    let cs = |s: &str| CString::new(s).expect("no NUL");
    // SAFETY: every call below gets a live BTF object and NUL-terminated names that outlive
    // the call (libbpf copies them).
    unsafe {
        let int = lb("int", sys::btf__add_int(b, cs("int").as_ptr(), 4, sys::BTF_INT_SIGNED as i32))?;
        let u32_ = lb("unsigned int", sys::btf__add_int(b, cs("unsigned int").as_ptr(), 4, 0))?;
        let md = lb("struct xdp_md", sys::btf__add_struct(b, cs("xdp_md").as_ptr(), 24))?;
        for (i, f) in ["data", "data_end", "data_meta", "ingress_ifindex", "rx_queue_index", "egress_ifindex"]
            .iter()
            .enumerate()
        {
            lb(f, sys::btf__add_field(b, cs(f).as_ptr(), u32_ as i32, (i * 32) as u32, 0))?;
        }
        let ptr = lb("struct xdp_md *", sys::btf__add_ptr(b, md as i32))?;
        let proto = lb("prototype", sys::btf__add_func_proto(b, int as i32))?;
        lb("ctx", sys::btf__add_func_param(b, cs("ctx").as_ptr(), ptr as i32))?;
        let func = lb(
            FILTER_FUNC,
            sys::btf__add_func(b, cs(FILTER_FUNC).as_ptr(), sys::BTF_FUNC_GLOBAL, proto as i32),
        )?;
        let rc = sys::btf__load_into_kernel(b);
        if rc < 0 {
            return Err(sys_err("loading the filter's BTF into the kernel", -rc));
        }
        Ok((btf, func))
    }
}

/// `struct bpf_func_info`: the function at instruction `insn_off` has BTF type `type_id`.
#[repr(C)]
struct FuncInfo {
    insn_off: u32,
    type_id: u32,
}

/// Loads `insns` as a program of type `prog_type`, with the filter function's BTF and
/// `opts` (attachment) as given.
fn load(
    insns: &[EbpfInsn],
    prog_type: sys::bpf_prog_type,
    mut opts: sys::bpf_prog_load_opts,
    what: &str,
) -> Result<OwnedFd, LoadError> {
    let (btf, func) = filter_btf()?;
    let info = FuncInfo { insn_off: 0, type_id: func };
    // SAFETY: btf is a loaded BTF object.
    opts.prog_btf_fd = unsafe { sys::btf__fd(btf.0) } as u32;
    opts.func_info = (&info as *const FuncInfo).cast();
    opts.func_info_cnt = 1;
    opts.func_info_rec_size = std::mem::size_of::<FuncInfo>() as u32;
    prog_load(insns, prog_type, opts, FILTER_FUNC, what)
}

/// BPF_PROG_LOAD of `insns` named `name`: the program, or the kernel's errno with the end
/// of the verifier's log.
pub(crate) fn prog_load(
    insns: &[EbpfInsn],
    prog_type: sys::bpf_prog_type,
    mut opts: sys::bpf_prog_load_opts,
    name: &str,
    what: &str,
) -> Result<OwnedFd, LoadError> {
    let mut log = vec![0u8; LOG_SIZE];
    opts.sz = std::mem::size_of::<sys::bpf_prog_load_opts>() as _;
    // log level 0 with a buffer: libbpf loads once quietly and, on failure, again with
    // the log on
    opts.log_buf = log.as_mut_ptr().cast::<c_char>();
    opts.log_size = log.len() as u32;
    let name = CString::new(name).map_err(|_| sys_err(format!("{what}: a NUL in the name"), libc::EINVAL))?;
    let lic = CString::new(LICENSE).expect("no NUL");
    // SAFETY: EbpfInsn has struct bpf_insn's layout (checked by a unit test); insns, the
    // names, the options' pointers and the log buffer outlive the call.
    let fd = unsafe {
        sys::bpf_prog_load(
            prog_type,
            name.as_ptr(),
            lic.as_ptr(),
            insns.as_ptr().cast::<sys::bpf_insn>(),
            insns.len() as _,
            &mut opts,
        )
    };
    if fd < 0 {
        let end = log.iter().position(|b| *b == 0).unwrap_or(log.len());
        let text = String::from_utf8_lossy(&log[..end]);
        let mut from = text.len().saturating_sub(LOG_TAIL);
        while !text.is_char_boundary(from) {
            from += 1;
        }
        let tail = text[from..].trim_end();
        let log = if tail.is_empty() {
            "(none: refused before the verifier ran)".to_owned()
        } else {
            tail.to_owned()
        };
        return Err(LoadError::Verifier {
            what: what.into(),
            source: io::Error::from_raw_os_error(-fd),
            log,
        });
    }
    // SAFETY: a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Loads a translated filter as an XDP program of its own (BPF_PROG_TYPE_XDP) whose
/// return value is the filter's: for BPF_PROG_TEST_RUN, and as the target of a tail call
/// from an XDP program (its return value then that program's), not for attaching to an
/// interface (its return values are no XDP actions). Its expected attach type is
/// `BPF_XDP`, as libbpf gives `SEC("xdp")` programs: a program array takes only programs
/// of its first program's type and attach type.
pub fn load_xdp(insns: &[EbpfInsn]) -> Result<OwnedFd, LoadError> {
    let opts = sys::bpf_prog_load_opts { expected_attach_type: sys::BPF_XDP, ..Default::default() };
    load(insns, sys::BPF_PROG_TYPE_XDP, opts, "loading the filter as XDP")
}

/// The id of the program `prog` and of its BTF (0: it has none).
fn prog_ids(prog: BorrowedFd<'_>) -> Result<(u32, u32), LoadError> {
    let mut info = sys::bpf_prog_info::default();
    let mut len = std::mem::size_of::<sys::bpf_prog_info>() as u32;
    // SAFETY: a valid descriptor and an info struct of the size given.
    let rc = unsafe { sys::bpf_prog_get_info_by_fd(prog.as_raw_fd(), &mut info, &mut len) };
    if rc < 0 {
        return Err(sys_err("reading the target program's info", -rc));
    }
    Ok((info.id, info.btf_id))
}

/// The BTF type id of the global function `func` in the loaded program `prog`: what a
/// BPF_PROG_TYPE_EXT program attaches to (`attach_btf_id`, `target_btf_id`).
pub fn func_btf_id(prog: BorrowedFd<'_>, func: &str) -> Result<u32, LoadError> {
    let (prog_id, btf_id) = prog_ids(prog)?;
    let no_func = || LoadError::NoFunc { prog_id, func: func.to_owned() };
    if btf_id == 0 {
        return Err(no_func());
    }
    // SAFETY: plain constructor; NULL (errno set) on failure.
    let b = unsafe { sys::btf__load_from_kernel_by_id(btf_id) };
    if b.is_null() {
        return Err(sys_err(
            format!("reading BTF id {btf_id} of program id {prog_id}"),
            io::Error::last_os_error().raw_os_error().unwrap_or(libc::ENOENT),
        ));
    }
    let btf = Btf(b);
    let name = CString::new(func).map_err(|_| no_func())?;
    // SAFETY: a live BTF object and a NUL-terminated name.
    let id = unsafe { sys::btf__find_by_name_kind(btf.0, name.as_ptr(), sys::BTF_KIND_FUNC) };
    if id <= 0 {
        return Err(no_func());
    }
    Ok(id as u32)
}

/// Loads a translated filter as an extension (BPF_PROG_TYPE_EXT) of the global function
/// `func` of the loaded XDP program `target`: verified as that function, with its context.
/// Nothing changes until [`attach_freplace`] links it.
pub fn load_freplace(insns: &[EbpfInsn], target: BorrowedFd<'_>, func: &str) -> Result<OwnedFd, LoadError> {
    let btf_id = func_btf_id(target, func)?;
    let opts = sys::bpf_prog_load_opts {
        attach_prog_fd: target.as_raw_fd() as u32,
        attach_btf_id: btf_id,
        ..Default::default()
    };
    load(insns, sys::BPF_PROG_TYPE_EXT, opts, &format!("loading the filter as a replacement of {func}"))
}

/// Replaces the target function with the extension `ext` from now on: a freplace link,
/// which undoes the replacement when its last descriptor (or pin) goes. `to`: None for the
/// target `ext` was loaded for (only the first link may use it), or another XDP program
/// and its function of the same prototype (one filter program can replace the function
/// in several programs).
pub fn attach_freplace(
    ext: BorrowedFd<'_>,
    to: Option<(BorrowedFd<'_>, &str)>,
) -> Result<OwnedFd, LoadError> {
    let (target_fd, btf_id) = match to {
        Some((prog, func)) => (prog.as_raw_fd(), func_btf_id(prog, func)?),
        None => (0, 0),
    };
    let opts = sys::bpf_link_create_opts {
        sz: std::mem::size_of::<sys::bpf_link_create_opts>() as _,
        target_btf_id: btf_id,
        ..Default::default()
    };
    // The attach type is the program's expected one, 0: the kernel ignores it for an
    // extension (libbpf's bpf_program__attach_freplace passes the same).
    // SAFETY: valid descriptors (or 0 with btf id 0: the load-time target) and options.
    let fd = unsafe { sys::bpf_link_create(ext.as_raw_fd(), target_fd, 0, &opts) };
    if fd < 0 {
        return Err(sys_err("linking the filter in place of the target function (freplace)", -fd));
    }
    // SAFETY: a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
