//! Bucket tables of cache-line buckets holding keys and values inline, and the lock-free,
//! validated reads of them (the unsafe core).
//!
//! A bucket is one 64-byte cache line: a header word (`meta`), a link to an overflow line (null
//! almost always) and twelve 32-bit words of slots, held as six `AtomicU64` pairs: first every
//! slot's key, side by side, then every slot's value part (its value or, when the key has older
//! duplicates, the 32-bit index of its [`DupList`] in the map's [`ListSlab`]). A one-word key
//! with a value of at most one word (`u32 -> u32`, IPv4 address -> `LocalAddr`) takes 8 bytes,
//! six a line:
//!
//! ```text
//!  byte 0          8              16                        40                          64
//!       +----------+--------------+-------------------------+---------------------------+
//!       | meta     | overflow     | key0 key1 key2          | value0 value1 value2      |
//!       | occ, dup,| *Line        | key3 key4 key5          | value3 value4 value5      |
//!       | gen      |              | (words 0..6)            | (words 6..12: a value or  |
//!       |          |              |                         |  a list index each)       |
//!       +----------+--------------+-------------------------+---------------------------+
//!  meta: bits 0..6 slot holds a key and its value, 6..16 always clear, 16..22 slot holds a
//!        key and a list index (a slot is occupied when either of its two bits is set),
//!        22 CHAIN (an overflow line follows), 23 MOVED (look in the future table too),
//!        24..64 generation
//! ```
//!
//! Other shapes: `u32 -> u64` 4 slots of 12 bytes, `u64 -> u64` 3, `u128 -> u32` or
//! `u128 -> u64` 2 (IPv6), `()` keys 6 ([`Geometry`]).
//!
//! **Reads** load `meta` (acquire), compare the query with every slot's key at once (four or
//! six one-word keys: one or two 16-byte SSE2 compares, [`keys_equal`]; longer keys pair
//! by pair), keep the occupied matches, copy the first one's value part, and load `meta` again
//! after an acquire fence: the copy is kept only when both loads agree (then decoded with
//! [`Inline::load`], which so only ever sees words one store wrote); otherwise they read the
//! line again. A lookup's first read of each line is straight-line code, validated once
//! (`Line::find_once`); a copy that does not validate, or a hit in a line that holds a
//! duplicate list, sends the whole lookup, out of line, to the read that retries. A writer
//! never changes the words of an occupied slot: it writes a free slot and then publishes it
//! with one store of `meta` that sets the slot's bit (and, to replace a slot, clears the old
//! one's in the same store), bumping the generation. A pair shared by two slots
//! is rewritten whole by the one writer, the other half with its own value, so a reader sees
//! the pair before or after, each whole. So a reader that copied an occupied slot while a
//! writer reused it sees `meta` change, and a reader never waits for a writer (the kernel's
//! seqcount readers spin while a write is in progress; here every published state is whole). A
//! 40-bit generation (10^12 writes to one line) cannot wrap while a reader stands on it.
//!
//! **Where a miss ends** is in the same validated header, as the kernel's nulls-marked chains
//! tell a reader where a chain ends without another load: `CHAIN` says an overflow line
//! follows (set after the link is stored, cleared after it is unlinked to null), `MOVED` says
//! keys of this bucket may be in the table's `future` (set on every line of the chain before
//! the bucket's first key migrates, and so before any key of it is inserted into the future
//! table, since writers migrate a key's old bucket first). A miss whose validated header has
//! neither bit is over: one test instead of loading the overflow link and the future table.
//! A reader that saw a slot cleared by a migration saw that line's header after `MOVED` was
//! set on every line of its chain (release/acquire on the headers), so it follows `future`.
//!
//! **Tags**: beside its lines a table keeps one 64-bit word per bucket, a Bloom filter of one
//! bit per key of the chain, overflow lines included ([`BucketTable::tag_bit`]), all bits set
//! once the chain migrates (`MOVED`). A lookup reads it before the line and stops there when its
//! key's bit is clear: most misses then read 8 bytes of a dense array (256 KiB of tags for
//! 100,000 keys, where the lines take 2 MiB) and no line, and need no validation (one atomic
//! word); at 3.8 keys a bucket (1,000,000 IPv4 keys) about one miss in seventeen passes. The
//! writer sets a key's bit before it publishes the key and recomputes the tag after a key
//! left, so a clear bit proves the key absent; a set bit (the key, or another key of the
//! bucket on the same bit) sends the lookup to the line, validated as above.
//!
//! **Lines** never move: a table's first lines are its array, overflow lines are linked at the
//! end of a chain and, once empty, unlinked and freed after a grace period (a reader standing
//! on one still follows its unchanged link). A key moves only forwards within a chain (to a
//! later line, published there before it is cleared here), and between tables only from the
//! old one to the new one, published in the new one first: a reader that searches the chain
//! from its head, old table then new, finds every key that stayed in the map throughout.

use std::hash::Hash;
use std::marker::PhantomData;
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering, fence};

use crate::array::{Zeroable, ZeroedArray};
use crate::inline::Inline;
pub(crate) use crate::lists::ListSlab;

/// 32-bit words of slots per line.
pub(crate) const LINE_WORDS: usize = 12;

/// The slot words as 64-bit atomics (word `2j` is the low half of pair `j`).
const LINE_PAIRS: usize = LINE_WORDS / 2;

/// Most slots per line (the `meta` word has 8 bits of each kind; 6 is the most a line of 12
/// words can hold, with a zero-word key and a two-word value).
const MAX_SLOTS: usize = 6;

/// One generation step in `meta` (a 40-bit generation in bits 24..64).
const GENERATION: u64 = 1 << 24;

/// The occupied bits of `meta` (one per slot, [`MAX_SLOTS`] of them).
const OCCUPIED: u64 = (1 << MAX_SLOTS) - 1;

/// Where a slot's "holds a list" bit sits in `meta`: bit `LIST_BITS + i`. Above bit 15, so
/// that `meta`'s bits 6..16 are always clear and the 16-bit mask of a line's key compares
/// (`pmovmskb`, whose bits 6..16 are value lanes or copies) needs one `and` with the header
/// to become the slots holding the key with their value inline ([`Meta::inline_hits`]).
const LIST_BITS: u32 = 16;

/// A slot's two bits: value inline (bit `i`) or list (bit `LIST_BITS + i`).
const SLOT_BITS: u64 = 1 | 1 << LIST_BITS;

/// `meta` bit: the line's overflow link is (or was, a moment ago) not null.
pub(crate) const CHAIN: u64 = 1 << 22;

/// `meta` bit: the table has a `future` table that may hold keys of this bucket.
pub(crate) const MOVED: u64 = 1 << 23;

/// The bits of `meta` that are always clear (between the inline bits and the list bits):
/// what lets a reader and its compares' 16-bit mask with the header alone.
const CLEAR_BITS: u64 = 0xffff & !OCCUPIED;

/// A bucket's tag: a 64-bit Bloom filter of its chain's keys, one bit each (see
/// [`BucketTable::tag_bit`]).
pub(crate) type Tag = u64;

/// A bucket tag with every bit set: the chain goes on or is migrating, read the line.
pub(crate) const TAG_ALL: Tag = Tag::MAX;

/// A key's words, as readers and writers compare and hash them (computed once per operation).
pub(crate) type KeyWords = [u32; LINE_WORDS];

/// The words of `key` (the first `K::WORDS` of the array, the rest zero).
#[inline(always)]
pub(crate) fn key_words<K: Inline>(key: &K) -> KeyWords {
    let mut q = [0; LINE_WORDS];
    key.store(&mut q[..K::WORDS]);
    q
}

/// How a `(K, V)` pair fills a line: words per slot, slots per line, where keys and values
/// sit, and the table's `size` units per line.
pub(crate) struct Geometry<K, V>(PhantomData<(K, V)>);

impl<K: Inline, V: Inline> Geometry<K, V> {
    /// Words of a slot's value part: the value, or the index of its `DupList` (one word).
    pub(crate) const PAYLOAD: usize = if V::WORDS > 1 { V::WORDS } else { 1 };
    /// Words per slot.
    pub(crate) const STRIDE: usize = K::WORDS + Self::PAYLOAD;
    /// Slots per line.
    pub(crate) const SLOTS: usize = {
        assert!(
            Self::STRIDE <= LINE_WORDS,
            "addr-table: key and value must fit in 12 32-bit words (48 bytes)"
        );
        let n = LINE_WORDS / Self::STRIDE;
        if n > MAX_SLOTS { MAX_SLOTS } else { n }
    };
    /// Units of the table's `size` (the kernel's bucket count, which its load factor counts)
    /// per line: one per slot. At the 7/8 growth threshold a line then holds
    /// `0.875 * SLOTS` keys on average (5.25 in 6 slots for `u32 -> u32`), half that right
    /// after a growth. (The line count stays a power of two: see
    /// [`lines_for`](Self::lines_for).)
    pub(crate) const SIZE_PER_LINE: usize = Self::SLOTS;
    /// Bits of every slot, as in [`Meta::occupied_mask`].
    pub(crate) const ALL_SLOTS: u32 = (1 << Self::SLOTS) - 1;
    /// The keys come first, side by side; the value parts follow from this word on.
    pub(crate) const PAYLOADS_AT: usize = Self::SLOTS * K::WORDS;
    /// Four or six one-word keys in the first two or three pairs: compared at once
    /// ([`keys_equal`]).
    const ONE_WORD_KEYS: bool = K::WORDS == 1 && Self::SLOTS >= 4;

    /// Lines of a table of at least `size` units: `size / SIZE_PER_LINE` rounded up, then up
    /// to a power of two (at least one line), so that doubling a table's size doubles its
    /// lines, and a shrink to the kernel's `nelems * 3 / 2` leaves the load at most 2/3.
    pub(crate) fn lines_for(size: usize) -> usize {
        size.div_ceil(Self::SIZE_PER_LINE)
            .max(1)
            .next_power_of_two()
    }

    /// Keys of one chain above which an insert forces a rehash: [`ELASTICITY`] (the kernel's
    /// 16) or four lines' worth of units, whichever is more (24 for 6-slot lines, where a
    /// chain of 17 is too likely by chance at 5.25 keys a line: once in about 30,000 lines).
    ///
    /// [`ELASTICITY`]: crate::rhltable::ELASTICITY
    pub(crate) const ELASTICITY: usize = {
        let four_lines = 4 * Self::SIZE_PER_LINE;
        if four_lines > crate::rhltable::ELASTICITY {
            four_lines
        } else {
            crate::rhltable::ELASTICITY
        }
    };

    /// The first slot of a non-empty mask of slots, in a form the compiler sees is below
    /// [`SLOTS`](Self::SLOTS) (no bounds check on the words it indexes).
    #[inline(always)]
    pub(crate) fn first_slot(hits: u32) -> usize {
        let i = hits.trailing_zeros() as usize;
        if Self::SLOTS.is_power_of_two() {
            i & (Self::SLOTS - 1)
        } else {
            i.min(Self::SLOTS - 1)
        }
    }

