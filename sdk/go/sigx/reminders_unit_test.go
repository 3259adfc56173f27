package sigx

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	pb "example.invalid/sigx/sdk/go/sigxpb"
)

func TestATypeWithoutRemindAndAWorkerAnswerInvalid(t *testing.T) {
	app := NewApp("t")
	app.RegisterActor("Mute", func() Actor {
		return HandlerFunc(func(context.Context, string, []byte) ([]byte, error) { return nil, nil })
	}, ActorOptions{})
	app.RegisterWorker("Pool", HandlerFunc(func(context.Context, string, []byte) ([]byte, error) { return nil, nil }), WorkerOptions{})
	results := make(chan *pb.TurnResult, 4)
	s := &session{app: app, base: context.Background(), log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		opts: ServeOptions{Clock: wallClock{}},
		out:  func(m *pb.AppMessage) error { results <- m.GetResult(); return nil }}
	turn := func(id uint64, typ string) *pb.Turn {
		return &pb.Turn{TurnId: id, Actor: &pb.ActorRef{ActorType: typ, Key: "k"}, ActivationId: "a1",
			Kind: &pb.Turn_Reminder{Reminder: &pb.Reminder{Name: "nag", Attempt: 1}}}
	}
	s.start(turn(1, "Mute"))
	r := <-results
	if r.GetError().GetKind() != pb.ErrorKind_ERROR_KIND_INVALID ||
		!strings.HasPrefix(r.GetError().GetMessage(), `Mute has no reminder handler, but reminder "nag" came due; implement sigx.Reminderer`) {
		t.Fatalf("actor without Remind: %v", r)
	}
	s.start(turn(2, "Pool"))
	r = <-results
	if r.GetError().GetKind() != pb.ErrorKind_ERROR_KIND_INVALID || r.GetError().GetMessage() != "Pool is a worker type: workers have no reminders" {
		t.Fatalf("worker: %v", r)
	}
}
