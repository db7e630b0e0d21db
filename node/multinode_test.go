package node_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/internal/testbuf"
	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/node/cluster"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// operator returns an API client for n using the first node's operator.
func operator(t testing.TB, first *node.Node, addr string) *client.Client {
	t.Helper()
	cred, err := identity.LoadCredential(first.Layout().OperatorDir())
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(addr, cred)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// join pairs a new node through peer with a fresh node code and starts it.
func join(t *testing.T, op *client.Client, peer string, dataDir string) *node.Node {
	t.Helper()
	return joinWith(t, op, peer, node.Config{DataDir: dataDir})
}

// twoNodes starts a node and joins a second one to it, and waits until
// each sees both alive. op is the first node's operator, on the first node.
func twoNodes(t *testing.T) (first, second *node.Node, op *client.Client) {
	t.Helper()
	first = start(t, node.Config{})
	op = operator(t, first, first.Addr())
	second = join(t, op, first.Addr(), t.TempDir())
	waitFor(t, "both nodes alive on both", time.Minute, func() bool {
		for _, n := range []*node.Node{first, second} {
			alive := 0
			for _, m := range n.Cluster().Members() {
				if m.State == cluster.StateAlive {
					alive++
				}
			}
			if alive != 2 {
				return false
			}
		}
		return true
	})
	return first, second, op
}

// emptyModule is the smallest runnable module, (module (func (export
// "_start"))): cheap to compile on every node.
var emptyModule = []byte("\x00asm\x01\x00\x00\x00\x01\x04\x01\x60\x00\x00\x03\x02\x01\x00\x07\x0a\x01\x06_start\x00\x00\x0a\x04\x01\x02\x00\x0b")

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// healthy reports whether n sees want alive nodes, want voters and one leader.
func healthy(n *node.Node, alive, voters int) (bool, string) {
	ms := n.Cluster().Members()
	a, v, l := 0, 0, ""
	for _, m := range ms {
		if m.State == cluster.StateAlive {
			a++
		}
		if m.Voter {
			v++
		}
		if m.Leader {
			l = m.ID
		}
	}
	return a == alive && v == voters && l != "", l
}

func submit(t *testing.T, cl *client.Client, input string) string {
	t.Helper()
	resp, err := cl.Jobs.SubmitJob(callCtx(t), connect.NewRequest(&palyrav1.SubmitJobRequest{
		WasmModule: testwasm.Build(t, "reverse"), Input: []byte(input)}))
	if err != nil {
		t.Fatal(cl.Explain(err))
	}
	return resp.Msg.Job.Id
}

func waitCompleted(t *testing.T, cl *client.Client, id string) *palyrav1.Job {
	t.Helper()
	var j *palyrav1.Job
	waitFor(t, "job "+id+" to complete", 2*time.Minute, func() bool {
		resp, err := cl.Jobs.GetJob(callCtx(t), connect.NewRequest(&palyrav1.GetJobRequest{Id: id}))
		if err != nil {
			return false
		}
		j = resp.Msg.Job
		return j.Phase.Terminal()
	})
	if j.Phase != palyrav1.JobPhase_JOB_PHASE_COMPLETED {
		t.Fatalf("job %s: %s %v", id, j.Phase.WireName(), j.Error)
	}
	return j
}

// threeVoters starts a node and pairs two more to it (the third through
// the second, a node without the CA: pairing is relayed), and waits until
// every node sees 3 alive voters and the same leader, whose id it returns.
func threeVoters(t *testing.T) (nodes []*node.Node, leader string) {
	t.Helper()
	first := start(t, node.Config{})
	op := operator(t, first, first.Addr())
	n2 := join(t, op, first.Addr(), t.TempDir())
	n3 := join(t, op, n2.Addr(), t.TempDir())
	nodes = []*node.Node{first, n2, n3}
	waitFor(t, "3 alive voters and one leader everywhere", time.Minute, func() bool {
		var leaders []string
		for _, n := range nodes {
			ok, l := healthy(n, 3, 3)
			if !ok {
				return false
			}
			leaders = append(leaders, l)
		}
		leader = leaders[0]
		return leaders[0] == leaders[1] && leaders[1] == leaders[2]
	})
	return nodes, leader
}

// Three nodes formed by pairing: every node sees 3 alive voters and the
// same leader; jobs submitted anywhere run; the leader's loss is survived
// and the killed node rejoins from its data dir by itself.
func TestThreeNodesFailover(t *testing.T) {
	nodes, leader := threeVoters(t)
	first := nodes[0]
	op1 := operator(t, first, first.Addr())

	// Jobs submitted to each node complete; with blobs replicated, any
	// worker can run them.
	ran := map[string]bool{}
	for i, n := range nodes {
		cl := operator(t, first, n.Addr())
		for k := 0; k < 4; k++ {
			in := fmt.Sprintf("n%d-%d", i, k)
			j := waitCompleted(t, cl, submit(t, cl, in))
			ran[j.NodeId] = true
			if string(j.Stdout) != reverse(in) {
				t.Fatalf("job output %q", j.Stdout)
			}
		}
	}
	// RunJob submits and follows in one call, through leader and
	// followers alike (a follower waits for its replica, no quorum read);
	// a large output arrives whole in the last message.
	for i, n := range nodes {
		cl := operator(t, first, n.Addr())
		in := fmt.Sprintf("run-%d-%s", i, strings.Repeat("x", consensus.InlineLimit*i))
		var seen []*palyrav1.Job
		j, err := cl.Run(callCtx(t), &palyrav1.SubmitJobRequest{WasmModule: testwasm.Build(t, "reverse"), Input: []byte(in)},
			func(j *palyrav1.Job) { seen = append(seen, j) })
		if err != nil {
			t.Fatalf("Run through %s: %v", n.ID(), cl.Explain(err))
		}
		if j.Phase != palyrav1.JobPhase_JOB_PHASE_COMPLETED || string(j.Stdout) != reverse(in) {
			t.Fatalf("Run through %s: %s, output %d bytes, want %d", n.ID(), j.Phase.WireName(), len(j.Stdout), len(in))
		}
		if len(seen) == 0 || seen[0].Id != j.Id || seen[0].SubmittedAtMs == 0 || seen[len(seen)-1] != j {
			t.Fatalf("Run through %s: updates %v; want the accepted job first and the ended one last", n.ID(), seen)
		}
	}
	arr := &palyrav1.SubmitJobRequest{WasmModule: testwasm.Build(t, "reverse"), Inputs: [][]byte{[]byte("a")}}
	if _, err := op1.Run(callCtx(t), arr, nil); op1.Explain(err).Code != "invalid_argument" {
		t.Fatalf("Run with an array: %v; want invalid_argument", op1.Explain(err))
	}

	if len(ran) < 2 {
		t.Errorf("12 jobs all ran on %v; want them spread over the workers", ran)
	}

	// A node cannot report another node's work: the leader checks what a
	// follower forwards against its certificate. Forged results, writes
	// and placements are refused, and the job keeps its real result.
	var follower, victim *node.Node
	for _, n := range nodes {
		if n.ID() != leader && follower == nil {
			follower = n
		} else if n.ID() != leader {
			victim = n
		}
	}
	done := waitCompleted(t, op1, submit(t, op1, "forge me"))
	forged := []*raftpb.Command{
		{Cmd: &raftpb.Command_FinishJob{FinishJob: &raftpb.FinishJob{Id: done.Id, Attempt: done.Attempt, NodeId: victim.ID(), Ok: true, Stdout: []byte("forged")}}},
		{Cmd: &raftpb.Command_FinishBatch{FinishBatch: &raftpb.FinishBatch{Results: []*raftpb.FinishJob{{Id: done.Id, Attempt: done.Attempt, NodeId: victim.ID(), Ok: true}}}}},
		{Cmd: &raftpb.Command_KvPut{KvPut: &raftpb.KVPut{Key: "k", Value: []byte("v")}}},
		{Cmd: &raftpb.Command_KvPut{KvPut: &raftpb.KVPut{Key: "k", Value: []byte("v"), JobId: done.Id, Attempt: done.Attempt, NodeId: victim.ID()}}},
		{Cmd: &raftpb.Command_RequeueJob{RequeueJob: &raftpb.RequeueJob{Id: done.Id, Attempt: done.Attempt, NodeId: victim.ID()}}},
		{Cmd: &raftpb.Command_SchedulerRound{SchedulerRound: &raftpb.SchedulerRound{Placements: []*raftpb.AssignJob{{Id: done.Id, Attempt: 9, NodeId: follower.ID()}}}}},
	}
	for i, cmd := range forged {
		_, err := follower.Cluster().Apply(callCtx(t), cmd)
		var ce *consensus.Error
		if !errors.As(err, &ce) || ce.Code != "permission_denied" {
			t.Fatalf("forged command %d from %s: %v; want permission_denied", i, follower.ID(), err)
		}
	}
	if j := getJob(t, op1, done.Id); string(j.Stdout) != reverse("forge me") || j.Attempt != done.Attempt {
		t.Fatalf("after forgeries: output %q attempt %d", j.Stdout, j.Attempt)
	}

	// Kill the leader: a new one is elected among the survivors, and a
	// job submitted to a survivor completes.
	var dead *node.Node
	var survivors []*node.Node
	for _, n := range nodes {
		if n.ID() == leader {
			dead = n
		} else {
			survivors = append(survivors, n)
		}
	}
	deadDir, deadAddr := dead.Layout().Dir, dead.Addr()
	dead.Close()
	var newLeader string
	waitFor(t, "a new leader", time.Minute, func() bool {
		_, l := healthy(survivors[0], 2, 3)
		newLeader = l
		return l != "" && l != leader
	})
	cl := operator(t, first, survivors[1].Addr())
	waitCompleted(t, cl, submit(t, cl, "after failover"))

	// Restart the killed node on its data dir and address: it rejoins.
	back := start(t, node.Config{DataDir: deadDir, Listen: deadAddr})
	_ = back
	waitFor(t, "the restarted node to rejoin", time.Minute, func() bool {
		ok, _ := healthy(survivors[0], 3, 3)
		ok2, _ := healthy(back, 3, 3)
		return ok && ok2
	})
	_ = newLeader
}

func reverse(s string) string {
	r := []rune(s)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return string(r)
}

// A node restarted on a new address (an explicit, different --listen)
// tells the cluster: the leader records the new address in raft, so the
// others reach it there, and it is a voter again. This is the leader of
// three, so it comes back as a follower and must ask the new leader.
func TestRestartOnANewAddressRejoins(t *testing.T) {
	first := start(t, node.Config{})
	op := operator(t, first, first.Addr())
	n2 := join(t, op, first.Addr(), t.TempDir())
	n3 := join(t, op, first.Addr(), t.TempDir())
	nodes := []*node.Node{first, n2, n3}
	var leader string
	waitFor(t, "3 alive voters and one leader everywhere", time.Minute, func() bool {
		ok, l := healthy(first, 3, 3)
		leader = l
		return ok
	})
	var moved *node.Node
	var others []*node.Node
	for _, n := range nodes {
		if n.ID() == leader {
			moved = n
		} else {
			others = append(others, n)
		}
	}
	dir, oldAddr := moved.Layout().Dir, moved.Addr()
	moved.Close()
	back := start(t, node.Config{DataDir: dir, Listen: "127.0.0.1:0"})
	if back.Addr() == oldAddr {
		t.Fatalf("restarted on %s, want a new port", back.Addr())
	}
	if st, err := back.Layout().ReadState(); err != nil || st.Address != back.Addr() {
		t.Fatalf("node.json records %+v (%v), want address %s", st, err, back.Addr())
	}
	waitFor(t, "every node to list the moved node alive, a voter, at its new address in gossip and raft", 90*time.Second, func() bool {
		for _, n := range append(others, back) {
			if ok, _ := healthy(n, 3, 3); !ok {
				return false
			}
			found := false
			for _, m := range n.Cluster().Members() {
				if m.ID == back.ID() {
					found = m.Address == back.Addr() && m.RaftAddress == back.Addr() && m.Voter && m.State == cluster.StateAlive
				}
			}
			if !found {
				return false
			}
		}
		return true
	})
	cl := operator(t, first, others[0].Addr())
	waitCompleted(t, cl, submit(t, cl, "after the move"))
}

// A node that is starting (here: restarted while the only other voter is
// down, so it cannot join or catch up) refuses API connections in their
// handshake instead of taking calls it cannot answer: a call fails at once
// saying so (it waited until the node served), and a client that knows
// another node reaches it. Once the node serves, calls to it work.
func TestStartingNodeRefusesAPICalls(t *testing.T) {
	first, second, _ := twoNodes(t)
	firstDir, firstAddr := first.Layout().Dir, first.Addr()
	secondDir, secondAddr := second.Layout().Dir, second.Addr()
	cred, err := identity.LoadCredential(first.Layout().OperatorDir())
	if err != nil {
		t.Fatal(err)
	}
	second.Close()
	first.Close()

	type started struct {
		n   *node.Node
		err error
	}
	ch := make(chan started, 1)
	go func() {
		n, err := node.Start(context.Background(), node.Config{DataDir: secondDir, Fast: true, BrowserSlots: -1, WasmCacheDir: sharedWasmCache,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		ch <- started{n, err}
	}()
	t.Cleanup(func() {
		if s := <-ch; s.n != nil {
			s.n.Close()
		}
	})
	cl, err := client.New(secondAddr, cred)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var callErr error
	waitFor(t, "the starting node to refuse API calls", 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, callErr = cl.Node.Status(ctx, connect.NewRequest(&palyrav1.StatusRequest{}))
		return callErr != nil && strings.Contains(cl.Explain(callErr).Message, "does not serve the API yet")
	})

	// The first node back: the second one finishes starting and serves.
	back := start(t, node.Config{DataDir: firstDir, Listen: firstAddr})
	both, err := client.NewCluster([]string{secondAddr, back.Addr()}, cred, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer both.Close()
	waitFor(t, "a call through the pair of addresses", 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := both.Node.Status(ctx, connect.NewRequest(&palyrav1.StatusRequest{}))
		return err == nil
	})
	waitFor(t, "the second node to serve", time.Minute, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := cl.Node.Status(ctx, connect.NewRequest(&palyrav1.StatusRequest{}))
		return err == nil
	})
}

// The node that made the cluster, once it left ('node leave') and is
// started again on its data dir, rejoins through the servers its log
// names, by asking the leader. It never joined, so it had no seeds of its
// own and waited outside raft: the leader, which had it leave, adds a
// departed node back from gossip only after ten dead-server graces (10
// minutes with the production timers; 20 s with the test's, which is why
// this test looks at how it came back, in the others' logs).
func TestFirstNodeRejoinsAfterLeave(t *testing.T) {
	first := start(t, node.Config{})
	op := operator(t, first, first.Addr())
	var logs testbuf.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	n2 := joinWith(t, op, first.Addr(), node.Config{Logger: logger})
	joinWith(t, op, first.Addr(), node.Config{Logger: logger})
	waitFor(t, "3 alive voters and a leader", time.Minute, func() bool { ok, _ := healthy(first, 3, 3); return ok })
	if _, err := op.Node.Leave(callCtx(t), connect.NewRequest(&palyrav1.LeaveRequest{})); err != nil {
		t.Fatal(op.Explain(err))
	}
	dir, addr, id := first.Layout().Dir, first.Addr(), first.ID()
	first.Close()
	waitFor(t, "the others to drop the first node from raft", time.Minute, func() bool {
		for _, m := range n2.Cluster().Members() {
			if m.ID == id && m.InRaft {
				return false
			}
		}
		return true
	})

	back := start(t, node.Config{DataDir: dir, Listen: addr})
	waitFor(t, "the first node back as a voter, seen so by every node", 90*time.Second, func() bool {
		for _, n := range []*node.Node{back, n2} {
			if ok, _ := healthy(n, 3, 3); !ok {
				return false
			}
		}
		return true
	})
	joined := false
	for _, l := range strings.Split(logs.String(), "\n") {
		joined = joined || (strings.Contains(l, `msg="node joined raft as non-voter"`) && strings.Contains(l, " peer="+id+" "))
	}
	if !joined {
		t.Fatalf("the first node is back in raft, but not by its own join (no leader logged that it joined): it waited for the leader to forget that it left\n%s", logs.String())
	}
	cl := operator(t, back, back.Addr())
	waitCompleted(t, cl, submit(t, cl, "after the rejoin"))
}
