package node_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/hashicorp/raft"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity/pairing"
	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// joinWith pairs a new node through peer and starts it with cfg.
func joinWith(t testing.TB, op *client.Client, peer string, cfg node.Config) *node.Node {
	t.Helper()
	ctx := callCtx(t)
	resp, err := op.Identity.CreatePairing(ctx, connect.NewRequest(&palyrav1.CreatePairingRequest{Kind: "node"}))
	if err != nil {
		t.Fatal(op.Explain(err))
	}
	code, err := pairing.Parse(resp.Msg.Code)
	if err != nil {
		t.Fatal(err)
	}
	cred, pr, err := client.Pair(ctx, peer, code, client.PairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	seeds := append([]string{peer}, pr.Peers...)
	if err := node.PrepareJoin(cfg.DataDir, cred, pr.ClusterName, append(seeds, peer), pr.DataKey); err != nil {
		t.Fatal(err)
	}
	if st, err := (node.Layout{Dir: cfg.DataDir}).ReadState(); err != nil || len(st.Seeds) == 0 || st.Seeds[0] != peer || slices.Contains(st.Seeds[1:], peer) {
		t.Fatalf("seeds recorded: %v (%v); want %s first and once", st.Seeds, err, peer)
	}
	return start(t, cfg)
}

// latestSnapshot restores the newest snapshot in a node's raft dir into a
// fresh FSM.
func latestSnapshot(t *testing.T, n *node.Node) *consensus.State {
	t.Helper()
	store, err := raft.NewFileSnapshotStore(n.Layout().RaftDir(), 3, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	metas, err := store.List()
	if err != nil || len(metas) == 0 {
		t.Fatalf("no snapshot in %s: %v", n.Layout().RaftDir(), err)
	}
	_, rc, err := store.Open(metas[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	f := consensus.NewFSM()
	if err := f.Restore(rc); err != nil {
		t.Fatal(err)
	}
	return f.State()
}

// Pruning removes an ended job from every node's state and from the
// snapshots taken after it, and every node collects the job's blobs (its
// input and output, both above the inline bound, so blobs); `job get`
// then says the job may have been pruned.
func TestPruneRemovesJobsAndBlobsEverywhere(t *testing.T) {
	gc := node.Config{BlobGCInterval: 200 * time.Millisecond, BlobGCGrace: 2 * time.Second}
	first := start(t, gc)
	op := operator(t, first, first.Addr())
	nodes := []*node.Node{first, joinWith(t, op, first.Addr(), gc), joinWith(t, op, first.Addr(), gc)}
	tc := &testCluster{t: t, first: first, nodes: nodes}
	tc.waitHealthy(3)
	ctx := callCtx(t)

	in := strings.Repeat("0123456789abcdef", 1024) // 16 KiB: a blob, and so is its reversal
	resp, err := op.Submit(ctx, &palyrav1.SubmitJobRequest{WasmModule: testwasm.Build(t, "reverse"), Input: []byte(in)})
	if err != nil {
		t.Fatal(op.Explain(err))
	}
	j := waitCompleted(t, op, resp.Job.Id)
	if string(j.Stdout) != reverse(in) || j.InputSha256 == "" || j.StdoutSha256 == "" {
		t.Fatalf("job: stdout %d bytes, input hash %q, stdout hash %q", len(j.Stdout), j.InputSha256, j.StdoutSha256)
	}
	for _, n := range nodes {
		rec, ok := n.StateForTest().Job(j.Id)
		waitFor(t, "the job on every node", time.Minute, func() bool { rec, ok = n.StateForTest().Job(j.Id); return ok && rec.Phase.Terminal() })
		if len(rec.Input) != 0 || len(rec.Stdout) != 0 {
			t.Fatalf("the replicated record carries %d input and %d output bytes; want hashes only", len(rec.Input), len(rec.Stdout))
		}
	}
	held := func(h string) int {
		c := 0
		for _, n := range nodes {
			if n.HoldsBlob(h) {
				c++
			}
		}
		return c
	}
	if held(j.InputSha256) < 2 || held(j.StdoutSha256) < 2 {
		t.Fatalf("input held by %d nodes, output by %d; want each on at least two", held(j.InputSha256), held(j.StdoutSha256))
	}

	pr, err := op.Jobs.PruneJobs(ctx, connect.NewRequest(&palyrav1.PruneJobsRequest{OlderThanMs: 0}))
	if err != nil || pr.Msg.Pruned != 1 {
		t.Fatalf("prune: %v %v", pr, op.Explain(err))
	}
	for _, n := range nodes {
		waitFor(t, "the job gone from every node", time.Minute, func() bool { _, ok := n.StateForTest().Job(j.Id); return !ok })
		if n.StateForTest().BlobReferenced(j.InputSha256) || n.StateForTest().BlobReferenced(j.StdoutSha256) {
			t.Fatal("a pruned job's blobs are still referenced")
		}
	}
	waitFor(t, "every node to collect the pruned job's blobs", time.Minute, func() bool {
		return held(j.InputSha256) == 0 && held(j.StdoutSha256) == 0
	})
	for _, n := range nodes {
		if err := n.SnapshotForTest(); err != nil {
			t.Fatal(err)
		}
		st := latestSnapshot(t, n)
		if _, ok := st.Job(j.Id); ok || st.BlobReferenced(j.StdoutSha256) {
			t.Fatalf("a snapshot taken after pruning still holds the job")
		}
		if st.AppliedIndex() == 0 {
			t.Fatal("a restored snapshot does not know its applied index")
		}
	}
	_, err = op.Jobs.GetJob(ctx, connect.NewRequest(&palyrav1.GetJobRequest{Id: j.Id}))
	if e := op.Explain(err); e == nil || e.Code != "not_found" || !strings.Contains(e.Message, "pruned") {
		t.Fatalf("job get on a pruned job: %v", e)
	}
}
