package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/proto/peerpb"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// defaultApplyTimeout bounds Apply and VerifyRead when ctx has no deadline.
const defaultApplyTimeout = 10 * time.Second

// Apply commits cmd from any node: through the local store on the leader,
// forwarded to the leader from a follower (the command was authorised where
// it entered the cluster; the leader trusts node principals). It retries
// across leader changes for up to Tuning.LeaderWait without a reachable
// leader, then fails with a *consensus.Error of code no_quorum that names
// the last leader seen. A forwarded command whose reply is lost fails with
// code unavailable: it may or may not have committed.
func (c *Cluster) Apply(ctx context.Context, cmd *raftpb.Command) (consensus.Job, error) {
	if cmd == nil || cmd.Cmd == nil {
		return consensus.Job{}, &consensus.Error{Code: consensus.ErrInvalid.Code, Message: "empty command", Hint: "set one of the Command fields"}
	}
	// The leader checks what a follower forwards against its certificate;
	// this node holds itself to the same rule wherever the leader is.
	if err := mayForward(identity.Principal{Kind: identity.KindNode, ID: c.cfg.NodeID}, cmd); err != nil {
		return consensus.Job{}, &consensus.Error{Code: codePermissionDenied, Message: err.Error(), Hint: "a node may report only its own work"}
	}
	if consensus.Batchable(cmd) {
		if c.store.IsLeader() {
			// Raft's own loop already writes the leader's concurrent
			// commands together (one fsync); a batch here would only add
			// the wait for it, with no forward to save (batch.go).
			c.batch.alone.Add(1)
			return c.applyOne(ctx, cmd)
		}
		return c.batch.propose(ctx, cmd)
	}
	return c.applyOne(ctx, cmd)
}

// applyOne commits cmd in an entry of its own.
func (c *Cluster) applyOne(ctx context.Context, cmd *raftpb.Command) (consensus.Job, error) {
	req := &peerpb.Request{Body: &peerpb.Request_ForwardApply{ForwardApply: &peerpb.ForwardApplyRequest{Command: cmd}}}
	var job consensus.Job
	err := c.onLeader(ctx, false, func(ctx context.Context) error {
		res, err := c.applyLocal(ctx, cmd)
		if err == nil {
			job, err = res.Job, res.Err
		}
		return err
	}, req, func(resp *peerpb.Response) error {
		fa := resp.GetForwardApply()
		if fa == nil || fa.Job == nil {
			return fmt.Errorf("cluster: leader answered a forwarded apply without a job")
		}
		job = consensus.JobFromRecord(fa.Job)
		return nil
	})
	return job, err
}

// VerifyRead makes the local state linearizable: after it returns nil,
// Store.State() reflects every write acknowledged before the call. On the
// leader it confirms leadership with a quorum; on a follower it asks the
// leader for a read index and waits until the local state has applied it.
// A read changes nothing, so losing leadership meanwhile (or asking a node
// that no longer leads) only sends it round again, within ctx's deadline;
// it fails with no_quorum when no leader confirms it in time.
func (c *Cluster) VerifyRead(ctx context.Context) error {
	req := &peerpb.Request{Body: &peerpb.Request_ReadIndex{ReadIndex: &peerpb.ReadIndexRequest{}}}
	var index uint64
	err := c.onLeader(ctx, true, func(ctx context.Context) error {
		if !c.leaderReady.Load() {
			if err := c.store.Barrier(ctx); err != nil {
				return err
			}
		}
		return c.verifyLeader(ctx)
	}, req, func(resp *peerpb.Response) error {
		index = resp.GetReadIndex().GetIndex()
		return nil
	})
	var ce *consensus.Error
	if errors.As(err, &ce) && ce.Code == consensus.ErrNoQuorum.Code {
		// A read: say so. How to read anyway is for the caller to add,
		// when its request can be stale (a snapshot or a write cannot).
		return &consensus.Error{Code: ce.Code, Message: strings.Replace(ce.Message, "cannot commit", "cannot confirm that this node's replica is current for a read", 1),
			Hint: ce.Hint}
	}
	if err != nil || index == 0 {
		return err
	}
	return c.waitApplied(ctx, index)
}

// waitApplied blocks until the local state has applied index.
func (c *Cluster) waitApplied(ctx context.Context, index uint64) error {
	st := c.store.State()
	for {
		changed := st.Changed()
		if st.AppliedIndex() >= index {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("cluster: waiting to apply index %d (at %d): %w", index, st.AppliedIndex(), ctx.Err())
		}
	}
}

