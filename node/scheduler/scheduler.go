// Package scheduler places queued jobs on worker nodes. It is pure: Plan is
// a function of its inputs with no I/O, clock or randomness, so it is tested
// without Raft and the leader can commit its output as-is.
package scheduler

import (
	"sort"
)

// Node is what placement knows of one worker.
type Node struct {
	ID       string
	Eligible bool           // accepts new work (not draining, not ineligible, alive)
	Slots    map[string]int // executor kind → total slots
	Running  map[string]int // executor kind → jobs running there now
	Labels   map[string]string
}

func (n *Node) free(kind string) int { return n.Slots[kind] - n.Running[kind] }

// Job is what placement knows of one queued job.
type Job struct {
	ID          string
	Kind        string
	Attempt     uint32 // last attempt; the placement is Attempt+1
	Priority    int
	Constraints map[string]string // label k=v all required
	Order       uint64            // acceptance order (raft index), FIFO within a priority
}

// Placement puts job JobID on NodeID as attempt Attempt.
type Placement struct {
	JobID   string
	NodeID  string
	Attempt uint32
}

// Unplaced says why a job could not be placed now.
type Unplaced struct {
	JobID  string
	Reason string
}

// Plan places as many jobs as free capacity allows: higher priority first,
// then acceptance order; each job goes to the eligible matching node with
// the most free slots of its kind (spreading load). Ties are broken by
// rendezvous hashing of (job, node): deterministic, yet jobs arriving one at
// a time on an idle cluster still spread over every node.
func Plan(nodes []Node, jobs []Job) ([]Placement, []Unplaced) {
	ns := make([]Node, len(nodes))
	for i, n := range nodes {
		ns[i] = n
		ns[i].Running = make(map[string]int, len(n.Running))
		for k, v := range n.Running {
			ns[i].Running[k] = v
		}
	}
	sort.Slice(ns, func(a, b int) bool { return ns[a].ID < ns[b].ID })
	js := append([]Job(nil), jobs...)
	sort.SliceStable(js, func(a, b int) bool {
		if js[a].Priority != js[b].Priority {
			return js[a].Priority > js[b].Priority
		}
		return js[a].Order < js[b].Order
	})
	var plan []Placement
	var unplaced []Unplaced
	for _, j := range js {
		best, matching := -1, 0
		for i := range ns {
			n := &ns[i]
			if !n.Eligible || n.Slots[j.Kind] == 0 || !matches(n.Labels, j.Constraints) {
				continue
			}
			matching++
			if n.free(j.Kind) <= 0 {
				continue
			}
			if best < 0 || n.free(j.Kind) > ns[best].free(j.Kind) ||
				(n.free(j.Kind) == ns[best].free(j.Kind) && affinity(j.ID, n.ID) > affinity(j.ID, ns[best].ID)) {
				best = i
			}
		}
		if best < 0 {
			reason := "all matching nodes are busy; it runs when a slot frees"
			if matching == 0 {
				reason = "no eligible node offers " + j.Kind + " capacity" + constraintText(j.Constraints)
			}
			unplaced = append(unplaced, Unplaced{JobID: j.ID, Reason: reason})
			continue
		}
		ns[best].Running[j.Kind]++
		plan = append(plan, Placement{JobID: j.ID, NodeID: ns[best].ID, Attempt: j.Attempt + 1})
	}
	return plan, unplaced
}

// affinity is the rendezvous-hash weight of job on node (FNV-1a 64).
func affinity(job, node string) uint64 {
	h := uint64(14695981039346656037)
	for _, s := range [...]string{job, "\x00", node} {
		for i := 0; i < len(s); i++ {
			h ^= uint64(s[i])
			h *= 1099511628211
		}
	}
	return h
}

func matches(labels, constraints map[string]string) bool {
	for k, v := range constraints {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func constraintText(c map[string]string) string {
	if len(c) == 0 {
		return ""
	}
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s := " matching"
	for _, k := range keys {
		s += " " + k + "=" + c[k]
	}
	return s
}
