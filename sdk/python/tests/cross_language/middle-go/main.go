// The Go hop of the cross-language test (tests/test_cross_language.py): the actor Middle relays
// `call` to the Rust counter (or to req.type) with the same key and req.payload as the raw
// payload. An app or invalid error from below is answered with the same kind and message; any
// other kind as app, its message led by the kind this SDK decoded and its cause's
// ("activation: ... (cause unplaceable: ...)").
package main

import (
	"context"
	"encoding/json"
	"errors"
	"log"
	"os/signal"
	"syscall"
	"time"

	"example.invalid/sigx/sdk/go/sigx"
)

type request struct {
	Method  string `json:"method"`
	Payload string `json:"payload"`
	Type    string `json:"type"`
	SleepMs int    `json:"sleep_ms"`
	// DispatchOn, when set, makes one attempt at worker req.type on that host instead of a Call.
	DispatchOn string `json:"dispatch_on"`
}

type middle struct{ client *sigx.Client }

func (m middle) Invoke(ctx context.Context, method string, payload []byte) ([]byte, error) {
	if method != "call" {
		return nil, &sigx.ActorError{Kind: sigx.KindInvalid, Message: "Middle answers call, not " + method}
	}
	var r request
	if err := json.Unmarshal(payload, &r); err != nil {
		return nil, &sigx.ActorError{Kind: sigx.KindInvalid, Message: "Middle.call takes a JSON object: " + err.Error()}
	}
	if r.Method == "" {
		return nil, &sigx.ActorError{Kind: sigx.KindInvalid, Message: "Middle.call needs the method to call on the Rust counter"}
	}
	if r.SleepMs > 0 {
		select {
		case <-time.After(time.Duration(r.SleepMs) * time.Millisecond):
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
	typ := "Counter"
	if r.Type != "" {
		typ = r.Type
	}
	turn, _ := sigx.TurnFromContext(ctx)
	ref := sigx.ActorRef{Type: typ, Key: turn.Actor.Key}
	var out []byte
	var err error
	if r.DispatchOn != "" {
		out, err = m.client.DispatchOn(ctx, r.DispatchOn, ref, r.Method, []byte(r.Payload))
	} else {
		out, err = m.client.Call(ctx, ref, r.Method, []byte(r.Payload))
	}
	if err == nil {
		return out, nil
	}
	var ae *sigx.ActorError
	switch {
	case errors.As(err, &ae) && (ae.Kind == sigx.KindApp || ae.Kind == sigx.KindInvalid):
		return nil, &sigx.ActorError{Kind: ae.Kind, Message: ae.Message}
	case errors.As(err, &ae):
		msg := ae.Kind.String() + ": " + ae.Message
		var cause *sigx.ActorError
		if ae.Cause != nil && errors.As(ae.Cause, &cause) {
			msg += " (cause " + cause.Kind.String() + ": " + cause.Message + ")"
		}
		return nil, &sigx.ActorError{Kind: sigx.KindApp, Message: msg}
	case errors.Is(err, sigx.ErrOutcomeUnknown):
		return nil, &sigx.ActorError{Kind: sigx.KindApp, Message: "outcome-unknown: " + err.Error()}
	}
	return nil, err
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	client, err := sigx.Dial("") // $SIGX_SOCKET
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	app := sigx.NewApp("cross-middle-go")
	app.RegisterActor("Middle", func() sigx.Actor { return middle{client} }, sigx.ActorOptions{Methods: []string{"call"}})
	if err := app.Run(ctx, client, sigx.ServeOptions{}); err != nil {
		log.Fatal(err)
	}
}
