// Package worker runs the jobs the control plane placed on this node. It
// watches the replicated state, starts an executor run for each placement
// (job id + attempt) addressed to it, stops runs whose job was cancelled or
// re-placed, and reports each result through Raft tagged with its attempt,
// so a stale attempt can never overwrite a newer one.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/palyra-mesh/palyra/identity/skill"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/proto/raftpb"
	"github.com/palyra-mesh/palyra/runtime"
)

// Control is the slice of the control plane the worker writes to. Apply
// must reach the leader (the node forwards writes).
type Control interface {
	Apply(ctx context.Context, cmd *raftpb.Command) (consensus.Job, error)
}

// State is what the worker reads of the local replica: the jobs placed on
// it, and a wake-up when they change (never a scan of all jobs).
type State interface {
	Watch(topic string) <-chan struct{}
	RunningOn(node string) []consensus.Job
	Job(id string) (consensus.Job, bool)
}

// Blobs resolves a module hash to its verified bytes and stores artifacts
// (replicated, so they outlive this worker).
type Blobs interface {
	Get(hash string) ([]byte, error)
	Put(data []byte) (string, error)
}

// FencedKV is a key-value store whose writes can be fenced by a job's
// attempt, as results are: a superseded attempt's writes are refused.
type FencedKV interface {
	runtime.KV
	ForAttempt(job string, attempt uint32) runtime.KV
}

// Config configures a Worker.
type Config struct {
	NodeID    string
	State     State
	Control   Control
	Blobs     Blobs
	Executors map[runtime.Kind]runtime.Executor
	Logger    *slog.Logger
	Now       func() time.Time // for result timestamps; defaults to time.Now
	// Secrets and KV serve capability grants (replicated services).
	Secrets runtime.Secrets
	KV      runtime.KV
	// Leases renews the leases of the placements this worker holds; nil
	// renews none (the leader then re-queues them when they lapse).
	Leases Leases
	// OnRun, if set, hears of each finished run of a placement: its kind,
	// whether it completed, how long it took and when its job was
	// submitted (RunHere's runs are counted by the node once recorded).
	OnRun func(kind string, ok bool, took time.Duration, submitted time.Time)
	// KeepEndedOutput reports whether the cluster keeps the output a run
	// had written when its job was cancelled or expired under it
	// (FinishJob.ended_output: every member must apply it alike); nil: no.
	KeepEndedOutput func() bool
	// RunHereLimit bounds a RunHere run (0: RunHereLimit; in-process test
	// clusters give more, so a loaded -race run does not mark modules long).
	RunHereLimit time.Duration
	// HandBack says why this node takes no new work now ("" while it
	// does): a drained or ineligible node. Its placements still waiting
	// for a slot are then handed back to the queue, to run elsewhere,
	// while the runs that have their slot finish. nil: never.
	HandBack func() string
}

// Lease names one placement: a job and the attempt given to this worker.
type Lease struct {
	JobID   string
	Attempt uint32
}

// Leases renews a worker's leases with the leader: one call for all the
// placements it holds. It returns those that are not the worker's any more,
// and the leases' time to live.
type Leases interface {
	RenewLeases(ctx context.Context, held []Lease) (lost []Lease, ttl time.Duration, err error)
}

// firstRenewal is how soon a worker renews before it has heard the
// leases' time to live; it then renews three times per TTL.
const firstRenewal = time.Second

// Worker executes placements addressed to Config.NodeID.
type Worker struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	running map[string]*run   // job id → the local run
	orphans map[string]uint32 // job id → attempt left over from a previous process
	// finished holds runs whose result the leader has committed (or
	// that it took back, handed back before they started) but this
	// replica may not have applied yet: without it, a reconcile in that
	// window would see the job still running here and run it again.
	finished map[string]uint32
	wg       sync.WaitGroup
	results  chan pending // finished runs waiting to be reported

	exMu      sync.RWMutex
	executors map[runtime.Kind]runtime.Executor // Config.Executors plus those added later

	tapMu sync.Mutex
	taps  map[string]liveTap // job id → the output of its run here

	longMu sync.Mutex
	long   map[string]time.Time // module hash → when a RunHere run went past RunHereLimit
}

// liveTap is one run's output as it is written.
type liveTap struct {
	attempt uint32
	tap     *runtime.Tap
}

// tapLinger is how long a finished run's output stays readable live,
// while its result is on its way into the replicated state.
const tapLinger = 5 * time.Second

