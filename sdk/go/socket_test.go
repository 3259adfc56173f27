// Go's stock google.golang.org/grpc, default dial options, against a real sigx-sidecar
// (issue 15): serve turns, call, read errors with status.FromError, SIGTERM ends Serve with OK.
package sdk_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "example.invalid/sigx/sdk/go/sigxpb"
)

const typeURL = "type.googleapis.com/sigx.actors.v1.ErrorDetail"

// sidecarBinary finds sigx-sidecar in $SIGX_BIN_DIR, $CARGO_TARGET_DIR/debug or ../../target/debug.
func sidecarBinary(t *testing.T) string {
	var dirs []string
	if d := os.Getenv("SIGX_BIN_DIR"); d != "" {
		dirs = append(dirs, d)
	}
	if d := os.Getenv("CARGO_TARGET_DIR"); d != "" {
		dirs = append(dirs, filepath.Join(d, "debug"))
	}
	dirs = append(dirs, filepath.Join("..", "..", "target", "debug"))
	for _, d := range dirs {
		if p := filepath.Join(d, "sigx-sidecar"); fileExists(p) {
			return p
		}
	}
	t.Fatalf("no sigx-sidecar binary in %v: run `cargo build --workspace --bins` first, or point SIGX_BIN_DIR at it", dirs)
	return ""
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

type sidecar struct {
	cmd     *exec.Cmd
	target  string
	log     *bytes.Buffer
	exited  chan struct{} // closed once the process has exited; exitErr is then set
	exitErr error
}

func startSidecar(t *testing.T) *sidecar {
	dir, err := os.MkdirTemp("", "sigx-go-") // short: a socket path has at most 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "s.sock")
	s := &sidecar{target: "unix://" + socket, log: &bytes.Buffer{}, exited: make(chan struct{})}
	s.cmd = exec.Command(sidecarBinary(t))
	s.cmd.Env = append(os.Environ(), "SIGX_SOCKET="+socket, "SIGX_MEMBERSHIP=none",
		"SIGX_HEALTH_ADDR=127.0.0.1:0", "SIGX_HOST_ID=go-host", "SIGX_INSECURE=true")
	s.cmd.Stderr = &lockedWriter{w: s.log}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.exitErr = s.cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(30 * time.Second):
			_ = s.cmd.Process.Kill()
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		if fileExists(socket) || isSocket(socket) {
			c := newClient(t, s.target)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := c.Status(ctx, &pb.StatusRequest{})
			cancel()
			if err == nil {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("sigx-sidecar did not answer Status within 15 s:\n%s", s.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func isSocket(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode()&os.ModeSocket != 0
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// newClient dials with grpc-go's defaults: only the (required) transport credentials are given.
func newClient(t *testing.T, target string) pb.ActorHostClient {
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewActorHostClient(conn)
}

// counterApp serves the Counter type, one turn at a time: incr answers the new count, fail an
// APP error. end receives how the Serve stream ended (nil for OK).
type counterApp struct {
	hostID string
	mu     sync.Mutex
	events []string
	end    chan error
}

func (a *counterApp) seen() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.events...)
}

func serveCounter(t *testing.T, c pb.ActorHostClient) (*counterApp, error) {
	stream, err := c.Serve(context.Background())
	if err != nil {
		return nil, err
	}
	reg := &pb.AppMessage{Msg: &pb.AppMessage_Register{Register: &pb.Register{
		AppName: "go-counter", Actors: []*pb.ActorTypeSpec{{Name: "Counter"}},
	}}}
	if err := stream.Send(reg); err != nil {
		return nil, err
	}
	first, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	app := &counterApp{hostID: first.GetRegistered().GetHostId(), end: make(chan error, 1)}
	counts := map[string]int{}
	go func() {
		for {
			msg, err := stream.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				app.end <- err
				return
			}
			turn := msg.GetTurn()
			if turn == nil {
				continue
			}
			key := turn.GetActor().GetKey()
			result := &pb.TurnResult{TurnId: turn.GetTurnId(), Outcome: &pb.TurnResult_Ok{Ok: nil}}
			switch k := turn.GetKind().(type) {
			case *pb.Turn_Activate:
				counts[key] = 0
				app.record("activate " + key)
			case *pb.Turn_Deactivate:
				delete(counts, key)
				app.record("deactivate " + key)
			case *pb.Turn_Invoke:
				app.record("invoke " + key)
				if k.Invoke.GetMethod() == "incr" {
					counts[key]++
					result.Outcome = &pb.TurnResult_Ok{Ok: []byte(fmt.Sprint(counts[key]))}
				} else {
					result.Outcome = &pb.TurnResult_Error{Error: &pb.TurnError{
						Kind: pb.ErrorKind_ERROR_KIND_APP, Message: "asked to fail"}}
				}
			}
			if err := stream.Send(&pb.AppMessage{Msg: &pb.AppMessage_Result{Result: result}}); err != nil {
				app.end <- err
				return
			}
		}
	}()
	return app, nil
}

func (a *counterApp) record(e string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.events = append(a.events, e)
}

func call(c pb.ActorHostClient, actorType, key, method string, trailer *metadata.MD) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var opts []grpc.CallOption
	if trailer != nil {
		opts = append(opts, grpc.Trailer(trailer))
	}
	res, err := c.Call(ctx, &pb.CallRequest{
		Actor: &pb.ActorRef{ActorType: actorType, Key: key}, Method: method, TimeoutMs: 10_000,
	}, opts...)
	if err != nil {
		return "", err
	}
	return string(res.GetPayload()), nil
}

// detail reads an error with status.FromError, the standard helper, and finds the ErrorDetail.
func detail(t *testing.T, err error) (*status.Status, *pb.ErrorDetail) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("not a gRPC status: %v", err)
	}
	any := st.Proto().GetDetails()
	if len(any) != 1 || any[0].GetTypeUrl() != typeURL {
		t.Fatalf("details of %v are %v, want one %s", st, any, typeURL)
	}
	for _, d := range st.Details() {
		if ed, ok := d.(*pb.ErrorDetail); ok {
			return st, ed
		}
	}
	t.Fatalf("no ErrorDetail among %v", st.Details())
	return nil, nil
}

