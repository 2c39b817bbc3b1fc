//! Original names and metadata (profile, "Original names and metadata").
//!
//! WTXT names are `[A-Za-z0-9_]+`; Hugging Face names are not
//! (`transformer.h.0.attn.c_attn.bias`). A snapshot maps them
//! (`model::assign_names`) and keeps what `extract` needs to give them back,
//! with a safetensors file's `__metadata__`, in one metadata array,
//! `__names`: UTF-8 JSON `{"names": {WTXT name: original}, "metadata":
//! {key: value}}` (keys sorted, either part left out when empty). It is
//! written only when some name was mapped or an input had metadata, so a
//! snapshot of inputs whose names fit and carry no metadata is byte for
//! byte what it was before.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::model::Array;

/// The metadata array's name.
pub const NAMES: &str = "__names";

/// What `__names` holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OriginalNames {
    /// WTXT name -> the input's own name, for every name that was mapped.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub names: BTreeMap<String, String>,
    /// A safetensors file's `__metadata__`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, String>>,
}

impl OriginalNames {
    /// The training step (`global_step`, else `step`) and `epoch` a
    /// producer recorded in the metadata (a Trainer's, Lightning's), as written.
    pub fn step_and_epoch(&self) -> (Option<&str>, Option<&str>) {
        let get = |k: &str| self.metadata.as_ref()?.get(k).map(String::as_str).filter(|v| !v.is_empty());
        (get("global_step").or_else(|| get("step")), get("epoch"))
    }

    /// Nothing to keep.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty() && self.metadata.is_none()
    }

    /// The `__names` among `arrays`, if any.
    pub fn of(arrays: &[Array]) -> Result<Option<OriginalNames>> {
        let Some(a) = arrays.iter().find(|a| a.name == NAMES) else { return Ok(None) };
        serde_json::from_slice(a.bytes()).map(Some).map_err(|e| {
            Error::input(Default::default(), format!("{NAMES}: expected {{\"names\", \"metadata\"}}: {e}"))
        })
    }

    /// As the metadata array.
    pub fn to_array(&self) -> Result<Array> {
        crate::convert::common::meta_array(NAMES, &serde_json::to_value(self).expect("names serialize"))
    }

    /// The names a container's exact form kept, from its (WTXT name,
    /// original) pairs; `None` when every name is its WTXT name.
    pub fn from_pairs<I: IntoIterator<Item = (String, String)>>(pairs: I) -> Option<OriginalNames> {
        let names: BTreeMap<String, String> = pairs.into_iter().filter(|(w, o)| w != o).collect();
        (!names.is_empty()).then_some(OriginalNames { names, metadata: None })
    }

    /// The name `wtxt_name` had in its input.
    pub fn original<'a>(&'a self, wtxt_name: &'a str) -> &'a str {
        self.names.get(wtxt_name).map_or(wtxt_name, String::as_str)
    }

    /// The WTXT name of an array its input called `original`; refused when
    /// two arrays were both given that name (a crafted `__names`: a
    /// snapshot never writes one), rather than picking either.
    pub fn wtxt_name<'a>(&'a self, original: &'a str) -> Result<&'a str> {
        let mut found = self.names.iter().filter(|(_, o)| *o == original).map(|(w, _)| w.as_str());
        match (found.next(), found.next()) {
            (None, _) => Ok(original),
            (Some(w), None) => Ok(w),
            (Some(a), Some(b)) => Err(Error::input(
                Default::default(),
                format!("{NAMES}: {a} and {b} were both named {original:?}: give the array's WTXT name"),
            )),
        }
    }

    /// Adds another input's names and metadata; metadata that disagrees
    /// with what is kept already is reported, not merged.
    pub fn merge(&mut self, other: OriginalNames) -> Option<String> {
        self.names.extend(other.names);
        match (&mut self.metadata, other.metadata) {
            (_, None) => None,
            (None, Some(m)) => {
                self.metadata = Some(m);
                None
            }
            (Some(a), Some(b)) if *a == b => None,
            (Some(_), Some(_)) => Some("two inputs carry different metadata: the first is kept".into()),
        }
    }
}

/// The metadata array of a state dict's entries that are not tensors (a
/// training step, a learning rate, a scheduler's fields): UTF-8 JSON
/// `{"<original name>": "<value as a Python literal>", ...}`, keys in byte
/// order. `wtxt` only carries it; the Python package writes and reads the
/// literals (FORMAT.md section 14).
pub const OBJECTS: &str = "__objects";

