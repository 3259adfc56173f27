package sigx

import (
	"context"
	"fmt"
	"time"

	pb "example.invalid/sigx/sdk/go/sigxpb"
)

// Actor is one activation of a stateful actor type. Turns of one activation never overlap
// (unless the type is registered Reentrant), so an Actor needs no locking of its own state.
// ctx is cancelled at the turn's not-after (the caller's deadline or the host's lease) and when
// the host fences: a handler should return promptly then; its answer is discarded.
type Actor interface {
	Invoke(ctx context.Context, method string, payload []byte) ([]byte, error)
}

// Activator is implemented by actors that load state when activated. An error fails the
// activation and the call that caused it.
type Activator interface {
	Activate(ctx context.Context) error
}

// Deactivator is implemented by actors that save state before the activation ends. It is not
// run when the host fences (another host may already hold the actor).
type Deactivator interface {
	Deactivate(ctx context.Context, reason DeactivateReason) error
}

// DeactivateReason says why an activation ends.
type DeactivateReason int

const (
	DeactivateUnspecified DeactivateReason = DeactivateReason(pb.DeactivateReason_DEACTIVATE_REASON_UNSPECIFIED)
	DeactivateIdle        DeactivateReason = DeactivateReason(pb.DeactivateReason_DEACTIVATE_REASON_IDLE)
	DeactivateShutdown    DeactivateReason = DeactivateReason(pb.DeactivateReason_DEACTIVATE_REASON_SHUTDOWN)
	// DeactivateSuperseded: a newer activation of the actor exists; this one's state writes are
	// ignored (the store refused its epoch).
	DeactivateSuperseded DeactivateReason = DeactivateReason(pb.DeactivateReason_DEACTIVATE_REASON_SUPERSEDED)
)

// Worker is a stateless worker type: no identity, turns run concurrently up to MaxConcurrency.
type Worker interface {
	Invoke(ctx context.Context, method string, payload []byte) ([]byte, error)
}

// HandlerFunc adapts a function to Actor and Worker.
type HandlerFunc func(ctx context.Context, method string, payload []byte) ([]byte, error)

// Invoke calls f.
func (f HandlerFunc) Invoke(ctx context.Context, method string, payload []byte) ([]byte, error) {
	return f(ctx, method, payload)
}

// ActorOptions configure an actor type.
type ActorOptions struct {
	// Reentrant lets one activation run several turns at once.
	Reentrant bool
	// IdleTimeout before the activation is deactivated; 0 = the sidecar's default (5 minutes).
	IdleTimeout time.Duration
	// Methods the type answers; empty = any (the actor answers unknown ones itself).
	Methods []string
}

// WorkerOptions configure a worker type.
type WorkerOptions struct {
	// MaxConcurrency is how many turns may run at once on this host; 0 = the default (16).
	MaxConcurrency int
	// Methods the type answers; empty = any.
	Methods []string
}

type actorType struct {
	factory func() Actor
	opts    ActorOptions
}

type workerType struct {
	worker Worker
	slots  chan struct{} // one token per turn allowed to run at once
	opts   WorkerOptions
}

// App is the set of types an app serves. Register everything, then call Run.
type App struct {
	name    string
	actors  map[string]actorType
	workers map[string]*workerType
	order   []string
	errs    []error
}

// NewApp starts an app named name (for logs, e.g. "counter-app").
func NewApp(name string) *App {
	return &App{name: name, actors: map[string]actorType{}, workers: map[string]*workerType{}}
}

func (a *App) claim(name string) bool {
	if name == "" {
		a.errs = append(a.errs, fmt.Errorf("a type name is empty"))
		return false
	}
	_, isActor := a.actors[name]
	_, isWorker := a.workers[name]
	if isActor || isWorker {
		a.errs = append(a.errs, fmt.Errorf("type %q is registered twice; names are unique across actors and workers", name))
		return false
	}
	a.order = append(a.order, name)
	return true
}

// RegisterActor registers a stateful actor type; factory makes the Actor of each new activation.
// A bad registration (empty or duplicate name, nil factory) is reported by Run.
func (a *App) RegisterActor(name string, factory func() Actor, opts ActorOptions) {
	if factory == nil {
		a.errs = append(a.errs, fmt.Errorf("actor type %q has a nil factory", name))
		return
	}
	if a.claim(name) {
		a.actors[name] = actorType{factory: factory, opts: opts}
	}
}

// RegisterWorker registers a stateless worker type served by w.
func (a *App) RegisterWorker(name string, w Worker, opts WorkerOptions) {
	if w == nil {
		a.errs = append(a.errs, fmt.Errorf("worker type %q has a nil Worker", name))
		return
	}
	if opts.MaxConcurrency <= 0 {
		opts.MaxConcurrency = 16
	}
	if a.claim(name) {
		a.workers[name] = &workerType{worker: w, slots: make(chan struct{}, opts.MaxConcurrency), opts: opts}
	}
}

func (a *App) register() *pb.Register {
	r := &pb.Register{AppName: a.name}
	for _, n := range a.order {
		if t, ok := a.actors[n]; ok {
			r.Actors = append(r.Actors, &pb.ActorTypeSpec{Name: n, Reentrant: t.opts.Reentrant,
				IdleTimeoutMs: uint64(t.opts.IdleTimeout.Milliseconds()), Methods: t.opts.Methods})
		} else {
			w := a.workers[n]
			r.Workers = append(r.Workers, &pb.WorkerTypeSpec{Name: n,
				MaxConcurrency: uint32(w.opts.MaxConcurrency), Methods: w.opts.Methods})
		}
	}
	return r
}

// TurnInfo describes the turn a handler runs in; read it with TurnFromContext.
type TurnInfo struct {
	Actor ActorRef
	// ActivationID changes when the actor is deactivated and activated again (unique, not
	// ordered: fence external writes with Epoch). Empty for workers.
	ActivationID string
	// Epoch is the activation's fencing token for systems outside sigx: strictly greater than
	// every earlier activation's of this actor, fleet-wide. Store it with what you write there
	// and refuse a write whose epoch is lower than the one stored (compare, refuse lower).
	// 0 for workers.
	Epoch uint64
	// NotAfter is when the turn is cancelled (zero = no bound beyond the caller's deadline).
	NotAfter time.Time
	// Trace is the turn's W3C trace context (zero when the call that caused it was untraced):
	// the sidecar's turn span when it exports spans, else the caller's context. The handler's
	// ctx carries it (TraceFromContext), so calls made with that ctx continue the trace.
	Trace TraceContext
}

type turnKey struct{}

// TurnFromContext returns the turn a handler's ctx belongs to.
func TurnFromContext(ctx context.Context) (TurnInfo, bool) {
	t, ok := ctx.Value(turnKey{}).(TurnInfo)
	return t, ok
}
