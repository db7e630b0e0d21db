package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity/policy"
	"github.com/palyra-mesh/palyra/node/blob"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/peerpb"
	"github.com/palyra-mesh/palyra/proto/raftpb"
	"github.com/palyra-mesh/palyra/runtime/wasm"
)

type jobService struct{ s *Server }

func invalid(msg, hint string) error {
	return apiError(connect.CodeInvalidArgument, "invalid_argument", msg, hint)
}

func (js jobService) SubmitJob(ctx context.Context, req *connect.Request[palyrav1.SubmitJobRequest]) (*connect.Response[palyrav1.SubmitJobResponse], error) {
	s, m := js.s, req.Msg
	kind := "wasm"
	if len(m.BrowserScript) > 0 {
		kind = "browser"
	}
	if err := s.authz.Check(ctx, policy.ActionJobSubmit, policy.ClusterResource(), map[string]any{"job_kind": kind}); err != nil {
		return nil, err
	}
	if err := s.validateSubmit(m); err != nil {
		return nil, err
	}
	if err := checkGrantValues(m); err != nil {
		return nil, err
	}
	if kind != "browser" {
		if err := s.checkGrants(ctx, m); err != nil {
			return nil, err
		}
		// After the grants, so only a caller granted a secret learns
		// whether it exists. One check covers an array's tasks. Skill
		// runs are not checked: a manifest's secrets are what the skill
		// may read, not what it must have.
		if err := s.checkSecretsExist(ctx, m.SecretNames); err != nil {
			return nil, err
		}
	}
	if job, ok := s.replay(ctx, m); ok {
		return connect.NewResponse(&palyrav1.SubmitJobResponse{Job: JobToPB(&job), Replayed: true}), nil
	}
	ctx, err := s.beforeRun(ctx, m, kind, "", "")
	if err != nil {
		return nil, err
	}
	if kind == "browser" {
		return js.submitBrowser(ctx, m)
	}
	if len(m.WasmModule) == 0 && m.ModuleSha256 != "" {
		return js.submitByHash(ctx, m)
	}
	if len(m.WasmModule) == 0 {
		return nil, invalid("no wasm module in the request", "pass a module with --wasm FILE")
	}
	if err := watModule(m.WasmModule); err != nil {
		return nil, err
	}
	if err := s.validator.Validate(ctx, m.WasmModule); err != nil {
		var me *wasm.ModuleError
		if errors.As(err, &me) {
			return nil, apiError(connect.CodeInvalidArgument, string(me.Reason), me.Message, me.Hint)
		}
		return nil, fromErr(err)
	}
	hash, err := s.blobs.Put(m.WasmModule)
	if err != nil {
		return nil, s.notStored(ctx, err)
	}
	s.validated.Add(hash, struct{}{})
	return js.commitSubmit(ctx, m, hash)
}

// replay answers a submission that repeats an accepted one (the same
// idempotency key and payload: a resend after a lost answer) with the
// job it made, before the before_run hooks: they ran for the first
// submission, and running them again would make their hook jobs again and
// could refuse a job that is accepted already. What this replica does not
// hold yet goes the usual way; the FSM replays it there.
func (s *Server) replay(ctx context.Context, m *palyrav1.SubmitJobRequest) (consensus.Job, bool) {
	if m.IdempotencyKey == "" || len(m.Inputs) > 0 {
		return consensus.Job{}, false
	}
	hash := m.ModuleSha256
	switch {
	case len(m.BrowserScript) > 0:
		hash = ""
	case len(m.WasmModule) > 0:
		sum := sha256.Sum256(m.WasmModule)
		hash = hex.EncodeToString(sum[:])
	}
	caller, _ := PrincipalFrom(ctx)
	return s.control.State().IdempotentJob(caller.String()+"/"+m.IdempotencyKey, payloadHash(hash, m))
}

// checkGrants checks each capability a wasm job asks for against the
// caller's policy, hosts in the form the runtime matches them in (a
// skill's manifest hosts come here without checkGrantValues); the job
// keeps that form.
func (s *Server) checkGrants(ctx context.Context, m *palyrav1.SubmitJobRequest) error {
	hosts, err := canonicalHosts(m.AllowHosts)
	if err != nil {
		return err
	}
	m.AllowHosts = hosts
	g := consensus.Grants{HTTPHosts: hosts, AllowPrivate: m.AllowPrivate, Secrets: m.SecretNames, KVPrefix: m.KvPrefix}
	for _, a := range grantAsks(g) {
		if err := s.authz.Check(ctx, a.action, a.res, a.ctx); err != nil {
			return err
		}
	}
	return nil
}

