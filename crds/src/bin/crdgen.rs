//! Writes the CRD YAML of every sigx resource to `crds/generated/` (or the directory given as the
//! first argument). The files are checked in; `crds/tests/generated.rs` fails when they are stale.
#![forbid(unsafe_code)]

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("generated"));
    std::fs::create_dir_all(&dir)?;
    for (file, yaml) in sigx_crds::generated_yaml()? {
        let path = dir.join(file);
        std::fs::write(&path, yaml)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
