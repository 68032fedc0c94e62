//! A deterministic pseudo-random source for the unit tests (xorshift64).

/// `next(n)` is in `0..n`, the same sequence for the same seed.
pub(crate) fn xorshift(seed: u64) -> impl FnMut(i64) -> i64 {
    let mut x = seed;
    move |n: i64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n as u64) as i64
    }
}