// notStored explains a module that could not be replicated.
func (s *Server) notStored(ctx context.Context, err error) error {
	// On a node cut off from its peers the real problem is quorum.
	if qerr := s.control.VerifyRead(ctx); qerr != nil {
		return fromErr(qerr)
	}
	return apiError(connect.CodeUnavailable, "unavailable", "could not store the module on another node: "+err.Error(),
		"check that the other nodes are up and reachable ('palyra nodes')")
}

// wasmPage is the unit of wasm linear memory: a memory limit is a whole
// number of them (rounded down).
const wasmPage = 64 << 10

// validateSubmit checks everything about a submission but the module
// itself, before any work is done: refused input stores nothing.
func (s *Server) validateSubmit(m *palyrav1.SubmitJobRequest) error {
	switch {
	case len(m.WasmModule) > MaxModuleBytes:
		return invalid(fmt.Sprintf("module is %s; the limit is %s", mib(len(m.WasmModule)), mib(MaxModuleBytes)),
			"build with -ldflags=-s -w, or strip the module (wasm-strip)")
	case len(m.Input) > MaxInputBytes:
		return invalid(fmt.Sprintf("input is %s; the limit is %s", mib(len(m.Input)), mib(MaxInputBytes)),
			"pass less input, or have the job fetch its data")
	case m.TimeoutMs < 0 || m.TimeoutMs > MaxTimeout.Milliseconds(): // in ms: a Duration would overflow and wrap
		what := fmt.Sprintf("%dms", m.TimeoutMs)
		if m.TimeoutMs >= 0 && m.TimeoutMs < math.MaxInt64/int64(time.Millisecond) {
			what = (time.Duration(m.TimeoutMs) * time.Millisecond).String()
		}
		return invalid(fmt.Sprintf("timeout %s is out of range", what), "use --timeout between 1ms and 24h")
	case m.MaxOutputBytes > MaxOutputLimit:
		return invalid(fmt.Sprintf("output bound %s is over the %s maximum", mib(int(m.MaxOutputBytes)), mib(MaxOutputLimit)),
			"use --max-output 16MiB or less; split the work into a job array (--inputs), or have the job send larger results over HTTP (--allow-host); a browser job returns files as artifacts")
	case m.Retries > MaxRetries:
		return invalid(fmt.Sprintf("--retries %d is over the limit of %d", m.Retries, MaxRetries), "use --retries 10 or less")
	case m.DeadlineMs < 0:
		return invalid("--deadline must be positive", "e.g. --deadline 10m")
	case len(m.IdempotencyKey) > 256:
		return invalid("idempotency key is over 256 bytes", "use a shorter key")
	case palyrav1.CheckText("idempotency key", m.IdempotencyKey) != nil:
		return invalid(palyrav1.CheckText("idempotency key", m.IdempotencyKey).Error(), "use a key of printable text, e.g. a UUID or order-1234")
	case len(m.Constraints) > 32:
		return invalid("too many constraints", "use at most 32 --constraint k=v")
	case m.MemoryBytes > MaxMemory:
		return invalid(fmt.Sprintf("memory limit %d bytes is over the 4 GiB wasm32 maximum", m.MemoryBytes), "use --memory 4GiB or less")
	case m.MemoryBytes > 0 && m.MemoryBytes < wasmPage:
		// Wasm memory comes in 64 KiB pages: such a limit could only fail
		// the job when it ran (a bare "5" meant 5 bytes).
		return invalid(fmt.Sprintf("memory limit %d bytes is under one 64 KiB wasm page", m.MemoryBytes),
			"give a size with its unit, e.g. --memory 16MiB (limits are rounded down to whole 64 KiB pages)")
	}
	if err := checkConstraints(m.Constraints); err != nil {
		return err
	}
	if len(m.Inputs) > 0 {
		if err := validateArray(m); err != nil {
			return err
		}
	}
	tasks := uint64(max(1, len(m.Inputs)))
	if q := s.control.State().Count(consensus.PhaseQueued); q+tasks > uint64(s.MaxQueued) {
		if tasks > 1 {
			return apiError(connect.CodeResourceExhausted, "queue_full",
				fmt.Sprintf("an array of %d tasks does not fit: the cluster has %d jobs queued and takes at most %d", tasks, q, s.MaxQueued),
				"retry when the queue has drained, or split the work into smaller arrays")
		}
		return apiError(connect.CodeResourceExhausted, "queue_full",
			fmt.Sprintf("the cluster has %d jobs queued, its limit", q),
			"retry later, or add workers to drain the queue; jobs no node can run wait until cancelled ('palyra job list --phase queued' and 'palyra job get ID' say why each waits)")
	}
	return nil
}

