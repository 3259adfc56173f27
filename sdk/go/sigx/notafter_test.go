package sigx

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	pb "example.invalid/sigx/sdk/go/sigxpb"
)

// fakeClock is a Clock that moves only when told; its timers fire on Advance.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at      time.Time
	f       func()
	stopped bool
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return func() bool { c.mu.Lock(); defer c.mu.Unlock(); was := !t.stopped; t.stopped = true; return was }
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []func()
	for _, t := range c.timers {
		if !t.stopped && !t.at.After(c.now) {
			t.stopped = true
			due = append(due, t.f)
		}
	}
	c.mu.Unlock()
	for _, f := range due {
		f()
	}
}

// blocker is an actor whose "block" method waits for its ctx and records why it ended.
type blocker struct {
	entered  chan struct{}
	causes   chan error
	deactive chan struct{}
}

func (b *blocker) Invoke(ctx context.Context, method string, _ []byte) ([]byte, error) {
	b.entered <- struct{}{}
	if method == "quick" {
		return []byte("ran"), nil
	}
	<-ctx.Done()
	b.causes <- context.Cause(ctx)
	return []byte("ok after cancel"), nil // must never reach the caller as ok
}

func (b *blocker) Deactivate(context.Context, DeactivateReason) error {
	close(b.deactive)
	return nil
}

func newTestSession(t *testing.T) (*session, *fakeClock, *blocker, chan *pb.TurnResult) {
	b := &blocker{entered: make(chan struct{}, 8), causes: make(chan error, 8), deactive: make(chan struct{})}
	app := NewApp("t")
	app.RegisterActor("B", func() Actor { return b }, ActorOptions{})
	clock := &fakeClock{now: time.UnixMilli(1_000_000)}
	results := make(chan *pb.TurnResult, 8)
	s := &session{app: app, base: context.Background(), log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		opts: ServeOptions{Clock: clock},
		out:  func(m *pb.AppMessage) error { results <- m.GetResult(); return nil }}
	return s, clock, b, results
}

func invoke(id uint64, method string, notAfter int64) *pb.Turn {
	return &pb.Turn{TurnId: id, Actor: &pb.ActorRef{ActorType: "B", Key: "k"}, ActivationId: "a1",
		NotAfterUnixMs: notAfter, Kind: &pb.Turn_Invoke{Invoke: &pb.Invoke{Method: method}}}
}

func wantResult(t *testing.T, results chan *pb.TurnResult, id uint64, kind pb.ErrorKind) *pb.TurnResult {
	t.Helper()
	select {
	case r := <-results:
		if r.GetTurnId() != id || r.GetError().GetKind() != kind {
			t.Fatalf("turn %d answered %v, want kind %v", r.GetTurnId(), r, kind)
		}
		return r
	case <-time.After(5 * time.Second):
		t.Fatalf("turn %d was not answered", id)
		return nil
	}
}

func TestATurnReadAtOrPastNotAfterIsRefusedUnreachableWithoutRunning(t *testing.T) {
	s, clock, b, results := newTestSession(t)
	now := clock.Now().UnixMilli()
	s.start(invoke(1, "quick", now)) // exactly at not-after
	wantResult(t, results, 1, pb.ErrorKind_ERROR_KIND_UNREACHABLE)
	s.start(invoke(2, "quick", now-5))
	wantResult(t, results, 2, pb.ErrorKind_ERROR_KIND_UNREACHABLE)
	select {
	case <-b.entered:
		t.Fatal("the handler ran for a turn past its not-after")
	default:
	}
	s.start(invoke(3, "quick", now+1)) // 1 ms to spare: runs
	if r := <-results; r.GetTurnId() != 3 || string(r.GetOk()) != "ran" {
		t.Fatalf("turn before its not-after: %v", r)
	}
}

// wantCancelledAt500ms checks that turn id, started just now with a not-after 500 ms away, is
// still running 1 ms before it and is answered TIMEOUT, its handler cancelled, at it.
func wantCancelledAt500ms(t *testing.T, clock *fakeClock, b *blocker, results chan *pb.TurnResult, id uint64) {
	t.Helper()
	<-b.entered
	clock.Advance(499 * time.Millisecond)
	select {
	case r := <-results:
		t.Fatalf("answered before its not-after: %v", r)
	case <-time.After(50 * time.Millisecond):
	}
	clock.Advance(time.Millisecond)
	wantResult(t, results, id, pb.ErrorKind_ERROR_KIND_TIMEOUT)
	if cause := <-b.causes; cause != errNotAfter {
		t.Fatalf("the handler's ctx ended with %v, want the not-after cause", cause)
	}
}

func TestAHandlerStillRunningAtNotAfterIsCancelledAndAnsweredTimeout(t *testing.T) {
	s, clock, b, results := newTestSession(t)
	s.start(invoke(7, "block", clock.Now().UnixMilli()+500))
	wantCancelledAt500ms(t, clock, b, results, 7)
	select {
	case r := <-results:
		t.Fatalf("a second answer for the cancelled turn: %v", r)
	case <-time.After(50 * time.Millisecond):
	}
}

func TestTheFenceNoticeCancelsRunningTurnsAndDropsActivationsWithoutDeactivating(t *testing.T) {
	s, clock, b, results := newTestSession(t)
	s.start(invoke(1, "block", 0)) // no not-after: only the fence ends it
	<-b.entered
	s.fence()
	wantResult(t, results, 1, pb.ErrorKind_ERROR_KIND_TIMEOUT)
	if cause := <-b.causes; cause != errFenced {
		t.Fatalf("cause %v, want the fence", cause)
	}
	if n := len(s.activations); n != 0 {
		t.Fatalf("%d activations survived the fence", n)
	}
	s.start(&pb.Turn{TurnId: 2, Actor: &pb.ActorRef{ActorType: "B", Key: "k"}, ActivationId: "a1",
		NotAfterUnixMs: clock.Now().UnixMilli() + 1000, Kind: &pb.Turn_Deactivate{Deactivate: &pb.Deactivate{}}})
	wantResult(t, results, 2, pb.ErrorKind_ERROR_KIND_UNREACHABLE)
	select {
	case <-b.deactive:
		t.Fatal("Deactivate ran after the fence")
	default:
	}
}

func TestWorkerTurnsRunAtMostMaxConcurrencyAtOnce(t *testing.T) {
	s, _, _, results := newTestSession(t)
	entered, release := make(chan struct{}, 8), make(chan struct{})
	s.app.RegisterWorker("W", HandlerFunc(func(ctx context.Context, _ string, _ []byte) ([]byte, error) {
		entered <- struct{}{}
		<-release
		return nil, nil
	}), WorkerOptions{MaxConcurrency: 2})
	for id := uint64(1); id <= 5; id++ {
		s.start(&pb.Turn{TurnId: id, Actor: &pb.ActorRef{ActorType: "W"}, Kind: &pb.Turn_Invoke{Invoke: &pb.Invoke{Method: "m"}}})
	}
	<-entered
	<-entered
	select {
	case <-entered:
		t.Fatal("a third worker turn ran while two held both slots")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	for range 5 {
		select {
		case r := <-results:
			if r.GetError() != nil {
				t.Fatalf("worker turn: %v", r)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("not every worker turn was answered")
		}
	}
}
