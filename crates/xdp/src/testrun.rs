//! `BPF_PROG_TEST_RUN`: run the XDP program on a packet without attaching it
//! (what `bpftool prog run` does), for the fixture tests and the per-packet
//! cost benchmark. aya 0.14 has no wrapper for it, so this is the syscall.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// What one run gave back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunResult {
    /// The XDP action (`XDP_PASS` = 2, `XDP_TX` = 3, …).
    pub action: u32,
    /// The packet as the program left it.
    pub packet: Vec<u8>,
    /// Mean nanoseconds per run, as the kernel measured it.
    pub duration_ns: u32,
}

/// XDP actions, named for readable assertions.
pub mod action {
    /// Drop (error).
    pub const ABORTED: u32 = 0;
    /// Drop.
    pub const DROP: u32 = 1;
    /// To the kernel stack.
    pub const PASS: u32 = 2;
    /// Back out of the ingress interface.
    pub const TX: u32 = 3;
    /// Out of another interface.
    pub const REDIRECT: u32 = 4;
}

/// `union bpf_attr`'s `test` member.
#[repr(C)]
#[derive(Default)]
struct TestAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    /// Explicit so that it is zero: the kernel rejects non-zero bytes it
    /// does not know.
    pad: u32,
}

/// `struct xdp_md`, the context handed in so that the program sees an
/// ingress interface (its FIB lookups start there).
#[repr(C)]
#[derive(Default)]
struct XdpMd {
    data: u32,
    data_end: u32,
    data_meta: u32,
    ingress_ifindex: u32,
    rx_queue_index: u32,
    egress_ifindex: u32,
}

const BPF_PROG_TEST_RUN: libc::c_long = 10;

/// Run `prog` on `packet` `repeat` times (at least once), as if it arrived on
/// interface `ingress_ifindex` (of the calling thread's network namespace).
pub fn run(prog: BorrowedFd<'_>, packet: &[u8], ingress_ifindex: u32, repeat: u32) -> io::Result<RunResult> {
    // Room for programs that grow the packet (none does today).
    let mut out = vec![0u8; packet.len() + 256];
    let ctx = XdpMd { data_end: packet.len() as u32, ingress_ifindex, ..XdpMd::default() };
    let mut attr = TestAttr {
        prog_fd: prog.as_raw_fd() as u32,
        data_size_in: packet.len() as u32,
        data_size_out: out.len() as u32,
        data_in: packet.as_ptr() as u64,
        data_out: out.as_mut_ptr() as u64,
        repeat: repeat.max(1),
        ctx_size_in: std::mem::size_of::<XdpMd>() as u32,
        ctx_in: &ctx as *const XdpMd as u64,
        ..TestAttr::default()
    };
    // SAFETY: `attr` points at buffers that outlive the call, with their sizes.
    let rc = unsafe {
        libc::syscall(libc::SYS_bpf, BPF_PROG_TEST_RUN, &mut attr as *mut TestAttr, std::mem::size_of::<TestAttr>())
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    out.truncate(attr.data_size_out as usize);
    Ok(RunResult { action: attr.retval, packet: out, duration_ns: attr.duration })
}
