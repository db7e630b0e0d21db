package api

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/node/blob"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/raftpb"
	"github.com/palyra-mesh/palyra/runtime/wasm"
)

// tinyModule is the smallest module the wasm executor accepts:
// (module (func (export "_start"))), plus a custom section named by tag so
// each tag gives a module with its own hash.
func tinyModule(tag string) []byte {
	m := []byte("\x00asm\x01\x00\x00\x00\x01\x04\x01\x60\x00\x00\x03\x02\x01\x00\x07\x0a\x01\x06_start\x00\x00\x0a\x04\x01\x02\x00\x0b")
	return append(m, append([]byte{0, byte(1 + len(tag)), byte(len(tag))}, tag...)...)
}

// memBlobs is the cluster's blob store as one map, counting the calls
// that read blobs.
type memBlobs struct {
	mu      sync.Mutex
	data    map[string][]byte
	gets    int
	locates int
}

func (b *memBlobs) Put(data []byte) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h := blob.Hash(data)
	b.data[h] = data
	return h, nil
}

func (b *memBlobs) Get(hash string) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.gets++
	d, ok := b.data[hash]
	if !ok {
		return nil, blob.ErrNotFound
	}
	return d, nil
}

func (b *memBlobs) Locate(hash string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.locates++
	if _, ok := b.data[hash]; !ok {
		return blob.ErrNotFound
	}
	return nil
}

// countingValidator is the real wasm validator, counting its calls.
type countingValidator struct {
	ex    *wasm.Executor
	mu    sync.Mutex
	calls int
}

func (v *countingValidator) Validate(ctx context.Context, module []byte) error {
	v.mu.Lock()
	v.calls++
	v.mu.Unlock()
	return v.ex.Validate(ctx, module)
}

func newSubmitServer(t *testing.T) (jobService, *memBlobs, *countingValidator, *fakeControl, context.Context) {
	t.Helper()
	ex, err := wasm.New(context.Background(), wasm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ex.Close(context.Background()) })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctl := &fakeControl{fsm: consensus.NewFSM()}
	authz, err := NewAuthorizer(ctl.State(), log)
	if err != nil {
		t.Fatal(err)
	}
	blobs := &memBlobs{data: map[string][]byte{}}
	val := &countingValidator{ex: ex}
	srv := New(Options{Control: ctl, Blobs: blobs, Validator: val, Authz: authz, Logger: log})
	ctx := context.WithValue(context.Background(), principalKey{}, identity.Principal{Kind: identity.KindDevice, ID: "d-submitter1"})
	return jobService{srv}, blobs, val, ctl, ctx
}

// apiCode returns the {code, message, hint} an API error carries.
func apiCode(t *testing.T, err error) *palyrav1.Error {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %v is not an API error", err)
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if pe, ok := v.(*palyrav1.Error); ok {
				return pe
			}
		}
	}
	t.Fatalf("API error %v carries no {code, message, hint}", err)
	return nil
}

// A by-hash submission is validated like one that sends the bytes: a
// blob the cluster holds that is not a wasm module (an artifact, say) is
// refused with an error naming the fix, and nothing is committed.
func TestSubmitByHashValidatesTheModule(t *testing.T) {
	js, blobs, _, ctl, ctx := newSubmitServer(t)
	for _, notModule := range [][]byte{
		[]byte("\x89PNG\r\n\x1a\n an artifact a browser job returned"),
		append([]byte("\x00asm\x01\x00\x00\x00"), 0xff, 0xff), // a wasm header on garbage
	} {
		hash, _ := blobs.Put(notModule)
		_, err := js.SubmitJob(ctx, connect.NewRequest(&palyrav1.SubmitJobRequest{ModuleSha256: hash, Input: []byte("x")}))
		if err == nil {
			t.Fatalf("by-hash submit of a blob that is not a wasm module (%q...) was accepted", notModule[:8])
		}
		pe := apiCode(t, err)
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(pe.Message, hash) ||
			!strings.Contains(pe.Message, "not a usable wasm module") || !strings.Contains(pe.Hint, "--wasm") {
			t.Fatalf("by-hash submit of a non-module: %v (code %s, message %q, hint %q); want invalid_argument naming the blob and the fix",
				connect.CodeOf(err), pe.Code, pe.Message, pe.Hint)
		}
	}
	if n := len(ctl.State().Jobs(consensus.JobFilter{})); n != 0 {
		t.Fatalf("%d jobs committed by refused submissions", n)
	}
}

