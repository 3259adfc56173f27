//! One partition's directory entries, packed for memory: an owner of a large fleet holds
//! millions. Each entry is one heap block
//! `[host u32][type_len u16][key_len u16] type key activation_id`, where `host` indexes the
//! directory's [`HostInterner`], and the table's bucket is only that block's pointer. The
//! hashbrown table is keyed by `(type, key)` with the process's random SipHash keys (so keys an
//! app chooses cannot flood one bucket).

use hashbrown::HashTable;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;

/// Host ids as small numbers, so an entry stores 4 bytes instead of a pointer. Grows with the
/// hosts ever seen by this process (departed ids never return, so churn adds a few bytes each).
#[derive(Debug, Default)]
pub struct HostInterner {
    ids: Vec<Arc<str>>,
    index: HashMap<Arc<str>, u32>,
}

impl HostInterner {
    /// The number of `id`, assigning one on first sight.
    pub fn intern(&mut self, id: &Arc<str>) -> u32 {
        if let Some(&i) = self.index.get(id) {
            return i;
        }
        let i = self.ids.len() as u32;
        self.ids.push(id.clone());
        self.index.insert(id.clone(), i);
        i
    }

    /// The number of `id`, if it has one.
    pub fn find(&self, id: &str) -> Option<u32> {
        self.index.get(id).copied()
    }

    /// The id of number `i`.
    pub fn name(&self, i: u32) -> &Arc<str> {
        &self.ids[i as usize]
    }
}

const HEADER: usize = 8;

struct Slot {
    packed: Box<[u8]>,
}

impl Slot {
    fn new(actor_type: &str, key: &str, host: u32, activation: &str) -> Slot {
        let mut packed =
            Vec::with_capacity(HEADER + actor_type.len() + key.len() + activation.len());
        packed.extend_from_slice(&host.to_le_bytes());
        packed.extend_from_slice(&(actor_type.len() as u16).to_le_bytes());
        packed.extend_from_slice(&(key.len() as u16).to_le_bytes());
        packed.extend_from_slice(actor_type.as_bytes());
        packed.extend_from_slice(key.as_bytes());
        packed.extend_from_slice(activation.as_bytes());
        Slot {
            packed: packed.into_boxed_slice(),
        }
    }

    fn host(&self) -> u32 {
        let p = &self.packed;
        u32::from_le_bytes([p[0], p[1], p[2], p[3]])
    }

    fn lens(&self) -> (usize, usize) {
        let p = &self.packed;
        (
            u16::from_le_bytes([p[4], p[5]]) as usize,
            u16::from_le_bytes([p[6], p[7]]) as usize,
        )
    }

    fn actor_type(&self) -> &str {
        let (t, _) = self.lens();
        std::str::from_utf8(&self.packed[HEADER..HEADER + t]).expect("packed from a str")
    }

    fn key(&self) -> &str {
        let (t, k) = self.lens();
        std::str::from_utf8(&self.packed[HEADER + t..HEADER + t + k]).expect("packed from a str")
    }

    fn activation(&self) -> &str {
        let (t, k) = self.lens();
        std::str::from_utf8(&self.packed[HEADER + t + k..]).expect("packed from a str")
    }

    fn is(&self, actor_type: &str, key: &str) -> bool {
        self.actor_type() == actor_type && self.key() == key
    }
}

/// A borrowed entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryRef<'a> {
    /// The actor's type.
    pub actor_type: &'a str,
    /// The actor's key.
    pub key: &'a str,
    /// The host holding the activation (its number in the [`HostInterner`]).
    pub host: u32,
    /// The activation's id.
    pub activation: &'a str,
}

fn entry(s: &Slot) -> EntryRef<'_> {
    EntryRef {
        actor_type: s.actor_type(),
        key: s.key(),
        host: s.host(),
        activation: s.activation(),
    }
}

/// The longest type name or key the packing accepts (the wire contract allows 128 B and 1 KiB).
pub const MAX_PART_LEN: usize = u16::MAX as usize;

/// One partition's entries.
#[derive(Default)]
pub struct EntryTable {
    slots: HashTable<Slot>,
}

impl std::fmt::Debug for EntryTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EntryTable")
            .field("len", &self.slots.len())
            .finish()
    }
}

