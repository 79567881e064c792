//! What the balancer's store holds of one kind of object (backends by name,
//! certificates by host), as far as the client posted it, and what to post next.
//!
//! Backends and certificates follow the same steps: compare the wanted digests
//! with what was posted, leave out what the API refused while it is unchanged,
//! delete what is no longer wanted, then record the API's answer. One type does it
//! for both, so that a fix to one kind cannot miss the other.

use std::borrow::Borrow;
use std::collections::BTreeMap;

/// An object the API refused, as the client remembers it: not posted again while
/// its digest is the same (a full store's refusal: until something leaves it).
#[derive(Debug, Clone)]
pub(super) struct Refusal<V> {
    pub digest: V,
    pub message: String,
    /// Refused for want of room (507), not for what it holds.
    pub full: bool,
}

/// Digests `V` of the objects the store holds by key `K`, and the refused ones.
#[derive(Debug)]
pub(super) struct Mirror<K, V> {
    posted: BTreeMap<K, V>,
    refused: BTreeMap<K, Refusal<V>>,
    /// Whether replacing an object can make room for a refused one, as a certificate
    /// rotated to a smaller pair does (removing one always can).
    replacing_frees_room: bool,
}

/// What to post: the objects whose digest the store does not hold (in key order),
/// and the keys to delete.
pub(super) struct Delta<'w, K, Q: ?Sized, V> {
    pub changed: Vec<(&'w Q, V)>,
    pub removed: Vec<K>,
}

impl<K: Ord + Clone, V: Clone + Eq> Mirror<K, V> {
    pub fn new(replacing_frees_room: bool) -> Self {
        Self {
            posted: BTreeMap::new(),
            refused: BTreeMap::new(),
            replacing_frees_room,
        }
    }

    /// What differs between the store and `wanted` (key → digest). `stored`: the keys
    /// an adopted store holds, which this client never posted; those not wanted are
    /// deleted too.
    pub fn delta<'w, Q>(
        &mut self,
        wanted: &BTreeMap<&'w Q, V>,
        stored: Option<&[K]>,
    ) -> Delta<'w, K, Q, V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        // A refusal holds while the object is the same.
        self.refused
            .retain(|k, r| wanted.get(k.borrow()) == Some(&r.digest));
        let mut removed: Vec<K> = self
            .posted
            .keys()
            .filter(|k| !wanted.contains_key((*k).borrow()))
            .cloned()
            .collect();
        removed.extend(
            stored
                .into_iter()
                .flatten()
                .filter(|k| {
                    !wanted.contains_key((*k).borrow()) && !self.posted.contains_key::<K>(k)
                })
                .cloned(),
        );
        // What leaves the store makes room for what it refused as full (the API
        // removes before it stores).
        let replaced = self.replacing_frees_room
            && wanted
                .iter()
                .any(|(k, d)| self.posted.get(*k).is_some_and(|old| old != d));
        if !removed.is_empty() || replaced {
            self.refused.retain(|_, r| !r.full);
        }
        let changed = wanted
            .iter()
            .filter(|(k, d)| {
                self.posted.get(**k) != Some(*d)
                    && self.refused.get(**k).map(|r| &r.digest) != Some(*d)
            })
            .map(|(k, d)| (*k, d.clone()))
            .collect();
        Delta { changed, removed }
    }

    /// Records the API's answer to a posted `delta`: the removed keys are gone, and
    /// each changed object is held unless `refusal` gives why it was refused (the
    /// message, and whether for want of room). Returns how many objects the store
    /// changed (removed or held) and the refused keys with their messages.
    pub fn record<'w, Q>(
        &mut self,
        delta: Delta<'w, K, Q, V>,
        refusal: impl Fn(&Q) -> Option<(String, bool)>,
    ) -> (usize, Vec<(&'w Q, String)>)
    where
        K: Borrow<Q>,
        Q: Ord + ToOwned<Owned = K> + ?Sized,
    {
        let mut applied = delta.removed.len();
        for k in &delta.removed {
            self.posted.remove::<K>(k);
        }
        let mut rejected = Vec::new();
        for (k, digest) in delta.changed {
            match refusal(k) {
                Some((message, full)) => {
                    let r = Refusal {
                        digest,
                        message: message.clone(),
                        full,
                    };
                    self.refused.insert(k.to_owned(), r);
                    rejected.push((k, message));
                }
                None => {
                    applied += 1;
                    self.posted.insert(k.to_owned(), digest);
                }
            }
        }
        (applied, rejected)
    }

    /// The objects refused now.
    pub fn refused(&self) -> impl Iterator<Item = (&K, &Refusal<V>)> {
        self.refused.iter()
    }

    /// Forgets everything (the store is new); returns the keys it held.
    pub fn forget(&mut self) -> Vec<K> {
        self.refused.clear();
        std::mem::take(&mut self.posted).into_keys().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted<'a>(pairs: &[(&'a str, u8)]) -> BTreeMap<&'a str, u8> {
        pairs.iter().copied().collect()
    }

    #[test]
    fn posts_what_differs_and_holds_a_refusal_until_the_object_changes() {
        let mut m: Mirror<String, u8> = Mirror::new(false);
        let d = m.delta(&wanted(&[("a", 1), ("b", 1)]), Some(&["old".to_owned()]));
        assert_eq!(d.changed, [("a", 1), ("b", 1)]);
        assert_eq!(d.removed, ["old"]);
        let refused = |k: &str| (k == "b").then(|| ("bad".to_owned(), false));
        let (applied, rejected) = m.record(d, refused);
        assert_eq!((applied, rejected), (2, vec![("b", "bad".to_owned())]));
        // unchanged: nothing to post, b stays refused
        let d = m.delta(&wanted(&[("a", 1), ("b", 1)]), None);
        assert!(d.changed.is_empty() && d.removed.is_empty());
        assert_eq!(m.refused().count(), 1);
        // b changed: posted again; a gone: removed
        let d = m.delta(&wanted(&[("b", 2)]), None);
        assert_eq!(
            (d.changed, d.removed),
            (vec![("b", 2)], vec!["a".to_owned()])
        );
        assert_eq!(m.refused().count(), 0);
    }

    #[test]
    fn room_made_by_a_removal_or_a_replacement_retries_full_refusals() {
        for replacing_frees_room in [false, true] {
            let mut m: Mirror<String, u8> = Mirror::new(replacing_frees_room);
            let d = m.delta(&wanted(&[("a", 1), ("big", 1)]), None);
            let full = |k: &str| (k == "big").then(|| ("full".to_owned(), true));
            m.record(d, full);
            // a replaced: room only where replacing frees it
            let d = m.delta(&wanted(&[("a", 2), ("big", 1)]), None);
            let retried = d.changed.iter().any(|(k, _)| *k == "big");
            assert_eq!(retried, replacing_frees_room);
            m.record(d, full);
            // a removed: room either way
            let d = m.delta(&wanted(&[("big", 1)]), None);
            assert_eq!(
                (d.changed, d.removed),
                (vec![("big", 1)], vec!["a".to_owned()])
            );
        }
    }
}
