package sigx_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"example.invalid/sigx/sdk/go/sigx"
)

// sidecarBinary finds sigx-sidecar in $SIGX_BIN_DIR, $CARGO_TARGET_DIR/debug or ../../../target/debug.
func sidecarBinary(t *testing.T) string {
	var dirs []string
	if d := os.Getenv("SIGX_BIN_DIR"); d != "" {
		dirs = append(dirs, d)
	}
	if d := os.Getenv("CARGO_TARGET_DIR"); d != "" {
		dirs = append(dirs, filepath.Join(d, "debug"))
	}
	dirs = append(dirs, filepath.Join("..", "..", "..", "target", "debug"))
	for _, d := range dirs {
		p, _ := filepath.Abs(filepath.Join(d, "sigx-sidecar"))
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	t.Fatalf("no sigx-sidecar binary in %v: run `cargo build --workspace --bins` first, or point SIGX_BIN_DIR at it", dirs)
	return ""
}

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuf) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// sidecar is a real sigx-sidecar process (membership none, insecure) on socket.
type sidecar struct {
	cmd    *exec.Cmd
	log    *lockedBuf
	exited chan struct{}
	err    error
}

// socketDir is a short temp dir (a socket path has at most 108 bytes).
func socketDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "sigx-gosdk-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "s.sock")
}

func startSidecar(t *testing.T, socket string) *sidecar { return startSidecarEnv(t, socket) }

// startSidecarEnv is startSidecar with env (KEY=value) added, e.g. a state store.
func startSidecarEnv(t *testing.T, socket string, env ...string) *sidecar {
	s := &sidecar{log: &lockedBuf{}, exited: make(chan struct{})}
	s.cmd = exec.Command(sidecarBinary(t))
	s.cmd.Env = append(append(os.Environ(), "SIGX_SOCKET="+socket, "SIGX_MEMBERSHIP=none",
		"SIGX_HEALTH_ADDR=127.0.0.1:0", "SIGX_HOST_ID=gosdk", "SIGX_INSECURE=true"), env...)
	s.cmd.Stderr = s.log
	s.cmd.Stdout = io.Discard
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.err = s.cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() { s.stop(t) })
	return s
}

// stop SIGTERMs the sidecar and waits for it to exit.
func (s *sidecar) stop(t *testing.T) {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		t.Errorf("the sidecar did not exit within 30 s of SIGTERM\n%s", s.log)
	}
}

// states collects what Run reports, and lets a test wait for one.
type states struct {
	mu  sync.Mutex
	all []sigx.State
	ch  chan struct{}
}

func newStates() *states { return &states{ch: make(chan struct{}, 1000)} }

func (s *states) on(st sigx.State) {
	s.mu.Lock()
	s.all = append(s.all, st)
	s.mu.Unlock()
	s.ch <- struct{}{}
}

func (s *states) snapshot() []sigx.State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sigx.State(nil), s.all...)
}

func (s *states) phases() []sigx.Phase {
	s.mu.Lock()
	defer s.mu.Unlock()
	var p []sigx.Phase
	for _, st := range s.all {
		p = append(p, st.Phase)
	}
	return p
}

// waitFor waits until a state matching ok was reported.
func (s *states) waitFor(t *testing.T, what string, ok func(sigx.State) bool, log *lockedBuf) sigx.State {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		s.mu.Lock()
		for _, st := range s.all {
			if ok(st) {
				s.mu.Unlock()
				return st
			}
		}
		s.mu.Unlock()
		select {
		case <-s.ch:
		case <-deadline:
			t.Fatalf("no %s state within 20 s; saw %v\n%s", what, s.phases(), log)
		}
	}
}

func registered(session int) func(sigx.State) bool {
	return func(st sigx.State) bool { return st.Phase == sigx.PhaseRegistered && st.Session >= session }
}

// runApp runs app against the socket until the test ends; it returns the client, the states and
// a channel with Run's result.
func runApp(t *testing.T, app *sigx.App, socket string, sc *sidecar) (*sigx.Client, *states, context.CancelFunc, chan error) {
	c, err := sigx.Dial(socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	st := newStates()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, c, sigx.ServeOptions{OnState: st.on}) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(40 * time.Second):
			t.Error("Run did not return within 40 s of its ctx ending")
		}
	})
	st.waitFor(t, "registered", registered(1), sc.log)
	return c, st, cancel, done
}
