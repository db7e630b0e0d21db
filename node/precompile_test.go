package node_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// A node compiles the module of a job queued anywhere in the cluster ahead
// of running it, without a job of it placed there; modules whose jobs all
// ended are not in the live index any more.
func TestModulesAreCompiledAheadOnEveryNode(t *testing.T) {
	_, second, op1 := twoNodes(t)
	// (module (func (export "_start")) (func (export "other"))): small, and
	// no other test uses it, so no node has compiled it before.
	mod := []byte("\x00asm\x01\x00\x00\x00\x01\x04\x01\x60\x00\x00\x03\x03\x02\x00\x00\x07\x12\x02\x06_start\x00\x00\x05other\x00\x01\x0a\x07\x02\x02\x00\x0b\x02\x00\x0b")
	sum := sha256.Sum256(mod)
	hash := hex.EncodeToString(sum[:])
	if second.CompiledForTest(hash) {
		t.Fatal("the second node holds the module before any job names it")
	}
	// A job no node may run: it stays queued, and no node runs the module.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := op1.Submit(ctx, &palyrav1.SubmitJobRequest{WasmModule: mod, Constraints: map[string]string{"zone": "nowhere"}})
	if err != nil {
		t.Fatal(op1.Explain(err))
	}
	waitFor(t, "the second node to compile the queued job's module", 30*time.Second, func() bool { return second.CompiledForTest(hash) })
	if j, _ := second.StateForTest().Job(resp.Job.Id); j.Phase.Terminal() || j.NodeID != "" {
		t.Fatalf("the job was placed or ended (%s on %q): the module was compiled by a run, not ahead of one", j.Phase, j.NodeID)
	}
	if live := second.StateForTest().LiveModules(); len(live) != 1 || live[0] != hash {
		t.Fatalf("live modules %v, want only the queued job's", live)
	}
	if _, err := op1.Jobs.CancelJob(ctx, connect.NewRequest(&palyrav1.CancelJobRequest{Id: resp.Job.Id})); err != nil {
		t.Fatal(op1.Explain(err))
	}
	waitFor(t, "the module to leave the live index", 30*time.Second, func() bool { return len(second.StateForTest().LiveModules()) == 0 })
}
