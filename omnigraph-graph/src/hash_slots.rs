//! The index of a load's key set: entry numbers by a 32-bit hash of their keys.
//!
//! A load of a million rows looks a million keys up in a table far larger than the
//! processor's nearer caches, and the misses were most of the cost of checking keys.
//! Slots here are one word each (the hash and the entry together, in one array), so a
//! probe touches one cache line where a table with separate control bytes touches two,
//! and a batch's slots can be read ahead ([`HashSlots::touch`]) before its keys go in,
//! so the misses overlap instead of coming one after another. Probing is linear.
use crate::limits::{ENTRIES_MAX, SLOTS_MIN};

/// A slot: the hash in the high half, the entry number plus one in the low half, zero
/// when empty (so a new table is zeroed memory the system gives lazily).
type Slot = u64;

const EMPTY: Slot = 0;
/// Of every four slots, at most three hold an entry: with linear probing, a fuller
/// table's runs grow long.
const LOAD_NUMERATOR: usize = 3;
const LOAD_DENOMINATOR: usize = 4;

/// Entry numbers by the 32-bit hashes of their keys; the caller compares keys.
pub(crate) struct HashSlots {
    slots: Vec<Slot>,
    /// log2 of the slot count.
    bits: u32,
    len: usize,
}

impl Default for HashSlots {
    /// A table with no slots yet: it holds no memory until the first entry.
    fn default() -> HashSlots {
        HashSlots {
            slots: Vec::new(),
            bits: 0,
            len: 0,
        }
    }
}

impl HashSlots {
    /// A table that takes `keys` entries without growing.
    pub(crate) fn with_keys(keys: usize) -> HashSlots {
        if keys == 0 {
            return HashSlots::default();
        }
        HashSlots::with_slots(slots_for(keys))
    }

    fn with_slots(slots: usize) -> HashSlots {
        assert!(slots.is_power_of_two(), "{slots} slots");
        HashSlots {
            slots: vec![EMPTY; slots],
            bits: slots.trailing_zeros(),
            len: 0,
        }
    }

    /// Entries held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The memory the table holds.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot>()
    }

    /// Whether the next insert grows the table.
    fn grows_on_insert(&self) -> bool {
        (self.len + 1) * LOAD_DENOMINATOR > self.slots.len() * LOAD_NUMERATOR
    }

    /// The slot a hash probes first: its multiplicative spread's high bits, so every
    /// bit of the hash counts whatever the table's size.
    fn home(&self, hash: u32) -> usize {
        (u64::from(hash).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - self.bits)) as usize
    }

    /// Reads the first slot of each hash, so that inserting them next finds their
    /// cache lines near: the reads do not wait on each other. Returns a value of no
    /// meaning that the caller hands to `std::hint::black_box`, so the reads stay.
    pub(crate) fn touch(&self, hashes: &[u32]) -> u64 {
        if self.slots.is_empty() {
            return 0;
        }
        hashes
            .iter()
            .fold(0, |folded, &hash| folded ^ self.slots[self.home(hash)])
    }

    /// The entry of `hash` that `is_key` accepts.
    pub(crate) fn find(&self, hash: u32, mut is_key: impl FnMut(u32) -> bool) -> Option<u32> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut at = self.home(hash);
        // Never full (at most three quarters), so an empty slot ends every probe.
        loop {
            let slot = self.slots[at];
            if slot == EMPTY {
                return None;
            }
            if hash_of(slot) == hash && is_key(entry_of(slot)) {
                return Some(entry_of(slot));
            }
            at = (at + 1) & mask;
        }
    }

    /// The entry of `hash` that `is_key` accepts, or, when there is none, `entry`
    /// inserted under `hash` and `None`.
    pub(crate) fn find_or_insert(
        &mut self,
        hash: u32,
        entry: u32,
        mut is_key: impl FnMut(u32) -> bool,
    ) -> Option<u32> {
        assert!(
            entry as usize <= ENTRIES_MAX,
            "entry {entry} past the table's numbers"
        );
        if self.grows_on_insert() {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let mut at = self.home(hash);
        loop {
            let slot = self.slots[at];
            if slot == EMPTY {
                self.slots[at] = slot_of(hash, entry);
                self.len += 1;
                return None;
            }
            if hash_of(slot) == hash && is_key(entry_of(slot)) {
                return Some(entry_of(slot));
            }
            at = (at + 1) & mask;
        }
    }

    /// Doubles the slots, placing each entry again by the hash its slot keeps: no key
    /// is read.
    fn grow(&mut self) {
        // Twice the slots, not room for twice the entries: that would round past the
        // next power of two at the growth point and take four times the memory.
        let old = std::mem::replace(
            self,
            HashSlots::with_slots((self.slots.len() * 2).max(SLOTS_MIN)),
        );
        let mask = self.slots.len() - 1;
        for slot in old.slots.into_iter().filter(|slot| *slot != EMPTY) {
            let mut at = self.home(hash_of(slot));
            while self.slots[at] != EMPTY {
                at = (at + 1) & mask;
            }
            self.slots[at] = slot;
        }
        self.len = old.len;
        assert!(self.len * LOAD_DENOMINATOR <= self.slots.len() * LOAD_NUMERATOR);
    }
}