// A module is validated once: repeated by-hash submissions of a module
// already validated (by an earlier by-hash or bytes submission) neither
// validate nor read it again.
func TestSubmitByHashValidatesOnce(t *testing.T) {
	js, blobs, val, ctl, ctx := newSubmitServer(t)
	held, _ := blobs.Put(tinyModule("held")) // stored by another node
	submit := func(req *palyrav1.SubmitJobRequest) {
		t.Helper()
		if _, err := js.SubmitJob(ctx, connect.NewRequest(req)); err != nil {
			t.Fatalf("submit: %v", err)
		}
	}
	submit(&palyrav1.SubmitJobRequest{ModuleSha256: held})
	if val.calls != 1 || blobs.gets != 1 {
		t.Fatalf("first by-hash submit: %d validations, %d blob reads; want 1 and 1", val.calls, blobs.gets)
	}
	for i := 0; i < 3; i++ {
		submit(&palyrav1.SubmitJobRequest{ModuleSha256: held})
	}
	if val.calls != 1 || blobs.gets != 1 {
		t.Fatalf("repeated by-hash submits: %d validations, %d blob reads; want still 1 and 1", val.calls, blobs.gets)
	}

	sent := tinyModule("sent")
	submit(&palyrav1.SubmitJobRequest{WasmModule: sent})
	submit(&palyrav1.SubmitJobRequest{ModuleSha256: blob.Hash(sent)})
	if val.calls != 2 || blobs.gets != 1 {
		t.Fatalf("bytes then by-hash submit: %d validations, %d blob reads in all; want 2 and 1", val.calls, blobs.gets)
	}
	if n := len(ctl.State().Jobs(consensus.JobFilter{})); n != 6 {
		t.Fatalf("%d jobs committed, want 6", n)
	}
	// A hash the cluster does not hold is still module_not_found.
	_, err := js.SubmitJob(ctx, connect.NewRequest(&palyrav1.SubmitJobRequest{ModuleSha256: blob.Hash([]byte("nobody has this"))}))
	if err == nil || apiCode(t, err).Code != "module_not_found" {
		t.Fatalf("by-hash submit of an unknown module: %v, want module_not_found", err)
	}
}

// A timeout so large that it overflows a Duration is refused (it wrapped
// negative and passed the range check), and a negative one too.
func TestSubmitTimeoutRange(t *testing.T) {
	s := &Server{Options: Options{MaxQueued: 10}, control: &fakeControl{fsm: consensus.NewFSM()}}
	for _, ms := range []int64{-1, MaxTimeout.Milliseconds() + 1, 9_300_000_000_000, math.MaxInt64} {
		if err := s.validateSubmit(&palyrav1.SubmitJobRequest{WasmModule: []byte("m"), TimeoutMs: ms}); err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("timeout %d ms: %v", ms, err)
		}
	}
	if err := s.validateSubmit(&palyrav1.SubmitJobRequest{WasmModule: []byte("m"), TimeoutMs: 1000}); err != nil {
		t.Fatalf("a 1s timeout: %v", err)
	}
}

// Text a caller chooses and listings print (constraints, an idempotency
// key, a pairing code's or member's name) may not hold control
// characters: an escape sequence in it drove the terminal of whoever
// listed it ('device list' set the window title and cleared the screen).
func TestCallerTextRefusesControlCharacters(t *testing.T) {
	s := &Server{Options: Options{MaxQueued: 10}, control: &fakeControl{fsm: consensus.NewFSM()}}
	for _, m := range []*palyrav1.SubmitJobRequest{
		{WasmModule: []byte("m"), Constraints: map[string]string{"zone": "eu\x1b[2J"}},
		{WasmModule: []byte("m"), Constraints: map[string]string{"zo\nne": "eu"}},
		{WasmModule: []byte("m"), IdempotencyKey: "k\x1b]0;pwned\a"},
	} {
		if err := s.validateSubmit(m); err == nil || !strings.Contains(err.Error(), "control character") {
			t.Errorf("%+v: %v, want it refused for a control character", m, err)
		}
	}
	if err := s.validateSubmit(&palyrav1.SubmitJobRequest{WasmModule: []byte("m"), Constraints: map[string]string{"zone": "eu-ü"}, IdempotencyKey: "order 1234 ✓"}); err != nil {
		t.Fatalf("printable text refused: %v", err)
	}
	for _, name := range []string{"x\x1b]0;pwned\a", "a\nb", strings.Repeat("n", maxName+1)} {
		if err := checkName("--name", name); err == nil {
			t.Errorf("name %q accepted", name)
		}
	}
	if err := checkName("--name", "laptop of Zoë"); err != nil {
		t.Errorf("a printable name refused: %v", err)
	}
}

// lossyControl applies each command, but answers the next lose of them
// as a leader that died before replying would: outcome unknown. With
// instead set, the first lost one is not applied: instead runs.
type lossyControl struct {
	Control
	lose    int
	instead func()
}

func (l *lossyControl) Apply(ctx context.Context, cmd *raftpb.Command) (consensus.Job, error) {
	if l.lose > 0 && l.instead != nil {
		l.lose--
		l.instead()
		l.instead = nil
		return consensus.Job{}, consensus.ErrUnknownOutcome
	}
	j, err := l.Control.Apply(ctx, cmd)
	if l.lose > 0 {
		l.lose--
		return consensus.Job{}, consensus.ErrUnknownOutcome
	}
	return j, err
}

