package sigx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	pb "example.invalid/sigx/sdk/go/sigxpb"
)

// Why a running turn's ctx was cancelled. The first two are answered TIMEOUT at once (the turn
// may have run in part); the third needs no answer (the stream is gone).
var (
	errNotAfter   = errors.New("sigx: the turn reached its not-after (the caller's deadline or the host's lease)")
	errFenced     = errors.New("sigx: the host fenced")
	errStreamGone = errors.New("sigx: the Serve stream ended")
)

// activation is one live actor; sem (capacity 1) serialises its turns unless reentrant. The
// sidecar already sends one turn at a time; the SDK must not break that, and keeps it so even
// for a turn whose predecessor was answered TIMEOUT while its handler still runs.
type activation struct {
	actor Actor
	sem   chan struct{}
}

type session struct {
	app    *App
	client *Client
	opts   ServeOptions
	log    *slog.Logger
	base   context.Context
	// out sends on the Serve stream (a func so unit tests can capture the answers).
	out func(*pb.AppMessage) error

	sendMu sync.Mutex

	mu     sync.Mutex
	fenced bool
	// gone: the stream ended (dropAll(errStreamGone)); a turn the reader begins after that is
	// cancelled at once, unanswered.
	gone        bool
	activations map[string]*activation
	running     map[uint64]*runningTurn
}

// runningTurn is one turn between begin and its answer.
type runningTurn struct {
	s        *session
	id       uint64
	ctx      context.Context
	cancel   context.CancelCauseFunc
	answered atomic.Bool
}

// reply answers the turn unless it was answered already.
func (t *runningTurn) reply(out []byte, terr *pb.TurnError, writes []*pb.StateWrite) {
	if t.answered.CompareAndSwap(false, true) {
		t.s.answer(t.id, out, terr, writes)
	}
}

// abort cancels the turn's ctx with cause. Cancelled at not-after or by the fence, the turn is
// answered TIMEOUT at once, whatever the handler does later (a handler that ignores ctx keeps
// running, but its answer is discarded); the first cause is the one answered.
func (t *runningTurn) abort(cause error) {
	t.cancel(cause)
	switch c := context.Cause(t.ctx); c {
	case errNotAfter, errFenced:
		t.reply(nil, &pb.TurnError{Kind: pb.ErrorKind_ERROR_KIND_TIMEOUT,
			Message: c.Error() + "; the turn was cancelled and may have run in part"}, nil)
	}
}

// turnContext is the parent of a turn's ctx: it carries the turn's values (TurnInfo, Storage,
// the Client and the trace) in one allocation rather than a chain of context.WithValue.
type turnContext struct {
	context.Context
	info   TurnInfo
	state  *Storage
	client *Client
}

func (c *turnContext) Value(key any) any {
	switch key.(type) {
	case turnKey:
		return c.info
	case storageKey:
		return c.state
	case clientKey:
		if c.client != nil {
			return c.client
		}
	case traceKey:
		// Calls made with the turn's ctx continue its trace.
		if c.info.Trace.Traceparent != "" {
			return c.info.Trace
		}
	}
	return c.Context.Value(key)
}

func (s *session) send(m *pb.AppMessage) {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	// A failed send means the stream broke: the receive side reports it.
	_ = s.out(m)
}

// answer sends one turn's result; writes go only with an ok outcome (a failed turn writes nothing).
func (s *session) answer(id uint64, out []byte, terr *pb.TurnError, writes []*pb.StateWrite) {
	r := &pb.TurnResult{TurnId: id}
	if terr != nil {
		r.Outcome = &pb.TurnResult_Error{Error: terr}
	} else {
		r.Outcome = &pb.TurnResult_Ok{Ok: out}
		r.Writes = writes
	}
	s.send(&pb.AppMessage{Msg: &pb.AppMessage_Result{Result: r}})
}

// fence cancels every running turn (each is answered TIMEOUT) and drops every activation
// without running Deactivate: another host may already hold the actors.
func (s *session) fence() {
	s.mu.Lock()
	s.fenced = true
	s.mu.Unlock()
	s.dropAll(errFenced)
}

