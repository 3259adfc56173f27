package sigx

// Durable reminders (DESIGN.md §11): "wake me up later", by name, on an actor. The sidecar stores
// a reminder beside the actor's state; it outlives activations, hosts and restarts. When it is
// due the actor gets a turn wherever it lives (activated if need be) and its Reminderer's Remind
// runs, turn-based like Invoke, its Storage writes committed the same way. Delivery is at least
// once: a Remind that returns an error (or times out, or whose host dies) is retried with backoff
// for the same occurrence (Attempt 2, 3, ... up to 10; the same Due), so make it idempotent per
// (Name, Due). Returning a KindInvalid *ActorError abandons the occurrence at once.

import (
	"context"
	"fmt"
	"time"

	pb "example.invalid/sigx/sdk/go/sigxpb"
)

// Reminderer is implemented by actors that handle their due reminders. An actor type whose
// actors do not implement it answers a due reminder KindInvalid, and the sidecar drops it.
type Reminderer interface {
	Remind(ctx context.Context, r Reminder) error
}

// Reminder is one due occurrence of a reminder, as Remind sees it.
type Reminder struct {
	Name    string
	Payload []byte
	// Due is this occurrence's due time: the same on every retry, so (Name, Due) identifies it.
	Due time.Time
	// Period is 0 for a one-shot reminder.
	Period time.Duration
	// Attempt is 1 for the first delivery of this occurrence, 2 and up for retries.
	Attempt uint32
}

// ReminderInfo is a stored reminder, as ListReminders returns it.
type ReminderInfo struct {
	Name string
	// Due is its next due time.
	Due time.Time
	// Period is 0 for a one-shot reminder.
	Period  time.Duration
	Payload []byte
	// FailedAttempts of the current occurrence so far.
	FailedAttempts uint32
}

// Due is when a reminder is first due: DueAt(t) or DueIn(d).
type Due struct {
	at       time.Time
	in       time.Duration
	relative bool
}

// DueAt is due at t (a time in the past is due now).
func DueAt(t time.Time) Due { return Due{at: t} }

// DueIn is due d from now, on the sidecar's clock.
func DueIn(d time.Duration) Due { return Due{in: d, relative: true} }

func reminderFromPB(r *pb.Reminder) Reminder {
	return Reminder{Name: r.GetName(), Payload: r.GetPayload(), Due: time.UnixMilli(r.GetDueUnixMs()),
		Period: time.Duration(r.GetPeriodMs()) * time.Millisecond, Attempt: r.GetAttempt()}
}

// SetReminder sets (or replaces, by name) a durable reminder of the actor ref and returns its
// first due time. period 0 is a one-shot reminder, deleted once delivered; otherwise at least
// 100 ms. payload (at most 64 KiB) comes back with every occurrence. Bad input is a KindInvalid
// *ActorError with the sidecar's reason.
func (c *Client) SetReminder(ctx context.Context, ref ActorRef, name string, due Due, period time.Duration, payload []byte) (time.Time, error) {
	return c.setReminder(ctx, ref, name, due, period, payload, 0)
}

// setReminder is SetReminder fenced by epoch (0: unfenced).
func (c *Client) setReminder(ctx context.Context, ref ActorRef, name string, due Due, period time.Duration, payload []byte, epoch uint64) (time.Time, error) {
	if period < 0 {
		return time.Time{}, invalid("reminder %q has a negative period (%s); use 0 for one-shot", name, period)
	}
	req := &pb.SetReminderRequest{Actor: ref.pb(), Name: name, Payload: payload, Epoch: epoch}
	if period > 0 {
		// A positive period under 1 ms stays positive, so the sidecar names the minimum.
		req.PeriodMs = max(1, uint64(period.Milliseconds()))
	}
	if due.relative {
		req.Due = &pb.SetReminderRequest_DueInMs{DueInMs: uint64(max(0, due.in.Milliseconds()))}
	} else {
		if due.at.IsZero() {
			return time.Time{}, invalid("reminder %q has no due time: pass sigx.DueAt(t) or sigx.DueIn(d)", name)
		}
		req.Due = &pb.SetReminderRequest_DueUnixMs{DueUnixMs: due.at.UnixMilli()}
	}
	res, err := c.api.SetReminder(ctx, req)
	if err != nil {
		return time.Time{}, decodeErr(ctx, c.socket, err)
	}
	return time.UnixMilli(res.GetDueUnixMs()), nil
}

