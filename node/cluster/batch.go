package cluster

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/proto/peerpb"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// Group commit.
//
// Submits, cancels and results that reach a follower while its earlier
// ones are still on their way to the leader wait for them and then go
// together: one forward to the leader, one raft entry, one scheduling
// round planned for all of them (consensus.CommandBatch). A command that
// finds fewer than maxFlights batches under way goes at once, alone, so a
// quiet cluster pays no extra latency; under load the batches grow with
// the load. Each command keeps its own outcome: the FSM applies them in
// order and refuses each on its own. The leader's own commands do not
// wait: raft already writes concurrent ones together, and there is no
// forward to save (alternating runs favoured this at 16 submitters and
// were even at 64).
const (
	// maxFlights is how many batches one node has on their way at once.
	// More than one keeps raft's own batching fed while a batch commits.
	maxFlights = 2
	// maxBatch bounds the commands in one entry.
	maxBatch = 256
)

// proposal is one command waiting in (or sent with) a batch.
type proposal struct {
	ctx  context.Context
	cmd  *raftpb.Command
	done chan struct{} // closed when job and err are set
	job  consensus.Job
	err  error
}

// batcher groups this node's batchable commands (see above).
type batcher struct {
	c       *Cluster
	mu      sync.Mutex
	queue   []*proposal
	flights int
	// What was sent (GroupCommitStats): CommandBatch entries, the commands
	// they carried, and batchable commands that went alone.
	batches, batched, alone atomic.Uint64
}

// GroupCommitStats reports what this node's group commit sent since it
// started: batches (CommandBatch entries proposed through the leader),
// the commands they carried, and batchable commands that went alone (this
// node leads, nothing to group them with, or a member of an older version).
func (c *Cluster) GroupCommitStats() (batches, batched, alone uint64) {
	return c.batch.batches.Load(), c.batch.batched.Load(), c.batch.alone.Load()
}

// propose commits cmd in the next batch and returns its own outcome. A
// caller that gives up while its command waits unsent takes it out of the
// queue; once sent, giving up leaves the outcome unknown, as for any write.
func (b *batcher) propose(ctx context.Context, cmd *raftpb.Command) (consensus.Job, error) {
	p := &proposal{ctx: ctx, cmd: cmd, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, p)
	if b.flights < maxFlights {
		b.flights++
		go b.flush()
	}
	b.mu.Unlock()
	select {
	case <-p.done:
		return p.job, p.err
	case <-ctx.Done():
	}
	b.mu.Lock()
	for i, q := range b.queue {
		if q == p { // not sent: nothing was proposed
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			b.mu.Unlock()
			return consensus.Job{}, ctx.Err()
		}
	}
	b.mu.Unlock()
	select {
	case <-p.done: // it finished as the caller gave up
		return p.job, p.err
	default:
	}
	return consensus.Job{}, &consensus.Error{Code: codeUnavailable,
		Message: fmt.Sprintf("gave up waiting (%v) after the command was sent; it may or may not have committed", ctx.Err()),
		Hint:    unknownOutcomeHint}
}

// flush sends what is queued, batch after batch, until the queue is empty.
func (b *batcher) flush() {
	for {
		b.mu.Lock()
		n := min(len(b.queue), maxBatch)
		if n == 0 {
			b.flights--
			b.mu.Unlock()
			return
		}
		batch := make([]*proposal, n)
		copy(batch, b.queue)
		b.queue = append(b.queue[:0], b.queue[n:]...)
		b.mu.Unlock()
		b.send(batch)
	}
}

// send commits batch and hands each proposal its outcome.
func (b *batcher) send(batch []*proposal) {
	if len(batch) == 1 {
		b.alone.Add(1)
		p := batch[0]
		p.job, p.err = b.c.applyOne(p.ctx, p.cmd)
		close(p.done)
		return
	}
	// The batch is sent under the longest of its callers' deadlines, so
	// one caller in a hurry does not fail the others.
	var deadline time.Time
	for _, p := range batch {
		d, ok := p.ctx.Deadline()
		if !ok {
			d = time.Now().Add(defaultApplyTimeout)
		}
		if d.After(deadline) {
			deadline = d
		}
	}
	ctx, cancel := context.WithDeadline(b.c.ctx, deadline)
	defer cancel()
	if !b.c.canBatch() {
		// A member runs an older version: every command goes on its own,
		// at once (see canBatch).
		b.alone.Add(uint64(len(batch)))
		var wg sync.WaitGroup
		for _, p := range batch {
			wg.Go(func() {
				p.job, p.err = b.c.applyOne(p.ctx, p.cmd)
				close(p.done)
			})
		}
		wg.Wait()
		return
	}
	cmds := make([]*raftpb.Command, len(batch))
	for i, p := range batch {
		cmds[i] = p.cmd
	}
	b.batches.Add(1)
	b.batched.Add(uint64(len(cmds)))
	results, err := b.c.applyBatch(ctx, cmds)
	for i, p := range batch {
		if err != nil {
			p.err = err
		} else {
			p.job, p.err = results[i].Job, results[i].Err
		}
		close(p.done)
	}
}

