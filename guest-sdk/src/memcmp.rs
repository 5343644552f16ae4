//! A `memcmp` that compares eight bytes at a time, for guests built for WebAssembly.
//!
//! Rust calls `memcmp` for every ordering and equality test of byte strings: `Ord` and `Eq` of
//! `[u8]`, `str` and `String`, so every `BTreeMap<String, _>` look-up, sort and `==` of text.
//! On `wasm32-unknown-unknown` the symbol comes from compiler-builtins, whose `memcmp` compares
//! one byte per iteration. Observers compare long strings that share long prefixes (the web
//! index's URLs: `https://site.example/docs/...`), and in a web-index load that byte loop was
//! 6.6 % of the observer workers' samples, most of it in the link-inversion guest
//! (BENCHMARKS.md, "Tenth round"). compiler-builtins defines its mem functions with weak
//! linkage so that a program can bring its own: this strong definition replaces it in every
//! guest that links the SDK.

#[cfg(target_endian = "big")]
compile_error!("memcmp.rs reads words as little-endian");

/// The sign of the first difference of the `n` bytes at `a` and `b` (compared as unsigned), as
/// C's `memcmp`: negative, zero or positive.
///
/// # Safety
/// `a` and `b` must be readable for `n` bytes.
#[allow(unsafe_code)]
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
pub(crate) unsafe fn compare(a: *const u8, b: *const u8, n: usize) -> i32 {
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: `i + 8 <= n` and both are readable for `n` bytes; the reads are unaligned.
        let (x, y) = unsafe { (a.add(i).cast::<u64>().read_unaligned(), b.add(i).cast::<u64>().read_unaligned()) };
        if x != y {
            // Little-endian (WebAssembly is): the lowest set bit of the difference is in the
            // first byte that differs.
            i += ((x ^ y).trailing_zeros() / 8) as usize;
            break;
        }
        i += 8;
    }
    while i < n {
        // SAFETY: `i < n`.
        let (x, y) = unsafe { (*a.add(i), *b.add(i)) };
        if x != y {
            return i32::from(x) - i32::from(y);
        }
        i += 1;
    }
    0
}

/// C's `memcmp`, replacing compiler-builtins' (weak) one in the guest's module.
///
/// # Safety
/// `a` and `b` must be readable for `n` bytes.
#[cfg(all(target_arch = "wasm32", not(test)))]
#[allow(unsafe_code)]
// Reached by the linker, not by a path: a C symbol of the module.
#[allow(unreachable_pub)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    // SAFETY: the caller's promise, passed on.
    unsafe { compare(a, b, n) }
}

#[cfg(test)]
mod tests {
    use super::compare;

    #[allow(unsafe_code)]
    fn cmp(a: &[u8], b: &[u8]) -> i32 {
        assert_eq!(a.len(), b.len());
        // SAFETY: both slices hold `a.len()` bytes.
        unsafe { compare(a.as_ptr(), b.as_ptr(), a.len()) }
    }

    /// Every length up to 40, a difference at every position (either way round, bytes that
    /// differ in the high bit included; alone, or with every later byte differing the other
    /// way), at every offset from an aligned address: the sign and the magnitude are the first
    /// differing bytes', as the byte loop's.
    #[test]
    fn answers_as_the_byte_loop_at_every_length_position_and_alignment() {
        let base: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37).wrapping_add(11)).collect();
        for offset in 0..8 {
            for n in 0..40 {
                let a = &base[offset..offset + n];
                assert_eq!(cmp(a, a), 0);
                for pos in 0..n {
                    for (x, y) in [(0x00u8, 0x01u8), (0x7f, 0x80), (0x10, 0xff)] {
                        for later in [false, true] {
                            let (mut p, mut q) = (a.to_vec(), a.to_vec());
                            p[pos] = x;
                            q[pos] = y;
                            // Later bytes differing the other way round do not count.
                            for k in (pos + 1..n).filter(|_| later) {
                                p[k] = 0xff;
                                q[k] = 0x00;
                            }
                            let want = i32::from(x) - i32::from(y);
                            assert_eq!(cmp(&p, &q), want, "n {n}, position {pos}, offset {offset}, {later}");
                            assert_eq!(cmp(&q, &p), -want, "n {n}, position {pos}, offset {offset}, {later}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn orders_as_slices_do() {
        let words: Vec<&[u8]> = vec![
            b"",
            b"a",
            b"https://site.example/docs/a",
            b"https://site.example/docs/b",
            b"https://site.example/docs/ab",
        ];
        for x in &words {
            for y in &words {
                let n = x.len().min(y.len());
                let by_bytes = cmp(&x[..n], &y[..n]).signum();
                assert_eq!(by_bytes, x[..n].cmp(&y[..n]) as i32);
            }
        }
    }
}