func (s *session) dropAll(cause error) {
	s.mu.Lock()
	running := s.running
	s.running, s.activations = nil, nil
	s.gone = s.gone || cause == errStreamGone
	s.mu.Unlock()
	for _, t := range running {
		t.abort(cause)
	}
}

// start runs one turn in a goroutine of its own, bounded by its not-after. The serving loop
// uses begin instead and runs the turn on the goroutine that read it (see reader).
func (s *session) start(t *pb.Turn) {
	if run := s.begin(t); run != nil {
		go run()
	}
}

// bootLeft is the time left before a boot-clock not-after (nil: not set, or the Clock has no
// boot clock).
func (s *session) bootLeft(notAfterBootMs uint64) *time.Duration {
	bc, ok := s.opts.Clock.(BootClock)
	if notAfterBootMs == 0 || !ok {
		return nil
	}
	now, ok := bc.Boot()
	if !ok {
		return nil
	}
	left := time.Duration(notAfterBootMs)*time.Millisecond - now
	return &left
}

// begin does the part of turn t that follows the stream's order: it refuses the turn (fenced,
// or read at or past its not-after: answered at once, and begin returns nil) or registers it as
// running, cancellable by the fence and bounded by its not-after. It returns the rest of the
// turn, which runs the handler and answers: the caller runs it on a goroutine that may block.
func (s *session) begin(t *pb.Turn) func() {
	id := t.GetTurnId()
	now := s.opts.Clock.Now()
	na := t.GetNotAfterUnixMs()
	s.mu.Lock()
	fenced := s.fenced
	s.mu.Unlock()
	if fenced {
		s.answer(id, nil, &pb.TurnError{Kind: pb.ErrorKind_ERROR_KIND_UNREACHABLE,
			Message: "the host fenced before this turn was read; it never ran"}, nil)
		return nil
	}
	if na != 0 && now.UnixMilli() >= na {
		s.answer(id, nil, &pb.TurnError{Kind: pb.ErrorKind_ERROR_KIND_UNREACHABLE, Message: fmt.Sprintf(
			"the turn was read %d ms past its not-after; it never ran", now.UnixMilli()-na)}, nil)
		return nil
	}
	var deadline time.Time // the earlier of the two bounds, on the wall clock (zero: none)
	if na != 0 {
		deadline = time.UnixMilli(na)
	}
	bootLeft := s.bootLeft(t.GetNotAfterBootMs())
	if bootLeft != nil {
		if *bootLeft <= 0 {
			s.answer(id, nil, &pb.TurnError{Kind: pb.ErrorKind_ERROR_KIND_UNREACHABLE, Message: fmt.Sprintf(
				"the turn was read %d ms past its not-after on the boot clock; it never ran",
				(-*bootLeft).Milliseconds())}, nil)
			return nil
		}
		if byBoot := now.Add(*bootLeft); deadline.IsZero() || byBoot.Before(deadline) {
			deadline = byBoot
		}
	}
	info := TurnInfo{Actor: ActorRef{Type: t.GetActor().GetActorType(), Key: t.GetActor().GetKey()},
		ActivationID: t.GetActivationId(), Epoch: t.GetEpoch(), NotAfter: deadline}
	if tr := t.GetTrace(); tr.GetTraceparent() != "" {
		info.Trace = TraceContext{Traceparent: tr.GetTraceparent(), Tracestate: tr.GetTracestate()}
	}
	tc := &turnContext{Context: s.base, info: info, client: s.client}
	var api pb.ActorHostClient
	if s.client != nil {
		api = s.client.api
	}
	tc.state = newState(api, t)
	rt := &runningTurn{s: s, id: id}
	rt.ctx, rt.cancel = context.WithCancelCause(tc)
	stop := func() bool { return false }
	if !deadline.IsZero() {
		stop = s.opts.Clock.AfterFunc(deadline.Sub(now), func() { rt.abort(errNotAfter) })
	}
	s.mu.Lock()
	if s.gone {
		s.mu.Unlock()
		stop()
		rt.cancel(errStreamGone)
		return nil
	}
	if s.running == nil {
		s.running = map[uint64]*runningTurn{}
	}
	s.running[id] = rt
	s.mu.Unlock()
	return func() {
		defer func() {
			stop()
			s.mu.Lock()
			delete(s.running, id)
			s.mu.Unlock()
			rt.cancel(nil)
		}()
		ctx := rt.ctx
		out, err := s.dispatch(ctx, t)
		if ctx.Err() != nil {
			return // answered by abort, or the stream is gone
		}
		if left := s.bootLeft(t.GetNotAfterBootMs()); (na != 0 && s.opts.Clock.Now().UnixMilli() >= na) ||
			(left != nil && *left <= 0) {
			rt.abort(errNotAfter) // finished past not-after: never ok
			return
		}
		var writes []*pb.StateWrite
		if err == nil {
			writes, err = tc.state.writes()
		}
		if err != nil {
			rt.reply(nil, toTurnError(err), nil)
		} else {
			rt.reply(out, nil, writes)
		}
	}
}

