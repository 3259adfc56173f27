package sigx_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"example.invalid/sigx/sdk/go/sigx"
)

// delivery is one Remind call as the alarm saw it.
type delivery struct {
	key   string
	r     sigx.Reminder
	ranAt time.Time
}

type alarmLog struct {
	mu        sync.Mutex
	seen      []delivery
	activated []string
}

func (l *alarmLog) of(key string) []sigx.Reminder {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []sigx.Reminder
	for _, d := range l.seen {
		if d.key == key {
			out = append(out, d.r)
		}
	}
	return out
}

// alarm records every reminder delivery; a payload "fail-once" fails its first attempt.
type alarm struct{ log *alarmLog }

func (a *alarm) Activate(ctx context.Context) error {
	info, _ := sigx.TurnFromContext(ctx)
	a.log.mu.Lock()
	a.log.activated = append(a.log.activated, info.Actor.Key)
	a.log.mu.Unlock()
	return nil
}

func (a *alarm) Remind(ctx context.Context, r sigx.Reminder) error {
	info, _ := sigx.TurnFromContext(ctx)
	a.log.mu.Lock()
	a.log.seen = append(a.log.seen, delivery{info.Actor.Key, r, time.Now()})
	a.log.mu.Unlock()
	if string(r.Payload) == "fail-once" && r.Attempt == 1 {
		return sigx.Errorf("failing the first delivery on purpose")
	}
	sigx.StorageFromContext(ctx).Put("last", []byte(r.Name))
	return nil
}

func (a *alarm) Invoke(ctx context.Context, method string, payload []byte) ([]byte, error) {
	switch method {
	case "arm": // sets a reminder on this very actor from inside its own turn
		me, ok := sigx.ThisActor(ctx)
		if !ok {
			return nil, sigx.Errorf("no ThisActor inside a turn")
		}
		due, err := me.SetReminder(ctx, "self", sigx.DueIn(100*time.Millisecond), 0, payload)
		if err != nil {
			return nil, err
		}
		return []byte(strconv.FormatInt(due.UnixMilli(), 10)), nil
	case "last":
		v, _, err := sigx.StorageFromContext(ctx).Get(ctx, "last")
		return v, err
	}
	return nil, sigx.Errorf("no method %q", method)
}

func startAlarms(t *testing.T) (*sigx.Client, *alarmLog) {
	socket := socketDir(t)
	db := filepath.Join(filepath.Dir(socket), "state.db")
	sc := startSidecarEnv(t, socket, "SIGX_STATE=sqlite", "SIGX_STATE_PATH="+db)
	log := &alarmLog{}
	app := sigx.NewApp("go-reminders-test")
	app.RegisterActor("Alarm", func() sigx.Actor { return &alarm{log: log} }, sigx.ActorOptions{})
	app.RegisterWorker("Pool", sigx.HandlerFunc(func(context.Context, string, []byte) ([]byte, error) { return nil, nil }), sigx.WorkerOptions{})
	c, _, _, _ := runApp(t, app, socket, sc)
	return c, log
}

