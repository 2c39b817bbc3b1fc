//! What a generation of a split snapshot of the tree form carries over
//! unchanged from an earlier one that was verified whole: the arrays whose
//! chunks all lie in parts that are the same bytes at the same places,
//! under `arr` lines with the same name, dtype, shape and digest. Their
//! text is the text that was verified, so a check of the new generation
//! needs only its head and the other parts ([`super::Joined::leaving_out`],
//! [`Carried`]).
//!
//! Why it is sound: a part left out is byte for byte a part of the
//! generation verified (the caller compares the blobs; Git stores one
//! object per id), its `part` line is the same (so its size, lines and
//! frame hash were checked), and the arrays the head lists under it are
//! the same ones in the same order (so its `begin` lines match). Every
//! array with a chunk in such a part is carried, with the digest its
//! chunks were proven to give: the tree form's root covers the `arr`
//! lines, each array's digest covers its chunks, and the recorded
//! `fastxor` share stands in for its bytes. Whatever else changed (a salt,
//! a tag, `gen`, the signature, any other array or part) is read and
//! checked as in a full verify.

use super::head::Head;
use crate::crypto::digest::Hash;
use crate::format::syntax::ArrLine;
use crate::format::verify::Carried;

/// What to leave out of a check of a generation, and what stands in for it.
pub struct CarryPlan {
    /// The arrays carried, with their shares.
    pub carried: Carried,
    /// Per part (by position), whether it is left out: never opened.
    pub left_out: Vec<bool>,
}

impl CarryPlan {
    /// Parts left out.
    pub fn parts_left_out(&self) -> usize {
        self.left_out.iter().filter(|&&o| o).count()
    }
}

/// Each part's arrays, parsed; `None` where a line does not parse.
fn arrays_of(head: &Head) -> Option<Vec<Vec<ArrLine>>> {
    head.arrs.iter().map(|arrs| arrs.iter().map(|a| ArrLine::parse(a).ok()).collect()).collect()
}

/// What [`carry_plan`] asks of the parts and of the record of what was verified.
pub trait CarrySource {
    /// Whether part `i` (0-based) of both generations is the same blob.
    fn same_bytes(&self, i: usize) -> bool;
    /// Whether part `i` of the new generation begins inside an array (with
    /// a `cont` line), which the head does not tell.
    fn starts_inside(&self, i: usize) -> bool;
    /// An array's `fastxor` share by its digest, where one was recorded.
    fn share(&self, sha256: &Hash) -> Option<u64>;
}

