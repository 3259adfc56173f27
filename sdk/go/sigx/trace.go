package sigx

import (
	"context"

	pb "example.invalid/sigx/sdk/go/sigxpb"
)

// TraceContext is a W3C trace context: the traceparent and tracestate headers of one span.
type TraceContext struct {
	Traceparent string
	Tracestate  string
}

type traceKey struct{}

// WithTrace returns a copy of ctx whose Client.Call calls carry tc (as CallRequest.trace), so the
// sidecar's spans and the callee's turn join that trace. A turn's ctx carries its turn's trace
// already: calls made with it (or a ctx derived from it) continue the turn's trace. A traceparent
// in the call's gRPC metadata (OpenTelemetry's grpc instrumentation sets one) takes precedence.
func WithTrace(ctx context.Context, tc TraceContext) context.Context {
	return context.WithValue(ctx, traceKey{}, tc)
}

// TraceFromContext returns the W3C trace context ctx's calls carry, if any: inside a handler,
// the turn's (the sidecar's turn span when it exports spans, else the caller's context).
func TraceFromContext(ctx context.Context) (TraceContext, bool) {
	tc, ok := ctx.Value(traceKey{}).(TraceContext)
	return tc, ok && tc.Traceparent != ""
}

// traceOf is the CallRequest.trace of a call made with ctx (nil: untraced).
func traceOf(ctx context.Context) *pb.TraceContext {
	tc, ok := TraceFromContext(ctx)
	if !ok {
		return nil
	}
	return &pb.TraceContext{Traceparent: tc.Traceparent, Tracestate: tc.Tracestate}
}
