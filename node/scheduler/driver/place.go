package driver

import (
	"strings"
	"time"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/node/scheduler"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// planned is a job handed to the planner, with the pending reason it has
// now (empty for jobs not yet in the queue).
type planned struct {
	scheduler.Job
	reason string
}

// maxPiggyExamine bounds the queued jobs a piggybacked round looks at
// (placements of other rounds still committing are skipped for free), and
// maxPiggyExtra the tasks of a new array it offers the planner.
const (
	maxPiggyExamine = 256
	maxPiggyExtra   = 1024
)

// planKind is the capacity a job draws on: array tasks have their own
// prefetch (usually deeper). Behind a job waiting for a slot (blocked),
// tasks draw on the smaller of the two: the single-job capacity, shared
// with the jobs ahead of them (as ever), unless their own is smaller (the
// tasks are long): planning the single-job capacity for them then made
// the FSM, which checks a task against its own, drop the placements, and
// the driver proposed them again at once.
func (d *Driver) planKind(kind string, task, blocked bool, prefetch, taskPrefetch map[string]int) string {
	if task {
		if k, ok := d.taskKinds[kind]; ok && (!blocked || taskPrefetch[kind] < prefetch[kind]) {
			return k
		}
	}
	return kind
}

// place plans placements from the head of the queue, then the extra jobs
// (not in the queue yet: they come after it), onto the capacity of the
// live workers: their slots plus prefetch, less the jobs running there by
// the state and the placements of rounds still committing, plus freed
// (node → kind → slots the command this round rides on frees before the
// round applies). It appends the placements and the capacity they were
// checked against to round, and returns the jobs it offered the planner
// and those left unplaced. At most examine queued jobs are looked at, and
// at most waitMax of those with no free capacity for their shape are
// offered anyway (for their pending reason). d.planMu is held.
func (d *Driver) place(round *raftpb.SchedulerRound, workers []Worker, freed map[string]map[string]int,
	extra []scheduler.Job, examine, waitMax int) ([]planned, []scheduler.Unplaced) {
	st := d.cfg.State
	running := st.RunningCounts()
	d.mu.Lock()
	inflight := make(map[string]bool, len(d.inflight))
	for id, p := range d.inflight {
		inflight[id] = true
		if running[p.node] == nil {
			running[p.node] = map[string]int{}
		}
		running[p.node][p.kind]++
	}
	d.mu.Unlock()
	for node, kinds := range freed {
		for kind, n := range kinds {
			if running[node] != nil {
				running[node][kind] = max(running[node][kind]-n, 0)
			}
		}
	}
	prefetch, taskPrefetch := d.prefetch(), d.arrayPrefetch()
	var nodes []scheduler.Node
	free := 0
	for _, w := range workers {
		if !w.Alive {
			continue
		}
		eligible := !d.isSilent(w.ID) && !w.Lagging && !w.Refused
		if m, ok := st.Member("node", w.ID); !ok || m.Ineligible || m.Draining || m.Revoked {
			eligible = false
		}
		slots := make(map[string]int, 2*len(w.Slots))
		busy := make(map[string]int, 2*len(w.Slots))
		for kind, n := range w.Slots {
			slots[kind], busy[kind] = n*(1+prefetch[kind]), running[w.ID][kind]
			if p := taskPrefetch[kind]; p > 0 {
				pk := kind + consensus.PrefetchSuffix
				slots[pk], busy[pk] = n*(1+p), running[w.ID][kind]
			}
		}
		for kind, n := range slots {
			round.Slots = append(round.Slots, &raftpb.NodeSlots{NodeId: w.ID, Kind: kind, Slots: uint32(n)})
			if eligible {
				free += max(n-busy[kind], 0)
			}
		}
		nodes = append(nodes, scheduler.Node{ID: w.ID, Eligible: eligible, Slots: slots, Running: busy, Labels: w.Labels})
	}
	if free == 0 && waitMax == 0 && len(extra) == 0 {
		return nil, nil
	}
	// The queue is read from its head. A job whose shape (kind and
	// constraints) has no free capacity cannot be placed this round: it
	// does not use up the scan (or an old, unplaceable job at the head
	// would starve every job behind it); a few of them still go to the
	// planner so their pending reason is kept current. The walk stops once
	// the free capacity is spoken for, or at examine jobs.
	var jobs []planned
	shapeFree := map[string]int{}
	freeFor := func(kind string, cons map[string]string) (string, int) {
		key := kind + "\x00" + shapeKey(cons)
		if v, ok := shapeFree[key]; ok {
			return key, v
		}
		n := 0
		for _, nd := range nodes {
			if nd.Eligible && scheduler.Matches(nd.Labels, cons) {
				n += max(nd.Slots[kind]-nd.Running[kind], 0)
			}
		}
		shapeFree[key] = n
		return key, n
	}
	nowMS := round.AtMs
	// Each kind has its own queue and capacity: a kind with nothing free
	// is not walked at all (unless pending reasons are due).
	kindFree := map[string]int{}
	for _, nd := range nodes {
		if !nd.Eligible {
			continue
		}
		for k, n := range nd.Slots {
			kindFree[strings.TrimSuffix(k, consensus.PrefetchSuffix)] += max(n-nd.Running[k], 0)
		}
	}
	kinds := st.QueuedKinds()
	placeable, waiting := 0, 0
	for _, kind := range kinds {
		kFree := kindFree[kind]
		if kFree == 0 && waitMax == 0 {
			continue
		}
		kPlaceable, kWaiting, examined := 0, 0, 0
		// A job that waits for a slot on nodes that could run it blocks
		// prefetch for the jobs behind it in the queue (lower priority, or
		// accepted later): array tasks behind it get only the nodes'
		// single-job capacity meanwhile, so the nodes drain to where the
		// waiting job fits (without this, tasks behind it refilled the
		// prefetch as each ended, and a priority-100 job waited for a
		// whole priority-0 array).
		blocked := false
		st.Queued(kind, func(j consensus.Job) bool {
			if inflight[j.ID] {
				return true // placed by a round still committing; bounded by the in-flight map
			}
			examined++
			if j.NotBeforeMS > nowMS {
				return examined < examine // retry backoff
			}
			task := j.ArrayID != ""
			pk := d.planKind(j.Kind, task, blocked, prefetch, taskPrefetch)
			key, f := freeFor(pk, j.Constraints)
			if f == 0 && !task && !blocked && canRun(nodes, j.Kind, j.Constraints) {
				blocked = true
			}
			switch {
			case f > 0:
				shapeFree[key] = f - 1
				kPlaceable++
			case kWaiting < waitMax:
				kWaiting++
			default:
				return examined < examine
			}
			jobs = append(jobs, planned{Job: scheduler.Job{ID: j.ID, Kind: pk, Attempt: j.Attempt, Order: j.CommitIndex<<20 | uint64(j.ArrayIndex),
				Priority: int(j.Priority), Constraints: j.Constraints}, reason: j.PendingReason})
			return examined < examine && (kPlaceable < kFree || kWaiting < waitMax)
		})
		placeable += kPlaceable
		waiting += kWaiting
	}
	for _, e := range extra {
		if placeable >= free {
			break
		}
		if key, f := freeFor(e.Kind, e.Constraints); f > 0 {
			shapeFree[key] = f - 1
			placeable++
			e.Order = ^uint64(0) // after every queued job of its priority
			jobs = append(jobs, planned{Job: e})
		}
	}
	if placeable == 0 && waiting == 0 {
		return nil, nil
	}
	sj := make([]scheduler.Job, len(jobs))
	for i, j := range jobs {
		sj[i] = j.Job
	}
	plan, unplaced := scheduler.Plan(nodes, sj)
	for _, p := range plan {
		round.Placements = append(round.Placements, &raftpb.AssignJob{Id: p.JobID, Attempt: p.Attempt, NodeId: p.NodeID, AtMs: nowMS})
	}
	return jobs, unplaced
}

// reserve records round's placements as in flight, so later rounds
// neither place those jobs again nor give their capacity away. d.mu is
// held.
func (d *Driver) reserve(round *raftpb.SchedulerRound, jobs []planned) {
	if len(round.Placements) == 0 {
		return
	}
	if d.cfg.Placed != nil {
		d.cfg.Placed(len(round.Placements))
	}
	kinds := make(map[string]string, len(jobs))
	for _, j := range jobs {
		kinds[j.ID] = j.Kind
	}
	for _, p := range round.Placements {
		k := kinds[p.Id]
		if i := strings.Index(k, consensus.PrefetchSuffix); i >= 0 {
			k = k[:i]
		}
		d.inflight[p.Id] = inflightPlacement{node: p.NodeId, kind: k}
	}
}

// release forgets round's placements once its commit ended (applied or
// failed). d.mu is held.
func (d *Driver) release(round *raftpb.SchedulerRound) {
	for _, p := range round.Placements {
		delete(d.inflight, p.Id)
	}
}

// Piggyback plans placements to commit in the same entry as cmd, a
// command this leader is about to propose:
//   - a submitted job, or the first tasks of a submitted array, placed at
//     once when a slot is free and no queued job has a better claim on it
//     (so a job on an idle cluster takes one commit to be running, not
//     two);
//   - a worker's batch of results handing the slots it frees to the head
//     of the queue (so a busy worker is fed in the commit that frees it,
//     not one round later).
//
// It returns nil when there is nothing to place, or when this node does
// not lead. The placements count as in flight until done is called, after
// the command committed or failed. The FSM applies the round after cmd,
// checking each placement as it checks a SchedulerRound's.
func (d *Driver) Piggyback(cmd *raftpb.Command) (round *raftpb.SchedulerRound, done func()) {
	if !d.leading.Load() {
		return nil, nil
	}
	var extra []scheduler.Job
	var freed map[string]map[string]int
	cmds := []*raftpb.Command{cmd}
	if b := cmd.GetBatch(); b != nil {
		cmds = b.Commands // a group commit: one round for all of them
	}
	for _, cmd := range cmds {
		extra, freed = d.piggyInputs(cmd, extra, freed)
	}
	if len(extra) == 0 && len(freed) == 0 {
		return nil, nil
	}
	workers := d.cfg.Workers()
	round = &raftpb.SchedulerRound{AtMs: d.cfg.Now().UnixMilli(), Rules: consensus.SkillRules}
	d.planMu.Lock()
	defer d.planMu.Unlock()
	jobs, _ := d.place(round, workers, freed, extra, maxPiggyExamine, 0)
	if len(round.Placements) == 0 {
		return nil, nil
	}
	trimSlots(round)
	d.mu.Lock()
	d.reserve(round, jobs)
	d.mu.Unlock()
	return round, func() {
		d.mu.Lock()
		d.release(round)
		d.mu.Unlock()
		select { // capacity this round reserved but did not use is free again
		case d.roundDone <- struct{}{}:
		default:
		}
	}
}

// piggyInputs adds to extra the jobs cmd submits that a round may place
// in its entry, and to freed the slots its results free.
func (d *Driver) piggyInputs(cmd *raftpb.Command, extra []scheduler.Job, freed map[string]map[string]int) ([]scheduler.Job, map[string]map[string]int) {
	switch c := cmd.Cmd.(type) {
	case *raftpb.Command_SubmitJob:
		j := c.SubmitJob.GetJob()
		if j == nil || j.Id == "" || j.RequiresApproval { // a job waiting for approval is not placed
			return extra, freed
		}
		extra = append(extra, scheduler.Job{ID: j.Id, Kind: j.Kind, Priority: int(j.Priority), Constraints: j.Constraints})
	case *raftpb.Command_SubmitArray:
		t := c.SubmitArray.GetTemplate()
		if t == nil || t.Id == "" {
			return extra, freed
		}
		kind := t.Kind // as a task's capacity
		if k, ok := d.taskKinds[t.Kind]; ok {
			kind = k
		}
		for i := range min(len(c.SubmitArray.Tasks), maxPiggyExtra) {
			extra = append(extra, scheduler.Job{ID: consensus.TaskID(t.Id, uint32(i)), Kind: kind, Priority: int(t.Priority), Constraints: t.Constraints})
		}
	case *raftpb.Command_FinishBatch:
		for _, r := range c.FinishBatch.Results {
			j, ok := d.cfg.State.Job(r.Id)
			if !ok || j.Phase != consensus.PhaseRunning || j.Attempt != r.Attempt || j.NodeID != r.NodeId {
				continue // a stale result frees nothing
			}
			if freed == nil {
				freed = map[string]map[string]int{}
			}
			if freed[j.NodeID] == nil {
				freed[j.NodeID] = map[string]int{}
			}
			freed[j.NodeID][j.Kind]++
			d.mu.Lock()
			if j.ArrayID == "" {
				d.observeRun(j.Kind, r.AtMs-j.PlacedAtMS)
			} else {
				d.observeTaskRun(j.Kind, r.RanUs)
			}
			d.mu.Unlock()
		}
	}
	return extra, freed
}

// shortJob is the average placement-to-result time under which a kind's
// jobs count as short, and get the configured prefetch in full.
const shortJob = 250 * time.Millisecond

// observeRun folds one result's placement-to-result time into its kind's
// moving average. d.mu is held.
func (d *Driver) observeRun(kind string, ms int64) {
	if ms < 0 {
		return
	}
	if d.runMS == nil {
		d.runMS = map[string]float64{}
	}
	old, ok := d.runMS[kind]
	if !ok {
		d.runMS[kind] = float64(ms)
		return
	}
	d.runMS[kind] = old + (float64(ms)-old)/32
}

// prefetch is, per kind, the placements per slot a worker may hold beyond
// those it runs now: the configured depth while the kind's jobs are short,
// at most one otherwise (and before any has finished).
func (d *Driver) prefetch() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]int, len(d.cfg.Prefetch))
	for kind, n := range d.cfg.Prefetch {
		if avg, ok := d.runMS[kind]; ok && avg < float64(shortJob.Milliseconds()) {
			out[kind] = n
		} else {
			out[kind] = min(n, 1)
		}
	}
	return out
}