/// The plan for checking `new` against `old`, a generation verified whole;
/// `None` when nothing can be left out. A plan that is wrong about where an
/// array ends fails the check (the text breaks where a part was left out),
/// never passes it.
pub fn carry_plan(new: &Head, old: &Head, source: &dyn CarrySource) -> Option<CarryPlan> {
    let (new_arrs, old_arrs) = (arrays_of(new)?, arrays_of(old)?);
    let same_list = |a: &[ArrLine], b: &[ArrLine]| {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (&x.name, x.dtype, &x.shape) == (&y.name, y.dtype, &y.shape))
    };
    // A part is read unless it is the same bytes, bound the same way, with
    // the same arrays beginning in it.
    let n = new.parts.len();
    let mut read: Vec<bool> = (0..n)
        .map(|i| {
            let same = i < old.parts.len()
                && new.parts[i] == old.parts[i]
                && same_list(&new_arrs[i], &old_arrs[i])
                && source.same_bytes(i);
            !same
        })
        .collect();
    let old_by_name: std::collections::HashMap<&str, &ArrLine> =
        old_arrs.iter().flatten().map(|a| (a.name.as_str(), a)).collect();
    // Each array, the part it begins in, and the last part its chunks may
    // reach: the last array to begin in a part runs on through each next
    // part that begins inside an array, up to one where another begins (a
    // part's first lines tell, whoever wrote them: a part that says
    // otherwise than its text fails the check).
    let begins: Vec<(&ArrLine, usize)> =
        new_arrs.iter().enumerate().flat_map(|(i, arrs)| arrs.iter().map(move |a| (a, i))).collect();
    let mut carried: Vec<Option<u64>> = begins
        .iter()
        .map(|(a, _)| {
            let o = old_by_name.get(a.name.as_str())?;
            let same = (o.dtype, &o.shape, o.bytes, o.sha256) == (a.dtype, &a.shape, a.bytes, a.sha256);
            same.then(|| source.share(&a.sha256)).flatten()
        })
        .collect();
    // No array could be carried (every one changed: a full fine-tune): no
    // part is asked how it begins.
    if carried.iter().all(Option::is_none) {
        return None;
    }
    let starts_inside: Vec<bool> = (0..n).map(|i| source.starts_inside(i)).collect();
    let spans: Vec<(usize, usize)> = (0..begins.len())
        .map(|k| {
            let first = begins[k].1;
            let mut last = first;
            if begins.get(k + 1).is_none_or(|b| b.1 != first) {
                while last + 1 < n && starts_inside[last + 1] {
                    last += 1;
                    if !new_arrs[last].is_empty() {
                        break;
                    }
                }
            }
            (first, last)
        })
        .collect();
    // Every part an array that is read reaches is read whole, so every
    // array with a chunk there is read too: until nothing changes.
    loop {
        let mut changed = false;
        for (k, &(first, last)) in spans.iter().enumerate() {
            let touches_read = (first..=last).any(|i| read[i]);
            if carried[k].is_some() && touches_read {
                carried[k] = None;
            }
            if carried[k].is_none() {
                for r in &mut read[first..=last] {
                    changed |= !*r;
                    *r = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    let mut plan = CarryPlan { carried: Carried::default(), left_out: read.iter().map(|r| !r).collect() };
    for ((a, _), share) in begins.iter().zip(&carried) {
        if let Some(s) = share {
            plan.carried.insert(a.name.clone(), a.sha256, *s);
        }
    }
    (!plan.carried.is_empty()).then_some(plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::split::PartHash;

    fn arr(name: &str, sha: u8) -> Vec<u8> {
        format!(
            "arr name={name} dtype=f32 shape=4 order=C bytes=16 sha256={} hmac={} salt=0000000000000000",
            hex::encode([sha; 32]),
            "0".repeat(64)
        )
        .into_bytes()
    }

    /// A head of `parts`, each the arrays (name, digest byte) beginning in it.
    fn head(parts: &[&[(&str, u8)]]) -> Head {
        Head {
            prefix: Vec::new(),
            parts: (0..parts.len())
                .map(|i| super::super::head::PartLine {
                    ix: i as u64 + 1,
                    bytes: 100,
                    lines: 10,
                    hash: PartHash::Frame([i as u8; 32]),
                })
                .collect(),
            arrs: parts.iter().map(|p| p.iter().map(|(n, s)| arr(n, *s)).collect()).collect(),
            part_lines: (0..parts.len() as u64).map(|i| 5 + i).collect(),
            tail: b"endwtxt\n".to_vec(),
        }
    }

    struct Parts {
        differ: Vec<usize>,
        inside: Vec<usize>,
        share: Option<u64>,
    }

    impl CarrySource for Parts {
        fn same_bytes(&self, i: usize) -> bool {
            !self.differ.contains(&i)
        }
        fn starts_inside(&self, i: usize) -> bool {
            self.inside.contains(&i)
        }
        fn share(&self, _sha256: &Hash) -> Option<u64> {
            self.share
        }
    }

    #[test]
    fn only_arrays_wholly_in_unchanged_parts_are_carried() {
        let old = head(&[&[("a", 1), ("b", 2)], &[("c", 3)], &[], &[("d", 4)], &[("e", 5)]]);
        // `c` changed; it runs through part 2 into part 3, where `d` begins,
        // so `d` is read too; `b` ends in part 0 and `d` in part 3.
        let new = head(&[&[("a", 1), ("b", 2)], &[("c", 9)], &[], &[("d", 4)], &[("e", 5)]]);
        let parts = Parts { differ: vec![1], inside: vec![2, 3], share: Some(7) };
        let plan = carry_plan(&new, &old, &parts).unwrap();
        assert_eq!(plan.left_out, [true, false, false, false, true]);
        assert_eq!(plan.carried.len(), 3);
        // `b` runs on into the changed part 1 (whatever it begins with): read.
        let parts = Parts { differ: vec![1], inside: vec![1, 2, 3], share: Some(7) };
        let plan = carry_plan(&new, &old, &parts).unwrap();
        assert_eq!(plan.left_out, [false, false, false, false, true]);
        // No share recorded: nothing is carried.
        assert!(carry_plan(&new, &old, &Parts { differ: vec![1], inside: vec![], share: None }).is_none());
        // The same blob under another array list is read, with every array reaching it.
        let moved = head(&[&[("a", 1)], &[("b", 2), ("c", 9)], &[], &[("d", 4)], &[("e", 5)]]);
        let plan = carry_plan(&moved, &old, &Parts { differ: vec![], inside: vec![1], share: Some(7) }).unwrap();
        assert_eq!(plan.left_out, [false, false, true, true, true]);
    }
}
