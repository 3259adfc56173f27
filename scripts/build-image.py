#!/usr/bin/env python3
"""Builds a minimal, non-root OCI image archive from built binaries, without a container engine.

    build-image.py --name ghcr.io/sigx/sidecar --tag 0.1.0 --out target/images/sidecar.tar \
        --entrypoint /usr/local/bin/sigx-sidecar \
        --binary target/release/sigx-sidecar:/usr/local/bin/sigx-sidecar \
        --binary target/release/sigx:/usr/local/bin/sigx

What the image holds, and why:
  - the binaries, and the shared libraries they load (found with ldd: the C library, libgcc_s,
    the dynamic loader), copied from the build machine. The binaries are linked against that same
    C library, so they run; nothing else (no shell, no package manager) is in the image.
  - /etc/passwd and /etc/group naming one user, `nonroot` (65532:65532), and the image runs as
    that user. Nothing in the image needs to be written: it runs with a read-only root
    filesystem; the sidecar's socket lives in the pod's shared emptyDir.
  - CA certificates when the build machine has them (the operator and sidecar talk TLS to the
    API server with the in-cluster CA, but an OTLP or PostgreSQL endpoint may use public CAs).

The archive is an OCI image layout (oci-layout, index.json, blobs/sha256/...) that also carries a
Docker-style manifest.json, so `docker load`, `podman load` and `skopeo copy oci-archive:` all
take it. It is reproducible: every tar entry has mtime 0, uid/gid 0, and entries are sorted, so
the same binaries give the same digests.
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile

NONROOT = 65532


def shared_libraries(binary):
    """The absolute paths of the shared objects `binary` loads, its loader included."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True)
    if out.returncode != 0:
        if "not a dynamic executable" in out.stdout + out.stderr:
            return []
        sys.exit(f"build-image: ldd {binary} failed: {out.stderr.strip()}")
    libs = []
    for line in out.stdout.splitlines():
        line = line.strip()
        if "not found" in line:
            sys.exit(f"build-image: {binary} needs a library the build machine lacks: {line}")
        m = re.search(r"=>\s+(/\S+)", line) or re.match(r"(/\S+)", line)
        if m:
            libs.append(m.group(1))
    return libs


def tar_add_bytes(tar, path, data, mode=0o644):
    info = tarfile.TarInfo(path.lstrip("/"))
    info.size = len(data)
    info.mode = mode
    info.mtime = 0
    tar.addfile(info, io.BytesIO(data))


def tar_add_dir(tar, path, mode=0o755):
    info = tarfile.TarInfo(path.lstrip("/"))
    info.type = tarfile.DIRTYPE
    info.mode = mode
    info.mtime = 0
    tar.addfile(info)


def layer_tar(files):
    """files: {image path: (bytes, mode)} → an uncompressed tar, directories included, sorted."""
    dirs = set()
    for path in files:
        parent = os.path.dirname(path)
        while parent not in ("", "/"):
            dirs.add(parent)
            parent = os.path.dirname(parent)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in sorted(dirs):
            tar_add_dir(tar, d)
        for path in sorted(files):
            data, mode = files[path]
            tar_add_bytes(tar, path, data, mode)
    return buf.getvalue()


def digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--name", required=True, help="repository, e.g. ghcr.io/sigx/sidecar")
    ap.add_argument("--tag", required=True)
    ap.add_argument("--out", required=True, help="the archive to write")
    ap.add_argument("--entrypoint", required=True, help="absolute path inside the image")
    ap.add_argument("--binary", action="append", required=True, metavar="SRC:DEST")
    args = ap.parse_args()

    files = {}
    for spec in args.binary:
        src, sep, dest = spec.partition(":")
        if not sep or not dest.startswith("/"):
            sys.exit(f"build-image: --binary {spec!r} must be SRC:/absolute/dest")
        if not os.access(src, os.X_OK):
            sys.exit(f"build-image: {src} is not an executable file; build it first (make build)")
        with open(src, "rb") as f:
            files[dest] = (f.read(), 0o755)
        for lib in shared_libraries(src):
            real = os.path.realpath(lib)
            with open(real, "rb") as f:
                files[lib] = (f.read(), 0o755)
    if args.entrypoint not in files:
        sys.exit(f"build-image: the entrypoint {args.entrypoint} is none of the --binary destinations")
    files["/etc/passwd"] = (f"nonroot:x:{NONROOT}:{NONROOT}:nonroot:/home/nonroot:/sbin/nologin\n".encode(), 0o644)
    files["/etc/group"] = (f"nonroot:x:{NONROOT}:\n".encode(), 0o644)
    ca = "/etc/ssl/certs/ca-certificates.crt"
    if os.path.exists(ca):
        with open(ca, "rb") as f:
            files[ca] = (f.read(), 0o644)

    layer = layer_tar(files)
    layer_gz = gzip.compress(layer, compresslevel=6, mtime=0)
    config = {
        "architecture": "amd64" if os.uname().machine == "x86_64" else os.uname().machine,
        "os": "linux",
        "config": {
            "User": f"{NONROOT}:{NONROOT}",
            "Entrypoint": [args.entrypoint],
            "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"],
            "WorkingDir": "/",
            "Labels": {"org.opencontainers.image.title": args.name.rsplit("/", 1)[-1],
                       "org.opencontainers.image.version": args.tag},
        },
        "rootfs": {"type": "layers", "diff_ids": [digest(layer)]},
        "history": [{"created_by": "scripts/build-image.py"}],
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": digest(config_bytes), "size": len(config_bytes)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": digest(layer_gz), "size": len(layer_gz)}],
    }
    manifest_bytes = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    ref = f"{args.name}:{args.tag}"
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": manifest["mediaType"], "digest": digest(manifest_bytes),
                       "size": len(manifest_bytes),
                       "annotations": {"org.opencontainers.image.ref.name": args.tag,
                                       "io.containerd.image.name": ref}}],
    }
    blob = lambda d: "blobs/sha256/" + d.split(":", 1)[1]
    docker_manifest = [{"Config": blob(digest(config_bytes)), "RepoTags": [ref],
                        "Layers": [blob(digest(layer_gz))]}]

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp"
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar_add_bytes(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        tar_add_bytes(tar, "index.json", json.dumps(index, sort_keys=True).encode())
        tar_add_bytes(tar, "manifest.json", json.dumps(docker_manifest).encode())
        tar_add_dir(tar, "blobs")
        tar_add_dir(tar, "blobs/sha256")
        for data in sorted([config_bytes, manifest_bytes, layer_gz], key=digest):
            tar_add_bytes(tar, blob(digest(data)), data)
    os.replace(tmp, args.out)
    print(f"build-image: {ref} -> {args.out} ({len(layer_gz) // 1024} KiB layer, {len(files)} files, "
          f"manifest {digest(manifest_bytes)[:19]})")


if __name__ == "__main__":
    main()