// DeleteReminder deletes a reminder by name and says whether it existed (absent is fine).
func (c *Client) DeleteReminder(ctx context.Context, ref ActorRef, name string) (bool, error) {
	return c.deleteReminder(ctx, ref, name, 0)
}

// deleteReminder is DeleteReminder fenced by epoch (0: unfenced).
func (c *Client) deleteReminder(ctx context.Context, ref ActorRef, name string, epoch uint64) (bool, error) {
	res, err := c.api.DeleteReminder(ctx, &pb.DeleteReminderRequest{Actor: ref.pb(), Name: name, Epoch: epoch})
	if err != nil {
		return false, decodeErr(ctx, c.socket, err)
	}
	return res.GetExisted(), nil
}

// ListReminders returns the actor's stored reminders, sorted by name.
func (c *Client) ListReminders(ctx context.Context, ref ActorRef) ([]ReminderInfo, error) {
	res, err := c.api.ListReminders(ctx, &pb.ListRemindersRequest{Actor: ref.pb()})
	if err != nil {
		return nil, decodeErr(ctx, c.socket, err)
	}
	out := make([]ReminderInfo, 0, len(res.GetReminders()))
	for _, r := range res.GetReminders() {
		out = append(out, ReminderInfo{Name: r.GetName(), Due: time.UnixMilli(r.GetDueUnixMs()),
			Period: time.Duration(r.GetPeriodMs()) * time.Millisecond, Payload: r.GetPayload(),
			FailedAttempts: r.GetFailedAttempts()})
	}
	return out, nil
}

// ActorHandle is one actor on one client: call it and manage its reminders.
type ActorHandle struct {
	Client *Client
	Ref    ActorRef
	// Fence is the epoch its reminder changes carry (0: unfenced). ThisActor sets it to the
	// turn's epoch: once a newer activation of the actor exists the store refuses them
	// (KindStaleEpoch, nothing changed), so an activation that outlived its lease cannot
	// rearrange its successor's reminders.
	Fence uint64
}

// Actor returns a handle on the actor ref.
func (c *Client) Actor(ref ActorRef) ActorHandle { return ActorHandle{Client: c, Ref: ref} }

// Call invokes method on the actor. See Client.Call.
func (h ActorHandle) Call(ctx context.Context, method string, payload []byte) ([]byte, error) {
	return h.Client.Call(ctx, h.Ref, method, payload)
}

// SetReminder sets (or replaces) a reminder of the actor. See Client.SetReminder.
func (h ActorHandle) SetReminder(ctx context.Context, name string, due Due, period time.Duration, payload []byte) (time.Time, error) {
	return h.Client.setReminder(ctx, h.Ref, name, due, period, payload, h.Fence)
}

// DeleteReminder deletes a reminder of the actor; whether it existed.
func (h ActorHandle) DeleteReminder(ctx context.Context, name string) (bool, error) {
	return h.Client.deleteReminder(ctx, h.Ref, name, h.Fence)
}

// ListReminders returns the actor's reminders, by name.
func (h ActorHandle) ListReminders(ctx context.Context) ([]ReminderInfo, error) {
	return h.Client.ListReminders(ctx, h.Ref)
}

// ThisActor returns, inside an actor's turn, a handle on that actor: set, delete and list its own
// reminders, fenced by the turn's epoch (see ActorHandle.Fence). ok is false outside a turn, in a
// worker's turn, or in an App served without a Client.
func ThisActor(ctx context.Context) (ActorHandle, bool) {
	t, ok := TurnFromContext(ctx)
	c, _ := ctx.Value(clientKey{}).(*Client)
	if !ok || c == nil || t.ActivationID == "" {
		return ActorHandle{}, false
	}
	return ActorHandle{Client: c, Ref: t.Actor, Fence: t.Epoch}, true
}

type clientKey struct{}

// remind runs a Reminder turn on act.
func remind(ctx context.Context, typ string, act Actor, r *pb.Reminder) error {
	h, ok := act.(Reminderer)
	if !ok {
		// KindInvalid: the sidecar abandons the occurrence instead of retrying it ten times.
		return &ActorError{Kind: KindInvalid, Message: fmt.Sprintf(
			"%s has no reminder handler, but reminder %q came due; implement sigx.Reminderer "+
				"(Remind(ctx, sigx.Reminder) error) on its actors, or delete the reminder", typ, r.GetName())}
	}
	return h.Remind(ctx, reminderFromPB(r))
}
