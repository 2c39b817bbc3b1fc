//! The keyed tag that binds a whole file (FORMAT.md section 5).
//!
//! Each array's `hmac` authenticates that array's bytes alone: without the
//! key one cannot change an array, but one can drop it, swap two of the
//! same shape, or put in one from an older generation, and recompute the
//! unkeyed `sha256_all` and `merkle_this`. The tag closes that: the last
//! pair of the `audit` line, `wtxt.bind=<64 hex>`, is an HMAC under a key
//! derived from the HMAC key over the `meta` and `cap` lines, the root's
//! three hashes (which cover every `arr` line, in order) and the audit
//! pairs before it. Every wtxt writer given a key writes it; a verifier
//! given a key demands it (unless told the file comes from a writer that
//! binds nothing) and then also checks that every salt derives from `gen`
//! and the array's name.

use crate::crypto::digest::Hash;
use crate::crypto::mac::HmacKey;
use crate::format::syntax::{hexn, Audit, Cap, Meta};

/// The audit key that carries the tag.
pub const BIND_KEY: &str = "wtxt.bind";

/// What the tag covers besides the audit pairs before it.
pub struct Bound<'a> {
    /// The `meta` line's values.
    pub meta: &'a Meta,
    /// The `cap` line.
    pub cap: &'a Cap,
    /// The root's `sha256_all`.
    pub sha256_all: &'a Hash,
    /// The root's `merkle_prev`.
    pub merkle_prev: &'a Hash,
    /// The root's `merkle_this`.
    pub merkle_this: &'a Hash,
}

impl Bound<'_> {
    /// The message the tag is over: `"WTXT-BIND-1" 0x00 || meta line || LF
    /// || cap line || LF || sha256_all || merkle_prev || merkle_this ||
    /// the audit line's bytes before " wtxt.bind="` (hashes as 32 raw bytes).
    pub fn message(&self, before: &[(String, String)]) -> Vec<u8> {
        let mut text = String::with_capacity(512);
        self.meta.write(&mut text);
        text.push('\n');
        self.cap.write(&mut text);
        text.push('\n');
        let mut m = Vec::with_capacity(text.len() + 200);
        m.extend_from_slice(b"WTXT-BIND-1\0");
        m.extend_from_slice(text.as_bytes());
        m.extend_from_slice(self.sha256_all);
        m.extend_from_slice(self.merkle_prev);
        m.extend_from_slice(self.merkle_this);
        let mut audit = String::new();
        Audit { pairs: before.to_vec() }.write(&mut audit);
        m.extend_from_slice(audit.as_bytes());
        m
    }

    /// The `audit` line `planned` (from [`planned`]) with its tag under `key`.
    pub fn tagged(&self, planned: &Audit, key: &HmacKey) -> Audit {
        let before = &planned.pairs[..planned.pairs.len().saturating_sub(1)];
        let tag = key.bind_tag(&self.message(before));
        let mut pairs = before.to_vec();
        pairs.push((BIND_KEY.to_string(), hex::encode(tag)));
        Audit { pairs }
    }
}

/// The `audit` line a writer plans. A writer that holds a key puts the
/// tag's placeholder (same width) last, in place of any tag the given
/// pairs carry (a tag binds one file only); one without a key writes the
/// pairs as given, a carried tag included (re-emitting a file byte for
/// byte, as it carries the arrays' tags).
pub fn planned(audit: Option<&Audit>, keyed: bool) -> Option<Audit> {
    if !keyed {
        return audit.cloned();
    }
    let mut pairs: Vec<(String, String)> =
        audit.map(|a| a.pairs.iter().filter(|(k, _)| k != BIND_KEY).cloned().collect()).unwrap_or_default();
    pairs.push((BIND_KEY.to_string(), "0".repeat(64)));
    Some(Audit { pairs })
}

/// A tag found: its value, and the audit pairs before it.
pub type Found<'a> = (Hash, &'a [(String, String)]);

/// The tag an `audit` line carries and the pairs before it: `Ok(None)`
/// without one; an error when it is not the last pair, comes twice, or is
/// not 64 lowercase hex digits.
pub fn find(audit: &Audit) -> std::result::Result<Option<Found<'_>>, String> {
    let at = audit.pairs.iter().position(|(k, _)| k == BIND_KEY);
    let Some(at) = at else { return Ok(None) };
    if at + 1 != audit.pairs.len() {
        return Err(format!("audit: `{BIND_KEY}` must be the last pair"));
    }
    let tag = hexn::<32>(audit.pairs[at].1.as_bytes(), &format!("audit: `{BIND_KEY}`")).map_err(|r| r.to_string())?;
    Ok(Some((tag, &audit.pairs[..at])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_is_last_once_and_hex() {
        let a = |s: &str| Audit::parse(s.as_bytes()).unwrap();
        let z = "0".repeat(64);
        assert!(find(&a("audit k=v")).unwrap().is_none());
        assert_eq!(find(&a(&format!("audit k=v wtxt.bind={z}"))).unwrap().unwrap().1.len(), 1);
        assert!(find(&a(&format!("audit wtxt.bind={z} k=v"))).is_err());
        assert!(find(&a(&format!("audit wtxt.bind={}", "A".repeat(64)))).is_err());
        assert!(find(&a("audit wtxt.bind=00")).is_err());
        assert!(find(&a(&format!("audit wtxt.bind={z} wtxt.bind={z}"))).is_err());
    }

    #[test]
    fn a_plan_drops_a_carried_tag_and_places_its_own_last() {
        let a = Audit::parse(format!("audit wtxt.bind={} k=v", "1".repeat(64)).as_bytes()).unwrap();
        let p = planned(Some(&a), true).unwrap();
        assert_eq!(p.pairs.len(), 2);
        assert_eq!(p.pairs[1].0, BIND_KEY);
        assert_eq!(planned(Some(&a), false).as_ref(), Some(&a));
        assert!(planned(None, false).is_none());
    }
}
