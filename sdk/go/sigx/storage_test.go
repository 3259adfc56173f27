package sigx_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"example.invalid/sigx/sdk/go/sigx"
)

// box keeps nothing in memory: every value it answers came from the state API.
type box struct{ epochs *epochLog }

type epochLog struct {
	mu sync.Mutex
	e  []uint64
}

func (b *box) Activate(ctx context.Context) error {
	info, _ := sigx.TurnFromContext(ctx)
	b.epochs.mu.Lock()
	b.epochs.e = append(b.epochs.e, info.Epoch)
	b.epochs.mu.Unlock()
	return nil
}

type kv struct {
	K string          `json:"k"`
	V json.RawMessage `json:"v"`
}

func (b *box) Invoke(ctx context.Context, method string, payload []byte) ([]byte, error) {
	st := sigx.StorageFromContext(ctx)
	switch method {
	case "put": // {"k","v"}: puts, then answers what a read in the same turn sees
		var req kv
		if err := json.Unmarshal(payload, &req); err != nil {
			return nil, err
		}
		var before json.RawMessage
		if _, err := st.GetJSON(ctx, req.K, &before); err != nil {
			return nil, err
		}
		if err := st.PutJSON(req.K, req.V); err != nil {
			return nil, err
		}
		after, _, err := st.Get(ctx, req.K)
		if err != nil {
			return nil, err
		}
		return json.Marshal(map[string]string{"before": string(before), "after": string(after)})
	case "get":
		v, found, err := st.Get(ctx, string(payload))
		if err != nil || !found {
			return []byte("absent"), err
		}
		return v, nil
	case "delete":
		st.Delete(string(payload))
		if _, found, err := st.Get(ctx, string(payload)); err != nil || found {
			return nil, sigx.Errorf("deleted key still read back (found=%v, err=%v)", found, err)
		}
		return []byte("gone"), nil
	case "list":
		entries, err := st.List(ctx)
		if err != nil {
			return nil, err
		}
		var parts []string
		for _, e := range entries {
			parts = append(parts, e.Key+"="+string(e.Value))
		}
		return []byte(strings.Join(parts, ",")), nil
	case "putThenFail":
		st.Put(string(payload), []byte("from a failed turn"))
		return nil, sigx.Errorf("failing after a put")
	case "big":
		st.Put("big", make([]byte, 1024*1024+1))
		return []byte("answered"), nil
	case "epoch":
		return []byte(strconv.FormatUint(st.Epoch(), 10)), nil
	}
	return nil, &sigx.ActorError{Kind: sigx.KindInvalid, Message: "box has no method " + method}
}

// stateSidecar runs a sidecar on SQLite state at db and an app serving Box beside it.
func stateSidecar(t *testing.T, db string, epochs *epochLog) (*sigx.Client, func()) {
	socket := socketDir(t)
	sc := startSidecarEnv(t, socket, "SIGX_STATE=sqlite", "SIGX_STATE_PATH="+db)
	app := sigx.NewApp("go-state-test")
	app.RegisterActor("Box", func() sigx.Actor { return &box{epochs: epochs} }, sigx.ActorOptions{})
	c, _, cancel, done := runApp(t, app, socket, sc)
	return c, func() {
		cancel()
		select {
		case err := <-done:
			done <- err // runApp's cleanup waits for it too
		case <-time.After(30 * time.Second):
			t.Fatal("Run did not return after its ctx ended")
		}
		sc.stop(t)
	}
}

func call(t *testing.T, c *sigx.Client, key, method, payload string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := c.Call(ctx, sigx.ActorRef{Type: "Box", Key: key}, method, []byte(payload))
	if err != nil {
		t.Fatalf("Box/%s %s(%s): %v", key, method, payload, err)
	}
	return string(out)
}

func callErr(c *sigx.Client, key, method, payload string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Call(ctx, sigx.ActorRef{Type: "Box", Key: key}, method, []byte(payload))
	return err
}

