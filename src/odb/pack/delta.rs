//! Git deltas found by comparing lines in place: a snapshot's next
//! generation keeps every chunk's lines where they were.

/// Git's delta-header number: seven bits a byte, low first.
fn varint(out: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        out.push(0x80 | (n & 0x7f) as u8);
        n >>= 7;
    }
    out.push(n as u8);
}

/// A copy of `len` bytes at `off` of the base, in pieces Git's 24-bit
/// lengths hold.
fn copy(out: &mut Vec<u8>, mut off: usize, mut len: usize) {
    while len > 0 {
        let n = len.min(0xff_ffff);
        let at = out.len();
        out.push(0x80);
        for i in 0..4 {
            let b = (off >> (8 * i)) as u8;
            if b != 0 {
                out[at] |= 1 << i;
                out.push(b);
            }
        }
        for i in 0..3 {
            let b = (n >> (8 * i)) as u8;
            if b != 0 {
                out[at] |= 0x10 << i;
                out.push(b);
            }
        }
        off += n;
        len -= n;
    }
}

/// Literal bytes, at most 127 an instruction.
fn insert(out: &mut Vec<u8>, bytes: &[u8]) {
    for piece in bytes.chunks(0x7f) {
        out.push(piece.len() as u8);
        out.extend_from_slice(piece);
    }
}

fn line_len(text: &[u8]) -> usize {
    memchr::memchr(b'\n', text).map_or(text.len(), |i| i + 1)
}

/// A Git delta that rebuilds `target` from `base`, found by comparing the
/// two line by line in place: a snapshot's next generation keeps every
/// chunk's lines where they were, so an unchanged line is the base's line
/// at the same position. `None` when the delta would not save half of the
/// target (a part that changed wholly is stored whole), decided after the
/// first sixteenth when most of it differs.
pub(crate) fn line_delta(base: &[u8], target: &[u8]) -> Option<Vec<u8>> {
    if base.len() > u32::MAX as usize {
        return None;
    }
    let limit = target.len() / 2;
    let mut out = Vec::new();
    varint(&mut out, base.len());
    varint(&mut out, target.len());
    let (mut b, mut t) = (0, 0);
    let mut copying: Option<(usize, usize)> = None;
    let mut literal: Option<usize> = None;
    let mut inserted = 0;
    while t < target.len() {
        let tl = line_len(&target[t..]);
        let bl = line_len(&base[b..]);
        if target[t..t + tl] == base[b..b + bl] {
            if let Some(s) = literal.take() {
                insert(&mut out, &target[s..t]);
            }
            match &mut copying {
                Some((off, len)) if *off + *len == b => *len += tl,
                _ => {
                    if let Some((off, len)) = copying.take() {
                        copy(&mut out, off, len);
                    }
                    copying = Some((b, tl));
                }
            }
        } else {
            if let Some((off, len)) = copying.take() {
                copy(&mut out, off, len);
            }
            literal.get_or_insert(t);
            inserted += tl;
        }
        t += tl;
        b += bl;
        if inserted > limit || (t > target.len() / 16 && inserted * 2 > t) {
            return None;
        }
    }
    if let Some(s) = literal {
        insert(&mut out, &target[s..]);
    }
    if let Some((off, len)) = copying {
        copy(&mut out, off, len);
    }
    (out.len() <= limit).then_some(out)
}

/// Whether most of the first lines of `target` are those of `base` at the
/// same places: a part worth reading its base whole for, to try a delta.
pub(crate) fn starts_alike(base: &[u8], target: &[u8]) -> bool {
    let (mut b, mut t, mut same) = (0, 0, 0);
    while t < target.len() && b < base.len() {
        let tl = line_len(&target[t..]);
        let bl = line_len(&base[b..]);
        // The last line of a prefix may be cut short: not counted.
        if t + tl == target.len() {
            break;
        }
        if target[t..t + tl] == base[b..b + bl] {
            same += tl;
        }
        t += tl;
        b += bl;
    }
    same * 2 > t
}

/// Numbered lines, those `changed` says ending in "new", the others in "old".
#[cfg(test)]
pub(super) fn lines(n: usize, changed: impl Fn(usize) -> bool) -> Vec<u8> {
    (0..n).flat_map(|i| format!("line {i:06} {}\n", if changed(i) { "new" } else { "old" }).into_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Git's patch-delta, enough to check ours.
    fn apply(base: &[u8], delta: &[u8]) -> Vec<u8> {
        let mut i = 0;
        let mut num = || {
            let (mut n, mut shift) = (0usize, 0);
            loop {
                let b = delta[i];
                i += 1;
                n |= ((b & 0x7f) as usize) << shift;
                shift += 7;
                if b < 0x80 {
                    return n;
                }
            }
        };
        assert_eq!(num(), base.len());
        let size = num();
        let mut out = Vec::new();
        while i < delta.len() {
            let cmd = delta[i];
            i += 1;
            if cmd & 0x80 != 0 {
                let (mut off, mut len) = (0usize, 0usize);
                for k in 0..4 {
                    if cmd & (1 << k) != 0 {
                        off |= (delta[i] as usize) << (8 * k);
                        i += 1;
                    }
                }
                for k in 0..3 {
                    if cmd & (0x10 << k) != 0 {
                        len |= (delta[i] as usize) << (8 * k);
                        i += 1;
                    }
                }
                if len == 0 {
                    len = 0x10000;
                }
                out.extend_from_slice(&base[off..off + len]);
            } else {
                out.extend_from_slice(&delta[i..i + cmd as usize]);
                i += cmd as usize;
            }
        }
        assert_eq!(out.len(), size);
        out
    }

    #[test]
    fn a_delta_rebuilds_the_target_and_only_when_most_lines_are_kept() {
        let base = lines(5000, |_| false);
        let some = lines(5000, |i| i % 97 == 3 || i == 4999);
        let d = line_delta(&base, &some).expect("1% changed: a delta");
        assert!(d.len() < some.len() / 20);
        assert_eq!(apply(&base, &d), some);
        // Longer and shorter targets, and one whose last line has no newline.
        let mut longer = some.clone();
        longer.extend_from_slice(b"tail without newline");
        assert_eq!(apply(&base, &line_delta(&base, &longer).unwrap()), longer);
        let shorter = some[..some.len() - 1000].to_vec();
        assert_eq!(apply(&base, &line_delta(&base, &shorter).unwrap()), shorter);
        assert!(line_delta(&base, &lines(5000, |_| true)).is_none(), "changed wholly: stored whole");
        assert!(line_delta(&base, &lines(5000, |i| i % 3 != 0)).is_none(), "two thirds changed");
    }

    /// Stores `jobs` in a new pack under `dir`, saying beforehand that
    /// those with a base make a delta; checks the pack with Git.
    #[test]
    fn copies_longer_than_git_s_24_bit_lengths_are_split() {
        let base = vec![b'a'; 0x100_0000 + 10];
        let d = line_delta(&base, &base).unwrap();
        assert_eq!(apply(&base, &d), base);
    }
}