// submitByHash submits a job for a module the cluster already holds.
func (js jobService) submitByHash(ctx context.Context, m *palyrav1.SubmitJobRequest) (*connect.Response[palyrav1.SubmitJobResponse], error) {
	if !blob.ValidHash(m.ModuleSha256) {
		return nil, invalid("module_sha256 is not a lowercase hex sha256", "send the module bytes instead")
	}
	hash := m.ModuleSha256
	if _, ok := js.s.validated.Get(hash); ok {
		if err := js.s.blobs.Locate(hash); err != nil {
			return nil, moduleNotFound(hash)
		}
		return js.commitSubmit(ctx, m, hash)
	}
	// Not validated here yet: the blob may be anything the cluster holds
	// (an artifact, say). Check it as a bytes submission would, once.
	data, err := js.s.blobs.Get(hash)
	if err != nil {
		return nil, moduleNotFound(hash)
	}
	if err := js.s.validator.Validate(ctx, data); err != nil {
		var me *wasm.ModuleError
		if errors.As(err, &me) {
			return nil, apiError(connect.CodeInvalidArgument, string(me.Reason),
				fmt.Sprintf("blob sha256:%s is not a usable wasm module: %s", hash, me.Message),
				strings.TrimSuffix("module_sha256 must name a wasm module, not an artifact or other blob: submit the module itself with --wasm FILE; "+me.Hint, "; "))
		}
		return nil, fromErr(err)
	}
	if _, err := js.s.blobs.Put(data); err != nil {
		return nil, js.s.notStored(ctx, err)
	}
	js.s.validated.Add(hash, struct{}{})
	return js.commitSubmit(ctx, m, hash)
}

func moduleNotFound(hash string) error {
	return apiError(connect.CodeNotFound, "module_not_found", "the cluster does not hold module sha256:"+hash,
		"send the module bytes (the CLI does this by itself)")
}

// jobRecord builds the log record of a validated submission (for an
// array: the template its tasks share), input left out.
func (s *Server) jobRecord(ctx context.Context, m *palyrav1.SubmitJobRequest, hash string) *raftpb.JobRecord {
	timeout := time.Duration(m.TimeoutMs) * time.Millisecond
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	mem := m.MemoryBytes
	if mem == 0 {
		mem = DefaultMemory
	}
	caller, _ := PrincipalFrom(ctx)
	now := s.now().UnixMilli()
	kind := "wasm"
	if len(m.BrowserScript) > 0 {
		kind = "browser"
	}
	rec := &raftpb.JobRecord{
		Id: newJobID(), Kind: kind, ModuleSha256: hash, MemoryBytes: mem, Fuel: m.Fuel,
		Script: m.BrowserScript, AllowHosts: m.AllowHosts, AllowPrivate: m.AllowPrivate,
		SecretNames: m.SecretNames, KvPrefix: m.KvPrefix, Deterministic: m.Deterministic,
		TimeoutMs: timeout.Milliseconds(), Submitter: caller.String(), MaxOutputBytes: m.MaxOutputBytes,
		SubmittedAtMs: now, Priority: m.Priority, Constraints: m.Constraints, MaxRetries: m.Retries,
	}
	if m.DeadlineMs > 0 {
		rec.DeadlineAtMs = now + m.DeadlineMs
	}
	if ho, ok := ctx.Value(hookOutcomeKey{}).(hookOutcome); ok {
		rec.Annotations = ho.annotations
		if ho.approval {
			rec.RequiresApproval = true
			rec.RunDeadlineAtMs, rec.DeadlineAtMs = rec.DeadlineAtMs, now+DefaultApprovalTTL.Milliseconds()
		}
	}
	if sr, ok := ctx.Value(skillRunKey{}).(skillRun); ok {
		rec.SkillId, rec.SkillTool, rec.OutputSchema = sr.id, sr.tool, sr.outputSchema
		if sr.approvalTTL > 0 {
			// It waits for a person until the approval expires; its own
			// deadline applies once it is approved.
			if !rec.RequiresApproval {
				rec.RunDeadlineAtMs = rec.DeadlineAtMs
			}
			rec.RequiresApproval = true
			rec.DeadlineAtMs = now + sr.approvalTTL.Milliseconds()
		}
	}
	if m.IdempotencyKey != "" {
		// Scoped to the caller: two principals never share a key space.
		rec.IdempotencyKey = caller.String() + "/" + m.IdempotencyKey
		rec.PayloadHash = payloadHash(hash, m)
	}
	return rec
}