    /// [`first_slot`](Self::first_slot) of a mask the caller took within
    /// [`ALL_SLOTS`](Self::ALL_SLOTS): the trailing zeros alone (one instruction fewer on a
    /// reader's path from the compare to the value's load).
    ///
    /// # Safety
    /// `hits` is not zero and has no bit outside `ALL_SLOTS`.
    #[inline(always)]
    pub(crate) unsafe fn first_slot_within(hits: u32) -> usize {
        debug_assert!(hits != 0 && hits & !Self::ALL_SLOTS == 0);
        let i = hits.trailing_zeros() as usize;
        // SAFETY: the caller's mask is a non-empty subset of the `SLOTS` low bits, so its
        // lowest set bit is below `SLOTS` (`first_slot_within_agrees_with_first_slot`).
        unsafe { std::hint::assert_unchecked(i < Self::SLOTS) };
        i
    }

    /// First word of slot `i`'s key.
    #[inline(always)]
    pub(crate) fn key_at(i: usize) -> usize {
        i * K::WORDS
    }

    /// First word of slot `i`'s value part.
    #[inline(always)]
    pub(crate) fn payload_at(i: usize) -> usize {
        Self::PAYLOADS_AT + i * Self::PAYLOAD
    }
}

/// Bit `i` (0..4) set when 32-bit lane `i` of `lo` (lanes 0, 1) and `hi` (lanes 2, 3) equals
/// `key`: four key compares without a branch (which slot matches is as good as random, a
/// branch per slot would mispredict). On x86-64 one SSE2 compare of the four lanes and a
/// movemask (about 8 instructions against 18 for four scalar compares); elsewhere
/// [`lanes_equal_scalar`].
#[inline(always)]
pub(crate) fn lanes_equal(lo: u64, hi: u64, key: u32) -> u32 {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    {
        use std::arch::x86_64::{
            _mm_castsi128_ps, _mm_cmpeq_epi32, _mm_movemask_ps, _mm_set_epi64x, _mm_set1_epi32,
        };
        // SAFETY: these intrinsics only need SSE2, which this build enables for every CPU it
        // runs on (the `cfg` above; x86-64's baseline); they compute on values, no memory.
        // Tested against `lanes_equal_scalar` (`lanes_equal_agrees_with_the_scalar_compare`,
        // also under Miri).
        unsafe {
            let lanes = _mm_set_epi64x(hi as i64, lo as i64);
            let equal = _mm_cmpeq_epi32(lanes, _mm_set1_epi32(key as i32));
            _mm_movemask_ps(_mm_castsi128_ps(equal)) as u32
        }
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    {
        lanes_equal_scalar(lo, hi, key)
    }
}

/// [`lanes_equal`] of the first two pairs of a line (its four one-word keys) and, with
/// `SIX`, of the next two (its keys 4 and 5; lanes 6 and 7 are value words): with `SIX` a
/// 16-bit mask, the eight lanes' bits twice (bits 0..8 and 8..16), which the caller ands with
/// the line's header, whose bits 6..16 are always clear ([`Meta::inline_hits`]). On x86-64
/// one 16-byte load straight into a vector register per four lanes (3 instructions for load
/// and compare, where two 64-bit atomic loads, two moves into vector registers and an unpack
/// took 7).
///
/// The loads are inline assembly because Rust has no 128-bit atomic load on x86-64 without
/// `cmpxchg16b` (a write): what each reads is what two relaxed `AtomicU64` loads of its pairs
/// read (the fallback, also what Miri runs), since the CPU reads each aligned 8-byte half of
/// an aligned 16-byte SSE load as one access, and a torn pair of halves is caught by the
/// caller's validation of the header like any other copy taken while a writer ran.
///
/// It addresses the keys from the line's own address (`[line + 16]`, `[line + 32]`), so a
/// reader needs no second pointer into the line.
#[inline(always)]
fn keys_equal<const SIX: bool>(line: &Line, key: u32) -> u32 {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(miri)))]
    {
        use std::arch::x86_64::{
            __m128i, _mm_castsi128_ps, _mm_cmpeq_epi32, _mm_movemask_ps, _mm_set1_epi32,
        };
        const { assert!(std::mem::offset_of!(Line, pairs) == 16) };
        let lanes: __m128i;
        // SAFETY: `line` is a live reference to a 64-byte aligned `Line`, whose bytes 16..32
        // are `pairs[0]` and `pairs[1]` (checked above), so the load is in bounds and 16-byte
        // aligned; the assembly only reads them into a register (`readonly`, no stack, flags
        // kept), as two relaxed loads of the pairs would (each aligned 8-byte half is one
        // access; see above). Tested against the two-load fallback
        // (`keys_equal_agrees_with_relaxed_loads`).
        unsafe {
            std::arch::asm!(
                "movdqa {lanes}, xmmword ptr [{p} + 16]",
                p = in(reg) std::ptr::from_ref(line),
                lanes = out(xmm_reg) lanes,
                options(nostack, preserves_flags, readonly),
            );
        }
        if !SIX {
            // SAFETY: SSE2 intrinsics on values (the `cfg` above), as in `lanes_equal`.
            return unsafe {
                let k = _mm_set1_epi32(key as i32);
                _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(lanes, k))) as u32
            };
        }
        let high: __m128i;
        // SAFETY: as above, bytes 32..48 (`pairs[2]` and `pairs[3]`), in bounds and 16-byte
        // aligned in the 64-byte line.
        unsafe {
            std::arch::asm!(
                "movdqa {lanes}, xmmword ptr [{p} + 32]",
                p = in(reg) std::ptr::from_ref(line),
                lanes = out(xmm_reg) high,
                options(nostack, preserves_flags, readonly),
            );
        }
        // SAFETY: SSE2 intrinsics on values, as above. The eight lanes' compares packed to
        // bytes and their byte mask taken at once: bit `i` for lane `i` (0..8) and again bit
        // `8 + i`, a 16-bit mask the caller ands with the header as it is (whose bits 6..16
        // are clear) where the mask of `low | high << 4` (8 bits) needed one more `and`.
        unsafe {
            use std::arch::x86_64::{_mm_movemask_epi8, _mm_packs_epi16, _mm_packs_epi32};
            let k = _mm_set1_epi32(key as i32);
            let words = _mm_packs_epi32(_mm_cmpeq_epi32(lanes, k), _mm_cmpeq_epi32(high, k));
            _mm_movemask_epi8(_mm_packs_epi16(words, words)) as u32
        }
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2", not(miri))))]
    {
        keys_equal_by_pairs::<SIX>(&line.pairs, key)
    }
}

/// [`keys_equal`] with relaxed 64-bit atomic loads (the portable form and its reference).
#[inline(always)]
#[cfg_attr(
    all(target_arch = "x86_64", target_feature = "sse2", not(miri)),
    allow(dead_code)
)]
fn keys_equal_by_pairs<const SIX: bool>(pairs: &[AtomicU64; LINE_PAIRS], key: u32) -> u32 {
    let lo = pairs[0].load(Ordering::Relaxed);
    let hi = pairs[1].load(Ordering::Relaxed);
    let low = lanes_equal(lo, hi, key);
    if !SIX {
        return low;
    }
    let lo = pairs[2].load(Ordering::Relaxed);
    let hi = pairs[3].load(Ordering::Relaxed);
    // The eight lanes' bits, twice (bits 0..8 and 8..16), as the SSE2 form's byte mask.
    (low | lanes_equal(lo, hi, key) << 4) * 0x101
}

/// [`lanes_equal`] with four scalar compares (portable; the reference of the SIMD one).
#[inline(always)]
#[cfg_attr(all(target_arch = "x86_64", target_feature = "sse2"), allow(dead_code))]
pub(crate) fn lanes_equal_scalar(lo: u64, hi: u64, key: u32) -> u32 {
    let lanes = [lo as u32, (lo >> 32) as u32, hi as u32, (hi >> 32) as u32];
    let mut m = 0;
    for (i, lane) in lanes.into_iter().enumerate() {
        m |= u32::from(lane == key) << i;
    }
    m
}

/// The header word of a line (see the module documentation).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Meta(pub(crate) u64);

impl Meta {
    /// Whether slot `i` holds a key (with its value inline, bit `i`, or a list, bit
    /// `LIST_BITS + i`).
    #[inline(always)]
    pub(crate) fn occupied(self, i: usize) -> bool {
        self.0 & (SLOT_BITS << i) != 0
    }

    /// Whether slot `i`'s value part is a `DupList` pointer.
    #[inline(always)]
    pub(crate) fn dups(self, i: usize) -> bool {
        self.0 & (1 << (LIST_BITS as usize + i)) != 0
    }

    /// Whether some slot's value part is a `DupList` pointer.
    #[inline(always)]
    pub(crate) fn any_dups(self) -> bool {
        self.0 & (OCCUPIED << LIST_BITS) != 0
    }

    /// Occupied slots, as a mask (bit `i` for slot `i`).
    #[inline(always)]
    pub(crate) fn occupied_mask(self) -> u32 {
        ((self.0 | self.0 >> LIST_BITS) & OCCUPIED) as u32
    }

    /// Of the compares' mask `matches` (at most 16 bits: bit `i` for slot `i`, and maybe
    /// bits of lanes that are not keys from bit 6 on), the slots that hold the key with its
    /// value inline: one `and` with the header's low word, since bits 6..16 of a header are
    /// always clear ([`CLEAR_BITS`]; `meta_gap_stays_clear` tests every constructor) and the
    /// mask has no bit from 16 on. The result has no bit outside the line's slots (whose
    /// inline bits are the only ones a writer sets below bit 16).
    #[inline(always)]
    pub(crate) fn inline_hits(self, matches: u32) -> u32 {
        debug_assert!(self.0 & CLEAR_BITS == 0);
        debug_assert!(matches <= 0xffff);
        // (The header's bits 16..32 meet the mask's clear high half: no mask needed.)
        self.0 as u32 & matches
    }

    /// Slots that hold a key and its value inline (not a list), as a mask: the header's low
    /// bits as they are (tests; the reader's hit path ands them in `inline_hits`).
    #[cfg(test)]
    pub(crate) fn inline_mask(self) -> u32 {
        (self.0 & OCCUPIED) as u32
    }

    /// Whether a miss in this line must look further: an overflow line follows (`CHAIN`) or
    /// keys of the bucket may be in the future table (`MOVED`).
    #[inline(always)]
    pub(crate) fn continues(self) -> bool {
        self.0 & (CHAIN | MOVED) != 0
    }

    /// The same header with `bit` (`CHAIN` or `MOVED`) set or cleared (no new generation:
    /// slots are unchanged, and a reader comparing the whole word still sees the change).
    pub(crate) fn flag(self, bit: u64, on: bool) -> Meta {
        Meta(if on { self.0 | bit } else { self.0 & !bit })
    }

    /// Keys in the line.
    pub(crate) fn keys(self) -> usize {
        self.occupied_mask().count_ones() as usize
    }

    /// The first free slot of a line of `slots` slots.
    pub(crate) fn first_free(self, slots: usize) -> Option<usize> {
        let free = !self.occupied_mask() & ((1u32 << slots) - 1);
        (free != 0).then(|| free.trailing_zeros() as usize)
    }

    /// Slot `i` set (holding a `DupList` pointer when `dups`: bit `LIST_BITS + i` instead of bit
    /// `i`),
    /// next generation.
    pub(crate) fn with(self, i: usize, dups: bool) -> Meta {
        let cleared = self.0 & !(SLOT_BITS << i);
        let bit = if dups {
            1 << (LIST_BITS as usize + i)
        } else {
            1 << i
        };
        Meta((cleared | bit).wrapping_add(GENERATION))
    }

