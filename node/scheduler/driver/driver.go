// Package driver runs the leader's scheduling loop around the pure
// planner in node/scheduler: it reads the replicated state through a
// narrow interface, plans a round, and commits the whole round (placements,
// pending reasons, requeues, expiries) as one Raft command. It also
// proposes retention's pruning. Time comes from an injected clock.
package driver

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// State is what the driver reads of the replicated state. Every method is
// served from an index: none walks the jobs ever submitted.
type State interface {
	Watch(topic string) <-chan struct{}
	Queued(kind string, fn func(consensus.Job) bool)
	RunningCounts() map[string]map[string]int
	RunningOn(node string) []consensus.Job
	RunningNodes() []string
	DeadlinesBefore(ms int64, limit int) []consensus.Job
	Member(kind, id string) (consensus.Member, bool)
	Job(id string) (consensus.Job, bool)
	QueuedKinds() []string
	OldestEnded() (int64, bool)
	Prunable() uint64
	Retention() int64
}

// Worker is one node as gossip sees it.
type Worker struct {
	ID    string
	Alive bool
	// Lagging: its replica trails the leader's log (a full disk, say), so
	// it would see a new placement late or never. It gets no new work;
	// what it runs is left alone (it still reports results).
	Lagging bool
	// Refused: the cluster's policy does not let it work (its
	// worker.heartbeat is denied). It gets no new work; the leader refuses
	// its lease renewals, so what it runs goes elsewhere when they lapse.
	Refused bool
	Slots   map[string]int // kind → concurrent runs
	Labels  map[string]string
}

// Config wires a Driver.
type Config struct {
	State State
	// Apply commits a command through the leader.
	Apply func(context.Context, *raftpb.Command) error
	// Workers lists the nodes gossip knows (alive or not).
	Workers func() []Worker
	// MemberChanges fires when gossip's view changes.
	MemberChanges <-chan struct{}
	// Leadership delivers true on gaining and false on losing leadership.
	Leadership <-chan bool
	IsLeader   bool // leadership at start
	Now        func() time.Time
	Logger     *slog.Logger
	// Prefetch is, per executor kind, how many placements per slot a
	// worker may hold beyond those it runs: they wait on the worker for a
	// slot (phase running, not started; the timeout counts from the
	// start). It keeps workers fed between rounds when jobs are short, so
	// it applies in full only while the kind's jobs are (placement to
	// result under shortJob on average); otherwise one per slot at most,
	// and none once they are long (longJob), so long jobs do not wait on
	// one worker while another idles.
	// ArrayPrefetch is the most array tasks per slot a worker may hold
	// (usually deeper: tasks are many and alike); the depth used follows
	// the tasks' average run so that about taskQueueBudget of work waits
	// per slot. Missing kinds get none.
	Prefetch      map[string]int
	ArrayPrefetch map[string]int
	// Placed, if set, hears how many placements each round or
	// piggybacked round proposes.
	Placed func(n int)
	// DeadWorkerGrace is how long this leader must have seen a worker
	// dead before its running jobs are re-queued.
	DeadWorkerGrace time.Duration
	// Tick bounds how long timers (backoff, deadlines, grace) wait for a
	// round when nothing else wakes the driver.
	Tick time.Duration
	// LeaseTTL is how long a placement lives without its worker renewing
	// it (DefaultLeaseTTL if zero); then it is re-queued.
	LeaseTTL time.Duration
	// MaxEndedJobs is how many ended jobs the cluster holds at most
	// (DefaultMaxEndedJobs if zero): past it, the oldest are pruned before
	// their retention, so memory stays bounded under any load; but none
	// that ended less than MinEndedAge ago (negative: none; zero:
	// DefaultMinEndedAge), so every result can be read for that long.
	MaxEndedJobs uint64
	MinEndedAge  time.Duration
}

// DefaultMaxEndedJobs is the most ended jobs held by default (as many as
// the largest array has tasks, consensus.MaxArrayTasks).
const DefaultMaxEndedJobs = 1_000_000

// DefaultMinEndedAge is how long an ended job is kept whatever the cap.
const DefaultMinEndedAge = 5 * time.Minute