// Output returns the live output of the job's run on this worker, if it
// runs here (or ended moments ago), and that run's attempt.
func (w *Worker) Output(jobID string) (*runtime.Tap, uint32, bool) {
	w.tapMu.Lock()
	defer w.tapMu.Unlock()
	lt, ok := w.taps[jobID]
	return lt.tap, lt.attempt, ok
}

// openTap makes the run's Tap (the one start gave it, in ctx) readable
// as its live output.
func (w *Worker) openTap(ctx context.Context, j consensus.Job) *runtime.Tap {
	tap, _ := ctx.Value(tapKey{}).(*runtime.Tap)
	if tap == nil {
		tap = runtime.NewTap()
	}
	w.tapMu.Lock()
	w.taps[j.ID] = liveTap{attempt: j.Attempt, tap: tap}
	w.tapMu.Unlock()
	return tap
}

func (w *Worker) closeTap(id string, tap *runtime.Tap) {
	tap.Close()
	time.AfterFunc(tapLinger, func() {
		w.tapMu.Lock()
		defer w.tapMu.Unlock()
		if w.taps[id].tap == tap {
			delete(w.taps, id)
		}
	})
}

// pending is one result on its way into a FinishBatch; done receives the
// outcome of the batch that carried it.
type pending struct {
	fin  *raftpb.FinishJob
	done chan error
}

// maxResultBatch bounds the results reported in one command, and
// maxBatchesInFlight the result commands a worker has on their way.
const (
	maxResultBatch     = 1024
	maxBatchesInFlight = 4
)

type run struct {
	attempt uint32
	cancel  context.CancelCauseFunc
	tap     *runtime.Tap // its output; started once it has its slot, withdrawn if handed back
}

// handBackError is the cause of a run withdrawn while it waited for a
// slot on a node that stopped taking work: the worker returns its job to
// the queue (execute).
type handBackError struct{ why string }

func (e *handBackError) Error() string { return "handed back before it started: " + e.why }

// tapKey carries a run's Tap from start to its executor.
type tapKey struct{}

// AddExecutor makes the worker run jobs of kind with ex from now on: a
// node that finds Chromium after it started (installed later) adds its
// browser executor without a restart.
func (w *Worker) AddExecutor(kind runtime.Kind, ex runtime.Executor) {
	w.exMu.Lock()
	defer w.exMu.Unlock()
	w.executors[kind] = ex
}

// errSuperseded is the cancel cause when the job was re-placed, or is no
// longer this worker's; errEnded when it ended under the run, at this
// attempt on this node (cancelled, or past its deadline): the output the
// run had written is then kept on the job (keepEndedOutput).
var (
	errSuperseded = errors.New("job superseded")
	errEnded      = errors.New("job ended (cancelled, or past its deadline)")
)

// New returns a Worker; call Recover, then Run.
func New(cfg Config) *Worker {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	executors := make(map[runtime.Kind]runtime.Executor, len(cfg.Executors))
	for k, ex := range cfg.Executors {
		executors[k] = ex
	}
	return &Worker{cfg: cfg, log: cfg.Logger.With("component", "worker"), executors: executors, taps: map[string]liveTap{},
		running: make(map[string]*run), orphans: make(map[string]uint32), finished: make(map[string]uint32), results: make(chan pending, maxResultBatch)}
}

// Recover returns to the queue every job the state says is running here
// but that this process never started: it belonged to a previous process
// of this node that crashed or was killed. Call it before the node places
// new work on itself.
func (w *Worker) Recover(ctx context.Context) error {
	for _, j := range w.cfg.State.RunningOn(w.cfg.NodeID) {
		w.mu.Lock()
		w.orphans[j.ID] = j.Attempt
		w.mu.Unlock()
		cmd := &raftpb.Command{Cmd: &raftpb.Command_RequeueJob{RequeueJob: &raftpb.RequeueJob{
			Id: j.ID, Attempt: j.Attempt, Reason: "worker " + w.cfg.NodeID + " restarted", NodeId: w.cfg.NodeID, AtMs: w.cfg.Now().UnixMilli()}}}
		if err := w.applyRetry(ctx, cmd); err != nil && !errors.Is(err, consensus.ErrStaleAttempt) {
			return fmt.Errorf("requeue orphaned job %s: %w", j.ID, err)
		}
		w.log.Info("requeued job left running by a previous process", "job", j.ID, "attempt", j.Attempt)
	}
	return nil
}

