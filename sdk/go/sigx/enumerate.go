package sigx

import (
	"context"

	pb "example.invalid/sigx/sdk/go/sigxpb"
)

// Location is where an actor is active, as its directory owner records it.
type Location struct {
	// Active is false when no activation of the actor is registered anywhere.
	Active bool
	// HostID holds the activation; ActivationID is its Turn.activation_id.
	HostID, ActivationID string
	// Epoch is the activation's state epoch, known only to the host that runs it (0 when the
	// asked sidecar is another host, or while the activation starts).
	Epoch uint64
}

// Locate says where the stateful actor ref is active. It activates nothing.
func (c *Client) Locate(ctx context.Context, ref ActorRef) (Location, error) {
	res, err := c.api.Locate(ctx, &pb.LocateRequest{Actor: ref.pb(), TimeoutMs: timeoutMs(ctx)})
	if err != nil {
		return Location{}, decodeErr(ctx, c.socket, err)
	}
	return Location{Active: res.GetActive(), HostID: res.GetHostId(),
		ActivationID: res.GetActivationId(), Epoch: res.GetEpoch()}, nil
}

// ListActorsOptions pages through ListActors: PageSize 1..=1000 (0 = 100), PageToken empty for
// the first page, then each page's NextPageToken; WithReminders adds each actor's reminders.
type ListActorsOptions struct {
	PageSize      uint32
	PageToken     string
	WithReminders bool
}

// ListActors returns one page of the live activations of actorType across the fleet, from the
// directory owners. Check Incomplete: partitions whose owner did not answer are in Skipped.
func (c *Client) ListActors(ctx context.Context, actorType string, o ListActorsOptions) (*pb.ListActorsResponse, error) {
	res, err := c.api.ListActors(ctx, &pb.ListActorsRequest{ActorType: actorType, PageSize: o.PageSize,
		PageToken: o.PageToken, TimeoutMs: timeoutMs(ctx), WithReminders: o.WithReminders})
	if err != nil {
		return nil, decodeErr(ctx, c.socket, err)
	}
	return res, nil
}
