//! The images `make images` builds (scripts/build-images.sh, no container engine needed): each
//! archive is a valid OCI layout whose digests match, whose config runs as a non-root user, and
//! whose entrypoint runs from the image's own filesystem alone (a chroot into the unpacked layer,
//! as that user), so nothing it needs is missing. Built here from the debug binaries, the same
//! script `make images` runs on the release ones.

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("run under cargo");
    Path::new(&manifest)
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn build_images(out: &Path) {
    let bin = sigx_e2e::chaos::bin_dir();
    run(Command::new("bash")
        .arg(root().join("scripts/build-images.sh"))
        .arg(&bin)
        .arg(out)
        .arg("0.0.0-test"));
}

/// Reads a blob named by `digest`, checking that its content hashes to that digest.
fn blob(layout: &Path, digest: &str) -> Vec<u8> {
    let hex = digest.strip_prefix("sha256:").expect("sha256 digest");
    let data = std::fs::read(layout.join("blobs/sha256").join(hex)).expect("blob present");
    let actual: String = Sha256::digest(&data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(actual, hex, "blob content does not match its digest");
    data
}

struct Unpacked {
    _dir: tempfile::TempDir,
    rootfs: PathBuf,
    config: Value,
    manifest_digest: String,
}

fn unpack(archive: &Path) -> Unpacked {
    let dir = tempfile::tempdir().expect("tempdir");
    let layout = dir.path().join("layout");
    std::fs::create_dir(&layout).unwrap();
    run(Command::new("tar")
        .arg("-xf")
        .arg(archive)
        .arg("-C")
        .arg(&layout));
    let layout_file: Value =
        serde_json::from_slice(&std::fs::read(layout.join("oci-layout")).unwrap()).unwrap();
    assert_eq!(layout_file["imageLayoutVersion"], "1.0.0");
    let index: Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    let entry = &index["manifests"][0];
    let manifest_digest = entry["digest"].as_str().unwrap().to_owned();
    let manifest: Value = serde_json::from_slice(&blob(&layout, &manifest_digest)).unwrap();
    assert_eq!(
        manifest["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    let config: Value = serde_json::from_slice(&blob(
        &layout,
        manifest["config"]["digest"].as_str().unwrap(),
    ))
    .unwrap();
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "one layer");
    let layer = blob(&layout, layers[0]["digest"].as_str().unwrap());
    assert_eq!(layer.len() as u64, layers[0]["size"].as_u64().unwrap());
    // docker load reads manifest.json; it must name the same blobs.
    let docker: Value =
        serde_json::from_slice(&std::fs::read(layout.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(
        docker[0]["Config"].as_str().unwrap(),
        format!(
            "blobs/sha256/{}",
            manifest["config"]["digest"]
                .as_str()
                .unwrap()
                .trim_start_matches("sha256:")
        )
    );
    let rootfs = dir.path().join("rootfs");
    std::fs::create_dir(&rootfs).unwrap();
    let layer_path = dir.path().join("layer.tar.gz");
    std::fs::write(&layer_path, &layer).unwrap();
    run(Command::new("tar")
        .arg("-xzf")
        .arg(&layer_path)
        .arg("-C")
        .arg(&rootfs));
    Unpacked {
        _dir: dir,
        rootfs,
        config,
        manifest_digest,
    }
}

/// Runs `argv` inside `rootfs` as the image's user. Needs root (chroot), as CI has.
fn chroot_run(rootfs: &Path, user: &str, argv: &[&str]) -> std::process::Output {
    // An absolute path: with the environment cleared, no PATH lookup happens.
    let chroot = ["/usr/sbin/chroot", "/usr/bin/chroot", "/sbin/chroot"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("chroot (coreutils) is installed");
    Command::new(chroot)
        .arg(format!("--userspec={user}"))
        .arg(rootfs)
        .args(argv)
        .env_clear()
        .output()
        .expect("chroot runs (the test needs root: run it as CI does)")
}

fn check_image(archive: &Path, entrypoint: &str, extra: &[&str], expect: &str) -> Unpacked {
    let img = unpack(archive);
    let cfg = &img.config["config"];
    assert_eq!(cfg["User"], "65532:65532", "the image runs as non-root");
    assert_eq!(cfg["Entrypoint"][0], entrypoint);
    assert!(
        !img.rootfs.join("bin/sh").exists(),
        "no shell in a minimal image"
    );
    for argv in std::iter::once(&[entrypoint][..]).chain(extra.iter().map(std::slice::from_ref)) {
        let mut args = argv.to_vec();
        args.push("--version");
        let out = chroot_run(&img.rootfs, "65532:65532", &args);
        assert!(
            out.status.success(),
            "{args:?} in the image failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains(expect) || argv[0].ends_with("/sigx"),
            "{args:?} printed {stdout:?}"
        );
    }
    img
}

#[test]
fn every_image_runs_its_entrypoint_as_nonroot_from_its_own_filesystem() {
    let out = tempfile::tempdir().unwrap();
    build_images(out.path());
    let sidecar = check_image(
        &out.path().join("sidecar.tar"),
        "/usr/local/bin/sigx-sidecar",
        &["/usr/local/bin/sigx"],
        "sigx-sidecar",
    );
    check_image(
        &out.path().join("operator.tar"),
        "/usr/local/bin/sigx-operator",
        &[],
        "sigx-operator",
    );
    let counter = check_image(
        &out.path().join("counter-app.tar"),
        "/usr/local/bin/counter-app",
        &[],
        "counter-app",
    );

    // Canary: the chroot check is not vacuous. Without the dynamic loader the image's
    // entrypoint cannot start, and the same check sees that.
    let loader = sidecar.rootfs.join("lib64/ld-linux-x86-64.so.2");
    if loader.exists() {
        std::fs::remove_file(&loader).unwrap();
        let broken = chroot_run(
            &sidecar.rootfs,
            "65532:65532",
            &["/usr/local/bin/sigx-sidecar", "--version"],
        );
        assert!(
            !broken.status.success(),
            "an image without its loader still ran: the check proves nothing"
        );
    }

    // Reproducible: the same binaries give the same manifest digest (the smallest image, to
    // keep the test short; every image goes through the same script).
    let again = tempfile::tempdir().unwrap();
    let bin = sigx_e2e::chaos::bin_dir();
    run(Command::new("python3")
        .arg(root().join("scripts/build-image.py"))
        .args(["--name", "ghcr.io/sigx/counter-app", "--tag", "0.0.0-test"])
        .args(["--entrypoint", "/usr/local/bin/counter-app"])
        .arg("--binary")
        .arg(format!(
            "{}:/usr/local/bin/counter-app",
            bin.join("counter-app").display()
        ))
        .arg("--out")
        .arg(again.path().join("counter-app.tar")));
    assert_eq!(
        unpack(&again.path().join("counter-app.tar")).manifest_digest,
        counter.manifest_digest,
        "two builds of the same binaries differ"
    );
}