func TestStatePutThenGetReadYourWritesDeleteList(t *testing.T) {
	c, stop := stateSidecar(t, filepath.Join(t.TempDir(), "state.db"), &epochLog{})
	defer stop()
	if got := call(t, c, "k1", "put", `{"k":"n","v":1}`); got != `{"after":"1","before":""}` {
		t.Fatalf("first put answered %s", got)
	}
	if got := call(t, c, "k1", "get", "n"); got != "1" {
		t.Fatalf("a later turn read %q, want 1", got)
	}
	if got := call(t, c, "k1", "put", `{"k":"n","v":[2,3]}`); got != `{"after":"[2,3]","before":"1"}` {
		t.Fatalf("second put answered %s", got)
	}
	if got := call(t, c, "k2", "get", "n"); got != "absent" {
		t.Fatalf("another actor read %q: state must be per actor", got)
	}
	for _, k := range []string{"b", "a", "c"} {
		call(t, c, "k3", "put", `{"k":"`+k+`","v":"`+k+k+`"}`)
	}
	if got := call(t, c, "k3", "list", ""); got != `a="aa",b="bb",c="cc"` {
		t.Fatalf("list answered %s", got)
	}
	if got := call(t, c, "k3", "delete", "b"); got != "gone" {
		t.Fatalf("delete answered %s", got)
	}
	if got := call(t, c, "k3", "list", ""); got != `a="aa",c="cc"` {
		t.Fatalf("list after delete answered %s", got)
	}
}

func TestAFailedTurnWritesNothingAndAnOverLimitValueIsNamed(t *testing.T) {
	c, stop := stateSidecar(t, filepath.Join(t.TempDir(), "state.db"), &epochLog{})
	defer stop()
	call(t, c, "k", "put", `{"k":"x","v":"kept"}`)
	var ae *sigx.ActorError
	if err := callErr(c, "k", "putThenFail", "x"); !errors.As(err, &ae) || ae.Kind != sigx.KindApp {
		t.Fatalf("putThenFail answered %v, want an APP error", err)
	}
	if got := call(t, c, "k", "get", "x"); got != `"kept"` {
		t.Fatalf("after a failed turn x is %s, want \"kept\"", got)
	}
	err := callErr(c, "k", "big", "")
	if !errors.As(err, &ae) || ae.Kind != sigx.KindInvalid || !strings.Contains(ae.Message, "over the limit of 1048576 bytes") {
		t.Fatalf("an over-limit value answered %v, want INVALID naming the limit", err)
	}
	if got := call(t, c, "k", "get", "big"); got != "absent" {
		t.Fatalf("the refused value was stored: %d bytes", len(got))
	}
	if got := call(t, c, "k", "get", "x"); got != `"kept"` {
		t.Fatalf("after the refusal x is %s", got)
	}
}

func TestStateSurvivesASidecarRestartAndTheEpochGrows(t *testing.T) {
	db := filepath.Join(t.TempDir(), "state.db")
	epochs := &epochLog{}
	c, stop := stateSidecar(t, db, epochs)
	call(t, c, "durable", "put", `{"k":"v","v":{"n":41}}`)
	e1, _ := strconv.ParseUint(call(t, c, "durable", "epoch", ""), 10, 64)
	stop()
	c, stop = stateSidecar(t, db, epochs)
	defer stop()
	if got := call(t, c, "durable", "get", "v"); got != `{"n":41}` {
		t.Fatalf("after a restart v is %s", got)
	}
	e2, _ := strconv.ParseUint(call(t, c, "durable", "epoch", ""), 10, 64)
	if e1 == 0 || e2 <= e1 {
		t.Fatalf("epochs %d then %d: want 0 < first < second", e1, e2)
	}
	epochs.mu.Lock()
	defer epochs.mu.Unlock()
	if len(epochs.e) != 2 || epochs.e[0] != e1 || epochs.e[1] != e2 {
		t.Fatalf("TurnInfo.Epoch in Activate saw %v, want [%d %d]", epochs.e, e1, e2)
	}
}
