// Command bench is the SDK overhead bench of issue 15 for Go: an actor call through a real
// sigx-sidecar next to a raw google.golang.org/grpc unary echo over a Unix socket, measured in
// the same run.
//
//   - raw: a trivial grpc-go server (the generated ActorHost service, only Call, answering the
//     payload back) and a grpc-go client on a Unix socket, default options: the cost of one
//     unary round trip on Go's stock gRPC stack.
//   - sdk: sigx.Client.Call → the sigx-sidecar process (release build, $SIGX_BIN_DIR) → the
//     Serve stream → a sigx.App serving the Bench actor, whose echo returns the payload → back.
//
// Both sides live in this one process (client and server, as an app that calls actors does),
// like the Rust bench (e2e/benches/call.rs). The sequential calls of the two alternate in
// rounds blocks so both see the same machine; then concurrency callers for throughputFor each.
// Prints one `lang-bench` line of key=value figures that scripts/bench-lang.sh reads.
//
// Run: `make bench-lang`, or `cd sdk/go && SIGX_BIN_DIR=<dir with sigx-sidecar> go run ./bench`.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"example.invalid/sigx/sdk/go/sigx"
	pb "example.invalid/sigx/sdk/go/sigxpb"
)

const (
	rounds      = 6
	warmup      = 200
	concurrency = 32
)

var payload = func() []byte {
	b := make([]byte, 64)
	for i := range b {
		b[i] = 7
	}
	return b
}()

type rawEcho struct {
	pb.UnimplementedActorHostServer
}

func (rawEcho) Call(_ context.Context, r *pb.CallRequest) (*pb.CallResponse, error) {
	return &pb.CallResponse{Payload: r.GetPayload()}, nil
}

type bench struct{}

func (bench) Invoke(_ context.Context, _ string, p []byte) ([]byte, error) { return p, nil }

type figures struct{ p50, p99, perS float64 }

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func throughput(call func(int), d time.Duration) float64 {
	until := time.Now().Add(d)
	var done atomic.Int64
	var wg sync.WaitGroup
	for w := range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; time.Now().Before(until); i += concurrency {
				call(i)
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(done.Load()) / d.Seconds()
}

func measurePair(sequential int, d time.Duration, base, sdk func(int)) (figures, figures) {
	for i := range warmup {
		base(i)
		sdk(i)
	}
	calls := [2]func(int){base, sdk}
	var lat [2][]float64
	perRound := sequential / rounds
	for r := range rounds {
		for side, call := range calls {
			for i := r * perRound; i < (r+1)*perRound; i++ {
				t := time.Now()
				call(i)
				lat[side] = append(lat[side], float64(time.Since(t).Nanoseconds())/1e3)
			}
		}
	}
	var out [2]figures
	for side, call := range calls {
		s := lat[side]
		slices.Sort(s)
		p := func(q float64) float64 { return s[int(float64(len(s)-1)*q)] }
		out[side] = figures{p(0.50), p(0.99), throughput(call, d)}
	}
	return out[0], out[1]
}

// sidecarCmd is the started sidecar, killed by fail (os.Exit runs no deferred stop).
var sidecarCmd *exec.Cmd

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", a...)
	if sidecarCmd != nil && sidecarCmd.Process != nil {
		_ = sidecarCmd.Process.Kill()
	}
	os.Exit(1)
}

func main() {
	sequential := envInt("SIGX_BENCH_CALLS", 3000)
	d := time.Duration(envInt("SIGX_BENCH_THROUGHPUT_S", 2)) * time.Second
	binDir := os.Getenv("SIGX_BIN_DIR")
	bin := filepath.Join(binDir, "sigx-sidecar")
	if st, err := os.Stat(bin); binDir == "" || err != nil || st.IsDir() {
		fail("set SIGX_BIN_DIR to a directory holding sigx-sidecar (got %q)", binDir)
	}
	dir, err := os.MkdirTemp("", "sigx-gobench-")
	if err != nil {
		fail("%v", err)
	}
	defer os.RemoveAll(dir)
	socket := filepath.Join(dir, "s.sock")
	logf, err := os.Create(filepath.Join(dir, "sidecar.log"))
	if err != nil {
		fail("%v", err)
	}
	logLevel := os.Getenv("SIGX_LOG")
	if logLevel == "" {
		logLevel = "warn"
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "SIGX_SOCKET="+socket, "SIGX_MEMBERSHIP=none",
		"SIGX_HEALTH_ADDR=127.0.0.1:0", "SIGX_HOST_ID=go-bench", "SIGX_INSECURE=true", "SIGX_LOG="+logLevel)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		fail("%v", err)
	}
	sidecarCmd = cmd
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
		}
	}()

	// The raw echo: stock server and client, default options.
	rawPath := filepath.Join(dir, "raw.sock")
	lis, err := net.Listen("unix", rawPath)
	if err != nil {
		fail("%v", err)
	}
	server := grpc.NewServer()
	pb.RegisterActorHostServer(server, rawEcho{})
	go func() { _ = server.Serve(lis) }()
	defer server.Stop()
	conn, err := grpc.NewClient("unix://"+rawPath, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fail("%v", err)
	}
	defer conn.Close()
	raw := pb.NewActorHostClient(conn)
	req := &pb.CallRequest{Actor: &pb.ActorRef{ActorType: "Bench", Key: "k"}, Method: "echo", Payload: payload}
	ctx := context.Background()
	base := func(int) {
		res, err := raw.Call(ctx, req)
		if err != nil || len(res.GetPayload()) != len(payload) {
			fail("raw echo: %v", err)
		}
	}

	// The SDK path: this process serves Bench on the sidecar and calls it through the sidecar.
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := os.Stat(socket); err == nil {
			break
		}
		if time.Now().After(deadline) {
			fail("sigx-sidecar did not start; see its log")
		}
		time.Sleep(20 * time.Millisecond)
	}
	client, err := sigx.Dial(socket)
	if err != nil {
		fail("%v", err)
	}
	defer client.Close()
	app := sigx.NewApp("go-bench")
	app.RegisterActor("Bench", func() sigx.Actor { return bench{} }, sigx.ActorOptions{Methods: []string{"echo"}})
	// The app's own lifecycle lines (registered, draining) would interleave with the figures.
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	registered := make(chan struct{})
	var once sync.Once
	serveCtx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() {
		served <- app.Run(serveCtx, client, sigx.ServeOptions{Logger: quiet, OnState: func(s sigx.State) {
			if s.Phase == sigx.PhaseRegistered {
				once.Do(func() { close(registered) })
			}
		}})
	}()
	select {
	case <-registered:
	case <-time.After(20 * time.Second):
		fail("the app did not register within 20 s")
	}
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	viaSigx := func(i int) {
		res, err := client.Call(ctx, sigx.ActorRef{Type: "Bench", Key: keys[i%64]}, "echo", payload)
		if err != nil || len(res) != len(payload) {
			fail("sdk call: %v", err)
		}
	}
	rawF, sdkF := measurePair(sequential, d, base, viaSigx)
	stop()
	<-served

	grpcVersion := "?"
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range info.Deps {
			if m.Path == "google.golang.org/grpc" {
				grpcVersion = m.Version
			}
		}
	}
	fmt.Printf("lang-bench lang=go stack=grpc-go-%s calls=%d raw_p50_us=%.1f raw_p99_us=%.1f raw_per_s=%.0f sdk_p50_us=%.1f sdk_p99_us=%.1f sdk_per_s=%.0f\n",
		grpcVersion, sequential, rawF.p50, rawF.p99, rawF.perS, sdkF.p50, sdkF.p99, sdkF.perS)
}
