//! Stack ids of srvprof's own, for stacks the kernel gave none (user stacks unwound in user
//! space, kernel stacks the samples carried), in ranges above the kernel's ids.

use std::collections::HashMap;

/// Stack ids given to user stacks unwound in user space start here, above the kernel's.
pub const UNWOUND_ID_BASE: i32 = 1 << 24;

/// Ids given to kernel stacks that samples carried start here, above the kernel's ids and the
/// user stacks unwound here (UNWOUND_ID_BASE).
pub const KERNEL_ID_BASE: i32 = 1 << 25;

/// Stack ids of srvprof's own, for stacks the kernel gave none: one per distinct stack, counted
/// up from a base above the kernel's ids.
#[derive(Debug)]
pub struct StackIds<K> {
    base: i32,
    ids: HashMap<K, i32>,
}

impl<K: std::hash::Hash + Eq + Clone> StackIds<K> {
    pub fn from(base: i32) -> Self {
        Self {
            base,
            ids: HashMap::new(),
        }
    }

    /// The stack's id, and whether it is new (its frames not stored under it yet). Only a new
    /// stack is copied.
    pub fn id<Q>(&mut self, stack: &Q) -> (i32, bool)
    where
        K: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if let Some(&id) = self.ids.get(stack) {
            return (id, false);
        }
        let id = self.base + self.ids.len() as i32;
        self.ids.insert(stack.to_owned(), id);
        (id, true)
    }

    /// Every stack given an id, by id.
    pub fn into_stacks(self) -> HashMap<i32, K> {
        self.ids
            .into_iter()
            .map(|(stack, id)| (id, stack))
            .collect()
    }
}