// A cancel whose outcome is unknown (the leader died before answering) is
// sent again, and the second's "already aborted" is the answer the caller
// wanted: the job is cancelled. It told the caller "may or may not have
// committed" before, with the job cancelled.
func TestCancelWithUnknownOutcomeIsSentAgain(t *testing.T) {
	js, _, _, ctl, ctx := newSubmitServer(t)
	resp, err := js.SubmitJob(ctx, connect.NewRequest(&palyrav1.SubmitJobRequest{WasmModule: tinyModule("cancel")}))
	if err != nil {
		t.Fatal(err)
	}
	id := resp.Msg.Job.Id
	js.s.control = &lossyControl{Control: ctl, lose: 1}
	c, err := js.CancelJob(ctx, connect.NewRequest(&palyrav1.CancelJobRequest{Id: id}))
	if err != nil {
		t.Fatalf("cancel with an unknown outcome: %v", err)
	}
	if c.Msg.Job.Phase != palyrav1.JobPhase_JOB_PHASE_ABORTED {
		t.Fatalf("cancel answered %v, want aborted", c.Msg.Job.Phase)
	}
	// Cancelling an ended job is still refused, when nothing was lost.
	if _, err := js.CancelJob(ctx, connect.NewRequest(&palyrav1.CancelJobRequest{Id: id})); connect.CodeOf(err) != connect.CodeFailedPrecondition && connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Fatalf("cancel of an aborted job: %v", err)
	}
	// A lost cancel that never committed, the job expiring meanwhile: the
	// retry's "already ended" is not taken for success (the review found
	// any ended phase was).
	resp, err = js.SubmitJob(ctx, connect.NewRequest(&palyrav1.SubmitJobRequest{WasmModule: tinyModule("cancel-expired"), DeadlineMs: 60_000}))
	if err != nil {
		t.Fatal(err)
	}
	id = resp.Msg.Job.Id
	js.s.control = &lossyControl{Control: ctl, lose: 1, instead: func() {
		if _, err := ctl.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_ExpireJob{ExpireJob: &raftpb.ExpireJob{Id: id, AtMs: math.MaxInt64 / 2}}}); err != nil {
			t.Errorf("expire: %v", err)
		}
	}}
	if c, err := js.CancelJob(ctx, connect.NewRequest(&palyrav1.CancelJobRequest{Id: id})); err == nil {
		t.Fatalf("a cancel that never took, on a job that expired meanwhile, answered %v", c.Msg.Job.Phase)
	}
	if j, _ := ctl.fsm.State().Job(id); j.Phase != consensus.PhaseExpired {
		t.Fatalf("the job is %v, want expired", j.Phase)
	}
	// Aborted meanwhile by something else (a denial, a disabled skill,
	// another caller): not this cancel's success either (review).
	resp, err = js.SubmitJob(ctx, connect.NewRequest(&palyrav1.SubmitJobRequest{WasmModule: tinyModule("cancel-other")}))
	if err != nil {
		t.Fatal(err)
	}
	id = resp.Msg.Job.Id
	js.s.control = &lossyControl{Control: ctl, lose: 1, instead: func() {
		if _, err := ctl.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_CancelJob{CancelJob: &raftpb.CancelJob{Id: id, AtMs: 1, Reason: "skill example.tools disabled"}}}); err != nil {
			t.Errorf("the other abort: %v", err)
		}
	}}
	if c, err := js.CancelJob(ctx, connect.NewRequest(&palyrav1.CancelJobRequest{Id: id})); err == nil {
		t.Fatalf("a lost cancel of a job aborted by something else answered success: %v", c.Msg.Job.Error)
	}
	// An array: one task aborted by another cause earlier, the lost
	// cancel never committed, the other task expiring meanwhile.
	arr, err := js.SubmitJob(ctx, connect.NewRequest(&palyrav1.SubmitJobRequest{WasmModule: tinyModule("cancel-array"), Inputs: [][]byte{[]byte("a"), []byte("b")}, DeadlineMs: 60_000}))
	if err != nil {
		t.Fatal(err)
	}
	aid := arr.Msg.Array.Id
	if _, err := ctl.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_CancelJob{CancelJob: &raftpb.CancelJob{Id: consensus.TaskID(aid, 0), AtMs: 1, Reason: "denied"}}}); err != nil {
		t.Fatal(err)
	}
	js.s.control = &lossyControl{Control: ctl, lose: 1, instead: func() {
		if _, err := ctl.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_ExpireJob{ExpireJob: &raftpb.ExpireJob{Id: consensus.TaskID(aid, 1), AtMs: math.MaxInt64 / 2}}}); err != nil {
			t.Errorf("expire: %v", err)
		}
	}}
	if c, err := js.CancelJob(ctx, connect.NewRequest(&palyrav1.CancelJobRequest{Id: aid})); err == nil {
		t.Fatalf("a lost array cancel that never took answered success: %v", c.Msg.Array)
	}
}
