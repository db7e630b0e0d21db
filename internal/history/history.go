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
	attempt   uint32
	node      string
	results   int    // accepted results
	completed bool   // ended completed (not failed/aborted/expired)
	output    []byte // accepted result's stdout
	retries   uint32
	maxRetry  uint32
}

// Report is what the replay found.
type Report struct {
	Jobs           int
	Completed      int
	StaleRefused   int // results the model refused (stale attempt or after the end)
	Requeues       int
	Violations     []string
	CompletedTwice []string
	Outputs        map[string][]byte
}

func (r *Report) violate(format string, args ...any) {
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

// modelVerdicts says, per log entry index, whether the model accepts that
// FinishJob (a retry counts as accepted: the FSM applies it too).
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
	r := &Report{Outputs: map[string][]byte{}}
	assign := func(a *raftpb.AssignJob) {
		j := jobs[a.Id]
		if j != nil && j.phase == queued && a.Attempt == j.attempt+1 {
			j.phase, j.attempt, j.node = running, a.Attempt, a.NodeId
		}
	}
	for i, c := range log {
		switch x := c.Cmd.(type) {
		case *raftpb.Command_SubmitJob:
			if _, ok := jobs[x.SubmitJob.Job.Id]; !ok {
				jobs[x.SubmitJob.Job.Id] = &jobModel{maxRetry: x.SubmitJob.Job.MaxRetries}
			}
		case *raftpb.Command_AssignJob:
			assign(x.AssignJob)
		case *raftpb.Command_AssignBatch:
			for _, a := range x.AssignBatch.Assignments {
				assign(a)
			}
		case *raftpb.Command_RequeueJob:
			j := jobs[x.RequeueJob.Id]
			if j != nil && j.phase == running && j.attempt == x.RequeueJob.Attempt {
				j.phase = queued
				r.Requeues++
			}
		case *raftpb.Command_FinishJob:
			f := x.FinishJob
			j := jobs[f.Id]
			if j == nil || j.phase != running || j.attempt != f.Attempt || j.node != f.NodeId {
				r.StaleRefused++
				verdict(i, false)
				continue
			}
			verdict(i, true)
			if !f.Ok && f.Retryable && j.retries < j.maxRetry {
				j.retries++
				j.phase = queued
				continue
			}
			j.results++
			j.phase = done
			j.completed = f.Ok
			j.output = f.Stdout
		case *raftpb.Command_CancelJob:
			if j := jobs[x.CancelJob.Id]; j != nil && j.phase != done {
				j.phase = done
			}
		case *raftpb.Command_ExpireJob:
			if j := jobs[x.ExpireJob.Id]; j != nil && j.phase != done {
				j.phase = done
			}
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
	for i, c := range log {
		data, err := proto.Marshal(c)
		if err != nil {
			r.violate("entry %d does not encode: %v", i, err)
			continue
		}
		res, _ := fsm.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: data}).(consensus.ApplyResult)
		if f, ok := c.Cmd.(*raftpb.Command_FinishJob); ok {
			fsmOK := res.Err == nil
			if fsmOK != model[i] {
				r.violate("entry %d (result of job %s attempt %d): FSM accepted=%v, model accepted=%v", i, f.FinishJob.Id, f.FinishJob.Attempt, fsmOK, model[i])
			}
			if fsmOK {
				if j, _ := fsm.State().Job(f.FinishJob.Id); j.Phase.Terminal() {
					fsmResults[f.FinishJob.Id]++
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
