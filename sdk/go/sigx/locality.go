package sigx

import (
	"context"

	pb "example.invalid/sigx/sdk/go/sigxpb"
)

// Locality is a call's placement preference for the actor it activates, relative to the host
// the call enters (this app's sidecar): a host on the same node (its NODE_NAME), else in the
// same zone (its SIGX_ZONE), else any eligible host. It only places: an actor already active
// elsewhere is called where it is, and a preference no host meets never fails the call.
type Locality int32

const (
	// LocalityAny is no preference: the type's placement policy over every eligible host.
	LocalityAny = Locality(pb.Locality_LOCALITY_ANY)
	// LocalitySameNode prefers a host on the caller's node, then its zone.
	LocalitySameNode = Locality(pb.Locality_LOCALITY_SAME_NODE)
	// LocalitySameZone prefers a host in the caller's zone.
	LocalitySameZone = Locality(pb.Locality_LOCALITY_SAME_ZONE)
)

type localityKey struct{}

// WithLocality returns a ctx whose calls carry the placement preference l.
func WithLocality(ctx context.Context, l Locality) context.Context {
	return context.WithValue(ctx, localityKey{}, l)
}

// localityOf is the CallRequest.locality of a call made with ctx.
func localityOf(ctx context.Context) pb.Locality {
	l, _ := ctx.Value(localityKey{}).(Locality)
	return pb.Locality(l)
}
