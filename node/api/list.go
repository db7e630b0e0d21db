package api

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity/policy"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

const (
	// maxListScan bounds the jobs one ListJobs call examines when the
	// caller may read only some of them (a device sees its own): a page
	// that found too few ends early with a cursor, instead of walking the
	// whole history for a sparse caller.
	maxListScan = 10_000
	// maxListOutputBytes bounds the outputs one with_outputs page carries
	// (a page always holds at least one task, however large).
	maxListOutputBytes = 4 << 20
)

// ListJobs pages through jobs, newest first unless oldest_first, or
// through one array's tasks in task order. Each page is read from the
// state's indexes in chunks, so its cost follows the page (plus, for a
// caller who may read only some jobs, at most maxListScan skipped ones),
// never the jobs ever submitted. Inputs and outputs are never shipped,
// except the outputs of an array's tasks when with_outputs asks for them.
func (js jobService) ListJobs(ctx context.Context, req *connect.Request[palyrav1.ListJobsRequest]) (*connect.Response[palyrav1.ListJobsResponse], error) {
	s, m := js.s, req.Msg
	if m.WithOutputs && m.ArrayId == "" {
		return nil, invalid("with_outputs lists the outputs of one array's tasks: it needs array_id",
			"add --array ID, or read one job's output with 'palyra job get ID'")
	}
	ri, st, limit, err := s.listStart(ctx, m.Stale, m.Limit)
	if err != nil {
		return nil, err
	}
	f := consensus.JobFilter{Phase: consensus.Phase(m.Phase), NodeID: m.NodeId, ArrayID: m.ArrayId, Newest: !m.OldestFirst}
	// allowed decides per job; for an array one decision covers its tasks.
	allowed := func(j *consensus.Job) bool { return s.authz.Allowed(ctx, policy.ActionJobRead, jobResource(j)) }
	if m.ArrayId != "" {
		a, ok := st.Array(m.ArrayId)
		if !ok {
			return nil, s.notAnArray(ctx, st, m.ArrayId)
		}
		if err := s.authz.Check(ctx, policy.ActionJobRead, arrayResource(&a), nil); err != nil {
			return nil, err
		}
		allowed = func(*consensus.Job) bool { return true }
		f.Newest = false // task order
	}
	if m.NodeId != "" {
		if err := s.checkListedNode(ctx, st, m.NodeId); err != nil {
			return nil, err
		}
	}
	afterID, afterCommit := splitCursor(m.AfterId)
	if afterID != "" {
		// A cursor whose job no longer exists (pruned) would silently
		// restart the walk from the beginning: one that carries its place
		// (next_cursor) goes on from there; a bare id is refused.
		j, ok := st.Job(afterID)
		if (ok && m.ArrayId != "" && j.ArrayID != m.ArrayId) || (!ok && (afterCommit == 0 || m.ArrayId != "")) {
			return nil, prunedCursor(m.AfterId, "job"+inArray(m.ArrayId))
		}
	}
	var page []consensus.Job
	var outBytes uint64
	var next *consensus.Job
	cursor, scanned := afterID, 0
	f.AfterCommit = afterCommit
	chunk := limit + 1
scan:
	for {
		f.AfterID, f.Limit = cursor, chunk
		batch := st.Jobs(f)
		for i := range batch {
			j := &batch[i]
			scanned++
			cursor, f.AfterCommit = j.ID, j.CommitIndex
			if !allowed(j) {
				continue
			}
			size := j.StdoutSize + j.StderrSize
			if len(page) == limit || (m.WithOutputs && len(page) > 0 && outBytes+size > maxListOutputBytes) {
				next = &page[len(page)-1]
				break scan
			}
			outBytes += size
			page = append(page, *j)
		}
		if len(batch) < chunk {
			break // the index has no more
		}
		if scanned >= maxListScan {
			// Too few readable jobs among many: end the page here; the
			// cursor resumes after the last job examined.
			next = &batch[len(batch)-1]
			break
		}
	}
	resp := &palyrav1.ListJobsResponse{Read: ri, Jobs: make([]*palyrav1.Job, 0, len(page))}
	if next != nil {
		resp.NextAfterId, resp.NextCursor = next.ID, fmt.Sprintf("%s@%d", next.ID, next.CommitIndex)
	}
	for i := range page {
		j := &page[i]
		if !m.WithOutputs {
			stripPayloads(j)
		} else {
			j.Input = nil
			if err := s.fillPayloads(j, false); err != nil {
				return nil, err
			}
		}
		resp.Jobs = append(resp.Jobs, JobToPB(j))
	}
	return connect.NewResponse(resp), nil
}

