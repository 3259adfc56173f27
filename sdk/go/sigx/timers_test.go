package sigx_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"example.invalid/sigx/sdk/go/sigx"
)

// seenTick is one Tick call as the beeper saw it.
type seenTick struct {
	key, activation string
	tick            sigx.TimerTick
}

type tickLog struct {
	mu          sync.Mutex
	ticks       []seenTick
	deactivated []seenTick // tick.Skipped holds how many ticks had run by then
}

func (l *tickLog) of(key string) []sigx.TimerTick {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []sigx.TimerTick
	for _, s := range l.ticks {
		if s.key == key {
			out = append(out, s.tick)
		}
	}
	return out
}

// beeper records every tick; its methods set and cancel timers from inside its own turns.
type beeper struct{ log *tickLog }

func (b *beeper) Tick(ctx context.Context, tk sigx.TimerTick) error {
	info, _ := sigx.TurnFromContext(ctx)
	b.log.mu.Lock()
	b.log.ticks = append(b.log.ticks, seenTick{info.Actor.Key, info.ActivationID, tk})
	b.log.mu.Unlock()
	return nil
}

func (b *beeper) Deactivate(ctx context.Context, _ sigx.DeactivateReason) error {
	info, _ := sigx.TurnFromContext(ctx)
	b.log.mu.Lock()
	defer b.log.mu.Unlock()
	b.log.deactivated = append(b.log.deactivated, seenTick{info.Actor.Key, info.ActivationID,
		sigx.TimerTick{Skipped: uint64(len(b.log.ticks))}})
	return nil
}

func (b *beeper) Invoke(ctx context.Context, method string, payload []byte) ([]byte, error) {
	info, _ := sigx.TurnFromContext(ctx)
	switch method {
	case "once":
		replaced, err := sigx.SetTimer(ctx, "once", 100*time.Millisecond, 0, payload)
		if err != nil || replaced {
			return nil, fmt.Errorf("set once: replaced %v, %w", replaced, err)
		}
		return []byte(info.ActivationID), nil
	case "every":
		ms, _ := strconv.Atoi(string(payload))
		if _, err := sigx.SetTimer(ctx, "beat", 0, time.Duration(ms)*time.Millisecond, []byte("p")); err != nil {
			return nil, err
		}
		return []byte(info.ActivationID), nil
	case "stop":
		existed, err := sigx.CancelTimer(ctx, string(payload))
		return []byte(strconv.FormatBool(existed)), err
	case "bad":
		var err error
		switch string(payload) {
		case "name":
			_, err = sigx.SetTimer(ctx, "", time.Second, 0, nil)
		case "delay":
			_, err = sigx.SetTimer(ctx, "far", 400*24*time.Hour, 0, nil)
		case "negative":
			_, err = sigx.SetTimer(ctx, "neg", -time.Second, 0, nil)
		}
		return nil, err
	}
	return nil, sigx.Errorf("no method %q", method)
}

func startBeepers(t *testing.T) (*sigx.Client, *tickLog) {
	socket := socketDir(t)
	sc := startSidecarEnv(t, socket)
	log := &tickLog{}
	app := sigx.NewApp("go-timers-test")
	app.RegisterActor("Beeper", func() sigx.Actor { return &beeper{log: log} }, sigx.ActorOptions{})
	// Deactivates 600 ms after its last call: ticks do not keep it alive.
	app.RegisterActor("Brief", func() sigx.Actor { return &beeper{log: log} }, sigx.ActorOptions{IdleTimeout: 600 * time.Millisecond})
	app.RegisterActor("Deaf", func() sigx.Actor {
		return sigx.HandlerFunc(func(ctx context.Context, _ string, _ []byte) ([]byte, error) {
			_, err := sigx.SetTimer(ctx, "unheard", 0, 0, nil)
			return []byte("armed"), err
		})
	}, sigx.ActorOptions{})
	app.RegisterWorker("Crew", sigx.HandlerFunc(func(ctx context.Context, _ string, _ []byte) ([]byte, error) {
		_, err := sigx.SetTimer(ctx, "nope", time.Second, 0, nil)
		return nil, err
	}), sigx.WorkerOptions{})
	c, _, _, _ := runApp(t, app, socket, sc)
	return c, log
}

func callTimer(t *testing.T, c *sigx.Client, typ, key, method, payload string) string {
	t.Helper()
	v, err := c.Call(callCtx(t), sigx.ActorRef{Type: typ, Key: key}, method, []byte(payload))
	if err != nil {
		t.Fatalf("%s/%s.%s(%q): %v", typ, key, method, payload, err)
	}
	return string(v)
}

