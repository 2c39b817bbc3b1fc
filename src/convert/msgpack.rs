//! MessagePack <-> JSON for AERO's `MMSG`, `TIDX`, `IHSH` and `PHSH`
//! chunks, so their content can sit in a readable `__aero` metadata array
//! and be written back to the same bytes.
//!
//! JSON has no binary, ext, float32 or non-string keys; those become
//! one-key objects `{"$bin": hex}`, `{"$ext": [type, hex]}`, `{"$f32": x}`,
//! `{"$f64": "nan"|"inf"|"-inf"}`, `{"$str": hex}` (a str that is not
//! UTF-8) and `{"$map": [[k, v], ...]}` (a map whose keys are not all
//! distinct strings, or that would read as one of these tags).
#![forbid(unsafe_code)]

use crate::error::{reason, Reason};
use rmpv::Value as Mp;
use serde_json::{json, Map, Value};

/// Deepest nesting accepted in a MessagePack payload.
pub const MAX_DEPTH: usize = 64;

const TAGS: [&str; 6] = ["$bin", "$ext", "$f32", "$f64", "$str", "$map"];

/// Most values (scalars, strings, array items, map keys and values) in one
/// payload: decoded values live in memory (about 100 bytes each as MessagePack
/// and JSON trees), so a small, dense payload could otherwise expand to
/// gigabytes. Counted before anything is decoded.
pub const MAX_NODES: u64 = 1 << 21;

/// Counts the values in `b` without building them, failing past `limit`.
pub fn count_nodes(b: &[u8], limit: u64) -> Result<u64, Reason> {
    use rmp::Marker as M;
    let mut rd = b;
    let mut pending: u64 = 1;
    let mut seen: u64 = 0;
    let take = |rd: &mut &[u8], n: u64| -> Result<(), Reason> {
        let n = usize::try_from(n).map_err(|_| "length overflows".to_string())?;
        if rd.len() < n {
            return Err("MessagePack ends early".into());
        }
        *rd = &rd[n..];
        Ok(())
    };
    let be = |rd: &mut &[u8], n: usize| -> Result<u64, Reason> {
        if rd.len() < n {
            return Err("MessagePack ends early".into());
        }
        let v = rd[..n].iter().fold(0u64, |a, &x| (a << 8) | x as u64);
        *rd = &rd[n..];
        Ok(v)
    };
    while pending > 0 {
        pending -= 1;
        seen += 1;
        if seen > limit {
            return Err(reason!("more than {limit} values"));
        }
        let m = rmp::decode::read_marker(&mut rd).map_err(|_| "MessagePack ends early".to_string())?;
        let children = match m {
            M::FixArray(n) => n as u64,
            M::FixMap(n) => 2 * n as u64,
            M::Array16 => be(&mut rd, 2)?,
            M::Array32 => be(&mut rd, 4)?,
            M::Map16 => 2 * be(&mut rd, 2)?,
            M::Map32 => 2 * be(&mut rd, 4)?,
            M::FixStr(n) => {
                take(&mut rd, n as u64)?;
                0
            }
            M::Str8 | M::Bin8 => {
                let n = be(&mut rd, 1)?;
                take(&mut rd, n)?;
                0
            }
            M::Str16 | M::Bin16 => {
                let n = be(&mut rd, 2)?;
                take(&mut rd, n)?;
                0
            }
            M::Str32 | M::Bin32 => {
                let n = be(&mut rd, 4)?;
                take(&mut rd, n)?;
                0
            }
            M::U8 | M::I8 => take(&mut rd, 1).map(|_| 0)?,
            M::U16 | M::I16 => take(&mut rd, 2).map(|_| 0)?,
            M::U32 | M::I32 | M::F32 => take(&mut rd, 4).map(|_| 0)?,
            M::U64 | M::I64 | M::F64 => take(&mut rd, 8).map(|_| 0)?,
            M::FixExt1 => take(&mut rd, 2).map(|_| 0)?,
            M::FixExt2 => take(&mut rd, 3).map(|_| 0)?,
            M::FixExt4 => take(&mut rd, 5).map(|_| 0)?,
            M::FixExt8 => take(&mut rd, 9).map(|_| 0)?,
            M::FixExt16 => take(&mut rd, 17).map(|_| 0)?,
            M::Ext8 => {
                let n = be(&mut rd, 1)?;
                take(&mut rd, n + 1).map(|_| 0)?
            }
            M::Ext16 => {
                let n = be(&mut rd, 2)?;
                take(&mut rd, n + 1).map(|_| 0)?
            }
            M::Ext32 => {
                let n = be(&mut rd, 4)?;
                take(&mut rd, n + 1).map(|_| 0)?
            }
            M::Reserved => return Err("reserved MessagePack marker 0xc1".into()),
            _ => 0,
        };
        // Each child needs at least one byte: a length beyond what is left is a lie.
        if children > rd.len() as u64 {
            return Err("a length runs past the end of the MessagePack".into());
        }
        pending += children;
    }
    Ok(seen)
}