// applyBatch commits cmds as one CommandBatch entry through the leader and
// returns each command's outcome; err is the whole batch's failure.
func (c *Cluster) applyBatch(ctx context.Context, cmds []*raftpb.Command) ([]consensus.ApplyResult, error) {
	cmd := &raftpb.Command{Cmd: &raftpb.Command_Batch{Batch: &raftpb.CommandBatch{Commands: cmds}}}
	req := &peerpb.Request{Body: &peerpb.Request_ForwardApply{ForwardApply: &peerpb.ForwardApplyRequest{Command: cmd}}}
	var out []consensus.ApplyResult
	err := c.onLeader(ctx, false, func(ctx context.Context) error {
		res, err := c.applyLocal(ctx, cmd)
		if err != nil {
			return err
		}
		if len(res.Each) != len(cmds) {
			return fmt.Errorf("cluster: the batch of %d commands was applied as %d", len(cmds), len(res.Each))
		}
		out = res.Each
		return nil
	}, req, func(resp *peerpb.Response) error {
		rs := resp.GetForwardApply().GetResults()
		if len(rs) != len(cmds) {
			return fmt.Errorf("cluster: the leader answered a batch of %d commands with %d results", len(cmds), len(rs))
		}
		out = make([]consensus.ApplyResult, len(rs))
		for i, r := range rs {
			if e := r.GetError(); e != nil {
				out[i].Err = &consensus.Error{Code: e.Code, Message: e.Message, Hint: e.Hint}
			} else if r.GetJob() != nil {
				out[i].Job = consensus.JobFromRecord(r.Job)
			}
		}
		return nil
	})
	return out, err
}

// canBatch reports whether every member may be sent a CommandBatch entry
// (AllSupport FeatureBatch): an older node would refuse the entry and
// diverge. The sender checks before batching and the leader again before
// proposing.
func (c *Cluster) canBatch() bool { return c.AllSupport(FeatureBatch) }

// AllSupport reports whether every member advertises feature: every
// server of the raft configuration, and every gossip member that is not
// gone (a node is in gossip before the leader adds it to raft, so an older
// node is seen before it can receive entries). A raft server this node has
// never heard from in gossip counts as older.
func (c *Cluster) AllSupport(feature string) bool { return c.allSupport(feature, false) }

// SeenSupport is AllSupport counting only the raft servers this node has
// heard from: one down since this node started is left out. For features
// whose entries an older node would apply a little differently rather than
// refuse (a retried key-value write applied twice): refusing them whenever
// a member is down (a node restarted after a peer died never hears of it)
// cost more than the narrow case it guards, an older node coming back.
func (c *Cluster) SeenSupport(feature string) bool { return c.allSupport(feature, true) }

// Lacking lists the members AllSupport finds without feature: raft
// servers gossip never heard from, and members whose software lacks it.
func (c *Cluster) Lacking(feature string) []string {
	conf, err := c.raftServers()
	if err != nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for id := range conf {
		if m := c.members[id]; m == nil || !slices.Contains(m.meta.Features, feature) {
			out = append(out, id)
		}
	}
	for id, m := range c.members {
		if _, inRaft := conf[id]; !inRaft && !isDown(m.state) && m.state != StateLeft && !slices.Contains(m.meta.Features, feature) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

func (c *Cluster) allSupport(feature string, seenOnly bool) bool {
	conf, err := c.raftServers()
	if err != nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range conf {
		m := c.members[id]
		if m == nil && seenOnly {
			continue
		}
		if m == nil || !slices.Contains(m.meta.Features, feature) {
			return false
		}
	}
	for _, m := range c.members {
		if !isDown(m.state) && m.state != StateLeft && !slices.Contains(m.meta.Features, feature) {
			return false
		}
	}
	return true
}

// applyEach commits cmds one entry each, at once, and returns each
// outcome: what the leader does with a forwarded batch while a member
// cannot apply batches.
func (c *Cluster) applyEach(ctx context.Context, cmds []*raftpb.Command) []consensus.ApplyResult {
	out := make([]consensus.ApplyResult, len(cmds))
	var wg sync.WaitGroup
	for i, cmd := range cmds {
		wg.Go(func() {
			res, err := c.applyLocal(ctx, cmd)
			if err != nil {
				res = consensus.ApplyResult{Err: err}
			}
			out[i] = res
		})
	}
	wg.Wait()
	return out
}

// batchResults turns the FSM's results of a batch into the forward reply.
func batchResults(each []consensus.ApplyResult) []*peerpb.ForwardResult {
	out := make([]*peerpb.ForwardResult, len(each))
	for i, r := range each {
		if r.Err != nil {
			out[i] = &peerpb.ForwardResult{Error: toPBError(r.Err)}
		} else {
			out[i] = &peerpb.ForwardResult{Job: consensus.JobRecord(&r.Job)}
		}
	}
	return out
}
