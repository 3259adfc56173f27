package sigx

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "example.invalid/sigx/sdk/go/sigxpb"
)

// TestEveryWireKindDecodesToItsTypedError builds the status the sidecar sends for each kind
// (google.rpc.Status with one ErrorDetail) and decodes it as a call's error.
func TestEveryWireKindDecodesToItsTypedError(t *testing.T) {
	for k := pb.ErrorKind_ERROR_KIND_UNSPECIFIED; k <= pb.ErrorKind_ERROR_KIND_STALE_EPOCH; k++ {
		detail := &pb.ErrorDetail{Kind: k, Message: "boom " + k.String(), OwnerHint: "host-b", RetryAfterMs: 40}
		if k == pb.ErrorKind_ERROR_KIND_ACTIVATION {
			detail.Cause = &pb.ErrorDetail{Kind: pb.ErrorKind_ERROR_KIND_WRONG_HOST, Message: "moved"}
		}
		st, err := status.New(codes.Unavailable, "boom").WithDetails(detail)
		if err != nil {
			t.Fatal(err)
		}
		got := decodeErr(context.Background(), "/s.sock", st.Err())
		var ae *ActorError
		switch k {
		case pb.ErrorKind_ERROR_KIND_UNSPECIFIED, pb.ErrorKind_ERROR_KIND_OUTCOME_UNKNOWN:
			if !errors.Is(got, ErrOutcomeUnknown) || errors.As(got, &ae) {
				t.Errorf("%v decoded to %#v, want outcome unknown and no ActorError", k, got)
			}
			continue
		}
		if !errors.As(got, &ae) || ae.Kind != Kind(k) || ae.Message != detail.Message ||
			ae.OwnerHint != "host-b" || ae.RetryAfter != 40*time.Millisecond || errors.Is(got, ErrOutcomeUnknown) {
			t.Errorf("%v decoded to %#v", k, got)
			continue
		}
		if k == pb.ErrorKind_ERROR_KIND_ACTIVATION {
			var cause *ActorError
			if !errors.As(ae.Cause, &cause) || cause.Kind != KindWrongHost || cause.Message != "moved" {
				t.Errorf("activation cause %#v", ae.Cause)
			}
		}
		if Kind(k).String() == "" || Kind(k).String()[0] == 'k' {
			t.Errorf("%v has no short name: %q", k, Kind(k).String())
		}
	}
}

func TestHandlerErrorsMapToTurnErrors(t *testing.T) {
	if te := toTurnError(&ActorError{Kind: KindInvalid, Message: "no such method"}); te.GetKind() != pb.ErrorKind_ERROR_KIND_INVALID || te.GetMessage() != "no such method" {
		t.Errorf("invalid: %v", te)
	}
	if te := toTurnError(Errorf("bad %d", 1)); te.GetKind() != pb.ErrorKind_ERROR_KIND_APP || te.GetMessage() != "bad 1" {
		t.Errorf("app: %v", te)
	}
	// A handler cannot claim a runtime kind: anything but INVALID reads as APP.
	if te := toTurnError(&ActorError{Kind: KindFenced, Message: "x"}); te.GetKind() != pb.ErrorKind_ERROR_KIND_APP {
		t.Errorf("fenced from a handler: %v", te)
	}
	if te := toTurnError(errors.New("plain")); te.GetKind() != pb.ErrorKind_ERROR_KIND_APP || te.GetMessage() != "plain" {
		t.Errorf("plain: %v", te)
	}
}