// Limits on one round's work, so a round stays small and quick however
// deep the queue is.
const (
	maxScanExtra      = 256         // unplaceable queued jobs sent to the planner for their pending reason
	maxExamine        = 1 << 16     // queued jobs looked at per round, at most
	maxReasonUpdates  = 256         // pending-reason changes per round
	maxRoundRequeues  = 4096        // requeues per round
	maxRoundExpiries  = 4096        // expiries per round
	reasonEvery       = time.Second // pending reasons refreshed at most this often
	pruneBatch        = 10_000
	pruneEvery        = time.Second
	defaultTick       = 500 * time.Millisecond
	defaultDeadWorker = 3 * time.Second
)

// Driver is the leader's scheduler loop.
type Driver struct {
	cfg         Config
	log         *slog.Logger
	leaderSince time.Time
	deadSince   map[string]time.Time
	lastPrune   time.Time
	lastCapWarn time.Time // the ended-job cap was last logged

	// Rounds are pipelined: the next is planned while earlier ones
	// commit. inflight holds the placements of uncommitted rounds, so
	// they are neither planned twice nor their capacity given away.
	// planMu serialises planning (rounds and piggybacked rounds) from
	// reading the state to reserving the placements.
	planMu  sync.Mutex
	leading atomic.Bool
	// lastReasons is when a round last offered the planner jobs it had no
	// capacity for, to refresh their pending reasons (at most every
	// reasonEvery: walking the queue for them costs).
	lastReasons time.Time

	leaseMu        sync.Mutex
	leases         map[string]lease // job id → the lease of its current placement
	silent         map[string]bool  // nodes whose leases lapsed, until they renew
	lastLeaseCheck time.Time
	mu             sync.Mutex
	runMS          map[string]float64           // kind → moving average of placement→result, ms
	taskRuns       map[string]*arrayRun         // array id → its tasks' runs
	taskRunSeq     uint64                       // counts observed task runs
	inflight       map[string]inflightPlacement // job id → placement
	rounds         int                          // rounds committing now
	failedRounds   int                          // rounds failed in a row (reset by one committed)
	roundDone      chan struct{}                // a round finished committing
	wg             sync.WaitGroup
}

type inflightPlacement struct{ node, kind string }

// maxRoundsInFlight bounds the pipelined rounds.
const maxRoundsInFlight = 2

