//! A fixed-size set of indices, one bit each: which plan positions a phase has read, which files a
//! rank has read.

#[derive(Debug, Clone, Default)]
pub struct BitSet {
    words: Vec<u64>,
    len: u64,
}

impl BitSet {
    /// Empties the set and sizes it for indices `[0, len)`, reusing its memory.
    pub fn reset(&mut self, len: u64) {
        self.words.clear();
        self.words.resize(len.div_ceil(64) as usize, 0);
        self.len = len;
    }

    /// [`BitSet::reset`], or an error (the set left empty) when the memory cannot be had: a
    /// length read from a file may be far beyond any real run's.
    pub fn try_reset(&mut self, len: u64) -> Result<(), std::collections::TryReserveError> {
        self.words.clear();
        self.len = 0;
        let words = usize::try_from(len.div_ceil(64)).unwrap_or(usize::MAX);
        self.words.try_reserve_exact(words)?;
        self.words.resize(words, 0);
        self.len = len;
        Ok(())
    }

    pub fn with_len(len: u64) -> BitSet {
        let mut set = BitSet::default();
        set.reset(len);
        set
    }

    /// Becomes a copy of `other`, reusing its memory.
    pub fn copy_from(&mut self, other: &BitSet) {
        self.words.clone_from(&other.words);
        self.len = other.len;
    }

    /// Adds `index` (which must be < len); returns whether it was absent.
    pub fn insert(&mut self, index: u64) -> bool {
        debug_assert!(index < self.len);
        let (word, bit) = ((index / 64) as usize, 1u64 << (index % 64));
        let absent = self.words[word] & bit == 0;
        self.words[word] |= bit;
        absent
    }

    /// Whether `index` is in the set; false for any index past the end.
    pub fn contains(&self, index: u64) -> bool {
        index < self.len && self.words[(index / 64) as usize] & (1u64 << (index % 64)) != 0
    }

    pub fn count(&self) -> u64 {
        self.words.iter().map(|w| u64::from(w.count_ones())).sum()
    }

    /// How many members of this set `other` lacks.
    pub fn count_not_in(&self, other: &BitSet) -> u64 {
        self.words
            .iter()
            .enumerate()
            .map(|(i, w)| u64::from((w & !other.words.get(i).copied().unwrap_or(0)).count_ones()))
            .sum()
    }

    /// Indices in `[0, len)` that are not in the set, in increasing order.
    pub fn absent(&self) -> impl Iterator<Item = u64> + '_ {
        self.words
            .iter()
            .enumerate()
            .filter(|(_, w)| **w != u64::MAX)
            .flat_map(|(i, w)| {
                (0..64)
                    .filter(move |bit| w & (1u64 << bit) == 0)
                    .map(move |bit| i as u64 * 64 + bit)
            })
            .take_while(move |&index| index < self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_contains_count_and_absent() {
        let mut set = BitSet::with_len(130);
        assert!(set.insert(0));
        assert!(set.insert(64));
        assert!(set.insert(129));
        assert!(!set.insert(64));
        assert!(set.contains(129) && !set.contains(128) && !set.contains(130));
        assert_eq!(set.count(), 3);
        let absent: Vec<u64> = set.absent().collect();
        assert_eq!(absent.len(), 127);
        assert_eq!(&absent[..3], &[1, 2, 3]);
        assert_eq!(*absent.last().unwrap(), 128);
        let mut other = BitSet::default();
        other.copy_from(&set);
        other.insert(5);
        assert_eq!(other.count_not_in(&set), 1);
        assert_eq!(set.count_not_in(&other), 0);
        set.reset(10);
        assert_eq!(set.count(), 0);
        assert_eq!(set.absent().count(), 10);
        // 2^62 bits are 512 PiB: refused, not an abort, and the set stays usable.
        assert!(set.try_reset(1 << 62).is_err());
        assert_eq!(set.count(), 0);
        set.try_reset(70).unwrap();
        assert!(set.insert(69) && set.contains(69));
    }
}
