//! Indexes that keep the model's questions cheap on large clusters: a fast hasher for
//! the model's own maps (keys are node names, labels and pointers, never outside
//! input an attacker picks to collide, and the maps live for one plan), and a segment
//! tree over the room left on every slot, so first-fit skips full nodes in O(log n)
//! instead of trying them one by one.

use std::hash::{BuildHasherDefault, Hasher};

use crate::model::Resources;

/// The multiply-rotate hash of rustc's FxHasher: a few cycles per word.
#[derive(Default, Clone, Copy)]
pub struct FxHasher {
    hash: u64,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

pub type FxBuild = BuildHasherDefault<FxHasher>;
pub type FxHashMap<K, V> = std::collections::HashMap<K, V, FxBuild>;
pub type FxHashSet<K> = std::collections::HashSet<K, FxBuild>;

/// Dimensions the room tree tracks: cpu, memory, ephemeral storage, pod slots. Other
/// resources (hugepages, GPUs) are checked on the slot itself.
pub type Room = [u64; 4];

/// What `req` needs free on a slot, in the tree's dimensions, exactly as
/// [`Resources::fits`] counts it: a zero request always fits; every pod takes a slot.
pub fn need(req: &Resources) -> Room {
    [req.cpu, req.memory, req.ephemeral_storage, req.pods.max(1)]
}

/// Room left on a slot (zero where it is overcommitted; unlimited where the allocatable
/// is `u64::MAX`, which the saturating sum in [`Resources::fits`] never exceeds).
pub fn room(allocatable: &Resources, used: &Resources) -> Room {
    let left = |alloc: u64, used: u64| {
        if alloc == u64::MAX {
            u64::MAX
        } else {
            alloc.saturating_sub(used)
        }
    };
    [
        left(allocatable.cpu, used.cpu),
        left(allocatable.memory, used.memory),
        left(allocatable.ephemeral_storage, used.ephemeral_storage),
        left(allocatable.pods, used.pods),
    ]
}

#[inline]
fn covers(have: &Room, need: &Room) -> bool {
    have[0] >= need[0] && have[1] >= need[1] && have[2] >= need[2] && have[3] >= need[3]
}

#[inline]
fn max(a: &Room, b: &Room) -> Room {
    [
        a[0].max(b[0]),
        a[1].max(b[1]),
        a[2].max(b[2]),
        a[3].max(b[3]),
    ]
}

/// Leaves read in a row before the tree takes over in [`RoomTree::collect`].
const LINEAR: usize = 16;

/// Per-dimension maxima of the room of every slot, as a segment tree: a subtree whose
/// maximum cannot cover a request holds no slot that can, and is skipped whole.
#[derive(Debug, Clone, Default)]
pub struct RoomTree {
    /// Leaves at `cap..2 * cap`; node `n` covers its children `2n` and `2n + 1`.
    tree: Vec<Room>,
    cap: usize,
    len: usize,
}

impl RoomTree {
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Appends a slot, without fixing its ancestors when `bulk` (call [`Self::rebuild`]).
    pub fn push(&mut self, room: Room, bulk: bool) {
        if self.len == self.cap {
            let cap = (self.cap * 2).max(64);
            let mut tree = vec![[0; 4]; 2 * cap];
            tree[cap..cap + self.len].copy_from_slice(&self.tree[self.cap..self.cap + self.len]);
            self.tree = tree;
            self.cap = cap;
            self.len += 1;
            self.tree[cap + self.len - 1] = room;
            if !bulk {
                self.rebuild();
            }
            return;
        }
        self.len += 1;
        self.set(self.len - 1, room, bulk);
    }

    /// Drops the slots from `len` on.
    pub fn truncate(&mut self, len: usize) {
        while self.len > len {
            self.set(self.len - 1, [0; 4], false);
            self.len -= 1;
        }
    }

    /// Sets the room of slot `i`; its ancestors too unless `bulk`.
    pub fn set(&mut self, i: usize, room: Room, bulk: bool) {
        let mut n = self.cap + i;
        self.tree[n] = room;
        if bulk {
            return;
        }
        while n > 1 {
            n /= 2;
            let m = max(&self.tree[2 * n], &self.tree[2 * n + 1]);
            if self.tree[n] == m {
                break;
            }
            self.tree[n] = m;
        }
    }

    /// Recomputes every inner node from the leaves.
    pub fn rebuild(&mut self) {
        for n in (1..self.cap).rev() {
            self.tree[n] = max(&self.tree[2 * n], &self.tree[2 * n + 1]);
        }
    }

    /// The first slot at or after `from` (and before `end`) whose room covers `need`.
    pub fn first(&self, from: usize, end: usize, need: &Room) -> Option<usize> {
        let end = end.min(self.len);
        if from >= end {
            return None;
        }
        self.descend(1, 0, self.cap, from, end, need)
    }

