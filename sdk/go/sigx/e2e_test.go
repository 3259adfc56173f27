package sigx_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"example.invalid/sigx/sdk/go/sigx"
)

// counter is the test actor: incr counts, slow holds the turn, block waits for ctx, fail errs.
type counter struct {
	n        int
	inFlight *atomic.Int32
	maxSeen  *atomic.Int32
	events   *eventLog
	key      string
	causes   chan error
}

type eventLog struct {
	mu sync.Mutex
	ev []string
}

func (l *eventLog) add(e string) { l.mu.Lock(); l.ev = append(l.ev, e); l.mu.Unlock() }
func (l *eventLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprint(l.ev)
}

func (c *counter) Activate(ctx context.Context) error {
	info, _ := sigx.TurnFromContext(ctx)
	c.key = info.Actor.Key
	c.events.add("activate " + c.key)
	return nil
}

func (c *counter) Deactivate(_ context.Context, r sigx.DeactivateReason) error {
	c.events.add("deactivate " + c.key)
	return nil
}

func (c *counter) Invoke(ctx context.Context, method string, payload []byte) ([]byte, error) {
	now := c.inFlight.Add(1)
	defer c.inFlight.Add(-1)
	for m := c.maxSeen.Load(); now > m && !c.maxSeen.CompareAndSwap(m, now); m = c.maxSeen.Load() {
	}
	switch method {
	case "incr":
		c.n++
		return []byte(strconv.Itoa(c.n)), nil
	case "slow":
		time.Sleep(20 * time.Millisecond) // widens any overlap window; not an assertion
		c.n++
		return []byte(strconv.Itoa(c.n)), nil
	case "block":
		<-ctx.Done()
		c.causes <- context.Cause(ctx)
		return nil, ctx.Err()
	case "fail":
		return nil, sigx.Errorf("asked to fail: %s", payload)
	}
	return nil, &sigx.ActorError{Kind: sigx.KindInvalid, Message: "no method " + method}
}

type fixture struct {
	app      *sigx.App
	inFlight atomic.Int32
	maxSeen  atomic.Int32
	events   eventLog
	causes   chan error
}

func newFixture() *fixture {
	f := &fixture{app: sigx.NewApp("go-sdk-test"), causes: make(chan error, 16)}
	f.app.RegisterActor("Counter", func() sigx.Actor {
		return &counter{inFlight: &f.inFlight, maxSeen: &f.maxSeen, events: &f.events, causes: f.causes}
	}, sigx.ActorOptions{})
	f.app.RegisterWorker("Echo", sigx.HandlerFunc(func(ctx context.Context, m string, p []byte) ([]byte, error) {
		return append([]byte(m+":"), p...), nil
	}), sigx.WorkerOptions{MaxConcurrency: 4})
	return f
}

