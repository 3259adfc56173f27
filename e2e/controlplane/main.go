// Command sigx-controlplane is a test-only Kubernetes control plane: embedded etcd,
// kube-apiserver and kube-controller-manager, all in this one process, on 127.0.0.1.
//
// It exists so sigx's e2e tests talk to the real API server (its schema, CEL, RBAC,
// server-side apply and garbage collector) instead of only to the in-repo test double.
// It is not a cluster to run workloads on: there is no scheduler and no kubelet.
//
// Protocol with the test harness (e2e/src/controlplane.rs):
//   - it writes an admin kubeconfig to --kubeconfig;
//   - with --crds DIR it installs those CRDs before the controller manager starts;
//   - it prints exactly one line "ready <kubeconfig-path>" on stdout once /readyz answers ok
//     and the controller manager has created the default ServiceAccount;
//   - it shuts everything down and removes its data directory on SIGTERM, SIGINT or when
//     its stdin reaches EOF (so a harness that dies cannot leak it).
//
// Everything else (klog, etcd's log) goes to stderr.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "path to write the admin kubeconfig to (required)")
	dataDir := flag.String("data-dir", "", "directory for etcd data and certificates (default: a fresh temp dir, removed on exit)")
	crds := flag.String("crds", "", "directory of CustomResourceDefinition YAML files to install before the controller manager starts (optional)")
	startTimeout := flag.Duration("start-timeout", 120*time.Second, "give up if the control plane is not ready within this long")
	var apiserverArgs repeated
	flag.Var(&apiserverArgs, "apiserver-arg", "one more kube-apiserver flag, as --name=value (repeatable; later ones win), for tests that need a server configured otherwise")
	flag.Parse()
	if *kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "sigx-controlplane: --kubeconfig PATH is required (where to write the admin kubeconfig)")
		os.Exit(2)
	}
	if err := run(*kubeconfig, *dataDir, *crds, *startTimeout, apiserverArgs); err != nil {
		fmt.Fprintf(os.Stderr, "sigx-controlplane: %v\n", err)
		os.Exit(1)
	}
}

// repeated collects a flag given more than once.
type repeated []string

func (r *repeated) String() string     { return fmt.Sprint(*r) }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

func run(kubeconfigPath, dataDir, crdDir string, startTimeout time.Duration, apiserverArgs []string) error {
	removeDir := false
	if dataDir == "" {
		d, err := os.MkdirTemp("", "sigx-controlplane-")
		if err != nil {
			return fmt.Errorf("creating a temp dir: %w", err)
		}
		dataDir, removeDir = d, true
	}
	if removeDir {
		defer os.RemoveAll(dataDir)
	}
	kubeconfigPath, err := filepath.Abs(kubeconfigPath)
	if err != nil {
		return err
	}

	// stop is cancelled by a signal or by stdin EOF; everything shuts down from it.
	stop, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sigs
		cancel()
	}()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()

	pki, err := newPKI(filepath.Join(dataDir, "pki"))
	if err != nil {
		return fmt.Errorf("generating certificates: %w", err)
	}

	etcd, etcdURL, err := startEtcd(filepath.Join(dataDir, "etcd"))
	if err != nil {
		return fmt.Errorf("starting embedded etcd: %w", err)
	}
	defer etcd.Close()

	apiCtx, apiCancel := context.WithCancel(context.Background())
	defer apiCancel()
	apiURL, apiDone, err := startAPIServer(apiCtx, pki, etcdURL, apiserverArgs)
	if err != nil {
		return fmt.Errorf("starting kube-apiserver: %w", err)
	}
	if err := writeKubeconfig(kubeconfigPath, apiURL, pki); err != nil {
		return fmt.Errorf("writing the admin kubeconfig: %w", err)
	}

	readyCtx, readyCancel := context.WithTimeout(stop, startTimeout)
	defer readyCancel()
	client, err := waitReadyz(readyCtx, kubeconfigPath, apiDone)
	if err != nil {
		return fmt.Errorf("waiting for kube-apiserver /readyz: %w", err)
	}

	if crdDir != "" {
		if err := installCRDs(readyCtx, kubeconfigPath, crdDir); err != nil {
			return fmt.Errorf("installing the CRDs of %s: %w", crdDir, err)
		}
	}

	kcmCtx, kcmCancel := context.WithCancel(context.Background())
	defer kcmCancel()
	kcmDone, err := startControllerManager(kcmCtx, kubeconfigPath, pki)
	if err != nil {
		return fmt.Errorf("starting kube-controller-manager: %w", err)
	}
	if err := waitDefaultServiceAccount(readyCtx, client, kcmDone); err != nil {
		return fmt.Errorf("waiting for kube-controller-manager (the default ServiceAccount): %w", err)
	}

	fmt.Printf("ready %s\n", kubeconfigPath)
	_ = os.Stdout.Sync()

	var runErr error
	select {
	case <-stop.Done():
	case runErr = <-apiDone:
		runErr = fmt.Errorf("kube-apiserver stopped on its own: %v", runErr)
	case runErr = <-kcmDone:
		runErr = fmt.Errorf("kube-controller-manager stopped on its own: %v", runErr)
	}

	// Shut down in reverse order of start, each with a bound so a stuck component cannot
	// keep the process (and its ports) alive past the harness's patience.
	kcmCancel()
	waitOrTimeout(kcmDone, 10*time.Second, "kube-controller-manager")
	apiCancel()
	waitOrTimeout(apiDone, 20*time.Second, "kube-apiserver")
	return runErr
}

func waitOrTimeout(done <-chan error, d time.Duration, what string) {
	select {
	case err, ok := <-done:
		if ok && err != nil {
			fmt.Fprintf(os.Stderr, "sigx-controlplane: %s stopped with: %v\n", what, err)
		}
	case <-time.After(d):
		fmt.Fprintf(os.Stderr, "sigx-controlplane: %s did not stop within %s; exiting anyway\n", what, d)
	}
}
