package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/server/v3/embed"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	clientgofeatures "k8s.io/client-go/features"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/component-base/featuregate"
	apiserverapp "k8s.io/kubernetes/cmd/kube-apiserver/app"
	apiserveroptions "k8s.io/kubernetes/cmd/kube-apiserver/app/options"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kcmoptions "k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
)

// freePort asks the kernel for a free port on 127.0.0.1. The port is released before use, so a
// race with another process is possible but rare; a clash fails start-up loudly.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startEtcd starts a single-member etcd in dir. fsync is off: the data dies with the test.
func startEtcd(dir string) (*embed.Etcd, string, error) {
	clientPort, err := freePort()
	if err != nil {
		return nil, "", err
	}
	peerPort, err := freePort()
	if err != nil {
		return nil, "", err
	}
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.Name = "sigx"
	clientURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", clientPort)}
	peerURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", peerPort)}
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	cfg.UnsafeNoFsync = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", err
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, "", err
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, "", fmt.Errorf("etcd not ready after 60s")
	}
	return e, clientURL.String(), nil
}

// startAPIServer runs kube-apiserver with the flags a kubeadm cluster would use, scaled down:
// TLS on 127.0.0.1, client certificates from our CA, Node+RBAC authorization, ServiceAccount
// tokens signed with our key. `extra` flags come last, so they override these. The returned
// channel yields Run's error (or closes) when it stops.
func startAPIServer(ctx context.Context, p *pki, etcdURL string, extra []string) (string, <-chan error, error) {
	port, err := freePort()
	if err != nil {
		return "", nil, err
	}
	s := apiserveroptions.NewServerRunOptions()
	fs := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	for _, f := range s.Flags().FlagSets {
		fs.AddFlagSet(f)
	}
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--advertise-address=127.0.0.1",
		// The kubernetes Service's endpoints cannot be a loopback address, and nothing here
		// reaches the API server through that Service.
		"--endpoint-reconciler-type=none",
		"--tls-cert-file=" + p.ServingCert,
		"--tls-private-key-file=" + p.ServingKey,
		"--client-ca-file=" + p.CACert,
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + p.SAPub,
		"--service-account-signing-key-file=" + p.SAKey,
		"--service-cluster-ip-range=10.0.0.0/16",
		"--allow-privileged=true",
		"--profiling=false",
		"--cert-dir=" + p.dir,
	}
	args = append(args, extra...)
	if err := fs.Parse(args); err != nil {
		return "", nil, fmt.Errorf("kube-apiserver flags: %w", err)
	}
	if err := s.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
		return "", nil, err
	}
	completed, err := s.Complete(ctx)
	if err != nil {
		return "", nil, err
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return "", nil, fmt.Errorf("kube-apiserver options: %v", errs)
	}
	done := make(chan error, 1)
	go func() {
		defer close(done)
		if err := apiserverapp.Run(ctx, completed); err != nil {
			done <- err
		}
	}()
	return fmt.Sprintf("https://127.0.0.1:%d", port), done, nil
}

// startControllerManager runs the controllers sigx's tests rely on: the garbage collector
// (cascading deletion through owner references), Deployments and ReplicaSets (what the
// operator renders), ServiceAccounts and their tokens, and namespace deletion.
func startControllerManager(ctx context.Context, kubeconfig string, p *pki) (<-chan error, error) {
	// Kubernetes 1.34's controller manager turns WatchListClient on while it builds its flags
	// (OverrideDefaultAtVersion), which panics once the API server in this same process has
	// registered the feature gates on its flag set. Turning the gate on first makes that a
	// no-op: the controller manager runs with it on as it does in a real 1.34 cluster. From
	// 1.35 the gate is on by default and this changes nothing.
	watchList := featuregate.Feature(clientgofeatures.WatchListClient)
	if !utilfeature.DefaultFeatureGate.Enabled(watchList) {
		if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(map[string]bool{string(watchList): true}); err != nil {
			return nil, fmt.Errorf("turning on %s for the controller manager: %w", watchList, err)
		}
	}
	s, err := kcmoptions.NewKubeControllerManagerOptions()
	if err != nil {
		return nil, err
	}
	all, disabled, aliases := kcmapp.KnownControllers(), kcmapp.ControllersDisabledByDefault(), kcmapp.ControllerAliases()
	named := s.Flags(all, disabled, aliases)
	fs := pflag.NewFlagSet("kube-controller-manager", pflag.ContinueOnError)
	for _, f := range named.FlagSets {
		fs.AddFlagSet(f)
	}
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--controllers=garbage-collector-controller,deployment-controller,replicaset-controller," +
			"serviceaccount-controller,serviceaccount-token-controller,namespace-controller",
		"--leader-elect=false",
		"--secure-port=0",
		"--service-account-private-key-file=" + p.SAKey,
		"--root-ca-file=" + p.CACert,
		// Tests create and delete objects within seconds; the defaults (up to 20 concurrent
		// syncs, 30s resyncs) are tuned for big clusters, not for latency.
		"--concurrent-gc-syncs=5",
	}
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("kube-controller-manager flags: %w", err)
	}
	s.ParsedFlags = &named
	// The API server already Set() the shared registry from its own (empty) flags; setting
	// it again would only repeat that.
	cfg, err := s.Config(ctx, all, disabled, aliases)
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() {
		defer close(done)
		if err := kcmapp.Run(ctx, cfg.Complete()); err != nil {
			done <- err
		}
	}()
	return done, nil
}

func writeKubeconfig(path, server string, p *pki) error {
	ca, err := os.ReadFile(p.CACert)
	if err != nil {
		return err
	}
	crt, err := os.ReadFile(p.AdminCert)
	if err != nil {
		return err
	}
	key, err := os.ReadFile(p.AdminKey)
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["sigx"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: crt, ClientKeyData: key}
	cfg.Contexts["sigx"] = &clientcmdapi.Context{Cluster: "sigx", AuthInfo: "admin", Namespace: "default"}
	cfg.CurrentContext = "sigx"
	return clientcmd.WriteToFile(*cfg, path)
}

func waitReadyz(ctx context.Context, kubeconfig string, apiDone <-chan error) (*kubernetes.Clientset, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	last := "no answer yet"
	for {
		res := client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx)
		code := 0
		res.StatusCode(&code)
		if code == 200 {
			return client, nil
		}
		if err := res.Error(); err != nil {
			last = err.Error()
		}
		select {
		case err := <-apiDone:
			return nil, fmt.Errorf("kube-apiserver exited: %v", err)
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last answer: %s)", ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func waitDefaultServiceAccount(ctx context.Context, client *kubernetes.Clientset, kcmDone <-chan error) error {
	for {
		_, err := client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		select {
		case err := <-kcmDone:
			return fmt.Errorf("kube-controller-manager exited: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
