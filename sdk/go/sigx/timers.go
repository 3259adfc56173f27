package sigx

// Timers of an activation (DESIGN.md §11): "tick me while I am active", from inside a turn. A
// timer lives in the sidecar's memory and belongs to the activation that set it (SetTimer(ctx,
// ...) with the ctx of an Invoke, Activate or Tick). Its ticks are turns of that activation: the
// actor's Ticker.Tick runs one at a time with its other turns (unless reentrant), bounded like a
// call, its Storage writes committed the same way. A timer ends when cancelled, after its one
// tick (one-shot), or with the activation: a new activation starts with none, so set them again
// in Activate. Ticks do not reset the idle timeout, a failed tick is not retried, and a periodic
// timer skips ticks (TimerTick.Skipped) while the activation is busy rather than piling them up.
// For a wake-up that must survive the activation, use a durable reminder (SetReminder).

import (
	"context"
	"fmt"
	"time"

	pb "example.invalid/sigx/sdk/go/sigxpb"
)

// Ticker is implemented by actors that handle their timers' ticks. An actor type whose actors
// do not implement it answers a tick KindInvalid (the sidecar counts a failed tick).
type Ticker interface {
	Tick(ctx context.Context, t TimerTick) error
}

// TimerTick is one tick of a timer, as Tick sees it.
type TimerTick struct {
	Name    string
	Payload []byte
	// Period is 0 for a one-shot timer (this is its only tick, and it is gone already: setting
	// the name again sets a new timer).
	Period time.Duration
	// Due is when the tick was due, on the pod's wall clock (earlier than now when the
	// activation was busy).
	Due time.Time
	// Skipped counts ticks of this periodic timer skipped since the previous one, because it
	// was still queued or running when they fell due.
	Skipped uint64
}

func tickFromPB(t *pb.TimerTick) TimerTick {
	return TimerTick{Name: t.GetName(), Payload: t.GetPayload(),
		Period: time.Duration(t.GetPeriodMs()) * time.Millisecond,
		Due:    time.UnixMilli(t.GetDueUnixMs()), Skipped: t.GetSkipped()}
}

// timerOwner is the running activation's client and identity, or why there is none.
func timerOwner(ctx context.Context, what string) (*Client, TurnInfo, error) {
	t, ok := TurnFromContext(ctx)
	if !ok {
		return nil, t, invalid("%s: ctx is not a turn's; timers belong to an activation, set them "+
			"with the ctx of an actor's Invoke, Activate or Tick", what)
	}
	if t.ActivationID == "" {
		return nil, t, invalid("%s: %s is a worker type, and timers belong to an actor's "+
			"activation; register an actor type (App.RegisterActor)", what, t.Actor.Type)
	}
	c, _ := ctx.Value(clientKey{}).(*Client)
	if c == nil {
		return nil, t, invalid("%s: this App is served without a Client, so it cannot reach the "+
			"sidecar's timers; serve it with App.Serve", what)
	}
	return c, t, nil
}

func timerMillis(name, what string, d time.Duration) (uint64, error) {
	if d < 0 {
		return 0, invalid("timer %q has a negative %s (%s); use a duration >= 0", name, what, d)
	}
	if d > 0 {
		// A positive duration under 1 ms stays positive (a period of 0 means one-shot).
		return max(1, uint64(d.Milliseconds())), nil
	}
	return 0, nil
}

// SetTimer sets (or replaces, by name) an in-memory timer of the activation whose turn ctx
// belongs to: its first tick after from now, then every period (0: one tick). Each tick runs the
// actor's Ticker.Tick as a turn of that activation. Gone when the activation deactivates: use
// SetReminder for a wake-up that must outlive it. Returns whether a timer of that name was
// replaced. Outside an actor's turn (a worker's included), and for bad input (the sidecar's
// reason), the error is a KindInvalid *ActorError.
func SetTimer(ctx context.Context, name string, after, period time.Duration, payload []byte) (bool, error) {
	c, t, err := timerOwner(ctx, "SetTimer")
	if err != nil {
		return false, err
	}
	due, err := timerMillis(name, "delay", after)
	if err != nil {
		return false, err
	}
	every, err := timerMillis(name, "period", period)
	if err != nil {
		return false, err
	}
	res, err := c.api.SetTimer(ctx, &pb.SetTimerRequest{Actor: t.Actor.pb(), ActivationId: t.ActivationID,
		Name: name, DueMs: due, PeriodMs: every, Payload: payload})
	if err != nil {
		return false, decodeErr(ctx, c.socket, err)
	}
	return res.GetReplaced(), nil
}

// CancelTimer cancels the timer name of the activation whose turn ctx belongs to: no tick of it
// starts afterwards. Returns whether it existed (an unknown name is fine).
func CancelTimer(ctx context.Context, name string) (bool, error) {
	c, t, err := timerOwner(ctx, "CancelTimer")
	if err != nil {
		return false, err
	}
	res, err := c.api.CancelTimer(ctx, &pb.CancelTimerRequest{Actor: t.Actor.pb(),
		ActivationId: t.ActivationID, Name: name})
	if err != nil {
		return false, decodeErr(ctx, c.socket, err)
	}
	return res.GetExisted(), nil
}

// tick runs a TimerTick turn on act.
func tick(ctx context.Context, typ string, act Actor, t *pb.TimerTick) error {
	h, ok := act.(Ticker)
	if !ok {
		// KindInvalid: the sidecar counts a failed tick (never retried).
		return &ActorError{Kind: KindInvalid, Message: fmt.Sprintf(
			"%s has no timer handler, but timer %q ticked; implement sigx.Ticker "+
				"(Tick(ctx, sigx.TimerTick) error) on its actors, or cancel the timer", typ, t.GetName())}
	}
	return h.Tick(ctx, tickFromPB(t))
}
