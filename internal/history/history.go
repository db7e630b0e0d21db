// Package history checks job histories recorded under faults. It reads
// the committed Raft log of a node and replays it through its own small
// model of the job rules (independent of the FSM's code), then checks the
// client's observations against it:
//
//   - no accepted job lost: every id a client was told "accepted" is in the
//     log and ends in a terminal phase;
//   - no job completed twice: at most one result is accepted per job;
//   - no stale attempt recorded: the accepted result is from the attempt
//     that was current (the latest placement) when it was committed.
package history

import (
	"errors"
	"fmt"
	"sort"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"google.golang.org/protobuf/proto"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// ReadLog returns the commands in a stopped node's raft log, in order.
func ReadLog(raftDBPath string) ([]*raftpb.Command, error) {
	store, err := raftboltdb.New(raftboltdb.Options{Path: raftDBPath, NoSync: true})
	if err != nil {
		return nil, err
	}
	defer store.Close()
	first, err := store.FirstIndex()
	if err != nil {
		return nil, err
	}
	last, err := store.LastIndex()
	if err != nil {
		return nil, err
	}
	if first > 1 {
		return nil, fmt.Errorf("log starts at %d: it was compacted; raise the snapshot threshold for the test", first)
	}
	var out []*raftpb.Command
	for i := first; i <= last && last > 0; i++ {
		var l raft.Log
		if err := store.GetLog(i, &l); err != nil {
			return nil, fmt.Errorf("log %d: %w", i, err)
		}
		if l.Type != raft.LogCommand {
			continue
		}
		var c raftpb.Command
		if err := proto.Unmarshal(l.Data, &c); err != nil {
			return nil, fmt.Errorf("log %d: %w", i, err)
		}
		out = append(out, &c)
	}
	return out, nil
}

type phase int

const (
	queued phase = iota
	running
	done // any terminal phase
)

type jobModel struct {
	phase     phase
	kind      string
	task      bool // a task of a job array
	attempt   uint32
	node      string
	results   int    // accepted results
	completed bool   // ended completed (not failed/aborted/expired)
	output    []byte // accepted result's stdout
	outHash   string // or its blob, when the output left the log
	retries   uint32
	maxRetry  uint32
}

// nodeModel is what placement checks of a node: whether it takes work.
type nodeModel struct{ revoked, ineligible, draining bool }

// Report is what the replay found.
type Report struct {
	Jobs           int
	Completed      int
	StaleRefused   int // results the model refused (stale attempt or after the end)
	Requeues       int
	Violations     []string
	CompletedTwice []string
	Outputs        map[string][]byte
	OutputHashes   map[string]string // outputs stored as blobs: job → sha256
}

func (r *Report) violate(format string, args ...any) {
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

// modelVerdicts says, per result (numbered in log order, batched results
// one by one), whether the model accepts it (a retry counts as accepted:
// the FSM applies it too).
func modelVerdicts(log []*raftpb.Command) map[int]bool {
	out := map[int]bool{}
	replay(log, func(i int, accepted bool) { out[i] = accepted })
	return out
}

// Replay runs the log through the model.
func Replay(log []*raftpb.Command) *Report { return replay(log, nil) }

func replay(log []*raftpb.Command, verdict func(i int, accepted bool)) *Report {
	if verdict == nil {
		verdict = func(int, bool) {}
	}
	jobs := map[string]*jobModel{}
	nodes := map[string]*nodeModel{}
	node := func(id string) *nodeModel {
		n := nodes[id]
		if n == nil {
			n = &nodeModel{}
			nodes[id] = n
		}
		return n
	}
	busy := map[[2]string]uint32{} // (node, kind) → running jobs
	r := &Report{Outputs: map[string][]byte{}, OutputHashes: map[string]string{}}
	setPhase := func(j *jobModel, p phase) {
		if j.phase == running {
			busy[[2]string{j.node, j.kind}]--
		}
		if p == running {
			busy[[2]string{j.node, j.kind}]++
		}
		j.phase = p
	}
	assign := func(a *raftpb.AssignJob) bool {
		j := jobs[a.Id]
		if j != nil && j.phase == queued && a.Attempt == j.attempt+1 {
			j.attempt, j.node = a.Attempt, a.NodeId
			setPhase(j, running)
			return true
		}
		return false
	}
	requeue := func(q *raftpb.RequeueJob) {
		j := jobs[q.Id]
		if j != nil && j.phase == running && j.attempt == q.Attempt {
			setPhase(j, queued)
			r.Requeues++
		}
	}
	end := func(id string) {
		if j := jobs[id]; j != nil && j.phase != done {
			setPhase(j, done)
		}
	}
	seq := 0
	finish := func(f *raftpb.FinishJob) {
		if f.EndedOutput { // output kept on an ended job: not a result (checked against the FSM below)
			return
		}
		i := seq
		seq++
		j := jobs[f.Id]
		if j == nil || j.phase != running || j.attempt != f.Attempt || j.node != f.NodeId {
			r.StaleRefused++
			verdict(i, false)
			return
		}
		verdict(i, true)
		if !f.Ok && f.Retryable && j.retries < j.maxRetry {
			j.retries++
			setPhase(j, queued)
			return
		}
		j.results++
		setPhase(j, done)
		j.completed = f.Ok
		j.output, j.outHash = f.Stdout, f.StdoutSha256
	}
	round := func(rd *raftpb.SchedulerRound) {
		for _, id := range rd.Expire {
			end(id)
		}
		for _, q := range rd.Requeues {
			requeue(q)
		}
		slots := map[[2]string]uint32{}
		for _, ns := range rd.Slots {
			slots[[2]string{ns.NodeId, ns.Kind}] = ns.Slots
		}
		for _, a := range rd.Placements {
			j, n := jobs[a.Id], node(a.NodeId)
			if j == nil || n.revoked || n.ineligible || n.draining {
				continue
			}
			limit := slots[[2]string{a.NodeId, j.kind}]
			if l, ok := slots[[2]string{a.NodeId, j.kind + consensus.PrefetchSuffix}]; ok && j.task {
				limit = l
			}
			if busy[[2]string{a.NodeId, j.kind}] >= limit {
				continue
			}
			assign(a)
		}
	}
	keys := map[string]bool{} // idempotency keys of the jobs made
	newJob := func(rec *raftpb.JobRecord) bool {
		if rec == nil || rec.Id == "" || jobs[rec.Id] != nil || rec.IdempotencyKey != "" && keys[rec.IdempotencyKey] {
			return false
		}
		jobs[rec.Id] = &jobModel{maxRetry: rec.MaxRetries, kind: rec.Kind}
		if rec.IdempotencyKey != "" {
			keys[rec.IdempotencyKey] = true
		}
		return true
	}
	// runHere: a job a node ran before acceptance, with its result; every
	// RunHere counts as one result, accepted only when the job is new, may
	// run before acceptance, and its node takes work (nodes are taken to
	// be members: the model does not follow pairing).
	runHere := func(rh *raftpb.RunHere) {
		rec := rh.GetSubmit().GetJob()
		made := newJob(rec)
		n := node(rh.NodeId)
		if !made || !consensus.MayRunBeforeAcceptance(rec) || rec.RequiresApproval || rh.Finish == nil || n.revoked || n.ineligible || n.draining {
			i := seq
			seq++
			verdict(i, false)
			return
		}
		assign(&raftpb.AssignJob{Id: rec.Id, Attempt: 1, NodeId: rh.NodeId})
		finish(runHereResult(rh))
	}
	var apply func(c *raftpb.Command)
	apply = func(c *raftpb.Command) {
		switch x := c.Cmd.(type) {
		case *raftpb.Command_RunHere:
			runHere(x.RunHere)
		case *raftpb.Command_Batch: // group commit: each in order, as the FSM does
			for _, sub := range x.Batch.Commands {
				if consensus.Batchable(sub) {
					apply(sub)
				}
			}
		case *raftpb.Command_SubmitJob:
			newJob(x.SubmitJob.Job)
		case *raftpb.Command_SubmitArray:
			t := x.SubmitArray.Template
			if _, ok := jobs[consensus.TaskID(t.Id, 0)]; !ok && t.Id != "" && !(t.IdempotencyKey != "" && keys[t.IdempotencyKey]) {
				if t.IdempotencyKey != "" {
					keys[t.IdempotencyKey] = true
				}
				for i := range x.SubmitArray.Tasks {
					jobs[consensus.TaskID(t.Id, uint32(i))] = &jobModel{maxRetry: t.MaxRetries, kind: t.Kind, task: true}
				}
			}
		case *raftpb.Command_AssignJob:
			assign(x.AssignJob)
		case *raftpb.Command_AssignBatch:
			for _, a := range x.AssignBatch.Assignments {
				assign(a)
			}
		case *raftpb.Command_SchedulerRound:
			round(x.SchedulerRound)
		case *raftpb.Command_RequeueJob:
			requeue(x.RequeueJob)
		case *raftpb.Command_FinishJob:
			finish(x.FinishJob)
		case *raftpb.Command_FinishBatch:
			for _, f := range x.FinishBatch.Results {
				finish(f)
			}
		case *raftpb.Command_CancelJob:
			id := x.CancelJob.Id
			if _, ok := jobs[id]; ok {
				end(id)
				return
			}
			for i := uint32(0); ; i++ { // an array: every task not yet ended
				if _, ok := jobs[consensus.TaskID(id, i)]; !ok {
					break
				}
				end(consensus.TaskID(id, i))
			}
		case *raftpb.Command_ExpireJob:
			end(x.ExpireJob.Id)
		case *raftpb.Command_RevokeMember:
			if x.RevokeMember.Kind == "node" {
				node(x.RevokeMember.Id).revoked = true
			}
		case *raftpb.Command_SetNodeSchedulable:
			n := node(x.SetNodeSchedulable.Id)
			n.ineligible, n.draining = !x.SetNodeSchedulable.Eligible, x.SetNodeSchedulable.Draining
		}
	}
	for _, c := range log {
		apply(c)
		if rd := c.GetRound(); rd != nil { // placements the leader attached: after the command
			round(rd)
		}
	}
	ids := make([]string, 0, len(jobs))
	for id := range jobs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		j := jobs[id]
		r.Jobs++
		if j.results > 1 {
			r.CompletedTwice = append(r.CompletedTwice, id)
			r.violate("job %s has %d accepted results", id, j.results)
		}
		if j.completed {
			r.Completed++
			r.Outputs[id] = j.output
			if j.outHash != "" {
				r.OutputHashes[id] = j.outHash
			}
		}
	}
	return r
}

// Observed is one client observation: a submission the API accepted, with
// the output the job must produce.
type Observed struct {
	ID       string
	Expected []byte
}

// Check replays log through the model and through the real FSM, and checks
// that they agree on every result (the FSM accepts exactly the results the
// model accepts: one per job, never a stale attempt's), and that every
// accepted observation completed with the expected output.
func Check(log []*raftpb.Command, accepted []Observed) *Report {
	r := Replay(log)
	fsm := consensus.NewFSM()
	fsmResults := map[string]int{}
	model := modelVerdicts(log)
	seq := 0 // results in log order
	for i, c := range log {
		data, err := proto.Marshal(c)
		if err != nil {
			r.violate("entry %d does not encode: %v", i, err)
			continue
		}
		res, _ := fsm.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: data}).(consensus.ApplyResult)
		var results []*raftpb.FinishJob
		var errs []error
		cmds, each := []*raftpb.Command{c}, []consensus.ApplyResult{res}
		if b := c.GetBatch(); b != nil {
			cmds, each = b.Commands, res.Each
			if len(each) != len(cmds) {
				r.violate("entry %d: the FSM answered %d results for a batch of %d commands", i, len(each), len(cmds))
				continue
			}
		}
		for k, sub := range cmds {
			switch x := sub.Cmd.(type) {
			case *raftpb.Command_FinishJob:
				results, errs = append(results, x.FinishJob), append(errs, each[k].Err)
			case *raftpb.Command_RunHere:
				// Its result counts as recorded when the entry made the
				// job and ended it, or queued it for a retry, at attempt
				// 1 on the node that ran it.
				f := runHereResult(x.RunHere)
				j := each[k].Job
				recorded := each[k].Err == nil && f != nil && j.ID == f.Id && j.Attempt == 1 && j.NodeID == f.NodeId && j.CommitIndex == uint64(i+1) &&
					(j.Phase.Terminal() || j.Phase == consensus.PhaseQueued && len(j.Earlier) == 1)
				var err error
				if !recorded {
					err = errors.New("run dropped")
				}
				if f == nil {
					f = &raftpb.FinishJob{}
				}
				results, errs = append(results, f), append(errs, err)
			case *raftpb.Command_FinishBatch:
				if len(each[k].Batch) != len(x.FinishBatch.Results) {
					r.violate("entry %d: the FSM answered %d verdicts for a batch of %d results", i, len(each[k].Batch), len(x.FinishBatch.Results))
					continue
				}
				results, errs = append(results, x.FinishBatch.Results...), append(errs, each[k].Batch...)
			}
		}
		for k, f := range results {
			if f.EndedOutput {
				if j, _ := fsm.State().Job(f.Id); errs[k] == nil && j.Phase != consensus.PhaseAborted && j.Phase != consensus.PhaseExpired {
					r.violate("entry %d: output kept on job %s, which is %s, not cancelled or expired", i, f.Id, j.Phase)
				}
				continue
			}
			fsmOK := errs[k] == nil
			if fsmOK != model[seq] {
				r.violate("entry %d (result of job %s attempt %d): FSM accepted=%v, model accepted=%v", i, f.Id, f.Attempt, fsmOK, model[seq])
			}
			seq++
			if fsmOK {
				if j, _ := fsm.State().Job(f.Id); j.Phase.Terminal() {
					fsmResults[f.Id]++
				}
			}
		}
	}
	for id, n := range fsmResults {
		if n > 1 {
			r.CompletedTwice = append(r.CompletedTwice, id)
			r.violate("job %s: the FSM recorded %d final results", id, n)
		}
	}
	for _, o := range accepted {
		out, ok := r.Outputs[o.ID]
		switch {
		case !ok:
			r.violate("accepted job %s did not complete (lost or failed)", o.ID)
		case string(out) != string(o.Expected):
			r.violate("job %s output %q, want %q", o.ID, out, o.Expected)
		}
	}
	return r
}

// runHereResult is a RunHere's result as the FSM applies it: for its job,
// at attempt 1, from the node that ran it (nil if it carries none).
func runHereResult(rh *raftpb.RunHere) *raftpb.FinishJob {
	if rh.GetFinish() == nil || rh.GetSubmit().GetJob() == nil {
		return nil
	}
	f := proto.Clone(rh.Finish).(*raftpb.FinishJob)
	f.Id, f.Attempt, f.NodeId, f.EndedOutput = rh.Submit.Job.Id, 1, rh.NodeId, false
	return f
}
