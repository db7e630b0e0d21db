package client

import (
	"context"
	"errors"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/palyrav1/palyrav1connect"
)

// fakeJobs answers SubmitJob from a script of outcomes, one per call, and
// records every request it got.
type fakeJobs struct {
	palyrav1connect.JobServiceClient // other methods are not called

	mu       sync.Mutex
	outcomes []error // nil: accept; the last one repeats
	calls    []*palyrav1.SubmitJobRequest
}

func (f *fakeJobs) SubmitJob(_ context.Context, req *connect.Request[palyrav1.SubmitJobRequest]) (*connect.Response[palyrav1.SubmitJobResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, req.Msg)
	err := f.outcomes[min(len(f.calls), len(f.outcomes))-1]
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&palyrav1.SubmitJobResponse{Job: &palyrav1.Job{Id: "job-1"}}), nil
}

// apiErr is an error as a node sends it: a Connect error carrying
// Palyra's {code, message, hint}.
func apiErr(cc connect.Code, code string) error {
	err := connect.NewError(cc, errors.New(code+" from the fake node"))
	if d, derr := connect.NewErrorDetail(&palyrav1.Error{Code: code, Message: code + " from the fake node"}); derr == nil {
		err.AddDetail(d)
	}
	return err
}

func TestSubmitResendsUnknownOutcomeOnlyWithIdempotencyKey(t *testing.T) {
	defer func(b []int) { retryBackoffMS = b }(retryBackoffMS)
	retryBackoffMS = []int{1, 1, 1}
	unknown := apiErr(connect.CodeInternal, "unknown_outcome")
	unavailable := apiErr(connect.CodeUnavailable, "unavailable")
	conflict := apiErr(connect.CodeFailedPrecondition, "conflict")
	notFound := apiErr(connect.CodeNotFound, "module_not_found")
	mod := []byte("\x00asm\x01\x00\x00\x00")

	for _, tc := range []struct {
		name     string
		key      string
		outcomes []error
		wantErr  string // Explain's code; "" = accepted
		calls    int
	}{
		{"key, unknown outcome then accepted", "k", []error{unknown, nil}, "", 2},
		{"key, unavailable twice then accepted", "k", []error{unavailable, unavailable, nil}, "", 3},
		{"key, module sent by bytes after unknown outcome", "k", []error{notFound, unknown, nil}, "", 3},
		{"key, unknown outcome every time: bounded", "k", []error{unknown}, "unknown_outcome", 1 + maxResends},
		{"key, a refusal is final", "k", []error{conflict}, "conflict", 1},
		{"no key, unknown outcome is the caller's to resolve", "", []error{unknown, nil}, "unknown_outcome", 1},
		{"no key, unavailable is the caller's to resolve", "", []error{unavailable, nil}, "unavailable", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeJobs{outcomes: tc.outcomes}
			c := &Client{Addr: "fake:1", Jobs: f}
			resp, err := c.Submit(context.Background(), &palyrav1.SubmitJobRequest{WasmModule: mod, IdempotencyKey: tc.key, Priority: 7})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Submit = %v, want accepted", err)
			case tc.wantErr == "" && resp.GetJob().GetId() != "job-1":
				t.Fatalf("Submit answered %v, want job-1", resp)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("Submit accepted, want %s", tc.wantErr)
			case tc.wantErr != "" && c.Explain(err).Code != tc.wantErr:
				t.Fatalf("Submit = %v (code %s), want code %s", err, c.Explain(err).Code, tc.wantErr)
			}
			if len(f.calls) != tc.calls {
				t.Fatalf("%d SubmitJob calls, want %d", len(f.calls), tc.calls)
			}
			for i, r := range f.calls {
				if r.IdempotencyKey != tc.key || r.Priority != 7 {
					t.Fatalf("call %d sent key %q priority %d, want the request unchanged", i, r.IdempotencyKey, r.Priority)
				}
			}
		})
	}

	// A cancelled context stops the resends.
	f := &fakeJobs{outcomes: []error{unknown}}
	c := &Client{Addr: "fake:1", Jobs: f}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Submit(ctx, &palyrav1.SubmitJobRequest{WasmModule: mod, IdempotencyKey: "k"}); err == nil {
		t.Fatal("Submit with a cancelled context succeeded")
	}
	if len(f.calls) != 1 {
		t.Fatalf("%d SubmitJob calls with a cancelled context, want 1", len(f.calls))
	}
}

// A submission over the nodes' limits is refused before anything is sent,
// with the message and hint a node gives, however far over it is (far
// over, the transport's own limit would answer with a raw error).
func TestOversizeRefusedBeforeSending(t *testing.T) {
	f := &fakeJobs{outcomes: []error{nil}}
	c := &Client{Addr: "fake:1", Jobs: f}
	big := make([]byte, 20_000_005)
	for _, tc := range []struct {
		name string
		req  *palyrav1.SubmitJobRequest
		want string
	}{
		{"module", &palyrav1.SubmitJobRequest{WasmModule: big}, "module is 19.1 MiB; the limit is 16.0 MiB"},
		{"input", &palyrav1.SubmitJobRequest{WasmModule: []byte("m"), Input: big}, "input is 19.1 MiB; the limit is 1.0 MiB"},
		{"array total", &palyrav1.SubmitJobRequest{WasmModule: []byte("m"), Inputs: func() [][]byte {
			out := make([][]byte, 70)
			for i := range out {
				out[i] = big[:1<<20]
			}
			return out
		}()}, "the array's inputs total 70.0 MiB; the limit is 64.0 MiB per array"},
	} {
		_, err := c.Submit(context.Background(), tc.req)
		e := c.Explain(err)
		if e == nil || e.Code != "invalid_argument" || e.Message != tc.want || e.Hint == "" {
			t.Errorf("%s: %+v; want %q with a hint", tc.name, e, tc.want)
		}
		if _, err := c.Run(context.Background(), tc.req, nil); c.Explain(err).Message != tc.want {
			t.Errorf("%s through Run: %v", tc.name, err)
		}
	}
	if len(f.calls) != 0 {
		t.Fatalf("%d requests sent; want none", len(f.calls))
	}
}