    /// Slot `from` cleared and slot `to` set (holding a `DupList` pointer when `dups`) in one
    /// generation step.
    pub(crate) fn moved(self, from: usize, to: usize, dups: bool) -> Meta {
        Meta(self.0 & !(SLOT_BITS << from)).with(to, dups)
    }

    /// Slot `i` cleared, next generation.
    pub(crate) fn without(self, i: usize) -> Meta {
        Meta((self.0 & !(SLOT_BITS << i)).wrapping_add(GENERATION))
    }
}

// SAFETY: a `Line` of zero bytes is an empty line: `meta` 0, a null `overflow`, zero words.
unsafe impl Zeroable for Line {}

/// One cache line of a bucket chain.
#[repr(C, align(64))]
pub(crate) struct Line {
    pub(crate) meta: AtomicU64,
    /// The next line of this chain, or null.
    pub(crate) overflow: AtomicPtr<Line>,
    /// The slots' twelve 32-bit words as six 64-bit atomics: word `2j` is the low half of
    /// `pairs[j]`, word `2j + 1` the high half. Only ever accessed as `AtomicU64`; the one
    /// writer changes a word by rewriting its pair (the other half keeps its value, so a
    /// reader sees either pair whole).
    pairs: [AtomicU64; LINE_PAIRS],
}

/// What a slot holds besides its key.
pub(crate) enum Payload<V> {
    /// The key's only object.
    Value(V),
    /// The key's objects, newest first (two or more).
    Dups(*const DupList<V>),
}

impl<V> Clone for Payload<V>
where
    V: Copy,
{
    fn clone(&self) -> Self {
        *self
    }
}
impl<V: Copy> Copy for Payload<V> {}

/// Where a key sits in a table, found under the writer lock.
pub(crate) struct Position<'t, K, V> {
    /// The table and the bucket whose chain holds the key.
    pub(crate) table: &'t BucketTable<K, V>,
    pub(crate) index: usize,
    /// The line before `line` in its chain (`None` when `line` is the first).
    pub(crate) prev: Option<&'t Line>,
    pub(crate) line: &'t Line,
    pub(crate) slot: usize,
    pub(crate) key: K,
    pub(crate) payload: Payload<V>,
}

