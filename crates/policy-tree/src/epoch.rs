//! The epoch discipline every published pointer of the database follows, in one place.
//!
//! Invariants (the writer keeps them; the `unsafe` blocks below rely on them):
//! 1. Every non-null pointer stored in one of the database's [`Atomic`]s points to a fully built
//!    object, stored with `Release` (or stronger) ordering after it was built.
//! 2. Published objects are never mutated except through their own `Atomic` fields.
//! 3. An object is freed only (a) through [`retire`] after it has been unlinked, so no reader
//!    that pins after the unlink can reach it, or (b) by the `Drop` of the object that owns it,
//!    which itself runs only after (a) or with exclusive access (`&mut`) to the database.
//! 4. Each pointer stored in an `Atomic` is owned by exactly that `Atomic` (one owner): a
//!    replaced pointer is retired once, never stored elsewhere.

use std::sync::atomic::Ordering;

use crossbeam_epoch::{Atomic, Guard, Owned, Shared};

/// The object an atomic points to, valid for as long as `guard` stays pinned.
#[inline]
pub(crate) fn load<'g, T>(atomic: &Atomic<T>, guard: &'g Guard) -> Option<&'g T> {
    let shared = atomic.load(Ordering::Acquire, guard);
    // SAFETY: by invariant 1 the pointer is null or points to a fully built object, made
    // visible by the Acquire load pairing with the Release store. By invariant 3 the object is
    // freed only after every guard pinned while it was reachable is dropped; `guard` is pinned
    // now and the object was reachable at the load, so it lives at least as long as `'g`. By
    // invariant 2 nobody mutates it meanwhile, so a shared reference is sound.
    unsafe { shared.as_ref() }
}

/// Publishes `new` in `atomic` (`None`: null) and retires the object it replaces.
///
/// Writers only: the caller must hold the database's writer lock, so that no other thread
/// retires the same old pointer (invariant 4).
pub(crate) fn publish<T>(atomic: &Atomic<T>, new: Option<T>, guard: &Guard) {
    let new = match new {
        Some(new) => Owned::new(new).into_shared(guard),
        None => Shared::null(),
    };
    let old = atomic.swap(new, Ordering::AcqRel, guard);
    if !old.is_null() {
        // SAFETY: the swap unlinked `old` from its only owner (invariant 4, kept by the writer
        // lock the caller holds), so from now on no newly pinned reader can reach it; readers
        // pinned earlier may still hold it, and `defer_destroy` waits for them.
        unsafe { guard.defer_destroy(old) };
    }
}

/// Takes the object out of an atomic that no reader can reach any more (an owner being
/// dropped), so that it is dropped with its owner.
pub(crate) fn take<T>(atomic: &mut Atomic<T>) -> Option<Owned<T>> {
    let atomic = std::mem::take(atomic);
    // SAFETY: the caller has exclusive access to the owner of `atomic` (it is being dropped),
    // which by invariant 3 happens only once no reader can reach it; by invariant 4 nobody
    // else owns the pointer, so taking ownership frees it exactly once.
    unsafe { atomic.try_into_owned() }
}