// Run reconciles local runs with the state until ctx ends, then waits for
// local runs to stop. Runs stopped by shutdown are not reported: the state
// keeps them running and the next process's Recover requeues them.
func (w *Worker) Run(ctx context.Context) error {
	st := w.cfg.State
	w.wg.Add(2)
	go func() { defer w.wg.Done(); w.report(ctx) }()
	go func() { defer w.wg.Done(); w.renew(ctx) }()
	for {
		changed := st.Watch(consensus.TopicNode(w.cfg.NodeID))
		w.reconcile(ctx)
		select {
		case <-changed:
		case <-ctx.Done():
			w.wg.Wait()
			return nil
		}
	}
}

// Running returns the number of runs in progress on this worker.
func (w *Worker) Running() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.running)
}

func (w *Worker) reconcile(ctx context.Context) {
	mine := w.cfg.State.RunningOn(w.cfg.NodeID)
	want := make(map[string]uint32, len(mine))
	w.mu.Lock()
	defer w.mu.Unlock()
	var starts []consensus.Job
	for _, j := range mine {
		want[j.ID] = j.Attempt
		if r, ok := w.running[j.ID]; ok && r.attempt == j.Attempt {
			continue
		}
		if a, ok := w.orphans[j.ID]; ok && a == j.Attempt {
			continue
		}
		if a, ok := w.finished[j.ID]; ok && a == j.Attempt {
			continue
		}
		starts = append(starts, j)
	}
	// Placements come in bursts (prefetch: a round places many at once).
	// They start in Order, each run held back until the one before it has
	// taken its place in its executor's line for a slot, so a job array's
	// task 3 does not take a free slot before task 1 because its goroutine
	// happened to run first.
	sort.Slice(starts, func(a, b int) bool { return orderOf(starts[a]).Before(orderOf(starts[b])) })
	var after <-chan struct{}
	for _, j := range starts {
		if ctx.Err() != nil {
			return
		}
		after = w.start(ctx, j, after)
	}
	for id, r := range w.running {
		if a, ok := want[id]; !ok || a != r.attempt {
			r.cancel(w.whyStopped(id, r.attempt))
		}
	}
	for id, a := range w.finished {
		if want[id] != a { // the replica caught up: the job moved on
			delete(w.finished, id)
		}
	}
	w.handBack()
}

// handBack withdraws the runs still waiting for a slot when this node
// takes no new work (drained or ineligible): each is stopped before it
// starts and its job returned to the queue (execute), while runs that
// have their slot finish; w.mu is held. Without it a drained node would
// go on starting what was placed on it ahead of its slots.
func (w *Worker) handBack() {
	if w.cfg.HandBack == nil {
		return
	}
	why := ""
	for _, r := range w.running {
		if r.tap.Withdrawn() {
			continue // handed back already
		}
		if why == "" {
			if why = w.cfg.HandBack(); why == "" {
				return
			}
		}
		if r.tap.Withdraw() {
			r.cancel(&handBackError{why: why})
		}
	}
}

// whyStopped is the cause for stopping the run of attempt of job id that
// the state no longer has running here: errEnded if the job ended at that
// attempt on this node, else errSuperseded.
func (w *Worker) whyStopped(id string, attempt uint32) error {
	j, ok := w.cfg.State.Job(id)
	if ok && (j.Phase == consensus.PhaseAborted || j.Phase == consensus.PhaseExpired) && j.Attempt == attempt && j.NodeID == w.cfg.NodeID {
		return errEnded
	}
	return errSuperseded
}

// start launches one run, held back until after is closed (see
// startOrder), and returns the channel closed once the run is queued for
// a slot (or done); w.mu is held.
func (w *Worker) start(ctx context.Context, j consensus.Job, after <-chan struct{}) <-chan struct{} {
	if old, ok := w.running[j.ID]; ok {
		old.cancel(errSuperseded)
	}
	rctx, cancel := context.WithCancelCause(ctx)
	r := &run{attempt: j.Attempt, cancel: cancel, tap: runtime.NewTap()}
	w.running[j.ID] = r
	so := &startOrder{after: after, done: make(chan struct{})}
	rctx = context.WithValue(rctx, startOrderKey{}, so)
	rctx = context.WithValue(rctx, tapKey{}, r.tap)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer cancel(nil)
		defer so.queued() // never hold the next run back past this one's end
		reported := w.execute(rctx, ctx, j)
		w.mu.Lock()
		if w.running[j.ID] == r {
			delete(w.running, j.ID)
			if reported {
				w.finished[j.ID] = j.Attempt
			}
		}
		w.mu.Unlock()
	}()
	return so.done
}

// startOrder chains the runs a reconcile starts together: a run waits for
// the one before it in Order to be queued for a slot (after), at most
// startOrderWait (the one before may be slow to get there: its input
// fetched from another node), and closes done once it is queued itself.
type startOrder struct {
	after <-chan struct{}
	done  chan struct{}
	once  sync.Once
}