impl Line {
    fn empty() -> Self {
        Line {
            meta: AtomicU64::new(0),
            overflow: AtomicPtr::new(ptr::null_mut()),
            pairs: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Copies `out.len()` words from word `at` on (relaxed loads, one per pair: the caller
    /// validates or holds the writer lock).
    #[inline(always)]
    fn copy_words(&self, at: usize, out: &mut [u32]) {
        let mut j = 0;
        while j < out.len() {
            let w = at + j;
            let pair = self.pairs[w / 2].load(Ordering::Relaxed);
            if w % 2 == 1 {
                out[j] = (pair >> 32) as u32;
                j += 1;
            } else {
                out[j] = pair as u32;
                if j + 1 < out.len() {
                    out[j + 1] = (pair >> 32) as u32;
                }
                j += 2;
            }
        }
    }

    /// Word `at` (below [`LINE_WORDS`]) as a relaxed load would read it (the caller
    /// validates): on x86-64 one 32-bit load, where a load of its pair and a shift by its
    /// half took three more instructions; elsewhere (and under Miri) [`copy_words`].
    ///
    /// [`copy_words`]: Self::copy_words
    #[inline(always)]
    fn word(&self, at: usize) -> u32 {
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        {
            const { assert!(std::mem::offset_of!(Line, pairs) == 16) };
            assert!(at < LINE_WORDS);
            // SAFETY: `at < LINE_WORDS` (checked; the callers' indices are below it, so the
            // check folds away), so bytes `16 + 4 * at ..+ 4` are the low or high half of
            // `pairs[at / 2]`, in bounds of the line and 4-byte aligned. The assembly only
            // reads them (`readonly`, no stack, flags kept); an aligned 4-byte load is one
            // access, the half of the pair a relaxed 64-bit load would read (as the 16-byte
            // key load in `keys_equal` reads whole pairs). Tested against `copy_words`
            // (`one_word_loads_agree_with_copy_words`).
            unsafe {
                let p = std::ptr::from_ref(self).cast::<u8>().add(16 + 4 * at);
                let v: u32;
                std::arch::asm!(
                    "mov {v:e}, dword ptr [{p}]",
                    p = in(reg) p,
                    v = out(reg) v,
                    options(nostack, preserves_flags, readonly),
                );
                v
            }
        }
        #[cfg(not(all(target_arch = "x86_64", not(miri))))]
        {
            let mut w = [0];
            self.copy_words(at, &mut w);
            w[0]
        }
    }

    /// Slot `i`'s value word, for a one-word value part ([`word`](Self::word) of its
    /// position). For six slots of one-word keys (values from word 6 on, byte 40) on x86-64
    /// one load addressed from the line and the slot index (`[line + 4 * i + 40]`), where
    /// computing the word's address first took two more instructions.
    #[inline(always)]
    fn value_word<K: Inline, V: Inline>(&self, i: usize) -> u32 {
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        if Geometry::<K, V>::PAYLOADS_AT == 6 && Geometry::<K, V>::PAYLOAD == 1 {
            const { assert!(std::mem::offset_of!(Line, pairs) == 16) };
            // (Folds away: the callers' slot index is below `SLOTS`, 6 here.)
            assert!(i < 6);
            let v: u32;
            // SAFETY: `i < 6`, so bytes `40 + 4 * i ..+ 4` are word `6 + i` of the slots,
            // the low or high half of `pairs[(6 + i) / 2]`, in bounds of the 64-byte line and
            // 4-byte aligned; read only, as in `word`. Tested against `copy_words`
            // (`one_word_loads_agree_with_copy_words`).
            unsafe {
                std::arch::asm!(
                    "mov {v:e}, dword ptr [{line} + 4 * {i} + 40]",
                    line = in(reg) std::ptr::from_ref(self),
                    i = in(reg) i,
                    v = out(reg) v,
                    options(nostack, preserves_flags, readonly),
                );
            }
            return v;
        }
        self.word(Geometry::<K, V>::payload_at(i))
    }

    /// Writes `src` into the words from `at` on, pair by pair (relaxed stores; the other half
    /// of a shared pair is rewritten with its own value). Writer only.
    fn store_words(&self, at: usize, src: &[u32]) {
        for (j, &word) in src.iter().enumerate() {
            let w = at + j;
            let pair = &self.pairs[w / 2];
            let old = pair.load(Ordering::Relaxed);
            let new = if w % 2 == 1 {
                (old & 0xffff_ffff) | (u64::from(word) << 32)
            } else {
                (old & !0xffff_ffff) | u64::from(word)
            };
            pair.store(new, Ordering::Relaxed);
        }
    }

    /// The slots whose key words equal `q`'s (occupied or not), as a mask: branch-free, since
    /// which slot matches is as good as random and a branch per slot would mispredict.
    #[inline(always)]
    fn matches<K: Inline, V: Inline>(&self, q: &KeyWords) -> u32 {
        if Geometry::<K, V>::ONE_WORD_KEYS {
            return if Geometry::<K, V>::SLOTS > 4 {
                keys_equal::<true>(self, q[0])
            } else {
                keys_equal::<false>(self, q[0])
            };
        }
        let mut hits = 0;
        for i in 0..Geometry::<K, V>::SLOTS {
            let at = Geometry::<K, V>::key_at(i);
            let mut eq = true;
            if K::WORDS % 2 == 0 {
                // Whole pairs (keys start on even words): one 64-bit compare per pair.
                for t in 0..K::WORDS / 2 {
                    let want = u64::from(q[2 * t]) | (u64::from(q[2 * t + 1]) << 32);
                    eq &= self.pairs[at / 2 + t].load(Ordering::Relaxed) == want;
                }
            } else {
                let mut k = [0; LINE_WORDS];
                self.copy_words(at, &mut k[..K::WORDS]);
                eq = k[..K::WORDS] == q[..K::WORDS];
            }
            hits |= u32::from(eq) << i;
        }
        hits
    }

    /// Slot `i`'s key (relaxed loads: the caller holds the writer lock).
    fn key<K: Inline, V: Inline>(&self, i: usize) -> K {
        let mut k = [0; LINE_WORDS];
        self.copy_words(Geometry::<K, V>::key_at(i), &mut k[..K::WORDS]);
        K::load(&k[..K::WORDS])
    }

    /// Slot `i`'s value part as of `meta` (relaxed loads: the caller holds the writer lock;
    /// a list's index is looked up in `lists`).
    fn payload<K: Inline, V: Inline>(
        &self,
        meta: Meta,
        i: usize,
        lists: &ListSlab<V>,
    ) -> Payload<V> {
        let mut w = [0; LINE_WORDS];
        self.copy_words(
            Geometry::<K, V>::payload_at(i),
            &mut w[..Geometry::<K, V>::PAYLOAD],
        );
        if meta.dups(i) {
            Payload::Dups(lists.get(w[0]))
        } else {
            Payload::Value(Found::<V>::decode(&w).value)
        }
    }

    /// Writes `key` and `payload` into free slot `i` (not yet published).
    fn write_slot<K: Inline, V: Inline>(&self, i: usize, key: K, payload: Payload<V>) {
        // Order these stores after the `meta` store that freed the slot: a reader that copies
        // them then sees that store (or a later one) when it validates.
        fence(Ordering::Release);
        self.store_words(Geometry::<K, V>::key_at(i), &key_words(&key)[..K::WORDS]);
        let mut w = [0; LINE_WORDS];
        let len = match payload {
            Payload::Value(v) => {
                v.store(&mut w[..V::WORDS]);
                V::WORDS
            }
            Payload::Dups(p) => {
                // SAFETY: a `Payload::Dups` given to a writer points to a live list (allocated
                // by the writer, retired only after no slot holds it), and the writer holds
                // the lock.
                w[0] = unsafe { &*p }.index;
                1
            }
        };
        self.store_words(Geometry::<K, V>::payload_at(i), &w[..len]);
    }

    /// A validated copy of the slot holding the key with words `q` (`Err` with the validated
    /// header when this line has none, for [`Meta::continues`]); a list's index is resolved
    /// in `lists` before the copy is validated (see [`crate::lists`]).
    #[inline(always)]
    fn find<K: Inline, V: Inline>(
        &self,
        q: &KeyWords,
        lists: &ListSlab<V>,
    ) -> Result<Found<V>, Meta> {
        loop {
            let m = Meta(self.meta.load(Ordering::Acquire));
            // (The occupied bits of slots that exist: tells the compiler `i` below is one.)
            let hits = self.matches::<K, V>(q) & m.occupied_mask() & Geometry::<K, V>::ALL_SLOTS;
            if hits == 0 {
                // A miss copies nothing: validate the header alone (its `CHAIN` and `MOVED`
                // bits tell the caller where to look next).
                fence(Ordering::Acquire);
                if self.meta.load(Ordering::Relaxed) == m.0 {
                    return Err(m);
                }
                continue;
            }
            let i = Geometry::<K, V>::first_slot(hits);
            let mut w = [0; LINE_WORDS];
            self.copy_words(
                Geometry::<K, V>::payload_at(i),
                &mut w[..Geometry::<K, V>::PAYLOAD],
            );
            // A list's index is resolved before the validation, which so also proves that the
            // entry still held this slot's list (the writer clears the slot before it clears
            // or reuses the index). (Whether any slot of the line holds a list, first: one
            // test of the header, no shift by the slot, on the common path.)
            let list = if m.any_dups() && Found::<V>::dups_cold(m, i) {
                lists.get(w[0])
            } else {
                ptr::null()
            };
            fence(Ordering::Acquire);
            if self.meta.load(Ordering::Relaxed) == m.0 {
                // Validated: the words are those of one published state; decode them.
                if m.dups(i) {
                    if list.is_null() {
                        // Not possible for a validated copy; read again rather than trust it.
                        continue;
                    }
                    return Ok(Found {
                        value: V::load(&[0; LINE_WORDS][..V::WORDS]),
                        list,
                    });
                }
                return Ok(Found::decode(&w));
            }
        }
    }

    /// One attempt of [`find`](Self::find), for the hot path: `None` when the copy did not
    /// validate (a writer changed the line meanwhile), or no slot holds the key with its
    /// value inline and the line holds a duplicate list (the key's, maybe); the caller then
    /// starts its lookup over with `find`, out of line. So the common hit and miss are
    /// straight-line code, validated once, with neither the retry loop nor a list test on the
    /// hit's path (a hit compares only slots whose inline bit is set).
    #[inline(always)]
    fn find_once<K: Inline, V: Inline>(&self, q: &KeyWords) -> Option<Result<Found<V>, Meta>> {
        let m = Meta(self.meta.load(Ordering::Acquire));
        // Slots holding their value inline (a slot with a list has its bit at
        // `LIST_BITS + i`): one `and` of the compares' mask with the header.
        let hits = m.inline_hits(self.matches::<K, V>(q));
        if hits != 0 {
            // SAFETY: `hits` is not zero, and within `ALL_SLOTS`: `inline_hits` keeps the
            // header's bits below 16 that are set, which are inline bits of slots of this line
            // (a writer sets no other: `meta_gap_stays_clear`), and `matches` has at most 16
            // bits (`matches_fit_16_bits`).
            let i = unsafe { Geometry::<K, V>::first_slot_within(hits) };
            let mut w = [0; LINE_WORDS];
            if Geometry::<K, V>::PAYLOAD == 1 {
                // A one-word value: one 32-bit load, no shift out of its pair.
                w[0] = self.value_word::<K, V>(i);
            } else {
                self.copy_words(
                    Geometry::<K, V>::payload_at(i),
                    &mut w[..Geometry::<K, V>::PAYLOAD],
                );
            }
            fence(Ordering::Acquire);
            // Validated: the words are the value that one store published with slot `i`'s
            // inline bit.
            return (self.meta.load(Ordering::Relaxed) == m.0).then(|| Ok(Found::decode(&w)));
        }
        // No inline slot has the key. A miss copies nothing: validate the header alone; a
        // line with a list (whose key was not compared as a hit) is left to the full read.
        fence(Ordering::Acquire);
        (self.meta.load(Ordering::Relaxed) == m.0 && !m.any_dups()).then_some(Err(m))
    }
}

/// What a reader's walk of one bucket chain found.
pub(crate) enum Probe<V> {
    /// The key's slot.
    Hit(Found<V>),
    /// Not in this table, nor in its future table.
    Absent,
    /// Not in this table; the bucket is migrating, so look in the `future` table.
    Moved,
    /// Not decided by one attempt, or the bucket is migrating ([`BucketTable::find`] with
    /// `ONCE`): look up again with the retrying read.
    Retry,
    /// Not in the first line of the bucket, this line, whose validated header had `CHAIN`
    /// set and `MOVED` clear ([`BucketTable::find`] with `ONCE`): walk on with
    /// [`BucketTable::find_overflow`], out of line.
    Chain(*const Line),
}

/// A reader's validated copy of a slot's value part.
#[derive(Clone, Copy)]
pub(crate) struct Found<V> {
    /// The key's only value, when `list` is null (else a placeholder).
    pub(crate) value: V,
    /// The key's duplicate list, or null.
    pub(crate) list: *const DupList<V>,
}

impl<V: Inline> Found<V> {
    /// Decodes the words of a value part that holds its value inline.
    #[inline(always)]
    fn decode(w: &[u32; LINE_WORDS]) -> Self {
        Found {
            value: V::load(&w[..V::WORDS]),
            list: ptr::null(),
        }
    }
}

impl<V> Found<V> {
    /// [`Meta::dups`] off the hot path: asked only of a line that holds a duplicate list, so
    /// that a line without one pays one test of its header and no shift by the slot.
    #[cold]
    #[inline(never)]
    fn dups_cold(m: Meta, i: usize) -> bool {
        m.dups(i)
    }
}

impl<V: Copy> Found<V> {
    /// What the slot holds.
    #[inline(always)]
    pub(crate) fn payload(self) -> Payload<V> {
        if self.list.is_null() {
            Payload::Value(self.value)
        } else {
            Payload::Dups(self.list)
        }
    }
}

/// The objects of a key that has more than one, newest first (the kernel's `rhlist_head`
/// list). Allocated when a key gets its second object, retired when it is back to one.
pub(crate) struct DupList<V> {
    pub(crate) head: AtomicPtr<DupNode<V>>,
    /// Its index in the table's [`ListSlab`], what a slot holds (fixed for its life).
    pub(crate) index: u32,
}

/// One object of a [`DupList`]: immutable but for its link.
pub(crate) struct DupNode<V> {
    pub(crate) value: V,
    /// The next older object, or null.
    pub(crate) next: AtomicPtr<DupNode<V>>,
}

impl<V> DupNode<V> {
    pub(crate) fn alloc(value: V, next: *mut DupNode<V>) -> *mut DupNode<V> {
        Box::into_raw(Box::new(DupNode {
            value,
            next: AtomicPtr::new(next),
        }))
    }
}

impl<V> DupList<V> {
    /// A list of `newest` then `older`, at `index` of its table's [`ListSlab`].
    pub(crate) fn alloc(index: u32, newest: V, older: V) -> *mut DupList<V> {
        let tail = DupNode::alloc(older, ptr::null_mut());
        Box::into_raw(Box::new(DupList {
            head: AtomicPtr::new(DupNode::alloc(newest, tail)),
            index,
        }))
    }

    /// Frees the list and its nodes.
    ///
    /// # Safety
    /// `p` came from [`DupList::alloc`], its nodes from [`DupNode::alloc`], each is freed once
    /// and no thread can reach any of them any more.
    pub(crate) unsafe fn free(p: *mut DupList<V>) {
        // SAFETY: the caller guarantees exclusive ownership of the list.
        let list = unsafe { Box::from_raw(p) };
        let mut n = list.head.load(Ordering::Relaxed);
        while !n.is_null() {
            // SAFETY: each node is owned by the list, reachable once, freed once.
            let node = unsafe { Box::from_raw(n) };
            n = node.next.load(Ordering::Relaxed);
        }
    }
}

/// One generation of buckets (the kernel's `bucket_table`), with its own hash seed and, while a
/// rehash runs, a pointer to the table that replaces it.
///
/// Everything a lookup reads of it (the lines' address, the mask, the three hash keys, the
/// future table) sits in its first cache line.
///
/// The hash of a one-word key (IPv4) on x86-64 with SSE4.2 (this workspace's x86-64-v2) is
/// a CRC32C from `k0` times `k1` (`crc_multiply`: two instructions); of other keys, and in
/// builds without SSE4.2, a keyed multiply-xorshift-multiply (the shape of SplitMix64's and
/// Murmur3's finalizers, with the table's random keys as multipliers). The product's top bits pick
/// the line (`(h * lines) >> 64`, Lemire's reduction: for a power of two, the top
/// `log2(lines)` bits, as the kernel's `hash_64` keeps them). A key of one or two words is XORed
/// with `k0`; longer keys first fold each 64-bit pair in with a full 64 × 64 → 128-bit multiply
/// whose halves are XORed (`fold(h ^ x, k1)`, foldhash's and wyhash's mixer). One multiply and
/// a shift (the kernel's `hash_64` with a random multiplier, Dietzfelbinger's multiply-shift)
/// would be cheaper still, but maps consecutive keys (as addresses are numbered) along a Weyl
/// sequence whose evenness depends on the multiplier: measured, some seeds put 1,000
/// consecutive addresses into chains of 6 with 93 of 512 lines overflowing; the xorshift in
/// between spreads them like random keys under every seed tried. The keys come from the
/// table's 64-bit seed, so nothing survives a reseed. Like the kernel's jhash with its random
/// `hash_rnd` it is fast and keyed but not a PRF; the chain-length guard
/// ([`ELASTICITY`](crate::rhltable::ELASTICITY)) is what bounds an attacker who learns a seed.
/// Tests: consecutive keys spread like random ones under 300 seeds, keys aimed at one bucket
/// cost one reseed (`tests/adversarial.rs`). A `u32` key costs a `crc32` and two multiplies
/// (three without SSE4.2); SipHash-1-3 would cost several times more for 4- and 16-byte keys.
#[repr(C, align(64))]
pub(crate) struct BucketTable<K, V> {
    // 64 bytes: the lines' address and count, the tags' address (and count), the three hash
    // keys and `future`.
    /// The first line of every chain.
    buckets: ZeroedArray<Line>,
    /// One [`tag`](Self::tag_bit) word per bucket: what a miss reads instead of the line.
    tags: ZeroedArray<AtomicU64>,
    /// `k0`, `k1`, `k2` of the hash (`k1`, `k2` odd).
    keys: [u64; 3],
    /// The table this one is migrating into (`future_tbl`), or null.
    pub(crate) future: AtomicPtr<BucketTable<K, V>>,
    // Second cache line (read only to resolve a duplicate list's index, off the hot path).
    /// The map's duplicate lists by index (shared by its tables: a migrated slot keeps its
    /// index), owned by the map, which outlives its tables.
    lists: ptr::NonNull<ListSlab<V>>,
    _holds: PhantomData<(K, V)>,
}

/// The hash of a one-word key `x` where the CPU has SSE4.2 (x86-64-v2, what this workspace
/// builds for): the CRC32C of `x` from the initial value `k0`'s low half (one `crc32`), times
/// the odd `k1` (one `imul`). For a 32-bit message the CRC is a bijection, `L(x) ^ a` with
/// `L` linear over GF(2) and invertible and `a` from the key, so distinct keys give distinct
/// words `c`, and the product's top bits (the bucket, by Lemire's reduction) are
/// Dietzfelbinger's multiply-shift of `c` with a random odd multiplier: two keys share a
/// bucket of `m` with probability at most about `2/m` whatever keys an attacker picks without
/// the seed, and consecutive keys (which the CRC scatters) spread as random ones
/// (`tests/adversarial.rs`). The product's low six bits, the tag bit, are a bijection of
/// `c`'s low six bits. Two instructions where the multiply-xorshift-multiply took six
/// (branch addrhit, benchmark notes). Only for one-word keys: a CRC of longer keys is not
/// injective, and its collisions would not depend on the seed. (Miri runs the other hash, as
/// it runs the portable compares: the instruction computes on values only.)
#[cfg(all(target_arch = "x86_64", target_feature = "sse4.2", not(miri)))]
#[inline(always)]
fn crc_multiply(k0: u64, k1: u64, x: u32) -> u64 {
    // SAFETY: the `crc32` instruction needs SSE4.2, which this build enables for every CPU it
    // runs on (the `cfg` above); it computes on values, no memory. Tested against a bitwise
    // CRC32C (`crc_multiply_is_crc32c_times_k1`).
    let c = unsafe { std::arch::x86_64::_mm_crc32_u32(k0 as u32, x) };
    u64::from(c).wrapping_mul(k1)
}

/// The 64 × 64 → 128-bit multiply with its halves XORed (foldhash's and wyhash's mixer).
#[inline(always)]
fn fold(x: u64, k: u64) -> u64 {
    let p = u128::from(x) * u128::from(k);
    (p as u64) ^ ((p >> 64) as u64)
}

impl<K: Inline + Hash + Eq, V: Inline> BucketTable<K, V> {
    /// A table of `lines` empty buckets (a power of two) hashing with `seed`, on the heap,
    /// resolving list indices in `lists` (which must outlive the table).
    pub(crate) fn alloc(
        lines: usize,
        seed: u64,
        lists: ptr::NonNull<ListSlab<V>>,
    ) -> *mut BucketTable<K, V> {
        debug_assert!(lines.is_power_of_two());
        let mix = |c: u64| crate::seed::splitmix64_mix(seed ^ c);
        Box::into_raw(Box::new(BucketTable {
            buckets: ZeroedArray::new(lines),
            tags: ZeroedArray::new(lines),
            keys: [
                mix(0x5851_f42d_4c95_7f2d),
                mix(0x243f_6a88_85a3_08d3) | 1,
                mix(0x1319_8a2e_0370_7344) | 1,
            ],
            future: AtomicPtr::new(ptr::null_mut()),
            lists,
            _holds: PhantomData,
        }))
    }

    /// Number of bucket lines.
    #[inline(always)]
    pub(crate) fn lines(&self) -> usize {
        // (The arrays' lengths; `buckets.len()` is the line count readers multiply by, in the
        // table's first cache line with everything else a lookup reads of it.)
        self.buckets.len()
    }

    /// The table's size in the load factor's units.
    #[inline(always)]
    pub(crate) fn size(&self) -> usize {
        self.lines() * Geometry::<K, V>::SIZE_PER_LINE
    }

    /// The 64-bit hash of a key with words `q` in this table: its top bits pick the bucket
    /// ([`bucket_of_hash`](Self::bucket_of_hash)), its low five bits the key's bit of the
    /// bucket's tag ([`tag_bit`](Self::tag_bit)).
    #[inline(always)]
    pub(crate) fn hash_of(&self, q: &KeyWords) -> u64 {
        let [k0, k1, k2] = self.keys;
        #[cfg(all(target_arch = "x86_64", target_feature = "sse4.2", not(miri)))]
        if K::WORDS == 1 {
            return crc_multiply(k0, k1, q[0]);
        }
        let pair = |j: usize| {
            let hi = if j + 1 < K::WORDS { q[j + 1] } else { 0 };
            u64::from(q[j]) | (u64::from(hi) << 32)
        };
        let h = if K::WORDS <= 2 {
            k0 ^ pair(0)
        } else {
            let mut h = k0;
            let mut j = 0;
            while j < K::WORDS {
                h = fold(h ^ pair(j), k1);
                j += 2;
            }
            h
        };
        let h = h.wrapping_mul(k1);
        (h ^ (h >> 32)).wrapping_mul(k2)
    }

    /// The bucket of a key whose hash is `h`: the top `log2(lines)` bits (Lemire's reduction).
    #[inline(always)]
    pub(crate) fn bucket_of_hash(&self, h: u64) -> usize {
        ((u128::from(h) * self.lines() as u128) >> 64) as usize
    }

    /// The bucket a key with words `q` goes to in this table.
    #[inline(always)]
    pub(crate) fn index_of(&self, q: &KeyWords) -> usize {
        self.bucket_of_hash(self.hash_of(q))
    }

    /// The bucket `key` goes to in this table.
    #[inline(always)]
    pub(crate) fn hash(&self, key: &K) -> usize {
        self.index_of(&key_words(key))
    }

    /// The bit a key whose hash is `h` sets in its bucket's tag: one of 64, picked by the low
    /// six bits of the hash (the bucket takes the top ones; the low bits of the last product
    /// are a bijection of the low bits of `h1 ^ (h1 >> 32)`, so they carry bits 32..38 of the
    /// first product, which every bit of a one- or two-word key reaches). On x86-64 the test
    /// is one `bt` of the 64-bit tag by the hash's register, which takes the offset modulo 64:
    /// the same two instructions as a 32-bit tag's test.
    ///
    /// A bucket's tag is a one-word Bloom filter of the keys of its chain, which a lookup reads
    /// before the bucket line: a key's bit clear means the key is in neither this bucket nor,
    /// through it, the future table, and the lookup ends without touching the line (a miss
    /// reads 8 bytes of a dense array, 256 KiB at 100,000 keys, instead of a line of 2 MiB).
    /// With `k` keys in a chain a miss passes with probability `1 - (63/64)^k`: about 5.8% at
    /// the 3.8 keys a bucket of 1,000,000 IPv4 keys, where 32 bits let 11% through. Two bits a
    /// key would filter better (1.3%) but cost every lookup, hits included, three instructions
    /// more (a shift, a second `bt` and its branch); 64 bits cost none, and the array matches
    /// hashbrown's control bytes (one byte per slot at 7/8 load) at 1,000, 10,000 and
    /// 1,000,000 keys (twice them at 100,000, where a table has just grown).
    /// The writer keeps every key's bit set while the key is in the chain, overflow lines
    /// included (set before it is published, cleared after it left), and the whole tag set
    /// ([`TAG_ALL`]) once the chain migrates (`MOVED`), so that keys in the future table are
    /// never filtered out either: a clear bit is proof of absence, a set one sends the lookup
    /// to the line and its validated read as before.
    #[inline(always)]
    pub(crate) fn tag_bit(h: u64) -> Tag {
        1 << (h as u32 & 63)
    }

    /// The tag a bucket's chain implies (writer side: every key's bit, or [`TAG_ALL`] when
    /// the chain is migrating). Caller holds the writer lock.
    fn tag_of_bucket(&self, index: usize) -> Tag {
        let mut tag = 0;
        for line in self.chain(index) {
            let m = Meta(line.meta.load(Ordering::Relaxed));
            if m.0 & MOVED != 0 {
                return TAG_ALL;
            }
            for slot in 0..Geometry::<K, V>::SLOTS {
                if m.occupied(slot) {
                    let k = line.key::<K, V>(slot);
                    tag |= Self::tag_bit(self.hash_of(&key_words(&k)));
                }
            }
        }
        tag
    }

    /// Adds `bits` to bucket `index`'s tag (before a key is published there). Caller holds the
    /// writer lock.
    fn tag_add(&self, index: usize, bits: Tag) {
        let tag = &self.tags.as_slice()[index];
        let old = tag.load(Ordering::Relaxed);
        if old & bits != bits {
            // Release: a reader that sees the bit also sees what the writer did before.
            tag.store(old | bits, Ordering::Release);
        }
    }

    /// Recomputes bucket `index`'s tag from its first line (after a key left the chain, or an
    /// overflow line was unlinked). Caller holds the writer lock.
    fn tag_refresh(&self, index: usize) {
        let tag = &self.tags.as_slice()[index];
        let want = self.tag_of_bucket(index);
        if tag.load(Ordering::Relaxed) != want {
            tag.store(want, Ordering::Release);
        }
    }

    /// Calls `f` on every key of bucket `index`'s chain (tests).
    #[cfg(test)]
    pub(crate) fn for_each_slot_of(&self, index: usize, mut f: impl FnMut(K)) {
        for line in self.chain(index) {
            let m = Meta(line.meta.load(Ordering::Relaxed));
            for slot in 0..Geometry::<K, V>::SLOTS {
                if m.occupied(slot) {
                    f(line.key::<K, V>(slot));
                }
            }
        }
    }

    /// The address ranges of the lines' and the tags' arrays (diagnostics).
    pub(crate) fn array_ranges(&self) -> [std::ops::Range<usize>; 2] {
        [self.buckets.address_range(), self.tags.address_range()]
    }

    /// Bucket `index`'s tag (tests).
    #[cfg(test)]
    pub(crate) fn tag(&self, index: usize) -> Tag {
        self.tags.as_slice()[index].load(Ordering::Relaxed)
    }

    /// The tag bit of `key` in this table (tests).
    #[cfg(test)]
    pub(crate) fn key_tag_bit(&self, key: &K) -> Tag {
        Self::tag_bit(self.hash_of(&key_words(key)))
    }

    /// Iterates over bucket `index`'s chain. The caller holds the writer lock or a guard as
    /// for [`BucketTable::find`].
    pub(crate) fn chain(&self, index: usize) -> Chain<'_> {
        Chain {
            next: &self.buckets.as_slice()[index],
            _table: PhantomData,
        }
    }

    /// A validated copy of what the slot of the key with words `q` holds in this table, if
    /// any (the lock-free reader walk).
    ///
    /// # Safety
    /// The caller holds the writer lock or a guard of the default collector pinned before it
    /// loaded the pointer to this table, so the table and its overflow lines stay allocated.
    ///
    /// With `ONCE`, only the first line is read, by one attempt ([`Line::find_once`]): the
    /// walk ends in [`Probe::Chain`] when the key may be in an overflow line (the caller walks
    /// on with [`find_overflow`](Self::find_overflow), out of line), in [`Probe::Retry`] when
    /// the read did not decide or the chain is migrating, never in `Moved`; without, every
    /// line is read until a copy validates ([`Line::find`]) and the walk never ends in
    /// `Retry` or `Chain`.
    #[inline(always)]
    pub(crate) unsafe fn find<const ONCE: bool>(&self, q: &KeyWords) -> Probe<V> {
        let h = self.hash_of(q);
        let index = self.bucket_of_hash(h);
        // SAFETY: `index` is the high word of a product of a 64-bit number and `lines`, so
        // below `lines`, the length of `tags`.
        let tag = unsafe { self.tags.get_unchecked(index) }.load(Ordering::Acquire);
        if tag & Self::tag_bit(h) == 0 {
            // The key's bit is clear: not in this bucket's chain, and the chain is not
            // migrating (that sets every bit). The line is not read.
            return Probe::Absent;
        }
        // SAFETY: as above, `index` is below `lines`, the length of `buckets`.
        let mut line = unsafe { self.buckets.get_unchecked(index) };
        if ONCE {
            // The bucket's first line inline, and no loop: the hit and the common miss are
            // straight-line code with no taken branch of their own, whose speed does not
            // depend on where the caller's loop lands in memory (branch addrplace, benchmark
            // notes). Overflow lines are walked out of line; a migrating bucket, a list or a
            // torn read go to the caller's retrying walk.
            return match line.find_once::<K, V>(q) {
                Some(Ok(found)) => Probe::Hit(found),
                Some(Err(m)) if !m.continues() => Probe::Absent,
                Some(Err(m)) if m.0 & MOVED == 0 => Probe::Chain(ptr::from_ref(line)),
                _ => Probe::Retry,
            };
        }
        loop {
            let read = line.find::<K, V>(q, self.lists());
            let m = match read {
                Ok(found) => return Probe::Hit(found),
                // The common miss: neither an overflow line nor a rehash, one test.
                Err(m) if !m.continues() => return Probe::Absent,
                Err(m) => m,
            };
            if m.0 & CHAIN != 0 {
                let next = line.overflow.load(Ordering::Acquire);
                if !next.is_null() {
                    // SAFETY: an overflow line linked from this chain; retired only after
                    // being unlinked, through the collector the caller's guard pins.
                    line = unsafe { &*next };
                    continue;
                }
            }
            // The end of the chain; `MOVED` is set on every line of a migrating chain.
            return if m.0 & MOVED != 0 {
                Probe::Moved
            } else {
                Probe::Absent
            };
        }
    }

    /// [`find`](Self::find) with `ONCE` past a chain's first line, `line`, whose validated
    /// header had `CHAIN` set and `MOVED` clear ([`Probe::Chain`]): `key`'s slot in the
    /// overflow lines (`Some` of it, or `Some(None)` when it has none), one attempt each, or
    /// `None` when an attempt did not decide or the chain turned out to be migrating (the
    /// caller then retries). Called from the reader's out-of-line path, so that the inlined
    /// hot path has no loop and no call of its own.
    ///
    /// # Safety
    /// As for [`find`](Self::find), and `line` is a line of this table.
    #[inline]
    pub(crate) unsafe fn find_overflow(mut line: &Line, key: K) -> Option<Option<Found<V>>> {
        let q = key_words(&key);
        loop {
            let next = line.overflow.load(Ordering::Acquire);
            if next.is_null() {
                // The end of a chain that is not migrating (`MOVED` was clear).
                return Some(None);
            }
            // SAFETY: an overflow line linked from this chain; retired only after being
            // unlinked, through the collector the caller's guard pins.
            line = unsafe { &*next };
            match line.find_once::<K, V>(&q)? {
                Ok(found) => return Some(Some(found)),
                Err(m) if !m.continues() => return Some(None),
                Err(m) if m.0 & MOVED == 0 => {}
                Err(_) => return None,
            }
        }
    }

    /// Where `key` sits in bucket `index`'s chain. Caller holds the writer lock.
    pub(crate) fn position(&self, index: usize, key: &K) -> Option<Position<'_, K, V>> {
        let q = key_words(key);
        let mut prev = None;
        for line in self.chain(index) {
            let m = Meta(line.meta.load(Ordering::Relaxed));
            let hits = line.matches::<K, V>(&q) & m.occupied_mask();
            if hits != 0 {
                let slot = hits.trailing_zeros() as usize;
                return Some(Position {
                    table: self,
                    index,
                    prev,
                    line,
                    slot,
                    key: *key,
                    payload: line.payload::<K, V>(m, slot, self.lists()),
                });
            }
            prev = Some(line);
        }
        None
    }

    /// Publishes `key` with `payload` in the first free slot of bucket `index`'s chain from
    /// `from` on (a new overflow line at its end when there is none), its tag bit set first.
    /// Returns the keys in the lines it walked, the new one included. Caller holds the writer
    /// lock; `key` is in no slot of those lines (or only in the one the caller clears next).
    pub(crate) fn publish_from(
        &self,
        index: usize,
        from: &Line,
        key: K,
        payload: Payload<V>,
    ) -> usize {
        let dups = matches!(payload, Payload::Dups(_));
        // The key's bit before the key, wherever in the chain it lands.
        self.tag_add(index, Self::tag_bit(self.hash_of(&key_words(&key))));
        let mut keys = 0;
        let mut line = from;
        loop {
            let m = Meta(line.meta.load(Ordering::Relaxed));
            keys += m.keys();
            if let Some(i) = m.first_free(Geometry::<K, V>::SLOTS) {
                line.write_slot::<K, V>(i, key, payload);
                line.meta.store(m.with(i, dups).0, Ordering::Release);
                // Count the rest of the chain too (the elasticity check needs all of it).
                let mut rest = line.overflow.load(Ordering::Relaxed);
                while !rest.is_null() {
                    // SAFETY: under the writer lock, lines of a live chain are allocated.
                    let r = unsafe { &*rest };
                    keys += Meta(r.meta.load(Ordering::Relaxed)).keys();
                    rest = r.overflow.load(Ordering::Relaxed);
                }
                return keys + 1;
            }
            let next = line.overflow.load(Ordering::Relaxed);
            if next.is_null() {
                let fresh = Box::new(Line::empty());
                fresh.write_slot::<K, V>(0, key, payload);
                // A line of a migrating chain is marked like the others.
                let moved = m.0 & MOVED != 0;
                let fresh_meta = Meta(0).with(0, dups).flag(MOVED, moved);
                fresh.meta.store(fresh_meta.0, Ordering::Relaxed);
                // Readers that see the link see the filled line (release), and readers that
                // see `CHAIN` see the link.
                line.overflow.store(Box::into_raw(fresh), Ordering::Release);
                line.meta.store(m.flag(CHAIN, true).0, Ordering::Release);
                return keys + 1;
            }
            // SAFETY: as above.
            line = unsafe { &*next };
        }
    }

    /// Publishes a key that is in no slot of this table in its bucket's chain; returns the keys
    /// in the chain, the new one included. Caller holds the writer lock.
    pub(crate) fn publish(&self, key: K, payload: Payload<V>) -> usize {
        let index = self.hash(&key);
        self.publish_from(index, &self.buckets.as_slice()[index], key, payload)
    }

    /// Clears the slot of `pos` (one `meta` store) and unlinks its line when it is an overflow
    /// line left empty (freed after a grace period). Does not retire the payload.
    ///
    /// # Safety
    /// The caller holds the writer lock, `pos` was found under it and nothing changed since,
    /// and `guard` is pinned.
    pub(crate) unsafe fn unpublish(pos: &Position<'_, K, V>, guard: &crossbeam_epoch::Guard) {
        let line = pos.line;
        let m = Meta(line.meta.load(Ordering::Relaxed)).without(pos.slot);
        line.meta.store(m.0, Ordering::Release);
        if let (0, Some(prev)) = (m.keys(), pos.prev) {
            // Readers standing on the line still follow its (unchanged) overflow link.
            let next = line.overflow.load(Ordering::Relaxed);
            prev.overflow.store(next, Ordering::Release);
            if next.is_null() {
                // The chain ends at `prev` now (a reader that still saw `CHAIN` finds a null
                // link and stops there too).
                let pm = Meta(prev.meta.load(Ordering::Relaxed));
                prev.meta.store(pm.flag(CHAIN, false).0, Ordering::Release);
            }
            // SAFETY: the line came from `Box::into_raw` in `publish_from` and is now
            // unreachable from the table; readers on it were pinned before this point.
            unsafe { guard.defer_destroy(crossbeam_epoch::Shared::from(line as *const Line)) };
        }
        // The key is gone (and maybe the chain's end): its bit may go, after it.
        pos.table.tag_refresh(pos.index);
    }

    /// Replaces the payload of `pos`'s slot: in a free slot of the same line with one `meta`
    /// store that sets it and clears the old one, else further down the chain before the old
    /// slot is cleared (a key only moves forwards). Does not retire the old payload. Returns
    /// whether the key left its line (it then stays further down until the next rehash).
    ///
    /// # Safety
    /// As for [`BucketTable::unpublish`].
    pub(crate) unsafe fn rewrite(
        &self,
        pos: &Position<'_, K, V>,
        payload: Payload<V>,
        guard: &crossbeam_epoch::Guard,
    ) -> bool {
        let line = pos.line;
        let m = Meta(line.meta.load(Ordering::Relaxed));
        if let Some(i) = m.first_free(Geometry::<K, V>::SLOTS) {
            line.write_slot::<K, V>(i, pos.key, payload);
            let dups = matches!(payload, Payload::Dups(_));
            line.meta
                .store(m.moved(pos.slot, i, dups).0, Ordering::Release);
            return false;
        }
        // The line is full: the first free slot from here on is further down the chain.
        self.publish_from(pos.index, line, pos.key, payload);
        // SAFETY: forwarded from the caller; `publish_from` did not touch this line's `meta`.
        unsafe { Self::unpublish(pos, guard) };
        true
    }

    /// Moves every key of bucket `index` into `new`, as the kernel's `rhashtable_rehash_chain`
    /// does: each is published in the new table before its slot here is cleared, so a reader
    /// searching old then new finds it in one or the other. The chain's overflow lines stay
    /// (empty) until this table is freed. Caller holds the writer lock; `new` is this table's
    /// future table.
    pub(crate) fn migrate_bucket(&self, new: &BucketTable<K, V>, index: usize) {
        // First mark every line of the chain `MOVED`: a reader that misses in any of them
        // from now on also searches `new` (which is set before any bucket migrates). Before
        // that, the whole tag, so that no reader stops at it any more.
        self.tag_add(index, TAG_ALL);
        for line in self.chain(index) {
            let m = Meta(line.meta.load(Ordering::Relaxed));
            if m.0 & MOVED == 0 {
                line.meta.store(m.flag(MOVED, true).0, Ordering::Release);
            }
        }
        for line in self.chain(index) {
            let mut m = Meta(line.meta.load(Ordering::Relaxed));
            for slot in 0..Geometry::<K, V>::SLOTS {
                if !m.occupied(slot) {
                    continue;
                }
                let key = line.key::<K, V>(slot);
                // Every key lives in exactly one live table, and `new` only receives keys
                // migrated from here or inserted after they were: `key` is not in `new`.
                new.publish(key, line.payload::<K, V>(m, slot, self.lists()));
                m = m.without(slot);
                line.meta.store(m.0, Ordering::Release);
            }
        }
    }

    /// Calls `f` on every slot of the table. Caller holds the writer lock.
    pub(crate) fn for_each_slot(&self, mut f: impl FnMut(K, Payload<V>)) {
        for index in 0..self.lines() {
            for line in self.chain(index) {
                let m = Meta(line.meta.load(Ordering::Relaxed));
                for slot in 0..Geometry::<K, V>::SLOTS {
                    if m.occupied(slot) {
                        f(
                            line.key::<K, V>(slot),
                            line.payload::<K, V>(m, slot, self.lists()),
                        );
                    }
                }
            }
        }
    }
}

impl<K, V> BucketTable<K, V> {
    /// The map's duplicate lists by index.
    #[inline(always)]
    pub(crate) fn lists(&self) -> &ListSlab<V> {
        // SAFETY: the map that allocated this table owns the slab (boxed, never moved) and
        // frees it only after every table of it (`alloc`'s contract).
        unsafe { self.lists.as_ref() }
    }
}

/// The lines of one bucket chain, first line first.
pub(crate) struct Chain<'a> {
    next: *const Line,
    _table: PhantomData<&'a Line>,
}

