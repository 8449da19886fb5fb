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

/// Stacks of addresses as a tree grown from the outermost frame: a stack's id is its innermost
/// node's, and stacks that share their outer frames share nodes. A new stack costs only the
/// frames it does not share (often one, a leaf address not seen before), where a list per
/// stack cost them all: over an hour new leaf addresses keep coming.
#[derive(Debug)]
pub struct FrameTree {
    base: i32,
    /// How many nodes fit in the tree's id range.
    capacity: usize,
    /// Each node's parent (ROOT for an outermost frame) and address.
    nodes: Vec<(u32, u64)>,
    children: HashMap<(u32, u64), u32>,
}

const ROOT: u32 = u32::MAX;

impl FrameTree {
    /// A tree whose ids are `base..base + capacity`.
    pub fn new(base: i32, capacity: usize) -> Self {
        Self {
            base,
            capacity,
            nodes: Vec::new(),
            children: HashMap::new(),
        }
    }

    /// The id of a stack, leaf first, under `tag` (kept as one more, outermost, address);
    /// None once the tree's ids are all given.
    pub fn id(&mut self, tag: u64, leaf_first: &[u64]) -> Option<i32> {
        let mut node = ROOT;
        for &addr in std::iter::once(&tag).chain(leaf_first.iter().rev()) {
            node = match self.children.get(&(node, addr)) {
                Some(&child) => child,
                None if self.nodes.len() < self.capacity => {
                    let child = self.nodes.len() as u32;
                    self.nodes.push((node, addr));
                    self.children.insert((node, addr), child);
                    child
                }
                None => return None,
            };
        }
        Some(self.base + node as i32)
    }

    /// The stack an id stands for: its tag and its addresses, leaf first.
    pub fn stack(&self, id: i32) -> Option<(u64, Vec<u64>)> {
        let mut node = u32::try_from(id.checked_sub(self.base)?).ok()?;
        let mut frames = Vec::new();
        loop {
            let &(parent, addr) = self.nodes.get(node as usize)?;
            if parent == ROOT {
                return Some((addr, frames));
            }
            frames.push(addr);
            node = parent;
        }
    }

    /// How many nodes the tree holds.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacks_come_back_whole_and_share_their_outer_frames() {
        let mut tree = FrameTree::new(UNWOUND_ID_BASE, 100);
        // Leaf first: main (0x10) calls serve (0x20), which runs at 0x31 or 0x32.
        let a = tree.id(0, &[0x31, 0x20, 0x10]).unwrap();
        assert_eq!(tree.len(), 4);
        let b = tree.id(0, &[0x32, 0x20, 0x10]).unwrap();
        assert_eq!(tree.len(), 5, "a new leaf costs one node");
        assert_eq!(tree.id(0, &[0x31, 0x20, 0x10]), Some(a));
        let outer = tree.id(0, &[0x20, 0x10]).unwrap();
        let other_end = tree.id(1, &[0x31, 0x20, 0x10]).unwrap();
        assert_eq!(tree.len(), 9);
        let ids = [a, b, outer, other_end];
        assert_eq!(
            ids.iter().collect::<std::collections::HashSet<_>>().len(),
            4
        );
        assert_eq!(tree.stack(a), Some((0, vec![0x31, 0x20, 0x10])));
        assert_eq!(tree.stack(b), Some((0, vec![0x32, 0x20, 0x10])));
        assert_eq!(tree.stack(outer), Some((0, vec![0x20, 0x10])));
        assert_eq!(tree.stack(other_end), Some((1, vec![0x31, 0x20, 0x10])));
        assert_eq!(tree.stack(UNWOUND_ID_BASE - 1), None);
        assert_eq!(tree.stack(UNWOUND_ID_BASE + 9), None);
    }

    #[test]
    fn a_full_tree_gives_no_id_and_keeps_what_it_has() {
        let mut tree = FrameTree::new(KERNEL_ID_BASE, 3);
        let a = tree.id(0, &[2, 1]).unwrap();
        assert_eq!(tree.id(0, &[3, 1]), None);
        assert_eq!(tree.id(0, &[2, 1]), Some(a));
        assert_eq!(tree.stack(a), Some((0, vec![2, 1])));
    }
}