/// A power of two of slots that holds `keys` at most three quarters full.
fn slots_for(keys: usize) -> usize {
    keys.saturating_mul(LOAD_DENOMINATOR)
        .div_ceil(LOAD_NUMERATOR)
        .max(SLOTS_MIN)
        .next_power_of_two()
}

fn slot_of(hash: u32, entry: u32) -> Slot {
    (u64::from(hash) << 32) | (u64::from(entry) + 1)
}

fn hash_of(slot: Slot) -> u32 {
    (slot >> 32) as u32
}

fn entry_of(slot: Slot) -> u32 {
    // The low half is the entry plus one, never zero in a slot in use.
    (slot as u32) - 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::BYTES_PER_KEY_MAX;

    #[test]
    fn entries_are_found_by_hash_and_key_through_growth_and_collisions() {
        let mut slots = HashSlots::default();
        assert_eq!(slots.memory_bytes(), 0);
        assert_eq!(slots.find(7, |_| true), None);
        // Keys are entry numbers; hashes collide in groups of four.
        let hash = |key: u32| key / 4;
        for key in 0..10_000u32 {
            assert_eq!(
                slots.find_or_insert(hash(key), key, |held| held == key),
                None
            );
            // Growth doubles the table: a key never costs more than the bound.
            assert!(
                slots.memory_bytes() <= BYTES_PER_KEY_MAX * slots.len().max(SLOTS_MIN),
                "{} bytes for {} keys",
                slots.memory_bytes(),
                slots.len()
            );
        }
        assert_eq!(slots.len(), 10_000);
        for key in 0..10_000u32 {
            assert_eq!(slots.find(hash(key), |held| held == key), Some(key));
            // A key given again finds the entry that holds it and adds nothing.
            assert_eq!(
                slots.find_or_insert(hash(key), 99_999, |held| held == key),
                Some(key)
            );
        }
        assert_eq!(slots.len(), 10_000);
        assert_eq!(slots.find(hash(10_001), |held| held == 10_001), None);
        // A hash of all ones and entry zero are slots like any other.
        assert_eq!(slots.find_or_insert(u32::MAX, 0, |_| false), None);
        assert_eq!(slots.find(u32::MAX, |held| held == 0), Some(0));
    }

    #[test]
    fn a_table_made_for_its_keys_holds_them_without_growing_within_its_bound() {
        for keys in [0, 1, 12, 13, 1_000, 1 << 20] {
            let mut slots = HashSlots::with_keys(keys);
            let memory = slots.memory_bytes();
            for key in 0..keys as u32 {
                slots.find_or_insert(key.wrapping_mul(2_654_435_761), key, |_| false);
            }
            assert_eq!(slots.memory_bytes(), memory, "{keys} keys grew the table");
            assert!(memory <= BYTES_PER_KEY_MAX * keys.max(SLOTS_MIN));
            assert_eq!(slots.touch(&[]), 0);
        }
    }
}
