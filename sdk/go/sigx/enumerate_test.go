package sigx_test

import (
	"testing"

	"example.invalid/sigx/sdk/go/sigx"
)

// Locate names this host for a called actor and nothing for an uncalled one (activating
// nothing); ListActors pages through exactly the called actors.
func TestLocateAndListActors(t *testing.T) {
	socket := socketDir(t)
	sc := startSidecar(t, socket)
	f := newFixture()
	c, _, _, _ := runApp(t, f.app, socket, sc)
	keys := map[string]bool{"a": true, "b": true, "c": true}
	for k := range keys {
		if _, err := c.Call(callCtx(t), sigx.ActorRef{Type: "Counter", Key: k}, "incr", nil); err != nil {
			t.Fatalf("incr %s: %v", k, err)
		}
	}
	loc, err := c.Locate(callCtx(t), sigx.ActorRef{Type: "Counter", Key: "b"})
	if err != nil || !loc.Active || loc.HostID == "" || loc.ActivationID == "" || loc.Epoch == 0 {
		t.Fatalf("locate b: %+v, %v", loc, err)
	}
	none, err := c.Locate(callCtx(t), sigx.ActorRef{Type: "Counter", Key: "never"})
	if err != nil || none.Active {
		t.Fatalf("an uncalled actor must read inactive: %+v, %v", none, err)
	}
	seen := map[string]bool{}
	token := ""
	for pages := 0; ; pages++ {
		page, err := c.ListActors(callCtx(t), "Counter", sigx.ListActorsOptions{PageSize: 2, PageToken: token})
		if err != nil || page.GetIncomplete() {
			t.Fatalf("list: %v, %v", page, err)
		}
		for _, a := range page.GetActors() {
			if seen[a.GetActor().GetKey()] || a.GetHostId() != loc.HostID {
				t.Fatalf("listed twice or elsewhere: %v", a)
			}
			seen[a.GetActor().GetKey()] = true
		}
		if token = page.GetNextPageToken(); token == "" {
			break
		}
		if pages > 10 {
			t.Fatal("paging never ended")
		}
	}
	if len(seen) != len(keys) {
		t.Fatalf("listed %v, called %v", seen, keys)
	}
}
