package sigx_test

import (
	"errors"
	"strings"
	"testing"

	"example.invalid/sigx/sdk/go/sigx"
)

// The preference reaches the sidecar in CallRequest.locality: a known one places (on one host,
// here), an unknown one is refused as invalid, naming it — which it could not be if the field
// were never sent.
func TestALocalityPreferenceTravelsOnTheCall(t *testing.T) {
	socket := socketDir(t)
	sc := startSidecar(t, socket)
	f := newFixture()
	c, _, _, _ := runApp(t, f.app, socket, sc)
	a := sigx.ActorRef{Type: "Counter", Key: "near"}
	out, err := c.Call(sigx.WithLocality(callCtx(t), sigx.LocalitySameZone), a, "incr", nil)
	if err != nil || string(out) != "1" {
		t.Fatalf("same-zone call: %q, %v\n%s", out, err, sc.log)
	}
	_, err = c.Call(sigx.WithLocality(callCtx(t), sigx.Locality(9)), a, "incr", nil)
	var ae *sigx.ActorError
	if !errors.As(err, &ae) || ae.Kind != sigx.KindInvalid || !strings.Contains(ae.Message, "locality 9") {
		t.Fatalf("an unknown locality must be refused as invalid, naming it: %v", err)
	}
}
