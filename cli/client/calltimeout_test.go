package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	palyrav1 "github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/palyrav1/palyrav1connect"
)

// stalled answers a unary call only after 5 seconds (or when the caller
// gives up) and streams one watch message only after a pause.
type stalled struct {
	palyrav1connect.UnimplementedNodeServiceHandler
	palyrav1connect.UnimplementedJobServiceHandler
	pause time.Duration
}

func (stalled) Status(ctx context.Context, _ *connect.Request[palyrav1.StatusRequest]) (*connect.Response[palyrav1.StatusResponse], error) {
	select {
	case <-ctx.Done():
		return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
	case <-time.After(5 * time.Second): // a test without the bound fails, not hangs
		return connect.NewResponse(&palyrav1.StatusResponse{}), nil
	}
}

func (s stalled) WatchJob(ctx context.Context, _ *connect.Request[palyrav1.WatchJobRequest], st *connect.ServerStream[palyrav1.WatchJobResponse]) error {
	select {
	case <-time.After(s.pause):
	case <-ctx.Done():
		return ctx.Err()
	}
	return st.Send(&palyrav1.WatchJobResponse{})
}

func stalledServer(t *testing.T, pause time.Duration) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	s := stalled{pause: pause}
	mux.Handle(palyrav1connect.NewNodeServiceHandler(s))
	mux.Handle(palyrav1connect.NewJobServiceHandler(s))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestCallTimeoutEndsAStalledUnaryCall(t *testing.T) {
	srv := stalledServer(t, 0)
	nodes := palyrav1connect.NewNodeServiceClient(srv.Client(), srv.URL, connect.WithInterceptors(callTimeout(300*time.Millisecond)))
	start := time.Now()
	_, err := nodes.Status(context.Background(), connect.NewRequest(&palyrav1.StatusRequest{}))
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("a stalled call returned %v (%T), want a deadline_exceeded *Error", err, err)
	}
	if e.Code != "deadline_exceeded" || !strings.Contains(e.Message, "within 300ms") || !strings.Contains(e.Message, "may or may not have taken effect") || !strings.Contains(e.Hint, "--call-timeout") {
		t.Fatalf("error = %+v", e)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the call returned after %s", took)
	}
}

func TestCallTimeoutLeavesTheCallersOwnDeadlineAndStreams(t *testing.T) {
	srv := stalledServer(t, 600*time.Millisecond)
	opt := connect.WithInterceptors(callTimeout(100 * time.Millisecond))
	// The caller's own deadline is longer than the call timeout: it wins,
	// and its expiry is the caller's error, not the call timeout's.
	nodes := palyrav1connect.NewNodeServiceClient(srv.Client(), srv.URL, opt)
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := nodes.Status(ctx, connect.NewRequest(&palyrav1.StatusRequest{}))
	var e *Error
	if err == nil || errors.As(err, &e) {
		t.Fatalf("a call with its own deadline returned %v, want the caller's deadline error", err)
	}
	if took := time.Since(start); took < 350*time.Millisecond {
		t.Fatalf("the call ended after %s, before the caller's own 400ms deadline", took)
	}
	// A stream is not bounded: its first message, 600ms in, arrives.
	jobs := palyrav1connect.NewJobServiceClient(srv.Client(), srv.URL, opt)
	stream, err := jobs.WatchJob(context.Background(), connect.NewRequest(&palyrav1.WatchJobRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatalf("the watch stream was cut: %v", stream.Err())
	}
}
