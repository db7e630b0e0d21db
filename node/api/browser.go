package api

import (
	"context"
	"fmt"
	"strings"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity/policy"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/runtime/browser"
)

// maxArtifactDownload bounds one GetArtifact answer.
const maxArtifactDownload = 64 << 20

// submitBrowser checks a browser job's script and grants, then commits it.
// Every host the job may reach is a capability grant the caller's policy
// must allow (grant.http on Grant::"http:HOST"); private targets need
// their own grant (Grant::"http:private").
func (js jobService) submitBrowser(ctx context.Context, m *palyrav1.SubmitJobRequest) (*connect.Response[palyrav1.SubmitJobResponse], error) {
	s := js.s
	if len(m.WasmModule) > 0 || m.ModuleSha256 != "" {
		return nil, invalid("a job is either a wasm module or a browser script, not both", "drop --wasm or --browser")
	}
	if m.Deterministic {
		return nil, invalid("--deterministic is for wasm jobs: a browser runs on real clocks and the network", "drop --deterministic")
	}
	if _, err := browser.ParseScript(m.BrowserScript); err != nil {
		return nil, invalid(err.Error(), "the format, with examples: runtime/browser/SCRIPT.md; as JSON Schema: 'palyra job submit --browser-schema'")
	}
	hosts, err := s.checkHTTPGrants(ctx, m.AllowHosts, m.AllowPrivate)
	if err != nil {
		return nil, err
	}
	m.AllowHosts = hosts
	return js.commitSubmit(ctx, m, "")
}

// checkHTTPGrants checks the hosts a browser job or session asks to reach
// against the caller's policy: each host, in canonical form
// (canonicalHosts), is a grant.http on Grant::"HOST", private targets one
// on Grant::"private". It returns the canonical hosts, which the job or
// session keeps.
func (s *Server) checkHTTPGrants(ctx context.Context, hosts []string, private bool) ([]string, error) {
	if len(hosts) > 64 {
		return nil, invalid("too many --allow-host entries", "use at most 64")
	}
	hosts, err := canonicalHosts(hosts)
	if err != nil {
		return nil, err
	}
	for _, h := range hosts {
		if err := s.authz.Check(ctx, policy.ActionGrantHTTP, policy.GrantResource(policy.GrantHTTP, h), map[string]any{"grant_host": h}); err != nil {
			return nil, err
		}
	}
	if private {
		if err := s.authz.Check(ctx, policy.ActionGrantHTTP, policy.GrantResource(policy.GrantHTTP, "private"), map[string]any{"grant_host": "private"}); err != nil {
			return nil, err
		}
	}
	return hosts, nil
}

func (js jobService) GetArtifact(ctx context.Context, req *connect.Request[palyrav1.GetArtifactRequest]) (*connect.Response[palyrav1.GetArtifactResponse], error) {
	j, err := js.authorizedJob(ctx, policy.ActionJobRead, req.Msg.JobId)
	if err != nil {
		return nil, err
	}
	var art *consensus.Artifact
	var names []string
	for i := range j.Artifacts {
		names = append(names, j.Artifacts[i].Name)
		if j.Artifacts[i].Name == req.Msg.Name {
			art = &j.Artifacts[i]
		}
	}
	if art == nil {
		hint := "this job produced no artifacts"
		if len(names) > 0 {
			hint = "its artifacts are: " + strings.Join(names, ", ")
		}
		return nil, apiError(connect.CodeNotFound, "not_found", fmt.Sprintf("job %s has no artifact %q", j.ID, req.Msg.Name), hint)
	}
	if art.Size > maxArtifactDownload {
		return nil, apiError(connect.CodeResourceExhausted, "too_large", "artifact is larger than one download", "")
	}
	data, err := js.s.Artifacts.Get(art.SHA256)
	if err != nil {
		return nil, apiError(connect.CodeUnavailable, "unavailable", fmt.Sprintf("artifact %s is on no reachable node: %v", art.Name, err), "retry when the nodes that ran the job are up")
	}
	return connect.NewResponse(&palyrav1.GetArtifactResponse{
		Artifact: &palyrav1.Artifact{Name: art.Name, MediaType: art.MediaType, Sha256: art.SHA256, Size: art.Size}, Data: data}), nil
}