// New returns a Driver; Run it.
func New(cfg Config) *Driver {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Tick <= 0 {
		cfg.Tick = defaultTick
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.MaxEndedJobs == 0 {
		cfg.MaxEndedJobs = DefaultMaxEndedJobs
	}
	switch {
	case cfg.MinEndedAge == 0:
		cfg.MinEndedAge = DefaultMinEndedAge
	case cfg.MinEndedAge < 0:
		cfg.MinEndedAge = 0
	}
	if cfg.DeadWorkerGrace <= 0 {
		cfg.DeadWorkerGrace = defaultDeadWorker
	}
	d := &Driver{cfg: cfg, log: cfg.Logger.With("component", "scheduler"), deadSince: map[string]time.Time{},
		inflight: map[string]inflightPlacement{}, roundDone: make(chan struct{}, 1), leases: map[string]lease{}, silent: map[string]bool{}}
	d.leading.Store(cfg.IsLeader)
	return d
}

// Run schedules while this node leads, until ctx ends. A round runs when
// the queue or the capacity in use changes, when membership changes, and
// at least every Tick (timers: backoff, deadlines, dead-worker grace).
func (d *Driver) Run(ctx context.Context) {
	isLeader := d.cfg.IsLeader
	d.leading.Store(isLeader)
	defer d.leading.Store(false)
	d.leaderSince = d.cfg.Now()
	tick := time.NewTicker(d.cfg.Tick)
	defer tick.Stop()
	defer d.wg.Wait()
	for {
		var queue, members <-chan struct{}
		if isLeader {
			queue = d.cfg.State.Watch(consensus.TopicQueue)
			members = d.cfg.State.Watch(consensus.TopicMembers)
			d.Round(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case l := <-d.cfg.Leadership:
			if l && !isLeader {
				d.leaderSince, d.deadSince = d.cfg.Now(), map[string]time.Time{}
				d.leaseMu.Lock()
				d.leases, d.silent = map[string]lease{}, map[string]bool{} // every lease starts afresh under this leader
				d.leaseMu.Unlock()
				d.mu.Lock()
				d.failedRounds = 0 // a streak of an earlier term is not this one's
				d.mu.Unlock()
			}
			isLeader = l
			d.leading.Store(l)
		case <-queue:
		case <-d.roundDone:
		case <-members:
		case <-d.cfg.MemberChanges:
		case <-tick.C:
		}
	}
}

// Round plans one round and starts its commit (waiting for a commit slot
// when maxRoundsInFlight rounds are committing); it is exported for tests,
// which Wait for it.
func (d *Driver) Round(ctx context.Context) {
	d.mu.Lock()
	busyRounds := d.rounds
	d.mu.Unlock()
	if busyRounds >= maxRoundsInFlight {
		return // the round that finishes wakes the loop again
	}
	now := d.cfg.Now()
	nowMS := now.UnixMilli()
	st := d.cfg.State
	round := &raftpb.SchedulerRound{AtMs: nowMS, Rules: consensus.SkillRules}

	workers := d.cfg.Workers()
	alive := make(map[string]bool, len(workers))
	known := make(map[string]bool, len(workers))
	for _, w := range workers {
		known[w.ID] = true
	}
	runningNodes := st.RunningNodes()
	for _, n := range runningNodes {
		known[n] = true
	}
	for id := range d.deadSince { // forget nodes that are gone and hold no work
		if !known[id] {
			delete(d.deadSince, id)
		}
	}
	for _, w := range workers {
		if w.Alive {
			alive[w.ID] = true
			delete(d.deadSince, w.ID)
		} else if _, ok := d.deadSince[w.ID]; !ok {
			d.deadSince[w.ID] = now
		}
	}

	// Work on dead workers, and on drained ones past their deadline.
	for _, node := range runningNodes {
		if len(round.Requeues) >= maxRoundRequeues {
			break
		}
		reason := ""
		m, isMember := st.Member("node", node)
		if isMember && m.Revoked {
			reason = "node " + node + " was removed"
		} else if alive[node] {
			if isMember && m.Draining && m.DrainDeadlineMS > 0 && nowMS >= m.DrainDeadlineMS {
				reason = "drain deadline reached on " + node
			}
		} else {
			since, seen := d.deadSince[node]
			if !seen {
				d.deadSince[node] = now
				continue
			}
			if now.Sub(since) >= d.cfg.DeadWorkerGrace && now.Sub(d.leaderSince) >= d.cfg.DeadWorkerGrace {
				reason = "worker " + node + " is dead"
			}
		}
		if reason == "" {
			continue
		}
		var ids []string
		for _, j := range st.RunningOn(node) {
			d.log.Debug("re-queueing job", "job", j.ID, "attempt", j.Attempt, "worker", node, "reason", reason)
			round.Requeues = append(round.Requeues, &raftpb.RequeueJob{Id: j.ID, Attempt: j.Attempt, Reason: reason})
			ids = append(ids, j.ID)
		}
		d.logRequeues(node, reason, ids)
	}

	d.lapsed(round, now, runningNodes)

	for _, j := range st.DeadlinesBefore(nowMS, maxRoundExpiries) {
		round.Expire = append(round.Expire, j.ID)
	}

	d.planMu.Lock() // until the placements are reserved
	waitMax := 0
	if now.Sub(d.lastReasons) >= reasonEvery {
		waitMax, d.lastReasons = maxScanExtra, now
	}
	jobs, unplaced := d.place(round, workers, nil, nil, maxExamine, waitMax)
	reasons := make(map[string]string, len(jobs))
	for _, j := range jobs {
		reasons[j.ID] = j.reason
	}
	for _, u := range unplaced {
		reason := u.Reason
		if reasons[u.JobID] == reason || len(round.Pending) >= maxReasonUpdates {
			continue
		}
		round.Pending = append(round.Pending, &raftpb.SetPendingReason{Id: u.JobID, Reason: reason})
	}

	if len(round.Placements)+len(round.Pending)+len(round.Requeues)+len(round.Expire) > 0 {
		d.mu.Lock()
		d.reserve(round, jobs)
		d.rounds++
		d.mu.Unlock()
		d.planMu.Unlock()
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			err := d.cfg.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_SchedulerRound{SchedulerRound: round}})
			failed := err != nil && !errors.Is(err, consensus.ErrConflict)
			d.mu.Lock()
			d.release(round)
			d.rounds--
			if failed {
				d.failedRounds++
			} else {
				d.failedRounds = 0
			}
			streak := d.failedRounds
			d.mu.Unlock()
			if failed {
				if streak == 1 || streak%100 == 0 {
					d.log.Warn("scheduling round not committed; retrying with a back-off", "placements", len(round.Placements), "failed_in_a_row", streak, "err", err)
				}
				// A round that fails at once (leadership being handed
				// over, no quorum) is not planned again at once: the loop
				// spun, hundreds of rounds and warnings in 100 ms.
				t := time.NewTimer(roundBackoff(streak, d.cfg.Tick))
				select {
				case <-ctx.Done():
				case <-t.C:
				}
				t.Stop()
			}
			select {
			case d.roundDone <- struct{}{}:
			default:
			}
		}()
	} else {
		d.planMu.Unlock()
	}
	d.prune(ctx, now)
}

