//! Replays every file of the checked-in seed corpus (`fuzz/corpus/<target>/`) and every input a
//! fuzzer found a bug with (`fuzz/regressions/<target>/`) through the target functions that
//! `make fuzz` runs under libFuzzer, on stable: a finding, once fixed, stays fixed.

use std::path::{Path, PathBuf};

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("a readable corpus folder").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

fn replay(name: &str) {
    let (_, target) = sigx_fuzz::TARGETS
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no fuzz target {name}"));
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let seeds = files(&root.join("corpus").join(name));
    assert!(
        !seeds.is_empty(),
        "fuzz/corpus/{name}/ is empty: every target keeps a seed corpus (see tests/seeds.rs)"
    );
    let mut failed = Vec::new();
    let all: Vec<PathBuf> = seeds
        .into_iter()
        .chain(files(&root.join("regressions").join(name)))
        .collect();
    for path in &all {
        let bytes = std::fs::read(path).expect("a readable corpus file");
        if std::panic::catch_unwind(|| target(&bytes)).is_err() {
            failed.push(
                path.strip_prefix(root)
                    .unwrap_or(path)
                    .display()
                    .to_string(),
            );
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} inputs fail fuzz target {name} (the panics are printed above): {failed:?}",
        failed.len(),
        all.len()
    );
}

macro_rules! replays {
    ($($name:ident),* $(,)?) => {
        $(#[test]
        fn $name() {
            replay(stringify!($name));
        })*

        /// Every target has a replay test here and a libFuzzer binary in `fuzz_targets/`.
        #[test]
        fn every_target_is_replayed_and_fuzzed() {
            let mut replayed = vec![$(stringify!($name)),*];
            replayed.sort();
            let mut targets: Vec<&str> = sigx_fuzz::TARGETS.iter().map(|(n, _)| *n).collect();
            targets.sort();
            assert_eq!(replayed, targets);
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz_targets");
            let mut bins: Vec<String> = files(&dir)
                .iter()
                .filter_map(|p| Some(p.file_stem()?.to_str()?.to_owned()))
                .collect();
            bins.sort();
            assert_eq!(bins, targets, "fuzz_targets/ and sigx_fuzz::TARGETS differ");
        }
    };
}

replays!(
    app_authority,
    app_requests,
    host_descriptor,
    mesh_auth,
    mesh_messages,
    operator_render,
    reminders,
);
