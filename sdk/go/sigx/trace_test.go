package sigx_test

import (
	"context"
	"encoding/json"
	"testing"

	"example.invalid/sigx/sdk/go/sigx"
)

// traceSeen is what one turn saw of its trace: its own, and (for "outer") the inner turn's.
type traceSeen struct {
	Turn  sigx.TraceContext
	Inner *traceSeen `json:",omitempty"`
}

// relay answers "inner" with its turn's trace; "outer" calls Relay/inner with the turn's ctx,
// "detached" with a fresh ctx (a call that does not continue the trace).
type relay struct{}

func (relay) Invoke(ctx context.Context, method string, _ []byte) ([]byte, error) {
	info, _ := sigx.TurnFromContext(ctx)
	seen := traceSeen{Turn: info.Trace}
	if tc, ok := sigx.TraceFromContext(ctx); ok != (info.Trace.Traceparent != "") || tc != info.Trace {
		return nil, sigx.Errorf("the turn's ctx carries %+v (%v), its TurnInfo %+v", tc, ok, info.Trace)
	}
	if method == "outer" || method == "detached" {
		self, _ := sigx.ThisActor(ctx)
		callCtx := ctx
		if method == "detached" {
			callCtx = context.Background()
		}
		out, err := self.Client.Call(callCtx, sigx.ActorRef{Type: "Relay", Key: info.Actor.Key + "-inner"}, "inner", nil)
		if err != nil {
			return nil, err
		}
		var inner traceSeen
		if err := json.Unmarshal(out, &inner); err != nil {
			return nil, err
		}
		seen.Inner = &inner
	}
	return json.Marshal(seen)
}

// A turn exposes its trace context, and a call made with the turn's ctx carries it: with the
// sidecar's export off the context passes through unchanged, so the nested turn sees exactly
// the outer caller's traceparent and tracestate.
func TestATurnExposesItsTraceAndANestedCallCarriesIt(t *testing.T) {
	socket := socketDir(t)
	sc := startSidecar(t, socket)
	app := sigx.NewApp("go-sdk-trace")
	app.RegisterActor("Relay", func() sigx.Actor { return relay{} }, sigx.ActorOptions{})
	c, _, _, _ := runApp(t, app, socket, sc)
	want := sigx.TraceContext{
		Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		Tracestate:  "sigx=go",
	}
	call := func(method string) traceSeen {
		out, err := c.Call(sigx.WithTrace(callCtx(t), want), sigx.ActorRef{Type: "Relay", Key: method}, method, nil)
		if err != nil {
			t.Fatalf("%s: %v\n%s", method, err, sc.log)
		}
		var seen traceSeen
		if err := json.Unmarshal(out, &seen); err != nil || seen.Inner == nil {
			t.Fatalf("%s answered %s (%v)", method, out, err)
		}
		return seen
	}
	seen := call("outer")
	if seen.Turn != want {
		t.Fatalf("the outer turn's trace: %+v, want %+v", seen.Turn, want)
	}
	if seen.Inner.Turn != want {
		t.Fatalf("the nested call's turn got %+v, want the outer turn's %+v", seen.Inner.Turn, want)
	}
	// The check can fail: a call made with a ctx that is not the turn's carries no trace.
	detached := call("detached")
	if detached.Turn != want || detached.Inner.Turn != (sigx.TraceContext{}) {
		t.Fatalf("detached: outer %+v, inner %+v (want the trace, then none)", detached.Turn, detached.Inner.Turn)
	}
	// An untraced call's turn has no trace.
	out, err := c.Call(callCtx(t), sigx.ActorRef{Type: "Relay", Key: "plain"}, "inner", nil)
	var plain traceSeen
	if err != nil || json.Unmarshal(out, &plain) != nil || plain.Turn != (sigx.TraceContext{}) {
		t.Fatalf("untraced call: %s, %v", out, err)
	}
}
