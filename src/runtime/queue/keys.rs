//! The queue's key table: client-go's `dirty` and `processing` sets and the `queue` slice in
//! one structure, so an `add` costs one hash of the key and no copy of it.
//!
//! client-go (util/workqueue/queue.go) keeps three collections (`queue`, `dirty`,
//! `processing`) and a key lives in up to all three at once; copying a Go string is free, a
//! Rust `String` is not. Here every key that is dirty or in flight has one [`Entry`] in a slab,
//! found through a hash table of slab indices; the processing order is a deque of slab
//! indices, and the keys in flight are a small vector of slab indices. The key itself is stored
//! once, moved in by `add`; `get` hands out a clone.

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hash};

use hashbrown::HashTable;
use tokio::time::Instant;

/// One key that is dirty (needs processing) or in flight (handed out by `get`, no `done` yet),
/// or both (re-added while in flight: client-go's key in `dirty` and `processing`).
pub(super) struct Entry<K> {
    pub(super) key: K,
    hash: u64,
    /// In client-go's `dirty` set: queued, or re-added while in flight.
    pub(super) dirty: bool,
    /// When the key was (last) made dirty; meaningful while `dirty`.
    pub(super) added_at: Instant,
    /// When a worker got it, while in flight (client-go's `processing` set).
    pub(super) started: Option<Instant>,
    /// Index in [`KeyTable::in_flight`] while in flight.
    flight_pos: usize,
}

/// The dirty and in-flight keys, their processing order and their times.
pub(super) struct KeyTable<K> {
    slots: Vec<Option<Entry<K>>>,
    free: Vec<usize>,
    index: HashTable<usize>,
    hasher: foldhash::fast::RandomState,
    /// Processing order (client-go's `queue`): dirty keys that are not in flight.
    order: VecDeque<usize>,
    /// Keys in flight (client-go's `processing` set), in no particular order.
    in_flight: Vec<usize>,
    /// Size of client-go's `dirty` set.
    dirty: usize,
}

impl<K> Default for KeyTable<K> {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
            index: HashTable::new(),
            hasher: foldhash::fast::RandomState::default(),
            order: VecDeque::new(),
            in_flight: Vec::new(),
            dirty: 0,
        }
    }
}

/// What [`KeyTable::add`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Added {
    /// Already dirty: nothing changed (client-go's dedup).
    AlreadyDirty,
    /// In flight and now dirty: queued again on `done`.
    DirtyInFlight,
    /// Pushed onto the queue: a getter may take it.
    Queued,
}

impl<K: Eq + Hash> KeyTable<K> {
    fn entry(&self, slot: usize) -> &Entry<K> {
        self.slots[slot]
            .as_ref()
            .expect("indexed slots hold an entry")
    }

    fn entry_mut(&mut self, slot: usize) -> &mut Entry<K> {
        self.slots[slot]
            .as_mut()
            .expect("indexed slots hold an entry")
    }

    fn find(&self, key: &K) -> Option<usize> {
        let hash = self.hasher.hash_one(key);
        let slots = &self.slots;
        self.index
            .find(hash, |&s| {
                slots[s]
                    .as_ref()
                    .is_some_and(|e| e.hash == hash && e.key == *key)
            })
            .copied()
    }

    /// The entry of `key`, if it is dirty or in flight.
    pub(super) fn get(&self, key: &K) -> Option<&Entry<K>> {
        self.find(key).map(|s| self.entry(s))
    }

    /// client-go `Add` on the three collections (one hash of `key` and one probe; `key` is
    /// moved in or dropped, never copied).
    pub(super) fn add(&mut self, key: K, at: Instant) -> Added {
        let hash = self.hasher.hash_one(&key);
        let Self {
            slots,
            free,
            index,
            order,
            dirty,
            ..
        } = self;
        let found = index.entry(
            hash,
            |&s| {
                slots[s]
                    .as_ref()
                    .is_some_and(|e| e.hash == hash && e.key == key)
            },
            |&s| slots[s].as_ref().map_or(0, |e| e.hash),
        );
        let vacant = match found {
            hashbrown::hash_table::Entry::Occupied(occupied) => {
                let Some(e) = slots[*occupied.get()].as_mut() else {
                    unreachable!("indexed slots hold an entry")
                };
                if e.dirty {
                    return Added::AlreadyDirty;
                }
                // Only in-flight keys have a clean entry.
                e.dirty = true;
                e.added_at = at;
                *dirty += 1;
                return Added::DirtyInFlight;
            }
            hashbrown::hash_table::Entry::Vacant(vacant) => vacant,
        };
        let entry = Entry {
            key,
            hash,
            dirty: true,
            added_at: at,
            started: None,
            flight_pos: 0,
        };
        let slot = match free.pop() {
            Some(slot) => {
                slots[slot] = Some(entry);
                slot
            }
            None => {
                slots.push(Some(entry));
                slots.len() - 1
            }
        };
        vacant.insert(slot);
        order.push_back(slot);
        *dirty += 1;
        Added::Queued
    }

    /// client-go `Get`'s bookkeeping: the next queued key leaves the dirty set and enters the
    /// processing set at `now`. Returns a clone of the key and when it was added.
    pub(super) fn pop(&mut self, now: Instant) -> Option<(K, Instant)>
    where
        K: Clone,
    {
        let slot = self.order.pop_front()?;
        let pos = self.in_flight.len();
        self.in_flight.push(slot);
        self.dirty -= 1;
        let e = self.entry_mut(slot);
        e.dirty = false;
        e.started = Some(now);
        e.flight_pos = pos;
        Some((e.key.clone(), e.added_at))
    }

    /// client-go `Done`'s bookkeeping: `key` leaves the processing set. Returns when it was
    /// handed out and whether it was queued again (it was re-added meanwhile), or `None` when
    /// it was not in flight. One hash and one probe.
    pub(super) fn done(&mut self, key: &K) -> Option<(Instant, bool)> {
        let hash = self.hasher.hash_one(key);
        let Self {
            slots,
            free,
            index,
            order,
            in_flight,
            ..
        } = self;
        let found = index
            .find_entry(hash, |&s| {
                slots[s]
                    .as_ref()
                    .is_some_and(|e| e.hash == hash && e.key == *key)
            })
            .ok()?;
        let slot = *found.get();
        let e = slots[slot].as_mut()?;
        let started = e.started.take()?;
        let pos = e.flight_pos;
        let requeue = e.dirty;
        in_flight.swap_remove(pos);
        if let Some(&moved) = in_flight.get(pos)
            && let Some(m) = slots[moved].as_mut()
        {
            m.flight_pos = pos;
        }
        if requeue {
            order.push_back(slot);
        } else {
            found.remove();
            slots[slot] = None;
            free.push(slot);
        }
        Some((started, requeue))
    }

    /// Keys queued and not in flight (client-go `Len`).
    pub(super) fn queued_len(&self) -> usize {
        self.order.len()
    }

    /// Size of the dirty set (client-go's depth metric).
    pub(super) fn dirty_len(&self) -> usize {
        self.dirty
    }

    /// Number of keys in flight.
    pub(super) fn in_flight_len(&self) -> usize {
        self.in_flight.len()
    }

    /// The queued keys in processing order.
    pub(super) fn queued(&self) -> impl Iterator<Item = &Entry<K>> {
        self.order.iter().map(|&s| self.entry(s))
    }

    /// The keys in flight, in no particular order.
    pub(super) fn in_flight(&self) -> impl Iterator<Item = &Entry<K>> {
        self.in_flight.iter().map(|&s| self.entry(s))
    }
}