    /// Appends to `out`, in order, the slots at or after `from` (and before `end`) whose
    /// room covers `need`, until `out` holds `max`: one walk of the tree for many slots.
    pub fn collect(&self, from: usize, end: usize, need: &Room, max: usize, out: &mut Vec<usize>) {
        let end = end.min(self.len);
        if from >= end || out.len() >= max || !covers(&self.tree[1], need) {
            return;
        }
        // Where slots with room come thick, reading the leaves in a row is cheaper than
        // walking down to each; where they come thin, the tree skips the gaps.
        let mut from = from;
        loop {
            let window = end.min(from + LINEAR);
            let before = out.len();
            while from < window {
                if covers(&self.tree[self.cap + from], need) {
                    out.push(from);
                    if out.len() >= max {
                        return;
                    }
                }
                from += 1;
            }
            if from >= end {
                return;
            }
            if out.len() == before {
                break;
            }
        }
        // Depth-first, left to right, with an explicit stack of nodes; node `n` at depth
        // `d` covers `size = cap >> d` slots from `(n - 2^d) * size`.
        let mut stack = [0u32; 64];
        stack[0] = 1;
        let mut top = 1;
        while top > 0 {
            top -= 1;
            let n = stack[top] as usize;
            let depth = usize::BITS - 1 - n.leading_zeros();
            let size = self.cap >> depth;
            let lo = (n - (1 << depth)) * size;
            let hi = lo + size;
            if hi <= from || lo >= end || !covers(&self.tree[n], need) {
                continue;
            }
            if size == 1 {
                out.push(lo);
                if out.len() >= max {
                    return;
                }
                continue;
            }
            // Right child first on the stack, so the left half is walked first.
            stack[top] = (2 * n + 1) as u32;
            stack[top + 1] = (2 * n) as u32;
            top += 2;
        }
    }

    fn descend(
        &self,
        n: usize,
        lo: usize,
        hi: usize,
        from: usize,
        end: usize,
        need: &Room,
    ) -> Option<usize> {
        if hi <= from || lo >= end || !covers(&self.tree[n], need) {
            return None;
        }
        if hi - lo == 1 {
            return Some(lo);
        }
        let mid = (lo + hi) / 2;
        self.descend(2 * n, lo, mid, from, end, need)
            .or_else(|| self.descend(2 * n + 1, mid, hi, from, end, need))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_skips_slots_without_room_and_respects_bounds() {
        let mut t = RoomTree::default();
        for i in 0..200u64 {
            t.push([i, i, u64::MAX, 1], i % 2 == 0);
        }
        t.rebuild();
        assert_eq!(t.first(0, 200, &[150, 0, 0, 1]), Some(150));
        assert_eq!(t.first(151, 200, &[150, 150, 0, 1]), Some(151));
        assert_eq!(t.first(0, 150, &[150, 0, 0, 1]), None);
        assert_eq!(t.first(0, 200, &[0, 0, 0, 2]), None);
        t.set(10, [1000, 1000, 0, 5], false);
        assert_eq!(t.first(0, 200, &[500, 0, 0, 1]), Some(10));
        t.truncate(100);
        assert_eq!(t.len(), 100);
        assert_eq!(t.first(0, 1000, &[120, 0, 0, 1]), Some(10));
        assert_eq!(t.first(11, 1000, &[120, 0, 0, 1]), None);
        t.push([7, 7, 7, 7], false);
        assert_eq!(t.first(11, 1000, &[7, 7, 7, 7]), Some(100));
        let mut out = Vec::new();
        t.collect(0, 1000, &[90, 0, 0, 1], 3, &mut out);
        assert_eq!(out, vec![10, 90, 91]);
        out.clear();
        t.collect(92, 100, &[90, 0, 0, 1], 100, &mut out);
        assert_eq!(out, (92..100).collect::<Vec<_>>());
    }

    #[test]
    fn collect_finds_what_a_linear_scan_finds() {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..200 {
            let mut t = RoomTree::default();
            let len = (next() % 300) as usize;
            // Densities from none to every slot.
            let dense = next() % 5;
            let mut rooms = Vec::new();
            for _ in 0..len {
                let r = if next() % 5 < dense {
                    [next() % 10, next() % 10, 1, 1 + next() % 3]
                } else {
                    [0, 0, 0, 0]
                };
                rooms.push(r);
                t.push(r, round % 2 == 0);
            }
            t.rebuild();
            for _ in 0..20 {
                let need = [next() % 6, next() % 6, 0, 1];
                let from = (next() % (len as u64 + 1)) as usize;
                let end = (next() % (len as u64 + 10)) as usize;
                let max = 1 + (next() % 70) as usize;
                let want: Vec<usize> = (from..end.min(len))
                    .filter(|&i| covers(&rooms[i], &need))
                    .take(max)
                    .collect();
                let mut got = Vec::new();
                t.collect(from, end, &need, max, &mut got);
                assert_eq!(got, want, "round {round}");
                assert_eq!(t.first(from, end, &need), want.first().copied());
            }
        }
    }

    #[test]
    fn need_and_room_follow_fits() {
        let mut alloc = Resources::cpu_mem(1000, 100);
        alloc.pods = 2;
        let used = Resources::cpu_mem(1500, 40);
        let r = room(&alloc, &used);
        assert_eq!(r[0], 0);
        assert_eq!(r[1], 60);
        let zero_cpu = Resources::cpu_mem(0, 60);
        assert!(covers(&r, &need(&zero_cpu)));
        assert_eq!(covers(&r, &need(&zero_cpu)), alloc.fits(&used, &zero_cpu));
        let some_cpu = Resources::cpu_mem(1, 60);
        assert_eq!(covers(&r, &need(&some_cpu)), alloc.fits(&used, &some_cpu));
    }
}
