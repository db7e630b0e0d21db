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
// then acceptance order; each job goes to an eligible matching node with
// the most free slots of its kind (spreading load). Among those equally
// free, the job's own hash picks one: deterministic, yet jobs arriving one
// at a time on an idle cluster still spread over every node.
//
// Cost is amortised O(1) per placement after O(nodes) set-up per distinct
// (kind, constraints) group: nodes sit in buckets by free slots, and a
// node whose free count fell through another group's placement is moved
// down lazily when met.
func Plan(nodes []Node, jobs []Job) ([]Placement, []Unplaced) {
	ns := append([]Node(nil), nodes...)
	sort.Slice(ns, func(a, b int) bool { return ns[a].ID < ns[b].ID })
	p := &planner{nodes: ns, free: map[string][]int{}, groups: map[string]*group{}}
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
		g := p.group(j.Kind, j.Constraints)
		n := g.pick(p.freeOf(j.Kind), affinity(j.ID, ""))
		if n < 0 {
			reason := "all matching nodes are busy; it runs when a slot frees"
			if g.matching == 0 {
				reason = "no eligible node offers " + j.Kind + " capacity" + constraintText(j.Constraints)
			}
			unplaced = append(unplaced, Unplaced{JobID: j.ID, Reason: reason})
			continue
		}
		plan = append(plan, Placement{JobID: j.ID, NodeID: ns[n].ID, Attempt: j.Attempt + 1})
	}
	return plan, unplaced
}

// planner holds one Plan call's working state.
type planner struct {
	nodes  []Node
	free   map[string][]int  // kind → free slots per node index
	groups map[string]*group // (kind, constraints) → candidate buckets
}

func (p *planner) freeOf(kind string) []int {
	f, ok := p.free[kind]
	if !ok {
		f = make([]int, len(p.nodes))
		for i := range p.nodes {
			f[i] = max(p.nodes[i].free(kind), 0)
		}
		p.free[kind] = f
	}
	return f
}

// group returns the candidate buckets for jobs of kind with constraints.
func (p *planner) group(kind string, constraints map[string]string) *group {
	key := kind + "\x00" + constraintText(constraints)
	if g, ok := p.groups[key]; ok {
		return g
	}
	free := p.freeOf(kind)
	g := &group{buckets: map[int][]int{}}
	for i := range p.nodes {
		n := &p.nodes[i]
		if !n.Eligible || n.Slots[kind] == 0 || !Matches(n.Labels, constraints) {
			continue
		}
		g.matching++
		if f := free[i]; f > 0 {
			g.buckets[f] = append(g.buckets[f], i)
			g.top = max(g.top, f)
		}
	}
	p.groups[key] = g
	return g
}

// group buckets candidate node indices by their free slots.
type group struct {
	matching int           // eligible nodes matching, busy or not
	buckets  map[int][]int // free slots → node indices (may hold stale entries)
	top      int           // highest possibly non-empty bucket
}

// pick takes a slot on a node with the most free slots (choosing among
// them by h) and returns its index, or -1 when no candidate has a slot.
func (g *group) pick(free []int, h uint64) int {
	for g.top > 0 {
		b := g.buckets[g.top]
		if len(b) == 0 {
			g.top--
			continue
		}
		i := int(h % uint64(len(b)))
		n := b[i]
		b[i] = b[len(b)-1]
		g.buckets[g.top] = b[:len(b)-1]
		if actual := free[n]; actual != g.top {
			// Another group took slots here: file it where it now is.
			if actual > 0 {
				g.buckets[actual] = append(g.buckets[actual], n)
			}
			continue
		}
		free[n]--
		if free[n] > 0 {
			g.buckets[free[n]] = append(g.buckets[free[n]], n)
		}
		return n
	}
	return -1
}

// affinity hashes (job, node) to a well-mixed 64-bit value: FNV-1a, then
// a 64-bit finaliser so that its low bits (used modulo a bucket size) do
// not follow the input's similar prefixes.
func affinity(job, node string) uint64 {
	h := uint64(14695981039346656037)
	for _, s := range [...]string{job, "\x00", node} {
		for i := 0; i < len(s); i++ {
			h ^= uint64(s[i])
			h *= 1099511628211
		}
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// Matches reports whether node labels satisfy every constraint.
func Matches(labels, constraints map[string]string) bool {
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
