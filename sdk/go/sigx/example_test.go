package sigx_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"example.invalid/sigx/sdk/go/sigx"
)

// TestTheCounterExampleServesAndDrainsOnSigterm builds examples/counter-go, runs it beside a real
// sidecar, calls it, and SIGTERMs it: it must drain (send Drain, answer the deactivation, see
// the stream end with OK) and exit 0.
func TestTheCounterExampleServesAndDrainsOnSigterm(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "counter-go")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = filepath.Join("..", "..", "..", "examples", "counter-go")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building examples/counter-go: %v\n%s", err, out)
	}
	socket := socketDir(t)
	sc := startSidecar(t, socket)
	app := exec.Command(bin)
	app.Env = append(os.Environ(), "SIGX_SOCKET="+socket)
	appLog := &lockedBuf{}
	app.Stderr = appLog
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- app.Wait() }()
	t.Cleanup(func() { _ = app.Process.Kill() })
	c, err := sigx.Dial(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The sidecar and the app start in their own time: retry while either is not there yet.
	deadline := time.Now().Add(20 * time.Second)
	var out []byte
	for {
		out, err = c.Call(callCtx(t), sigx.ActorRef{Type: "Counter", Key: "x"}, "incr", nil)
		var ae *sigx.ActorError
		if err == nil || !errors.As(err, &ae) || (ae.Kind != sigx.KindUnplaceable && ae.Kind != sigx.KindUnreachable) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || string(out) != "1" {
		t.Fatalf("first incr: %q, %v\napp: %s\nsidecar: %s", out, err, appLog, sc.log)
	}
	if out, err := c.Call(callCtx(t), sigx.ActorRef{Type: "Counter", Key: "x"}, "incr", nil); err != nil || string(out) != "2" {
		t.Fatalf("second incr: %q, %v", out, err)
	}
	_ = app.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the example exited with %v after SIGTERM\n%s", err, appLog)
		}
	case <-time.After(35 * time.Second):
		t.Fatalf("the example did not exit within 35 s of SIGTERM\n%s", appLog)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := c.Status(ctx)
	if err != nil || st.GetAppConnected() {
		t.Fatalf("after the app drained: %v, %v", st, err)
	}
}
