package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/palyrav1/palyrav1connect"
)

// fastResends makes Resend's pauses a millisecond for the test.
func fastResends(t *testing.T) {
	old := retryBackoffMS
	retryBackoffMS = []int{1, 1, 1}
	t.Cleanup(func() { retryBackoffMS = old })
}

// fakeRun answers RunJob from a script, one outcome per call (the last
// repeats): an error before acceptance, or the job accepted and then
// either ended or its stream broken. WatchJob answers with the ended job.
type fakeRun struct {
	palyrav1connect.UnimplementedJobServiceHandler
	mu       sync.Mutex
	outcomes []string // "ended", "broken", or an error code
	keys     []string // the idempotency key of each RunJob
}

func (f *fakeRun) RunJob(_ context.Context, req *connect.Request[palyrav1.SubmitJobRequest], st *connect.ServerStream[palyrav1.WatchJobResponse]) error {
	f.mu.Lock()
	f.keys = append(f.keys, req.Msg.IdempotencyKey)
	out := f.outcomes[min(len(f.keys), len(f.outcomes))-1]
	f.mu.Unlock()
	switch out {
	case "ended":
		return st.Send(&palyrav1.WatchJobResponse{Job: &palyrav1.Job{Id: "job-1", Phase: palyrav1.JobPhase_JOB_PHASE_COMPLETED}})
	case "broken":
		st.Send(&palyrav1.WatchJobResponse{Job: &palyrav1.Job{Id: "job-1", Phase: palyrav1.JobPhase_JOB_PHASE_RUNNING}})
		return apiErr(connect.CodeUnavailable, "unavailable")
	}
	return apiErr(connect.CodeInternal, out)
}

func (f *fakeRun) WatchJob(_ context.Context, _ *connect.Request[palyrav1.WatchJobRequest], st *connect.ServerStream[palyrav1.WatchJobResponse]) error {
	return st.Send(&palyrav1.WatchJobResponse{Job: &palyrav1.Job{Id: "job-1", Phase: palyrav1.JobPhase_JOB_PHASE_COMPLETED}})
}

// Run sends a keyed request again when its acceptance is unknown, as
// Submit does, and follows the job the resend names; without a key the
// unknown outcome is the caller's; once the job is accepted, a broken
// stream is followed, never sent again.
func TestRunResendsUnknownAcceptanceOnlyWithIdempotencyKey(t *testing.T) {
	fastResends(t)
	for _, tc := range []struct {
		name     string
		key      string
		outcomes []string
		wantErr  string
		runs     int
	}{
		{"key, unknown outcome then accepted", "k", []string{"unknown_outcome", "ended"}, "", 2},
		{"key, unavailable every time: bounded", "k", []string{"unavailable"}, "unavailable", 1 + maxResends},
		{"key, a refusal is final", "k", []string{"conflict"}, "conflict", 1},
		{"key, accepted then broken: followed, not resent", "k", []string{"broken"}, "", 1},
		{"no key, unknown outcome is the caller's", "", []string{"unknown_outcome", "ended"}, "unknown_outcome", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeRun{outcomes: tc.outcomes}
			mux := http.NewServeMux()
			mux.Handle(palyrav1connect.NewJobServiceHandler(f))
			srv := httptest.NewServer(mux)
			defer srv.Close()
			c := &Client{Addr: "fake:1", Jobs: palyrav1connect.NewJobServiceClient(srv.Client(), srv.URL)}
			job, err := c.Run(context.Background(), &palyrav1.SubmitJobRequest{WasmModule: []byte("\x00asm"), IdempotencyKey: tc.key}, nil)
			switch {
			case tc.wantErr == "" && (err != nil || job.GetId() != "job-1"):
				t.Fatalf("Run = %v, %v; want job-1", job, err)
			case tc.wantErr != "" && c.Explain(err).Code != tc.wantErr:
				t.Fatalf("Run = %v; want code %s", err, tc.wantErr)
			}
			if len(f.keys) != tc.runs {
				t.Fatalf("%d RunJob calls, want %d", len(f.keys), tc.runs)
			}
			for i, k := range f.keys {
				if k != tc.key {
					t.Fatalf("call %d sent key %q, want %q", i, k, tc.key)
				}
			}
		})
	}
}