// ListArrays lists job arrays, newest first, with their counts per phase:
// those the caller may read (job.read on each array), a page at a time.
func (js jobService) ListArrays(ctx context.Context, req *connect.Request[palyrav1.ListArraysRequest]) (*connect.Response[palyrav1.ListArraysResponse], error) {
	s, m := js.s, req.Msg
	ri, st, limit, err := s.listStart(ctx, m.Stale, m.Limit)
	if err != nil {
		return nil, err
	}
	if m.AfterId != "" {
		if _, ok := st.Array(m.AfterId); !ok {
			return nil, prunedCursor(m.AfterId, "array")
		}
	}
	resp := &palyrav1.ListArraysResponse{Read: ri}
	cursor, scanned := m.AfterId, 0
	for {
		batch := st.Arrays(cursor, limit+1, !m.OldestFirst)
		for i := range batch {
			a := &batch[i]
			scanned++
			cursor = a.Template.ID
			if !s.authz.Allowed(ctx, policy.ActionJobRead, arrayResource(a)) {
				continue
			}
			if len(resp.Arrays) == limit { // one more readable: there is a next page
				resp.NextAfterId = resp.Arrays[limit-1].Id
				return connect.NewResponse(resp), nil
			}
			resp.Arrays = append(resp.Arrays, ArrayToPB(a))
		}
		if len(batch) < limit+1 {
			return connect.NewResponse(resp), nil // the index has no more
		}
		if scanned >= maxListScan {
			// Too few readable among many: end the page here; the cursor
			// resumes after the last array examined.
			resp.NextAfterId = cursor
			return connect.NewResponse(resp), nil
		}
	}
}

// listStart is what every list call does first: checks job.list, reads
// (linearizable unless stale), and clamps the page size.
func (s *Server) listStart(ctx context.Context, stale bool, asked uint32) (*palyrav1.ReadInfo, State, int, error) {
	if err := s.authz.Check(ctx, policy.ActionJobList, policy.ClusterResource(), nil); err != nil {
		return nil, nil, 0, err
	}
	ri, err := s.staleableRead(ctx, stale)
	if err != nil {
		return nil, nil, 0, err
	}
	limit := int(asked)
	if limit <= 0 {
		limit = defaultListLimit
	}
	return ri, s.control.State(), min(limit, maxListLimit), nil
}

// splitCursor splits a page cursor, "ID" or "ID@INDEX" (next_cursor: the
// job's commit index too), into its parts (index 0 for a bare id).
func splitCursor(c string) (id string, commit uint64) {
	i := strings.LastIndexByte(c, '@')
	if i < 0 {
		return c, 0
	}
	n, err := strconv.ParseUint(c[i+1:], 10, 64)
	if err != nil {
		return c, 0
	}
	return c[:i], n
}

// prunedCursor answers a page cursor that names nothing (what: "job",
// "array"): resuming from it would silently restart the walk.
func prunedCursor(id, what string) error {
	return apiError(connect.CodeNotFound, "not_found",
		fmt.Sprintf("the page cursor %q names no %s (it may have been pruned)", id, what),
		"list again from the start, without --after (the cursor a page prints, ID@INDEX, goes on past a pruned job)")
}

func inArray(id string) string {
	if id == "" {
		return ""
	}
	return " in array " + id
}

// notAnArray answers a list of array id's tasks where id names no array:
// a task's id (the array's id and .N) or a single job's say what they
// are and what to run instead; anything else is not_found.
func (s *Server) notAnArray(ctx context.Context, st State, id string) error {
	j, ok := st.Job(id)
	if !ok {
		return s.notFound(ctx, id)
	}
	if err := s.authz.Check(ctx, policy.ActionJobRead, jobResource(&j), nil); err != nil {
		return err
	}
	if j.ArrayID != "" {
		return invalid(fmt.Sprintf("%s is task %d of job array %s, not an array", id, j.ArrayIndex, j.ArrayID),
			fmt.Sprintf("list the array's tasks with 'palyra job list --array %s', or show this task with 'palyra job get %s'", j.ArrayID, id))
	}
	return invalid(fmt.Sprintf("%s is a job, not a job array: --array takes an array's id", id),
		fmt.Sprintf("show the job with 'palyra job get %s', or list jobs without --array", id))
}

// maxNamedNodes bounds the node ids an unknown-node error lists.
const maxNamedNodes = 10

// checkListedNode refuses a node filter that names no node the cluster
// has known: a mistyped id would otherwise list nothing, as if the node
// had run no jobs. A node is known if it is in the registry (nodes are
// never deleted from it, so one that left or was removed still counts)
// or if a job was last placed on it.
func (s *Server) checkListedNode(ctx context.Context, st State, id string) error {
	if _, ok := st.Member("node", id); ok {
		return nil
	}
	if len(st.Jobs(consensus.JobFilter{NodeID: id, Limit: 1})) > 0 {
		return nil
	}
	msg := fmt.Sprintf("no node with id %q", id)
	// Name the nodes to a caller who may list them anyway.
	if s.authz.Allowed(ctx, policy.ActionNodeList, policy.ClusterResource()) {
		var ids []string
		for _, m := range st.Members("node") {
			ids = append(ids, m.ID)
		}
		if len(ids) > maxNamedNodes {
			ids = append(ids[:maxNamedNodes], fmt.Sprintf("and %d more", len(ids)-maxNamedNodes))
		}
		if len(ids) > 0 {
			msg += "; the cluster's nodes are " + strings.Join(ids, ", ")
		}
	}
	return apiError(connect.CodeNotFound, "not_found", msg, "list the nodes and their ids with 'palyra nodes'")
}
