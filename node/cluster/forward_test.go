package cluster

import (
	"reflect"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// A write forwarded from a follower answers with the whole job the leader
// committed: scheduling fields (priority, constraints, retries, deadline),
// grants, script and idempotency key survive the trip, for a submit and for
// a cancel alike.
func TestForwardedApplyAnswersWholeJob(t *testing.T) {
	nodes := formCluster(t, 3, 3)
	eventually(t, 20*time.Second, "3-voter cluster", func() error { return converged(nodes, 3, 0) })
	follower := others(nodes, leaderOf(t, nodes))[0]

	submitted := time.Now().UnixMilli()
	rec := &raftpb.JobRecord{
		Id: "full-job", Kind: "wasm", ModuleSha256: "ab", Input: []byte("in"), MemoryBytes: 1 << 20, Fuel: 1000,
		TimeoutMs: 5000, MaxOutputBytes: 4096, Submitter: "device:d-1", SubmittedAtMs: submitted,
		Priority: 7, Constraints: map[string]string{"zone": "b", "gpu": "no"}, MaxRetries: 3,
		DeadlineAtMs: submitted + 60_000, IdempotencyKey: "device:d-1/key-1", PayloadHash: []byte("cafe"),
		SecretNames: []string{"api-token"}, KvPrefix: "app/", AllowHosts: []string{"example.com"}, AllowPrivate: true,
	}
	check := func(what string, got consensus.Job) {
		t.Helper()
		if got.Priority != 7 || got.Constraints["zone"] != "b" || got.Constraints["gpu"] != "no" || got.MaxRetries != 3 ||
			// The deadline (a minute) counts on the leader's clock.
			got.DeadlineAtMS < submitted+60_000 || got.DeadlineAtMS > time.Now().UnixMilli()+60_000 || got.IdempotencyKey != "device:d-1/key-1" || string(got.PayloadHash) != "cafe" ||
			!reflect.DeepEqual(got.SecretNames, []string{"api-token"}) || got.KVPrefix != "app/" ||
			!reflect.DeepEqual(got.AllowHosts, []string{"example.com"}) || !got.AllowPrivate || got.MaxOutput != 4096 {
			t.Fatalf("%s forwarded from a follower answered %+v: fields were lost on the way", what, got)
		}
		if err := follower.cl.VerifyRead(ctxFor(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		want, ok := follower.store.State().Job(rec.Id)
		if !ok {
			t.Fatalf("%s: job missing from the follower's state", what)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s forwarded from a follower answered\n%+v\nbut the replicated job is\n%+v", what, got, want)
		}
	}

	job, err := follower.cl.Apply(ctxFor(t, 10*time.Second), &raftpb.Command{Cmd: &raftpb.Command_SubmitJob{SubmitJob: &raftpb.SubmitJob{Job: rec}}})
	if err != nil {
		t.Fatalf("Apply on follower: %v", err)
	}
	check("submit", job)

	job, err = follower.cl.Apply(ctxFor(t, 10*time.Second), &raftpb.Command{Cmd: &raftpb.Command_CancelJob{CancelJob: &raftpb.CancelJob{Id: rec.Id, AtMs: 2_000}}})
	if err != nil {
		t.Fatalf("cancel on follower: %v", err)
	}
	if job.Phase != consensus.PhaseAborted {
		t.Fatalf("cancel answered phase %v, want aborted", job.Phase)
	}
	check("cancel", job)
}
