//! WSUM lines and every single-line parser of the grammar.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wtxt::format::syntax::*;

fuzz_target!(|data: &[u8]| {
    let _ = Wsum::parse_file(data);
    let _ = Meta::parse(data);
    let _ = Cap::parse(data);
    let _ = Root::parse(data);
    let _ = SignLine::parse(data);
    let _ = ArrLine::parse(data);
    let _ = IdxLine::parse(data);
    let _ = ChLine::parse(data);
    let _ = Audit::parse(data);
});