// taskQueueBudget is how much work, by the tasks' average run, a worker
// may hold waiting per slot. Enough to keep the slot busy across the
// control plane's round trip between a result and the placement that
// refills it (tens of milliseconds under load), little enough that the
// tail of an array (one node still working through its queue while
// another idles) stays short.
const taskQueueBudget = 100 * time.Millisecond

// observeTaskRun folds one array task's run (ran_us: the run itself, not
// its wait for a slot) into its kind's average. A longer run counts at
// once (half weight), a shorter one slowly, so an array of long tasks
// after one of short tasks is not prefetched deep for long. d.mu is held.
func (d *Driver) observeTaskRun(kind string, us int64) {
	if us <= 0 {
		return
	}
	// Past 4× the budget every run means one per slot; a clamp keeps one
	// very long run (a task that timed out after minutes) from holding
	// the depth at one for hundreds of short results after it.
	us = min(us, 4*taskQueueBudget.Microseconds())
	if d.taskRunUS == nil {
		d.taskRunUS = map[string]float64{}
	}
	old, ok := d.taskRunUS[kind]
	switch {
	case !ok:
		d.taskRunUS[kind] = float64(us)
	case float64(us) > old:
		d.taskRunUS[kind] = old + (float64(us)-old)/2
	default:
		d.taskRunUS[kind] = old + (float64(us)-old)/32
	}
}