// onLeader runs local when this node leads, else sends req to the leader
// and hands its answer to remote. It follows leader changes, retrying
// while a leader may still appear (Tuning.LeaderWait), and turns the lack of
// one into a no_quorum error. Requests that were sent but not answered are
// retried only if idempotent.
func (c *Cluster) onLeader(ctx context.Context, idempotent bool, local func(context.Context) error,
	req *peerpb.Request, remote func(*peerpb.Response) error) error {
	if c.ctx.Err() != nil {
		return ErrClosed
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultApplyTimeout)
		defer cancel()
	}
	var lost time.Time // since when no leader has been reachable
	backoff := 10 * time.Millisecond
	for {
		var err error
		addr, id := c.store.Leader()
		switch {
		case id == c.cfg.NodeID && c.store.IsLeader():
			c.sawLeader(id, addr)
			err = local(ctx)
			if err == nil || !(retryable(err) || idempotent && unknownOutcome(err)) {
				return c.finalErr(err)
			}
		case id == "":
			err = errors.New("no leader known")
		case id == c.cfg.NodeID:
			err = errors.New("this node is stepping down as leader")
		default:
			c.sawLeader(id, addr)
			var resp *peerpb.Response
			callCtx, done := c.fwd.start(ctx, id, idempotent, c.leaderID)
			resp, err = c.call(callCtx, addr, id, req)
			done()
			if err != nil && errors.Is(context.Cause(callCtx), errLeaderMoved) && ctx.Err() == nil {
				err = fmt.Errorf("%w: %w", errLeaderMoved, err) // both: notSent still sees the call error
			}
			switch {
			case err != nil && !notSent(err) && !idempotent:
				return &consensus.Error{Code: codeUnavailable,
					Message: fmt.Sprintf("forwarded to leader %s at %s but got no reply (%v); the command may or may not have committed", id, addr, err),
					Hint:    unknownOutcomeHint}
			case err == nil && resp.Error == nil:
				return remote(resp)
			case err == nil && !retryableCode(resp.Error.Code, idempotent):
				return &consensus.Error{Code: resp.Error.Code, Message: resp.Error.Message, Hint: resp.Error.Hint}
			case err == nil:
				err = errors.New(resp.Error.Message)
			}
		}
		// No reachable leader this round.
		if lost.IsZero() {
			lost = time.Now()
		}
		if time.Since(lost) > c.cfg.Tuning.LeaderWait {
			return c.noQuorum(err)
		}
		select {
		case <-ctx.Done():
			return c.noQuorum(ctx.Err())
		case <-c.ctx.Done():
			return ErrClosed
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// unknownOutcomeHint is the hint of a write whose outcome is unknown. The
// cluster cannot tell what the write was for (a submission, a key-value
// write, a cancel), so it says what holds for every one of them; the CLI
// puts what to do for its command in its place.
const unknownOutcomeHint = "check whether it took effect before doing it again, unless doing it twice is harmless (as for a job submission that carries an idempotency key: the cluster answers it with the first one's job)"

// leaderID is the leader this node follows now ("" when none is known).
func (c *Cluster) leaderID() string {
	_, id := c.store.Leader()
	return id
}

// retryable reports whether a local leader-side failure means leadership
// moved or was lost, so the call should go round again.
func retryable(err error) bool {
	return errors.Is(err, consensus.ErrNotLeader) || errors.Is(err, consensus.ErrNoQuorum)
}

// unknownOutcome reports whether err says leadership was lost before the
// outcome was known (raft.ErrLeadershipLost). For a write that is final:
// it may have committed. An idempotent request (a read, a leave) has
// nothing to lose by going round again.
func unknownOutcome(err error) bool {
	var ce *consensus.Error
	return errors.Is(err, consensus.ErrUnknownOutcome) ||
		errors.As(err, &ce) && ce.Code == codeUnknownOutcome
}

// retryableCode reports whether a leader's refusal with code means "go
// round again": it was not (or no longer) the leader, or had no quorum;
// for an idempotent request also that the outcome was unknown or the
// leader was unavailable (shutting down, out of time).
func retryableCode(code string, idempotent bool) bool {
	switch code {
	case consensus.ErrNotLeader.Code, consensus.ErrNoQuorum.Code:
		return true
	case consensus.ErrUnknownOutcome.Code, codeUnknownOutcome, codeUnavailable:
		return idempotent
	}
	return false
}

// finalErr turns a local no_quorum into ours (naming the last leader).
func (c *Cluster) finalErr(err error) error {
	if errors.Is(err, consensus.ErrNoQuorum) {
		return c.noQuorum(err)
	}
	return err
}

// noQuorum builds the no_quorum error, naming the last leader this node saw.
func (c *Cluster) noQuorum(cause error) error {
	c.mu.Lock()
	last := c.lastLeader
	c.mu.Unlock()
	seen := "no leader seen since this node started"
	if last.id != "" {
		seen = fmt.Sprintf("last leader seen: %s at %s", last.id, last.addr)
	}
	msg := fmt.Sprintf("no quorum: cannot commit (%s)", seen)
	if cause != nil {
		msg += ": " + cause.Error()
	}
	return &consensus.Error{Code: consensus.ErrNoQuorum.Code, Message: msg,
		Hint: "a majority of voters must be up and reachable from this node; check 'palyra status' on the other nodes and the network between them (a majority lost for good: 'palyra node recover --dry-run' on a stopped survivor)"}
}

// verifyLeader confirms with a quorum that this node still leads.
func (c *Cluster) verifyLeader(ctx context.Context) error {
	if f := c.verifyHook.Load(); f != nil {
		return (*f)(ctx)
	}
	return c.store.VerifyLeader(ctx)
}

// setVerifyLeader replaces the leadership check (nil restores it); for tests.
func (c *Cluster) setVerifyLeader(f func(context.Context) error) {
	if f == nil {
		c.verifyHook.Store(nil)
		return
	}
	c.verifyHook.Store(&f)
}

// Piggyback plans a scheduling round to commit in the same entry as a
// command the leader is about to propose (see driver.Piggyback); done is
// called once the command committed or failed. It returns a nil round
// when there is nothing to place.
type Piggyback func(cmd *raftpb.Command) (round *raftpb.SchedulerRound, done func())

// SetPiggyback installs (or, with nil, removes) the leader's piggyback
// planner.
func (c *Cluster) SetPiggyback(p Piggyback) {
	if p == nil {
		c.piggyback.Store(nil)
		return
	}
	c.piggyback.Store(&p)
}

// applyLocal commits cmd through this node's store, which leads: the
// command entered the cluster here or was forwarded here. A scheduling
// round the piggyback planner attaches rides in the same entry (on a
// shallow copy: cmd may be sent again, elsewhere, on a retry); a round
// that came with cmd is dropped.
func (c *Cluster) applyLocal(ctx context.Context, cmd *raftpb.Command) (consensus.ApplyResult, error) {
	if hasRunHere(cmd) && !c.AllSupport(FeatureRunHere) {
		// A member that could not apply it joined since the sender
		// looked: the jobs are submitted as usual (their runs dropped),
		// and planned below as any submission.
		cmd = withoutRunHere(cmd)
	}
	var round *raftpb.SchedulerRound
	if p := c.piggyback.Load(); p != nil {
		var done func()
		if round, done = (*p)(cmd); round != nil {
			defer done()
		}
	}
	if round != nil || cmd.Round != nil {
		// Only this leader's planner attaches a round: one a forwarding
		// node set is dropped.
		cmd = &raftpb.Command{Cmd: cmd.Cmd, Round: round}
	}
	return c.store.Propose(ctx, cmd)
}

// hasRunHere reports whether cmd is, or batches, a RunHere.
func hasRunHere(cmd *raftpb.Command) bool {
	if cmd.GetRunHere() != nil {
		return true
	}
	for _, sub := range cmd.GetBatch().GetCommands() {
		if sub.GetRunHere() != nil {
			return true
		}
	}
	return false
}

// withoutRunHere is cmd with each RunHere replaced by its submission.
func withoutRunHere(cmd *raftpb.Command) *raftpb.Command {
	plain := func(c *raftpb.Command) *raftpb.Command {
		if rh := c.GetRunHere(); rh != nil {
			return &raftpb.Command{Cmd: &raftpb.Command_SubmitJob{SubmitJob: rh.GetSubmit()}, Round: c.Round, HookRules: c.HookRules}
		}
		return c
	}
	b := cmd.GetBatch()
	if b == nil {
		return plain(cmd)
	}
	subs := make([]*raftpb.Command, len(b.Commands))
	for i, sub := range b.Commands {
		subs[i] = plain(sub)
	}
	return &raftpb.Command{Cmd: &raftpb.Command_Batch{Batch: &raftpb.CommandBatch{Commands: subs}}, Round: cmd.Round, HookRules: cmd.HookRules}
}