type startOrderKey struct{}

// startOrderWait bounds how long a run waits for the run before it to be
// queued: order is kept for runs that get there promptly (microseconds;
// a loaded machine can stall a goroutine for milliseconds), and a slow
// one (its input fetched from another node) delays the next by no more.
const startOrderWait = 50 * time.Millisecond

func (s *startOrder) queued() { s.once.Do(func() { close(s.done) }) }

// wait holds the run back until the run before it is queued, ctx ends, or
// startOrderWait has passed.
func (s *startOrder) wait(ctx context.Context) {
	if s.after == nil {
		return
	}
	select {
	case <-s.after:
		return
	default:
	}
	t := time.NewTimer(startOrderWait)
	defer t.Stop()
	select {
	case <-s.after:
	case <-t.C:
	case <-ctx.Done():
	}
}

// orderOf is j's place among the runs waiting for a slot.
func orderOf(j consensus.Job) runtime.Order {
	return runtime.Order{Priority: j.Priority, Seq: j.CommitIndex, Index: j.ArrayIndex}
}

// execute runs j and reports its result; it returns whether the leader
// committed (or refused as stale) the result, or took the job back
// (handed back before it started): either way the run is over, and a
// replica that has not applied that yet must not start it again
// (Worker.finished). ctx is the run's; parent, the worker's (it outlives
// a run stopped because its job ended).
func (w *Worker) execute(ctx, parent context.Context, j consensus.Job) bool {
	log := w.log.With("job", j.ID, "attempt", j.Attempt)
	log.Debug("run started")
	t0 := time.Now()
	res := w.runJob(ctx, j)
	if tap, _ := ctx.Value(tapKey{}).(*runtime.Tap); tap != nil && tap.Withdrawn() {
		// handBack withdrew it and cancels ctx right after, with the
		// cause that has the job re-queued: wait for that, so the
		// executor's "withdrawn" failure is never reported as the job's.
		<-ctx.Done()
	}
	var hb *handBackError
	if cause := context.Cause(ctx); errors.As(cause, &hb) {
		return w.requeue(parent, j, hb, log) // it never ran: no run to count
	}
	if w.cfg.OnRun != nil {
		var submitted time.Time
		if j.SubmittedAtMS > 0 {
			submitted = time.UnixMilli(j.SubmittedAtMS)
		}
		w.cfg.OnRun(j.Kind, res.OK(), time.Since(t0), submitted)
	}
	if cause := context.Cause(ctx); cause != nil {
		// Aborted, re-placed, or this node is shutting down: nobody wants
		// this attempt's result; a job that ended under it keeps what it
		// wrote.
		log.Info("run stopped", "cause", cause)
		if errors.Is(cause, errEnded) {
			w.keepEndedOutput(parent, j, res, log)
		}
		return false
	}
	fin := w.finishFor(j, res, log)
	done := make(chan error, 1)
	select {
	case w.results <- pending{fin: fin, done: done}:
	case <-ctx.Done():
		return false
	}
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		return false
	}
	switch {
	case err == nil:
		log.Debug("job finished", "ok", res.OK(), "reason", res.Reason, "duration", res.Duration)
		return true
	case errors.Is(err, consensus.ErrStaleAttempt):
		log.Warn("result refused: attempt no longer current", "err", err)
		return true
	default:
		log.Error("could not record result", "err", err)
		return false
	}
}

// finishFor is the result of j's run: its outputs above the inline bound
// and its artifacts stored (and replicated) as blobs first; one that
// could not be stored fails the job.
func (w *Worker) finishFor(j consensus.Job, res runtime.Result, log *slog.Logger) *raftpb.FinishJob {
	fin := &raftpb.FinishJob{
		Id: j.ID, Attempt: j.Attempt, NodeId: w.cfg.NodeID, Ok: res.OK(),
		Stdout: res.Stdout, Stderr: res.Stderr, ExitCode: int32(res.ExitCode),
		FuelUsed: res.FuelUsed, AtMs: w.cfg.Now().UnixMilli(), RanUs: res.Ran.Microseconds(),
	}
	if err := w.storeOutputs(fin); err != nil {
		log.Error("could not store output; reporting the job failed", "err", err)
		res.Reason, res.Message = runtime.ReasonInternal, fmt.Sprintf("could not store the job's output: %v", err)
		fin.Ok = false
	}
	for _, a := range res.Artifacts {
		hash, err := w.cfg.Blobs.Put(a.Data)
		if err != nil {
			log.Error("could not store artifact; reporting the job failed", "artifact", a.Name, "err", err)
			res.Reason, res.Message = runtime.ReasonInternal, fmt.Sprintf("could not store artifact %s: %v", a.Name, err)
			fin.Ok, fin.Artifacts = false, nil
			break
		}
		fin.Artifacts = append(fin.Artifacts, &raftpb.ArtifactRef{Name: a.Name, MediaType: a.MediaType, Sha256: hash, Size: uint64(len(a.Data))})
	}
	if !res.OK() {
		hint := res.Hint
		if hint == "" {
			hint = hintFor(res.Reason, len(res.Stderr) > 0, j.ID)
		}
		fin.Error = &raftpb.Error{Code: string(res.Reason), Message: res.Message, Hint: hint}
		fin.Retryable = Retryable(res.Reason)
	}
	return fin
}