// roundBackoff is the pause before the next round after n failed in a
// row: 2 ms, doubling, at most a tick.
func roundBackoff(n int, tick time.Duration) time.Duration {
	return min(tick, time.Millisecond<<min(n, 16))
}

// Wait blocks until every round started has finished committing.
func (d *Driver) Wait() { d.wg.Wait() }

// prune proposes the removal of jobs past the retention, or, while more
// than MaxEndedJobs ended jobs are held, of the oldest ended ones, at most
// once per pruneEvery and a bounded batch at a time (a whole array counts
// as its tasks and goes at once).
func (d *Driver) prune(ctx context.Context, now time.Time) {
	if now.Sub(d.lastPrune) < pruneEvery {
		return
	}
	st := d.cfg.State
	oldest, ok := st.OldestEnded()
	if !ok {
		return
	}
	before, limit, by := now.UnixMilli()-st.Retention(), uint64(pruneBatch), "retention"
	if oldest >= before {
		// Only what a prune can remove counts: the ended tasks of an array
		// still running cannot go (an array goes whole), and counted they
		// would have made every other job go as soon as it ended.
		held := st.Prunable()
		capBefore := now.Add(-d.cfg.MinEndedAge).UnixMilli() + 1
		if held <= d.cfg.MaxEndedJobs || oldest >= capBefore {
			return
		}
		before, limit, by = capBefore, min(held-d.cfg.MaxEndedJobs, pruneBatch), "ended-job cap"
		if now.Sub(d.lastCapWarn) >= time.Minute {
			d.lastCapWarn = now
			d.log.Warn("pruning the oldest ended jobs before their retention: the cluster holds more ended jobs than its cap",
				"ended", held, "cap", d.cfg.MaxEndedJobs, "kept_at_least", d.cfg.MinEndedAge,
				"hint", "read results sooner, shorten 'palyra job retention', or raise --max-ended-jobs on the voters (memory grows with it)")
		}
	}
	d.lastPrune = now
	cmd := &raftpb.Command{Cmd: &raftpb.Command_PruneJobs{PruneJobs: &raftpb.PruneJobs{BeforeMs: before, Max: uint32(limit), AtMs: now.UnixMilli(), By: by}}}
	if err := d.cfg.Apply(ctx, cmd); err != nil {
		d.log.Warn("pruning not committed", "err", err)
	}
}

// shapeKey is a canonical form of a job's constraints.
func shapeKey(c map[string]string) string {
	if len(c) == 0 {
		return ""
	}
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(c[k])
		b.WriteByte(0)
	}
	return b.String()
}

// logRequeues says once per worker and round which of its jobs are queued
// again and why (each job's line is at debug level: a dead worker with a
// few hundred placements made as many warnings).
func (d *Driver) logRequeues(node, reason string, ids []string) {
	if len(ids) == 0 {
		return
	}
	const shown = 5
	first := ids[:min(len(ids), shown)]
	d.log.Warn("re-queueing jobs", "worker", node, "jobs", len(ids), "reason", reason, "first", first)
}