func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestServeAndCallWithTypedErrorsPerKind(t *testing.T) {
	socket := socketDir(t)
	sc := startSidecar(t, socket)
	f := newFixture()
	c, _, _, _ := runApp(t, f.app, socket, sc)
	a := sigx.ActorRef{Type: "Counter", Key: "a"}
	for want := 1; want <= 3; want++ {
		out, err := c.Call(callCtx(t), a, "incr", nil)
		if err != nil || string(out) != strconv.Itoa(want) {
			t.Fatalf("incr %d: %q, %v\n%s", want, out, err, sc.log)
		}
	}
	if out, err := c.Call(callCtx(t), sigx.ActorRef{Type: "Echo", Key: "x"}, "hi", []byte("there")); err != nil || string(out) != "hi:there" {
		t.Fatalf("worker: %q, %v", out, err)
	}
	var ae *sigx.ActorError
	_, err := c.Call(callCtx(t), a, "fail", []byte("x"))
	if !errors.As(err, &ae) || ae.Kind != sigx.KindApp || ae.Message != "asked to fail: x" {
		t.Fatalf("app error: %#v", err)
	}
	_, err = c.Call(callCtx(t), a, "nope", nil)
	if !errors.As(err, &ae) || ae.Kind != sigx.KindInvalid || ae.Message != "no method nope" {
		t.Fatalf("invalid from the handler: %#v", err)
	}
	_, err = c.Call(callCtx(t), sigx.ActorRef{Type: "NoSuchType", Key: "a"}, "get", nil)
	if !errors.As(err, &ae) || ae.Kind != sigx.KindInvalid || errors.Is(err, sigx.ErrOutcomeUnknown) {
		t.Fatalf("unknown type: %#v", err)
	}
	_, err = c.DispatchOn(callCtx(t), "no-such-host", sigx.ActorRef{Type: "Echo", Key: "x"}, "hi", nil)
	if !errors.As(err, &ae) || ae.Kind == sigx.KindApp {
		t.Fatalf("dispatch to an unknown host: %#v", err)
	}
	t.Logf("dispatch to an unknown host: %v", err)
	m, err := c.Members(callCtx(t), sigx.MembersFilter{AnyStatus: true})
	if err != nil || m.Version == 0 {
		t.Fatalf("members: %+v, %v", m, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	for view, err := range c.WatchMembers(ctx, sigx.MembersFilter{AnyStatus: true}) {
		if err != nil || view.Version < m.Version {
			t.Fatalf("watch: %+v, %v", view, err)
		}
		break
	}
	cancel()
	if got := f.events.String(); got != "[activate a]" {
		t.Fatalf("hooks: %s", got)
	}
	// No sidecar at all: the call never ran, so it is UNREACHABLE, not outcome unknown.
	gone, _ := sigx.Dial(socket + ".missing")
	defer gone.Close()
	_, err = gone.Call(callCtx(t), a, "incr", nil)
	if !errors.As(err, &ae) || ae.Kind != sigx.KindUnreachable {
		t.Fatalf("no sidecar: %#v", err)
	}
}

func TestConcurrentCallsToOneActorNeverOverlapInTheHandler(t *testing.T) {
	socket := socketDir(t)
	sc := startSidecar(t, socket)
	f := newFixture()
	c, _, _, _ := runApp(t, f.app, socket, sc)
	var wg sync.WaitGroup
	errs := make(chan error, 12)
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Call(callCtx(t), sigx.ActorRef{Type: "Counter", Key: "t"}, "slow", nil)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("call: %v", err)
		}
	}
	out, err := c.Call(callCtx(t), sigx.ActorRef{Type: "Counter", Key: "t"}, "incr", nil)
	if err != nil || string(out) != "13" {
		t.Fatalf("after 12 slow calls: %q, %v", out, err)
	}
	if m := f.maxSeen.Load(); m != 1 {
		t.Fatalf("%d turns of one activation ran at once, want 1", m)
	}
}

func TestACallDeadlineCancelsTheHandlerAtNotAfter(t *testing.T) {
	socket := socketDir(t)
	sc := startSidecar(t, socket)
	f := newFixture()
	c, _, _, _ := runApp(t, f.app, socket, sc)
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Call(ctx, sigx.ActorRef{Type: "Counter", Key: "n"}, "block", nil)
	var ae *sigx.ActorError
	if !errors.As(err, &ae) || ae.Kind != sigx.KindTimeout {
		t.Fatalf("blocked call: %#v\n%s", err, sc.log)
	}
	select {
	case cause := <-f.causes:
		if cause == nil || cause == context.Canceled {
			t.Fatalf("the handler's ctx ended with %v, want the not-after cause", cause)
		}
		t.Logf("handler cancelled after %v: %v", time.Since(start), cause)
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's ctx was not cancelled at the call's not-after")
	}
	// The activation is still usable after a cancelled turn.
	if out, err := c.Call(callCtx(t), sigx.ActorRef{Type: "Counter", Key: "n"}, "incr", nil); err != nil || string(out) != "1" {
		t.Fatalf("after the cancelled turn: %q, %v", out, err)
	}
}