// commitSubmit commits a validated, stored submission.
func (js jobService) commitSubmit(ctx context.Context, m *palyrav1.SubmitJobRequest, hash string) (*connect.Response[palyrav1.SubmitJobResponse], error) {
	if len(m.Inputs) > 0 {
		return js.commitArray(ctx, m, hash)
	}
	s := js.s
	kind := "wasm"
	if len(m.BrowserScript) > 0 {
		kind = "browser"
	}
	rec := s.jobRecord(ctx, m, hash)
	in, err := s.storeInputs(ctx, [][]byte{m.Input})
	if err != nil {
		return nil, err
	}
	rec.Input, rec.InputSha256, rec.InputSize = in[0].Input, in[0].InputSha256, in[0].InputSize
	cmd := s.runHere(ctx, rec)
	if cmd == nil {
		cmd = &raftpb.Command{Cmd: &raftpb.Command_SubmitJob{SubmitJob: &raftpb.SubmitJob{Job: rec}}}
	}
	job, err := s.control.Apply(ctx, cmd)
	// A submission whose outcome is unknown (leader lost mid-commit, reply
	// lost) is safe to send again: the FSM answers a resubmitted id with
	// the job it already holds. The caller hears "accepted" only once it
	// is known to be committed.
	for retry := 0; retry < 3 && errors.Is(err, consensus.ErrUnknownOutcome); retry++ {
		job, err = s.control.Apply(ctx, cmd)
	}
	if err != nil {
		return nil, fromErr(err)
	}
	replayed := job.ID != rec.Id
	if cmd.GetRunHere() != nil {
		// Recorded: the job ended with the run, or (a failure worth a
		// retry) is queued again after it. A dropped run's job is queued,
		// or placed by the leader's round in the same entry.
		me := s.info.NodeID
		ran := !replayed && (job.Phase.Terminal() && job.Attempt == 1 && job.NodeID == me ||
			job.Phase == consensus.PhaseQueued && len(job.Earlier) == 1 && job.Earlier[0].NodeID == me)
		s.RunHere.Recorded(cmd.GetRunHere(), ran)
		if rh, ok := ctx.Value(runJobKey{}).(*ranHere); ok && ran {
			ended := job
			rh.job = &ended
		}
	}
	if s.log.Enabled(ctx, slog.LevelDebug) {
		s.log.Debug("job accepted", "job", job.ID, "kind", kind, "module", short(hash), "by", rec.Submitter, "index", job.CommitIndex, "replayed", replayed)
	}
	if rh, ok := ctx.Value(runJobKey{}).(*ranHere); ok && rh.job != nil && rh.job.Phase.Terminal() {
		// RunJob sends the ended job itself (and reads only these fields
		// of the submission's answer): no second conversion. A run here
		// that failed and is queued for a retry is answered whole.
		return connect.NewResponse(&palyrav1.SubmitJobResponse{Job: &palyrav1.Job{Id: job.ID, Submitter: job.Submitter, Kind: job.Kind,
			Phase: palyrav1.JobPhase(job.Phase)}}), nil
	}
	return connect.NewResponse(&palyrav1.SubmitJobResponse{Job: JobToPB(&job), Replayed: replayed}), nil
}

