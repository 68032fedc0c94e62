//! A small, fast hasher for integer keys (FxHash): the maps of the hot loops (millions of lookups by
//! correlation id, process, name id) use it instead of SipHash. Not for keys an attacker chooses to collide.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

#[derive(Default, Clone, Copy)]
pub struct Fx(u64);
const FX_K: u64 = 0x517c_c1b7_2722_0a95;
impl Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ b as u64).wrapping_mul(FX_K);
        }
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(FX_K);
    }
    fn write_i64(&mut self, i: i64) {
        self.write_u64(i as u64)
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64)
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64)
    }
    fn finish(&self) -> u64 {
        self.0
    }
}
pub type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<Fx>>;
pub type FxSet<K> = HashSet<K, BuildHasherDefault<Fx>>;

/// A hash of a byte string, eight bytes at a time (FxHash's step, then a final mix): the key of the interners
/// of label text ([`Interner`]), hundreds of thousands of distinct PyTorch op labels per capture.
pub fn hash_bytes(b: &[u8]) -> u64 {
    let mut h = (b.len() as u64).wrapping_mul(FX_K);
    let mut chunks = b.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        h = (h.rotate_left(5) ^ w).wrapping_mul(FX_K);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(FX_K);
    }
    // fold the high bits down: the table takes its bucket from the low bits
    h ^ (h >> 29) ^ (h >> 47)
}

/// Distinct byte strings numbered in order of first sight, kept in one buffer (no allocation per string): the
/// table holds only ids and compares in the buffer.
#[derive(Default, Clone)]
pub struct Interner {
    map: hashbrown::HashTable<u32>,
    offs: Vec<usize>,
    data: Vec<u8>,
    /// each string's hash (a growing table rehashes from here, not from the bytes)
    hashes: Vec<u64>,
}

impl Interner {
    pub fn new() -> Interner {
        Interner { map: hashbrown::HashTable::new(), offs: vec![0], data: Vec::new(), hashes: Vec::new() }
    }
    /// Number of distinct strings.
    pub fn len(&self) -> usize {
        self.offs.len().saturating_sub(1)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The id of `key`, numbered on first sight; and whether it is new.
    pub fn intern(&mut self, key: &[u8]) -> (u32, bool) {
        if self.offs.is_empty() {
            self.offs.push(0);
        }
        let Interner { map, offs, data, hashes } = self;
        let h = hash_bytes(key);
        if let Some(&id) = map.find(h, |&id| hashes[id as usize] == h && bytes_in(offs, data, id) == key) {
            return (id, false);
        }
        let id = (offs.len() - 1) as u32;
        data.extend_from_slice(key);
        offs.push(data.len());
        hashes.push(h);
        map.insert_unique(h, id, |&id| hashes[id as usize]);
        (id, true)
    }
    /// The id of `key` when interned.
    pub fn get(&self, key: &[u8]) -> Option<u32> {
        if self.offs.is_empty() {
            return None;
        }
        let h = hash_bytes(key);
        self.map.find(h, |&id| self.hashes[id as usize] == h && bytes_in(&self.offs, &self.data, id) == key).copied()
    }
    /// The bytes of `id`.
    pub fn bytes(&self, id: u32) -> &[u8] {
        bytes_in(&self.offs, &self.data, id)
    }
}

fn bytes_in<'a>(offs: &[usize], data: &'a [u8], id: u32) -> &'a [u8] {
    &data[offs[id as usize]..offs[id as usize + 1]]
}
