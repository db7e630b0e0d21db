// Package policy authorises every Palyra API call with Cedar policies
// (github.com/cedar-policy/cedar-go), deny by default.
//
// A request is (principal, action, resource, context):
//
//   - Principal: Palyra::Node::"n-1a2b3c4d" or Palyra::Device::"d-1a2b3c4d",
//     built from the caller's certificate and the registry, with attributes
//     kind ("node"/"device"), id, ref ("device:d-…", the form Job.submitter
//     uses), operator (an admin device; false for nodes) and name (may be "").
//     A node's labels are Cedar entity tags, read with
//     principal.hasTag("zone") && principal.getTag("zone") == "eu";
//     devices carry none, so policies name devices by id:
//     ["d-1a2b3c4d"].contains(principal.id).
//   - Action: Palyra::Action::"job.submit" and the other Action* constants,
//     grouped into Palyra::Action::"admin", "node_work", "jobs" and "grants"
//     so policies can say action in Palyra::Action::"admin".
//   - Resource: Palyra::Cluster::"default" for cluster-wide calls,
//     Palyra::Job::"<id>" with submitter and kind, Palyra::Grant::"<host, key
//     or prefix>" with type ("http", "secret", "kv") for capability grants.
//   - Context: a free-form record passed through; the schema names the keys
//     policies may read (grant_host, grant_key, grant_prefix, job_kind,
//     target_node), all optional.
//
// Parse checks syntax and validates every policy against the embedded schema
// (schema.cedarschema), so a policy that names an unknown action, attribute or
// entity type is refused with its line and a suggested fix before it is
// stored. An Engine holds the live Set, answers Authorize concurrently and
// takes a new Set with Swap. DefaultPolicy is the policy a new cluster starts
// with (default.cedar).
package policy