/// `objects` as the `__objects` array.
pub fn objects_array(objects: &BTreeMap<String, String>) -> Result<Array> {
    crate::convert::common::meta_array(OBJECTS, &serde_json::to_value(objects).expect("a map of strings serializes"))
}

/// What the `__objects` array among `arrays` holds, if there is one.
pub fn objects_of(arrays: &[Array]) -> Result<Option<BTreeMap<String, String>>> {
    let Some(v) = crate::convert::common::meta_json(arrays, OBJECTS)? else { return Ok(None) };
    serde_json::from_value(v)
        .map(Some)
        .map_err(|e| Error::input(Default::default(), format!("{OBJECTS}: expected an object of strings: {e}")))
}

/// Splits `__names` off `arrays`: the tensors, and what it held.
/// Two arrays may not end up under one original name (a `__names` that
/// maps two arrays to one name, or one to another's): the containers that
/// give names back need them unique.
pub fn split(arrays: &[Array]) -> Result<(Vec<&Array>, OriginalNames)> {
    let names = OriginalNames::of(arrays)?.unwrap_or_default();
    let tensors: Vec<&Array> = arrays.iter().filter(|a| a.name != NAMES).collect();
    let mut seen: std::collections::HashMap<&str, &str> = std::collections::HashMap::with_capacity(tensors.len());
    for a in &tensors {
        let given = names.original(&a.name);
        if let Some(other) = seen.insert(given, &a.name) {
            return Err(Error::input(
                Default::default(),
                format!("{NAMES}: arrays {other} and {} would be both named {given:?}", a.name),
            ));
        }
    }
    Ok((tensors, names))
}

/// Gives every array a WTXT name (`model::assign_names`), recording each
/// mapped name in `kept`; when `kept` then holds anything, appends it as
/// `__names` and returns true.
pub fn give_wtxt_names(arrays: &mut Vec<Array>, kept: &mut OriginalNames) -> Result<bool> {
    let originals: Vec<String> = arrays.iter().map(|a| a.name.clone()).collect();
    for (a, n) in arrays.iter_mut().zip(crate::model::assign_names(&originals)) {
        if a.name != n {
            kept.names.insert(n.clone(), std::mem::take(&mut a.name));
        }
        a.name = n;
    }
    if kept.is_empty() {
        return Ok(false);
    }
    arrays.push(kept.to_array()?);
    Ok(true)
}

/// The snapshot at `path`'s mapped names (WTXT name to the model's own),
/// from its `__names`, read by the outline (nothing else is decoded); empty
/// when it has none or does not outline (an encrypted or damaged file).
/// For display only: no decision depends on it (`diff`, `verify --json`).
pub fn originals_of(path: &std::path::Path) -> std::collections::BTreeMap<String, String> {
    let wanted = |n: &str| n == NAMES;
    let Some(outlined) = crate::store::outline::outline(path, &wanted, crate::limits::MAX_METADATA) else {
        return Default::default();
    };
    let metas: Vec<crate::model::Array> = outlined
        .into_iter()
        .filter_map(|o| crate::model::Array::new(o.arr.name, o.arr.dtype, o.arr.shape, o.data?.into()).ok())
        .collect();
    OriginalNames::of(&metas).ok().flatten().map(|k| k.names).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes FORMAT.md section 14 promises for `__names`: compact,
    /// keys in byte order, raw UTF-8, `"` and `\` escaped, the control
    /// bytes below 0x20 as `\b \t \n \f \r` or `\u00xx` (lowercase hex),
    /// DEL and every other character as it is.
    #[test]
    fn names_json_is_written_exactly_as_documented() {
        let mut kept = OriginalNames::default();
        kept.names.insert("b".into(), "z\u{1}\u{8}\t\n\u{c}\r\u{1f}\u{7f}\"\\é/".into());
        kept.names.insert("a".into(), "x.y".into());
        let a = kept.to_array().unwrap();
        let want = "{\"names\":{\"a\":\"x.y\",\"b\":\"z\\u0001\\b\\t\\n\\f\\r\\u001f\u{7f}\\\"\\\\é/\"}}";
        assert_eq!(std::str::from_utf8(a.bytes()).unwrap(), want);
    }
}
