//! The WTXT grammar, one line type at a time. Each line has a struct, a
//! `write` that emits the only canonical spelling, and a strict `parse` beside
//! it that accepts nothing else (docs/FORMAT.md gives the ABNF).
//!
//! Parsers return a `Reason` naming what was expected; the caller adds the
//! file and line number.

mod arrays;
mod fields;
mod head;
mod tail;

pub use arrays::*;
pub use fields::*;
pub use head::*;
pub use tail::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_canonical() {
        assert_eq!(dec(b"0", "x"), Ok(0));
        assert!(dec(b"01", "x").is_err());
        assert!(dec(b"+1", "x").is_err());
        assert!(dec(b"99999999999999999999999", "x").is_err());
        assert_eq!(padded(b"000123", 6, "g"), Ok(123));
        assert_eq!(padded(b"1234567", 6, "g"), Ok(1234567));
        assert!(padded(b"0123456", 6, "g").is_err());
        assert!(padded(b"00123", 6, "g").is_err());
    }

    #[test]
    fn fields_demand_single_spaces_and_order() {
        assert!(IdxLine::parse(b"idx rows_per_chunk=1 row_size=4 row_blocking=on").is_ok());
        assert!(IdxLine::parse(b"idx rows_per_chunk=1  row_size=4 row_blocking=on").is_err());
        assert!(IdxLine::parse(b"idx row_size=4 rows_per_chunk=1 row_blocking=on").is_err());
        assert!(IdxLine::parse(b"idx rows_per_chunk=1 row_size=4 row_blocking=on ").is_err());
    }

    #[test]
    fn timestamps_are_strict() {
        assert!(Timestamp::parse("2026-02-02T12:00:00Z").is_ok());
        assert!(Timestamp::parse("2026-02-30T12:00:00Z").is_err());
        assert!(Timestamp::parse("2026-2-02T12:00:00Z").is_err());
        assert!(Timestamp::parse("2026-02-02T12:00:00+00").is_err());
        assert_eq!(Timestamp::from_epoch(1780000000).unwrap().as_str(), "2026-05-28T20:26:40Z");
    }

    #[test]
    fn audit_round_trip() {
        let a = Audit::parse(b"audit loss=0.0123 epoch=9 note=\"warm restart, lr x0.5\"").unwrap();
        assert_eq!(a.pairs.len(), 3);
        let mut s = String::new();
        a.write(&mut s);
        assert_eq!(s, "audit loss=0.0123 epoch=9 note=\"warm restart, lr x0.5\"");
        assert!(Audit::parse(b"audit a=\"x\\y\"").is_err());
        assert!(Audit::parse(b"audit a=b  c=d").is_err());
    }

    #[test]
    fn lines_round_trip() {
        let ch = b"ch ix=000001 off=000000032768 len=432 sha256=469bdb3cc9560a954fe02bfc11248f0a8964a79948e88226506f21859ae628b6 crc32c=8e8022cc b64=on width=76 lines=8";
        let c = ChLine::parse(ch).unwrap();
        let mut s = String::new();
        c.write(&mut s);
        assert_eq!(s.as_bytes(), ch);
        assert!(ChLine::parse(&ch.replace_last(b"lines=8", b"lines=9")).is_err());
    }

    trait ReplaceLast {
        fn replace_last(&self, from: &[u8], to: &[u8]) -> Vec<u8>;
    }
    impl ReplaceLast for [u8] {
        fn replace_last(&self, from: &[u8], to: &[u8]) -> Vec<u8> {
            let i = self.windows(from.len()).rposition(|w| w == from).unwrap();
            [&self[..i], to, &self[i + from.len()..]].concat()
        }
    }
    impl<const N: usize> ReplaceLast for [u8; N] {
        fn replace_last(&self, from: &[u8], to: &[u8]) -> Vec<u8> {
            self[..].replace_last(from, to)
        }
    }
}