// RunHereLimit bounds a run RunHere starts: a job that would run longer
// is stopped there and scheduled as usual (its module is then not run
// here again for a while), so a submitter waits at most this long more
// and a job whose run everyone could follow is not hidden in one.
const RunHereLimit = 50 * time.Millisecond

// longModules bounds how many modules RunHere remembers as too long.
const longModules = 1024

// RunHere runs j, a wasm job submitted to this node and not yet accepted,
// at once: only if a slot is free with no placement waiting for one and
// the module is compiled here. It returns the result to record with the
// submission (attempt 1 on this node), or ok false when nothing is to be
// recorded from here: no slot, module not compiled, a run stopped at
// RunHereLimit, the executor failing, ctx ending. Nothing it ran is then
// recorded anywhere, so j must have no effect outside its output (no
// grants). j.ID and j.Attempt name the result; the FSM sets them again.
func (w *Worker) RunHere(ctx context.Context, j consensus.Job) (fin *raftpb.FinishJob, ok bool) {
	w.exMu.RLock()
	ex := w.executors[runtime.Kind(j.Kind)]
	w.exMu.RUnlock()
	mc, cached := ex.(runtime.ModuleCache)
	if !cached || j.ModuleHash == "" || j.InputHash != "" || w.isLong(j.ModuleHash) {
		return nil, false
	}
	spec := runtime.Spec{
		ModuleHash: j.ModuleHash, Input: j.Input,
		Timeout: time.Duration(j.TimeoutMS) * time.Millisecond, MemoryLimit: j.MemoryBytes, Fuel: j.Fuel,
		MaxOutput: int(j.MaxOutput), Deterministic: j.Deterministic, NoWait: true,
	}
	limit := RunHereLimit
	if w.cfg.RunHereLimit > 0 {
		limit = w.cfg.RunHereLimit
	}
	rctx, capped := ctx, spec.Timeout > limit
	if capped {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
	}
	res, ran := mc.RunCached(rctx, spec)
	switch {
	case !ran, res.Reason == runtime.ReasonBusy, ctx.Err() != nil:
		return nil, false
	case capped && rctx.Err() != nil:
		w.markLong(j.ModuleHash)
		return nil, false
	case res.Reason == runtime.ReasonInternal:
		return nil, false // the scheduler may place it where the executor works
	}
	// Config.OnRun does not hear of it: only the node knows whether its
	// entry recorded the run (api.RunHerer.Recorded).
	return w.finishFor(j, res, w.log.With("job", j.ID, "attempt", j.Attempt)), true
}

// isLong reports whether a run of module hash went past RunHereLimit here
// in the last ten minutes.
func (w *Worker) isLong(hash string) bool {
	w.longMu.Lock()
	defer w.longMu.Unlock()
	at, ok := w.long[hash]
	return ok && time.Since(at) < 10*time.Minute
}

func (w *Worker) markLong(hash string) {
	w.longMu.Lock()
	defer w.longMu.Unlock()
	if w.long == nil || len(w.long) >= longModules {
		w.long = map[string]time.Time{}
	}
	w.long[hash] = time.Now()
}

// storeOutputs moves a result's outputs above the inline bound out of
// Raft: stored here and on another node before the result that names them
// is proposed. On an error, the result carries no output.
func (w *Worker) storeOutputs(fin *raftpb.FinishJob) error {
	for _, o := range []struct {
		data *[]byte
		hash *string
		size *uint64
	}{{&fin.Stdout, &fin.StdoutSha256, &fin.StdoutSize}, {&fin.Stderr, &fin.StderrSha256, &fin.StderrSize}} {
		if len(*o.data) <= consensus.InlineLimit {
			continue
		}
		hash, err := w.cfg.Blobs.Put(*o.data)
		if err != nil {
			fin.Stdout, fin.Stderr, fin.StdoutSha256, fin.StderrSha256, fin.StdoutSize, fin.StderrSize = nil, nil, "", "", 0, 0
			return err
		}
		*o.hash, *o.size, *o.data = hash, uint64(len(*o.data)), nil
	}
	return nil
}

