package sigx

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "example.invalid/sigx/sdk/go/sigxpb"
)

// Kind is one of the runtime's stable error kinds (errors.proto). Branch on it with errors.As:
//
//	var ae *sigx.ActorError
//	if errors.As(err, &ae) && ae.Kind == sigx.KindWrongHost { ... }
//
// Outcome-unknown is deliberately not a Kind: it is not an actor error (the call may or may not
// have run) and is reported as ErrOutcomeUnknown instead.
type Kind int

const (
	KindFenced          Kind = Kind(pb.ErrorKind_ERROR_KIND_FENCED)
	KindUnplaceable     Kind = Kind(pb.ErrorKind_ERROR_KIND_UNPLACEABLE)
	KindUnreachable     Kind = Kind(pb.ErrorKind_ERROR_KIND_UNREACHABLE)
	KindWrongHost       Kind = Kind(pb.ErrorKind_ERROR_KIND_WRONG_HOST)
	KindTimeout         Kind = Kind(pb.ErrorKind_ERROR_KIND_TIMEOUT)
	KindApp             Kind = Kind(pb.ErrorKind_ERROR_KIND_APP)
	KindActivation      Kind = Kind(pb.ErrorKind_ERROR_KIND_ACTIVATION)
	KindInvalid         Kind = Kind(pb.ErrorKind_ERROR_KIND_INVALID)
	KindUnauthenticated Kind = Kind(pb.ErrorKind_ERROR_KIND_UNAUTHENTICATED)
	// KindStaleEpoch: the turn ran on an activation a newer one had superseded; the state store
	// refused its writes (none is stored) and the activation was dropped.
	KindStaleEpoch Kind = Kind(pb.ErrorKind_ERROR_KIND_STALE_EPOCH)
)

var kindNames = map[Kind]string{
	KindFenced: "fenced", KindUnplaceable: "unplaceable", KindUnreachable: "unreachable",
	KindWrongHost: "wrong-host", KindTimeout: "timeout", KindApp: "app",
	KindActivation: "activation", KindInvalid: "invalid", KindUnauthenticated: "unauthenticated",
	KindStaleEpoch: "stale-epoch",
}

// String is the kind's short name, as in the sigx-error-kind metadata entry.
func (k Kind) String() string {
	if n, ok := kindNames[k]; ok {
		return n
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// ActorError is a failure the runtime or the actor reported, with a stable Kind. Handlers may
// return one too: KindInvalid reaches the caller as INVALID, every other kind as APP.
type ActorError struct {
	Kind    Kind
	Message string
	// OwnerHint is, for KindWrongHost, the host that owns the actor when the answering host knows.
	OwnerHint string
	// RetryAfter, when non-zero, says the answer is transient: retry after it, within the deadline.
	RetryAfter time.Duration
	// Cause is, for KindActivation, the last answer that made routing give up.
	Cause error
}

func (e *ActorError) Error() string { return e.Kind.String() + ": " + e.Message }

// Unwrap gives the cause (KindActivation) to errors.Is / errors.As.
func (e *ActorError) Unwrap() error { return e.Cause }

// Errorf builds an ActorError of kind KindApp, the usual way for a handler to fail.
func Errorf(format string, args ...any) error {
	return &ActorError{Kind: KindApp, Message: fmt.Sprintf(format, args...)}
}

// ErrOutcomeUnknown is matched (errors.Is) by every error of a call that may or may not have run:
// the connection to the sidecar died with the call in flight. It is never an *ActorError, and
// retrying it is only safe for idempotent methods.
var ErrOutcomeUnknown = errors.New("sigx: outcome unknown: the call may or may not have run")

// OutcomeUnknownError carries why the outcome is unknown; errors.Is(err, ErrOutcomeUnknown) holds.
type OutcomeUnknownError struct {
	Message string
	Err     error // the transport error, when there is one
}

func (e *OutcomeUnknownError) Error() string {
	return "outcome unknown (the call may or may not have run): " + e.Message
}

// Is makes errors.Is(err, ErrOutcomeUnknown) true.
func (e *OutcomeUnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }

// Unwrap gives the transport error.
func (e *OutcomeUnknownError) Unwrap() error { return e.Err }

// fromDetail maps a wire ErrorDetail to the Go error for it.
func fromDetail(d *pb.ErrorDetail) error {
	k := Kind(d.GetKind())
	if _, known := kindNames[k]; !known {
		// OUTCOME_UNKNOWN, UNSPECIFIED ("treat as outcome unknown") and any future kind.
		return &OutcomeUnknownError{Message: d.GetMessage()}
	}
	e := &ActorError{Kind: k, Message: d.GetMessage(), OwnerHint: d.GetOwnerHint(),
		RetryAfter: time.Duration(d.GetRetryAfterMs()) * time.Millisecond}
	if c := d.GetCause(); c != nil {
		e.Cause = fromDetail(c)
	}
	return e
}

// decodeErr reads a failed RPC to the local sidecar. A status with an ErrorDetail is decoded as
// is. Without one: the caller's own context ending is TIMEOUT (wrapping ctx.Err(), so
// errors.Is(err, context.DeadlineExceeded) holds too); a connection that could not be made is
// UNREACHABLE (the call never ran); any other transport failure is outcome unknown.
func decodeErr(ctx context.Context, socket string, err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return &OutcomeUnknownError{Message: err.Error(), Err: err}
	}
	for _, d := range st.Details() {
		if ed, ok := d.(*pb.ErrorDetail); ok {
			return fromDetail(ed)
		}
	}
	if ctx.Err() != nil {
		return &ActorError{Kind: KindTimeout, Message: "the caller's context ended before the answer: " +
			st.Message(), Cause: ctx.Err()}
	}
	switch st.Code() {
	case codes.Unauthenticated:
		return &ActorError{Kind: KindUnauthenticated, Message: st.Message()}
	case codes.InvalidArgument:
		return &ActorError{Kind: KindInvalid, Message: st.Message()}
	case codes.Unavailable:
		if neverSent(st.Message()) {
			return &ActorError{Kind: KindUnreachable, Message: fmt.Sprintf(
				"could not reach the sidecar at %s (%s); is it running, and does SIGX_SOCKET name its socket? The call did not run",
				socket, st.Message())}
		}
	}
	return &OutcomeUnknownError{Message: fmt.Sprintf("the connection to the sidecar at %s failed with the call in flight: %s (%s)",
		socket, st.Message(), st.Code()), Err: err}
}

// neverSent tells grpc-go's fail-fast dial errors (the RPC was never written) from failures of
// an established connection.
func neverSent(msg string) bool {
	for _, s := range []string{"Error while dialing", "connect: ", "produced zero addresses", "REFUSED_STREAM"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// toTurnError maps a handler's error to the TurnError the sidecar passes to the caller.
func toTurnError(err error) *pb.TurnError {
	var ae *ActorError
	if errors.As(err, &ae) && ae.Kind == KindInvalid {
		return &pb.TurnError{Kind: pb.ErrorKind_ERROR_KIND_INVALID, Message: ae.Message}
	}
	if errors.As(err, &ae) {
		return &pb.TurnError{Kind: pb.ErrorKind_ERROR_KIND_APP, Message: ae.Message}
	}
	return &pb.TurnError{Kind: pb.ErrorKind_ERROR_KIND_APP, Message: err.Error()}
}