func jobResource(j *consensus.Job) policy.Resource {
	return policy.JobResource(j.ID, j.Submitter, j.Kind)
}

// authorizedJob looks a job up and authorises action on it.
func (js jobService) authorizedJob(ctx context.Context, action, id string) (consensus.Job, error) {
	j, err := js.lookup(ctx, id)
	if err != nil {
		return j, err
	}
	return j, js.s.authz.Check(ctx, action, jobResource(&j), nil)
}

func (js jobService) lookup(ctx context.Context, id string) (consensus.Job, error) {
	if id == "" {
		return consensus.Job{}, invalid("job id is empty", "pass the id printed by 'palyra job submit'")
	}
	j, ok := js.s.control.State().Job(id)
	if !ok {
		return j, js.s.notFound(ctx, id)
	}
	return j, nil
}

func (js jobService) GetJob(ctx context.Context, req *connect.Request[palyrav1.GetJobRequest]) (*connect.Response[palyrav1.GetJobResponse], error) {
	ri, err := js.s.staleableRead(ctx, req.Msg.Stale)
	if err != nil {
		return nil, err
	}
	if a, ok := js.s.control.State().Array(req.Msg.Id); ok {
		if err := js.s.authz.Check(ctx, policy.ActionJobRead, arrayResource(&a), nil); err != nil {
			return nil, err
		}
		pb := ArrayToPB(&a)
		if t, ok := js.s.control.State().FirstQueuedTask(a.Template.ID); ok {
			js.s.queuePlace(&t)
			pb.PendingReason = t.PendingReason
		}
		return connect.NewResponse(&palyrav1.GetJobResponse{Array: pb, Read: ri}), nil
	}
	j, err := js.authorizedJob(ctx, policy.ActionJobRead, req.Msg.Id)
	if err != nil {
		return nil, err
	}
	if err := js.s.fillPayloads(&j, true); err != nil {
		return nil, err
	}
	js.s.queuePlace(&j)
	pb := JobToPB(&j)
	js.runStatus(ctx, &j, pb)
	return connect.NewResponse(&palyrav1.GetJobResponse{Job: pb, Read: ri}), nil
}

// queueAheadLimit bounds the walk that counts the jobs queued before one
// (under the state's read lock: about 0.2 ms at most).
const queueAheadLimit = 10_000

// queuePlace says, for a queued job the scheduler has not looked at yet
// (no pending reason: it looks at the head of the queue only), how many
// jobs are placed before it. Shown, never stored; a watch recomputes it
// only when the job itself changes.
func (s *Server) queuePlace(j *consensus.Job) {
	if j.Phase != consensus.PhaseQueued || j.PendingReason != "" {
		return
	}
	n, ok := s.control.State().QueueAhead(j.ID, queueAheadLimit)
	switch {
	case !ok || n == 0:
	case n == 1:
		j.PendingReason = fmt.Sprintf("behind 1 queued %s job (placed by priority, then in submission order)", j.Kind)
	case n >= queueAheadLimit:
		j.PendingReason = fmt.Sprintf("behind more than %d queued %s jobs (placed by priority, then in submission order)", queueAheadLimit, j.Kind)
	default:
		j.PendingReason = fmt.Sprintf("behind %d queued %s jobs (placed by priority, then in submission order)", n, j.Kind)
	}
}

// runStatusWait bounds GetJob's question to a running job's worker.
const runStatusWait = 300 * time.Millisecond

// runStatus asks a running job's worker whether the run has its slot yet
// (a worker holds placements ahead of its slots, and the cluster records
// a run's start only with its result) and says so on pb. A worker that
// does not answer within runStatusWait, or an older one, leaves pb as
// is. It reports whether the worker said (false too for a job that is
// not running: nothing to ask).
func (js jobService) runStatus(ctx context.Context, j *consensus.Job, pb *palyrav1.Job) bool {
	if j.Phase != consensus.PhaseRunning || j.NodeID == "" || js.s.Live == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, runStatusWait)
	defer cancel()
	out, err := js.s.Live.JobOutput(ctx, j.NodeID, &peerpb.JobOutputRequest{JobId: j.ID, StatusOnly: true})
	if err != nil || !out.Found || !out.ReportsStart || out.Attempt != j.Attempt {
		return false
	}
	if out.StartedAtMs == 0 {
		pb.WaitingForSlot = !out.Done
		return true
	}
	pb.RunStartedAtMs = out.StartedAtMs
	return true
}