// until waits for check to hold (deliveries come on the sidecar's schedule).
func until(t *testing.T, what string, check func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !check() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within 10 s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// settled waits for the actor's reminders to be gone (a row settles after its turn answered).
func settled(t *testing.T, h sigx.ActorHandle) []sigx.ReminderInfo {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		list, err := h.ListReminders(callCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 0 || time.Now().After(deadline) {
			return list
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestAOneShotReminderActivatesTheActorRunsOnceAndIsGone(t *testing.T) {
	c, log := startAlarms(t)
	h := c.Actor(sigx.ActorRef{Type: "Alarm", Key: "one"})
	before := time.Now()
	due, err := h.SetReminder(callCtx(t), "wake", sigx.DueIn(300*time.Millisecond), 0, []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	// Relative to the sidecar's clock (the same machine's here).
	slack := 200 * time.Millisecond
	if due.Before(before.Add(300*time.Millisecond-slack)) || due.After(after.Add(300*time.Millisecond+slack)) {
		t.Fatalf("due %v is not ~300 ms after %v", due, before)
	}
	list, err := h.ListReminders(callCtx(t))
	if err != nil || len(list) != 1 || list[0].Name != "wake" || !list[0].Due.Equal(due) || list[0].Period != 0 || string(list[0].Payload) != "hello" {
		t.Fatalf("listed %+v, %v", list, err)
	}
	until(t, "the one-shot delivery", func() bool { return len(log.of("one")) > 0 })
	log.mu.Lock()
	activated, ranAt := append([]string(nil), log.activated...), log.seen[0].ranAt
	log.mu.Unlock()
	if fmt.Sprint(activated) != "[one]" {
		t.Fatalf("activations %v: the reminder should have activated the actor (nothing else called it)", activated)
	}
	r := log.of("one")[0]
	if r.Name != "wake" || string(r.Payload) != "hello" || !r.Due.Equal(due) || r.Period != 0 || r.Attempt != 1 {
		t.Fatalf("delivered %+v, want wake/hello/%v/0/1", r, due)
	}
	if ranAt.Before(due.Add(-5 * time.Millisecond)) {
		t.Fatalf("ran at %v, before its due time %v", ranAt, due)
	}
	if left := settled(t, h); len(left) != 0 {
		t.Fatalf("a delivered one-shot reminder is still listed: %+v", left)
	}
	if v, err := h.Call(callCtx(t), "last", nil); err != nil || string(v) != "wake" {
		t.Fatalf("the reminder turn's state write: %q, %v", v, err)
	}
	if n := len(log.of("one")); n != 1 {
		t.Fatalf("a one-shot reminder fired %d times", n)
	}
}

func TestAPeriodicReminderTicksByItsPeriodUntilDeleted(t *testing.T) {
	c, log := startAlarms(t)
	ref := sigx.ActorRef{Type: "Alarm", Key: "tick"}
	period := 300 * time.Millisecond
	first, err := c.SetReminder(callCtx(t), ref, "tick", sigx.DueAt(time.Now()), period, []byte("p"))
	if err != nil {
		t.Fatal(err)
	}
	until(t, "three ticks", func() bool { return len(log.of("tick")) >= 3 })
	if existed, err := c.DeleteReminder(callCtx(t), ref, "tick"); err != nil || !existed {
		t.Fatalf("delete: existed=%v, %v", existed, err)
	}
	ticks := log.of("tick")
	if !ticks[0].Due.Equal(first) {
		t.Fatalf("first tick due %v, set for %v", ticks[0].Due, first)
	}
	for i, tk := range ticks {
		if tk.Name != "tick" || string(tk.Payload) != "p" || tk.Period != period || tk.Attempt != 1 {
			t.Fatalf("tick %d: %+v", i, tk)
		}
		if i > 0 {
			if gap := tk.Due.Sub(ticks[i-1].Due); gap <= 0 || gap%period != 0 {
				t.Fatalf("due times %v -> %v are not spaced by the period %v", ticks[i-1].Due, tk.Due, period)
			}
		}
	}
	if list, err := c.ListReminders(callCtx(t), ref); err != nil || len(list) != 0 {
		t.Fatalf("after delete: %+v, %v", list, err)
	}
	afterDelete := len(log.of("tick"))
	time.Sleep(4 * period)
	// One delivery may already have been in flight when the delete landed.
	if n := len(log.of("tick")); n > afterDelete+1 {
		t.Fatalf("%d ticks after the delete (had %d)", n, afterDelete)
	}
	if existed, err := c.DeleteReminder(callCtx(t), ref, "tick"); err != nil || existed {
		t.Fatalf("second delete: existed=%v, %v", existed, err)
	}
}

func TestAFailedReminderDeliveryIsRetriedAsAttempt2OfTheSameOccurrence(t *testing.T) {
	c, log := startAlarms(t)
	h := c.Actor(sigx.ActorRef{Type: "Alarm", Key: "retry"})
	due, err := h.SetReminder(callCtx(t), "flaky", sigx.DueIn(0), 0, []byte("fail-once"))
	if err != nil {
		t.Fatal(err)
	}
	until(t, "the retry", func() bool { return len(log.of("retry")) >= 2 })
	got := log.of("retry")
	if got[0].Attempt != 1 || got[1].Attempt != 2 {
		t.Fatalf("attempts %d, %d; want 1, 2", got[0].Attempt, got[1].Attempt)
	}
	if !got[0].Due.Equal(due) || !got[1].Due.Equal(due) {
		t.Fatalf("due times %v, %v; a retry keeps the occurrence's %v", got[0].Due, got[1].Due, due)
	}
	if left := settled(t, h); len(left) != 0 {
		t.Fatalf("still listed after an ok retry: %+v", left)
	}
	if n := len(log.of("retry")); n != 2 {
		t.Fatalf("%d deliveries; the ok second attempt should have settled it", n)
	}
}

func TestAnActorSetsItsOwnReminderFromInsideATurn(t *testing.T) {
	c, log := startAlarms(t)
	out, err := c.Call(callCtx(t), sigx.ActorRef{Type: "Alarm", Key: "me"}, "arm", []byte("from-myself"))
	if err != nil {
		t.Fatal(err)
	}
	dueMs, _ := strconv.ParseInt(string(out), 10, 64)
	until(t, "the self-set reminder", func() bool { return len(log.of("me")) > 0 })
	r := log.of("me")[0]
	if r.Name != "self" || string(r.Payload) != "from-myself" || r.Attempt != 1 || r.Due.UnixMilli() != dueMs {
		t.Fatalf("delivered %+v, want self/from-myself/1 due %d", r, dueMs)
	}
}

func TestBadReminderInputIsInvalidWithTheSidecarsReason(t *testing.T) {
	c, _ := startAlarms(t)
	h := c.Actor(sigx.ActorRef{Type: "Alarm", Key: "bad"})
	cases := []struct {
		name   string
		period time.Duration
		ref    sigx.ActorRef
		want   string
	}{
		{"fast", 50 * time.Millisecond, h.Ref, "period of 50 ms, under the minimum of 100 ms"},
		{"", 0, h.Ref, "a reminder name must be 1..=256 bytes (got 0 bytes)"},
		{"x", 0, sigx.ActorRef{Type: "Pool", Key: "k"}, "workers have no reminders"},
	}
	for _, tc := range cases {
		_, err := c.SetReminder(callCtx(t), tc.ref, tc.name, sigx.DueIn(time.Second), tc.period, nil)
		var ae *sigx.ActorError
		if !errors.As(err, &ae) || ae.Kind != sigx.KindInvalid || !strings.Contains(ae.Message, tc.want) {
			t.Errorf("set %q period %v on %v: %v; want KindInvalid containing %q", tc.name, tc.period, tc.ref, err, tc.want)
		}
	}
	if list, err := h.ListReminders(callCtx(t)); err != nil || len(list) != 0 {
		t.Fatalf("bad input stored something: %+v, %v", list, err)
	}
}

// lapse keeps each activation's ThisActor handle past its end, and deactivates 400 ms after its
// last call, so the next call gets a newer activation (and epoch).
type lapse struct{ log *lapseLog }

type lapseLog struct {
	mu     sync.Mutex
	kept   []sigx.ActorHandle
	lapsed []uint64
}

func (l *lapse) Deactivate(ctx context.Context, reason sigx.DeactivateReason) error {
	info, _ := sigx.TurnFromContext(ctx)
	l.log.mu.Lock()
	defer l.log.mu.Unlock()
	if reason == sigx.DeactivateIdle {
		l.log.lapsed = append(l.log.lapsed, info.Epoch)
	}
	return nil
}

func (l *lapse) Invoke(ctx context.Context, method string, _ []byte) ([]byte, error) {
	me, ok := sigx.ThisActor(ctx)
	if !ok {
		return nil, sigx.Errorf("no ThisActor inside a turn")
	}
	l.log.mu.Lock()
	l.log.kept = append(l.log.kept, me)
	l.log.mu.Unlock()
	if _, err := me.SetReminder(ctx, "mine", sigx.DueIn(time.Hour), 0, nil); err != nil {
		return nil, err
	}
	info, _ := sigx.TurnFromContext(ctx)
	return []byte(strconv.FormatUint(info.Epoch, 10)), nil
}

func TestThisActorCarriesItsEpochAndASupersededOneChangesNothing(t *testing.T) {
	socket := socketDir(t)
	db := filepath.Join(filepath.Dir(socket), "state.db")
	sc := startSidecarEnv(t, socket, "SIGX_STATE=sqlite", "SIGX_STATE_PATH="+db)
	log := &lapseLog{}
	app := sigx.NewApp("go-reminder-fence-test")
	app.RegisterActor("Lapse", func() sigx.Actor { return &lapse{log: log} }, sigx.ActorOptions{IdleTimeout: 400 * time.Millisecond})
	c, _, _, _ := runApp(t, app, socket, sc)
	ref := sigx.ActorRef{Type: "Lapse", Key: "l"}
	epochOf := func() uint64 {
		out, err := c.Call(callCtx(t), ref, "keep", nil)
		if err != nil {
			t.Fatal(err)
		}
		e, _ := strconv.ParseUint(string(out), 10, 64)
		return e
	}
	first := epochOf()
	until(t, "the idle deactivation", func() bool { log.mu.Lock(); defer log.mu.Unlock(); return len(log.lapsed) > 0 })
	second := epochOf()
	log.mu.Lock()
	old, current, lapsed := log.kept[0], log.kept[1], log.lapsed
	log.mu.Unlock()
	if second <= first || lapsed[0] != first || old.Fence != first || current.Fence != second {
		t.Fatalf("epochs %d then %d, lapsed %v, fences %d/%d", first, second, lapsed, old.Fence, current.Fence)
	}
	stale := func(what string, err error) {
		t.Helper()
		var ae *sigx.ActorError
		if !errors.As(err, &ae) || ae.Kind != sigx.KindStaleEpoch {
			t.Fatalf("%s by the superseded activation: %v, want KindStaleEpoch", what, err)
		}
	}
	// The first activation's handle is stale: the store refuses its set and delete.
	_, err := old.SetReminder(callCtx(t), "late", sigx.DueIn(time.Hour), 0, nil)
	stale("set", err)
	_, err = old.DeleteReminder(callCtx(t), "mine")
	stale("delete", err)
	names := func() string {
		list, err := c.Actor(ref).ListReminders(callCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range list {
			out = append(out, r.Name)
		}
		return strings.Join(out, ",")
	}
	if got := names(); got != "mine" {
		t.Fatalf("reminders after the refused changes: %q, want mine", got)
	}
	// The current activation's handle, and a client's unfenced one, still work.
	if existed, err := current.DeleteReminder(callCtx(t), "mine"); err != nil || !existed {
		t.Fatalf("delete by the current activation: %v %v", existed, err)
	}
	if _, err := c.Actor(ref).SetReminder(callCtx(t), "outside", sigx.DueIn(time.Hour), 0, nil); err != nil {
		t.Fatal(err)
	}
	if got := names(); got != "outside" {
		t.Fatalf("reminders: %q, want outside", got)
	}
}