func TestAOneShotTimerTicksOnceWithItsPayload(t *testing.T) {
	c, log := startBeepers(t)
	act := callTimer(t, c, "Beeper", "one", "once", "hello")
	until(t, "the one tick", func() bool { return len(log.of("one")) > 0 })
	log.mu.Lock()
	first := log.ticks[0]
	log.mu.Unlock()
	if first.activation != act {
		t.Fatalf("ticked in activation %q, set in %q: a tick is a turn of the activation that set it", first.activation, act)
	}
	if tk := first.tick; tk.Name != "once" || string(tk.Payload) != "hello" || tk.Period != 0 || tk.Skipped != 0 || tk.Due.IsZero() {
		t.Fatalf("tick %+v, want once/hello/one-shot", tk)
	}
	// Gone after its tick: cancelling finds nothing, and no second tick comes.
	if got := callTimer(t, c, "Beeper", "one", "stop", "once"); got != "false" {
		t.Fatalf("cancel after the one tick: existed=%s", got)
	}
	time.Sleep(300 * time.Millisecond)
	if n := len(log.of("one")); n != 1 {
		t.Fatalf("a one-shot timer ticked %d times", n)
	}
}

func TestAPeriodicTimerTicksByItsPeriodUntilCancelled(t *testing.T) {
	c, log := startBeepers(t)
	callTimer(t, c, "Beeper", "p", "every", "50")
	until(t, "three ticks", func() bool { return len(log.of("p")) >= 3 })
	if got := callTimer(t, c, "Beeper", "p", "stop", "beat"); got != "true" {
		t.Fatalf("cancel of a running periodic timer: existed=%s", got)
	}
	// The cancel ran in a turn of the (non-reentrant) activation, so no tick was running.
	seen := log.of("p")
	for i, tk := range seen {
		if tk.Name != "beat" || string(tk.Payload) != "p" || tk.Period != 50*time.Millisecond {
			t.Fatalf("tick %d: %+v", i, tk)
		}
		if i > 0 {
			// Due times keep the rhythm (within the ms rounding of the sidecar's clock readings).
			gap := tk.Due.Sub(seen[i-1].Due) - time.Duration(tk.Skipped+1)*50*time.Millisecond
			if gap < -2*time.Millisecond || gap > 2*time.Millisecond {
				t.Fatalf("tick %d due %v after the previous one, skipped %d", i, tk.Due.Sub(seen[i-1].Due), tk.Skipped)
			}
		}
	}
	time.Sleep(300 * time.Millisecond)
	if n := len(log.of("p")); n != len(seen) {
		t.Fatalf("%d ticks after CancelTimer returned", n-len(seen))
	}
	if got := callTimer(t, c, "Beeper", "p", "stop", "beat"); got != "false" {
		t.Fatalf("a cancelled timer still existed: %s", got)
	}
}

func TestATimerIsGoneOnceItsActivationDeactivates(t *testing.T) {
	c, log := startBeepers(t)
	first := callTimer(t, c, "Brief", "b", "every", "40")
	deadline := time.Now().Add(15 * time.Second)
	for {
		log.mu.Lock()
		n := len(log.deactivated)
		log.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no idle deactivation within 15 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	log.mu.Lock()
	d := log.deactivated[0]
	log.mu.Unlock()
	ticksThen := int(d.tick.Skipped)
	if d.key != "b" || d.activation != first || ticksThen < 3 {
		t.Fatalf("deactivated %+v; want b/%s after >= 3 ticks", d, first)
	}
	time.Sleep(400 * time.Millisecond)
	if n := len(log.of("b")); n != ticksThen {
		t.Fatalf("%d ticks ran after the activation deactivated", n-ticksThen)
	}
	// A new activation starts with no timers.
	if got := callTimer(t, c, "Brief", "b", "stop", "beat"); got != "false" {
		t.Fatalf("the new activation inherited the timer: existed=%s", got)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	for _, s := range log.ticks {
		if s.activation != first {
			t.Fatalf("a tick ran in activation %q, not the one that set it (%q)", s.activation, first)
		}
	}
}

func TestBadTimerInputAndAWorkerAreInvalid(t *testing.T) {
	c, log := startBeepers(t)
	for _, tc := range []struct{ typ, payload, want string }{
		{"Beeper", "name", "timer name of 0 bytes: names are 1..=256 bytes"},
		{"Beeper", "delay", "timer due_ms of 34560000000 ms exceeds the limit"},
		{"Beeper", "negative", `timer "neg" has a negative delay`},
		{"Crew", "", "SetTimer: Crew is a worker type, and timers belong to an actor's activation"},
	} {
		_, err := c.Call(callCtx(t), sigx.ActorRef{Type: tc.typ, Key: "bad"}, "bad", []byte(tc.payload))
		var ae *sigx.ActorError
		if !errors.As(err, &ae) || ae.Kind != sigx.KindInvalid || !strings.Contains(ae.Message, tc.want) {
			t.Fatalf("%s %q: got %v, want KindInvalid containing %q", tc.typ, tc.payload, err, tc.want)
		}
	}
	// A type without a Ticker answers its ticks INVALID: the sidecar counts a failed tick.
	if got := callTimer(t, c, "Deaf", "d", "arm", ""); got != "armed" {
		t.Fatalf("Deaf.arm: %q", got)
	}
	until(t, "the unhandled tick counted as failed", func() bool {
		st, err := c.Status(callCtx(t))
		return err == nil && st.GetCounters()["timerFailures"] >= 1
	})
	if n := len(log.of("d")); n != 0 {
		t.Fatalf("%d ticks reached a handler", n)
	}
}