impl<'a> Iterator for Chain<'a> {
    type Item = &'a Line;

    #[inline]
    fn next(&mut self) -> Option<&'a Line> {
        if self.next.is_null() {
            return None;
        }
        // SAFETY: `next` is the chain's first line (in the table's array) or an overflow line
        // loaded from the previous one; overflow lines are retired through the default
        // collector only after being unlinked, and the creator of the `Chain` holds the
        // writer lock or a guard pinned before it loaded the table.
        let b = unsafe { &*self.next };
        self.next = b.overflow.load(Ordering::Acquire);
        Some(b)
    }
}

impl<K, V> Drop for BucketTable<K, V> {
    /// Frees the overflow lines (not the duplicate lists: a retired table is empty, and the
    /// map's own drop frees those of the live tables first).
    fn drop(&mut self) {
        for b in self.buckets.as_slice() {
            let mut o = b.overflow.load(Ordering::Relaxed);
            while !o.is_null() {
                // SAFETY: overflow lines come from `Box::into_raw` in `publish_from` or
                // `rewrite`, each is linked from exactly one place, and a dropped table is
                // unreachable.
                let line = unsafe { Box::from_raw(o) };
                o = line.overflow.load(Ordering::Relaxed);
            }
        }
    }
}

/// Iterator over the values of one key, newest first (copies).
pub struct Dups<'g, V> {
    first: Option<V>,
    next: *const DupNode<V>,
    _guard: PhantomData<&'g DupNode<V>>,
}