func (js jobService) CancelJob(ctx context.Context, req *connect.Request[palyrav1.CancelJobRequest]) (*connect.Response[palyrav1.CancelJobResponse], error) {
	s := js.s
	a, isArray := s.control.State().Array(req.Msg.Id)
	if isArray {
		if err := s.authz.Check(ctx, policy.ActionJobCancel, arrayResource(&a), nil); err != nil {
			return nil, err
		}
	} else if _, err := js.authorizedJob(ctx, policy.ActionJobCancel, req.Msg.Id); err != nil {
		return nil, err
	}
	caller, _ := PrincipalFrom(ctx)
	cmd := &raftpb.Command{Cmd: &raftpb.Command_CancelJob{CancelJob: &raftpb.CancelJob{
		Id: req.Msg.Id, AtMs: s.now().UnixMilli(), Reason: "cancelled by " + caller.String()}}}
	j, err := s.control.Apply(ctx, cmd)
	// A cancel is harmless twice: one whose outcome is unknown (the
	// leader died before answering) is sent again, and "already ended"
	// then means the first one took if the job (for an array, one of its
	// tasks) was aborted by this very cancel, its reason recorded, read
	// once this replica is current. A job that ended otherwise meanwhile
	// (completed, expired, denied, aborted by someone else) is answered as
	// the conflict it is. Before, the caller was told "may or may not have
	// committed" and had to run it again. (Apply itself goes round while
	// there is no leader or quorum.)
	reason := cmd.GetCancelJob().Reason
	byThis := func(j consensus.Job) bool {
		return j.Phase == consensus.PhaseAborted && j.Error != nil && j.Error.Code == "aborted" && j.Error.Message == reason
	}
	for retry := 0; retry < 3 && errors.Is(err, consensus.ErrUnknownOutcome) && ctx.Err() == nil; retry++ {
		j, err = s.control.Apply(ctx, cmd)
		if !errors.Is(err, consensus.ErrConflict) || s.control.VerifyRead(ctx) != nil {
			continue
		}
		st := s.control.State()
		if cur, ok := st.Job(req.Msg.Id); ok && byThis(cur) {
			j, err = cur, nil
		} else if cur, ok := st.Array(req.Msg.Id); ok && cur.Terminal() &&
			slices.ContainsFunc(st.Jobs(consensus.JobFilter{ArrayID: req.Msg.Id, Phase: consensus.PhaseAborted}), byThis) {
			j, err = cur.Template, nil
		}
	}
	if err != nil {
		return nil, fromErr(err)
	}
	resp := &palyrav1.CancelJobResponse{Job: JobToPB(&j)}
	if isArray {
		resp.Array = s.arrayAfterWrite(ctx, &a)
	}
	return connect.NewResponse(resp), nil
}

func (js jobService) WatchJob(ctx context.Context, req *connect.Request[palyrav1.WatchJobRequest], stream *connect.ServerStream[palyrav1.WatchJobResponse]) error {
	s := js.s
	st := s.control.State()
	// A job (or array) this replica does not hold yet may have been
	// accepted through another node a moment ago: only then is a
	// linearizable read needed before answering (a quorum round trip). One
	// held locally is followed as this replica applies its changes.
	_, isJob := st.Job(req.Msg.Id)
	_, isArray := st.Array(req.Msg.Id)
	if !isJob && !isArray {
		if _, err := s.readInfo(ctx, false); err != nil {
			return err
		}
	}
	if a, ok := st.Array(req.Msg.Id); ok {
		if err := s.authz.Check(ctx, policy.ActionJobWatch, arrayResource(&a), nil); err != nil {
			return err
		}
		return s.watchArray(ctx, a.Template.ID, stream)
	}
	if _, err := js.authorizedJob(ctx, policy.ActionJobWatch, req.Msg.Id); err != nil {
		return err
	}
	return js.follow(ctx, req.Msg.Id, nil, stream)
}