func TestAGoAppServesTurnsAndAGoClientCallsIt(t *testing.T) {
	s := startSidecar(t)
	app, err := serveCounter(t, newClient(t, s.target))
	if err != nil {
		t.Fatalf("Serve: %v\n%s", err, s.log)
	}
	if len(app.hostID) < 7 || app.hostID[:7] != "go-host" {
		t.Fatalf("host id %q", app.hostID)
	}
	caller := newClient(t, s.target)
	for want := 1; want <= 2; want++ {
		got, err := call(caller, "Counter", "a", "incr", nil)
		if err != nil || got != fmt.Sprint(want) {
			t.Fatalf("call %d: %q, %v", want, got, err)
		}
	}
	if got := fmt.Sprint(app.seen()); got != "[activate a invoke a invoke a]" {
		t.Fatalf("turns: %s", got)
	}

	var trailer metadata.MD
	_, err = call(caller, "Counter", "a", "fail", &trailer)
	st, ed := detail(t, err)
	if st.Code() != codes.Unknown || ed.GetKind() != pb.ErrorKind_ERROR_KIND_APP || ed.GetMessage() != "asked to fail" {
		t.Fatalf("app error: %v / %v", st, ed)
	}
	if k := trailer.Get("sigx-error-kind"); len(k) != 1 || k[0] != "app" {
		t.Fatalf("sigx-error-kind: %v", k)
	}
	_, err = call(caller, "NoSuchType", "a", "get", nil)
	if st, ed := detail(t, err); st.Code() != codes.InvalidArgument || ed.GetKind() != pb.ErrorKind_ERROR_KIND_INVALID {
		t.Fatalf("invalid: %v / %v", st, ed)
	}
	_, err = serveCounter(t, newClient(t, s.target))
	if st, ed := detail(t, err); st.Code() != codes.FailedPrecondition || ed.GetKind() != pb.ErrorKind_ERROR_KIND_WRONG_HOST {
		t.Fatalf("second app: %v / %v", st, ed)
	}
}

func TestSigtermEndsTheServeStreamWithOKAfterDeactivating(t *testing.T) {
	s := startSidecar(t)
	app, err := serveCounter(t, newClient(t, s.target))
	if err != nil {
		t.Fatalf("Serve: %v\n%s", err, s.log)
	}
	if got, err := call(newClient(t, s.target), "Counter", "z", "incr", nil); err != nil || got != "1" {
		t.Fatalf("call: %q, %v", got, err)
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-app.end:
		if err != nil {
			t.Fatalf("the Serve stream broke instead of ending with OK: %v\n%s", err, s.log)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the Serve stream did not end within 20 s of SIGTERM\n%s", s.log)
	}
	if got := fmt.Sprint(app.seen()); got != "[activate z invoke z deactivate z]" {
		t.Fatalf("turns: %s", got)
	}
	select {
	case <-s.exited:
		if s.exitErr != nil {
			t.Fatalf("sidecar exit: %v\n%s", s.exitErr, s.log)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the sidecar did not exit within 20 s")
	}
}

// TestStubsAreFresh regenerates sigxpb from proto/ with the standard generators and fails on
// any difference from the checked-in files.
func TestStubsAreFresh(t *testing.T) {
	out := t.TempDir()
	cmd := exec.Command("bash", "gen.sh", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gen.sh: %v\n%s", err, b)
	}
	files, _ := filepath.Glob(filepath.Join(out, "*.go"))
	have, _ := filepath.Glob(filepath.Join("sigxpb", "*.go"))
	if len(files) == 0 || len(files) != len(have) {
		t.Fatalf("generated %v, checked in %v", files, have)
	}
	for _, f := range files {
		want, _ := os.ReadFile(f)
		got, err := os.ReadFile(filepath.Join("sigxpb", filepath.Base(f)))
		if err != nil || !bytes.Equal(want, got) {
			t.Fatalf("sigxpb/%s is stale: run sdk/go/gen.sh", filepath.Base(f))
		}
	}
}