// arrayPrefetch is, per kind, the array tasks per slot a worker may hold
// beyond those it runs: taskQueueBudget of work by the kind's average
// task run, at least one and at most the configured depth; one before
// any task has finished. Measured on three nodes of a 2-core machine
// (100,000 trivial tasks): a fixed 8 per slot ran 4,300–4,900 tasks/s,
// 32 ran 10,400 (make bench; node/scheduler/DESIGN.md).
func (d *Driver) arrayPrefetch() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]int, len(d.cfg.ArrayPrefetch))
	for kind, n := range d.cfg.ArrayPrefetch {
		if n <= 0 {
			continue
		}
		avg, ok := d.taskRunUS[kind]
		if !ok {
			out[kind] = 1
			continue
		}
		depth := float64(taskQueueBudget.Microseconds()) / max(avg, 1)
		out[kind] = int(min(float64(n), max(depth, 1)))
	}
	return out
}

// trimSlots keeps in round only the capacity of nodes it places jobs on:
// the FSM checks nothing else.
func trimSlots(round *raftpb.SchedulerRound) {
	used := make(map[string]bool, len(round.Placements))
	for _, p := range round.Placements {
		used[p.NodeId] = true
	}
	kept := round.Slots[:0]
	for _, s := range round.Slots {
		if used[s.NodeId] {
			kept = append(kept, s)
		}
	}
	round.Slots = kept
	if len(kept) == 0 {
		round.Slots = nil
	}
}

// canRun reports whether some eligible node matching cons has slots of
// kind at all (full or not): a job that cannot run anywhere blocks nothing.
func canRun(nodes []scheduler.Node, kind string, cons map[string]string) bool {
	for _, nd := range nodes {
		if nd.Eligible && nd.Slots[kind] > 0 && scheduler.Matches(nd.Labels, cons) {
			return true
		}
	}
	return false
}