/// Decodes exactly one MessagePack value filling `b`, of at most
/// [`MAX_NODES`] values.
pub fn decode(b: &[u8]) -> Result<Mp, Reason> {
    count_nodes(b, MAX_NODES)?;
    let mut rd = b;
    let v = rmpv::decode::read_value_with_max_depth(&mut rd, MAX_DEPTH).map_err(|e| e.to_string())?;
    if !rd.is_empty() {
        return Err(reason!("{} bytes follow the MessagePack value", rd.len()));
    }
    Ok(v)
}

/// Encodes a value (smallest integer and length encodings, as Python's
/// `msgpack.packb(use_bin_type=True)` does).
pub fn encode(v: &Mp) -> Vec<u8> {
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, v).expect("writing to a Vec does not fail");
    out
}

/// The JSON form of a MessagePack value.
pub fn to_json(v: &Mp) -> Value {
    match v {
        Mp::Nil => Value::Null,
        Mp::Boolean(b) => json!(b),
        Mp::Integer(i) => i.as_u64().map_or_else(|| json!(i.as_i64().expect("an i64 or a u64")), |u| json!(u)),
        Mp::F32(f) => json!({"$f32": f}),
        Mp::F64(f) if f.is_finite() => json!(f),
        Mp::F64(f) => json!({"$f64": if f.is_nan() { "nan" } else if *f > 0.0 { "inf" } else { "-inf" }}),
        Mp::String(s) => match s.as_str() {
            Some(s) => json!(s),
            None => json!({"$str": hex::encode(s.as_bytes())}),
        },
        Mp::Binary(b) => json!({"$bin": hex::encode(b)}),
        Mp::Array(items) => Value::Array(items.iter().map(to_json).collect()),
        Mp::Map(pairs) => {
            let mut m = Map::new();
            let plain = pairs.iter().all(|(k, _)| k.as_str().is_some())
                && !(pairs.len() == 1 && pairs[0].0.as_str().is_some_and(|k| TAGS.contains(&k)));
            if plain {
                for (k, v) in pairs {
                    if m.insert(k.as_str().expect("checked").to_string(), to_json(v)).is_some() {
                        return json!({"$map": pairs.iter().map(|(k, v)| json!([to_json(k), to_json(v)])).collect::<Vec<_>>()});
                    }
                }
                Value::Object(m)
            } else {
                json!({"$map": pairs.iter().map(|(k, v)| json!([to_json(k), to_json(v)])).collect::<Vec<_>>()})
            }
        }
        Mp::Ext(t, b) => json!({"$ext": [t, hex::encode(b)]}),
    }
}

