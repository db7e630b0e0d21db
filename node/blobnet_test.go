package node_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/node/blob"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// A module known to be held by this node and by another live node is not
// read, hashed or pushed again by later submissions naming it: the first
// submission replicates it, the next ones only commit.
func TestKnownModuleIsNotPushedAgain(t *testing.T) {
	first, second, _ := twoNodes(t)
	nodes := []*node.Node{first, second}
	// A Go guest would cost a cold compile per node, which proves nothing more.
	mod := emptyModule
	sub := func(cl *client.Client, in string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := cl.Submit(ctx, &palyrav1.SubmitJobRequest{WasmModule: mod, Input: []byte(in)}); err != nil {
			t.Fatal(cl.Explain(err))
		}
	}
	for i, n := range nodes {
		cl := operator(t, first, n.Addr())
		sub(cl, "first") // bytes (node 1) or by hash (node 2): replicated to the other node
		pushed := n.BlobPushes()
		if pushed == 0 {
			t.Fatalf("node %d: the first submission pushed the module nowhere", i+1)
		}
		for k := 0; k < 3; k++ {
			sub(cl, "again") // by hash
		}
		if got := n.BlobPushes(); got != pushed {
			t.Fatalf("node %d: %d more pushes for 3 by-hash submissions of a module both nodes hold, want none", i+1, got-pushed)
		}
	}
}

// A submission naming a held module by hash renews the blob's age, as
// storing it again does: collection's grace must count from the newest
// use, not from the first store (a module used all day looked a day old,
// and a by-hash submit right after a collection could lose its module
// between the look-up and the commit).
func TestSubmitByHashRenewsTheModule(t *testing.T) {
	n := start(t, node.Config{})
	cl := operator(t, n, n.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cl.Submit(ctx, &palyrav1.SubmitJobRequest{WasmModule: emptyModule}); err != nil {
		t.Fatal(cl.Explain(err))
	}
	h := blob.Hash(emptyModule)
	path := filepath.Join(n.Layout().BlobDir(), "sha256", h[:2], h)
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Submit(ctx, &palyrav1.SubmitJobRequest{ModuleSha256: h}); err != nil {
		t.Fatal(cl.Explain(err))
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(fi.ModTime()) > time.Minute {
		t.Errorf("the module blob's age after a by-hash submit is %s, want renewed", time.Since(fi.ModTime()).Round(time.Second))
	}
}

// A store cut off by a crash (written, not yet renamed into place) leaves
// a temp file; the next start removes it.
func TestStartRemovesUnfinishedBlobWrites(t *testing.T) {
	dir := t.TempDir()
	n := start(t, node.Config{DataDir: dir})
	addr := n.Addr()
	n.Close()
	shard := filepath.Join(n.Layout().BlobDir(), "sha256", "ab")
	if err := os.MkdirAll(shard, 0o700); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(shard, ".tmp-2290400951")
	if err := os.WriteFile(tmp, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	start(t, node.Config{DataDir: dir, Listen: addr})
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("an unfinished blob write survived a restart (stat: %v)", err)
	}
}
