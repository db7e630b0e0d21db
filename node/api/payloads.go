package api

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity/policy"
	"github.com/palyra-mesh/palyra/node/blob"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// putParallel bounds the blob stores one submission runs at once.
const putParallel = 8

// storeInputs turns inputs into the form Raft carries: up to
// consensus.InlineLimit inline, anything larger as a blob stored (and
// replicated to another node) before the job is committed, named by hash.
// Identical large inputs are stored once.
func (s *Server) storeInputs(ctx context.Context, inputs [][]byte) ([]*raftpb.ArrayTask, error) {
	out := make([]*raftpb.ArrayTask, len(inputs))
	big := map[string][]byte{} // hash → bytes, to store
	for i, in := range inputs {
		if len(in) <= consensus.InlineLimit {
			out[i] = &raftpb.ArrayTask{Input: in, InputSize: uint64(len(in))}
			continue
		}
		h := blob.Hash(in)
		big[h] = in
		out[i] = &raftpb.ArrayTask{InputSha256: h, InputSize: uint64(len(in))}
	}
	if len(big) == 0 {
		return out, nil
	}
	work := make(chan []byte)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range min(putParallel, len(big)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for data := range work {
				if _, err := s.blobs.Put(data); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, data := range big {
		work <- data
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		// On a node cut off from its peers the real problem is quorum.
		if qerr := s.control.VerifyRead(ctx); qerr != nil {
			return nil, fromErr(qerr)
		}
		return nil, apiError(connect.CodeUnavailable, "unavailable", "could not store an input on another node: "+firstErr.Error(),
			"check that the other nodes are up and reachable ('palyra nodes')")
	}
	return out, nil
}

// fillPayloads puts the bytes of j's outputs (and input, if asked) that
// live in blobs back into j, fetching them from this node or its peers.
func (s *Server) fillPayloads(j *consensus.Job, input bool) error {
	for _, p := range []struct {
		what string
		hash string
		size uint64
		dst  *[]byte
	}{
		{"input", j.InputHash, j.InputSize, &j.Input},
		{"stdout", j.StdoutHash, j.StdoutSize, &j.Stdout},
		{"stderr", j.StderrHash, j.StderrSize, &j.Stderr},
	} {
		if p.hash == "" || len(*p.dst) > 0 || (p.dst == &j.Input && !input) {
			continue
		}
		if s.Artifacts == nil {
			return apiError(connect.CodeUnavailable, "unavailable", "this node cannot fetch blobs", "ask another node")
		}
		data, err := s.Artifacts.Get(p.hash)
		if err != nil {
			return apiError(connect.CodeUnavailable, "unavailable",
				fmt.Sprintf("the %s of job %s (%d bytes, sha256:%s) is on no reachable node: %v", p.what, j.ID, p.size, short(p.hash), err),
				"retry when the nodes that ran or accepted the job are up ('palyra nodes')")
		}
		*p.dst = data
	}
	return nil
}

// stripPayloads drops j's input and outputs (their sizes and hashes stay):
// what a list ships.
func stripPayloads(j *consensus.Job) {
	j.InputSize = payloadSize(j.InputSize, j.InputHash, j.Input)
	j.StdoutSize = payloadSize(j.StdoutSize, j.StdoutHash, j.Stdout)
	j.StderrSize = payloadSize(j.StderrSize, j.StderrHash, j.Stderr)
	j.Input, j.Stdout, j.Stderr = nil, nil, nil
}

// notFound is the answer for an id the cluster does not hold. An id that
// cannot be a job's says what job ids look like. Once jobs have been
// pruned, a well-formed id may have named one of them: then it says so,
// with the horizon, what prunes (the retention, or an operator's 'job
// prune'), and how to keep jobs longer.
//
// What it says of an array (its size) is said only to a caller who may
// read the array; others get the refusal reading it would give them.
func (s *Server) notFound(ctx context.Context, id string) error {
	if !plausibleJobID(id) {
		return apiError(connect.CodeNotFound, "not_found",
			fmt.Sprintf("no job with id %q: job ids are j- and 16 hex digits (an array's task adds .N, e.g. j-0123456789abcdef.7)", id),
			"copy the id from 'palyra job list'")
	}
	st := s.control.State()
	if a, ok := st.Array(id); ok {
		if err := s.authz.Check(ctx, policy.ActionJobRead, arrayResource(&a), nil); err != nil {
			return err
		}
		// An array is not a job: commands on one job take one of its tasks.
		return apiError(connect.CodeInvalidArgument, "is_array",
			fmt.Sprintf("%s is a job array of %d tasks, not a job: this command takes one task, %s.N (N from 0 to %d)", id, a.Size, id, max(a.Size, 1)-1),
			fmt.Sprintf("'palyra job get %s' shows the array's counts; 'palyra job watch %s' its progress and outputs", id, id))
	}
	if arrayID, idx, ok := strings.Cut(id, "."); ok {
		// A task index past the array's end was never a task: say how
		// many the array has rather than suggest it was pruned.
		if a, ok := st.Array(arrayID); ok {
			n, err := strconv.ParseUint(idx, 10, 64)
			if err == nil && n < uint64(a.Size) && strconv.FormatUint(n, 10) != idx {
				// "j-….007": the task exists as j-….7; the pruned
				// message said it may have been pruned.
				if err := s.authz.Check(ctx, policy.ActionJobRead, arrayResource(&a), nil); err != nil {
					return err
				}
				return apiError(connect.CodeNotFound, "not_found",
					fmt.Sprintf("no task %s: a task's index has no leading zeros", id),
					fmt.Sprintf("use %s.%d", arrayID, n))
			}
			if err == nil && n >= uint64(a.Size) {
				if err := s.authz.Check(ctx, policy.ActionJobRead, arrayResource(&a), nil); err != nil {
					return err
				}
				return apiError(connect.CodeNotFound, "not_found",
					fmt.Sprintf("no task %s: job array %s has %s", id, arrayID, taskRange(a.Size)),
					fmt.Sprintf("'palyra job list --array %s' lists its tasks; 'palyra job get %s' shows its counts", arrayID, arrayID))
			}
		}
	}
	pb := st.PrunedBefore()
	if pb <= 0 {
		return apiError(connect.CodeNotFound, "not_found", fmt.Sprintf("no job with id %q", id), "list jobs with 'palyra job list'")
	}
	return apiError(connect.CodeNotFound, "not_found",
		fmt.Sprintf("no job with id %q; jobs that ended before %s have been pruned (by the retention, now %s, by the cap on ended jobs held, or by 'palyra job prune'), so it may have been one of them",
			id, rfc3339(pb), palyrav1.FormatRetention(st.Retention())),
		"list current jobs with 'palyra job list'; keep ended jobs longer with 'palyra job retention DURATION'")
}

// taskRange is "48 tasks (indexes 0 to 47)", or "1 task (index 0)".
func taskRange(size uint32) string {
	if size == 1 {
		return "1 task (index 0)"
	}
	return fmt.Sprintf("%d tasks (indexes 0 to %d)", size, max(size, 1)-1)
}

// plausibleJobID reports whether id has the form of a job or task id:
// "j-", 16 lowercase hex digits, and for a task "." and its index.
func plausibleJobID(id string) bool {
	rest, ok := strings.CutPrefix(id, "j-")
	if !ok || len(rest) < 16 {
		return false
	}
	for _, r := range rest[:16] {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	rest = rest[16:]
	if rest == "" {
		return true
	}
	idx, ok := strings.CutPrefix(rest, ".")
	if !ok || idx == "" || len(idx) > 10 {
		return false
	}
	for _, r := range idx {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
