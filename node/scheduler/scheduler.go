// Package scheduler places queued jobs on worker nodes. It is pure: Plan is
// a function of its inputs with no I/O, clock or randomness, so it is tested
// without Raft and the leader can commit its output as-is.
package scheduler

import (
	"sort"
	"strconv"
)

// Node is what placement knows of one worker.
type Node struct {
	ID       string
	Eligible bool           // accepts new work (not draining, not ineligible, alive)
	Slots    map[string]int // executor kind → slots (runs at once)
	Running  map[string]int // executor kind → placements held there now (running or waiting for a slot)
	Labels   map[string]string
}

// Capacity is the placements of kind a node may hold for a job of the
// given depth: each slot runs one and holds depth more waiting for it.
func (n *Node) Capacity(kind string, depth int) int { return n.Slots[kind] * (1 + max(depth, 0)) }

func (n *Node) free(kind string, depth int) int { return n.Capacity(kind, depth) - n.Running[kind] }

// Job is what placement knows of one queued job.
type Job struct {
	ID          string
	Kind        string
	Attempt     uint32 // last attempt; the placement is Attempt+1
	Priority    int
	Constraints map[string]string // label k=v all required
	Order       uint64            // acceptance order (raft index), FIFO within a priority
	// Depth is how many placements per slot may wait on a node beyond
	// those it runs (prefetch): the job fits where the node's placements
	// of its kind are below Capacity(kind, Depth). Jobs of one kind share
	// one count per node whatever their depth, so a deep job placed
	// leaves less room for a shallow one in the same plan.
	Depth int
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
// Prefetch never overtakes: a job left unplaced although some eligible
// node matches it caps, on every node it matches, the depth of the jobs
// of its kind after it in that order. Without the cap a deeper job behind
// it would take the place it is waiting for (a later array of short
// tasks parked behind a node's slots ahead of a waiting job of higher
// priority).
//
// Cost is amortised O(1) per placement after O(nodes) set-up per distinct
// (kind, depth, constraints) group: nodes sit in buckets by free places,
// and a node whose free count fell through another group's placement (of
// the same kind: any depth) or a cap is moved down lazily when met. A
// group caps its nodes once per depth, O(nodes).
func Plan(nodes []Node, jobs []Job) ([]Placement, []Unplaced) {
	ns := append([]Node(nil), nodes...)
	sort.Slice(ns, func(a, b int) bool { return ns[a].ID < ns[b].ID })
	p := &planner{nodes: ns, used: map[string][]int{}, caps: map[string][]int{}, groups: map[string]*group{}}
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
		g := p.group(j.Kind, j.Depth, j.Constraints)
		n := g.pick(p, affinity(j.ID, ""))
		if n < 0 {
			g.capNodes(p)
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
	used   map[string][]int  // kind → placements held per node index (Running, then this plan's)
	caps   map[string][]int  // kind → the depth jobs may have per node index (noCap: any)
	groups map[string]*group // (kind, depth, constraints) → candidate buckets
}

const noCap = int(^uint(0) >> 1)

func (p *planner) capsOf(kind string) []int {
	c, ok := p.caps[kind]
	if !ok {
		c = make([]int, len(p.nodes))
		for i := range c {
			c[i] = noCap
		}
		p.caps[kind] = c
	}
	return c
}

// capacity is the places node i offers jobs of g.
func (p *planner) capacity(g *group, i int) int {
	return p.nodes[i].Capacity(g.kind, min(g.depth, p.capsOf(g.kind)[i]))
}

func (p *planner) usedOf(kind string) []int {
	u, ok := p.used[kind]
	if !ok {
		u = make([]int, len(p.nodes))
		for i := range p.nodes {
			u[i] = p.nodes[i].Running[kind]
		}
		p.used[kind] = u
	}
	return u
}

// group returns the candidate buckets for jobs of kind and depth with
// constraints.
func (p *planner) group(kind string, depth int, constraints map[string]string) *group {
	depth = max(depth, 0)
	key := kind + "\x00" + strconv.Itoa(depth) + "\x00" + constraintText(constraints)
	if g, ok := p.groups[key]; ok {
		return g
	}
	used := p.usedOf(kind)
	g := &group{kind: kind, depth: depth, capped: noCap, buckets: map[int][]int{}}
	for i := range p.nodes {
		n := &p.nodes[i]
		if !n.Eligible || n.Slots[kind] <= 0 || !Matches(n.Labels, constraints) {
			continue
		}
		g.matching++
		g.nodes = append(g.nodes, i)
		if f := p.capacity(g, i) - used[i]; f > 0 {
			g.buckets[f] = append(g.buckets[f], i)
			g.top = max(g.top, f)
		}
	}
	p.groups[key] = g
	return g
}

// capNodes caps the depth of later jobs of g's kind on every node g
// matches at g's depth: a job of g found no place.
func (g *group) capNodes(p *planner) {
	if g.matching == 0 || g.depth >= g.capped {
		return
	}
	g.capped = g.depth
	caps := p.capsOf(g.kind)
	for _, i := range g.nodes {
		caps[i] = min(caps[i], g.depth)
	}
}

// group buckets candidate node indices by their free places.
type group struct {
	kind     string
	depth    int
	matching int           // eligible nodes matching, busy or not
	nodes    []int         // their indices
	capped   int           // the depth this group last capped its nodes at
	buckets  map[int][]int // free places → node indices (may hold stale entries)
	top      int           // highest possibly non-empty bucket
}

// pick takes a place on a node with the most free places (choosing among
// them by h), counts it, and returns the node's index, or -1 when no
// candidate has room.
func (g *group) pick(p *planner, h uint64) int {
	used := p.usedOf(g.kind)
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
		if actual := p.capacity(g, n) - used[n]; actual != g.top {
			// Another group took places here, or a cap came: file it
			// where it now is.
			if actual > 0 {
				g.buckets[actual] = append(g.buckets[actual], n)
			}
			continue
		}
		used[n]++
		if f := p.capacity(g, n) - used[n]; f > 0 {
			g.buckets[f] = append(g.buckets[f], n)
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
