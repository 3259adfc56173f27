package sigx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/status"

	pb "example.invalid/sigx/sdk/go/sigxpb"
)

// Clock is the time source the serving loop reads not-after against; tests inject a fake one.
type Clock interface {
	Now() time.Time
	// AfterFunc runs f once d has passed; the returned stop cancels it.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// BootClock is an optional second method of a Clock: the machine's boot clock (Linux
// CLOCK_BOOTTIME), which a suspend advances and no wall-clock step moves. A Clock that has it
// judges turns by Turn.not_after_boot_ms too, so a wall clock stepped back across a VM suspend
// cannot make a turn queued before the suspend look in time. ok is false where there is none.
type BootClock interface {
	Boot() (since time.Duration, ok bool)
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func (wallClock) Boot() (time.Duration, bool) { return systemBoot() }
func (wallClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// Phase is where the serving loop is.
type Phase int

const (
	// PhaseConnecting: dialing the sidecar or registering.
	PhaseConnecting Phase = iota
	// PhaseRegistered: registered and serving turns.
	PhaseRegistered
	// PhaseSidecarStopping: the sidecar drained the app and ended the stream with OK (it is
	// stopping); the loop reconnects to its successor.
	PhaseSidecarStopping
	// PhaseBroken: the stream failed (the sidecar crashed, or never answered); the loop reconnects.
	PhaseBroken
	// PhaseStopped: Run returned.
	PhaseStopped
)

func (p Phase) String() string {
	return [...]string{"connecting", "registered", "sidecar-stopping", "broken", "stopped"}[p]
}

// State is reported to ServeOptions.OnState on every change.
type State struct {
	Phase Phase
	// HostID of the sidecar (PhaseRegistered).
	HostID string
	// Session counts registrations: 1 for the first, 2 after the first reconnect, ...
	Session int
	// Err says why, for PhaseBroken and PhaseConnecting retries.
	Err error
}

// ServeOptions tune Run. The zero value is fine.
type ServeOptions struct {
	// OnState, when set, is called (from the serving goroutine) on every state change.
	OnState func(State)
	// Clock defaults to the wall clock (not-after is wall-clock Unix time shared with the sidecar).
	Clock Clock
	// DrainTimeout bounds the wait for the sidecar to drain the app once ctx ends; default 30 s.
	DrainTimeout time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// ErrInvalidRegistration is wrapped by Run's error when the app's types are malformed or the
// sidecar refused them as invalid: retrying would be refused again.
var ErrInvalidRegistration = errors.New("sigx: the app's registration is invalid")

const registerTimeout = 10 * time.Second

// Run registers the app with the sidecar behind c and serves turns until ctx ends. Then it
// drains: it sends Drain and keeps answering turns (deactivations included) until the sidecar
// ends the stream, at most DrainTimeout, and returns nil. Pass a ctx from
// signal.NotifyContext(ctx, syscall.SIGTERM) to drain on SIGTERM. A missing, restarted or
// crashed sidecar is reconnected with capped backoff (100 ms doubling to 5 s). Run returns an
// error only for an invalid registration.
func (a *App) Run(ctx context.Context, c *Client, opts ServeOptions) error {
	if opts.Clock == nil {
		opts.Clock = wallClock{}
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	report := func(s State) {
		if opts.OnState != nil {
			opts.OnState(s)
		}
	}
	defer report(State{Phase: PhaseStopped})
	if len(a.errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidRegistration, errors.Join(a.errs...))
	}
	if len(a.order) == 0 {
		return fmt.Errorf("%w: register at least one actor or worker type before Run", ErrInvalidRegistration)
	}
	log := opts.Logger.With("app", a.name, "socket", c.socket)
	delay, sessions := 100*time.Millisecond, 0
	for {
		report(State{Phase: PhaseConnecting})
		s := &session{app: a, client: c, opts: opts, log: log}
		registered, err := s.run(ctx, sessions+1, report)
		if errors.Is(err, ErrInvalidRegistration) {
			return err
		}
		if ctx.Err() != nil {
			log.Info("sigx: stopped", "why", err)
			return nil
		}
		if registered {
			sessions++
			delay = 100 * time.Millisecond
		}
		if registered {
			log.Info("sigx: reconnecting to the sidecar", "after", delay, "why", err)
		} else {
			log.Debug("sigx: the sidecar is not there yet; retrying", "after", delay, "why", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		delay = min(delay*2, 5*time.Second)
	}
}

// errStreamEnded marks a stream the sidecar ended with OK.
var errStreamEnded = errors.New("the sidecar ended the stream (it is stopping)")

// run is one Serve session; it reports whether the app registered and why the session ended.
func (s *session) run(ctx context.Context, n int, report func(State)) (bool, error) {
	// The stream outlives ctx: when ctx ends the app drains over it instead of dropping it.
	streamCtx, cancelStream := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelStream()
	s.base = streamCtx
	stream, err := s.client.api.Serve(streamCtx)
	if err != nil {
		return false, decodeErr(streamCtx, s.client.socket, err)
	}
	s.out = stream.Send
	if err := stream.Send(&pb.AppMessage{Msg: &pb.AppMessage_Register{Register: s.app.register()}}); err != nil {
		return false, decodeErr(streamCtx, s.client.socket, err)
	}
	slow := time.AfterFunc(registerTimeout, cancelStream)
	first, err := stream.Recv()
	slow.Stop()
	if err != nil {
		if st, ok := status.FromError(err); ok {
			for _, d := range st.Details() {
				if ed, ok := d.(*pb.ErrorDetail); ok && ed.GetKind() == pb.ErrorKind_ERROR_KIND_INVALID {
					return false, fmt.Errorf("%w: %s", ErrInvalidRegistration, ed.GetMessage())
				}
			}
		}
		// WRONG_HOST (our previous session not yet gone), no sidecar yet: retried.
		report(State{Phase: PhaseConnecting, Err: err})
		return false, err
	}
	hostID := first.GetRegistered().GetHostId()
	s.log.Info("sigx: registered", "host", hostID, "session", n)
	report(State{Phase: PhaseRegistered, HostID: hostID, Session: n})

	ended := make(chan error, 1)
	r := &reader{s: s, recv: stream.Recv, ended: ended}
	r.waiting.Store(1)
	go r.read()
	defer s.dropAll(errStreamGone)
	done := ctx.Done()
	var drainTimeout <-chan time.Time
	for {
		select {
		case <-done:
			done = nil
			s.log.Info("sigx: draining")
			s.send(&pb.AppMessage{Msg: &pb.AppMessage_Drain{Drain: &pb.Drain{}}})
			drainTimeout = time.After(s.opts.DrainTimeout)
		case <-drainTimeout:
			return true, fmt.Errorf("the sidecar did not end the stream within %s of Drain", s.opts.DrainTimeout)
		case err := <-ended:
			if errors.Is(err, io.EOF) {
				if ctx.Err() != nil {
					return true, errors.New("drained: the sidecar ended the stream after Drain")
				}
				s.log.Info("sigx: the sidecar is stopping")
				report(State{Phase: PhaseSidecarStopping, HostID: hostID, Session: n})
				return true, errStreamEnded
			}
			s.log.Warn("sigx: the Serve stream broke", "err", err)
			report(State{Phase: PhaseBroken, HostID: hostID, Session: n, Err: err})
			return true, err
		}
	}
}

// maxWaitingReaders bounds the goroutines a session keeps waiting to read the stream once their
// turns are done: two, so that one reads while the other runs the turn it read, with no
// goroutine started per turn; a burst of turns that block starts more, and they end afterwards.
const maxWaitingReaders = 2

// reader reads the Serve stream with a few goroutines taking turns (leader and followers): the
// one holding mu reads a message and begins it in the stream's order, lets the next one read,
// then runs the turn itself. A turn thus reaches its handler without a hand-off to another
// goroutine, on a goroutine whose stack has already grown, and a handler that blocks never
// stalls the stream: when no other goroutine is waiting to read, the reader starts one first.
type reader struct {
	s     *session
	recv  func() (*pb.SidecarMessage, error)
	ended chan<- error // the stream's error, sent once (capacity 1)

	mu      sync.Mutex // held while reading and beginning one message
	stopped bool       // under mu: the stream ended, every reader returns
	// waiting counts the goroutines not running a turn: reading, or about to queue on mu.
	waiting atomic.Int32
}

func (r *reader) read() {
	for {
		r.mu.Lock()
		if r.stopped {
			r.mu.Unlock()
			return
		}
		m, err := r.recv()
		if err != nil {
			r.stopped = true
			r.mu.Unlock()
			r.ended <- err
			return
		}
		var run func()
		switch m.GetMsg().(type) {
		case *pb.SidecarMessage_Turn:
			run = r.s.begin(m.GetTurn())
		case *pb.SidecarMessage_Fenced:
			r.s.log.Warn("sigx: the host fenced; cancelling every turn and dropping every activation",
				"reason", m.GetFenced().GetReason())
			r.s.fence()
		}
		if run == nil {
			r.mu.Unlock()
			continue
		}
		if r.waiting.Add(-1) == 0 {
			r.waiting.Add(1)
			go r.read()
		}
		r.mu.Unlock()
		run()
		if r.waiting.Add(1) > maxWaitingReaders {
			r.waiting.Add(-1)
			return
		}
	}
}
