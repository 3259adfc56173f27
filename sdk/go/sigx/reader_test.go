package sigx

import (
	"context"
	"io"
	"testing"
	"time"

	pb "example.invalid/sigx/sdk/go/sigxpb"
)

// stuck is an actor whose "stuck" method ignores its ctx until release is closed.
type stuck struct {
	entered chan string
	release chan struct{}
}

func (s *stuck) Invoke(_ context.Context, method string, _ []byte) ([]byte, error) {
	s.entered <- method
	if method == "stuck" {
		<-s.release
	}
	return []byte(method), nil
}

// feed serves the session's stream from msgs through a reader, as Run does; closing msgs ends
// the stream with io.EOF, which the returned channel reports.
func feed(s *session, msgs chan *pb.SidecarMessage) (*reader, chan error) {
	ended := make(chan error, 1)
	r := &reader{s: s, ended: ended, recv: func() (*pb.SidecarMessage, error) {
		m, ok := <-msgs
		if !ok {
			return nil, io.EOF
		}
		return m, nil
	}}
	r.waiting.Store(1)
	go r.read()
	return r, ended
}

// enter waits for the next handler to enter and returns its method.
func (s *stuck) enter(t *testing.T) string {
	t.Helper()
	select {
	case m := <-s.entered:
		return m
	case <-time.After(5 * time.Second):
		t.Fatal("no handler entered: the stream is stalled")
		return ""
	}
}

// put sends m on the stream, failing when nothing reads it.
func put(t *testing.T, msgs chan<- *pb.SidecarMessage, m *pb.SidecarMessage) {
	t.Helper()
	select {
	case msgs <- m:
	case <-time.After(5 * time.Second):
		t.Fatal("nothing reads the stream: a running turn stalled it")
	}
}

func turnMsg(t *pb.Turn) *pb.SidecarMessage {
	return &pb.SidecarMessage{Msg: &pb.SidecarMessage_Turn{Turn: t}}
}

// The reader runs a turn on the goroutine that read it; that must not stall the stream: a turn
// that blocks (and ignores its ctx past its not-after) leaves other activations' turns running,
// while the next turn of its own activation still waits for it, TIMEOUT answered or not.
func TestABlockingTurnStallsOnlyItsOwnActivationNeverTheStream(t *testing.T) {
	s, clock, _, results := newTestSession(t)
	a := &stuck{entered: make(chan string, 8), release: make(chan struct{})}
	s.app.RegisterActor("S", func() Actor { return a }, ActorOptions{})
	msgs := make(chan *pb.SidecarMessage)
	_, ended := feed(s, msgs)
	turn := func(id uint64, activation, method string, notAfter int64) *pb.SidecarMessage {
		return turnMsg(&pb.Turn{TurnId: id, Actor: &pb.ActorRef{ActorType: "S", Key: activation},
			ActivationId: activation, NotAfterUnixMs: notAfter, Kind: &pb.Turn_Invoke{Invoke: &pb.Invoke{Method: method}}})
	}
	now := clock.Now().UnixMilli()

	put(t, msgs, turn(1, "a1", "stuck", now+100))
	if m := a.enter(t); m != "stuck" {
		t.Fatalf("entered %q", m)
	}
	// Other activations' turns run while turn 1 blocks, one after the other.
	for id := uint64(2); id <= 4; id++ {
		put(t, msgs, turn(id, "a2", "quick", 0))
		a.enter(t)
		if r := <-results; r.GetTurnId() != id || string(r.GetOk()) != "quick" {
			t.Fatalf("turn %d of another activation: %v", id, r)
		}
	}
	// Turn 1 passes its not-after: answered TIMEOUT at once, its handler still runs.
	clock.Advance(100 * time.Millisecond)
	wantResult(t, results, 1, pb.ErrorKind_ERROR_KIND_TIMEOUT)
	// The next turn of a1 waits for turn 1's handler, however long it takes.
	put(t, msgs, turn(5, "a1", "quick", 0))
	put(t, msgs, turn(6, "a2", "quick", 0)) // read (and run) while turn 5 waits
	if m := a.enter(t); m != "quick" {
		t.Fatalf("entered %q", m)
	}
	if r := <-results; r.GetTurnId() != 6 {
		t.Fatalf("answered %v, want turn 6 (turn 5 waits for turn 1)", r)
	}
	select {
	case m := <-a.entered:
		t.Fatalf("turn 5 entered (%q) while turn 1's handler still ran", m)
	case <-time.After(100 * time.Millisecond):
	}
	close(a.release)
	a.enter(t)
	if r := <-results; r.GetTurnId() != 5 || string(r.GetOk()) != "quick" {
		t.Fatalf("turn 5 after turn 1 returned: %v", r)
	}
	select {
	case r := <-results:
		t.Fatalf("turn 1 answered twice: %v", r)
	case <-time.After(50 * time.Millisecond):
	}
	close(msgs)
	if err := <-ended; err != io.EOF {
		t.Fatalf("the stream's end reported as %v", err)
	}
}

// Messages begin in the stream's order even though turns run on the goroutines that read
// them: a fence notice read after a turn cancels that turn, and a turn read after the fence
// never runs.
func TestTheReaderBeginsMessagesInStreamOrder(t *testing.T) {
	s, _, b, results := newTestSession(t)
	msgs := make(chan *pb.SidecarMessage)
	_, ended := feed(s, msgs)
	put(t, msgs, turnMsg(invoke(1, "block", 0)))
	<-b.entered
	put(t, msgs, &pb.SidecarMessage{Msg: &pb.SidecarMessage_Fenced{Fenced: &pb.FenceNotice{Reason: "test"}}})
	put(t, msgs, turnMsg(invoke(2, "quick", 0)))
	r1, r2 := <-results, <-results
	if r1.GetTurnId() == 2 {
		r1, r2 = r2, r1
	}
	if r1.GetTurnId() != 1 || r1.GetError().GetKind() != pb.ErrorKind_ERROR_KIND_TIMEOUT {
		t.Fatalf("the running turn at the fence: %v", r1)
	}
	if r2.GetTurnId() != 2 || r2.GetError().GetKind() != pb.ErrorKind_ERROR_KIND_UNREACHABLE {
		t.Fatalf("the turn read after the fence: %v", r2)
	}
	if cause := <-b.causes; cause != errFenced {
		t.Fatalf("cause %v, want the fence", cause)
	}
	close(msgs)
	<-ended
}

// When the stream ends, running turns are cancelled (cause errStreamGone) and unanswered, and a
// turn a reader begins after that (it raced the end) never runs.
func TestTheStreamsEndCancelsRunningTurnsAndLaterOnesNeverRun(t *testing.T) {
	s, _, b, results := newTestSession(t)
	s.start(invoke(1, "block", 0))
	<-b.entered
	s.dropAll(errStreamGone)
	if cause := <-b.causes; cause != errStreamGone {
		t.Fatalf("cause %v, want the stream's end", cause)
	}
	if run := s.begin(invoke(2, "quick", 0)); run != nil {
		t.Fatal("a turn begun after the stream ended would run")
	}
	select {
	case r := <-results:
		t.Fatalf("answered on a gone stream: %v", r)
	case <-b.entered:
		t.Fatal("a handler ran after the stream ended")
	case <-time.After(50 * time.Millisecond):
	}
}
