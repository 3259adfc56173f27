// Package sigx is the Go SDK for sigx, a virtual-actor runtime: an app registers actor and worker
// types with its sidecar (App), and anything on the pod calls actors through it (Client).
//
// Every call takes a context.Context first: its deadline is the call's deadline and cancelling
// it abandons the call. Errors are values: *ActorError with a Kind, or ErrOutcomeUnknown.
package sigx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "example.invalid/sigx/sdk/go/sigxpb"
)

// maxMessageBytes covers the sidecar's largest payload (4 MiB by default) plus framing.
const maxMessageBytes = 16 << 20

// ActorRef names an actor (or a worker) by type and key.
type ActorRef struct {
	Type string
	Key  string
}

func (r ActorRef) pb() *pb.ActorRef { return &pb.ActorRef{ActorType: r.Type, Key: r.Key} }

// Client talks to the local sidecar over its Unix socket. It is safe for concurrent use.
type Client struct {
	conn   *grpc.ClientConn
	api    pb.ActorHostClient
	socket string
}

// Dial connects to the sidecar's socket at path; "" means $SIGX_SOCKET. The connection is made
// lazily, so Dial succeeds without a running sidecar; calls then fail with KindUnreachable.
func Dial(path string) (*Client, error) {
	if path == "" {
		path = os.Getenv("SIGX_SOCKET")
	}
	if path == "" {
		return nil, errors.New("sigx: no sidecar socket: pass its path to Dial or set SIGX_SOCKET")
	}
	// Static flow-control windows as large as the largest message: on a Unix socket to the local
	// sidecar there is no bandwidth-delay product to learn, and grpc-go's estimator (on by
	// default) sends a PING, and reads its ack, after nearly every message received, a turn or
	// an answer: writes and wake-ups on both sides of every call.
	conn, err := grpc.NewClient("unix://"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageBytes), grpc.MaxCallSendMsgSize(maxMessageBytes)),
		grpc.WithInitialWindowSize(maxMessageBytes), grpc.WithInitialConnWindowSize(maxMessageBytes))
	if err != nil {
		return nil, fmt.Errorf("sigx: bad socket path %q: %w", path, err)
	}
	return &Client{conn: conn, api: pb.NewActorHostClient(conn), socket: path}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// timeoutMs gives the sidecar the call's deadline (it answers TIMEOUT itself when it passes, so
// the caller learns the kind instead of a bare transport deadline). 0 = the sidecar's default.
func timeoutMs(ctx context.Context) uint64 {
	if d, ok := ctx.Deadline(); ok {
		if ms := time.Until(d).Milliseconds(); ms > 0 {
			return uint64(ms)
		}
		return 1
	}
	return 0
}

// Call invokes method on the actor (or worker) ref anywhere in the cluster and returns its
// result payload. The deadline of ctx bounds the whole call, routing included.
func (c *Client) Call(ctx context.Context, ref ActorRef, method string, payload []byte) ([]byte, error) {
	res, err := c.api.Call(ctx, &pb.CallRequest{Actor: ref.pb(), Method: method, Payload: payload,
		TimeoutMs: timeoutMs(ctx), Trace: traceOf(ctx), Locality: localityOf(ctx)})
	if err != nil {
		return nil, decodeErr(ctx, c.socket, err)
	}
	return res.GetPayload(), nil
}

// DispatchOn makes one attempt at a worker method on the host hostID: no retries, no re-placement.
func (c *Client) DispatchOn(ctx context.Context, hostID string, worker ActorRef, method string, payload []byte) ([]byte, error) {
	res, err := c.api.DispatchOn(ctx, &pb.DispatchOnRequest{HostId: hostID, Worker: worker.pb(),
		Method: method, Payload: payload, TimeoutMs: timeoutMs(ctx)})
	if err != nil {
		return nil, decodeErr(ctx, c.socket, err)
	}
	return res.GetPayload(), nil
}

// MembersFilter selects hosts. The zero value is every active host.
type MembersFilter struct {
	// AnyStatus includes hosts of every status, not only active ones.
	AnyStatus bool
	// Registers, when set, keeps only hosts registering this type.
	Registers string
}

func (f MembersFilter) pb() *pb.MembersRequest {
	r := &pb.MembersRequest{Registers: f.Registers}
	if f.AnyStatus {
		r.Status = pb.MemberStatusFilter_MEMBER_STATUS_FILTER_ANY
	}
	return r
}

// Members is a membership view: Version strictly increases per change this sidecar observes.
type Members struct {
	Version uint64
	Hosts   []*pb.HostDescriptor
}

// Members returns the current membership view.
func (c *Client) Members(ctx context.Context, f MembersFilter) (Members, error) {
	res, err := c.api.Members(ctx, f.pb())
	if err != nil {
		return Members{}, decodeErr(ctx, c.socket, err)
	}
	return Members{Version: res.GetVersion(), Hosts: res.GetHosts()}, nil
}

// WatchMembers yields the view now and again on every change, until ctx ends (then it stops
// without an error) or the stream fails (it yields the error once and stops).
//
//	for m, err := range client.WatchMembers(ctx, sigx.MembersFilter{}) { ... }
func (c *Client) WatchMembers(ctx context.Context, f MembersFilter) iter.Seq2[Members, error] {
	return func(yield func(Members, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := c.api.WatchMembers(ctx, f.pb())
		if err != nil {
			yield(Members{}, decodeErr(ctx, c.socket, err))
			return
		}
		for {
			res, err := stream.Recv()
			if err != nil {
				if ctx.Err() == nil && !errors.Is(err, io.EOF) {
					yield(Members{}, decodeErr(ctx, c.socket, err))
				}
				return
			}
			if !yield(Members{Version: res.GetVersion(), Hosts: res.GetHosts()}, nil) {
				return
			}
		}
	}
}

// Status returns this host's identity, state, activations and counters.
func (c *Client) Status(ctx context.Context) (*pb.StatusResponse, error) {
	res, err := c.api.Status(ctx, &pb.StatusRequest{})
	if err != nil {
		return nil, decodeErr(ctx, c.socket, err)
	}
	return res, nil
}
