//! The client's own raw system calls, where a call needs a type only the client uses;
//! everything else is in `ng_sys`.

use ng_proto::bytes::BytesMut;
use std::io;
use std::os::fd::RawFd;

/// One `read(2)` into the spare capacity of `buf` (reserve first). `Ok(0)` is end of
/// stream.
pub fn read_into(fd: RawFd, buf: &mut BytesMut) -> io::Result<usize> {
    let n = ng_sys::fd::read_uninit(fd, buf.spare_capacity_mut())?;
    // SAFETY: the kernel initialised the first `n` spare bytes.
    unsafe { buf.set_len(buf.len() + n) };
    Ok(n)
}
