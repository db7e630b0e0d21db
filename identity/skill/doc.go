// Package skill reads, writes, signs and audits skill packages: the
// signed ZIP files (.palyra-skill) that carry reusable tools as wasm
// modules with a manifest (skill.toml), a per-file sha256 list
// (SHA256SUMS) and an Ed25519 publisher signature (signature.json).
//
// It is pure: bytes in, checked values out. Nothing here talks to a
// cluster; the CLI packs and signs with it, and a node verifies and audits
// with it before a package reaches the replicated registry. See DESIGN.md.
package skill
