package policy

import (
	"fmt"
	"strings"
)

// Decision is the answer to one Request.
type Decision struct {
	Allow bool
	// Reasons are the IDs of the policies that determined the decision: the
	// permits that allowed it, or the forbids that denied it. A deny with no
	// reasons means no policy permitted the request.
	Reasons []string
	// Errors are policies that failed to evaluate and problems with the
	// request itself.
	Errors []string

	subject string // "device:d-1 to job.submit on Cluster::default"
	lines   []int  // source line of each reason
}

// Explain describes d in one line, for logs and error messages:
//
//	allow by policy operators
//	deny by policy forbid-submit (line 3), which forbids device:d-1 to job.submit on Cluster::default
//	deny: no policy permits device:d-1 to job.submit on Cluster::default
func Explain(d Decision) string {
	var b strings.Builder
	switch {
	case d.Allow:
		b.WriteString("allow by " + plural(len(d.Reasons)) + " " + strings.Join(d.Reasons, ", "))
	case len(d.Reasons) > 0:
		parts := make([]string, len(d.Reasons))
		for i, id := range d.Reasons {
			parts[i] = id
			if i < len(d.lines) && d.lines[i] > 0 {
				parts[i] = fmt.Sprintf("%s (line %d)", id, d.lines[i])
			}
		}
		b.WriteString("deny by " + plural(len(d.Reasons)) + " " + strings.Join(parts, ", "))
		if d.subject != "" {
			// Who was refused what: the caller may not know which of its
			// credentials or grants the forbid matched.
			b.WriteString(", which forbids " + d.subject)
		}
	case d.subject != "":
		b.WriteString("deny: no policy permits " + d.subject)
	default:
		b.WriteString("deny: no policy permits the request")
	}
	if len(d.Errors) > 0 {
		b.WriteString("; errors: " + strings.Join(d.Errors, "; "))
	}
	return b.String()
}

func plural(n int) string {
	if n == 1 {
		return "policy"
	}
	return "policies"
}
