package sigx

import (
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	pb "example.invalid/sigx/sdk/go/sigxpb"
)

// bootedClock is a fakeClock with a boot clock the test moves on its own (a suspend moves it,
// a wall-clock step does not).
type bootedClock struct {
	*fakeClock
	bmu  sync.Mutex
	boot time.Duration
}

func (c *bootedClock) Boot() (time.Duration, bool) {
	c.bmu.Lock()
	defer c.bmu.Unlock()
	return c.boot, true
}

func withBoot(s *session, clock *fakeClock) *bootedClock {
	bc := &bootedClock{fakeClock: clock, boot: 500 * time.Second}
	s.opts.Clock = bc
	return bc
}

// Regression (issue 12, simulator schedule S_wall_step_back_inside_a_suspend): a turn queued
// before a VM suspend, read at the resume after the wall clock was stepped back. In time by the
// wall clock, past its not-after by the boot clock: refused, never run.
func TestATurnPastItsBootNotAfterIsRefusedThoughTheWallClockWasSteppedBack(t *testing.T) {
	s, clock, b, results := newTestSession(t)
	bc := withBoot(s, clock)
	queued := invoke(1, "quick", clock.Now().UnixMilli()+1000)
	queued.NotAfterBootMs = uint64((bc.boot + time.Second).Milliseconds())
	clock.now = clock.now.Add(4*time.Second - 30*time.Second) // a 4 s suspend, stepped back 30 s
	bc.boot += 4 * time.Second
	s.start(queued)
	r := wantResult(t, results, 1, pb.ErrorKind_ERROR_KIND_UNREACHABLE)
	if msg := r.GetError().GetMessage(); !strings.Contains(msg, "boot clock") {
		t.Fatalf("message %q does not name the boot clock", msg)
	}
	select {
	case <-b.entered:
		t.Fatal("the handler ran for a turn past its boot not-after")
	default:
	}
	// The same turn with a Clock that has no boot clock: the wall clock alone is fooled.
	s.opts.Clock = clock
	queued.TurnId = 2
	s.start(queued)
	if r := <-results; r.GetTurnId() != 2 || string(r.GetOk()) != "ran" {
		t.Fatalf("without a boot clock the turn should run: %v", r)
	}
}

func TestAHandlerStillRunningAtItsBootNotAfterIsCancelled(t *testing.T) {
	s, clock, b, results := newTestSession(t)
	bc := withBoot(s, clock)
	turn := invoke(7, "block", clock.Now().UnixMilli()+60_000) // the wall bound is a minute away
	turn.NotAfterBootMs = uint64((bc.boot + 500*time.Millisecond).Milliseconds())
	s.start(turn)
	wantCancelledAt500ms(t, clock, b, results, 7)
}

func TestTheSystemBootClockNeverRunsBehindTheMonotonicClock(t *testing.T) {
	b0, ok := wallClock{}.Boot()
	if runtime.GOOS != "linux" {
		if ok {
			t.Fatal("a boot clock off Linux")
		}
		return
	}
	if !ok {
		t.Fatal("Linux has CLOCK_BOOTTIME")
	}
	m0 := time.Now()
	time.Sleep(20 * time.Millisecond)
	m := time.Since(m0) // monotonic
	b1, _ := wallClock{}.Boot()
	if b1-b0 < m {
		t.Fatalf("boot advanced %v, monotonic %v", b1-b0, m)
	}
}
