package node

import "fmt"

// takesNoWork says why this node takes no new work ("" while it does): an
// operator drained it ('palyra node drain') or made it ineligible ('node
// eligibility --disable'). Its worker then hands back what was placed on
// it ahead of its slots and has not started (worker.Config.HandBack): the
// scheduler places those jobs elsewhere at once, instead of the drained
// node starting them one by one as its running work ends.
func (n *Node) takesNoWork() string {
	m, ok := n.store.State().Member("node", n.state.NodeID)
	switch {
	case !ok:
		return ""
	case m.Draining:
		return fmt.Sprintf("node %s is draining", n.state.NodeID)
	case m.Ineligible:
		return fmt.Sprintf("node %s is not eligible for new work", n.state.NodeID)
	}
	return ""
}