impl<V: Copy> Dups<'_, V> {
    /// No values.
    pub(crate) fn empty() -> Self {
        Dups {
            first: None,
            next: ptr::null(),
            _guard: PhantomData,
        }
    }

    /// The values of a validated payload.
    ///
    /// # Safety
    /// A `Payload::Dups` pointer was loaded from a live table after the guard borrowed for
    /// `'g` was pinned.
    pub(crate) unsafe fn of(payload: Payload<V>) -> Self {
        match payload {
            Payload::Value(v) => Dups {
                first: Some(v),
                next: ptr::null(),
                _guard: PhantomData,
            },
            Payload::Dups(list) => Dups {
                first: None,
                // SAFETY: the list was reachable after the guard was pinned, so it is still
                // allocated (lists and nodes are retired through the default collector).
                next: unsafe { &*list }.head.load(Ordering::Acquire),
                _guard: PhantomData,
            },
        }
    }
}

impl<V: Copy> Iterator for Dups<'_, V> {
    type Item = V;

    #[inline]
    fn next(&mut self) -> Option<V> {
        if let Some(v) = self.first.take() {
            return Some(v);
        }
        if self.next.is_null() {
            return None;
        }
        // SAFETY: `next` is a node reachable from a list that was reachable after the guard
        // borrowed for `'g` was pinned, so it is still allocated; nodes are immutable but for
        // their link.
        let n = unsafe { &*self.next };
        self.next = n.next.load(Ordering::Acquire);
        Some(n.value)
    }
}