// RunJob submits one job, then follows it as WatchJob does: one round trip
// where a submit and a watch take two, and no quorum read to find the job
// (this node proposed it; its replica applies it in a moment).
func (js jobService) RunJob(ctx context.Context, req *connect.Request[palyrav1.SubmitJobRequest], stream *connect.ServerStream[palyrav1.WatchJobResponse]) error {
	if len(req.Msg.Inputs) > 0 {
		return invalid("RunJob runs one job; this request is a job array", "submit an array with SubmitJob and follow it with WatchJob ('palyra job submit --inputs … --wait' does)")
	}
	rh := &ranHere{}
	resp, err := js.SubmitJob(context.WithValue(ctx, runJobKey{}, rh), req)
	if err != nil {
		return err
	}
	id := resp.Msg.Job.Id
	if err := js.s.authz.Check(ctx, policy.ActionJobWatch, policy.JobResource(id, resp.Msg.Job.Submitter, resp.Msg.Job.Kind), nil); err != nil {
		return err
	}
	if j := rh.job; j != nil && j.Phase.Terminal() {
		// Run here: the committed entry's job is its end, sent with its
		// outputs at once, without waiting for this replica to apply it.
		if err := js.s.fillPayloads(j, true); err != nil {
			return err
		}
		return stream.Send(&palyrav1.WatchJobResponse{Job: JobToPB(j)})
	}
	if resp.Msg.Job.Phase.Terminal() {
		// A resend of a job that ended: its end, with its outputs.
		if err := js.s.waitApplied(ctx, id); err != nil {
			return err
		}
		return js.follow(ctx, id, nil, stream)
	}
	if err := stream.Send(&palyrav1.WatchJobResponse{Job: resp.Msg.Job}); err != nil {
		return err
	}
	if err := js.s.waitApplied(ctx, id); err != nil {
		return err
	}
	st := js.s.control.State()
	a := resp.Msg.Job
	sent := consensus.Job{Phase: consensus.Phase(a.Phase), Attempt: a.Attempt, NodeID: a.NodeId, PendingReason: a.PendingReason}
	// Still queued with no reason (deep in the queue): say what is ahead
	// of it once; the acceptance could not (this replica had not applied it).
	if j, ok := st.Job(id); ok && j.Phase == consensus.PhaseQueued && j.PendingReason == "" && sent.Phase == consensus.PhaseQueued {
		if js.s.queuePlace(&j); j.PendingReason != "" {
			if err := stream.Send(&palyrav1.WatchJobResponse{Job: JobToPB(&j)}); err != nil {
				return err
			}
		}
	}
	return js.follow(ctx, id, &sent, stream)
}

// waitApplied waits for this replica to apply job id, committed through
// this node a moment ago.
func (s *Server) waitApplied(ctx context.Context, id string) error {
	st := s.control.State()
	for {
		changed := st.Watch(consensus.TopicJob(id))
		if _, ok := st.Job(id); ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fromErr(errCanceled)
		}
	}
}

// updateHoldoff is how long a watcher's update that is not the job's end
// waits for a newer one. A job that ends within it is sent once, ended,
// instead of as "running" and then as ended: one stream message fewer per
// short job, which was a tenth of the cluster's CPU per job at 64
// submitters (node/api/DESIGN.md). The first message of a watch and a
// job's end go at once.
const updateHoldoff = 50 * time.Millisecond

// follow streams job id's changes until it ends (the last message carries
// the whole result). last is what the caller has already been sent.
func (js jobService) follow(ctx context.Context, id string, last *consensus.Job, stream *connect.ServerStream[palyrav1.WatchJobResponse]) error {
	return js.followWith(ctx, id, last, stream.Send)
}

