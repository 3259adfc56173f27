//! Writes the CRD YAML of every sigx resource to `crds/generated/` and to the Helm chart's copy
//! in `charts/sigx/files/crds/` (or only to the directory given as the first argument). The files
//! are checked in; `crds/tests/generated.rs` fails when either copy is stale.
#![forbid(unsafe_code)]

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `cargo run` gives the crate's directory at run time; the compile-time one may belong to
    // another checkout when a target dir is shared.
    let root = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let dirs = match std::env::args_os().nth(1) {
        Some(dir) => vec![PathBuf::from(dir)],
        None => vec![
            root.join("generated"),
            root.join("../charts/sigx/files/crds"),
        ],
    };
    let files = sigx_crds::generated_yaml()?;
    for dir in dirs {
        std::fs::create_dir_all(&dir)?;
        for (file, yaml) in &files {
            let path = dir.join(file);
            std::fs::write(&path, yaml)?;
            println!("wrote {}", path.display());
        }
    }
    Ok(())
}
