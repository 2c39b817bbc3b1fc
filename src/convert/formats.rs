//! The table of containers: adding a format is one file and one row in
//! [`CONTAINERS`]. Commands never match on formats; they ask the table (by
//! magic bytes when reading, by name or extension when writing).

use crate::convert::container::Container;
use crate::convert::{aero, fold, mldf, names, npy, npz, safetensors, volp};
use crate::error::{Error, Result};
use crate::model::Array;

/// Every container, in the order their magic bytes are tried (safetensors,
/// which has none, last).
pub static CONTAINERS: [&dyn Container; 7] =
    [&npy::Npy, &npz::Npz, &volp::Volp, &fold::FOLD, &aero::AERO, &mldf::Mldf, &safetensors::Safetensors];

/// The container a file starting with `head` is, by magic bytes only.
pub fn sniff(head: &[u8], file_len: u64) -> Option<&'static dyn Container> {
    CONTAINERS.iter().copied().find(|c| c.sniff(head, file_len))
}

/// What `convert --to` takes: `wtxt`, and every container that holds
/// several arrays (`.npy` holds one).
pub fn convert_targets() -> Vec<&'static str> {
    std::iter::once("wtxt").chain(CONTAINERS.iter().filter(|c| !c.holds_one_array()).map(|c| c.name())).collect()
}

/// The container named `name` (as `--to` spells it).
pub fn by_name(name: &str) -> Option<&'static dyn Container> {
    CONTAINERS.iter().copied().find(|c| c.name() == name)
}

/// The container an output file's extension asks for (`extract -o`).
pub fn by_extension(out: &std::path::Path) -> Result<&'static dyn Container> {
    let ext = out.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    CONTAINERS.iter().copied().find(|c| c.extensions().contains(&ext.as_str())).ok_or_else(|| {
        let all: Vec<String> = CONTAINERS.iter().flat_map(|c| c.extensions()).map(|e| format!(".{e}")).collect();
        Error::usage(format!("{}: output must end in {}", out.display(), all.join(", ")))
    })
}

/// The container whose metadata arrays `arrays` carry (a filter-made WTXT).
pub fn by_metadata(arrays: &[Array]) -> Option<&'static dyn Container> {
    CONTAINERS.iter().copied().find(|c| c.metadata().iter().any(|m| arrays.iter().any(|a| a.name == *m)))
}

/// Splits off metadata arrays that belong to other containers (their
/// names start with `__`), which `to` has no place for.
/// The original names an exact form kept (a safetensors header, `__aero`,
/// `__fold`, `__npz`, `__mldf`) still reach `to` when it gives names back:
/// as `__names`, unless the arrays carry one already. A safetensors
/// `__metadata__` that `to` cannot keep is reported with what is dropped.
pub fn foreign_metadata(arrays: Vec<Array>, to: &dyn Container) -> Result<(Vec<Array>, Vec<String>)> {
    let (mut keep, drop): (Vec<Array>, Vec<Array>) =
        arrays.into_iter().partition(|a| !a.is_metadata() || to.owns(&a.name));
    let mut dropped: Vec<String> = drop.iter().map(|a| a.name.clone()).collect();
    if to.owns(names::NAMES) && !keep.iter().any(|a| a.name == names::NAMES) {
        // An exact form too damaged to name anything is left out as before.
        let kept = CONTAINERS
            .iter()
            .filter(|c| c.name() != to.name())
            .find_map(|c| Some((c.original_names(&drop).ok()??, *c)));
        if let Some((kept, from)) = kept {
            keep.push(kept.to_array()?);
            crate::model::sort_arrays(&mut keep)?;
            for d in dropped.iter_mut().filter(|d| from.owns(d)) {
                d.push_str(" (its original names are kept)");
            }
        }
    }
    if !to.keeps_metadata() {
        if let Some(at) = keep.iter().position(|a| a.name == names::NAMES) {
            let mut kept = names::OriginalNames::of(&keep)?.unwrap_or_default();
            if kept.metadata.take().is_some() {
                dropped.push(format!("the safetensors __metadata__ in {}", names::NAMES));
                if kept.is_empty() {
                    keep.remove(at);
                } else {
                    keep[at] = kept.to_array()?;
                }
            }
        }
    }
    Ok((keep, dropped))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Dtype;

    fn header_array(json: &str) -> Array {
        let mut b = (json.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(json.as_bytes());
        Array::new(safetensors::ST_HEADER, Dtype::U8, vec![b.len() as u64], b.into()).unwrap()
    }

    /// A safetensors header's names reach another format as `__names`; a
    /// header too damaged to name anything is left out, as before, without
    /// failing the conversion.
    #[test]
    fn an_exact_headers_names_go_to_other_formats_unless_it_is_damaged() {
        let w = Array::new("a_b", Dtype::F32, vec![1], vec![0u8; 4].into()).unwrap();
        let good = header_array(r#"{"a.b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#);
        let (kept, dropped) = foreign_metadata(vec![w.clone(), good], &aero::AERO).unwrap();
        let names = names::OriginalNames::of(&kept).unwrap().expect("__names");
        assert_eq!(names.original("a_b"), "a.b");
        assert_eq!(dropped, ["__safetensors_header (its original names are kept)"]);
        let (kept, dropped) = foreign_metadata(vec![w, header_array("not json")], &aero::AERO).unwrap();
        assert!(names::OriginalNames::of(&kept).unwrap().is_none());
        assert_eq!(dropped, ["__safetensors_header"]);
    }
}
