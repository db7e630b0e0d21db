package node_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/identity/pairing"
	"github.com/palyra-mesh/palyra/identity/policy"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/node/backup"
	"github.com/palyra-mesh/palyra/node/blob"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// saveSnapshot streams a snapshot through cl; redirect is set instead
// when the node sent the caller elsewhere.
func saveSnapshot(t *testing.T, cl *client.Client) (file []byte, redirect string, phases []string) {
	t.Helper()
	stream, err := cl.Snapshots.SaveSnapshot(callCtx(t), connect.NewRequest(&palyrav1.SaveSnapshotRequest{}))
	if err != nil {
		t.Fatal(cl.Explain(err))
	}
	defer stream.Close()
	var buf bytes.Buffer
	for stream.Receive() {
		m := stream.Msg()
		if m.RedirectAddress != "" {
			return nil, m.RedirectAddress, nil
		}
		buf.Write(m.Chunk)
		if m.Progress != nil {
			phases = append(phases, m.Progress.Phase)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(cl.Explain(err))
	}
	return buf.Bytes(), "", phases
}

func freeUDP(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	return pc.LocalAddr().String()
}

// A snapshot saved from a two-node cluster (through the node without the
// CA: redirected; with a blob only the peer holds: fetched from it) and
// restored into a fresh data dir brings back the same cluster: every
// job with its blob-held payloads, the secret, the policy, the old
// operator's access with its old credential; the old nodes are revoked
// and the restored node takes new work. A truncated file restores
// nothing; a used data dir is refused.
func TestSnapshotSaveAndRestore(t *testing.T) {
	ctx := callCtx(t)
	first := start(t, node.Config{})
	op := operator(t, first, first.Addr())
	n2 := join(t, op, first.Addr(), t.TempDir())
	op2 := operator(t, first, n2.Addr())

	big := strings.Repeat("0123456789", 1000) // input and output above the inline limit: blobs
	jBig := waitCompleted(t, op, submit(t, op, big))
	jSmall := waitCompleted(t, op, submit(t, op, "small"))
	if jBig.StdoutSha256 == "" || jBig.InputSha256 == "" {
		t.Fatalf("the big job's payloads are not blobs: %+v", jBig)
	}
	if _, err := op.Secrets.SetSecret(ctx, connect.NewRequest(&palyrav1.SetSecretRequest{Name: "tok", Value: []byte("s3cr3t")})); err != nil {
		t.Fatal(op.Explain(err))
	}
	src := string(policy.DefaultPolicy()) + "\n// restored with the cluster\n"
	if _, err := op.Policy.SetPolicy(ctx, connect.NewRequest(&palyrav1.SetPolicyRequest{Source: src})); err != nil {
		t.Fatal(op.Explain(err))
	}
	// The big job's output now lives on n2 only.
	bs, err := blob.Open(first.Layout().BlobDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := bs.Delete(jBig.StdoutSha256); err != nil || first.HoldsBlob(jBig.StdoutSha256) || !n2.HoldsBlob(jBig.StdoutSha256) {
		t.Fatalf("could not leave the output blob on n2 only: %v", err)
	}

	if _, redirect, _ := saveSnapshot(t, op2); redirect != first.Addr() {
		t.Fatalf("n2 (no CA) redirected to %q, want the CA node %s", redirect, first.Addr())
	}
	pairDevice := func() *identity.Credential {
		resp, err := op.Identity.CreatePairing(ctx, connect.NewRequest(&palyrav1.CreatePairingRequest{Kind: "device"}))
		if err != nil {
			t.Fatal(op.Explain(err))
		}
		code, _ := pairing.Parse(resp.Msg.Code)
		cred, _, err := client.Pair(ctx, first.Addr(), code, client.PairOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cred
	}
	laptop := pairDevice() // in the snapshot
	file, _, phases := saveSnapshot(t, op)
	late := pairDevice() // after it
	if !slices.Contains(phases, "done") {
		t.Fatalf("progress phases %v, want a final done", phases)
	}
	if first.HoldsBlob(jBig.StdoutSha256) {
		t.Fatal("saving a snapshot copied a peer's blob onto the saving node")
	}
	info, err := node.InspectSnapshot(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if info.Jobs != 2 || info.Blobs != 3 || info.BlobsNamed != 3 || len(info.Summary.MissingBlobs) != 0 || info.Secrets != 1 ||
		info.Header.RaftIndex == 0 || info.Bytes != int64(len(file)) {
		t.Fatalf("inspect: %+v", info)
	}

	addr := freeUDP(t)
	dir := filepath.Join(t.TempDir(), "restored")
	cfg := node.RestoreConfig{DataDir: dir, Listen: addr}
	_, err = node.Restore(ctx, bytes.NewReader(file[:len(file)-100]), cfg)
	var fe *backup.FormatError
	if !errors.As(err, &fe) || !fe.Truncated {
		t.Fatalf("restore of a truncated file: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a failed restore left %s behind: %v", dir, err)
	}
	res, err := node.Restore(ctx, bytes.NewReader(file), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Sort(res.Revoked); !slices.Equal(res.Revoked, sorted(first.ID(), n2.ID())) {
		t.Fatalf("revoked %v, want the old nodes %s and %s", res.Revoked, first.ID(), n2.ID())
	}
	if _, err := node.Restore(ctx, bytes.NewReader(file), cfg); !errors.Is(err, node.ErrDataDirNotEmpty) {
		t.Fatalf("restore over a restored dir: %v", err)
	}
	// --force with a damaged file deletes nothing: the restore is made
	// beside the data dir and swapped in only once complete (it used to
	// empty the data dir first, then fail).
	before := treeOf(t, dir)
	damaged := slices.Clone(file)
	damaged[len(damaged)/2] ^= 0xff
	for name, f := range map[string][]byte{"damaged": damaged, "truncated": file[:len(file)/2], "empty": nil} {
		if _, err := node.Restore(ctx, bytes.NewReader(f), node.RestoreConfig{DataDir: dir, Listen: addr, Force: true}); err == nil {
			t.Fatalf("forced restore of a %s file succeeded", name)
		}
		if after := treeOf(t, dir); !maps.Equal(before, after) {
			t.Fatalf("a forced restore of a %s file changed the data dir:\nbefore %v\nafter  %v", name, before, after)
		}
	}
	// A forced restore that completes replaces the contents, and leaves
	// nothing beside the data dir.
	other := filepath.Join(t.TempDir(), "used")
	if err := os.MkdirAll(filepath.Join(other, "raft"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "raft", "stale.db"), []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	res2, err := node.Restore(ctx, bytes.NewReader(file), node.RestoreConfig{DataDir: other, Listen: addr, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(other, "raft", "stale.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a forced restore kept a file of the replaced data dir: %v", err)
	}
	if st, err := (node.Layout{Dir: other}).ReadState(); err != nil || st.NodeID != res2.NodeID {
		t.Errorf("the forced restore's node.json: %+v %v, want node %s", st, err, res2.NodeID)
	}
	if entries, _ := os.ReadDir(filepath.Dir(other)); len(entries) != 1 {
		t.Errorf("a forced restore left %d entries beside the data dir, want none: %v", len(entries)-1, entries)
	}
	entries, _ := os.ReadDir(other)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".re") || e.Name() == "RESTORING" {
			t.Errorf("a forced restore left %s in the data dir", e.Name())
		}
	}
	// Through a trailing slash and a symlink (a volume mounted elsewhere):
	// the restore is made inside the data dir, on its filesystem.
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(other, link); err != nil {
		t.Fatal(err)
	}
	if _, err := node.Restore(ctx, bytes.NewReader(file), node.RestoreConfig{DataDir: link + "/", Listen: addr, Force: true}); err != nil {
		t.Fatalf("a forced restore through a symlink with a trailing slash: %v", err)
	}
	// A swap cut off part way leaves RESTORING: node start refuses the
	// dir, naming it, rather than take it for new and make a new cluster.
	if err := os.WriteFile(filepath.Join(other, "RESTORING"), []byte("a snapshot restore was replacing this data dir's contents\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := node.Start(ctx, node.Config{DataDir: other, Listen: addr, Fast: true}); err == nil || !strings.Contains(err.Error(), "unfinished snapshot restore") {
		t.Fatalf("start on a data dir with an unfinished restore: %v", err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(dir)); len(entries) != 1 {
		t.Errorf("the failed forced restores left entries beside %s: %v", dir, entries)
	}

	n2.Close()
	first.Close()
	r := start(t, node.Config{DataDir: dir, Listen: addr})
	if r.ID() != res.NodeID {
		t.Fatalf("restored node is %s, restore said %s", r.ID(), res.NodeID)
	}
	// The old nodes' local operator credentials went with them (their keys
	// are on the machines the operator is told to wipe); the restored
	// node's own works, as would a paired laptop's.
	if _, err := operator(t, first, r.Addr()).Jobs.GetJob(ctx, connect.NewRequest(&palyrav1.GetJobRequest{Id: jSmall.Id})); err == nil {
		t.Fatal("the old first node's local operator still works after the restore")
	}
	old := operator(t, r, r.Addr())
	// A device paired before the snapshot keeps working; one paired after
	// it is unknown to the restored cluster and refused (it pairs again).
	// The ledger, which cannot hold what was issued after the snapshot,
	// restarted incomplete.
	status := func(cred *identity.Credential) error {
		cl, err := client.New(r.Addr(), cred)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if _, err = cl.Node.Status(ctx, connect.NewRequest(&palyrav1.StatusRequest{})); err != nil {
			return cl.Explain(err)
		}
		return nil
	}
	if err := status(laptop); err != nil {
		t.Errorf("a device paired before the snapshot, after the restore: %v", err)
	}
	// Its error says why (not "revoked, expired or another cluster's").
	if err := status(late); err == nil {
		t.Error("a device paired after the snapshot was accepted by the restored cluster")
	} else if e := err.(*client.Error); !strings.Contains(e.Message, "not known to the cluster") || !strings.Contains(e.Message, "after the snapshot") ||
		!strings.Contains(e.Hint, "palyra device pair") {
		t.Errorf("a device paired after the snapshot is told %q (hint %q), want its certificate unknown to the cluster and to pair again", e.Message, e.Hint)
	}
	// The restore's own members (the new node, its operator) have every
	// certificate recorded: a forged one (the file holds the CA key) is
	// not taken for one issued before the snapshot.
	forge := forger(t, r)
	for _, p := range []identity.Principal{{Kind: identity.KindDevice, ID: res.OperatorID}, {Kind: identity.KindNode, ID: r.ID()}} {
		if err := status(forge(p)); err == nil {
			t.Errorf("a forged certificate for the restored cluster's own %s was accepted", p)
		}
	}
	if since, complete, started := r.StateForTest().CertLedgerStarted(); !started || complete || since < info.Header.CreatedAt.UnixMilli() {
		t.Errorf("the restored ledger: started %v complete %v since %d, want restarted incomplete at the restore", started, complete, since)
	}
	for _, want := range []*palyrav1.Job{jBig, jSmall} {
		got := waitCompleted(t, old, want.Id)
		if string(got.Stdout) != string(want.Stdout) || string(got.Input) != string(want.Input) || got.CommitIndex != want.CommitIndex {
			t.Fatalf("job %s after restore: %d bytes out, %d in; want %d, %d", want.Id, len(got.Stdout), len(got.Input), len(want.Stdout), len(want.Input))
		}
	}
	secrets, err := old.Secrets.ListSecrets(ctx, connect.NewRequest(&palyrav1.ListSecretsRequest{}))
	if err != nil || len(secrets.Msg.Secrets) != 1 || secrets.Msg.Secrets[0].Name != "tok" {
		t.Fatalf("secrets after restore: %v %v", secrets, err)
	}
	pol, err := old.Policy.GetPolicy(ctx, connect.NewRequest(&palyrav1.GetPolicyRequest{}))
	if err != nil || pol.Msg.Source != src {
		t.Fatalf("policy after restore: %v", err)
	}
	st := r.StateForTest()
	for _, id := range []string{first.ID(), n2.ID()} {
		if !st.IsRevoked("node", id) {
			t.Fatalf("old node %s is not revoked in the restored cluster", id)
		}
	}
	if _, ok := st.Member("node", r.ID()); !ok {
		t.Fatal("the restored node did not register itself")
	}
	j := waitCompleted(t, old, submit(t, old, "after restore"))
	if j.NodeId != r.ID() || j.CommitIndex <= info.Header.RaftIndex {
		t.Fatalf("new job %+v: want it on %s after index %d", j, r.ID(), info.Header.RaftIndex)
	}

	// The restored node held the only copies of the blobs: they reach the
	// first node that joins, without any job asking for them.
	r2 := join(t, old, r.Addr(), t.TempDir())
	waitFor(t, "the restored blobs to reach the joined node", 2*time.Minute, func() bool {
		return r2.HoldsBlob(jBig.InputSha256) && r2.HoldsBlob(jBig.StdoutSha256) && r2.HoldsBlob(jBig.Wasm.ModuleSha256)
	})
}

func sorted(s ...string) []string {
	slices.Sort(s)
	return s
}

// treeOf maps each file under dir (but the lock) to its size and the
// first bytes of its sha256.
func treeOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "LOCK" {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = fmt.Sprintf("%d:%x", len(b), sha256.Sum256(b))[:24]
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
