package driver

import (
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/node/scheduler"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// planned is a job handed to the planner, with the pending reason it has
// now (empty for jobs not yet in the queue) and, for an array task, its
// array.
type planned struct {
	scheduler.Job
	reason string
	task   bool
	array  string
}

// maxPiggyExamine bounds the queued jobs a piggybacked round looks at
// (placements of other rounds still committing are skipped for free), and
// maxPiggyExtra the tasks of a new array it offers the planner.
const (
	maxPiggyExamine = 256
	maxPiggyExtra   = 1024
)

// depths gives the prefetch depth a job would have on its own: the
// kind's single-job prefetch, or for an array task its array's
// (arrayDepth; the single-job one where the kind has no array prefetch).
// One per place call: it remembers each array's depth for the call.
type depths struct {
	d        *Driver
	prefetch map[string]int
	arrays   map[string]int
}

func (x *depths) of(kind string, task bool, array string) int {
	if !task || x.d.cfg.ArrayPrefetch[kind] <= 0 {
		return max(x.prefetch[kind], 0)
	}
	if v, ok := x.arrays[array]; ok {
		return v
	}
	x.d.mu.Lock()
	v := x.d.arrayDepth(kind, array)
	x.d.mu.Unlock()
	x.arrays[array] = v
	return v
}

// place plans placements from the head of the queue, then the extra jobs
// (not in the queue yet: they come after it), onto the capacity of the
// live workers: their slots times one plus each job's prefetch depth,
// less the placements they hold by the state and those of rounds still
// committing, plus freed (node → kind → slots the command this round
// rides on frees before the round applies). It appends the placements
// and the capacity they were checked against to round, and returns the
// jobs it offered the planner and those left unplaced. At most examine
// queued jobs are looked at, and at most waitMax of those with no free
// capacity for their shape are offered anyway (for their pending
// reason). d.planMu is held.
//
// Depths. Each job goes to the planner with its own depth (the kind's
// single-job prefetch, or its array's), and the planner counts a node's
// placements of a kind together whatever their depth, so a round cannot
// overfill a node by mixing depths. The planner also caps, on the nodes
// a job left waiting matches, the depth of every job after it (priority,
// then acceptance): without that, prefetch would invert the queue (tasks
// behind a job waiting for a slot refilled their deeper prefetch as each
// task ended, and a priority-100 job waited for a whole priority-0
// array). So the walk hands the planner, beside the jobs that have room,
// each job that found none but could run somewhere (one per shape and
// depth, the shallowest): it waits, and caps the jobs behind it. An
// unconstrained one ends the walk of its kind: nothing behind it has
// room on any node.
func (d *Driver) place(round *raftpb.SchedulerRound, workers []Worker, freed map[string]map[string]int,
	extra []planned, examine, waitMax int) ([]planned, []scheduler.Unplaced) {
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
	prefetch := d.prefetch()
	dep := &depths{d: d, prefetch: prefetch, arrays: map[string]int{}}
	// The deepest any job may go, per kind: what the walk may hope for.
	maxDepth := func(kind string) int { return max(prefetch[kind], d.cfg.ArrayPrefetch[kind]) }
	var nodes []scheduler.Node
	kindFree := map[string]int{}
	free := 0
	for _, w := range workers {
		if !w.Alive {
			continue
		}
		eligible := !d.isSilent(w.ID) && !w.Lagging && !w.Refused
		if m, ok := st.Member("node", w.ID); !ok || m.Ineligible || m.Draining || m.Revoked {
			eligible = false
		}
		nd := scheduler.Node{ID: w.ID, Eligible: eligible, Slots: w.Slots, Running: running[w.ID], Labels: w.Labels}
		if eligible {
			for kind := range w.Slots {
				f := max(nd.Capacity(kind, maxDepth(kind))-nd.Running[kind], 0)
				kindFree[kind] += f
				free += f
			}
		}
		nodes = append(nodes, nd)
	}
	if free == 0 && waitMax == 0 && len(extra) == 0 {
		return nil, nil
	}
	// An estimate of the room left for a shape (kind, depth, constraints),
	// to decide what to offer the planner (which decides exactly): the
	// free places at that depth, capped on each node as the planner will
	// cap it (below), less those this walk offered to jobs of the same
	// shape. Places offered to other shapes may have taken the same room:
	// the estimate can only be too high, so a job it finds no room for has
	// none (the walk stops or caps on that), and a job it offers in vain
	// is left unplaced by the planner. Subtracting every place offered to
	// the kind instead could starve a job: a stream of jobs for other
	// nodes ahead of it would hide a free slot it fits. Ignoring the caps
	// could too: jobs behind a waiting job on its nodes looked placeable,
	// and offered in vain they used up the walk before it reached a job
	// with a free slot elsewhere.
	//
	// After a cap, the places offered before it may have gone into the
	// room the cap took away: the estimate subtracts only those that
	// cannot have (offered beyond the room removed), so it stays an upper
	// bound.
	type estimate struct{ capped, uncapped, ver int }
	base := map[string]estimate{}
	offered := map[string]int{}
	caps := map[string][]int{} // kind → depth cap per node index (nodeNoCap: none)
	capVer := map[string]int{} // kind → bumped when a cap changes
	type waiter struct {
		kind     string
		depth    int
		cons     map[string]string
		priority int32
	}
	var waiters []waiter
	// freeWith estimates with the caps c (nil: none); tag names c in the
	// cache when it is not caps[kind].
	freeWith := func(kind string, depth int, cons map[string]string, c []int, tag string) (string, int) {
		key := kind + "\x00" + strconv.Itoa(depth) + "\x00" + shapeKey(cons)
		b, ok := base[key+tag]
		if !ok || b.ver != capVer[kind] {
			b = estimate{ver: capVer[kind]}
			for i, nd := range nodes {
				if nd.Eligible && scheduler.Matches(nd.Labels, cons) {
					d := depth
					if c != nil {
						d = min(d, c[i])
					}
					b.capped += max(nd.Capacity(kind, d)-nd.Running[kind], 0)
					b.uncapped += max(nd.Capacity(kind, depth)-nd.Running[kind], 0)
				}
			}
			base[key+tag] = b
		}
		return key, max(b.capped-max(offered[key]-(b.uncapped-b.capped), 0), 0)
	}
	freeFor := func(kind string, depth int, cons map[string]string) (string, int) {
		return freeWith(kind, depth, cons, caps[kind], "")
	}
	// capsFrom is the caps the waiters of kind with priority p or more put
	// on the nodes they match: in the planner a job of higher priority
	// than a waiter comes before it and is not capped by it.
	capsFrom := func(kind string, p int32) []int {
		var c []int
		for _, w := range waiters {
			if w.kind != kind || w.priority < p {
				continue
			}
			if c == nil {
				c = make([]int, len(nodes))
				for i := range c {
					c[i] = nodeNoCap
				}
			}
			for i, nd := range nodes {
				if nd.Eligible && nd.Slots[kind] > 0 && scheduler.Matches(nd.Labels, w.cons) {
					c[i] = min(c[i], w.depth)
				}
			}
		}
		return c
	}
	// capAt records the cap a waiting job puts on the nodes it matches.
	capAt := func(kind string, depth int, cons map[string]string, priority int32) {
		waiters = append(waiters, waiter{kind: kind, depth: depth, cons: cons, priority: priority})
		c := caps[kind]
		if c == nil {
			c = make([]int, len(nodes))
			for i := range c {
				c[i] = nodeNoCap
			}
			caps[kind] = c
		}
		changed := false
		for i, nd := range nodes {
			if nd.Eligible && nd.Slots[kind] > 0 && scheduler.Matches(nd.Labels, cons) && depth < c[i] {
				c[i], changed = depth, true
			}
		}
		if changed {
			capVer[kind]++
		}
	}
	nowMS := round.AtMs
	var jobs []planned
	offer := func(j consensus.Job, depth int, task bool) {
		jobs = append(jobs, planned{Job: scheduler.Job{ID: j.ID, Kind: j.Kind, Depth: depth, Attempt: j.Attempt, Order: j.CommitIndex<<20 | uint64(j.ArrayIndex),
			Priority: int(j.Priority), Constraints: j.Constraints}, reason: j.PendingReason, task: task, array: j.ArrayID})
	}
	// Per shape (kind, constraints): whether any node could run it, and
	// the shallowest depth a job of it was offered at to wait.
	runnable := map[string]bool{}
	canRunShape := func(kind string, cons map[string]string) bool {
		k := kind + "\x00" + shapeKey(cons)
		v, ok := runnable[k]
		if !ok {
			v = canRun(nodes, kind, cons)
			runnable[k] = v
		}
		return v
	}
	waitsAt := map[string]int{}
	// Each kind has its own queue and capacity: a kind with nothing free
	// is not walked at all (unless pending reasons are due).
	placeable, waiting := 0, 0
	for _, kind := range st.QueuedKinds() {
		kFree := kindFree[kind]
		if kFree == 0 && waitMax == 0 {
			continue
		}
		kPlaceable, kWaiting, examined := 0, 0, 0
		full := false // an unconstrained job found no room: nothing behind it has any
		st.Queued(kind, func(j consensus.Job) bool {
			if inflight[j.ID] {
				return true // placed by a round still committing; bounded by the in-flight map
			}
			examined++
			if j.NotBeforeMS > nowMS {
				return examined < examine // retry backoff
			}
			task := j.ArrayID != ""
			depth := dep.of(j.Kind, task, j.ArrayID)
			key, f := freeFor(j.Kind, depth, j.Constraints)
			if f > 0 && !full {
				offered[key]++
				kPlaceable++
				offer(j, depth, task)
				return examined < examine && (kPlaceable < kFree || kWaiting < waitMax)
			}
			if !full && canRunShape(j.Kind, j.Constraints) {
				sk := j.Kind + "\x00" + shapeKey(j.Constraints)
				if at, ok := waitsAt[sk]; !ok || depth < at {
					waitsAt[sk] = depth
					offer(j, depth, task) // it waits, and caps the depth behind it
					capAt(j.Kind, depth, j.Constraints, j.Priority)
					full = len(j.Constraints) == 0
					return examined < examine && (!full || kWaiting < waitMax)
				}
			}
			if kWaiting < waitMax {
				kWaiting++
				offer(j, depth, task)
				return examined < examine
			}
			return examined < examine && !full
		})
		placeable += kPlaceable
		waiting += kWaiting
	}
	for _, e := range extra {
		if placeable >= free {
			break
		}
		depth := dep.of(e.Kind, e.task, e.array)
		c, tag := caps[e.Kind], ""
		for _, w := range waiters {
			if w.kind == e.Kind && int(w.priority) < e.Priority { // some waiters come after it
				c, tag = capsFrom(e.Kind, int32(e.Priority)), "\x00p"+strconv.Itoa(e.Priority)
				break
			}
		}
		if key, f := freeWith(e.Kind, depth, e.Constraints, c, tag); f > 0 {
			offered[key]++
			placeable++
			e.Depth = depth
			e.Order = ^uint64(0) // after every queued job of its priority
			jobs = append(jobs, e)
		}
	}
	if placeable == 0 && waiting == 0 {
		return nil, nil
	}
	sj := make([]scheduler.Job, len(jobs))
	byID := make(map[string]*planned, len(jobs))
	for i := range jobs {
		sj[i] = jobs[i].Job
		byID[jobs[i].ID] = &jobs[i]
	}
	plan, unplaced := scheduler.Plan(nodes, sj)
	// The FSM checks each placement against the node's capacity for single
	// jobs (NodeSlots kind) or array tasks (kind + PrefetchSuffix): the
	// deepest this round placed of each, on each node it places on.
	type capKey struct{ node, kind string }
	deepest := map[capKey]int{}
	slotsOf := map[string]map[string]int{}
	for _, nd := range nodes {
		slotsOf[nd.ID] = nd.Slots
	}
	for _, p := range plan {
		j := byID[p.JobID]
		round.Placements = append(round.Placements, &raftpb.AssignJob{Id: p.JobID, Attempt: p.Attempt, NodeId: p.NodeID, AtMs: nowMS})
		k := capKey{p.NodeID, j.Kind}
		if j.task {
			k.kind += consensus.PrefetchSuffix
		}
		if v, ok := deepest[k]; !ok || j.Depth > v {
			deepest[k] = j.Depth
		}
	}
	for k, depth := range deepest {
		kind := strings.TrimSuffix(k.kind, consensus.PrefetchSuffix)
		round.Slots = append(round.Slots, &raftpb.NodeSlots{NodeId: k.node, Kind: k.kind, Slots: uint32(slotsOf[k.node][kind] * (1 + depth))})
	}
	sort.Slice(round.Slots, func(a, b int) bool {
		if round.Slots[a].NodeId != round.Slots[b].NodeId {
			return round.Slots[a].NodeId < round.Slots[b].NodeId
		}
		return round.Slots[a].Kind < round.Slots[b].Kind
	})
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
		d.inflight[p.Id] = inflightPlacement{node: p.NodeId, kind: kinds[p.Id]}
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
	var extra []planned
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
func (d *Driver) piggyInputs(cmd *raftpb.Command, extra []planned, freed map[string]map[string]int) ([]planned, map[string]map[string]int) {
	switch c := cmd.Cmd.(type) {
	case *raftpb.Command_SubmitJob:
		j := c.SubmitJob.GetJob()
		if j == nil || j.Id == "" || j.RequiresApproval { // a job waiting for approval is not placed
			return extra, freed
		}
		extra = append(extra, planned{Job: scheduler.Job{ID: j.Id, Kind: j.Kind, Priority: int(j.Priority), Constraints: j.Constraints}})
	case *raftpb.Command_SubmitArray:
		t := c.SubmitArray.GetTemplate()
		if t == nil || t.Id == "" {
			return extra, freed
		}
		for i := range min(len(c.SubmitArray.Tasks), maxPiggyExtra) {
			extra = append(extra, planned{Job: scheduler.Job{ID: consensus.TaskID(t.Id, uint32(i)), Kind: t.Kind, Priority: int(t.Priority), Constraints: t.Constraints},
				task: true, array: t.Id})
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
				d.observeTaskRun(j.ArrayID, r.RanUs)
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

// longJob is the average placement-to-result time from which a kind's
// jobs get no prefetch at all: a slot idles a round trip (milliseconds)
// between two such jobs, where a placement held behind a busy slot waited
// a whole run while another node had free slots (a user trial: a 15 s job
// waited 37 s on a full node).
const longJob = time.Second

// prefetch is, per kind, the placements per slot a worker may hold beyond
// those it runs now: the configured depth while the kind's jobs are short,
// at most one while they are neither short nor long (and before any has
// finished), none once they are long.
func (d *Driver) prefetch() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]int, len(d.cfg.Prefetch))
	for kind, n := range d.cfg.Prefetch {
		avg, ok := d.runMS[kind]
		switch {
		case ok && avg < float64(shortJob.Milliseconds()):
			out[kind] = n
		case ok && avg >= float64(longJob.Milliseconds()):
			out[kind] = 0
		default:
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

// maxArrayRuns bounds the arrays whose task runs the driver remembers
// (the one whose last result is oldest is forgotten first; a forgotten
// array that still has tasks starts again at one per slot).
const maxArrayRuns = 1024

// observeTaskRun folds one array task's run (ran_us: the run itself, not
// its wait for a slot) into its array's average. A longer run counts at
// once (half weight), a shorter one slowly, so that a few long tasks
// among short ones bring the depth down at once. d.mu is held.
func (d *Driver) observeTaskRun(array string, us int64) {
	if us <= 0 || array == "" {
		return
	}
	// Past 4× the budget every run means one per slot; a clamp keeps one
	// very long run (a task that timed out after minutes) from holding
	// the depth at one for hundreds of short results after it.
	us = min(us, 4*taskQueueBudget.Microseconds())
	if d.taskRuns == nil {
		d.taskRuns = map[string]*arrayRun{}
	}
	d.taskRunSeq++
	r, ok := d.taskRuns[array]
	switch {
	case !ok:
		if len(d.taskRuns) >= maxArrayRuns { // forget the least recently heard of
			oldest := ""
			for id, o := range d.taskRuns {
				if oldest == "" || o.seen < d.taskRuns[oldest].seen {
					oldest = id
				}
			}
			delete(d.taskRuns, oldest)
		}
		d.taskRuns[array] = &arrayRun{avgUS: float64(us), seen: d.taskRunSeq}
		return
	case float64(us) > r.avgUS:
		r.avgUS += (float64(us) - r.avgUS) / 2
	default:
		r.avgUS += (float64(us) - r.avgUS) / 32
	}
	r.seen = d.taskRunSeq
}

// arrayRun is what the driver remembers of an array's task runs.
type arrayRun struct {
	avgUS float64 // moving average of its tasks' runs
	seen  uint64  // when it was last heard of (taskRunSeq)
}

// arrayDepth is how many of an array's tasks per slot a worker may hold
// beyond those it runs: taskQueueBudget of work by the array's average
// task run, at least one and at most the kind's configured depth; one
// before any task of the array has finished, so that an array of long
// tasks never starts deep (an average per kind held a new array of long
// tasks at the depth of the short tasks before it until its first
// result: up to 32 per slot, minutes of work parked on one node). Short
// tasks find their depth within a few results. Measured on three nodes
// of a 2-core machine (100,000 trivial tasks): a fixed 8 per slot ran
// 4,300–4,900 tasks/s, 32 ran 10,400 (make bench; node/scheduler/DESIGN.md).
// d.mu is held.
func (d *Driver) arrayDepth(kind, array string) int {
	n := d.cfg.ArrayPrefetch[kind]
	r, ok := d.taskRuns[array]
	if !ok || n <= 0 {
		return min(max(n, 0), 1)
	}
	depth := float64(taskQueueBudget.Microseconds()) / max(r.avgUS, 1)
	return int(min(float64(n), max(depth, 1)))
}

// nodeNoCap marks a node no waiting job caps.
const nodeNoCap = int(^uint(0) >> 1)

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
