package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/internal/history"
	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// A worker paused with SIGSTOP is alive to the OS and silent to the
// cluster: its placements' leases lapse, its jobs are re-queued and
// complete elsewhere; after SIGCONT nothing it reports for the old
// attempts counts (the history checker, on the leader's log, finds every
// job completed exactly once and no stale result recorded).
func TestPausedWorkerLosesItsLeases(t *testing.T) {
	t.Parallel()
	c := newLoopbackCluster(t, 3)
	// A lease of 1s lapses before gossip's failure detection plus the
	// dead-worker grace (about 1.5–2s on the lan timers) would re-queue
	// the same jobs for "worker is dead": this test is about the lease.
	c.extra = []string{"--lease-ttl", "1s"}
	c.form()
	views := c.waitViews("3 alive voters and one leader on every node", 90*time.Second, c.members, agree(3, 3))
	leader := c.byID(leaderOf(views))
	victim := c.follower(leader)
	cred, err := identity.LoadCredential(node.Layout{Dir: c.members[0].dataDir}.OperatorDir())
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(leader.addr, cred)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	mod, err := os.ReadFile(testwasm.Path(t, "sleep"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var ids []string
	for i := range 12 {
		r, err := cl.Submit(ctx, &palyrav1.SubmitJobRequest{WasmModule: mod, Input: []byte("3s"), IdempotencyKey: fmt.Sprint("sleep-", i)})
		if err != nil {
			t.Fatal(cl.Explain(err))
		}
		ids = append(ids, r.Job.Id)
	}
	onVictim := map[string]uint32{}
	waitUntil(t, "jobs running on "+victim.name, time.Minute, func() error {
		l, err := cl.Jobs.ListJobs(ctx, connect.NewRequest(&palyrav1.ListJobsRequest{Phase: palyrav1.JobPhase_JOB_PHASE_RUNNING, NodeId: victim.id}))
		if err != nil {
			return cl.Explain(err)
		}
		for _, j := range l.Msg.Jobs {
			onVictim[j.Id] = j.Attempt
		}
		if len(onVictim) == 0 {
			return fmt.Errorf("none yet")
		}
		return nil
	})
	if err := victim.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Logf("paused %s holding %d jobs", victim.name, len(onVictim))
	waitUntil(t, "the paused worker's jobs to complete elsewhere", 2*time.Minute, func() error {
		for id, attempt := range onVictim {
			g, err := cl.Jobs.GetJob(ctx, connect.NewRequest(&palyrav1.GetJobRequest{Id: id}))
			if err != nil {
				return cl.Explain(err)
			}
			j := g.Msg.Job
			if j.Phase != palyrav1.JobPhase_JOB_PHASE_COMPLETED {
				return fmt.Errorf("%s is %s", id, j.Phase.WireName())
			}
			if j.NodeId == victim.id || j.Attempt <= attempt {
				return fmt.Errorf("%s completed on %s as attempt %d", id, j.NodeId, j.Attempt)
			}
		}
		return nil
	})
	if !strings.Contains(leader.tail(400), "lease lapsed") {
		t.Errorf("the leader never logged a lapsed lease:\n%s", leader.tail(40))
	}
	// Resume the worker: what it reports for its old attempts is refused,
	// or it learns (from its lease renewal or its replica catching up)
	// that they are gone and stops them, whichever comes first.
	if err := victim.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, victim.name+" to give up its old placements", time.Minute, func() error {
		log := victim.tail(400)
		for _, s := range []string{"result refused", "no longer this worker's", "run stopped"} {
			if strings.Contains(log, s) {
				t.Logf("%s after SIGCONT: %q", victim.name, s)
				return nil
			}
		}
		return fmt.Errorf("nothing yet")
	})
	var observed []history.Observed
	for _, id := range ids {
		g, err := cl.Jobs.GetJob(ctx, connect.NewRequest(&palyrav1.GetJobRequest{Id: id}))
		if err != nil {
			t.Fatal(cl.Explain(err))
		}
		if g.Msg.Job.Phase != palyrav1.JobPhase_JOB_PHASE_COMPLETED {
			waitUntil(t, id+" to complete", time.Minute, func() error {
				g, err = cl.Jobs.GetJob(ctx, connect.NewRequest(&palyrav1.GetJobRequest{Id: id}))
				if err != nil {
					return cl.Explain(err)
				}
				if g.Msg.Job.Phase != palyrav1.JobPhase_JOB_PHASE_COMPLETED {
					return fmt.Errorf("%s", g.Msg.Job.Phase.WireName())
				}
				return nil
			})
		}
		observed = append(observed, history.Observed{ID: id, Expected: []byte("slept 3s")})
	}
	dir := leader.dataDir
	for _, m := range c.members {
		m.kill()
	}
	log, err := history.ReadLog(filepath.Join(node.Layout{Dir: dir}.RaftDir(), "raft.db"))
	if err != nil {
		t.Fatal(err)
	}
	r := history.Check(log, observed)
	t.Logf("history: %d jobs, %d completed, %d requeued, %d stale results refused", r.Jobs, r.Completed, r.Requeues, r.StaleRefused)
	for _, v := range r.Violations {
		t.Error(v)
	}
	if r.Requeues < len(onVictim) {
		t.Errorf("%d requeues; the paused worker held %d jobs", r.Requeues, len(onVictim))
	}
}