impl EntryTable {
    fn hash<S: BuildHasher>(hasher: &S, actor_type: &str, key: &str) -> u64 {
        hasher.hash_one((actor_type, key))
    }

    /// The entry for an actor.
    pub fn get<S: BuildHasher>(&self, s: &S, actor_type: &str, key: &str) -> Option<EntryRef<'_>> {
        let h = Self::hash(s, actor_type, key);
        self.slots.find(h, |e| e.is(actor_type, key)).map(entry)
    }

    /// Sets the entry for an actor (replacing any).
    pub fn insert<S: BuildHasher>(
        &mut self,
        s: &S,
        actor_type: &str,
        key: &str,
        host: u32,
        activation: &str,
    ) {
        debug_assert!(actor_type.len() <= MAX_PART_LEN && key.len() <= MAX_PART_LEN);
        let h = Self::hash(s, actor_type, key);
        let slot = Slot::new(actor_type, key, host, activation);
        match self.slots.entry(
            h,
            |e| e.is(actor_type, key),
            |e| Self::hash(s, e.actor_type(), e.key()),
        ) {
            hashbrown::hash_table::Entry::Occupied(mut o) => *o.get_mut() = slot,
            hashbrown::hash_table::Entry::Vacant(v) => {
                v.insert(slot);
            }
        }
    }

    /// Removes the actor's entry if `pred` holds for it; true when removed.
    pub fn remove_if<S: BuildHasher>(
        &mut self,
        s: &S,
        actor_type: &str,
        key: &str,
        pred: impl FnOnce(EntryRef<'_>) -> bool,
    ) -> bool {
        let h = Self::hash(s, actor_type, key);
        match self.slots.find_entry(h, |e| e.is(actor_type, key)) {
            Ok(o) if pred(entry(o.get())) => {
                o.remove();
                true
            }
            _ => false,
        }
    }

    /// Keeps the entries for which `keep` holds; returns how many were removed.
    pub fn retain(&mut self, mut keep: impl FnMut(EntryRef<'_>) -> bool) -> usize {
        let before = self.slots.len();
        self.slots.retain(|s| keep(entry(s)));
        before - self.slots.len()
    }

    /// Every entry.
    pub fn iter(&self) -> impl Iterator<Item = EntryRef<'_>> {
        self.slots.iter().map(entry)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Drops every entry (and the memory).
    pub fn clear(&mut self) {
        self.slots = HashTable::new();
    }

    /// Heap bytes held: table buckets plus the packed blocks (allocator rounding excluded).
    pub fn heap_bytes(&self) -> usize {
        self.slots.capacity() * (std::mem::size_of::<Slot>() + 1)
            + self.slots.iter().map(|s| s.packed.len()).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::RandomState;

    #[test]
    fn insert_get_remove_retain() {
        let s = RandomState::new();
        let mut t = EntryTable::default();
        let mut hosts = HostInterner::default();
        let a = hosts.intern(&Arc::from("host-a"));
        let b = hosts.intern(&Arc::from("host-b"));
        assert_eq!(hosts.intern(&Arc::from("host-a")), a);
        assert_eq!(&**hosts.name(b), "host-b");
        t.insert(&s, "Counter", "k1", a, "act-1");
        t.insert(&s, "Counter", "k2", b, "act-2");
        // "Counter"+"k1" must not be confused with "Counterk"+"1".
        assert!(t.get(&s, "Counterk", "1").is_none());
        let e = t.get(&s, "Counter", "k1").unwrap();
        assert_eq!((&**hosts.name(e.host), e.activation), ("host-a", "act-1"));
        t.insert(&s, "Counter", "k1", b, "act-3");
        assert_eq!(t.len(), 2);
        assert_eq!(t.get(&s, "Counter", "k1").unwrap().activation, "act-3");
        assert!(!t.remove_if(&s, "Counter", "k1", |e| e.activation == "act-1"));
        assert!(t.remove_if(&s, "Counter", "k1", |e| e.activation == "act-3"));
        assert!(t.get(&s, "Counter", "k1").is_none());
        t.insert(&s, "Counter", "", a, "");
        assert_eq!(t.get(&s, "Counter", "").unwrap().key, "");
        assert_eq!(t.retain(|e| e.host != b), 1);
        assert_eq!(t.len(), 1);
    }
}