func TestSidecarSigtermEndsTheSessionCleanlyAndARestartedSidecarIsServedAgain(t *testing.T) {
	socket := socketDir(t)
	sc := startSidecar(t, socket)
	f := newFixture()
	c, st, _, done := runApp(t, f.app, socket, sc)
	if _, err := c.Call(callCtx(t), sigx.ActorRef{Type: "Counter", Key: "z"}, "incr", nil); err != nil {
		t.Fatal(err)
	}
	sc.stop(t)
	if sc.err != nil {
		t.Fatalf("sidecar exit: %v\n%s", sc.err, sc.log)
	}
	st.waitFor(t, "sidecar-stopping", func(s sigx.State) bool { return s.Phase == sigx.PhaseSidecarStopping }, sc.log)
	for _, p := range st.phases() {
		if p == sigx.PhaseBroken {
			t.Fatalf("SIGTERM of the sidecar read as a broken stream: %v", st.phases())
		}
	}
	if got := f.events.String(); got != "[activate z deactivate z]" {
		t.Fatalf("hooks across the sidecar's drain: %s", got)
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned when the sidecar stopped (%v); it should wait for a successor", err)
	default:
	}
	// The stopping sidecar may still accept a Register before it exits: only a registration
	// after the successor started proves the reconnect.
	last := 0
	for _, s := range st.snapshot() {
		last = max(last, s.Session)
	}
	sc2 := startSidecar(t, socket)
	st.waitFor(t, "registered with the successor", registered(last+1), sc2.log)
	if out, err := c.Call(callCtx(t), sigx.ActorRef{Type: "Counter", Key: "z"}, "incr", nil); err != nil || string(out) != "1" {
		t.Fatalf("after the restart: %q, %v\n%s", out, err, sc2.log)
	}
}

func TestASidecarDyingMidCallIsOutcomeUnknownNotAnActorError(t *testing.T) {
	socket := socketDir(t)
	sc := startSidecar(t, socket)
	f := newFixture()
	c, _, _, _ := runApp(t, f.app, socket, sc)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Call(callCtx(t), sigx.ActorRef{Type: "Counter", Key: "k"}, "block", nil)
		errc <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for f.inFlight.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the blocking turn never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = sc.cmd.Process.Signal(syscall.SIGKILL)
	err := <-errc
	var ae *sigx.ActorError
	if !errors.Is(err, sigx.ErrOutcomeUnknown) || errors.As(err, &ae) {
		t.Fatalf("a call cut by the sidecar's death: %#v", err)
	}
	t.Logf("cut call: %v", err)
}

func TestCancellingRunDrainsTheAppWithDeactivationHooks(t *testing.T) {
	socket := socketDir(t)
	sc := startSidecar(t, socket)
	f := newFixture()
	c, st, cancel, done := runApp(t, f.app, socket, sc)
	if _, err := c.Call(callCtx(t), sigx.ActorRef{Type: "Counter", Key: "d"}, "incr", nil); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after drain: %v", err)
		}
	case <-time.After(35 * time.Second):
		t.Fatalf("Run did not return after drain\n%s", sc.log)
	}
	done <- nil // for the cleanup's wait
	if got := f.events.String(); got != "[activate d deactivate d]" {
		t.Fatalf("hooks across the app's drain: %s", got)
	}
	if p := st.phases(); p[len(p)-1] != sigx.PhaseStopped {
		t.Fatalf("phases %v", p)
	}
}

// Payloads near the sidecar's 4 MiB limit cross both ways, several at once: the Client's static
// flow-control windows (no BDP pings) hold calls, turns and answers of that size on one
// connection.
func TestLargePayloadsCrossTheSidecarBothWaysConcurrently(t *testing.T) {
	socket := socketDir(t)
	sc := startSidecar(t, socket)
	f := newFixture()
	c, _, _, _ := runApp(t, f.app, socket, sc)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			payload := make([]byte, 3<<20)
			for j := range payload {
				payload[j] = byte(i + j)
			}
			out, err := c.Call(callCtx(t), sigx.ActorRef{Type: "Echo", Key: "x"}, "big", payload)
			if err != nil {
				errs <- err
				return
			}
			if want := append([]byte("big:"), payload...); string(out) != string(want) {
				errs <- fmt.Errorf("call %d: %d bytes back, not the %d sent", i, len(out), len(want))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("%v\n%s", err, sc.log)
	}
}