/// The MessagePack value a JSON form stands for.
pub fn from_json(v: &Value) -> Result<Mp, Reason> {
    let unhex = |s: &Value| s.as_str().and_then(|s| hex::decode(s).ok()).ok_or("expected a hex string");
    Ok(match v {
        Value::Null => Mp::Nil,
        Value::Bool(b) => Mp::Boolean(*b),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => Mp::from(u),
            (_, Some(i), _) => Mp::from(i),
            (_, _, Some(f)) => Mp::F64(f),
            _ => return Err(reason!("number {n} out of range")),
        },
        Value::String(s) => Mp::from(s.as_str()),
        Value::Array(items) => Mp::Array(items.iter().map(from_json).collect::<Result<_, _>>()?),
        Value::Object(m) if m.len() == 1 && TAGS.contains(&m.keys().next().expect("one key").as_str()) => {
            let (k, x) = m.iter().next().expect("one key");
            match k.as_str() {
                "$bin" => Mp::Binary(unhex(x)?),
                "$str" => raw_str(unhex(x)?)?,
                "$f32" => Mp::F32(x.as_f64().ok_or("$f32: expected a number")? as f32),
                "$f64" => Mp::F64(match x.as_str() {
                    Some("nan") => f64::NAN,
                    Some("inf") => f64::INFINITY,
                    Some("-inf") => f64::NEG_INFINITY,
                    _ => return Err("$f64: expected nan, inf or -inf".into()),
                }),
                "$ext" => {
                    let t =
                        x.get(0).and_then(Value::as_i64).and_then(|t| i8::try_from(t).ok()).ok_or("$ext: bad type")?;
                    Mp::Ext(t, unhex(x.get(1).unwrap_or(&Value::Null))?)
                }
                _ => {
                    let pairs = x.as_array().ok_or("$map: expected a list of pairs")?;
                    let mut out = Vec::with_capacity(pairs.len());
                    for p in pairs {
                        match p.as_array().map(Vec::as_slice) {
                            Some([k, v]) => out.push((from_json(k)?, from_json(v)?)),
                            _ => return Err("$map: expected [key, value] pairs".into()),
                        }
                    }
                    Mp::Map(out)
                }
            }
        }
        Value::Object(m) => {
            Mp::Map(m.iter().map(|(k, v)| Ok((Mp::from(k.as_str()), from_json(v)?))).collect::<Result<_, Reason>>()?)
        }
    })
}

/// A `str` holding bytes that may not be UTF-8 (rmpv keeps such strings
/// as read, so build one by decoding its encoding).
fn raw_str(bytes: Vec<u8>) -> Result<Mp, Reason> {
    let len = u32::try_from(bytes.len()).map_err(|_| "$str: too long")?;
    let mut buf = Vec::with_capacity(bytes.len() + 5);
    rmp::encode::write_str_len(&mut buf, len).expect("writing to a Vec does not fail");
    buf.extend_from_slice(&bytes);
    decode(&buf)
}

/// The JSON form of a payload when it is one MessagePack value that
/// re-encodes to exactly the same bytes; `None` otherwise.
pub fn exact_json(b: &[u8]) -> Option<Value> {
    let v = decode(b).ok()?;
    let j = to_json(&v);
    (from_json(&j).ok().map(|m| encode(&m)).as_deref() == Some(b)).then_some(j)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips_through_json() {
        let v = Mp::Map(vec![
            (Mp::from("a"), Mp::from(1u64)),
            (Mp::from("neg"), Mp::from(-300i64)),
            (Mp::from("f"), Mp::F64(0.5)),
            (Mp::from("g"), Mp::F32(1.5)),
            (Mp::from("nan"), Mp::F64(f64::INFINITY)),
            (Mp::from("bin"), Mp::Binary(vec![0, 1, 255])),
            (Mp::from("ext"), Mp::Ext(-3, vec![9])),
            (Mp::from("list"), Mp::Array(vec![Mp::Nil, Mp::Boolean(true), Mp::from(u64::MAX)])),
            (Mp::from("odd"), Mp::Map(vec![(Mp::from(1u64), Mp::from("x"))])),
            (Mp::from("tag"), Mp::Map(vec![(Mp::from("$bin"), Mp::from("not hex"))])),
        ]);
        let bytes = encode(&v);
        assert_eq!(exact_json(&bytes).map(|j| encode(&from_json(&j).unwrap())), Some(bytes));
    }

    #[test]
    fn trailing_bytes_and_deep_nesting_are_refused() {
        assert!(decode(&[0xc0, 0xc0]).is_err());
        let deep = vec![0x91u8; 10_000];
        assert!(decode(&deep).is_err());
    }
}
