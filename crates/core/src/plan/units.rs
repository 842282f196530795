//! Human-readable amounts for reasons and notes.

/// Human-readable signed byte count (`-1.5 GiB`).
pub fn fmt_bytes(v: i64) -> String {
    let s = fmt_u(v.unsigned_abs());
    if v < 0 {
        format!("-{s}")
    } else {
        s
    }
}

/// Human-readable byte count.
pub fn fmt_u(v: u64) -> String {
    bytesize::ByteSize(v).display().iec().to_string()
}