// keepEndedOutput records on a job that was cancelled or expired under its
// run the output the run had written (a job's logs streamed it, and then
// the ended job had none). Best effort: it gives up after endedOutputWait.
func (w *Worker) keepEndedOutput(parent context.Context, j consensus.Job, res runtime.Result, log *slog.Logger) {
	if w.cfg.KeepEndedOutput == nil || !w.cfg.KeepEndedOutput() || len(res.Stdout)+len(res.Stderr) == 0 {
		return
	}
	fin := &raftpb.FinishJob{Id: j.ID, Attempt: j.Attempt, NodeId: w.cfg.NodeID, EndedOutput: true,
		Stdout: res.Stdout, Stderr: res.Stderr, FuelUsed: res.FuelUsed, AtMs: w.cfg.Now().UnixMilli()}
	if err := w.storeOutputs(fin); err != nil {
		log.Warn("could not store the output of a job that ended under its run", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(parent, endedOutputWait)
	defer cancel()
	done := make(chan error, 1)
	select {
	case w.results <- pending{fin: fin, done: done}:
	case <-ctx.Done():
		return
	}
	select {
	case err := <-done:
		if err != nil {
			log.Debug("output of a job that ended under its run not kept", "err", err)
		}
	case <-ctx.Done():
	}
}

// endedOutputWait bounds keepEndedOutput.
const endedOutputWait = 30 * time.Second

func (w *Worker) runJob(ctx context.Context, j consensus.Job) runtime.Result {
	res := w.runExecutor(ctx, j)
	if j.OutputSchema != "" && res.OK() {
		if err := checkSchema(j.OutputSchema, res.Stdout, "output"); err != nil {
			res.Reason = runtime.ReasonOutputInvalid
			res.Message = fmt.Sprintf("tool %s/%s: %v", j.SkillID, j.SkillTool, err)
		}
	}
	return res
}

// checkSchema checks a skill tool's stdout (what "output") or input
// ("input") against its output or input schema (skill.Validate, cached).
func checkSchema(schema string, doc []byte, what string) error {
	err := skill.Validate(schema, doc)
	var de *skill.DocError
	switch {
	case err == nil:
		return nil
	case !errors.As(err, &de):
		return fmt.Errorf("the tool's %s_schema: %w", what, err)
	case de.NotJSON:
		return fmt.Errorf("the %s is not JSON: %s", what, de.Detail)
	}
	return fmt.Errorf("the %s does not match the tool's %s_schema: %s", what, what, de.Detail)
}

func (w *Worker) runExecutor(ctx context.Context, j consensus.Job) runtime.Result {
	if so, ok := ctx.Value(startOrderKey{}).(*startOrder); ok {
		defer func() { // a run that ends before its executor queued it
			select {
			case <-so.done:
			default:
				so.wait(ctx) // keeps the order: the next waits for the one before this
				so.queued()
			}
		}()
	}
	w.exMu.RLock()
	ex, ok := w.executors[runtime.Kind(j.Kind)]
	w.exMu.RUnlock()
	if !ok {
		return runtime.Result{Reason: runtime.ReasonInternal, Message: fmt.Sprintf("this node has no %s executor", j.Kind)}
	}
	spec := runtime.Spec{
		ModuleHash: j.ModuleHash, Input: j.Input, Script: j.Script,
		Timeout: time.Duration(j.TimeoutMS) * time.Millisecond, MemoryLimit: j.MemoryBytes, Fuel: j.Fuel,
		MaxOutput: int(j.MaxOutput), AllowHosts: j.AllowHosts, AllowPrivate: j.AllowPrivate,
		Deterministic: j.Deterministic,
		Order:         orderOf(j),
	}
	if j.SkillID != "" {
		spec.GrantsFrom = fmt.Sprintf("the capabilities of %s/%s (its skill's manifest)", j.SkillID, j.SkillTool)
	}
	spec.Tap = w.openTap(ctx, j)
	defer w.closeTap(j.ID, spec.Tap)
	if len(j.SecretNames) > 0 || j.KVPrefix != "" {
		kv := w.cfg.KV
		if f, ok := kv.(FencedKV); ok {
			kv = f.ForAttempt(j.ID, j.Attempt)
		}
		spec.Grants = &runtime.Grants{SecretNames: j.SecretNames, KVPrefix: j.KVPrefix, Secrets: w.cfg.Secrets, KV: kv}
	}
	if j.InputHash != "" {
		in, err := w.cfg.Blobs.Get(j.InputHash)
		if err != nil {
			return runtime.Result{Reason: runtime.ReasonInternal, Message: fmt.Sprintf("input %s unavailable: %v", j.InputHash, err)}
		}
		spec.Input = in
	}
	if j.InputSchema != "" {
		// A hook job's input is built from the event, not checked where it
		// was submitted as a skill run's is: check it here, before it runs.
		if err := checkSchema(j.InputSchema, spec.Input, "input"); err != nil {
			return runtime.Result{Reason: runtime.ReasonInputInvalid, Message: fmt.Sprintf("hook %s, tool %s/%s: %v", j.HookID, j.SkillID, j.SkillTool, err)}
		}
	}
	ordered(ctx, &spec)
	if j.ModuleHash != "" {
		// A module the executor has compiled needs no bytes: no read, no hash.
		if mc, ok := ex.(runtime.ModuleCache); ok {
			if res, ran := mc.RunCached(ctx, spec); ran {
				return res
			}
		}
		mod, err := w.cfg.Blobs.Get(j.ModuleHash)
		if err != nil {
			return runtime.Result{Reason: runtime.ReasonInternal, Message: fmt.Sprintf("module %s unavailable: %v", j.ModuleHash, err)}
		}
		spec.Module = mod
	}
	return ex.Run(ctx, spec)
}

// ordered holds a run started in a burst back until the run before it
// is queued for a slot, and has the executor say when this one is.
func ordered(ctx context.Context, spec *runtime.Spec) {
	so, ok := ctx.Value(startOrderKey{}).(*startOrder)
	if !ok {
		return
	}
	so.wait(ctx)
	spec.Queued = so.queued
}

// renew keeps the leases of the placements this worker holds (running,
// waiting for a slot, or reporting) alive, and stops those the leader
// says are not this worker's any more. A placement it gave up on (its
// result could not be recorded) is no longer renewed, so the leader
// re-queues it when its lease lapses.
func (w *Worker) renew(ctx context.Context) {
	if w.cfg.Leases == nil {
		return
	}
	every := firstRenewal
	var deniedLogged time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		w.mu.Lock()
		held := make([]Lease, 0, len(w.running))
		for id, r := range w.running {
			held = append(held, Lease{JobID: id, Attempt: r.attempt})
		}
		w.mu.Unlock()
		// Renewed even when it holds nothing: a worker whose leases once
		// lapsed gets new work only after it renews again.
		lost, ttl, err := w.cfg.Leases.RenewLeases(ctx, held)
		if err != nil {
			every = firstRenewal / 4
			var ce *consensus.Error
			if errors.As(err, &ce) && ce.Code == "permission_denied" {
				// The cluster's policy refuses this node work: asking
				// four times a second changes nothing; say so once a minute.
				every = firstRenewal
				if time.Since(deniedLogged) > time.Minute {
					deniedLogged = time.Now()
					w.log.Error("the cluster's policy refuses this node work (worker.heartbeat): it gets no jobs, and what it runs goes elsewhere when its leases lapse", "err", err)
				}
				continue
			}
			if ctx.Err() == nil {
				w.log.Warn("could not renew leases; retrying", "held", len(held), "err", err)
			}
			continue
		}
		if ttl > 0 {
			every = ttl / 3
		}
		w.mu.Lock()
		for _, l := range lost {
			if r, ok := w.running[l.JobID]; ok && r.attempt == l.Attempt {
				if j, ok := w.cfg.State.Job(l.JobID); ok && j.Attempt == l.Attempt && j.Phase.Terminal() {
					// Its result was recorded after the leases were read:
					// nothing to stop, nothing to say.
					w.log.Debug("placement ended while its lease was renewed", "job", l.JobID, "attempt", l.Attempt)
				} else {
					w.log.Info("placement is no longer this worker's; stopping it", "job", l.JobID, "attempt", l.Attempt)
				}
				// Never start this attempt again, whatever a lagging
				// replica says.
				w.finished[l.JobID] = l.Attempt
				// A job cancelled or expired under the run keeps what it
				// wrote, whichever of the lease and the replica says so first
				// (a replica that has not applied the end yet loses it).
				r.cancel(w.whyStopped(l.JobID, l.Attempt))
			}
		}
		w.mu.Unlock()
	}
}

// report sends finished runs' results to the leader, as many as are
// waiting in one FinishBatch (each still fenced on its own). Up to
// maxBatchesInFlight batches commit at once, so a result never waits for
// a whole earlier commit before it is sent.
func (w *Worker) report(ctx context.Context) {
	inflight := make(chan struct{}, maxBatchesInFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		var batch []pending
		select {
		case p := <-w.results:
			batch = append(batch, p)
		case <-ctx.Done():
			return
		}
	fill:
		for len(batch) < maxResultBatch {
			select {
			case p := <-w.results:
				batch = append(batch, p)
			default:
				break fill
			}
		}
		select {
		case inflight <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Add(1)
		go func(batch []pending) {
			defer wg.Done()
			defer func() { <-inflight }()
			fb := &raftpb.FinishBatch{Results: make([]*raftpb.FinishJob, len(batch))}
			for i, p := range batch {
				fb.Results[i] = p.fin
			}
			err := w.applyRetry(ctx, &raftpb.Command{Cmd: &raftpb.Command_FinishBatch{FinishBatch: fb}})
			for _, p := range batch {
				p.done <- err
			}
		}(batch)
	}
}

// requeue returns the job of a run withdrawn before it started (hb) to
// the queue, fenced by its attempt, so the scheduler places it elsewhere.
// It reports whether the cluster took it back (or the job had moved on
// already): the run is then over, and a replica that has not applied the
// requeue yet does not start it again.
func (w *Worker) requeue(ctx context.Context, j consensus.Job, hb *handBackError, log *slog.Logger) bool {
	cmd := &raftpb.Command{Cmd: &raftpb.Command_RequeueJob{RequeueJob: &raftpb.RequeueJob{
		Id: j.ID, Attempt: j.Attempt, NodeId: w.cfg.NodeID, AtMs: w.cfg.Now().UnixMilli(),
		Reason: fmt.Sprintf("handed back by %s before it started: %s", w.cfg.NodeID, hb.why)}}}
	err := w.applyRetry(ctx, cmd)
	switch {
	case err == nil:
		log.Info("handed back a job that waited for a slot", "why", hb.why)
		return true
	case errors.Is(err, consensus.ErrStaleAttempt):
		return true
	default:
		// The worker stopping, or a refusal (the job gone, a policy that
		// refuses this node's reports): the job stays placed here, and
		// the lease it no longer renews, or the next process's Recover,
		// returns it to the queue.
		log.Warn("could not hand back a job that waited for a slot", "err", err)
		return false
	}
}

// applyRetry applies cmd, retrying while the cluster has no leader or the
// leader is unreachable. FSM refusals are final and returned at once.
func (w *Worker) applyRetry(ctx context.Context, cmd *raftpb.Command) error {
	backoff := 50 * time.Millisecond
	for {
		_, err := w.cfg.Control.Apply(ctx, cmd)
		// Unknown outcomes are retried too: the commands the worker sends
		// are fenced by attempt, so a duplicate is refused as stale.
		var ce *consensus.Error
		if err == nil || errors.As(err, &ce) && !consensus.WorthRetrying(err, true) {
			return err
		}
		w.log.Warn("control plane unavailable; retrying", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

// hintFor is the hint of a failure whose executor gave none: the limits
// an executor enforces (timeout, memory, output, fuel) come with theirs
// (Result.Hint), naming the flag that raises them; what to do about the
// guest's own failures is said here.
func hintFor(r runtime.Reason, hasStderr bool, id string) string {
	switch r {
	case runtime.ReasonExitCode:
		if !hasStderr {
			return "the module wrote nothing to stderr: the exit code is all it said (see what the module's exit codes mean)"
		}
		return "see the job's stderr ('palyra job logs " + id + "')"
	case runtime.ReasonTrap:
		return "the module crashed; see the message and the job's stderr ('palyra job logs " + id + "')"
	case runtime.ReasonInputInvalid:
		return "the hook's tool does not take this event's input; bind a tool made for it ('palyra hook list', 'palyra hook unbind ID')"
	}
	return ""
}

// Retryable says whether a failure may go differently on another attempt.
// Failures decided by the job's own limits or content (memory, output,
// fuel, a bad module, a blocked request) would fail the same way again.
func Retryable(r runtime.Reason) bool {
	switch r {
	case runtime.ReasonMemoryLimit, runtime.ReasonOutputLimit, runtime.ReasonOutOfFuel,
		runtime.ReasonInvalidModule, runtime.ReasonBlocked, runtime.ReasonCanceled, runtime.ReasonInputInvalid:
		return false
	}
	return true
}
