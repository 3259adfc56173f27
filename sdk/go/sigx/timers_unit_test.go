package sigx

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	pb "example.invalid/sigx/sdk/go/sigxpb"
)

type tickRecorder struct{ got []TimerTick }

func (r *tickRecorder) Invoke(context.Context, string, []byte) ([]byte, error) { return nil, nil }
func (r *tickRecorder) Tick(_ context.Context, t TimerTick) error {
	r.got = append(r.got, t)
	return nil
}

func TestATypeWithoutTickAndAWorkerAnswerTimerTurnsInvalid(t *testing.T) {
	rec := &tickRecorder{}
	app := NewApp("t")
	app.RegisterActor("Deaf", func() Actor {
		return HandlerFunc(func(context.Context, string, []byte) ([]byte, error) { return nil, nil })
	}, ActorOptions{})
	app.RegisterActor("Beeper", func() Actor { return rec }, ActorOptions{})
	app.RegisterWorker("Crew", HandlerFunc(func(context.Context, string, []byte) ([]byte, error) { return nil, nil }), WorkerOptions{})
	results := make(chan *pb.TurnResult, 4)
	s := &session{app: app, base: context.Background(), log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		opts: ServeOptions{Clock: wallClock{}},
		out:  func(m *pb.AppMessage) error { results <- m.GetResult(); return nil }}
	turn := func(id uint64, typ string) *pb.Turn {
		// Activation ids are unique per activation (the session keys activations by them).
		return &pb.Turn{TurnId: id, Actor: &pb.ActorRef{ActorType: typ, Key: "k"}, ActivationId: typ + "-1",
			Kind: &pb.Turn_Timer{Timer: &pb.TimerTick{Name: "beat", PeriodMs: 10, DueUnixMs: 5, Skipped: 2}}}
	}
	s.start(turn(1, "Deaf"))
	r := <-results
	if r.GetError().GetKind() != pb.ErrorKind_ERROR_KIND_INVALID ||
		!strings.HasPrefix(r.GetError().GetMessage(), `Deaf has no timer handler, but timer "beat" ticked; implement sigx.Ticker`) {
		t.Fatalf("actor without Tick: %v", r)
	}
	s.start(turn(2, "Crew"))
	r = <-results
	if r.GetError().GetKind() != pb.ErrorKind_ERROR_KIND_INVALID || r.GetError().GetMessage() != "Crew is a worker type: workers have no timers" {
		t.Fatalf("worker: %v", r)
	}
	s.start(turn(3, "Beeper"))
	if r = <-results; r.GetError() != nil {
		t.Fatalf("Beeper tick: %v", r)
	}
	want := TimerTick{Name: "beat", Period: 10 * time.Millisecond, Due: time.UnixMilli(5), Skipped: 2}
	if len(rec.got) != 1 || rec.got[0].Name != want.Name || rec.got[0].Period != want.Period ||
		!rec.got[0].Due.Equal(want.Due) || rec.got[0].Skipped != want.Skipped {
		t.Fatalf("ticks %+v, want [%+v]", rec.got, want)
	}
}

func TestSetTimerOutsideAnActorTurnIsInvalid(t *testing.T) {
	if _, err := SetTimer(context.Background(), "x", time.Second, 0, nil); err == nil ||
		!strings.Contains(err.Error(), "ctx is not a turn's") {
		t.Fatalf("outside a turn: %v", err)
	}
	worker := context.WithValue(context.Background(), turnKey{}, TurnInfo{Actor: ActorRef{Type: "Crew", Key: "k"}})
	if _, err := CancelTimer(worker, "x"); err == nil ||
		!strings.Contains(err.Error(), "CancelTimer: Crew is a worker type") {
		t.Fatalf("in a worker's turn: %v", err)
	}
}