func invalid(format string, args ...any) error {
	return &ActorError{Kind: KindInvalid, Message: fmt.Sprintf(format, args...)}
}

// dispatch runs one turn to its worker or actor.
func (s *session) dispatch(ctx context.Context, t *pb.Turn) ([]byte, error) {
	typ := t.GetActor().GetActorType()
	if w, ok := s.app.workers[typ]; ok {
		if t.GetReminder() != nil {
			return nil, invalid("%s is a worker type: workers have no reminders", typ)
		}
		if t.GetTimer() != nil {
			return nil, invalid("%s is a worker type: workers have no timers", typ)
		}
		inv := t.GetInvoke()
		if inv == nil {
			return nil, nil // workers have no lifecycle
		}
		select {
		case w.slots <- struct{}{}:
			defer func() { <-w.slots }()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return w.worker.Invoke(ctx, inv.GetMethod(), inv.GetPayload())
	}
	at, ok := s.app.actors[typ]
	if !ok {
		return nil, invalid("this app serves no type %q", typ)
	}
	id := t.GetActivationId()
	switch k := t.GetKind().(type) {
	case *pb.Turn_Activate:
		_, err := s.activate(ctx, at, id)
		return nil, err
	case *pb.Turn_Invoke, *pb.Turn_Reminder, *pb.Turn_Timer:
		act, err := s.activation(ctx, at, id)
		if err != nil {
			return nil, err
		}
		if !at.opts.Reentrant {
			select {
			case act.sem <- struct{}{}:
				defer func() { <-act.sem }()
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if r, ok := k.(*pb.Turn_Reminder); ok {
			return nil, remind(ctx, typ, act.actor, r.Reminder)
		}
		if tt, ok := k.(*pb.Turn_Timer); ok {
			return nil, tick(ctx, typ, act.actor, tt.Timer)
		}
		inv := k.(*pb.Turn_Invoke).Invoke
		return act.actor.Invoke(ctx, inv.GetMethod(), inv.GetPayload())
	case *pb.Turn_Deactivate:
		s.mu.Lock()
		act := s.activations[id]
		delete(s.activations, id)
		s.mu.Unlock()
		if act == nil {
			return nil, nil
		}
		if d, ok := act.actor.(Deactivator); ok {
			return nil, d.Deactivate(ctx, DeactivateReason(k.Deactivate.GetReason()))
		}
		return nil, nil
	}
	return nil, invalid("turn %d has no kind this SDK knows", t.GetTurnId())
}

// activate makes and stores a new activation, running its Activate hook.
func (s *session) activate(ctx context.Context, at actorType, id string) (*activation, error) {
	act := &activation{actor: at.factory(), sem: make(chan struct{}, 1)}
	if a, ok := act.actor.(Activator); ok {
		if err := a.Activate(ctx); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.activations == nil {
		s.activations = map[string]*activation{}
	}
	s.activations[id] = act
	return act, nil
}

// activation finds the live activation id, activating it when this app does not have it (the
// app reconnected while the sidecar kept the activation).
func (s *session) activation(ctx context.Context, at actorType, id string) (*activation, error) {
	s.mu.Lock()
	act := s.activations[id]
	s.mu.Unlock()
	if act != nil {
		return act, nil
	}
	return s.activate(ctx, at, id)
}
