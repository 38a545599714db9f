//! Batched reads and deletes of a hash map (`BPF_MAP_LOOKUP_BATCH`,
//! `BPF_MAP_DELETE_BATCH`), for the conntrack map: reading half a million
//! entries one key at a time (two system calls an entry) takes seconds,
//! in batches a few tens of milliseconds. aya 0.14 has no wrapper for them,
//! so these are the system calls.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `union bpf_attr`'s `batch` member.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
const BPF_MAP_DELETE_BATCH: libc::c_long = 27;

fn bpf(cmd: libc::c_long, attr: &mut BatchAttr) -> io::Result<()> {
    // SAFETY: `attr` points at buffers its caller keeps alive, with their
    // sizes in `count`.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut BatchAttr, std::mem::size_of::<BatchAttr>()) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Every key and value of the hash map `map` (key and value types must be
/// the map's, byte for byte), in batches of up to `chunk` entries. Entries
/// that change meanwhile may be seen old, new or not at all.
pub fn lookup_all<K: aya::Pod, V: aya::Pod>(map: BorrowedFd<'_>, chunk: usize) -> io::Result<Vec<(K, V)>> {
    let mut chunk = chunk.max(1);
    let mut out = Vec::new();
    let mut token = 0u32;
    let mut first = true;
    loop {
        // SAFETY: `Pod` types are plain data, valid when zeroed.
        let mut keys: Vec<K> = vec![unsafe { std::mem::zeroed() }; chunk];
        // SAFETY: as above.
        let mut values: Vec<V> = vec![unsafe { std::mem::zeroed() }; chunk];
        let mut next = 0u32;
        let mut attr = BatchAttr {
            in_batch: if first { 0 } else { &token as *const u32 as u64 },
            out_batch: &mut next as *mut u32 as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: chunk as u32,
            map_fd: map.as_raw_fd() as u32,
            ..BatchAttr::default()
        };
        let result = bpf(BPF_MAP_LOOKUP_BATCH, &mut attr);
        let n = attr.count as usize;
        match result {
            Ok(()) => {}
            // The end of the map, possibly with a last few entries.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                out.extend(keys.into_iter().zip(values).take(n));
                return Ok(out);
            }
            // One hash bucket holds more than a batch.
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) && chunk < 1 << 20 => {
                chunk *= 2;
                continue;
            }
            Err(e) => return Err(e),
        }
        out.extend(keys.into_iter().zip(values).take(n));
        token = next;
        first = false;
    }
}

/// Delete `keys` from the hash map `map`; keys that are not there are
/// skipped. The number deleted.
pub fn delete<K: aya::Pod>(map: BorrowedFd<'_>, keys: &[K]) -> io::Result<usize> {
    let mut done = 0;
    let mut deleted = 0;
    while done < keys.len() {
        let rest = &keys[done..];
        let mut attr = BatchAttr {
            keys: rest.as_ptr() as u64,
            count: rest.len() as u32,
            map_fd: map.as_raw_fd() as u32,
            ..BatchAttr::default()
        };
        let result = bpf(BPF_MAP_DELETE_BATCH, &mut attr);
        // The count is what was deleted before a failure.
        deleted += attr.count as usize;
        match result {
            Ok(()) => break,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => done += attr.count as usize + 1,
            Err(e) => return Err(e),
        }
    }
    Ok(deleted)
}
