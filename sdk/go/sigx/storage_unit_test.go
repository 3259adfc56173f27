package sigx

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	pb "example.invalid/sigx/sdk/go/sigxpb"
)

// writer puts, deletes, and fails when asked: only its ok turns may carry writes.
func writer(ctx context.Context, method string, payload []byte) ([]byte, error) {
	st := StorageFromContext(ctx)
	st.Put("s", payload)
	st.Delete("gone")
	if method == "fail" {
		return nil, errors.New("failing after a put")
	}
	return nil, nil
}

func TestOnlyAnOkResultCarriesTheTurnsWritesInOrder(t *testing.T) {
	app := NewApp("t")
	app.RegisterActor("W", func() Actor { return HandlerFunc(writer) }, ActorOptions{})
	app.RegisterWorker("V", HandlerFunc(writer), WorkerOptions{})
	results := make(chan *pb.TurnResult, 8)
	s := &session{app: app, base: context.Background(), log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		opts: ServeOptions{Clock: &fakeClock{now: time.UnixMilli(1)}},
		out:  func(m *pb.AppMessage) error { results <- m.GetResult(); return nil }}
	turn := func(id uint64, typ, method string, epoch uint64) *pb.Turn {
		return &pb.Turn{TurnId: id, Actor: &pb.ActorRef{ActorType: typ, Key: "k"}, ActivationId: "a1", Epoch: epoch,
			Kind: &pb.Turn_Invoke{Invoke: &pb.Invoke{Method: method, Payload: []byte("v")}}}
	}
	next := func() *pb.TurnResult {
		select {
		case r := <-results:
			return r
		case <-time.After(5 * time.Second):
			t.Fatal("no answer")
			return nil
		}
	}
	s.start(turn(1, "W", "fail", 5))
	if r := next(); r.GetError().GetKind() != pb.ErrorKind_ERROR_KIND_APP || len(r.GetWrites()) != 0 {
		t.Fatalf("a failed turn answered %v; want APP and no writes", r)
	}
	s.start(turn(2, "W", "ok", 5))
	r := next()
	w := r.GetWrites()
	if r.GetError() != nil || len(w) != 2 || w[0].GetKey() != "s" || string(w[0].GetPut()) != "v" ||
		w[1].GetKey() != "gone" || !w[1].GetDelete() {
		t.Fatalf("an ok turn answered %v; want put s=v then delete gone", r)
	}
	s.start(turn(3, "V", "ok", 0))
	if r := next(); r.GetError().GetKind() != pb.ErrorKind_ERROR_KIND_INVALID || len(r.GetWrites()) != 0 {
		t.Fatalf("a worker's writes answered %v; want INVALID (workers have no state)", r)
	}
}