impl<V> std::fmt::Debug for Dups<'_, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dups").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_of_the_tables_in_use() {
        assert_eq!(std::mem::size_of::<Line>(), 64);
        assert_eq!(std::mem::align_of::<Line>(), 64);
        // Everything a lookup reads of a table in one cache line (the list slab's address,
        // read only for duplicate lists, in the second).
        assert_eq!(std::mem::size_of::<BucketTable<u32, u32>>(), 128);
        assert!(std::mem::offset_of!(BucketTable<u32, u32>, future) < 64);
        assert_eq!(std::mem::offset_of!(BucketTable<u32, u32>, lists), 64);
        // u32 keys with a one-word value (or none; a list is a one-word index): 6 slots of
        // 8 bytes, 6 units of size a line.
        assert_eq!(Geometry::<u32, u32>::SLOTS, 6);
        assert_eq!(Geometry::<u32, u32>::SIZE_PER_LINE, 6);
        assert_eq!(Geometry::<u32, u32>::ELASTICITY, 24);
        assert_eq!(Geometry::<u32, ()>::SLOTS, 6);
        // u32 keys with a two-word value: 4 slots.
        assert_eq!(Geometry::<u32, u64>::SLOTS, 4);
        assert_eq!(Geometry::<u32, u64>::SIZE_PER_LINE, 4);
        assert_eq!(Geometry::<u32, u64>::ELASTICITY, 16);
        // u128 keys: 2 slots.
        assert_eq!(Geometry::<u128, u64>::SLOTS, 2);
        assert_eq!(Geometry::<u128, u32>::SLOTS, 2);
        assert_eq!(Geometry::<u128, u64>::SIZE_PER_LINE, 2);
        assert_eq!(Geometry::<u128, u64>::ELASTICITY, 16);
        assert_eq!(Geometry::<u64, u64>::SLOTS, 3);
        assert_eq!(Geometry::<u64, u64>::SIZE_PER_LINE, 3);
        assert_eq!(Geometry::<(), ()>::SLOTS, 6);
        // Lines: a power of two, doubling with the size.
        assert_eq!(Geometry::<u32, u32>::lines_for(32), 8);
        assert_eq!(Geometry::<u32, u32>::lines_for(48), 8);
        assert_eq!(Geometry::<u32, u32>::lines_for(96), 16);
        assert_eq!(Geometry::<u32, u32>::lines_for(4), 1);
        assert_eq!(Geometry::<u32, u64>::lines_for(32), 8);
        assert_eq!(Geometry::<u64, u64>::lines_for(32), 16);
    }

    #[test]
    fn first_slot_within_agrees_with_first_slot() {
        fn check<K: Inline, V: Inline>() {
            for hits in 1..=Geometry::<K, V>::ALL_SLOTS {
                // SAFETY: `hits` is a non-empty subset of `ALL_SLOTS`.
                let i = unsafe { Geometry::<K, V>::first_slot_within(hits) };
                assert_eq!(i, Geometry::<K, V>::first_slot(hits));
                assert!(i < Geometry::<K, V>::SLOTS && hits & (1 << i) != 0);
            }
        }
        check::<u32, u32>();
        check::<u32, ()>();
        check::<u32, u64>();
        check::<u64, u64>();
        check::<u128, u64>();
        check::<(), ()>();
    }

    #[test]
    fn meta_bits_and_generations() {
        let m = Meta(0).with(2, true);
        assert!(m.occupied(2) && m.dups(2) && !m.occupied(1));
        assert_eq!(m.first_free(4), Some(0));
        let m = m.with(0, false).with(1, false).with(3, false);
        assert_eq!(m.first_free(4), None);
        assert_eq!(m.keys(), 4);
        let m2 = m.without(2);
        assert!(!m2.occupied(2) && !m2.dups(2));
        assert_eq!(m2.first_free(4), Some(2));
        assert_eq!(m2.0 >> 24, 5, "every change is a new generation");
        // The same bits after a slot is reused: the generation still differs.
        let m3 = m2.with(2, true);
        assert_eq!(m3.0 & 0xff_ffff, m.0 & 0xff_ffff);
        assert_ne!(m3, m);
    }

    #[test]
    fn meta_gap_stays_clear() {
        // Every way a writer makes a header keeps bits 6..16 clear, so that a reader's hit
        // mask (`inline_hits`: the compares' 16-bit mask and the header's low word, one
        // `and`) only ever names slots of the line that hold their value inline: what the
        // reader's `first_slot_within` relies on. Random writes on 6-slot and 4-slot lines.
        for slots in [6usize, 4] {
            let mut m = Meta(0);
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            // (Fewer under Miri, which runs this for its own sake: plain arithmetic.)
            for _ in 0..if cfg!(miri) { 300 } else { 20_000 } {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let (i, j, dups) = (
                    (x % slots as u64) as usize,
                    ((x >> 8) % slots as u64) as usize,
                    x & 1 << 20 != 0,
                );
                m = match (x >> 16) % 6 {
                    0 | 1 => m.with(i, dups),
                    2 => m.moved(i, j, dups),
                    3 => m.without(i),
                    4 => m.flag(CHAIN, x & 1 << 21 != 0),
                    _ => m.flag(MOVED, x & 1 << 22 != 0),
                };
                assert_eq!(m.0 & CLEAR_BITS, 0, "{m:?}");
                assert_eq!(m.inline_mask() >> slots, 0, "{m:?}");
                for matches in [0xffffu32, 0xff3f, (x >> 32) as u32 & 0xffff, 0x0101 << i] {
                    let hits = m.inline_hits(matches);
                    assert_eq!(hits & !m.inline_mask(), 0, "{m:?} {matches:x}");
                    assert_eq!(hits, matches & m.inline_mask(), "{m:?} {matches:x}");
                }
            }
        }
        // The generation (bits 24..64) wraps into nothing else.
        let m = Meta(!0 << 24 | 1).with(1, false);
        assert_eq!(m.0 & 0xff_ffff, 0b11);
    }

    #[cfg(all(target_arch = "x86_64", target_feature = "sse4.2", not(miri)))]
    #[test]
    fn crc_multiply_is_crc32c_times_k1() {
        // The reference: CRC32C (Castagnoli, reflected 0x82f63b78) of the key's four bytes
        // from the initial value `k0 as u32`, with no final XOR (the `crc32` instruction's
        // definition), bit by bit.
        fn crc32c(mut crc: u32, x: u32) -> u32 {
            for byte in x.to_le_bytes() {
                crc ^= u32::from(byte);
                for _ in 0..8 {
                    crc = if crc & 1 != 0 {
                        crc >> 1 ^ 0x82f6_3b78
                    } else {
                        crc >> 1
                    };
                }
            }
            crc
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..10_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let (k0, k1, key) = (x, x.rotate_left(17) | 1, if i < 100 { i } else { x as u32 });
            let want = u64::from(crc32c(k0 as u32, key)).wrapping_mul(k1);
            assert_eq!(crc_multiply(k0, k1, key), want, "{k0:x} {key:x}");
        }
        // Distinct keys, distinct CRCs (a 32-bit CRC of 32 bits is a bijection): all of a
        // stretch of consecutive keys and of keys that differ in their top bits only.
        let mut seen = std::collections::HashSet::new();
        for key in (0..1u32 << 16).chain((1..1u32 << 12).map(|k| k << 20)) {
            assert!(seen.insert(crc32c(0x1234_5678, key)), "{key:x}");
        }
        // A one-word key's table hash is this one.
        let lists = ListSlab::<u32>::new();
        let t = BucketTable::<u32, u32>::alloc(64, 7, ptr::NonNull::from(&lists));
        // SAFETY: from `alloc`, freed once at the end of the scope.
        let table = unsafe { Box::from_raw(t) };
        let [k0, k1, _] = table.keys;
        assert_eq!(table.hash_of(&key_words(&9u32)), crc_multiply(k0, k1, 9));
    }

    #[test]
    fn matches_fit_16_bits() {
        // `inline_hits` ands the compares' mask with the header's whole low half: the mask
        // must have no bit from 16 on (every geometry), whatever the line holds.
        let line = Line::empty();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for round in 0..if cfg!(miri) { 30 } else { 2_000u32 } {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = if round % 3 == 0 { 5 } else { x as u32 };
            let words: Vec<u32> = (0..LINE_WORDS as u64)
                .map(|w| {
                    if (x >> w) & 3 == 0 {
                        key
                    } else {
                        (x >> (w + 8)) as u32
                    }
                })
                .collect();
            line.store_words(0, &words);
            let q = key_words(&key);
            assert!(line.matches::<u32, u32>(&q) <= 0xffff);
            assert!(line.matches::<u32, u64>(&q) <= 0xf);
            assert!(line.matches::<u64, u64>(&key_words(&u64::from(key))) <= 0x7);
            assert!(line.matches::<u128, u32>(&key_words(&u128::from(key))) <= 0x3);
        }
    }

    #[test]
    fn one_read_decides_an_inline_hit_and_a_miss_in_a_line_without_a_list() {
        let line = Line::empty();
        line.write_slot::<u32, u32>(0, 7, Payload::Value(70));
        line.meta.store(Meta(0).with(0, false).0, Ordering::Release);
        let once = |k: u32| line.find_once::<u32, u32>(&key_words(&k));
        assert!(matches!(once(7), Some(Ok(f)) if f.value == 70 && f.list.is_null()));
        assert!(matches!(once(8), Some(Err(m)) if !m.continues()));
        // A list in slot 1: an inline hit is still decided; the list's key and a miss are
        // left to the retrying read, which tells the list from a value.
        let lists = ListSlab::<u32>::new();
        let mut slab = crate::lists::SlabState::default();
        let index = lists.reserve(&mut slab);
        let list = DupList::alloc(index, 91, 90);
        lists.set(index, list);
        line.write_slot::<u32, u32>(1, 9, Payload::Dups(list));
        let m = Meta(line.meta.load(Ordering::Relaxed));
        line.meta.store(m.with(1, true).0, Ordering::Release);
        assert!(matches!(once(7), Some(Ok(f)) if f.value == 70 && f.list.is_null()));
        assert!(once(9).is_none() && once(8).is_none());
        let m = Meta(line.meta.load(Ordering::Relaxed));
        assert!(m.occupied(0) && m.occupied(1) && !m.occupied(2));
        assert_eq!(
            (m.occupied_mask(), m.inline_mask(), m.keys()),
            (0b11, 0b01, 2)
        );
        let full = |k: u32| line.find::<u32, u32>(&key_words(&k), &lists);
        assert!(matches!(full(7), Ok(f) if f.value == 70 && f.list.is_null()));
        assert!(matches!(full(9), Ok(f) if std::ptr::eq(f.list, list)));
        // The slot holds the list's index, one word.
        assert!(
            matches!(line.payload::<u32, u32>(m, 1, &lists), Payload::Dups(p) if std::ptr::eq(p, list))
        );
        assert_eq!(
            line.pairs[Geometry::<u32, u32>::payload_at(1) / 2].load(Ordering::Relaxed) >> 32,
            u64::from(index)
        );
        // SAFETY: allocated above, reachable from this test's line only, freed once.
        unsafe { DupList::free(list) };
    }

    #[test]
    fn a_reader_sees_a_slot_replaced_in_place_as_a_new_generation() {
        let line = Line::empty();
        line.write_slot::<u32, u32>(0, 7, Payload::Value(70));
        line.meta.store(Meta(0).with(0, false).0, Ordering::Release);
        let lists = ListSlab::<u32>::new();
        let value = |line: &Line, k: u32| {
            line.find::<u32, u32>(&key_words(&k), &lists)
                .ok()
                .map(|f| (f.value, f.list.is_null()))
        };
        assert_eq!(value(&line, 7), Some((70, true)));
        // Rewritten into slot 1 with one store: the key never disappears.
        line.write_slot::<u32, u32>(1, 7, Payload::Value(71));
        let m = Meta(line.meta.load(Ordering::Relaxed));
        line.meta.store(m.moved(0, 1, false).0, Ordering::Release);
        assert_eq!(value(&line, 7), Some((71, true)));
        assert_eq!(value(&line, 8), None);
        // A stale key in a free slot never answers.
        let m = Meta(line.meta.load(Ordering::Relaxed));
        line.meta.store(m.without(1).0, Ordering::Release);
        assert_eq!(value(&line, 7), None);
    }

    #[test]
    fn lanes_equal_agrees_with_the_scalar_compare() {
        // Edge lanes (zero, top bit, all ones, one bit off the key) and pseudo-random ones;
        // small enough for Miri, which runs the SSE2 path on x86-64.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..200 {
            let key = match round % 4 {
                0 => 0,
                1 => 0x8000_0000,
                2 => u32::MAX,
                _ => next() as u32,
            };
            let lanes: [u32; 4] = std::array::from_fn(|_| {
                let pick = next();
                match pick % 5 {
                    0 => key,
                    1 => key ^ 1,
                    2 => key ^ 0x8000_0000,
                    3 => key.wrapping_sub(1),
                    _ => (pick >> 32) as u32,
                }
            });
            let lo = u64::from(lanes[0]) | (u64::from(lanes[1]) << 32);
            let hi = u64::from(lanes[2]) | (u64::from(lanes[3]) << 32);
            let want = (0..4).fold(0, |m, i| m | (u32::from(lanes[i] == key) << i));
            assert_eq!(lanes_equal(lo, hi, key), want, "{lanes:x?} {key:x}");
            assert_eq!(lanes_equal_scalar(lo, hi, key), want, "{lanes:x?} {key:x}");
        }
    }

    #[test]
    fn keys_equal_agrees_with_relaxed_loads() {
        // The 16-byte loads of a line's four or six keys (natively; Miri runs the fallback)
        // against the relaxed loads and the scalar compare, keys in every lane (lanes 6 and 7
        // are the first value words of a 6-slot line: compared, then masked by the caller).
        let line = Line::empty();
        let keys = [0u32, 1, 0x8000_0000, u32::MAX, 7, 7, 9];
        for (round, &key) in keys.iter().enumerate() {
            for lane in 0..8 {
                line.store_words(lane, &[keys[(round + lane) % keys.len()]]);
            }
            let pair = |j: usize| line.pairs[j].load(Ordering::Relaxed);
            let four = lanes_equal_scalar(pair(0), pair(1), key);
            // The eight lanes' bits twice (bits 0..8 and 8..16).
            let eight = (four | lanes_equal_scalar(pair(2), pair(3), key) << 4) * 0x101;
            assert_eq!(keys_equal::<false>(&line, key), four, "{key:x}");
            assert_eq!(
                keys_equal_by_pairs::<false>(&line.pairs, key),
                four,
                "{key:x}"
            );
            assert_eq!(keys_equal::<true>(&line, key), eight, "{key:x}");
            assert_eq!(
                keys_equal_by_pairs::<true>(&line.pairs, key),
                eight,
                "{key:x}"
            );
            assert_eq!(line.matches::<u32, u64>(&key_words(&key)), four, "{key:x}");
            // Six slots of u32 -> u32; a matching value word in lane 6 or 7 is no slot.
            assert_eq!(
                line.matches::<u32, u32>(&key_words(&key)) & Geometry::<u32, u32>::ALL_SLOTS,
                eight & 0b11_1111,
                "{key:x}"
            );
        }
    }

    #[test]
    fn one_word_loads_agree_with_copy_words() {
        let line = Line::empty();
        let words: Vec<u32> = (0..LINE_WORDS as u32)
            .map(|i| 0x8000_0001u32.wrapping_mul(i + 1) ^ (i << 16))
            .collect();
        line.store_words(0, &words);
        for (at, &want) in words.iter().enumerate() {
            let mut w = [0];
            line.copy_words(at, &mut w);
            assert_eq!((line.word(at), w[0]), (want, want), "word {at}");
        }
        for i in 0..Geometry::<u32, u32>::SLOTS {
            let want = words[Geometry::<u32, u32>::payload_at(i)];
            assert_eq!(line.value_word::<u32, u32>(i), want, "slot {i}");
        }
        for i in 0..Geometry::<u128, u32>::SLOTS {
            let want = words[Geometry::<u128, u32>::payload_at(i)];
            assert_eq!(line.value_word::<u128, u32>(i), want, "slot {i}");
        }
    }

    #[test]
    fn words_round_trip_through_pairs_at_odd_and_even_positions() {
        let line = Line::empty();
        // Words 3..8 straddle pairs 1..4 starting on a high half; word 2 and 8 stay as set.
        line.store_words(2, &[0xaaaa_aaaa]);
        line.store_words(8, &[0xbbbb_bbbb]);
        line.store_words(3, &[1, 2, 3, 4, 5]);
        let mut out = [0; 7];
        line.copy_words(2, &mut out);
        assert_eq!(out, [0xaaaa_aaaa, 1, 2, 3, 4, 5, 0xbbbb_bbbb]);
        let mut odd = [0; 2];
        line.copy_words(5, &mut odd);
        assert_eq!(odd, [3, 4]);
        // Keys side by side, values after them: u128 keys (2 slots) and u32 keys (4 slots).
        line.write_slot::<u128, u64>(1, u128::MAX - 7, Payload::Value(99));
        assert_eq!(line.key::<u128, u64>(1), u128::MAX - 7);
        let m = Meta(0).with(1, false);
        assert!(matches!(
            line.payload::<u128, u64>(m, 1, &ListSlab::new()),
            Payload::Value(99)
        ));
        assert_eq!(
            line.matches::<u128, u64>(&key_words(&(u128::MAX - 7))),
            0b10
        );
        let line = Line::empty();
        for (i, k) in [7u32, 8, 7, 9].into_iter().enumerate() {
            line.write_slot::<u32, u64>(i, k, Payload::Value(100 + i as u64));
        }
        assert_eq!(line.matches::<u32, u64>(&key_words(&7u32)), 0b0101);
        assert_eq!(line.key::<u32, u64>(3), 9);
        assert_eq!(Geometry::<u32, u64>::payload_at(3), 10);
        // u32 -> u32: six keys, then six one-word values.
        let line = Line::empty();
        for (i, k) in [7u32, 8, 7, 9, 10, 7].into_iter().enumerate() {
            line.write_slot::<u32, u32>(i, k, Payload::Value(100 + i as u32));
        }
        let m = (0..6).fold(Meta(0), |m, i| m.with(i, false));
        assert_eq!(
            line.matches::<u32, u32>(&key_words(&7u32)) & Geometry::<u32, u32>::ALL_SLOTS,
            0b10_0101
        );
        assert_eq!(line.key::<u32, u32>(4), 10);
        assert_eq!(Geometry::<u32, u32>::payload_at(5), 11);
        let lists = ListSlab::<u32>::new();
        for i in 0..6 {
            assert!(
                matches!(line.payload::<u32, u32>(m, i, &lists), Payload::Value(v) if v == 100 + i as u32)
            );
        }
    }

    #[test]
    fn index_stays_below_the_line_count_and_spreads_consecutive_keys() {
        let lists = ListSlab::<u32>::new();
        let lists6 = ListSlab::<u64>::new();
        for lines in [1usize, 2, 8, 512] {
            let t = BucketTable::<u32, u32>::alloc(lines, 42, ptr::NonNull::from(&lists));
            // SAFETY: from `alloc`, freed once below.
            let table = unsafe { Box::from_raw(t) };
            let mut per_line = vec![0usize; lines];
            for k in 0..(lines as u32 * 2) {
                let i = table.hash(&(0xc612_0000 + k));
                per_line[i] += 1;
            }
            let worst = per_line.iter().copied().max().unwrap();
            assert!(
                worst <= 8,
                "{lines} lines: a line got {worst} of 2 per line"
            );
            let t6 = BucketTable::<u128, u64>::alloc(lines, 42, ptr::NonNull::from(&lists6));
            // SAFETY: as above.
            let table6 = unsafe { Box::from_raw(t6) };
            assert!(table6.hash(&(0x2001_0db8 << 96)) < lines);
        }
    }
}