// followWith is follow, sending through send.
func (js jobService) followWith(ctx context.Context, id string, last *consensus.Job, send func(*palyrav1.WatchJobResponse) error) error {
	s := js.s
	st := s.control.State()
	var hold *time.Timer // running while an update waits for a newer one
	defer func() {
		if hold != nil {
			hold.Stop()
		}
	}()
	due := false // the held update's time is up
	// slotWait: the last message said the run waits on its worker for a
	// slot, or its worker had not said yet (it takes a placement a moment
	// after the commit; unsure counts such asks, at most slotPollUnsure);
	// the worker is asked again every slotPoll, and a wait or start it
	// then reports is sent (the cluster records a start only with the
	// result).
	slotWait, askAgain, waiting, unsure := false, false, false, 0
	var poll *time.Timer
	defer func() {
		if poll != nil {
			poll.Stop()
		}
	}()
	for {
		changed := st.Watch(consensus.TopicJob(id))
		j, ok := st.Job(id)
		if !ok { // pruned while watched
			return s.notFound(ctx, id)
		}
		differs := last == nil || j.Phase != last.Phase || j.Attempt != last.Attempt || j.NodeID != last.NodeID || j.PendingReason != last.PendingReason
		switch {
		case differs && (last == nil || due || j.Phase.Terminal()):
			last = &j
			shown := j // what is sent; last stays what the state says
			if j.Phase.Terminal() {
				// The last message carries the whole result.
				if err := s.fillPayloads(&shown, true); err != nil {
					return err
				}
			}
			s.queuePlace(&shown) // counted only for a message that goes out
			pb := JobToPB(&shown)
			// A running job: waiting for a slot, or since when it runs.
			said := js.runStatus(ctx, &j, pb)
			waiting, unsure = pb.WaitingForSlot, 0
			slotWait = waiting || j.Phase == consensus.PhaseRunning && !said && js.s.Live != nil
			if err := send(&palyrav1.WatchJobResponse{Job: pb}); err != nil {
				return err
			}
			if hold != nil {
				hold.Stop()
				hold = nil
			}
			due = false
		case differs && hold == nil:
			hold = time.NewTimer(s.holdoff())
		case !differs:
			due = false
			if askAgain && slotWait {
				shown := j
				s.queuePlace(&shown)
				pb := JobToPB(&shown)
				said := js.runStatus(ctx, &j, pb)
				news := pb.RunStartedAtMs > 0 || pb.WaitingForSlot && !waiting
				if !said {
					unsure++
				}
				waiting = waiting || pb.WaitingForSlot
				slotWait = pb.WaitingForSlot || !said && unsure < slotPollUnsure
				if news {
					if err := send(&palyrav1.WatchJobResponse{Job: pb}); err != nil {
						return err
					}
				}
			}
		}
		askAgain = false
		if j.Phase.Terminal() {
			return nil
		}
		var holdC, pollC <-chan time.Time
		if hold != nil {
			holdC = hold.C
		}
		if slotWait {
			if poll == nil {
				poll = time.NewTimer(slotPoll)
			}
			pollC = poll.C
		}
		select {
		case <-changed:
		case <-holdC:
			hold, due = nil, true
		case <-pollC:
			poll, askAgain = nil, true
		case <-ctx.Done():
			return fromErr(errCanceled)
		}
	}
}

// slotPoll is how often a watch of a run waiting on its worker for a slot
// asks the worker again whether it has started; slotPollUnsure bounds
// the asks of a worker that does not say (an older one, or one gone).
const (
	slotPoll       = time.Second
	slotPollUnsure = 5
)

// payloadHash identifies a submission's content for idempotency: the same
// key with the same payload replays the job, a different payload conflicts.
func payloadHash(moduleHash string, m *palyrav1.SubmitJobRequest) []byte {
	h := sha256.New()
	fmt.Fprintf(h, "v1\x00%s\x00%d\x00%d\x00%d\x00%d\x00%d\x00%d\x00%d\x00", moduleHash, m.TimeoutMs, m.MemoryBytes,
		m.Fuel, m.MaxOutputBytes, m.Priority, m.Retries, m.DeadlineMs)
	keys := make([]string, 0, len(m.Constraints))
	for k := range m.Constraints {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(h, "%q=%q\x00", k, m.Constraints[k])
	}
	fmt.Fprintf(h, "%q\x00%v\x00%q\x00%q\x00", m.AllowHosts, m.AllowPrivate, m.SecretNames, m.KvPrefix)
	if m.Deterministic {
		h.Write([]byte("deterministic\x00"))
	}
	h.Write(m.BrowserScript)
	h.Write([]byte{0})
	h.Write(m.Input)
	if len(m.Inputs) > 0 {
		// An array: every input, each prefixed by its length, so inputs
		// cannot run into one another.
		fmt.Fprintf(h, "\x00array\x00%d\x00", len(m.Inputs))
		for _, in := range m.Inputs {
			fmt.Fprintf(h, "%d\x00", len(in))
			h.Write(in)
		}
	}
	return h.Sum(nil)
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
